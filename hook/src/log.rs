//! Log lines on stderr, each starting with `cuda-sandbox-hook:` so they stand out in build logs.
//! A closed stderr drops them (`eprintln!` would panic there: SIGPIPE is ignored).

use std::io::Write;

/// Prefix of every log line.
pub(crate) const PREFIX: &str = "cuda-sandbox-hook:";

/// Writes a warning line to stderr.
pub(crate) fn warn(message: impl std::fmt::Display) {
    line("warning", message);
}

/// Writes an error line to stderr.
pub fn error(message: impl std::fmt::Display) {
    line("error", message);
}

/// Writes `message` on one line to stderr, after the prefix and `level`.
fn line(level: &str, message: impl std::fmt::Display) {
    let _ = writeln!(
        std::io::stderr().lock(),
        "{PREFIX} {level}: {}",
        one_line(&message.to_string())
    );
}

/// Text from outside on one line: every control character and bidirectional-text control
/// escaped (the one rule, shared with the manifest crate's errors).
pub(crate) use cuda_sandbox_manifest::text::one_line;
