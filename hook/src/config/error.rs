//! Why a configuration could not be used, rendered as one line at the edge.

use super::validate::Invalid;
use super::MAX_CONFIG_BYTES;
use crate::trust::TrustError;
use std::path::PathBuf;

/// Why a configuration could not be used: where, and what. Always one line: control
/// characters from the file (a `\n` inside a quoted TOML value, say) are printed escaped, so
/// the error cannot break Nix's one-line log or fake a second message.
#[derive(Debug, thiserror::Error)]
#[error("{}", crate::log::one_line(&format!("config {}: {}", .file, .problem)))]
pub struct ConfigError {
    /// The file (or `built-in`) the problem is in.
    pub(crate) file: String,
    /// What is wrong with it.
    pub(crate) problem: Problem,
}

/// What is wrong with a configuration (see [`ConfigError`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Problem {
    /// The path could not be made absolute.
    #[error("cannot inspect it: {0}")]
    Inspect(std::io::Error),
    /// The file, or a directory on its path, does not exist or cannot be looked at.
    #[error("cannot read it: {0}")]
    Missing(TrustError),
    /// The default file is missing while its directory exists: a deleted configuration,
    /// which must not turn into the built-in one: why it cannot be reached, and the directory
    /// to remove.
    #[error(
        "cannot read it: {0}; restore it, or remove the directory {dir} to use the built-in \
         default",
        dir = .1.display()
    )]
    DefaultMissing(TrustError, PathBuf),
    /// The file exists, but it or a directory on its path is not trusted.
    #[error("refused: {0}")]
    Untrusted(TrustError),
    /// The trusted file could not be opened or read.
    #[error("cannot read it: {0}")]
    Unreadable(std::io::Error),
    /// The file is not UTF-8.
    #[error("cannot read it: {0}")]
    NotUtf8(std::string::FromUtf8Error),
    /// The file is larger than [`MAX_CONFIG_BYTES`].
    #[error("refused: larger than {MAX_CONFIG_BYTES} bytes")]
    TooLarge,
    /// The text is not TOML of the schema (a syntax error, an unknown key, a wrong type).
    #[error("{0}")]
    Syntax(String),
    /// A value is not allowed.
    #[error(transparent)]
    Invalid(Invalid),
}

/// A TOML or schema error `e` from parsing `text`, on one line: `line L, column C: message`
/// (1-based, the column in characters) when the parser places it.
pub(crate) fn syntax(e: &toml::de::Error, text: &str) -> String {
    let message = e.message().trim().replace('\n', " ");
    let Some(span) = e.span() else {
        return message;
    };
    let before = &text[..span.start.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before[before.rfind('\n').map_or(0, |i| i + 1)..]
        .chars()
        .count()
        + 1;
    format!("line {line}, column {column}: {message}")
}
