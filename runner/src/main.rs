//! `cuda-sandbox-check`: argv → checks → libtest output, JSON report, exit status; or
//! `cuda-sandbox-check lint PATH…` → the ELF lint's findings; `features` → this builder's
//! Nix system features; `inventory` → the GPU inventory the hook reads; `container-binds` →
//! the `systemd-nspawn` binds that give a NixOS test container the build's GPU.

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{FromArgMatches, Parser};
use cuda_sandbox_check::check::RunsWhen::{Always, ExpectNoGpu, WithLint, WithPackage};
use cuda_sandbox_check::checks::{self, CHECKS};
use cuda_sandbox_check::facts::confirm::{confirm, ConfirmCli};
use cuda_sandbox_check::facts::container_binds;
use cuda_sandbox_check::facts::elf_lint;
use cuda_sandbox_check::facts::expectations::ManifestState;
use cuda_sandbox_check::facts::features;
use cuda_sandbox_check::facts::inventory;
use cuda_sandbox_check::harness::{self, FactsOutput, Outcomes};
use cuda_sandbox_check::options::{Cli, LintCli};
use cuda_sandbox_check::output;
use cuda_sandbox_check::report::Report;
use cuda_sandbox_check::session::Session;
use libtest_mimic::FormatSetting;

/// Parses `args`, the words after `cuda-sandbox-check COMMAND`; exits with clap's message on
/// bad flags.
fn parse_after<C: Parser>(command: &str, args: impl Iterator<Item = String>) -> C {
    C::parse_from(std::iter::once(format!("cuda-sandbox-check {command}")).chain(args))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some((command, rest)) = args.split_first() {
        let rest = rest.iter().cloned();
        let result = match command.as_str() {
            "lint" => lint_main(parse_after(command, rest)),
            "gpu-confirm" => confirm_main(&parse_after(command, rest)),
            "features" => features::run(&parse_after(command, rest)),
            "inventory" => inventory::run(&parse_after(command, rest)),
            "container-binds" => container_binds::run(&parse_after(command, rest)),
            _ => return run_checks(),
        };
        // Why a command failed, on stderr, with exit status 2 (bad input, nothing to judge).
        return result.unwrap_or_else(|why| {
            output::error_line(format_args!("cuda-sandbox-check {command}: {why}"));
            ExitCode::from(2)
        });
    }
    run_checks()
}

/// The check run: the flags, the checks as libtest trials, the report and the exit status.
fn run_checks() -> ExitCode {
    // Exits with clap's message on bad flags, `--help`, `--version`.
    let matches = Cli::command_line().after_help(after_help()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let facts_output = match cli.libtest.format {
        Some(FormatSetting::Json) => FactsOutput::Stderr,
        _ => FactsOutput::Stdout,
    };
    let session = Arc::new(Session::new(cli.options));
    let outcomes = Arc::new(Outcomes::default());
    let trials = harness::trials(&session, &outcomes, facts_output);
    let conclusion = {
        let _shield = output::ShieldedStdout::new();
        libtest_mimic::run(&cli.libtest, trials)
    };
    if cli.libtest.list {
        return ExitCode::SUCCESS;
    }
    let ran = conclusion.num_passed + conclusion.num_failed + conclusion.num_ignored;
    if ran == 0 && !session.options.allow_no_checks {
        output::error_line(
            "cuda-sandbox-check: the filter selects no check of this run, and nothing checked is \
             not a pass (--list names them; --allow-no-checks accepts it)",
        );
        return ExitCode::from(2);
    }
    if let Some(path) = session.options.report_path(|key| std::env::var(key).ok()) {
        if let Err(error) = Report::new(&session, outcomes.all(), &conclusion).write(&path) {
            output::error_line(format_args!("cuda-sandbox-check: {error}"));
            return ExitCode::from(101);
        }
    }
    if !conclusion.has_failed() && outcomes.all().values().any(|o| o.undecided) {
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
package::gpu_code could not judge a file (a GPU, ISA or driver beyond the rules' tables), 2 bad
usage, or a filter that selects no check (unless --allow-no-checks).
The hook's manifest (/run/cuda-sandbox/manifest.json) is read when present: the loaded
driver must be the one the hook chose.
devices::features reads the build's requiredSystemFeatures (with structured attrs, its
.attrs.json); outside a build, set requiredSystemFeatures=\"cuda cuda-sm-90a\" by hand.
As a Nix builder: builder = <this program>; args = [ ... ]; the report goes to $out.";

/// `Checks: a, b; c with --lint; d, e with --package; f alone with --expect-no-gpu.`, from
/// [`CHECKS`], wrapped at 94 columns.
fn checks_help() -> String {
    let mut parts = Vec::new();
    for when in [Always, WithLint, WithPackage, ExpectNoGpu] {
        let names: Vec<&str> = CHECKS
            .iter()
            .filter(|check| check.runs_when == when)
            .map(|check| check.name)
            .collect();
        let names = names.join(", ");
        parts.push(match when {
            Always => names,
            WithLint => format!("{names} with --lint"),
            WithPackage => format!("{names} with --package"),
            ExpectNoGpu => format!("{names} alone with --expect-no-gpu"),
        });
    }
    let mut text = String::new();
    for word in format!("Checks: {}.", parts.join("; ")).split(' ') {
        // By the width of the last line so far: a word that would take it past 94 starts another.
        match text.len() - text.rfind('\n').map_or(0, |i| i + 1) {
            0 => {}
            width if width + 1 + word.len() > 94 => text.push('\n'),
            _ => text.push(' '),
        }
        text.push_str(word);
    }
    text
}

/// What `--help` lists after the flags: the checks, from [`CHECKS`], then [`AFTER_HELP`].
fn after_help() -> String {
    format!("{}\n{AFTER_HELP}", checks_help())
}

/// `gpu-confirm`: the report as JSON; 0 every prediction held, 101 one did not, 2 no GPU.
fn confirm_main(cli: &ConfirmCli) -> Result<ExitCode, Box<dyn Error>> {
    let report = confirm(cli)?;
    output::json(&report)?;
    Ok(ExitCode::from(report.status()))
}

/// Exit status of a check run in which nothing failed but `package::gpu_code` could not judge
/// a file.
const UNDECIDED: u8 = 3;

/// `lint`: the report (text or JSON) on stdout, a path that cannot be judged on stderr, and
/// the answer as the exit status ([`elf_lint::LintStatus`]); 2 for unusable flags or manifest.
fn lint_main(cli: LintCli) -> Result<ExitCode, Box<dyn Error>> {
    let manifest = ManifestState::load(cli.manifest.as_deref(), cli.no_manifest);
    if let Some(why) = manifest.broken() {
        return Err(why.into());
    }
    let config = checks::lint::config(&cli.lint, &manifest)?;
    let report = elf_lint::lint(&cli.paths, &config);
    for finding in report.cannot_judge() {
        output::error_line(format_args!("cuda-sandbox-check lint: {finding}"));
    }
    if cli.json {
        output::json(&report)
    } else {
        output::to_stdout(|out| report.write_text(out))
    }
    .map_err(|why| format!("writing the report: {why}"))?;
    Ok(ExitCode::from(report.status().code()))
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
