//! Writing to stdout and stderr as a Unix tool does: a reader that went away (`lint … | head`,
//! a closed pipe: EPIPE) ends the writing quietly, and the process exits with the status it
//! would have had. `println!` and `eprintln!` panic there instead (Rust ignores SIGPIPE, so the
//! write fails), so the runner writes through these.

use std::fmt::Display;
use std::io::{self, BufWriter, Write};

/// Runs `write` on a buffered, locked stdout and flushes it. A closed stdout is no error: what
/// was left unwritten is dropped. Another error (a full disk) is returned.
pub fn to_stdout(write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    match write(&mut out).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `text` and a newline on stdout, as [`to_stdout`] writes.
pub fn line(text: impl Display) -> io::Result<()> {
    to_stdout(|out| writeln!(out, "{text}"))
}

/// `text` and a newline on stderr; a closed stderr drops it (there is nowhere left to say so).
pub fn error_line(text: impl Display) {
    let _ = writeln!(io::stderr().lock(), "{text}");
}
