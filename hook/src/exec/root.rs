//! The private root: its staging directory, a minimal Nix-like tree, and the bind mounts.

use super::{ExecError, UserBind};
use nix::mount::{mount, MsFlags};
use std::path::{Path, PathBuf};

/// One bind mount of the rendered plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// Path inside the new root.
    pub inside: PathBuf,
    /// Host path.
    pub(crate) outside: PathBuf,
    /// Writable (device nodes and `--bind` paths); everything else is bound read-only.
    pub(crate) writable: bool,
    /// For a `--bind` path, the command's user (uid, gid): the path is checked again when it
    /// is bound ([`UserBind::open`]: no symlink on it, writable by that user) and bound
    /// through the descriptor that walk reached, not by its name.
    pub(crate) for_user: Option<(u32, u32)>,
}

impl Bind {
    /// `outside` bound at `inside`, `writable` or not (not a `--bind` path).
    pub(super) fn new(inside: PathBuf, outside: PathBuf, writable: bool) -> Bind {
        Bind {
            inside,
            outside,
            writable,
            for_user: None,
        }
    }
}

/// The host directory the private root is mounted on, `<runtime_dir>/exec-root`: a state
/// directory of root's (checked from `/` without following links), mode 0700. Only exec
/// itself uses the path: the command's root is a tmpfs mounted over it inside exec's own mount
/// namespace, so the directory is never reached through by the command, and no one else on
/// the host needs to see into it.
pub(super) fn staging_root(runtime_dir: &Path) -> Result<PathBuf, ExecError> {
    use std::os::unix::fs::PermissionsExt;
    let root = runtime_dir.join("exec-root");
    crate::statedir::StateDir::open(&root)?;
    // One made by an older exec was 0755.
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| ExecError::io(&root, e))?;
    Ok(root)
}

/// `/dev` (pseudo-devices bound from the host, `shm`, the fd links), `/proc`, `/tmp`,
/// `/build`, and an `/etc` with only `passwd`, `group` and `hosts`, as in Nix's sandbox.
pub(super) fn minimal_root(root: &Path, user: (u32, u32)) -> Result<(), ExecError> {
    let io = ExecError::io;
    for dir in ["dev", "dev/shm", "proc", "tmp", "build", "etc"] {
        let p = root.join(dir);
        std::fs::create_dir_all(&p).map_err(|e| io(p.clone(), e))?;
    }
    for dev in ["null", "zero", "full", "random", "urandom", "tty"] {
        let node = Path::new("/dev").join(dev);
        bind(root, &Bind::new(node.clone(), node, true))?;
    }
    for (link, target) in [
        ("dev/fd", "/proc/self/fd"),
        ("dev/stdin", "/proc/self/fd/0"),
        ("dev/stdout", "/proc/self/fd/1"),
        ("dev/stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, root.join(link)).map_err(|e| io(root.join(link), e))?;
    }
    let sys = |what: &str, e| ExecError::sys(format!("mounting {what}"), e);
    for dir in ["dev/shm", "tmp"] {
        let at = root.join(dir);
        mount(
            Some("tmpfs"),
            &at,
            Some("tmpfs"),
            MsFlags::empty(),
            Some("mode=1777"),
        )
        .map_err(|e| sys(&format!("/{dir}"), e))?;
    }
    // /build belongs to the command's user, as a build's directory to its build user.
    nix::unistd::chown(
        &root.join("build"),
        Some(nix::unistd::Uid::from_raw(user.0)),
        Some(nix::unistd::Gid::from_raw(user.1)),
    )
    .map_err(|e| sys("/build", e))?;
    for (file, text) in [
        (
            "etc/passwd",
            "root:x:0:0:root:/build:/noshell\nnobody:x:65534:65534:nobody:/:/noshell\n",
        ),
        ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
        ("etc/hosts", "127.0.0.1 localhost\n::1 localhost\n"),
    ] {
        std::fs::write(root.join(file), text).map_err(|e| io(root.join(file), e))?;
    }
    Ok(())
}

/// Bind-mounts `b.outside` at `b.inside` under `root`, making the mount point (a directory or
/// an empty file, like the source) first. Symlinks in the source are followed, as Nix 2.8 does
/// (the hook's exposures were judged with them), except in a `--bind` path, which holds none:
/// it is walked again here, in the namespace the mount is made in (a descriptor of another
/// namespace's mount cannot be bound), and bound through the descriptor.
pub(super) fn bind(root: &Path, b: &Bind) -> Result<(), ExecError> {
    let target = root.join(b.inside.strip_prefix("/").unwrap_or(&b.inside));
    // Held open until the mount is made.
    let walked = match b.for_user {
        Some(user) => Some(UserBind::open(&b.outside, user)?),
        None => None,
    };
    let source = walked
        .as_ref()
        .map_or_else(|| b.outside.clone(), UserBind::source);
    let meta = std::fs::metadata(&source).map_err(|e| ExecError::io(&b.outside, e))?;
    let io = |e| ExecError::io(&target, e);
    if meta.is_dir() {
        std::fs::create_dir_all(&target).map_err(io)?;
    } else {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        if !target.exists() {
            std::fs::File::create(&target).map_err(io)?;
        }
    }
    mount(
        Some(&source),
        &target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| {
        let what = format!("binding {} at {}", b.outside.display(), b.inside.display());
        ExecError::sys(what, e)
    })?;
    if !b.writable {
        mount(
            None::<&str>,
            &target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID,
            None::<&str>,
        )
        .map_err(|e| ExecError::sys(format!("making {} read-only", b.inside.display()), e))?;
    }
    Ok(())
}
