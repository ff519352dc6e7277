//! What a check is: its descriptor ([`Check`]: a stable name, when it runs, the function) and
//! what it returns ([`Outcome`]: a [`Verdict`], a one-line message, optional detail and the
//! facts for the report). The checks themselves live in [`crate::checks`], one file per group.

use std::fmt::Display;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::session::Session;

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Everything checked holds.
    Pass,
    /// Something is wrong; the message says what and how to fix it.
    Fail,
    /// Not applicable here; the message says why.
    Skipped,
}

/// The facts a check learnt, as the report prints them: one JSON object, key by key.
pub(crate) type Facts = Map<String, Value>;

/// Turns a check's typed facts (a struct that serializes to a JSON object) into [`Facts`].
pub(crate) fn facts_of(typed: &impl Serialize) -> Facts {
    match serde_json::to_value(typed) {
        Ok(Value::Object(map)) => map,
        Ok(other) => panic!("a check's facts must serialize to a JSON object, not {other}"),
        Err(error) => panic!("a check's facts must serialize: {error}"),
    }
}

/// A check's result. Its message is where a typed error becomes its one line.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// Pass, fail or skipped.
    pub(crate) verdict: Verdict,
    /// One line: what was found, or on failure the cause and the fix.
    pub(crate) message: String,
    /// Further lines (e.g. the JIT error log), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) detail: Option<String>,
    /// Everything the check learnt, for the JSON report.
    pub(crate) facts: Facts,
    /// A skip because the rules could not judge (not for want of a GPU or a flag): the run's
    /// exit status says so (3) when nothing failed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub undecided: bool,
}

impl Outcome {
    /// A passing outcome.
    pub(crate) fn pass(message: impl Display, facts: Facts) -> Outcome {
        Outcome::new(Verdict::Pass, message, facts)
    }

    /// A failing outcome.
    pub(crate) fn fail(message: impl Display, facts: Facts) -> Outcome {
        Outcome::new(Verdict::Fail, message, facts)
    }

    /// A failing outcome with no facts: a check that cannot start (for `map_err`).
    pub(crate) fn fail_without_facts(why: impl Display) -> Outcome {
        Outcome::fail(why, Facts::new())
    }

    /// A skipped outcome.
    pub(crate) fn skipped(message: impl Display, facts: Facts) -> Outcome {
        Outcome::new(Verdict::Skipped, message, facts)
    }

    /// A skip because the rules cannot judge what was found (never a pass).
    pub(crate) fn undecided(message: impl Display, facts: Facts) -> Outcome {
        Outcome {
            undecided: true,
            ..Outcome::new(Verdict::Skipped, message, facts)
        }
    }

    /// An outcome of `verdict`.
    pub(crate) fn new(verdict: Verdict, message: impl Display, facts: Facts) -> Outcome {
        Outcome {
            verdict,
            message: message.to_string(),
            detail: None,
            facts,
            undecided: false,
        }
    }

    /// The same outcome with further lines of detail.
    pub(crate) fn with_detail(mut self, detail: impl Into<String>) -> Outcome {
        self.detail = Some(detail.into());
        self
    }

    /// Fails with the first of `failures` (the rest, then `notes`, as detail), or passes with
    /// `notes` joined by `; `.
    pub(crate) fn first_failure(failures: &[String], notes: &[String], facts: Facts) -> Outcome {
        match failures.split_first() {
            None => Outcome::pass(notes.join("; "), facts),
            Some((first, rest)) => {
                Outcome::fail(first, facts).with_detail_lines(rest.iter().chain(notes))
            }
        }
    }

    /// With `lines` as the detail, one a line; no detail when there are none.
    pub(crate) fn with_detail_lines<S: AsRef<str>>(
        self,
        lines: impl IntoIterator<Item = S>,
    ) -> Outcome {
        let lines: Vec<String> = lines.into_iter().map(|l| l.as_ref().to_owned()).collect();
        if lines.is_empty() {
            self
        } else {
            self.with_detail(lines.join("\n"))
        }
    }
}

/// When a check is part of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunsWhen {
    /// In every run, unless `--expect-no-gpu`.
    Always,
    /// Only with `--lint PATH`.
    WithLint,
    /// Only with `--package PATH`.
    WithPackage,
    /// Alone, with `--expect-no-gpu` (for untagged derivations).
    ExpectNoGpu,
}

/// A named check.
pub struct Check {
    /// Stable name, `group::check`, as libtest filters and the report use it.
    pub name: &'static str,
    /// Which runs include it.
    pub runs_when: RunsWhen,
    /// Runs the check: `Err` is an outcome that ended it early (with `?`), kept as it is.
    pub(crate) run: fn(&Session) -> Result<Outcome, Outcome>,
}

impl Check {
    /// The group: the part of the name before `::` (`driver` for `driver::version`).
    #[cfg(test)]
    pub(crate) fn group(&self) -> &'static str {
        self.name
            .split_once("::")
            .map_or(self.name, |(group, _)| group)
    }
}

/// Builds a facts map: `facts! { "key" => value, ... }`.
#[macro_export]
macro_rules! facts {
    ($($key:expr => $value:expr),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut map = $crate::check::Facts::new();
        $( map.insert(String::from($key), serde_json::json!($value)); )*
        map
    }};
}
