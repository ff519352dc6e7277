//! `--bind PATH`: a host path the caller names for the command to write (its output
//! directory), bound read-write at the same place.
//!
//! exec runs as root, so a link on the path would bind whatever its maker chose (a file of a
//! directory only root can enter). The path is walked from `/` with no symlink anywhere on it
//! ([`trust::open_without_symlinks`]) and the command's user must be able to write what it
//! reaches, by its owner, group and mode as the kernel judges them for that user without
//! supplementary groups (as exec runs it). This is checked before anything is planned, for a
//! clear error, and again when the path is bound, which is made through the descriptor of
//! that second walk (`/proc/self/fd/N`), so nothing renamed or linked there in between is
//! bound instead.

use super::{Bind, ExecError};
use crate::trust;
use nix::sys::stat::{FileStat, SFlag};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A `--bind` path, checked and held open until it is bound.
#[derive(Debug)]
pub struct UserBind {
    /// The path, absolute: where the command sees it.
    pub(crate) path: PathBuf,
    fd: OwnedFd,
}

impl UserBind {
    /// Checks `given` for a command run as `user` (uid, gid): absolute (from the working
    /// directory), no symlink on it, writable by `user`.
    pub fn open(given: &Path, user: (u32, u32)) -> Result<UserBind, ExecError> {
        let bad = |why: String| ExecError::BadBind(given.to_path_buf(), why);
        let path = std::path::absolute(given).map_err(|e| bad(e.to_string()))?;
        let (fd, stat) = trust::open_without_symlinks(&path).map_err(|e| bad(e.to_string()))?;
        if !writable_by(&stat, user) {
            return Err(bad(format!(
                "uid {} (gid {}) cannot write it (owner {}:{}, mode {:o}): chown or chmod it, or \
                 run the command as a --user who can",
                user.0,
                user.1,
                stat.st_uid,
                stat.st_gid,
                stat.st_mode & 0o7777
            )));
        }
        Ok(UserBind { path, fd })
    }

    /// The bind mount of this path for `user`, at its own place (checked again when it is
    /// bound, [`Bind::for_user`]).
    pub(crate) fn bind(&self, user: (u32, u32)) -> Bind {
        Bind {
            for_user: Some(user),
            ..Bind::new(self.path.clone(), self.path.clone(), true)
        }
    }

    /// The entry checked, through its descriptor, to mount from while `self` is held.
    pub(crate) fn source(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }
}

/// Whether `user` (uid, gid, no supplementary groups) may write the entry of `stat`: the
/// owner's bits for its owner, else the group's for its group, else the others', as the
/// kernel's permission check reads the mode (ACLs aside); a directory also needs search
/// (`x`) for its entries to be made. Root may write anything.
fn writable_by(stat: &FileStat, (uid, gid): (u32, u32)) -> bool {
    if uid == 0 {
        return true;
    }
    let is_dir = SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR;
    let wanted = if is_dir { 0o3 } else { 0o2 };
    let shift = if stat.st_uid == uid {
        6
    } else if stat.st_gid == gid {
        3
    } else {
        0
    };
    (stat.st_mode >> shift) & wanted == wanted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(uid: u32, gid: u32, mode: u32) -> FileStat {
        // SAFETY: FileStat is a plain C struct, all zeros a valid value.
        let mut st: FileStat = unsafe { std::mem::zeroed() };
        st.st_uid = uid;
        st.st_gid = gid;
        st.st_mode = mode;
        st
    }

    #[test]
    fn the_owner_class_decides_as_the_kernel_does() {
        let dir = SFlag::S_IFDIR.bits();
        let file = SFlag::S_IFREG.bits();
        for (st, user, writes) in [
            (stat(1000, 1000, dir | 0o755), (1000, 1000), true),
            (stat(1000, 1000, dir | 0o755), (1001, 1000), false),
            (stat(1000, 1000, dir | 0o775), (1001, 1000), true),
            // The owner's bits alone count for the owner, even when others may write.
            (stat(1000, 1000, dir | 0o577), (1000, 1000), false),
            (stat(0, 0, dir | 0o1777), (65534, 65534), true),
            // A directory needs x as well as w for entries to be made in it.
            (stat(65534, 65534, dir | 0o600), (65534, 65534), false),
            (stat(65534, 65534, file | 0o600), (65534, 65534), true),
            (stat(0, 0, file | 0o644), (65534, 65534), false),
            (stat(0, 0, file | 0o444), (0, 0), true),
        ] {
            assert_eq!(writable_by(&st, user), writes, "{:o} {user:?}", st.st_mode);
        }
    }
}
