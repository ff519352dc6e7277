//! The checks as libtest-mimic trials: run, print facts, record the outcome.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use libtest_mimic::{Completion, Failed, Trial};
use serde_json::Value;

use crate::check::{Outcome, Verdict};
use crate::checks;
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

/// Every outcome of one run, by check name, for the report.
#[derive(Debug, Default)]
pub struct Outcomes(Mutex<BTreeMap<String, Outcome>>);

impl Outcomes {
    /// Every recorded outcome, by check name.
    pub fn all(&self) -> BTreeMap<String, Outcome> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// One trial per check of this run ([`checks::selected`]), sharing `session`; each records its
/// outcome in `outcomes`.
pub fn trials(
    session: &Arc<Session>,
    outcomes: &Arc<Outcomes>,
    facts_output: FactsOutput,
) -> Vec<Trial> {
    let options = &session.options;
    checks::selected(
        !options.lint_paths.is_empty(),
        !options.packages.is_empty(),
        options.expect_no_gpu,
    )
    .map(|check| {
        let session = Arc::clone(session);
        let outcomes = Arc::clone(outcomes);
        Trial::ignorable_test(check.name, move || {
            let outcome = (check.run)(&session).unwrap_or_else(|ended| ended);
            print(check.name, &outcome, facts_output);
            let result = match outcome.verdict {
                Verdict::Pass => Ok(Completion::Completed),
                Verdict::Skipped => Ok(Completion::ignored_with(&outcome.message)),
                Verdict::Fail => Err(Failed::from(match &outcome.detail {
                    Some(detail) => format!("{}\n{detail}", outcome.message),
                    None => outcome.message.clone(),
                })),
            };
            let mut recorded = outcomes.0.lock().unwrap_or_else(|e| e.into_inner());
            recorded.insert(check.name.to_owned(), outcome);
            result
        })
    })
    .collect()
}
