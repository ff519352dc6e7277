//! Log lines on stderr, each starting with `cuda-sandbox-hook:` so they stand out in build logs.

/// Prefix of every log line.
pub const PREFIX: &str = "cuda-sandbox-hook:";

/// Writes a warning line to stderr.
pub fn warn(message: impl std::fmt::Display) {
    eprintln!("{PREFIX} warning: {message}");
}

/// Writes an error line to stderr.
pub fn error(message: impl std::fmt::Display) {
    eprintln!("{PREFIX} error: {message}");
}
