//! The one pipeline: resolve → scan → decide → act → render, in that order, for the hook,
//! `explain` and `exec` alike. They differ only in their [`Mode`] (what `act` may change) and
//! in how they render the [`Outcome`].
//!
//! - resolve ([`crate::request`]) reads the derivation and the configuration, and the
//!   environment once, through the caller's [`crate::request::Input`];
//! - scan ([`crate::scan`]) reads the host, and only reads;
//! - decide ([`crate::plan::decide`]) reads nothing but its arguments and returns a
//!   [`crate::plan::Decision`];
//! - act ([`crate::act`]) is the only stage that changes the host: the closure cache, the GPU
//!   lease, and, once the answer for Nix has been rendered, the manifest. It returns what was
//!   [`Granted`], whose lease guard ends the lease unless this module commits it;
//! - render: [`crate::protocol`] for Nix here; [`crate::explain`] and [`crate::exec`] render
//!   the same grant for a person and as a private root.

use crate::act::{self, Granted};
use crate::plan::{decide, Problem};
use crate::protocol;
use crate::request::{Request, RequestFailure, Tagged, Verdict};
use crate::scan::scan;

/// Who runs the pipeline: act's [`act::Mode`].
pub(crate) use crate::act::Mode;

/// Why a tagged build must not start. Renders as one line.
#[derive(Debug, thiserror::Error)]
pub enum HookFailure {
    /// The request itself fails (a broken configuration for a GPU feature, an unreadable
    /// derivation that may be tagged, `missing_drv = "fail"`…).
    #[error(transparent)]
    Refused(RequestFailure),
    /// The plan cannot give the build a working GPU: the derivation, the feature and the name
    /// of the first matching rule, and what stops it (each problem with its fix).
    #[error(
        "{0} requires feature '{1}' (rule '{2}') but {problems}",
        problems = .3.iter().map(Problem::to_string).collect::<Vec<_>>().join("; ")
    )]
    Problems(String, String, String, Vec<Problem>),
    /// Nix's protocol cannot express an exposure: the derivation, and what cannot be expressed.
    #[error("{0}: {1}")]
    Unexpressible(String, protocol::Unexpressible),
    /// The manifest could not be written: the derivation, and the error.
    #[error("{0}: {1}")]
    Manifest(String, act::ManifestWriteError),
}

/// What the pipeline produced for a request.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// What the build was granted (empty for an untagged or refused request). Its lease, when
    /// the answer is a failure, ends when it is dropped.
    pub granted: Granted,
    /// The hook's answer to Nix: the protocol bytes (empty for an untagged build), or why the
    /// build must not start.
    pub answer: Result<Vec<u8>, HookFailure>,
}

/// Runs the stages after resolve for `req` in `mode`: nothing for an untagged build, a failure
/// for a refused one, else scan, decide, act, and the rendered answer for Nix (the manifest is
/// written, where `mode` writes it, only once that answer exists; only then is the lease
/// committed).
pub(crate) fn run(req: &Request, mode: Mode) -> Outcome {
    let Verdict::Tagged(tagged) = &req.verdict else {
        let answer = match &req.verdict {
            Verdict::Fail(why) => Err(HookFailure::Refused(why.clone())),
            _ => Ok(Vec::new()),
        };
        let granted = Granted::default();
        return Outcome { granted, answer };
    };
    // Only a build requiring `cuda-sm-*` features reads the GPU inventory.
    let need_inventory = !req.required_gpu_features().is_empty();
    let view = scan(&tagged.config, &tagged.matched_rules(), need_inventory);
    let decision = decide(req, tagged, &view);
    let mut granted = act::act(decision, req, &tagged.config, mode);
    let answer = answer(req, tagged, mode, &granted);
    if answer.is_ok() {
        // The build may start: its lease is its own now. On a failure Nix will not start
        // the build, and the guard ends the lease when the grant is dropped, as nothing else
        // would before that Nix ends. The same holds for its `/sys` tree.
        if let Some(lease) = &mut granted.lease {
            lease.commit();
        }
        if let Some(tree) = &mut granted.sysfs {
            tree.commit();
        }
    }
    Outcome { granted, answer }
}

/// The answer for Nix once act has run: the problems, or the rendered exposures (and the
/// manifest written, where `mode` writes one).
fn answer(
    req: &Request,
    tagged: &Tagged,
    mode: Mode,
    granted: &Granted,
) -> Result<Vec<u8>, HookFailure> {
    let derivation = req.derivation_name();
    if !granted.decision.problems.is_empty() {
        let rule = granted.decision.rules.first().cloned().unwrap_or_default();
        let problems = granted.decision.problems.clone();
        let feature = req.first_match();
        return Err(HookFailure::Problems(derivation, feature, rule, problems));
    }
    let bytes = protocol::render(&granted.decision.exposures)
        .map_err(|e| HookFailure::Unexpressible(derivation.clone(), e))?;
    act::write_manifest(granted, &tagged.config, mode)
        .map_err(|e| HookFailure::Manifest(derivation, e))?;
    Ok(bytes)
}
