//! The pre-build-hook itself: `cuda-sandbox-hook <drv-path> <chroot-root>`.
//!
//! resolve → scan → decide → act → render, with the failure policy: a build that asks for no
//! configured feature is never failed, whatever is wrong with the configuration or the host (a
//! warning goes to stderr). A tagged build that cannot get a working GPU fails with one line
//! saying which derivation, which feature, what is missing and how to fix it.

use crate::act::{self, Mode};
use crate::plan::Plan;
use crate::request::{self, Input, Request, Verdict, ATERM_FD_ENV, DERIVATION_ENV};
use crate::{log, protocol};
use std::path::Path;

/// Why a tagged build must not start; the message is one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFailure(pub String);

impl std::fmt::Display for HookFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Runs the hook for `drv_path` and returns what to print on stdout for Nix.
pub fn pre_build(
    drv_path: &Path,
    chroot: &Path,
    config_arg: Option<&Path>,
) -> Result<Vec<u8>, HookFailure> {
    let req = request::resolve(&Input {
        drv: Some(drv_path),
        derivation_json: std::env::var_os(DERIVATION_ENV),
        aterm_fd: std::env::var_os(ATERM_FD_ENV),
        config: config_arg,
        chroot: Some(chroot),
        ..Input::default()
    });
    for w in &req.warnings {
        log::warn(w);
    }
    let (plan, answer) = answer(&req, Mode::Hook);
    for w in &plan.warnings {
        log::warn(w);
    }
    answer
}

/// The plan for a request and the hook's answer to Nix, as the hook (or `explain`, which
/// shows it) computes them: nothing for an untagged build, a failure for a refused one (with
/// the plan that failed, when there is one).
pub fn answer(req: &Request, mode: Mode) -> (Plan, Result<Vec<u8>, HookFailure>) {
    let config = match (&req.verdict, req.tagged()) {
        (Verdict::Fail(m), _) => return (Plan::default(), Err(HookFailure(m.clone()))),
        (Verdict::Tagged, Some(c)) => c,
        _ => return (Plan::default(), Ok(Vec::new())),
    };
    let name = req.derivation_name();
    let plan = act::plan(req, config, mode);
    if !plan.problems.is_empty() {
        let problems: Vec<String> = plan.problems.iter().map(|p| p.to_string()).collect();
        let e = HookFailure(format!(
            "{name} requires feature '{}' (rule '{}') but {}",
            req.first_match(),
            plan.rules.first().map(String::as_str).unwrap_or_default(),
            problems.join("; ")
        ));
        act::release_lease(&plan, req, config);
        return (plan, Err(e));
    }
    let bytes = match protocol::render(&plan.exposures) {
        Ok(b) => b,
        Err(e) => {
            act::release_lease(&plan, req, config);
            return (plan, Err(HookFailure(format!("{name}: {e}"))));
        }
    };
    if mode == Mode::Hook {
        if let Err(e) = act::write_manifest(&plan, config) {
            act::release_lease(&plan, req, config);
            return (plan, Err(HookFailure(format!("{name}: {e}"))));
        }
    }
    (plan, Ok(bytes))
}
