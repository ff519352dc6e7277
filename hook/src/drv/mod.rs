//! Reading Nix derivations as Nix reads them, down to what the hook decides on: the system
//! features a build requires and the GPUs it asks for ([`DrvAttrs`]).
//!
//! - `aterm.rs`: the `.drv` file (`Derive([outputs],[inputDrvs],[inputSrcs],"system",
//!   "builder",[args],[env])`, docs/architecture.md, "The `.drv` format"), its one grammar,
//!   and [`DrvEnv`], the hook's reader, which keeps nothing but the keys it decides on.
//! - `json.rs`: the derivation as JSON ([`JsonDerivation`]: `NIX_DERIVATION_V4`).
//! - `attrs.rs`: the one reading of the features and the GPU count over an env, for every form,
//!   and the structured attrs (`__json`).
//! - `tests/oracle.rs`: the whole `.drv` (`Derivation`), for the unit and differential tests,
//!   benches and fuzzing, built only for them (the `oracle` feature, which the hook's
//!   dev-dependency on itself and the fuzz crate turn on); never in the hook.
//!
//! Strings are byte strings, not UTF-8: Nix accepts latin-1 and cp1252 in attribute values.
//! Escapes follow Nix's own reader exactly: `\n`, `\r`, `\t` are control characters and a
//! backslash before any other byte stands for that byte.
//!
//! A key set more than once is read as Nix reads it, the last value counting, except a key the
//! hook decides on ([`DecidingKey`]): a repeat of one, in the env or in the structured attrs, in
//! any form, is [`DrvError::Repeated`], which fails the build.
//!
//! Every reader runs in time linear in its input and holds memory near its size; malformed input
//! yields a [`DrvError`] (the ATerm's with the byte offset of the problem), never a panic.

use std::borrow::Cow;

mod aterm;
mod attrs;
mod json;
#[cfg(any(test, feature = "oracle"))]
#[path = "tests/oracle.rs"]
mod oracle;

pub use aterm::DrvEnv;
pub(crate) use attrs::GPUS_ATTR;
pub use attrs::{DecidingKey, DrvAttrs, RequiredFeatures, Unsandboxed, Within};
pub use json::JsonDerivation;
#[cfg(any(test, feature = "oracle"))]
pub use oracle::{Derivation, InputDrv, Output};

/// A byte string from a derivation, borrowed from the input unless it had escapes.
pub(crate) type DrvStr<'a> = Cow<'a, [u8]>;

/// Why the hook cannot decide on a derivation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DrvError {
    /// The ATerm does not follow the grammar: the byte offset in the input at which the problem
    /// was found, and what was wrong there.
    #[error("malformed derivation at byte {0}: {1}")]
    Malformed(usize, String),
    /// JSON the hook reads (the derivation as JSON, or its structured attrs) is not what Nix
    /// writes.
    #[error("{0}")]
    Json(String),
    /// A key the hook decides on is set more than once. Nix keeps the last value; a reader that
    /// keeps the first disagrees with it (the hook did), so the build is refused rather than
    /// exposed on either.
    #[error(
        "{key} is set more than once in the {within}, and which value counts depends on who \
         reads it"
    )]
    Repeated {
        /// The key.
        key: DecidingKey,
        /// Where.
        within: Within,
    },
}

impl DrvError {
    fn json(message: impl Into<String>) -> DrvError {
        DrvError::Json(message.into())
    }

    /// The byte offset of a [`DrvError::Malformed`] ATerm's problem.
    pub fn offset(&self) -> Option<usize> {
        match self {
            DrvError::Malformed(offset, _) => Some(*offset),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
