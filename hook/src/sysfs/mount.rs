//! Read-only bind mounts in the host's mount namespace, and their removal.

use crate::trust;
use nix::fcntl::OFlag;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::Mode;
use nix::sys::statvfs::{statvfs, FsFlags};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};

/// How often [`detach`] unmounts one mount point at most (a point mounted over repeatedly).
const MAX_STACKED: usize = 8;

/// Why a read-only bind could not be made. One line.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MountError {
    /// The source (its path) failed the trust checks, does not exist or is not a directory,
    /// and why.
    #[error("cannot bind {path}: {1}", path = .0.display())]
    Source(PathBuf, String),
    /// A mount call failed: what was being done, the mount point, and what the kernel said.
    #[error("{0} {target}: {2}", target = .1.display())]
    Mount(&'static str, PathBuf, #[source] nix::Error),
    /// The remount left the mount writable.
    #[error("{} is still writable after its read-only remount", .0.display())]
    StillWritable(PathBuf),
}

/// Binds the directory `source` (its path trusted by [`trust::resolve`], and bound through the
/// descriptor that walk reached, so what is bound is what was checked) at `target`, alone (no
/// `MS_REC`), and remounts it read-only, `nosuid`, `nodev`, `noexec`. On any failure after the
/// bind, the bind is undone: nothing writable is left.
pub(super) fn bind_read_only(source: &Path, target: &Path) -> Result<(), MountError> {
    let dir = trust::resolve(source)
        .map_err(|e| MountError::Source(source.to_path_buf(), e.to_string()))?;
    if dir.stat.st_mode & nix::libc::S_IFMT != nix::libc::S_IFDIR {
        return Err(MountError::Source(dir.path, "not a directory".into()));
    }
    let failed = |what| move |source| MountError::Mount(what, target.to_path_buf(), source);
    let by_descriptor = format!("/proc/self/fd/{}", dir.fd.as_raw_fd());
    mount(
        Some(by_descriptor.as_str()),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(failed("cannot bind at"))?;
    let read_only = mount(
        None::<&str>,
        target,
        None::<&str>,
        MsFlags::MS_BIND
            | MsFlags::MS_REMOUNT
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV
            | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(failed("cannot make read-only"))
    .and_then(|()| match statvfs(target) {
        Ok(vfs) if vfs.flags().contains(FsFlags::ST_RDONLY) => Ok(()),
        Ok(_) => Err(MountError::StillWritable(target.to_path_buf())),
        Err(e) => Err(failed("cannot check")(e)),
    });
    if read_only.is_err() {
        let _ = detach(target);
    }
    read_only
}

/// Unmounts whatever is mounted at `target` (lazily: a process inside keeps its view), until
/// nothing is. A target that is no mount point (or does not exist) is left as it is.
pub(super) fn detach(target: &Path) -> Result<(), MountError> {
    let failed = |source| MountError::Mount("cannot unmount", target.to_path_buf(), source);
    for _ in 0..MAX_STACKED {
        match umount2(target, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW) {
            Ok(()) => continue,
            Err(nix::Error::EINVAL) | Err(nix::Error::ENOENT) => return Ok(()),
            Err(source) => return Err(failed(source)),
        }
    }
    Err(failed(nix::Error::EBUSY))
}

/// Runs `work` in the mount namespace of this process's parent (the Nix that ran the hook),
/// on a thread of its own (`unshare(CLONE_FS)`, then `setns`), so that the mounts it makes
/// are in the namespace Nix clones the build's sandbox from. Nix runs its hook in the
/// namespace it saved at start (`restoreMountNamespace`), which need not be its own: seen
/// on Nix 2.8 as root without a daemon, where `nix-build` runs in a private namespace of its
/// own and a mount made in the hook's never reached the build. Mounts in that namespace end
/// with it, when that Nix ends.
pub(super) fn in_parents_namespace<T: Send>(
    work: impl FnOnce() -> T + Send,
) -> Result<T, MountError> {
    use nix::sched::{setns, unshare, CloneFlags};
    let parent = nix::unistd::getppid();
    let path = PathBuf::from(format!("/proc/{parent}/ns/mnt"));
    let failed =
        |source| MountError::Mount("cannot enter the mount namespace", path.clone(), source);
    let ns = nix::fcntl::open(&path, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
        .map(|fd| {
            // SAFETY: open(2) just returned the descriptor; nothing else owns it.
            unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
        })
        .map_err(failed)?;
    // The parent could have ended (and its pid been reused) before the open.
    if nix::unistd::getppid() != parent {
        return Err(failed(nix::Error::ESRCH));
    }
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                unshare(CloneFlags::CLONE_FS).map_err(failed)?;
                setns(&ns, CloneFlags::CLONE_NEWNS).map_err(failed)?;
                Ok(work())
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}
