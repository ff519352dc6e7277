//! The checks: each has a stable name and returns an [`Outcome`] (verdict, one-line
//! message, optional detail, facts for the report). One file per group.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::session::Session;

pub mod devices;
pub mod driver;
pub mod entry_points;
pub mod isolation;
pub mod kernel;
pub mod lint;
pub mod nvml;
pub mod package;
pub mod runtime;

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

/// A check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// Pass, fail or skipped.
    pub verdict: Verdict,
    /// One line: what was found, or on failure the cause and the fix.
    pub message: String,
    /// Further lines (e.g. the JIT error log), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Everything the check learnt, for the JSON report.
    pub facts: Map<String, Value>,
}

impl Outcome {
    /// A passing outcome.
    pub fn pass(message: impl Into<String>, facts: Map<String, Value>) -> Outcome {
        Outcome {
            verdict: Verdict::Pass,
            message: message.into(),
            detail: None,
            facts,
        }
    }

    /// A failing outcome.
    pub fn fail(message: impl Into<String>, facts: Map<String, Value>) -> Outcome {
        Outcome {
            verdict: Verdict::Fail,
            message: message.into(),
            detail: None,
            facts,
        }
    }

    /// A skipped outcome.
    pub fn skipped(message: impl Into<String>, facts: Map<String, Value>) -> Outcome {
        Outcome {
            verdict: Verdict::Skipped,
            message: message.into(),
            detail: None,
            facts,
        }
    }

    /// The same outcome with further lines of detail.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Outcome {
        self.detail = Some(detail.into());
        self
    }
}

/// A named check.
pub struct Check {
    /// Stable name, `group::check`, as libtest filters and the report use it.
    pub name: &'static str,
    /// Runs the check.
    pub run: fn(&Session) -> Outcome,
}

/// Every GPU check, in the order they are listed ([`LINT_CHECK`] follows with `--lint`).
pub const CHECKS: &[Check] = &[
    Check {
        name: "devices::nodes",
        run: devices::nodes,
    },
    Check {
        name: "driver::library",
        run: driver::library,
    },
    Check {
        name: "driver::version",
        run: driver::version,
    },
    Check {
        name: "driver::entry_points",
        run: entry_points::driver_entry_points,
    },
    Check {
        name: "runtime::compatibility",
        run: runtime::compatibility,
    },
    Check {
        name: "runtime::entry_points",
        run: runtime::entry_points,
    },
    Check {
        name: "kernel::saxpy",
        run: kernel::saxpy,
    },
    Check {
        name: "nvml::consistency",
        run: nvml::consistency,
    },
];

/// The ELF lint, run only when `--lint PATH` is given.
pub const LINT_CHECK: Check = Check {
    name: "lint::elf",
    run: lint::elf,
};

/// The checks of the package under test, run only when `--package PATH` is given.
pub const PACKAGE_CHECKS: &[Check] = &[
    Check {
        name: "package::gpu_code",
        run: package::gpu_code,
    },
    Check {
        name: "package::runtimes",
        run: package::runtimes,
    },
    Check {
        name: "package::driver",
        run: package::driver,
    },
];

/// The negative check, run alone with `--expect-no-gpu`.
pub const ISOLATION_CHECK: Check = Check {
    name: "isolation::no_gpu",
    run: isolation::no_gpu,
};

/// Builds a facts map: `facts! { "key" => value, ... }`.
#[macro_export]
macro_rules! facts {
    ($($key:expr => $value:expr),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut map = serde_json::Map::new();
        $( map.insert(String::from($key), serde_json::json!($value)); )*
        map
    }};
}
