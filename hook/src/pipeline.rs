//! The one pipeline: resolve → scan → decide → act → render, in that order, for the hook,
//! `explain` and `exec` alike. They differ only in their [`Mode`] (what `act` may change) and
//! in how they render the [`Outcome`].
//!
//! - resolve ([`crate::request`]) reads the derivation and the configuration, and the
//!   environment once, through the caller's [`crate::request::Input`];
//! - scan ([`crate::scan`]) reads the host, and only reads;
//! - decide ([`crate::plan::decide`]) reads nothing but its arguments;
//! - act ([`crate::act`]) is the only stage that changes the host: the closure cache, the GPU
//!   lease, and, once the answer for Nix has been rendered, the manifest;
//! - render: [`crate::protocol`] for Nix here; [`crate::explain`] and [`crate::exec`] render
//!   the same plan for a person and as a private root.

use crate::act;
use crate::config::Config;
use crate::plan::{decide, Plan, Problem};
use crate::protocol;
use crate::request::{Request, Verdict};
use crate::scan::scan;

/// Who runs the pipeline, and so what `act` may change on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The pre-build hook: lease GPUs to the build in its chroot and write its manifest.
    Hook,
    /// `explain`: show what a build would get; no lease, no manifest.
    Explain,
    /// `exec`: no lease (its private root cannot carry one); the manifest is written, since
    /// the command may be the runner, which reads it.
    Exec,
}

impl Mode {
    /// Whether this mode writes the build's manifest.
    pub fn writes_manifest(self) -> bool {
        matches!(self, Mode::Hook | Mode::Exec)
    }
}

/// Why a tagged build must not start. Renders as one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookFailure {
    /// The request itself fails (a broken configuration for a GPU feature, an unreadable
    /// derivation that may be tagged, `missing_drv = "fail"`…): the resolver's message.
    Refused(String),
    /// The plan cannot give the build a working GPU.
    Problems {
        /// The derivation.
        derivation: String,
        /// The feature of the first matching rule.
        feature: String,
        /// The first matching rule.
        rule: String,
        /// What stops it, each with its fix.
        problems: Vec<Problem>,
    },
    /// Nix's protocol cannot express an exposure.
    Unexpressible {
        /// The derivation.
        derivation: String,
        /// What cannot be expressed.
        why: String,
    },
    /// The manifest could not be written.
    Manifest {
        /// The derivation.
        derivation: String,
        /// The error.
        error: act::ManifestWriteError,
    },
}

impl std::fmt::Display for HookFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HookFailure::Refused(m) => f.write_str(m),
            HookFailure::Problems {
                derivation,
                feature,
                rule,
                problems,
            } => {
                write!(
                    f,
                    "{derivation} requires feature '{feature}' (rule '{rule}') but "
                )?;
                for (i, p) in problems.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{p}")?;
                }
                Ok(())
            }
            HookFailure::Unexpressible { derivation, why } => write!(f, "{derivation}: {why}"),
            HookFailure::Manifest { derivation, error } => write!(f, "{derivation}: {error}"),
        }
    }
}

impl std::error::Error for HookFailure {}

/// What the pipeline produced for a request.
#[derive(Debug)]
pub struct Outcome {
    /// The plan (empty for an untagged or refused request).
    pub plan: Plan,
    /// The hook's answer to Nix: the protocol bytes (empty for an untagged build), or why the
    /// build must not start.
    pub answer: Result<Vec<u8>, HookFailure>,
}

/// Runs the stages after resolve for `req` in `mode`: nothing for an untagged build, a failure
/// for a refused one, else scan, decide, act, and the rendered answer for Nix (the manifest is
/// written, where `mode` writes it, only once that answer exists).
pub fn run(req: &Request, mode: Mode) -> Outcome {
    let config = match (&req.verdict, req.tagged()) {
        (Verdict::Fail(m), _) => return refused(HookFailure::Refused(m.clone())),
        (Verdict::Tagged, Some(c)) => c,
        _ => {
            return Outcome {
                plan: Plan::default(),
                answer: Ok(Vec::new()),
            }
        }
    };
    let derivation = req.derivation_name();
    let view = scan(config, &req.matched_rules(config));
    let plan = act::act(decide(req, config, &view), req, config, mode);
    let outcome = answer(req, config, mode, plan, derivation);
    if outcome.answer.is_err() {
        // Nix will not start the build, so nothing else would end its lease before that Nix
        // ends.
        act::release_lease(&outcome.plan, req, config);
    }
    outcome
}

/// The answer for Nix once act has run: the problems, or the rendered exposures (and the
/// manifest written, where `mode` writes one).
fn answer(req: &Request, config: &Config, mode: Mode, plan: Plan, derivation: String) -> Outcome {
    if !plan.problems.is_empty() {
        let answer = Err(HookFailure::Problems {
            derivation,
            feature: req.first_match(),
            rule: plan.rules.first().cloned().unwrap_or_default(),
            problems: plan.problems.clone(),
        });
        return Outcome { plan, answer };
    }
    let bytes = match protocol::render(&plan.exposures) {
        Ok(b) => b,
        Err(e) => {
            let why = e.to_string();
            let answer = Err(HookFailure::Unexpressible { derivation, why });
            return Outcome { plan, answer };
        }
    };
    if mode.writes_manifest() {
        if let Err(error) = act::write_manifest(&plan, config) {
            let answer = Err(HookFailure::Manifest { derivation, error });
            return Outcome { plan, answer };
        }
    }
    Outcome {
        plan,
        answer: Ok(bytes),
    }
}

fn refused(failure: HookFailure) -> Outcome {
    Outcome {
        plan: Plan::default(),
        answer: Err(failure),
    }
}
