//! The lease directory's lock: every lease decision is taken under an exclusive `flock` of
//! `<runtime_dir>/leases/.lock`, so two hooks never pick the same GPU.

use crate::statedir::StateDir;
use nix::fcntl::{Flock, FlockArg};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The lock file's name in the lease directory.
pub(super) const LOCK_FILE: &str = ".lock";

/// The lock held; released when dropped.
pub(super) type Held = Flock<std::fs::File>;

/// Why the lock could not be taken; one line.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The lock file could not be opened: the file, and why.
    #[error("cannot open {path}: {1}", path = .0.display())]
    Open(PathBuf, #[source] std::io::Error),
    /// Another process held the lock for the whole wait: the lock file, and how long the hook
    /// waited.
    #[error(
        "the GPU lease lock {path} stayed held for {secs} s: find the process holding it \
         (`fuser {path}`)",
        path = .0.display(),
        secs = .1.as_secs()
    )]
    StayedHeld(PathBuf, Duration),
    /// `flock` failed for another reason: the lock file, and why.
    #[error("cannot lock {path}: {1}", path = .0.display())]
    Lock(PathBuf, #[source] nix::Error),
}

/// Takes the exclusive lock of the lease directory `dir`, waiting at most `wait`, and at least a
/// second so that a lease wait of 0 still rides out a peer's moment under the lock. Another
/// hook holds it only for a moment; a lock held longer is a stuck or hostile process, and the
/// build fails rather than hang.
pub(super) fn lock(dir: &StateDir, wait: Duration) -> Result<Held, LockError> {
    let path = dir.path.join(LOCK_FILE);
    let started = Instant::now();
    let mut file = dir
        .open_lock(LOCK_FILE)
        .map_err(|e| LockError::Open(path.clone(), e))?;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((f, nix::Error::EWOULDBLOCK)) => {
                if started.elapsed() >= wait.max(Duration::from_secs(1)) {
                    return Err(LockError::StayedHeld(path, started.elapsed()));
                }
                file = f;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err((_, source)) => return Err(LockError::Lock(path, source)),
        }
    }
}
