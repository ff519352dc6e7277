//! Why a request fails before anything is planned: one variant per cause, each one line.

use crate::drv::DrvError;

/// Why resolve fails the build ([`super::Verdict::Fail`]). Each renders as the one line the
/// hook prints for Nix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestFailure {
    /// Resolve did not reach a verdict (a bug).
    #[error(
        "the request for {derivation} was not resolved (a bug in cuda-sandbox: please report it)"
    )]
    Unresolved {
        /// The `.drv` path, as given (empty when none was).
        derivation: String,
    },
    /// The derivation repeats an attribute the hook decides on.
    #[error("refusing derivation {name}: {}", prefixed(.from.as_deref(), .error))]
    Repeated {
        /// The derivation's name.
        name: String,
        /// Where its bytes came from, when not the `.drv` file.
        from: Option<String>,
        /// The repetition.
        error: DrvError,
    },
    /// A built-in GPU feature was asked for and the configuration cannot be loaded.
    #[error("{name} requires feature '{feature}' but the configuration is broken: {error}")]
    BrokenConfig {
        /// The derivation's name.
        name: String,
        /// The built-in feature it requires.
        feature: String,
        /// Why the configuration cannot be loaded (its one line).
        error: String,
    },
    /// The `.drv` is not on disk, Nix passed nothing instead, and `missing_drv = "fail"`.
    #[error("cannot read derivation {name} ({error}) and missing_drv = \"fail\"")]
    MissingDrv {
        /// The derivation's name.
        name: String,
        /// Why it cannot be read.
        error: String,
    },
    /// A tagged derivation is fixed-output or impure: Nix runs it in the host's network
    /// namespace, where it could hand its GPU to any host process (docs/security.md).
    #[error(
        "refusing {name}: it asks for the GPU but is a fixed-output or impure derivation \
         ({why}), which Nix builds in the host's network namespace, from where it could hand \
         the GPU to any host process; build it without requiredSystemFeatures \"{feature}\""
    )]
    Unsandboxed {
        /// The derivation's name.
        name: String,
        /// The GPU feature it requires (the first a rule answers).
        feature: String,
        /// What makes it fixed-output or impure.
        why: crate::drv::Unsandboxed,
    },
    /// The derivation cannot be read, and its bytes name a feature a rule answers to.
    #[error("cannot read derivation {name} ({error}), and it may require a GPU feature")]
    Unreadable {
        /// The derivation's name.
        name: String,
        /// Why it cannot be read (prefixed with where the bytes came from).
        error: String,
    },
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
        let e = RequestFailure::Unsandboxed {
            name: "/nix/store/x-src.drv".into(),
            feature: "cuda".into(),
            why: Unsandboxed::Attr(DecidingKey::OutputHash, Within::Env),
        };
        assert_eq!(
            e.to_string(),
            "refusing /nix/store/x-src.drv: it asks for the GPU but is a fixed-output or impure \
             derivation (it sets \"outputHash\" in its env), which Nix builds in the host's \
             network namespace, from where it could hand the GPU to any host process; build it \
             without requiredSystemFeatures \"cuda\""
        );
    }
}
