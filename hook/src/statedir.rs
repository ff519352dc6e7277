//! Trusted paths and state directories: what root may read its orders from, run, or write in.
//!
//! The hook runs as root on input from anyone who can submit a build, so a file or directory
//! it trusts must be one that only root could have changed, as sudo trusts `sudoers`:
//! - [`check_trusted`]: every component of the path, and every symlink target on the way,
//!   is owned by root (or by the user running the hook) and not writable by group or others.
//!   A root-owned sticky directory (`/tmp`) may be crossed: others cannot replace what root
//!   owns in it, and the next component is checked in turn.
//! - [`program`]: a program named in the configuration is absolute and trusted likewise.
//! - [`StateDir`]: the closure cache, the manifests and the leases. Checked with `lstat` on
//!   every run (root-owned, no group/other write, not a symlink), created 0700 when missing,
//!   then used only through its directory descriptor (`openat` with `O_NOFOLLOW`,
//!   `renameat`, `unlinkat`), so nothing swapped in afterwards is followed.

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode, SFlag};
use std::ffi::OsStr;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// Whether `uid` may own a trusted file: root, or the user running the hook.
fn trusted_owner(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::geteuid().as_raw()
}

fn describe(mode: u32) -> String {
    format!("{:o}", mode & 0o7777)
}

/// Checks that `path` (absolute) is trusted: every component, and every symlink target met,
/// owned by root (or the hook's user) and not writable by group or others. Errors are one line
/// naming the offending component and the fix.
pub fn check_trusted(path: &Path) -> Result<(), String> {
    resolve_trusted(path).map(|_| ())
}

/// [`check_trusted`], returning the path with every symlink resolved, and the `lstat` of its
/// last component (`None` for `/`): each component was checked (with `lstat` and `readlink`,
/// nothing opened) and is no symlink, so a file opened from it (`openat` of its last name in
/// its parent) is the one checked, unless root changed it.
pub fn resolve_trusted(path: &Path) -> Result<(PathBuf, Option<std::fs::Metadata>), String> {
    if !path.is_absolute() {
        return Err(format!(
            "{} is not an absolute path: name it from /",
            path.display()
        ));
    }
    let mut resolved = PathBuf::from("/");
    let mut pending: Vec<std::ffi::OsString> = names(path).into_iter().rev().collect();
    let mut links = 0;
    let mut last = None;
    check_entry(&resolved, None)?;
    while let Some(name) = pending.pop() {
        if name == ".." {
            resolved.pop();
            last = None;
            continue;
        }
        let here = resolved.join(&name);
        let meta = match std::fs::symlink_metadata(&here) {
            Ok(m) => m,
            Err(e) => return Err(format!("{}: {e}", here.display())),
        };
        if meta.file_type().is_symlink() {
            links += 1;
            if links > crate::symlinks::MAX_HOPS {
                return Err(format!("{}: too many symlinks", path.display()));
            }
            // The link itself lives in a checked directory; its target is checked in turn.
            let target =
                std::fs::read_link(&here).map_err(|e| format!("{}: {e}", here.display()))?;
            if target.is_absolute() {
                resolved = PathBuf::from("/");
            }
            for n in names(&target).into_iter().rev() {
                pending.push(n);
            }
            continue;
        }
        check_entry(&here, Some(&meta))?;
        resolved = here;
        last = Some(meta);
    }
    Ok((resolved, last))
}

/// Reads `file` to its end, `size` bytes expected (from a `stat` already made): no second
/// `stat` and no `lseek` as `std::fs::read` makes, and one short read to see the end.
pub fn read_sized(file: &File, size: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
    // `Take` reads with the generic loop, which trusts the capacity it is given.
    file.take(u64::MAX).read_to_end(&mut out)?;
    Ok(out)
}

fn names(path: &Path) -> Vec<std::ffi::OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

fn check_entry(path: &Path, meta: Option<&std::fs::Metadata>) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let owned;
    let meta = match meta {
        Some(m) => m,
        None => {
            owned =
                std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
            &owned
        }
    };
    if !trusted_owner(meta.uid()) {
        return Err(format!(
            "{} is owned by uid {}, not by root: run `chown root {}`",
            path.display(),
            meta.uid(),
            path.display()
        ));
    }
    let sticky_root_dir = meta.is_dir() && meta.mode() & 0o1000 != 0 && meta.uid() == 0;
    if meta.mode() & 0o022 != 0 && !sticky_root_dir {
        return Err(format!(
            "{} is writable by group or others (mode {}): run `chmod go-w {}`",
            path.display(),
            describe(meta.mode()),
            path.display()
        ));
    }
    Ok(())
}

/// The program `name` from the configuration, checked: an absolute path that is trusted
/// ([`check_trusted`]). A bare name (only the built-in default, `nix-store`) is looked up in
/// `PATH` and the file found must be trusted too.
pub fn program(name: &Path) -> Result<PathBuf, String> {
    let found = if name.is_absolute() {
        name.to_path_buf()
    } else if name.components().count() == 1 {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .filter(|d| d.is_absolute())
            .map(|d| d.join(name))
            .find(|c| c.is_file())
            .ok_or_else(|| {
                format!(
                    "{} not found in PATH: set nix_store in the config to the absolute path \
                     of the nix-store program",
                    name.display()
                )
            })?
    } else {
        return Err(format!(
            "program {} is not absolute: set nix_store in the config to an absolute path",
            name.display()
        ));
    };
    check_trusted(&found).map_err(|e| format!("refusing to run {}: {e}", found.display()))?;
    Ok(found)
}

/// A verified state directory, used through its descriptor.
#[derive(Debug)]
pub struct StateDir {
    /// Its path, for messages.
    pub path: PathBuf,
    fd: OwnedFd,
}

impl StateDir {
    /// Opens `path`, creating it (and missing parents) with mode 0700. The parents must be
    /// trusted ([`check_trusted`]); the directory itself must be a real directory (not a
    /// symlink), owned by root (or the hook's user) and not writable by group or others.
    pub fn open(path: &Path) -> Result<StateDir, String> {
        Self::open_with(path, true).map(|d| d.expect("created"))
    }

    /// As [`StateDir::open`], but `None` when the directory does not exist (nothing is
    /// created).
    pub fn open_existing(path: &Path) -> Result<Option<StateDir>, String> {
        Self::open_with(path, false)
    }

    fn open_with(path: &Path, create: bool) -> Result<Option<StateDir>, String> {
        let fail = |what: String| format!("state directory {}: {what}", path.display());
        if !path.is_absolute() {
            return Err(fail("not an absolute path".into()));
        }
        // Walk from / with descriptors: each component is opened relative to its checked
        // parent with O_NOFOLLOW, so no symlink is ever followed on the way.
        let mut parts = Vec::new();
        for c in path.components() {
            match c {
                Component::Normal(n) => parts.push(n.to_os_string()),
                Component::RootDir => {}
                _ => return Err(fail("must not hold `.` or `..`".into())),
            }
        }
        let open_dir = |at: Option<&OwnedFd>, name: &OsStr| -> nix::Result<OwnedFd> {
            let flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY;
            let fd = match at {
                Some(d) => nix::fcntl::openat(Some(d.as_raw_fd()), name, flags, Mode::empty())?,
                None => nix::fcntl::open(name, flags, Mode::empty())?,
            };
            // SAFETY: `fd` was just returned by open(2) and is owned by nobody else.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        let mut dir = open_dir(None, OsStr::new("/")).map_err(|e| fail(format!("/: {e}")))?;
        let mut here = PathBuf::from("/");
        let last = parts.len();
        for (i, name) in parts.iter().enumerate() {
            here.push(name);
            let is_last = i + 1 == last;
            let next = match open_dir(Some(&dir), name) {
                Ok(fd) => fd,
                Err(nix::Error::ENOENT) if create => {
                    match nix::sys::stat::mkdirat(
                        Some(dir.as_raw_fd()),
                        name.as_os_str(),
                        Mode::from_bits_truncate(0o700),
                    ) {
                        Ok(()) | Err(nix::Error::EEXIST) => {}
                        Err(e) => {
                            return Err(fail(format!("cannot create {}: {e}", here.display())))
                        }
                    }
                    open_dir(Some(&dir), name)
                        .map_err(|e| fail(format!("{}: {e}", here.display())))?
                }
                Err(nix::Error::ENOENT) => return Ok(None),
                Err(nix::Error::ELOOP) | Err(nix::Error::ENOTDIR) => {
                    return Err(fail(format!(
                        "{} is a symlink or not a directory: remove it (the hook recreates it \
                         owned by root, mode 0700)",
                        here.display()
                    )))
                }
                Err(e) => return Err(fail(format!("{}: {e}", here.display()))),
            };
            let st =
                fstat(next.as_raw_fd()).map_err(|e| fail(format!("{}: {e}", here.display())))?;
            let sticky_root = st.st_mode & 0o1000 != 0 && st.st_uid == 0 && !is_last;
            if !trusted_owner(st.st_uid) {
                return Err(fail(format!(
                    "{} is owned by uid {}, not by root: remove it, or `chown root {}`",
                    here.display(),
                    st.st_uid,
                    here.display()
                )));
            }
            if st.st_mode & 0o022 != 0 && !sticky_root {
                return Err(fail(format!(
                    "{} is writable by group or others (mode {}): run `chmod go-w {}`",
                    here.display(),
                    describe(st.st_mode),
                    here.display()
                )));
            }
            dir = next;
        }
        Ok(Some(StateDir {
            path: path.to_path_buf(),
            fd: dir,
        }))
    }

    fn raw(&self) -> std::os::fd::RawFd {
        self.fd.as_fd().as_raw_fd()
    }

    /// Opens the regular file `name` in this directory for reading, never following a link.
    pub fn open_read(&self, name: &str) -> std::io::Result<File> {
        self.open_read_sized(name).map(|(file, _)| file)
    }

    /// As [`StateDir::open_read`], with the file's size.
    fn open_read_sized(&self, name: &str) -> std::io::Result<(File, u64)> {
        let fd = nix::fcntl::openat(
            Some(self.raw()),
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        // SAFETY: `fd` was just returned by openat(2) and is owned by nobody else.
        let file = unsafe { File::from_raw_fd(fd) };
        let st = fstat(file.as_raw_fd())?;
        if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
            return Err(std::io::Error::other("not a regular file"));
        }
        Ok((file, u64::try_from(st.st_size).unwrap_or(0)))
    }

    /// Reads the regular file `name` as bytes (never through a link).
    pub fn read_bytes(&self, name: &str) -> std::io::Result<Vec<u8>> {
        let (file, size) = self.open_read_sized(name)?;
        read_sized(&file, size)
    }

    /// Opens (creating, mode 0600) the file `name` for a lock, never following a link.
    pub fn open_lock(&self, name: &str) -> std::io::Result<File> {
        let fd = nix::fcntl::openat(
            Some(self.raw()),
            name,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )?;
        // SAFETY: `fd` was just returned by openat(2) and is owned by nobody else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Writes `bytes` to `name` atomically (a new temporary file, then `renameat`), with
    /// `mode`. A reader sees the old file or the new one, never a torn one. `durable`: the data
    /// reaches the disk before the rename (for files that outlive a reboot, like the closure
    /// cache; manifests and leases describe running builds and need not).
    pub fn write_atomic(
        &self,
        name: &str,
        bytes: &[u8],
        mode: u32,
        durable: bool,
    ) -> std::io::Result<()> {
        let mut tmp = String::new();
        let mut fd = None;
        for attempt in 0..100u32 {
            tmp = format!(".tmp-{}-{attempt}-{}", std::process::id(), nanos());
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
                Ok(f) => {
                    fd = Some(f);
                    break;
                }
                Err(nix::Error::EEXIST) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let fd = fd.ok_or_else(|| std::io::Error::other("cannot create a temporary file"))?;
        // SAFETY: `fd` was just returned by openat(2) and is owned by nobody else.
        let mut file = unsafe { File::from_raw_fd(fd) };
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
    pub fn remove(&self, name: &str) -> std::io::Result<()> {
        nix::unistd::unlinkat(
            Some(self.raw()),
            name,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        )
        .map_err(std::io::Error::from)
    }

    /// Whether `name` exists here (links not followed).
    pub fn exists(&self, name: &str) -> bool {
        fstatat(Some(self.raw()), name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
    }

    /// The names of the entries in this directory.
    pub fn names(&self) -> Vec<String> {
        let Ok(dir) = nix::dir::Dir::openat(
            Some(self.raw()),
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) else {
            return Vec::new();
        };
        let mut dir = dir;
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
    fn a_nixos_style_etc_static_chain_is_trusted() {
        // /etc/x -> /etc/static/x, /etc/static -> /nix/store/…-etc/etc; the store is root's,
        // mode 1775 (group-writable, sticky).
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        mode(d, 0o755);
        let store = d.join("store");
        std::fs::create_dir_all(store.join("aaa-etc/etc/cuda-sandbox")).unwrap();
        std::fs::write(store.join("aaa-etc/etc/cuda-sandbox/config.toml"), "").unwrap();
        mode(&store, 0o1775);
        std::fs::create_dir_all(d.join("etc")).unwrap();
        symlink(store.join("aaa-etc/etc"), d.join("etc/static")).unwrap();
        symlink("static/cuda-sandbox", d.join("etc/cuda-sandbox")).unwrap();
        check_trusted(&d.join("etc/cuda-sandbox/config.toml")).unwrap();
    }

    #[test]
    fn a_writable_directory_on_the_way_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        mode(d, 0o755);
        std::fs::create_dir(d.join("open")).unwrap();
        std::fs::write(d.join("open/config.toml"), "").unwrap();
        mode(&d.join("open"), 0o777);
        let e = check_trusted(&d.join("open/config.toml")).unwrap_err();
        assert!(
            e.contains("writable by group or others") && e.contains("chmod go-w"),
            "{e}"
        );
        // Through a symlink too: the target's directories count.
        std::fs::create_dir(d.join("safe")).unwrap();
        symlink(d.join("open/config.toml"), d.join("safe/config.toml")).unwrap();
        assert!(check_trusted(&d.join("safe/config.toml")).is_err());
        assert!(check_trusted(Path::new("relative")).is_err());
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
        assert!(e.contains("symlink"), "{e}");
        assert!(StateDir::open_existing(&t.path().join("absent"))
            .unwrap()
            .is_none());
    }
}
