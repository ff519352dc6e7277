//! The JSON report: every check's verdict, message and facts, the options, the summary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::check::Outcome;
use crate::options::ExpectDriver;
use crate::session::Session;

/// Bumped when a field changes meaning or disappears.
pub(crate) const REPORT_FORMAT: u32 = 1;

/// The report cannot be written: where it was to go, and the I/O error.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the report to {}: {}", .0.display(), .1)]
pub struct ReportError(PathBuf, #[source] std::io::Error);

/// libtest's tally.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Summary {
    /// Checks that passed.
    pub(crate) passed: u64,
    /// Checks that failed.
    pub(crate) failed: u64,
    /// Checks skipped at run time (e.g. no CUDA runtime) or ignored.
    pub(crate) ignored: u64,
    /// Checks not run because of a name filter.
    pub(crate) filtered_out: u64,
    /// The process exit status (0 or 101).
    pub(crate) exit_code: u8,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`REPORT_FORMAT`].
    pub(crate) format: u32,
    /// `cuda-sandbox-check`.
    pub(crate) tool: &'static str,
    /// The runner's version.
    pub(crate) version: &'static str,
    /// The expectations the run was given.
    pub(crate) options: Value,
    /// The hook's manifest: `path`, `status` (loaded, absent, broken), `message`, `content`.
    pub(crate) manifest: Value,
    /// Every check that ran, by name.
    pub(crate) checks: BTreeMap<String, Outcome>,
    /// libtest's tally.
    pub(crate) summary: Summary,
}

impl Report {
    /// Assembles the report of a finished run of `session`: its options and manifest, every
    /// check's outcome, and libtest-mimic's tally.
    pub fn new(
        session: &Session,
        checks: BTreeMap<String, Outcome>,
        conclusion: &libtest_mimic::Conclusion,
    ) -> Report {
        Report {
            format: REPORT_FORMAT,
            tool: env!("CARGO_PKG_NAME"),
            version: env!("CARGO_PKG_VERSION"),
            options: serde_json::json!({
                "expect_driver": session.options.expect_driver.as_ref().map(ExpectDriver::describe),
                "min_cuda_version": session.options.min_cuda_version.map(|v| v.to_string()),
                "api_version": session.options.api_version.map(|v| v.to_string()),
                "cudart": session.options.cudart,
                "saxpy_elements": session.options.saxpy_elements,
                "dev_root": session.options.dev_root,
                "manifest": session.options.manifest,
                "no_manifest": session.options.no_manifest,
                "lint": session.options.lint_paths,
                "driver_link": session.options.lint.driver_link,
                "compat_dir": session.options.lint.compat_dir,
            }),
            manifest: session.manifest.report(),
            checks,
            summary: Summary {
                passed: conclusion.num_passed,
                failed: conclusion.num_failed,
                ignored: conclusion.num_ignored,
                filtered_out: conclusion.num_filtered_out,
                exit_code: if conclusion.has_failed() { 101 } else { 0 },
            },
        }
    }

    /// Writes the report as pretty JSON to `path`.
    pub fn write(&self, path: &Path) -> Result<(), ReportError> {
        let text = serde_json::to_string_pretty(self).expect("the report is plain data");
        std::fs::write(path, text + "\n").map_err(|error| ReportError(path.to_path_buf(), error))
    }
}
