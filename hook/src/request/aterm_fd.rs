//! The derivation handed over on a file descriptor ([`super::ATERM_FD_ENV`]), read within
//! fixed bounds of size and time.

/// Why the descriptor gave no derivation. Renders as one line.
#[derive(Debug, thiserror::Error)]
pub enum AtermFdError {
    /// The variable's value is not a descriptor number.
    #[error("not a file descriptor number")]
    NotANumber,
    /// Descriptors 0–2 are the hook's own standard streams.
    #[error("descriptor {0} is the hook's own {stream}, not a derivation", stream = stream_name(.0))]
    StandardStream(u32),
    /// The descriptor cannot be looked at.
    #[error("not usable: {0}")]
    Unusable(std::io::Error),
    /// It is not a regular file, a memfd or a pipe (what it is instead).
    #[error("is {0}: give a file, a memfd or a pipe")]
    WrongKind(&'static str),
    /// It holds more than the cap.
    #[error("holds {size} bytes or more, above the cap of {cap} bytes")]
    TooBig {
        /// Bytes found (at least).
        size: u64,
        /// The cap.
        cap: u64,
    },
    /// It cannot be reopened.
    #[error("cannot open it: {0}")]
    Open(std::io::Error),
    /// Reading failed.
    #[error("cannot read it: {0}")]
    Read(std::io::Error),
    /// Waiting on the pipe failed.
    #[error("cannot wait for it: {0}")]
    Wait(nix::errno::Errno),
    /// The pipe's writer kept it open past the wait.
    #[error(
        "a pipe that did not reach its end within {} s ({read} bytes read): its writer keeps it \
         open",
        .waited.as_secs_f64()
    )]
    PipeStalled {
        /// How long the hook waited.
        waited: std::time::Duration,
        /// Bytes read meanwhile.
        read: usize,
    },
}

/// The name of standard stream `n` (0–2).
fn stream_name(n: &u32) -> &'static str {
    ["stdin", "stdout", "stderr"][*n as usize]
}

/// How much [`read_aterm_fd`] reads, and how long it waits for a pipe.
#[derive(Debug, Clone, Copy)]
pub struct FdLimits {
    /// The most bytes a derivation on the descriptor may have.
    pub max_bytes: u64,
    /// How long a pipe may take to deliver all of it (its writer closing it).
    pub pipe_wait: std::time::Duration,
}

/// The hook's limits on [`ATERM_FD_ENV`](super::ATERM_FD_ENV): 256 MiB (Nix itself sets none;
/// the largest derivations in Nixpkgs are a few MiB), and 5 s for a pipe, far more than a
/// writer needs.
pub const ATERM_FD_LIMITS: FdLimits = FdLimits {
    max_bytes: 256 << 20,
    pipe_wait: std::time::Duration::from_secs(5),
};

/// Reads the derivation from descriptor `fd` (its number, as text), handed over as
/// NixOS/nix#16413 writes it (an anonymous temporary file: `O_TMPFILE` or a memfd) or as a
/// pipe.
/// Never blocks past `limits`, never reads more than `limits.max_bytes`:
/// - descriptors 0–2 are refused: they are the hook's own stdin, stdout (its answer to Nix)
///   and stderr, never a derivation;
/// - the descriptor's type is looked at before anything is opened (`stat` of
///   `/proc/self/fd/N` opens nothing): only a regular file (memfds are) or a pipe/FIFO is
///   read; a terminal, `/dev/zero` or any other device, a socket or a directory is refused;
/// - a regular file larger than the cap is refused unread, and read with the cap as bound
///   (it could grow meanwhile);
/// - a pipe is read without blocking (`O_NONBLOCK`, `poll`) until its end, the cap, or
///   `limits.pipe_wait`, whichever comes first: a writer that keeps the pipe open and never
///   writes (or never closes it) makes this fail, never hang. We accept every pipe rather
///   than guess which came from Nix: the bound is what makes any pipe safe.
///
/// The descriptor is reopened through `/proc/self/fd/N`: a fresh open file description reads
/// a file from its start whatever the offset of the one handed over, and no raw descriptor
/// needs adopting (no unsafe code).
pub fn read_aterm_fd(fd: &str, limits: &FdLimits) -> Result<Vec<u8>, AtermFdError> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let number: u32 = match fd.parse() {
        Ok(n) if !fd.is_empty() && fd.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => return Err(AtermFdError::NotANumber),
    };
    if number <= 2 {
        return Err(AtermFdError::StandardStream(number));
    }
    let proc = format!("/proc/self/fd/{number}");
    let meta = std::fs::metadata(&proc).map_err(AtermFdError::Unusable)?;
    let kind = meta.file_type();
    let too_big = |size: u64| AtermFdError::TooBig {
        size,
        cap: limits.max_bytes,
    };
    if kind.is_file() && meta.len() > limits.max_bytes {
        return Err(too_big(meta.len()));
    }
    if !kind.is_file() && !kind.is_fifo() {
        let what = if kind.is_char_device() {
            "a character device (a terminal, /dev/zero, …)"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "neither a regular file nor a pipe"
        };
        return Err(AtermFdError::WrongKind(what));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(&proc)
        .map_err(AtermFdError::Open)?;
    let mut out = Vec::new();
    if kind.is_file() {
        let mut bounded = file.take(limits.max_bytes + 1);
        bounded.read_to_end(&mut out).map_err(AtermFdError::Read)?;
    } else {
        read_pipe(file, limits, &mut out)?;
    }
    if out.len() as u64 > limits.max_bytes {
        return Err(too_big(out.len() as u64));
    }
    Ok(out)
}

/// Reads a non-blocking pipe into `out` until its end, `limits.max_bytes + 1` bytes, or
/// `limits.pipe_wait`.
fn read_pipe(
    mut pipe: std::fs::File,
    limits: &FdLimits,
    out: &mut Vec<u8>,
) -> Result<(), AtermFdError> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::io::Read;
    use std::os::fd::AsFd;
    let deadline = std::time::Instant::now() + limits.pipe_wait;
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                out.extend_from_slice(&chunk[..n]);
                if out.len() as u64 > limits.max_bytes {
                    return Ok(());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
                let mut fds = [PollFd::new(pipe.as_fd(), PollFlags::POLLIN)];
                match poll(&mut fds, timeout) {
                    Ok(0) => {
                        return Err(AtermFdError::PipeStalled {
                            waited: limits.pipe_wait,
                            read: out.len(),
                        })
                    }
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => return Err(AtermFdError::Wait(e)),
                }
            }
            Err(e) => return Err(AtermFdError::Read(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AtermFdError;
    use std::time::Duration;

    /// The one-line texts the hook's error carries after `DRV_ATERM_FD=N: `.
    #[test]
    fn each_error_is_one_line_saying_what_to_give() {
        for (error, text) in [
            (AtermFdError::NotANumber, "not a file descriptor number"),
            (
                AtermFdError::StandardStream(1),
                "descriptor 1 is the hook's own stdout, not a derivation",
            ),
            (
                AtermFdError::WrongKind("a directory"),
                "is a directory: give a file, a memfd or a pipe",
            ),
            (
                AtermFdError::TooBig { size: 9, cap: 8 },
                "holds 9 bytes or more, above the cap of 8 bytes",
            ),
            (
                AtermFdError::PipeStalled {
                    waited: Duration::from_millis(1500),
                    read: 10,
                },
                "a pipe that did not reach its end within 1.5 s (10 bytes read): its writer \
                 keeps it open",
            ),
        ] {
            assert_eq!(error.to_string(), text);
        }
    }
}
