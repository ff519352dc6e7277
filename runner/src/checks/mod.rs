//! The checks, one file per group, and [`CHECKS`], the one list of them. Each returns an
//! [`Outcome`] (see [`crate::check`]).

use crate::check::RunsWhen::{Always, ExpectNoGpu, WithLint, WithPackage};
use crate::check::{Check, Outcome, RunsWhen};
use crate::session::Session;

pub mod devices;
pub mod driver;
pub mod entry_points;
mod isolation;
pub mod kernel;
pub mod lint;
pub mod mig;
pub mod nvml;
pub mod package;
pub mod package_driver;
pub mod runtime;

/// Every check, in the order they run and are listed; [`Check::runs_when`] says which runs
/// include it. `--help`, `tests-gpu/`'s groups and the README's table follow this list (the
/// last two are tested against it).
pub const CHECKS: &[Check] = &[
    check("devices::nodes", Always, devices::nodes),
    check("devices::features", Always, devices::features),
    check("driver::library", Always, driver::library),
    check("driver::version", Always, driver::version),
    check("driver::entry_points", Always, entry_points::probe),
    check("runtime::compatibility", Always, runtime::compatibility),
    check("runtime::entry_points", Always, runtime::entry_points),
    check("kernel::saxpy", Always, kernel::saxpy),
    check("nvml::consistency", Always, nvml::consistency),
    check("mig::instance", Always, mig::instance),
    check("lint::elf", WithLint, lint::elf),
    check("package::gpu_code", WithPackage, package::gpu_code),
    check("package::runtimes", WithPackage, package::runtimes),
    check("package::driver", WithPackage, package_driver::driver),
    check("isolation::no_gpu", ExpectNoGpu, isolation::no_gpu),
];

const fn check(
    name: &'static str,
    runs_when: RunsWhen,
    run: fn(&Session) -> Result<Outcome, Outcome>,
) -> Check {
    Check {
        name,
        runs_when,
        run,
    }
}

/// The checks of a run with these flags, in [`CHECKS`]' order: only `isolation::no_gpu` with
/// `--expect-no-gpu`; else every [`RunsWhen::Always`] check, `lint::elf` with `--lint` paths and
/// the `package::*` checks with `--package`.
pub(crate) fn selected(
    lint: bool,
    package: bool,
    expect_no_gpu: bool,
) -> impl Iterator<Item = &'static Check> {
    CHECKS.iter().filter(move |check| match check.runs_when {
        RunsWhen::ExpectNoGpu => expect_no_gpu,
        _ if expect_no_gpu => false,
        RunsWhen::Always => true,
        RunsWhen::WithLint => lint,
        RunsWhen::WithPackage => package,
    })
}

#[cfg(test)]
mod tests {
    //! The other copies of the check list (the README's tables, `tests-gpu/`'s groups) name
    //! exactly the checks of [`CHECKS`].

    use super::*;
    use std::path::Path;

    fn read(relative: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    }

    /// Fails naming what `file` lacks and what it has that [`CHECKS`] does not.
    fn assert_same(file: &str, what: &str, found: &[String], wanted: &[&str]) {
        let missing: Vec<&&str> = wanted
            .iter()
            .filter(|name| !found.iter().any(|f| f == *name))
            .collect();
        let extra: Vec<&String> = found
            .iter()
            .filter(|name| !wanted.contains(&name.as_str()))
            .collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{file}: {what} disagrees with CHECKS (runner/src/checks/mod.rs): missing {missing:?}, \
             not a check {extra:?}"
        );
        assert_eq!(found, wanted, "{file}: {what} is not in CHECKS' order");
    }

    /// The first column of the table under the `## {heading}` of `text`, without backticks.
    fn table_names(text: &str, heading: &str) -> Vec<String> {
        let section = text
            .split("\n## ")
            .find(|section| section.starts_with(heading))
            .unwrap_or_else(|| panic!("no section ## {heading}"));
        section
            .lines()
            .filter_map(|line| line.strip_prefix("| `"))
            .filter_map(|rest| rest.split_once('`'))
            .map(|(name, _)| name.to_owned())
            .collect()
    }

    fn names(when: impl Fn(RunsWhen) -> bool) -> Vec<&'static str> {
        CHECKS
            .iter()
            .filter(|check| when(check.runs_when))
            .map(|check| check.name)
            .collect()
    }

    #[test]
    fn the_readme_checks_table_names_every_check() {
        let readme = read("README.md");
        let found = table_names(&readme, "Checks");
        assert_same(
            "runner/README.md",
            "the ## Checks table",
            &found,
            &names(|_| true),
        );
    }

    #[test]
    fn the_readme_real_driver_table_names_every_check_of_a_default_run() {
        let readme = read("README.md");
        let found = table_names(&readme, "Against the real NVIDIA userspace");
        let wanted = names(|when| when == RunsWhen::Always);
        assert_same(
            "runner/README.md",
            "the ## Against the real NVIDIA userspace table",
            &found,
            &wanted,
        );
    }

    /// `groups = { name = "name::"; ... };` in `tests-gpu/default.nix`: one derivation per
    /// group of the checks a default run runs, each filtering on its own group.
    #[test]
    fn the_tests_gpu_groups_are_the_groups_of_a_default_run() {
        let nix = read("../tests-gpu/default.nix");
        let block = nix
            .split_once("groups = {")
            .and_then(|(_, rest)| rest.split_once("};"))
            .map(|(block, _)| block)
            .expect("tests-gpu/default.nix has a `groups = { ... };` attribute set");
        let mut found = Vec::new();
        for line in block.lines().map(str::trim).filter(|line| !line.is_empty()) {
            let (name, filter) = line
                .trim_end_matches(';')
                .split_once('=')
                .unwrap_or_else(|| {
                    panic!(
                        "tests-gpu/default.nix: a group that is not `name = \"filter\";`: {line}"
                    )
                });
            let (name, filter) = (name.trim(), filter.trim().trim_matches('"'));
            assert_eq!(
                filter,
                format!("{name}::"),
                "tests-gpu/default.nix: group {name} must filter on its own group"
            );
            found.push(name.to_owned());
        }
        let mut wanted: Vec<&str> = Vec::new();
        for check in CHECKS.iter().filter(|c| c.runs_when == RunsWhen::Always) {
            if !wanted.contains(&check.group()) {
                wanted.push(check.group());
            }
        }
        assert_same("tests-gpu/default.nix", "groups", &found, &wanted);
    }

    #[test]
    fn a_run_selects_its_checks_by_flag() {
        let names = |lint, package, no_gpu| -> Vec<&str> {
            selected(lint, package, no_gpu).map(|c| c.name).collect()
        };
        assert_eq!(names(false, false, true), ["isolation::no_gpu"]);
        assert_eq!(names(true, true, true), ["isolation::no_gpu"]);
        let plain = names(false, false, false);
        assert_eq!(plain.len(), 10);
        assert!(!plain.contains(&"lint::elf"));
        let all = names(true, true, false);
        assert_eq!(all.len(), CHECKS.len() - 1);
        assert!(all.contains(&"lint::elf") && all.contains(&"package::driver"));
    }

    /// The layers point one way: the checks read the session, the options and the facts;
    /// none of those (nor the driver wrapper) names a check.
    #[test]
    fn nothing_below_the_checks_imports_them() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = vec![
            src.join("options.rs"),
            src.join("session.rs"),
            src.join("check.rs"),
        ];
        let mut dirs = vec![src.join("facts"), src.join("cuda")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                match path.is_dir() {
                    true => dirs.push(path),
                    false => files.push(path),
                }
            }
        }
        for file in files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        {
            let text = std::fs::read_to_string(file).unwrap();
            let mut code = text.lines().filter(|l| !l.trim_start().starts_with("//"));
            assert!(
                !code.any(|line| line.contains("crate::checks")),
                "{} imports a check: move what it needs below the checks",
                file.display()
            );
        }
    }

    #[test]
    fn names_are_unique_group_and_check() {
        for (i, check) in CHECKS.iter().enumerate() {
            assert!(check.name.split_once("::").is_some(), "{}", check.name);
            assert!(
                CHECKS[..i].iter().all(|c| c.name != check.name),
                "{} twice",
                check.name
            );
        }
    }
}
