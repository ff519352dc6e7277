//! `cuda-sandbox-check`: argv → checks → libtest output, JSON report, exit status.

use std::process::ExitCode;
use std::sync::Arc;

use cuda_sandbox_check::cli::Cli;
use cuda_sandbox_check::harness::{self, FactsOutput};
use cuda_sandbox_check::report::{Report, Summary};
use cuda_sandbox_check::session::Session;
use libtest_mimic::FormatSetting;

fn main() -> ExitCode {
    let cli = Cli::from_env();
    let report_path = cli.options.report_path(|key| std::env::var(key).ok());
    let facts_output = match cli.libtest.format {
        Some(FormatSetting::Json) => FactsOutput::Stderr,
        _ => FactsOutput::Stdout,
    };
    let session = Arc::new(Session::new(cli.options));
    let conclusion = libtest_mimic::run(&cli.libtest, harness::trials(&session, facts_output));
    if cli.libtest.list {
        return ExitCode::SUCCESS;
    }
    if let Some(path) = report_path {
        let report = Report::new(
            &session.options,
            session.outcomes(),
            Summary::of(&conclusion),
        );
        if let Err(error) = report.write(&path) {
            eprintln!("cuda-sandbox-check: {error}");
            return ExitCode::from(101);
        }
    }
    conclusion.exit_code()
}
