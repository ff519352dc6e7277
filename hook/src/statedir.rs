//! State directories: the closure cache, the manifests and the leases, where root writes.
//!
//! A [`StateDir`] is checked on every run (its parents trusted, itself a real directory owned
//! by root or the hook's user and not writable by group or others, by the rules of
//! [`crate::trust`]), created 0700 when missing, then used only through its directory
//! descriptor (`openat` with `O_NOFOLLOW`, `renameat`, `unlinkat`), so nothing swapped in
//! afterwards is followed.

use crate::trust::{self, TrustError, WalkError};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Component, Path, PathBuf};

/// Why a state directory cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("state directory {}: {reason}", path.display())]
pub struct StateDirError {
    /// The state directory.
    pub(crate) path: PathBuf,
    /// What is wrong with it, or with a directory on its way.
    pub(crate) reason: Reason,
}

/// What is wrong with a state directory (see [`StateDirError`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Reason {
    /// The path is relative.
    #[error("not an absolute path")]
    NotAbsolute,
    /// The path holds `.` or `..`.
    #[error("must not hold `.` or `..`")]
    Dots,
    /// A directory on the way (or the state directory) could not be opened or inspected: the
    /// directory, and what the system said.
    #[error("{path}: {1}", path = .0.display())]
    Open(PathBuf, #[source] nix::Error),
    /// A missing directory could not be created: the directory, and what the system said.
    #[error("cannot create {path}: {1}", path = .0.display())]
    Create(PathBuf, #[source] nix::Error),
    /// A component is a symlink or no directory.
    #[error(
        "{} is a symlink or not a directory: remove it (the hook recreates it owned by root, \
         mode 0700)",
        .0.display()
    )]
    NotADirectory(PathBuf),
    /// A component is not trusted by its owner or mode.
    #[error(transparent)]
    Untrusted(TrustError),
}

/// Reads `file` to its end, `size` bytes expected (from a `stat` already made): no second
/// `stat` and no `lseek` as `std::fs::read` makes, and one short read to see the end.
pub(crate) fn read_sized(file: &File, size: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
    // `Take` reads with the generic loop, which trusts the capacity it is given.
    file.take(u64::MAX).read_to_end(&mut out)?;
    Ok(out)
}

/// Takes ownership of `fd`, just returned by `open(2)` or `openat(2)`.
fn adopt(fd: RawFd) -> OwnedFd {
    // SAFETY: the caller passes a descriptor that open(2)/openat(2) has just returned and
    // that nothing else owns, so it is open and closed exactly once, by the `OwnedFd`.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// A verified state directory, used through its descriptor.
#[derive(Debug)]
pub struct StateDir {
    /// Its path, for messages.
    pub(crate) path: PathBuf,
    fd: OwnedFd,
}

impl StateDir {
    /// Opens `path`, creating it (and missing parents) with mode 0700. Every component must be
    /// a real directory (not a symlink) passing [`trust::check_entry`]; a root-owned sticky
    /// one (`/tmp`) may be crossed, but is never the state directory itself.
    pub fn open(path: &Path) -> Result<StateDir, StateDirError> {
        Self::open_with(path, true).map(|d| d.expect("created"))
    }

    /// As [`StateDir::open`], but `None` when the directory does not exist (nothing is
    /// created).
    pub(crate) fn open_existing(path: &Path) -> Result<Option<StateDir>, StateDirError> {
        Self::open_with(path, false)
    }

    fn open_with(path: &Path, create: bool) -> Result<Option<StateDir>, StateDirError> {
        let fail = |reason: Reason| StateDirError {
            path: path.to_path_buf(),
            reason,
        };
        if !path.is_absolute() {
            return Err(fail(Reason::NotAbsolute));
        }
        if path
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::RootDir))
        {
            return Err(fail(Reason::Dots));
        }
        let how = trust::Walk {
            directories: true,
            judged: true,
            create,
            follow: false,
        };
        // The walk judges each directory as crossed; the last is kept in, so it is judged as
        // an entry of its own.
        let walked = trust::walk(path, how).and_then(|dir| {
            let (uid, mode) = (dir.stat.st_uid, dir.stat.st_mode);
            trust::check_entry(&dir.path, uid, mode, false).map_err(WalkError::Untrusted)?;
            Ok(dir)
        });
        let reason = match walked {
            Ok(dir) => {
                return Ok(Some(StateDir {
                    path: path.to_path_buf(),
                    fd: dir.fd,
                }))
            }
            Err(WalkError::Open(_, nix::Error::ENOENT)) if !create => return Ok(None),
            Err(WalkError::Open(at, nix::Error::ELOOP | nix::Error::ENOTDIR))
            | Err(WalkError::Symlink(at)) => Reason::NotADirectory(at),
            Err(WalkError::Open(at, source)) => Reason::Open(at, source),
            Err(WalkError::Create(at, source)) => Reason::Create(at, source),
            Err(WalkError::Untrusted(e)) => Reason::Untrusted(e),
            Err(WalkError::ParentDir) => Reason::Dots,
        };
        Err(fail(reason))
    }

    fn raw(&self) -> std::os::fd::RawFd {
        self.fd.as_fd().as_raw_fd()
    }

    /// Reads the regular file `name` as bytes (never through a link).
    pub(crate) fn read_bytes(&self, name: &str) -> std::io::Result<Vec<u8>> {
        let fd = nix::fcntl::openat(
            Some(self.raw()),
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let file = File::from(adopt(fd));
        let st = fstat(file.as_raw_fd())?;
        if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
            return Err(std::io::Error::other("not a regular file"));
        }
        read_sized(&file, u64::try_from(st.st_size).unwrap_or(0))
    }

    /// Opens (creating, mode 0600) the file `name` for a lock, never following a link.
    pub fn open_lock(&self, name: &str) -> std::io::Result<File> {
        let fd = nix::fcntl::openat(
            Some(self.raw()),
            name,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )?;
        Ok(File::from(adopt(fd)))
    }

    /// Writes `bytes` to `name` atomically (a new temporary file, then `renameat`), with
    /// `mode`. A reader sees the old file or the new one, never a torn one. `durable`: the data
    /// reaches the disk before the rename (for files that outlive a reboot, like the closure
    /// cache; manifests and leases describe running builds and need not).
    pub(crate) fn write_atomic(
        &self,
        name: &str,
        bytes: &[u8],
        mode: u32,
        durable: bool,
    ) -> std::io::Result<()> {
        let mut attempts = 0..100u32;
        let (tmp, fd) = loop {
            let attempt = attempts
                .next()
                .ok_or_else(|| std::io::Error::other("cannot create a temporary file"))?;
            let tmp = format!(".tmp-{}-{attempt}-{}", std::process::id(), nanos());
            match nix::fcntl::openat(
                Some(self.raw()),
                tmp.as_str(),
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o600),
            ) {
                Ok(fd) => break (tmp, fd),
                Err(nix::Error::EEXIST) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let mut file = File::from(adopt(fd));
        let written = file
            .write_all(bytes)
            .and_then(|()| {
                nix::sys::stat::fchmod(file.as_raw_fd(), Mode::from_bits_truncate(mode))
                    .map_err(std::io::Error::from)
            })
            .and_then(|()| if durable { file.sync_data() } else { Ok(()) })
            .and_then(|()| {
                nix::fcntl::renameat(Some(self.raw()), tmp.as_str(), Some(self.raw()), name)
                    .map_err(std::io::Error::from)
            });
        if written.is_err() {
            let _ = self.remove(&tmp);
        }
        written
    }

    /// Removes the entry `name` (a file or a link; never what a link points to).
    pub(crate) fn remove(&self, name: &str) -> std::io::Result<()> {
        Ok(unlinkat(
            Some(self.raw()),
            name,
            UnlinkatFlags::NoRemoveDir,
        )?)
    }

    /// Makes the directory `name` here with `mode` (an existing directory is kept; anything
    /// else there is an error).
    pub(crate) fn make_dir(&self, name: &str, mode: u32) -> std::io::Result<()> {
        match nix::sys::stat::mkdirat(Some(self.raw()), name, Mode::from_bits_truncate(mode)) {
            Ok(()) => Ok(()),
            Err(nix::Error::EEXIST) => {
                let st = fstatat(Some(self.raw()), name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
                if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR {
                    Ok(())
                } else {
                    Err(std::io::Error::other("exists and is not a directory"))
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Makes the symlink `name` here pointing at `target` (never followed by the hook).
    pub(crate) fn make_link(&self, name: &str, target: &str) -> std::io::Result<()> {
        Ok(nix::unistd::symlinkat(target, Some(self.raw()), name)?)
    }

    /// Removes the empty directory `name` here (never a link's target, never a non-empty or
    /// mounted-on directory: those stay, with an error).
    pub(crate) fn remove_dir(&self, name: &str) -> std::io::Result<()> {
        Ok(unlinkat(Some(self.raw()), name, UnlinkatFlags::RemoveDir)?)
    }

    /// Whether the directory may hold `n` entries or more (besides `.` and `..`), answered
    /// without reading it where that is exact: on tmpfs (where `/run` is), which sizes a
    /// directory at 20 bytes an entry, `.` and `..` included (`BOGO_DIRENT_SIZE` in the
    /// kernel's `mm/shmem.c`). Elsewhere, or when it cannot tell, true: the caller lists it.
    ///
    /// It stays, at the threshold: listing the manifests on every tagged build instead took
    /// 1.05–1.07x the wall time of a warm tagged run with 33 or 60 manifests there (1.05–1.08x
    /// CPU; the same binary against itself 0.98–1.00x), paired run for run.
    pub(crate) fn may_hold(&self, n: usize) -> bool {
        use nix::sys::statfs::{fstatfs, TMPFS_MAGIC};
        const TMPFS_ENTRY_SIZE: i64 = 20;
        match (fstatfs(&self.fd), fstat(self.raw())) {
            (Ok(fs), Ok(st)) if fs.filesystem_type() == TMPFS_MAGIC => {
                st.st_size >= (n as i64 + 2) * TMPFS_ENTRY_SIZE
            }
            _ => true,
        }
    }

    /// The names of the entries in this directory.
    pub(crate) fn names(&self) -> Vec<String> {
        let Ok(mut dir) = nix::dir::Dir::openat(
            Some(self.raw()),
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) else {
            return Vec::new();
        };
        dir.iter()
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
            .filter(|n| n != "." && n != "..")
            .collect()
    }
}

fn nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn mode(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    #[test]
    fn state_directories_are_created_0700_and_used_without_following_links() {
        let t = tempfile::tempdir().unwrap();
        let dir = StateDir::open(&t.path().join("a/b")).unwrap();
        let m = std::fs::metadata(t.path().join("a/b")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o700);
        dir.write_atomic("x", b"hello", 0o444, false).unwrap();
        assert_eq!(dir.read_bytes("x").unwrap(), b"hello");
        let victim = t.path().join("victim");
        std::fs::write(&victim, "x").unwrap();
        symlink(&victim, t.path().join("a/b/link")).unwrap();
        assert!(dir.read_bytes("link").is_err());
        assert!(dir.open_lock("link").is_err());
        dir.remove("link").unwrap();
        assert!(victim.exists());
        symlink(t.path().join("a"), t.path().join("c")).unwrap();
        let e = StateDir::open(&t.path().join("c/b")).unwrap_err();
        assert!(
            matches!(&e.reason, Reason::NotADirectory(p) if p == &t.path().join("c")),
            "{e:?}"
        );
        assert!(e.to_string().contains("symlink"), "{e}");
        assert!(StateDir::open_existing(&t.path().join("absent"))
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_sticky_directory_may_be_crossed_but_not_be_the_state_directory() {
        let t = tempfile::tempdir().unwrap();
        let tmp = t.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        mode(&tmp, 0o1777);
        StateDir::open(&tmp.join("state")).unwrap();
        let e = StateDir::open(&tmp).unwrap_err();
        assert!(
            matches!(&e.reason, Reason::Untrusted(TrustError::Writable(path, _)) if path == &tmp),
            "{e:?}"
        );
        mode(&tmp, 0o777);
        assert!(matches!(
            StateDir::open(&tmp.join("state")).unwrap_err().reason,
            Reason::Untrusted(TrustError::Writable(..))
        ));
        assert!(matches!(
            StateDir::open(Path::new("relative")).unwrap_err().reason,
            Reason::NotAbsolute
        ));
    }

    /// The walk opens good directories (crossing a root-owned sticky one), says a missing one
    /// is absent, and refuses a writable one, a symlink and a file on the way.
    #[test]
    fn the_walk_opens_good_directories_and_refuses_the_rest() {
        fn outcome(r: Result<Option<StateDir>, StateDirError>) -> String {
            match r {
                Ok(Some(_)) => "open".to_string(),
                Ok(None) => "absent".to_string(),
                Err(e) => match e.reason {
                    Reason::Untrusted(TrustError::Writable(..)) => "writable".to_string(),
                    Reason::NotADirectory(_) => "not a directory".to_string(),
                    other => format!("{other:?}"),
                },
            }
        }
        let t = tempfile::tempdir().unwrap();
        let base = t.path();
        std::fs::create_dir_all(base.join("good/state")).unwrap();
        std::fs::create_dir_all(base.join("open/state")).unwrap();
        mode(&base.join("open"), 0o777);
        std::fs::create_dir_all(base.join("sticky")).unwrap();
        mode(&base.join("sticky"), 0o1777);
        symlink(base.join("good"), base.join("linked")).unwrap();
        std::fs::write(base.join("file"), b"").unwrap();
        for (rel, create, expected) in [
            ("good/state", false, "open"),
            ("good/new", false, "absent"),
            ("good/made/deeper", true, "open"),
            ("open/state", false, "writable"),
            ("sticky", false, "writable"),
            ("sticky/made", true, "open"),
            ("linked/state", false, "not a directory"),
            ("file/state", false, "not a directory"),
            ("file", false, "not a directory"),
        ] {
            let path = base.join(rel);
            let walked = outcome(StateDir::open_with(&path, create));
            assert_eq!(walked, expected, "{rel}");
        }
    }

    /// On tmpfs the directory's size counts its entries exactly; anywhere else the answer is
    /// "maybe", so a caller lists it.
    #[test]
    fn may_hold_counts_entries_on_tmpfs_and_says_maybe_elsewhere() {
        use nix::sys::statfs::{statfs, TMPFS_MAGIC};
        let shm = Path::new("/dev/shm");
        let on_tmpfs = statfs(shm).is_ok_and(|f| f.filesystem_type() == TMPFS_MAGIC);
        if on_tmpfs {
            let t = tempfile::tempdir_in(shm).unwrap();
            let dir = StateDir::open(&t.path().join("state")).unwrap();
            for i in 0..5 {
                assert!(!dir.may_hold(5), "{i} entries");
                dir.write_atomic(&format!("m{i}.json"), b"{}", 0o444, false)
                    .unwrap();
            }
            assert!(dir.may_hold(5));
            dir.remove("m0.json").unwrap();
            assert!(!dir.may_hold(5), "a removed entry no longer counts");
        }
        let t = tempfile::tempdir().unwrap();
        let dir = StateDir::open(&t.path().join("state")).unwrap();
        let tmp_on_tmpfs = statfs(t.path()).is_ok_and(|f| f.filesystem_type() == TMPFS_MAGIC);
        // Empty: false where the size counts (tmpfs), "maybe" (true) anywhere else.
        assert_eq!(dir.may_hold(64), !tmp_on_tmpfs);
    }
}
