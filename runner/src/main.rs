//! `cuda-sandbox-check`: argv → checks → libtest output, JSON report, exit status; or
//! `cuda-sandbox-check lint PATH…` → the ELF lint's findings; `features` → this builder's
//! Nix system features; `inventory` → the GPU inventory the hook reads; `container-binds` →
//! the `systemd-nspawn` binds that give a NixOS test container the build's GPU.

use std::process::ExitCode;
use std::sync::Arc;

use cuda_sandbox_check::check::RunsWhen;
use cuda_sandbox_check::checks::options::{Cli, LintCli};
use cuda_sandbox_check::checks::{self, CHECKS};
use cuda_sandbox_check::facts::confirm::{confirm, ConfirmCli, Confirmed};
use cuda_sandbox_check::facts::container_binds::{self, ContainerBindsCli};
use cuda_sandbox_check::facts::elf_lint;
use cuda_sandbox_check::facts::expectations::ManifestState;
use cuda_sandbox_check::facts::features::{self, FeaturesCli};
use cuda_sandbox_check::facts::inventory::{self, InventoryCli};
use cuda_sandbox_check::harness::{self, FactsOutput, Outcomes};
use cuda_sandbox_check::report::{Report, Summary};
use cuda_sandbox_check::session::Session;
use libtest_mimic::FormatSetting;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("lint") {
        return lint_main(LintCli::parse_after(args.skip(1)));
    }
    if args.peek().map(String::as_str) == Some("gpu-confirm") {
        return confirm_main(&ConfirmCli::parse_after(args.skip(1)));
    }
    if args.peek().map(String::as_str) == Some("features") {
        return features::run(&FeaturesCli::parse_after(args.skip(1)));
    }
    if args.peek().map(String::as_str) == Some("inventory") {
        return inventory::run(&InventoryCli::parse_after(args.skip(1)));
    }
    if args.peek().map(String::as_str) == Some("container-binds") {
        return container_binds::run(&ContainerBindsCli::parse_after(args.skip(1)));
    }
    let cli = Cli::from_env(after_help());
    let report_path = cli.options.report_path(|key| std::env::var(key).ok());
    let facts_output = match cli.libtest.format {
        Some(FormatSetting::Json) => FactsOutput::Stderr,
        _ => FactsOutput::Stdout,
    };
    let session = Arc::new(Session::new(cli.options));
    let outcomes = Arc::new(Outcomes::default());
    let trials = harness::trials(&session, &outcomes, facts_output);
    let conclusion = libtest_mimic::run(&cli.libtest, trials);
    if cli.libtest.list {
        return ExitCode::SUCCESS;
    }
    if let Some(path) = report_path {
        let report = Report::new(
            &session.options,
            &session.manifest,
            outcomes.all(),
            Summary::of(&conclusion),
        );
        if let Err(error) = report.write(&path) {
            eprintln!("cuda-sandbox-check: {error}");
            return ExitCode::from(101);
        }
    }
    let undecided = outcomes.all().values().any(|o| o.undecided);
    if !conclusion.has_failed() && undecided {
        return ExitCode::from(UNDECIDED);
    }
    conclusion.exit_code()
}

/// Listed after the flags in `--help`, after the list of checks.
const AFTER_HELP: &str = "\
package::gpu_code judges the package's fat binaries against every GPU the driver reports and
the loaded driver's CUDA version; without a GPU, against --target/--driver-cuda, else it is
skipped (it never passes without a target).
libtest flags (--list, --exact, FILTER, --skip, --format, --test-threads, ...) behave as in
`cargo test`. Exit status: 0 all passed (or skipped), 101 a check failed, 3 none failed but
package::gpu_code could not judge a file (a GPU, ISA or driver beyond the rules' tables).
The hook's manifest (/run/cuda-sandbox/manifest.json) is read when present: the loaded
driver must be the one the hook chose.
devices::features reads the build's requiredSystemFeatures (with structured attrs, its
.attrs.json); outside a build, set requiredSystemFeatures=\"cuda cuda-sm-90a\" by hand.
As a Nix builder: builder = <this program>; args = [ ... ]; the report goes to $out.
ELF lint alone: cuda-sandbox-check lint PATH... (see lint --help).
This builder's Nix system features: cuda-sandbox-check features (see features --help).
The GPU inventory the hook reads: cuda-sandbox-check inventory (see inventory --help).
A NixOS test container's binds: cuda-sandbox-check container-binds (see its --help).";

/// `Checks: a, b; c with --lint; d, e with --package; f alone with --expect-no-gpu.`, from
/// [`CHECKS`], wrapped at 94 columns.
fn checks_help() -> String {
    let mut parts = Vec::new();
    for when in [
        RunsWhen::Always,
        RunsWhen::WithLint,
        RunsWhen::WithPackage,
        RunsWhen::ExpectNoGpu,
    ] {
        let names: Vec<&str> = CHECKS
            .iter()
            .filter(|check| check.runs_when == when)
            .map(|check| check.name)
            .collect();
        let names = names.join(", ");
        parts.push(match when.flag() {
            None => names,
            Some(flag @ "--expect-no-gpu") => format!("{names} alone with {flag}"),
            Some(flag) => format!("{names} with {flag}"),
        });
    }
    let mut text = String::new();
    let mut line = String::new();
    for word in format!("Checks: {}.", parts.join("; ")).split(' ') {
        if !line.is_empty() && line.len() + 1 + word.len() > 94 {
            text.push_str(&line);
            text.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    text + &line
}

/// What `--help` lists after the flags: the checks, from [`CHECKS`], then [`AFTER_HELP`].
fn after_help() -> String {
    format!("{}\n{AFTER_HELP}", checks_help())
}

/// `gpu-confirm`: the report as JSON; 0 every prediction held, 101 one did not, 2 no GPU.
fn confirm_main(cli: &ConfirmCli) -> ExitCode {
    match confirm(cli) {
        Ok((report, found)) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&report).expect("plain data")
            );
            match found {
                Confirmed::Held => ExitCode::SUCCESS,
                Confirmed::NotBorneOut => ExitCode::from(101),
                Confirmed::NoGpu => ExitCode::from(2),
            }
        }
        Err(why) => {
            eprintln!("cuda-sandbox-check gpu-confirm: {why}");
            ExitCode::from(2)
        }
    }
}

/// Writes `value` to stdout as pretty JSON and a newline, streamed through a buffer: a
/// library's listing runs to megabytes (cuFFT's: 12 MB), and no `String` of it is built first.
fn print_json(value: &impl serde::Serialize) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    cuda_sandbox_check::pretty_json::to_writer_pretty(&mut out, value)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Exit status of a run in which nothing failed but some file could not be judged (`lint`:
/// only `gpu-code-unknown` findings; checks: an undecided `package::gpu_code`).
const UNDECIDED: u8 = 3;

/// `lint`: one line per finding, then a summary; 0 clean, 101 findings, 3 only files the
/// rules cannot judge, 2 unusable input.
fn lint_main(cli: LintCli) -> ExitCode {
    let manifest = ManifestState::load(cli.manifest.as_deref(), cli.no_manifest);
    if let Some(why) = manifest.broken() {
        eprintln!("cuda-sandbox-check lint: {why}");
        return ExitCode::from(2);
    }
    let config = match checks::lint::config(&cli.lint, &manifest) {
        Ok(config) => config,
        Err(why) => {
            eprintln!("cuda-sandbox-check lint: {why}");
            return ExitCode::from(2);
        }
    };
    let report = elf_lint::lint(&cli.paths, &config);
    if cli.json {
        if let Err(why) = print_json(&report) {
            eprintln!("cuda-sandbox-check lint: writing the report: {why}");
            return ExitCode::from(2);
        }
    } else {
        // One line per file and target first: the answer and its reason.
        for code in &report.gpu_code {
            let name = code.file.file_name().unwrap_or(code.file.as_os_str());
            if code.verdicts.is_empty() {
                println!("{}: {}", name.to_string_lossy(), code.summary);
            }
            for v in &code.verdicts {
                println!("{}: {}", name.to_string_lossy(), v.reason);
            }
        }
        for code in &report.gpu_code {
            println!("gpu code: {}: {}", code.file.display(), code.summary);
        }
        for runtime in &report.cuda_runtimes {
            println!(
                "cuda runtime: {} ({}, {})",
                runtime.file.display(),
                runtime.form.name(),
                runtime.version.as_deref().unwrap_or("version unknown")
            );
        }
        for stub in &report.stub_libcuda {
            println!("stub libcuda: {stub}");
        }
        for finding in &report.findings {
            println!("{finding}");
        }
        println!("lint: {}", report.summary());
    }
    if report.findings.is_empty() {
        ExitCode::SUCCESS
    } else if report.only_unknowns() {
        ExitCode::from(UNDECIDED)
    } else {
        ExitCode::from(101)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_every_check_once_with_the_flag_that_runs_it() {
        let help = Cli::command_line()
            .after_help(after_help())
            .render_long_help()
            .to_string();
        let checks = checks_help();
        assert!(help.contains(&checks), "--help lacks the checks:\n{help}");
        for check in CHECKS {
            assert_eq!(
                checks.matches(check.name).count(),
                1,
                "{} is not named exactly once in --help's checks:\n{checks}",
                check.name
            );
        }
        assert!(checks.lines().all(|line| line.len() <= 94), "{checks}");
        let checks = checks.replace('\n', " ");
        assert!(
            checks.starts_with("Checks: devices::nodes, devices::features, driver::library,"),
            "{checks}"
        );
        assert!(checks.contains("lint::elf with --lint;"), "{checks}");
        assert!(
            checks.contains("package::driver with --package;"),
            "{checks}"
        );
        assert!(
            checks.ends_with("isolation::no_gpu alone with --expect-no-gpu."),
            "{checks}"
        );
    }
}
