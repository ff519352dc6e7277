//! The pre-build-hook itself: `cuda-sandbox-hook <drv-path> <chroot-root>`.
//!
//! [`crate::pipeline`] rendered for Nix, with the failure policy: a build that asks for no
//! configured feature is never failed, whatever is wrong with the configuration or the host (a
//! warning goes to stderr). A tagged build that cannot get a working GPU fails with one line
//! saying which derivation, which feature, what is missing and how to fix it.

use crate::log;
use crate::pipeline::{self, HookFailure, Mode};
use crate::request::{self, Environment, Input};
use std::path::Path;

/// Runs the hook for `drv_path` and returns what to print on stdout for Nix.
pub fn pre_build(
    drv_path: &Path,
    chroot: &Path,
    config_arg: Option<&Path>,
    env: &Environment,
) -> Result<Vec<u8>, HookFailure> {
    let req = request::resolve(&Input {
        drv: Some(drv_path),
        config: config_arg,
        chroot: Some(chroot),
        ..Input::new(env)
    });
    for w in &req.warnings {
        log::warn(w);
    }
    let outcome = pipeline::run(&req, Mode::Hook);
    for w in &outcome.granted.decision.warnings {
        log::warn(w);
    }
    outcome.answer
}
