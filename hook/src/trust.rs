//! Which files and directories root may take its orders from, run, or keep its state in.
//!
//! The hook runs as root on input from anyone who can submit a build, so whatever it trusts
//! must be something only root could have changed, as sudo trusts `sudoers`. The rules, all
//! here:
//! - [`check_entry`]: one entry is owned by root (or by the user running the hook) and not
//!   writable by group or others; a root-owned sticky directory (`/tmp`, `/nix/store`) may be
//!   crossed, as others cannot replace what root owns in it.
//! - [`walk`]: the one path walk, with descriptors, from `/`: each entry opened from its
//!   parent's descriptor with `O_NOFOLLOW` (as `O_PATH`, which opens nothing, or as a
//!   directory), so what was walked to is returned as a descriptor and whatever is renamed
//!   there afterwards is not what is used; [`Walk`] says what each entry must be.
//! - [`resolve`] and [`check_path`]: every component of an absolute path, `/` too, and every
//!   symlink target on the way, passes [`check_entry`] ([`walk`] with `follow`); a symlink is
//!   followed only when root (or the hook's user) owns it, wherever it is, as the kernel's
//!   `protected_symlinks` reasons for sticky directories: whoever made a link chose its target,
//!   and every store file is root's, whoever built it.
//! - [`listed_dir`]: a directory whose entries the hook lists (a CDI spec directory) decides
//!   by what is in it what is read, so it passes [`check_entry`] as an entry of its own, never
//!   as one crossed: not writable by group or others, sticky or not.
//! - [`open_file`]: a regular file is opened only once its path passed [`resolve`], from the
//!   directory descriptor that walk reached it in, with `O_NOFOLLOW | O_NONBLOCK`, and checked
//!   again from its descriptor.
//! - [`program`]: a program the hook runs is absolute (only a bare default name is looked up
//!   in `PATH`), and its path passes [`check_path`].
//! - A state directory ([`crate::statedir`]) is walked as directories, each judged by
//!   [`check_entry`] and made when missing, no symlink followed; [`open_without_symlinks`],
//!   for a path someone names for their own use (`exec --bind`), walks entries of any kind,
//!   unjudged, with no symlink anywhere on it.

use nix::sys::stat::{FileStat, Mode};
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Why a path, or an entry on it, is not trusted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TrustError {
    /// The path is relative: trust is judged from `/`.
    #[error("{} is not an absolute path: name it from /", .0.display())]
    NotAbsolute(PathBuf),
    /// An entry could not be inspected (`lstat`, `readlink`, `fstat`), e.g. it does not exist:
    /// the entry, and what the system said.
    #[error("{path}: {1}", path = .0.display())]
    Inspect(PathBuf, #[source] std::io::Error),
    /// A symlink on the path is owned by someone other than root or the hook's user, so they
    /// chose where it leads: the symlink, and its owner.
    #[error(
        "{link} is a symlink owned by uid {1}, not by root: only root's symlinks are followed \
         (name the file it leads to, or have root make the link)",
        link = .0.display()
    )]
    LinkOwner(PathBuf, u32),
    /// The path holds a symlink where none may be.
    #[error("{} is a symlink: name the path it leads to, with no symlink on the way", .0.display())]
    Symlink(PathBuf),
    /// The path holds `..` where it must be walked as written.
    #[error("{} holds `..`: name the path without it", .0.display())]
    ParentDir(PathBuf),
    /// A directory to list is no directory.
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// The path holds more symlinks than the loader would follow.
    #[error("{}: too many symlinks", .0.display())]
    TooManySymlinks(PathBuf),
    /// An entry is owned by someone other than root or the hook's user: the entry, its owner.
    #[error("{path} is owned by uid {1}, not by root: run `chown root {path}`", path = .0.display())]
    Owner(PathBuf, u32),
    /// An entry is writable by group or others: the entry, and its mode.
    #[error(
        "{} is writable by group or others (mode {:o}): run `chmod go-w {}`",
        .0.display(),
        .1 & 0o7777,
        .0.display()
    )]
    Writable(PathBuf, u32),
    /// The file to open is not a regular file (a directory, FIFO, device...).
    #[error("{} is not a regular file", .0.display())]
    NotRegular(PathBuf),
    /// The checked file could not be opened: the file, and what the system said.
    #[error("{path}: {1}", path = .0.display())]
    Open(PathBuf, #[source] std::io::Error),
}

/// Why a program may not be run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProgramError {
    /// A bare name that no directory of `PATH` holds.
    #[error(
        "{} not found in PATH: set nix_store in the config to the absolute path of the \
         nix-store program",
        .0.display()
    )]
    NotInPath(PathBuf),
    /// A relative path with a `/`: only bare names are looked up.
    #[error(
        "program {} is not absolute: set nix_store in the config to an absolute path",
        .0.display()
    )]
    NotAbsolute(PathBuf),
    /// The program's path is not trusted: the program found, and why.
    #[error("refusing to run {program}: {1}", program = .0.display())]
    Untrusted(PathBuf, #[source] TrustError),
}

/// Whether `uid` may own a trusted entry: root, or the user running the hook.
fn trusted_owner(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::geteuid().as_raw()
}

/// Checks one entry, `path`, from its owner `uid` and `mode` (as `lstat` or `fstat` gave
/// them): owned by a [`trusted_owner`] and not writable by group or others. `crossed`: the
/// entry is a directory only passed through on the way to another, which a root-owned sticky
/// bit makes safe to cross though others may write in it.
pub(crate) fn check_entry(
    path: &Path,
    uid: u32,
    mode: u32,
    crossed: bool,
) -> Result<(), TrustError> {
    if !trusted_owner(uid) {
        return Err(TrustError::Owner(path.to_path_buf(), uid));
    }
    let sticky_root = crossed && mode & 0o1000 != 0 && uid == 0;
    if mode & 0o022 != 0 && !sticky_root {
        return Err(TrustError::Writable(path.to_path_buf(), mode));
    }
    Ok(())
}

/// Checks that `path` (absolute) is trusted: every component, and every symlink target met,
/// passes [`check_entry`] (a directory counts as crossed), and every symlink met is owned by a
/// trusted owner.
pub(crate) fn check_path(path: &Path) -> Result<(), TrustError> {
    resolve(path).map(|_| ())
}

/// [`check_path`], returning what the path leads to: [`walk`] with `follow`, so the entry is
/// held by the descriptor the walk reached, with the path it resolved (no symlink on it).
pub(crate) fn resolve(path: &Path) -> Result<Walked, TrustError> {
    let how = Walk {
        directories: false,
        judged: true,
        create: false,
        follow: true,
    };
    walk_absolute(path, how)
}

/// The directory at `path` (absolute), every symlink resolved, once trusted for the hook to
/// list: its path passes [`resolve`], it is a directory, and it passes [`check_entry`] as an
/// entry of its own (not as one crossed), so that no one but root (or the hook's user) can add
/// an entry to it, sticky or not.
pub(crate) fn listed_dir(path: &Path) -> Result<PathBuf, TrustError> {
    let dir = resolve(path)?;
    if !is(&dir.stat, nix::sys::stat::SFlag::S_IFDIR) {
        return Err(TrustError::NotADirectory(dir.path));
    }
    check_entry(&dir.path, dir.stat.st_uid, dir.stat.st_mode, false)?;
    Ok(dir.path)
}

/// Opens the regular file at `path` (absolute) for reading, once trusted: its path passes
/// [`resolve`] and ends in a regular file, which is opened from the directory descriptor the
/// walk reached it in with `O_NOFOLLOW | O_NONBLOCK`, so a FIFO or device put there since can
/// neither block nor be followed; the opened file must again be a regular file passing
/// [`check_entry`]. Returns it with its `fstat`.
pub(crate) fn open_file(path: &Path) -> Result<(File, Metadata), TrustError> {
    open_walked(resolve(path)?)
}

/// [`open_file`]'s open of the file [`resolve`] reached, from the directory it reached it in.
fn open_walked(walked: Walked) -> Result<(File, Metadata), TrustError> {
    use nix::fcntl::OFlag;
    let path = walked.path;
    let (Some(parent), Some(name), true) = (
        walked.parent,
        path.file_name(),
        is(&walked.stat, nix::sys::stat::SFlag::S_IFREG),
    ) else {
        return Err(TrustError::NotRegular(path));
    };
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let fd = nix::fcntl::openat(Some(parent.as_raw_fd()), name, flags, Mode::empty())
        .map_err(|e| TrustError::Open(path.clone(), e.into()))?;
    // SAFETY: openat(2) just returned `fd`; nothing else owns it.
    let file = unsafe { File::from_raw_fd(fd) };
    let meta = file
        .metadata()
        .map_err(|e| TrustError::Inspect(path.clone(), e))?;
    if !meta.is_file() {
        return Err(TrustError::NotRegular(path));
    }
    check_entry(&path, meta.uid(), meta.mode(), false)?;
    Ok((file, meta))
}

/// The program `name` the hook is to run, checked: an absolute path that passes
/// [`check_path`]. A bare name (only the built-in default, `nix-store`) is looked up in
/// `search_path` (the value of `PATH`), and the file found must pass too.
pub(crate) fn program(name: &Path, search_path: Option<&OsStr>) -> Result<PathBuf, ProgramError> {
    let found = if name.is_absolute() {
        name.to_path_buf()
    } else if name.components().count() == 1 {
        std::env::split_paths(search_path.unwrap_or_default())
            .filter(|d| d.is_absolute())
            .map(|d| d.join(name))
            .find(|c| c.is_file())
            .ok_or_else(|| ProgramError::NotInPath(name.to_path_buf()))?
    } else {
        return Err(ProgramError::NotAbsolute(name.to_path_buf()));
    };
    check_path(&found).map_err(|e| ProgramError::Untrusted(found.clone(), e))?;
    Ok(found)
}

/// What [`walk`] asks of each entry on a path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Walk {
    /// Every entry is a directory, opened for reading (`O_DIRECTORY`, so a symlink is `ELOOP`);
    /// otherwise each is opened as `O_PATH` (which opens nothing: no FIFO or device is
    /// touched), whatever it is.
    pub(crate) directories: bool,
    /// Every entry, `/` too, passes [`check_entry`], a directory as crossed (a caller that
    /// uses the last one as more than a way through judges it again as an entry of its own).
    pub(crate) judged: bool,
    /// A missing directory is made, mode 0700, and walked into.
    pub(crate) create: bool,
    /// A symlink owned by root or the hook's user is followed, wherever it is (its maker chose
    /// its target, as the kernel's `protected_symlinks` reasons), its target read from the
    /// link's own descriptor: an absolute target is walked from `/`, `..` steps back to the
    /// parent's descriptor (never above `/`), at most [`crate::symlinks::MAX_HOPS`] links.
    /// Otherwise a symlink or `..` on the path is refused. With `directories: false` only.
    pub(crate) follow: bool,
}

/// What [`walk`] reached.
#[derive(Debug)]
pub(crate) struct Walked {
    /// The entry, as opened by the walk.
    pub(crate) fd: OwnedFd,
    /// Its `fstat`.
    pub(crate) stat: FileStat,
    /// The directory the walk reached it in (`None` for `/`, and while walking).
    pub(crate) parent: Option<OwnedFd>,
    /// Its path as walked, every followed symlink resolved.
    pub(crate) path: PathBuf,
}

/// Why [`walk`] stopped.
#[derive(Debug)]
pub(crate) enum WalkError {
    /// An entry could not be opened or inspected: `ENOENT` when it is missing, `ELOOP` or
    /// `ENOTDIR` for a symlink or a non-directory where directories are walked. The entry, and
    /// what the system said.
    Open(PathBuf, nix::Error),
    /// A missing directory could not be made: the directory, and what the system said.
    Create(PathBuf, nix::Error),
    /// An entry is a symlink, and symlinks are not followed.
    Symlink(PathBuf),
    /// The path holds `..`, and symlinks are not followed.
    ParentDir,
    /// An entry (or a symlink, or their number) is not trusted.
    Untrusted(TrustError),
}

/// Walks `path` (absolute) from `/` with one descriptor per entry: each is opened from its
/// parent's descriptor with `O_NOFOLLOW`, so a symlink is followed only where `how` says, by
/// the walk itself, and the descriptor returned is the entry this walk reached, whatever is
/// renamed or linked on the path afterwards. `how` says what each entry must be.
pub(crate) fn walk(path: &Path, how: Walk) -> Result<Walked, WalkError> {
    use nix::fcntl::{openat, readlinkat, OFlag};
    use nix::sys::stat::{fstat, mkdirat, SFlag};
    let kind = if how.directories {
        OFlag::O_DIRECTORY | OFlag::O_RDONLY
    } else {
        OFlag::O_PATH
    };
    let flags = kind | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    // SAFETY: open(2)/openat(2) just returned the descriptor; nothing else owns it.
    let adopt = |fd| unsafe { OwnedFd::from_raw_fd(fd) };
    let opening = |at: &Path| {
        let at = at.to_path_buf();
        move |source| WalkError::Open(at, source)
    };
    let enter = |fd: nix::Result<_>, path: PathBuf| {
        let fd = adopt(fd.map_err(opening(&path))?);
        let stat = fstat(fd.as_raw_fd()).map_err(opening(&path))?;
        Ok(Walked {
            fd,
            stat,
            parent: None,
            path,
        })
    };
    let judge = |e: &Walked| match how.judged {
        true => check_entry(
            &e.path,
            e.stat.st_uid,
            e.stat.st_mode,
            is(&e.stat, SFlag::S_IFDIR),
        )
        .map_err(WalkError::Untrusted),
        false => Ok(()),
    };
    let root = nix::fcntl::open("/", flags | OFlag::O_DIRECTORY, Mode::empty());
    let root = enter(root, PathBuf::from("/"))?;
    judge(&root)?;
    // Every entry opened but symlinks, kept to the end: `chain` indexes the entries from `/`
    // to where the walk is, so `..` steps back, and a directory met again after an absolute
    // link target (`/nix/store`) is not opened twice.
    let mut opened = vec![root];
    let mut chain = vec![0];
    let mut pending = names(path);
    let mut links = 0;
    while let Some(name) = pending.pop() {
        let at = chain[chain.len() - 1];
        if name == ".." {
            if !how.follow {
                return Err(WalkError::ParentDir);
            }
            if chain.len() > 1 {
                chain.pop();
            }
            continue;
        }
        let here = opened[at].path.join(&name);
        if let Some(seen) = opened.iter().position(|e| e.path == here) {
            chain.push(seen);
            continue;
        }
        let open =
            |at: &OwnedFd| openat(Some(at.as_raw_fd()), name.as_os_str(), flags, Mode::empty());
        let parent = &opened[at].fd;
        let fd = match open(parent) {
            Err(nix::Error::ENOENT) if how.create => {
                match mkdirat(
                    Some(parent.as_raw_fd()),
                    name.as_os_str(),
                    Mode::from_bits_truncate(0o700),
                ) {
                    Ok(()) | Err(nix::Error::EEXIST) => open(parent),
                    Err(source) => return Err(WalkError::Create(here, source)),
                }
            }
            other => other,
        };
        let entry = enter(fd, here)?;
        if is(&entry.stat, SFlag::S_IFLNK) {
            let (link, uid) = (entry.path, entry.stat.st_uid);
            if !how.follow {
                return Err(WalkError::Symlink(link));
            }
            if !trusted_owner(uid) {
                return Err(WalkError::Untrusted(TrustError::LinkOwner(link, uid)));
            }
            links += 1;
            if links > crate::symlinks::MAX_HOPS {
                let e = TrustError::TooManySymlinks(path.to_path_buf());
                return Err(WalkError::Untrusted(e));
            }
            // The link read is the one opened and judged by its owner, whatever is renamed
            // at its path since.
            let target = readlinkat(Some(entry.fd.as_raw_fd()), "").map_err(opening(&link))?;
            let target = PathBuf::from(target);
            if target.is_absolute() {
                chain.truncate(1);
            }
            pending.extend(names(&target));
            continue;
        }
        judge(&entry)?;
        chain.push(opened.len());
        opened.push(entry);
    }
    // A parent was opened before its child (from its descriptor), so its index is lower and
    // stays put when the child's entry is taken out.
    let mut walked = opened.swap_remove(chain[chain.len() - 1]);
    walked.parent = (chain.len().checked_sub(2)).map(|i| opened.swap_remove(chain[i]).fd);
    Ok(walked)
}

/// Opens `path` (absolute, without `..`) as an `O_PATH` descriptor, with no symlink anywhere
/// on it ([`walk`]). Owners and modes are not judged (the caller says whose the entry must
/// be). Returns it with its `fstat`.
pub(crate) fn open_without_symlinks(path: &Path) -> Result<(OwnedFd, FileStat), TrustError> {
    let how = Walk {
        directories: false,
        judged: false,
        create: false,
        follow: false,
    };
    let walked = walk_absolute(path, how)?;
    Ok((walked.fd, walked.stat))
}

/// [`walk`] of `path`, which must be absolute, with why it stopped as a [`TrustError`].
fn walk_absolute(path: &Path, how: Walk) -> Result<Walked, TrustError> {
    if !path.is_absolute() {
        return Err(TrustError::NotAbsolute(path.to_path_buf()));
    }
    walk(path, how).map_err(|e| match e {
        WalkError::Open(at, e) | WalkError::Create(at, e) => TrustError::Inspect(at, e.into()),
        WalkError::Symlink(at) => TrustError::Symlink(at),
        WalkError::ParentDir => TrustError::ParentDir(path.to_path_buf()),
        WalkError::Untrusted(e) => e,
    })
}

/// Whether `stat` is of the file type `kind`.
fn is(stat: &FileStat, kind: nix::sys::stat::SFlag) -> bool {
    stat.st_mode & nix::libc::S_IFMT == kind.bits()
}

/// The names of `path`'s components (`..` kept, `/` and `.` left out), last first: a stack that
/// a walk pops them from.
pub(crate) fn names(path: &Path) -> Vec<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .rev()
        .collect()
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
        check_path(&d.join("etc/cuda-sandbox/config.toml")).unwrap();
        let resolved = resolve(&d.join("etc/cuda-sandbox/config.toml")).unwrap();
        assert_eq!(
            resolved.path,
            store.join("aaa-etc/etc/cuda-sandbox/config.toml")
        );
        open_file(&d.join("etc/cuda-sandbox/config.toml")).unwrap();
    }

    /// The NixOS shape the first test misses: `/etc/cuda-sandbox/config.toml` (in a real
    /// directory) links to `/etc/static/…`, `/etc/static` to the store's `etc`, and that entry
    /// to a single-file store path, directly in the store (root's, mode 1775, group-writable
    /// by the build users' group). The program `nix_store` names has the same shape.
    #[test]
    fn a_nixos_chain_to_a_single_file_store_path_is_trusted() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        mode(d, 0o755);
        let store = d.join("store");
        std::fs::create_dir_all(store.join("aaa-etc/etc/cuda-sandbox")).unwrap();
        std::fs::write(store.join("bbb-config.toml"), "").unwrap();
        mode(&store.join("bbb-config.toml"), 0o444);
        std::fs::write(store.join("ccc-nix-store"), "").unwrap();
        mode(&store.join("ccc-nix-store"), 0o555);
        symlink(
            store.join("bbb-config.toml"),
            store.join("aaa-etc/etc/cuda-sandbox/config.toml"),
        )
        .unwrap();
        mode(&store, 0o1775);
        std::fs::create_dir_all(d.join("etc/cuda-sandbox")).unwrap();
        symlink(store.join("aaa-etc/etc"), d.join("etc/static")).unwrap();
        symlink(
            d.join("etc/static/cuda-sandbox/config.toml"),
            d.join("etc/cuda-sandbox/config.toml"),
        )
        .unwrap();
        let config = d.join("etc/cuda-sandbox/config.toml");
        assert_eq!(
            resolve(&config).unwrap().path,
            store.join("bbb-config.toml")
        );
        open_file(&config).unwrap();
        std::fs::create_dir_all(d.join("sw/bin")).unwrap();
        symlink(store.join("ccc-nix-store"), d.join("sw/bin/nix-store")).unwrap();
        program(&d.join("sw/bin/nix-store"), None).unwrap();
    }

    /// Makes `link` (a symlink) owned by `uid`, as if that user had made it.
    fn lchown(link: &Path, uid: u32) {
        nix::unistd::fchownat(
            None,
            link,
            Some(nix::unistd::Uid::from_raw(uid)),
            None,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .unwrap();
    }

    /// A symlink anyone but root made is never followed, wherever it is: in a sticky
    /// directory its maker could point it at any root-owned file (every store file is root's,
    /// whoever built it), as the kernel's `protected_symlinks` reasons.
    #[test]
    fn a_symlink_is_followed_only_when_root_made_it() {
        if !cuda_sandbox_testkit::root_available("a_symlink_is_followed_only_when_root_made_it") {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        mode(d, 0o755);
        std::fs::write(d.join("store-file"), "").unwrap();
        mode(&d.join("store-file"), 0o444);
        std::fs::create_dir(d.join("sticky")).unwrap();
        mode(&d.join("sticky"), 0o1777);
        let link = d.join("sticky/config.toml");
        symlink(d.join("store-file"), &link).unwrap();
        open_file(&link).unwrap();
        lchown(&link, 65534);
        let e = open_file(&link).unwrap_err();
        assert!(
            matches!(&e, TrustError::LinkOwner(l, 65534) if l == &link),
            "{e:?}"
        );
        let shown = e.to_string();
        assert!(
            shown.contains("symlink") && shown.contains("uid 65534"),
            "{shown}"
        );
        // Mid-path too, and in a directory nobody else may write.
        std::fs::create_dir(d.join("safe")).unwrap();
        symlink(d, d.join("safe/up")).unwrap();
        lchown(&d.join("safe/up"), 65534);
        assert!(matches!(
            check_path(&d.join("safe/up/store-file")),
            Err(TrustError::LinkOwner(..))
        ));
        assert!(matches!(
            program(&d.join("safe/up/store-file"), None),
            Err(ProgramError::Untrusted(_, TrustError::LinkOwner(..)))
        ));
    }

    /// A directory whose entries the hook lists (a CDI spec directory) decides what is read by
    /// what is in it: no one but root may add to it, sticky or not. Crossing a sticky one on
    /// the way stays allowed.
    #[test]
    fn a_listed_directory_is_writable_by_root_alone_even_when_sticky() {
        if !cuda_sandbox_testkit::root_available(
            "a_listed_directory_is_writable_by_root_alone_even_when_sticky",
        ) {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        mode(d, 0o755);
        let sticky = d.join("sticky");
        std::fs::create_dir_all(sticky.join("cdi")).unwrap();
        mode(&sticky, 0o1777);
        assert_eq!(listed_dir(&sticky.join("cdi")).unwrap(), sticky.join("cdi"));
        let e = listed_dir(&sticky).unwrap_err();
        assert!(
            matches!(&e, TrustError::Writable(path, _) if path == &sticky),
            "{e:?}"
        );
        // Reached through a link, the directory it leads to is judged.
        symlink(&sticky, d.join("cdi-link")).unwrap();
        assert!(matches!(
            listed_dir(&d.join("cdi-link")),
            Err(TrustError::Writable(..))
        ));
        std::fs::write(d.join("file"), "").unwrap();
        assert!(matches!(
            listed_dir(&d.join("file")),
            Err(TrustError::NotADirectory(_))
        ));
    }

    #[test]
    fn a_path_opened_without_symlinks_has_none_anywhere_on_it() {
        use std::os::fd::AsRawFd;
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        std::fs::create_dir(d.join("dir")).unwrap();
        std::fs::write(d.join("dir/file"), "x").unwrap();
        let (fd, stat) = open_without_symlinks(&d.join("dir/file")).unwrap();
        let meta = std::fs::metadata(d.join("dir/file")).unwrap();
        assert_eq!((stat.st_dev, stat.st_ino), (meta.dev(), meta.ino()));
        // The descriptor is the file walked to, whatever is put at the path afterwards.
        std::fs::rename(d.join("dir/file"), d.join("moved")).unwrap();
        symlink("/etc/hostname", d.join("dir/file")).unwrap();
        let proc = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        assert_eq!(std::fs::read_link(proc).unwrap(), d.join("moved"));
        for (path, at) in [
            (d.join("dir/file"), d.join("dir/file")),
            (d.join("up/dir"), d.join("up")),
        ] {
            let _ = symlink(d, d.join("up"));
            match open_without_symlinks(&path) {
                Err(TrustError::Symlink(p)) => assert_eq!(p, at),
                other => panic!("{}: {other:?}", path.display()),
            }
        }
        assert!(matches!(
            open_without_symlinks(&d.join("dir/../moved")),
            Err(TrustError::ParentDir(_))
        ));
        assert!(matches!(
            open_without_symlinks(&d.join("absent")),
            Err(TrustError::Inspect(..))
        ));
        assert!(matches!(
            open_without_symlinks(Path::new("relative")),
            Err(TrustError::NotAbsolute(_))
        ));
    }

    /// `..` after a followed link steps back from where the link led (as the kernel does), not
    /// from where the link is; an absolute target is walked again from `/`.
    #[test]
    fn dot_dot_after_a_followed_link_steps_back_from_its_target() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        mode(d, 0o755);
        std::fs::create_dir_all(d.join("x/y")).unwrap();
        std::fs::write(d.join("x/z"), "in x").unwrap();
        std::fs::write(d.join("z"), "in d").unwrap();
        std::fs::create_dir(d.join("a")).unwrap();
        symlink(d.join("x/y"), d.join("a/abs")).unwrap();
        symlink("../x/y", d.join("a/rel")).unwrap();
        for link in ["a/abs", "a/rel"] {
            let walked = resolve(&d.join(link).join("../z")).unwrap();
            assert_eq!(walked.path, d.join("x/z"), "{link}");
            let (file, _) = open_file(&d.join(link).join("../z")).unwrap();
            assert_eq!(std::io::read_to_string(file).unwrap(), "in x");
        }
        // `..` in the path as named steps back too, and never above `/`.
        assert_eq!(resolve(&d.join("a/../z")).unwrap().path, d.join("z"));
        let up = Path::new("/..").join(d.strip_prefix("/").unwrap());
        assert_eq!(resolve(&up).unwrap().path, d);
        // Ending on `..`, the directory stepped back to is the entry reached.
        let walked = resolve(&d.join("a/rel/..")).unwrap();
        assert_eq!(walked.path, d.join("x"));
        assert!(is(&walked.stat, nix::sys::stat::SFlag::S_IFDIR));
        assert!(matches!(
            open_file(&d.join("a/rel/..")),
            Err(TrustError::NotRegular(p)) if p == d.join("x")
        ));
    }

    /// At most `MAX_HOPS` links are followed on one path, as the loader would.
    #[test]
    fn too_many_symlinks_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        mode(d, 0o755);
        std::fs::write(d.join("l0"), "").unwrap();
        for i in 1..=crate::symlinks::MAX_HOPS + 1 {
            symlink(format!("l{}", i - 1), d.join(format!("l{i}"))).unwrap();
        }
        let most = d.join(format!("l{}", crate::symlinks::MAX_HOPS));
        assert_eq!(resolve(&most).unwrap().path, d.join("l0"));
        let over = d.join(format!("l{}", crate::symlinks::MAX_HOPS + 1));
        let e = resolve(&over).unwrap_err();
        assert!(
            matches!(&e, TrustError::TooManySymlinks(p) if p == &over),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!("{}: too many symlinks", over.display())
        );
        symlink("loop", d.join("loop")).unwrap();
        assert!(matches!(
            open_file(&d.join("loop")),
            Err(TrustError::TooManySymlinks(_))
        ));
    }

    /// The file opened is the one the walk reached, from the directory descriptor it reached
    /// it in: a directory renamed away and replaced on the path after the walk is not what is
    /// opened (a second walk by the path's name would open the replacement).
    #[test]
    fn a_directory_replaced_after_the_walk_is_not_opened() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        mode(d, 0o755);
        std::fs::create_dir(d.join("dir")).unwrap();
        std::fs::write(d.join("dir/config.toml"), "checked").unwrap();
        let walked = resolve(&d.join("dir/config.toml")).unwrap();
        std::fs::rename(d.join("dir"), d.join("moved")).unwrap();
        std::fs::create_dir(d.join("dir")).unwrap();
        std::fs::write(d.join("dir/config.toml"), "replaced").unwrap();
        let (file, _) = open_walked(walked).unwrap();
        assert_eq!(std::io::read_to_string(file).unwrap(), "checked");
        // The target a link leads to is read from the link the walk opened and judged.
        let walked = resolve(&d.join("dir")).unwrap();
        let proc = PathBuf::from(format!("/proc/self/fd/{}", walked.fd.as_raw_fd()));
        std::fs::rename(d.join("dir"), d.join("gone")).unwrap();
        assert_eq!(std::fs::read_link(proc).unwrap(), d.join("gone"));
    }

    #[test]
    fn a_writable_directory_on_the_way_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        mode(d, 0o755);
        std::fs::create_dir(d.join("open")).unwrap();
        std::fs::write(d.join("open/config.toml"), "").unwrap();
        mode(&d.join("open"), 0o777);
        let e = check_path(&d.join("open/config.toml")).unwrap_err();
        assert!(
            matches!(&e, TrustError::Writable(path, _) if path == &d.join("open")),
            "{e:?}"
        );
        let shown = e.to_string();
        assert!(
            shown.contains("writable by group or others") && shown.contains("chmod go-w"),
            "{shown}"
        );
        // Through a symlink too: the target's directories count.
        std::fs::create_dir(d.join("safe")).unwrap();
        symlink(d.join("open/config.toml"), d.join("safe/config.toml")).unwrap();
        assert!(check_path(&d.join("safe/config.toml")).is_err());
        assert!(matches!(
            check_path(Path::new("relative")),
            Err(TrustError::NotAbsolute(_))
        ));
    }

    #[test]
    fn only_a_regular_file_is_opened() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        mode(d, 0o755);
        let fifo = d.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(matches!(open_file(&fifo), Err(TrustError::NotRegular(_))));
        assert!(matches!(open_file(d), Err(TrustError::NotRegular(_))));
        assert!(matches!(
            open_file(&d.join("missing")),
            Err(TrustError::Inspect(..))
        ));
    }

    #[test]
    fn a_bare_program_name_is_looked_up_in_the_given_path_only() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        mode(d, 0o755);
        std::fs::write(d.join("tool"), "").unwrap();
        mode(&d.join("tool"), 0o755);
        let search = std::env::join_paths([Path::new("relative"), d]).unwrap();
        assert_eq!(
            program(Path::new("tool"), Some(&search)).unwrap(),
            d.join("tool")
        );
        assert!(matches!(
            program(Path::new("tool"), None),
            Err(ProgramError::NotInPath(_))
        ));
        assert!(matches!(
            program(Path::new("bin/tool"), Some(&search)),
            Err(ProgramError::NotAbsolute(_))
        ));
        mode(&d.join("tool"), 0o775);
        assert!(matches!(
            program(Path::new("tool"), Some(&search)),
            Err(ProgramError::Untrusted(_, TrustError::Writable(..)))
        ));
    }
}
