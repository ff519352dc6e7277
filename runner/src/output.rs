//! Writing to stdout and stderr as a Unix tool does: a reader that went away (`lint … | head`,
//! a closed pipe: EPIPE) ends the writing quietly, and the process exits with the status it
//! would have had. `println!` and `eprintln!` panic there instead (Rust ignores SIGPIPE, so the
//! write fails), so the runner writes through these, and runs libtest-mimic behind a
//! [`ShieldedStdout`].

use std::fmt::Display;
use std::io::{self, BufWriter, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Runs `write` on a buffered, locked stdout and flushes it. A closed stdout is no error: what
/// was left unwritten is dropped. Another error (a full disk) is returned. The writer's type is
/// concrete, not `dyn Write`: serde_json's pretty printer writes indentation two bytes a call,
/// and a dynamic call each made `lint --json` of cuFFT 11.4.1 (12 MB) 1.09x slower.
pub fn to_stdout(
    write: impl FnOnce(&mut BufWriter<io::StdoutLock<'static>>) -> io::Result<()>,
) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    match write(&mut out).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `text` and a newline on stderr; a closed stderr drops it (there is nowhere left to say so).
pub fn error_line(text: impl Display) {
    let _ = writeln!(io::stderr().lock(), "{text}");
}

/// `value` as pretty JSON and a newline on stdout, as [`to_stdout`] writes.
pub fn json(value: &impl serde::Serialize) -> io::Result<()> {
    to_stdout(|out| {
        serde_json::to_writer_pretty(&mut *out, value)?;
        writeln!(out)
    })
}

/// While it lives, the process's stdout (fd 1) is a pipe whose contents a thread copies to the
/// real stdout, stopping quietly when that is closed. libtest-mimic unwraps every write it
/// makes, so a closed stdout (`cuda-sandbox-check | head -1`) would panic it mid-run; behind
/// the shield the checks run to the end and the run keeps its exit status. Dropping it flushes,
/// puts the real stdout back and waits for the copy to end.
pub struct ShieldedStdout {
    real: OwnedFd,
    copier: Option<std::thread::JoinHandle<()>>,
}

impl ShieldedStdout {
    /// Puts the pipe in place of fd 1.
    pub fn new() -> io::Result<ShieldedStdout> {
        let real = io::stdout().as_fd().try_clone_to_owned()?;
        let (read, write) = pipe()?;
        io::stdout().flush()?;
        replace_fd(write.as_fd(), 1)?;
        drop(write);
        let mut sink = Some(std::fs::File::from(real.try_clone()?));
        let mut from = std::fs::File::from(read);
        let copier = std::thread::spawn(move || {
            let mut buffer = vec![0u8; 1 << 16];
            loop {
                let n = match from.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                // Once the reader has gone, the rest is drained and dropped.
                if sink
                    .as_mut()
                    .is_some_and(|s| s.write_all(&buffer[..n]).is_err())
                {
                    sink = None;
                }
            }
        });
        Ok(ShieldedStdout {
            real,
            copier: Some(copier),
        })
    }
}

impl Drop for ShieldedStdout {
    fn drop(&mut self) {
        let _ = io::stdout().flush();
        // Closes the pipe's last write end at fd 1 (children that kept a copy have exited):
        // the copier reads to the end and stops.
        if replace_fd(self.real.as_fd(), 1).is_ok() {
            if let Some(copier) = self.copier.take() {
                let _ = copier.join();
            }
        }
    }
}

/// A pipe, both ends close-on-exec: `(read, write)`.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given, of the right length;
    // on success both are new and owned by nothing else.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just created above, owned here alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Makes descriptor `target` a copy of `from` (dup2), closing what `target` was.
fn replace_fd(from: BorrowedFd<'_>, target: RawFd) -> io::Result<()> {
    // SAFETY: dup2 takes two descriptor numbers and touches no memory; `from` is open for the
    // call, and `target` (stdout) is owned by the process, not by a Rust value.
    if unsafe { libc::dup2(from.as_raw_fd(), target) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
