//! Why a request fails before anything is planned: one variant per cause, each one line.

use crate::drv::DrvError;

/// Why resolve fails the build ([`super::Verdict::Fail`]). Each renders as the one line the
/// hook prints for Nix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestFailure {
    /// Resolve did not reach a verdict (a bug): the `.drv` path, as given (empty when none
    /// was).
    #[error("the request for {0} was not resolved (a bug in cuda-sandbox: please report it)")]
    Unresolved(String),
    /// The derivation repeats an attribute the hook decides on: the derivation's name, where
    /// its bytes came from (when not the `.drv` file), and the repetition.
    #[error("refusing derivation {0}: {why}", why = prefixed(.1.as_deref(), .2))]
    Repeated(String, Option<String>, DrvError),
    /// A built-in GPU feature was asked for and the configuration cannot be loaded: the
    /// derivation's name, the built-in feature it requires, and why the configuration cannot be
    /// loaded (its one line).
    #[error("{0} requires feature '{1}' but the configuration is broken: {2}")]
    BrokenConfig(String, String, String),
    /// The `.drv` is not on disk, Nix passed nothing instead, and `missing_drv = "fail"`: the
    /// derivation's name, and why it cannot be read.
    #[error("cannot read derivation {0} ({1}) and missing_drv = \"fail\"")]
    MissingDrv(String, String),
    /// A tagged derivation is fixed-output or impure: Nix runs it in the host's network
    /// namespace, where it could hand its GPU to any host process (docs/security.md). The
    /// derivation's name, the GPU feature it requires (the first a rule answers), and what
    /// makes it fixed-output or impure.
    #[error(
        "refusing {0}: it asks for the GPU but is a fixed-output or impure derivation \
         ({2}), which Nix builds in the host's network namespace, from where it could hand \
         the GPU to any host process; build it without requiredSystemFeatures \"{1}\""
    )]
    Unsandboxed(String, String, crate::drv::Unsandboxed),
    /// The derivation cannot be read, and its bytes name a feature a rule answers to: the
    /// derivation's name, and why it cannot be read (prefixed with where the bytes came from).
    #[error("cannot read derivation {0} ({1}), and it may require a GPU feature")]
    Unreadable(String, String),
}

/// `error`, prefixed with where the bytes came from when not from the `.drv` file.
pub(super) fn prefixed(from: Option<&str>, error: &DrvError) -> String {
    match from {
        Some(source) => format!("{source}: {error}"),
        None => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drv::{DecidingKey, Unsandboxed, Within};

    #[test]
    fn an_unsandboxed_tagged_derivation_is_refused_in_one_line_saying_why() {
        let e = RequestFailure::Unsandboxed(
            "/nix/store/x-src.drv".into(),
            "cuda".into(),
            Unsandboxed::Attr(DecidingKey::OutputHash, Within::Env),
        );
        assert_eq!(
            e.to_string(),
            "refusing /nix/store/x-src.drv: it asks for the GPU but is a fixed-output or impure \
             derivation (it sets \"outputHash\" in its env), which Nix builds in the host's \
             network namespace, from where it could hand the GPU to any host process; build it \
             without requiredSystemFeatures \"cuda\""
        );
    }
}
