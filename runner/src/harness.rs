//! The checks as libtest-mimic trials: run, print facts, record the outcome.

use std::io::Write;
use std::sync::Arc;

use libtest_mimic::{Completion, Failed, Trial};
use serde_json::Value;

use crate::checks::{Check, Outcome, Verdict, CHECKS, ISOLATION_CHECK, LINT_CHECK, PACKAGE_CHECKS};
use crate::session::Session;

/// Where a trial prints what it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactsOutput {
    /// stdout, next to libtest's lines.
    Stdout,
    /// stderr, so that `--format json` keeps stdout machine-readable.
    Stderr,
}

/// Longer lists are summarised on the terminal; the report has them in full.
const MAX_SHOWN: usize = 200;

fn print(name: &str, outcome: &Outcome, to: FactsOutput) {
    let mut text = format!("{name}: {}\n", outcome.message);
    for (key, value) in &outcome.facts {
        let shown = match value {
            Value::Null => continue,
            Value::Array(items) if value.to_string().len() > MAX_SHOWN => {
                format!("[{} entries, in the --report JSON]", items.len())
            }
            _ => value.to_string(),
        };
        text.push_str(&format!("{name}:   {key} = {shown}\n"));
    }
    // One write per check so parallel trials do not interleave their lines.
    let _ = match to {
        FactsOutput::Stdout => std::io::stdout().lock().write_all(text.as_bytes()),
        FactsOutput::Stderr => std::io::stderr().lock().write_all(text.as_bytes()),
    };
}

/// One trial per check, sharing `session`; `lint::elf` only when `--lint` paths are given,
/// the `package::*` checks only with `--package`; only `isolation::no_gpu` with
/// `--expect-no-gpu`.
pub fn trials(session: &Arc<Session>, facts_output: FactsOutput) -> Vec<Trial> {
    let lint = (!session.options.lint_paths.is_empty()).then_some(&LINT_CHECK);
    let checks: Vec<&Check> = if session.options.expect_no_gpu {
        vec![&ISOLATION_CHECK]
    } else {
        let package: &[Check] = if session.options.packages.is_empty() {
            &[]
        } else {
            PACKAGE_CHECKS
        };
        CHECKS.iter().chain(lint).chain(package).collect()
    };
    checks
        .into_iter()
        .map(|check| {
            let session = Arc::clone(session);
            Trial::ignorable_test(check.name, move || {
                let outcome = (check.run)(&session);
                print(check.name, &outcome, facts_output);
                let result = match outcome.verdict {
                    Verdict::Pass => Ok(Completion::Completed),
                    Verdict::Skipped => Ok(Completion::ignored_with(&outcome.message)),
                    Verdict::Fail => Err(Failed::from(match &outcome.detail {
                        Some(detail) => format!("{}\n{detail}", outcome.message),
                        None => outcome.message.clone(),
                    })),
                };
                session.record(check.name, outcome);
                result
            })
        })
        .collect()
}
