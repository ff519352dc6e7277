//! Following symlink chains so that a link and everything it points to are exposed together.
//!
//! Nix 2.8 binds a symlink's target at the link's inside path; newer Nix copies the link itself
//! into the sandbox, where its target must then exist too (docs/architecture.md, the hook protocol). So for every exposed
//! path the plan exposes the link *and* each hop of its chain, each at the place the copied link
//! would resolve to inside the sandbox.

use std::path::{Component, Path, PathBuf};

/// The most hops followed before a chain counts as a loop (the kernel's limit is 40).
pub(crate) const MAX_HOPS: usize = 40;

/// Where an inside path's outside counterpart is found.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Space<'a> {
    /// Under a host root (`root + inside`), except paths in the store, which are shared.
    Rooted {
        /// The host root, `/` in production.
        root: &'a Path,
        /// The store directory, never re-rooted.
        store_dir: &'a Path,
    },
    /// Literal host paths (mounts): an absolute link target is the same path inside and out.
    Literal,
}

impl<'a> Space<'a> {
    /// The outside path for `inside`.
    pub(crate) fn outside(&self, inside: &Path) -> PathBuf {
        match self {
            Space::Rooted { root, store_dir } => {
                crate::discover::host::under(root, store_dir, inside)
            }
            Space::Literal => inside.to_path_buf(),
        }
    }
}

/// One path of a chain: where the build sees it and where it is on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hop {
    /// Path inside the sandbox.
    pub inside: PathBuf,
    /// Path on the host.
    pub outside: PathBuf,
}

/// What one `lstat` found at a path: the data the plan needs of a filesystem entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    /// Nothing there.
    Missing,
    /// A directory.
    Dir,
    /// A character device.
    CharDevice,
    /// A regular file.
    File,
    /// Anything else that is not a link (block device, socket, fifo).
    Other,
    /// A symbolic link and its target, as written.
    Symlink(PathBuf),
    /// The entry could not be inspected.
    Error(String),
    /// A recorded view of the host has nothing for this path: the scan did not look at it.
    /// Following a chain through it fails ([`ChainError::Unscanned`]), never guesses.
    Unscanned,
}

impl Node {
    /// `lstat` (and `readlink`) of `path` on the real filesystem.
    pub(crate) fn of(path: &Path) -> Node {
        use std::os::unix::fs::FileTypeExt;
        match std::fs::symlink_metadata(path).map(|m| m.file_type()) {
            Ok(ft) if ft.is_symlink() => match std::fs::read_link(path) {
                Ok(t) => Node::Symlink(t),
                Err(e) => Node::Error(e.to_string()),
            },
            Ok(ft) if ft.is_dir() => Node::Dir,
            Ok(ft) if ft.is_char_device() => Node::CharDevice,
            Ok(ft) if ft.is_file() => Node::File,
            Ok(_) => Node::Other,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Node::Missing,
            // A component that is not a directory means the path cannot exist.
            Err(e) if e.raw_os_error() == Some(20) => Node::Missing,
            Err(e) => Node::Error(e.to_string()),
        }
    }
}

/// Where [`follow`] looks entries up: the real filesystem while scanning, the recorded
/// [`crate::scan::Snapshot`] while deciding.
pub(crate) trait Lookup {
    /// What is at `outside` (without following a final symlink).
    fn lstat(&self, outside: &Path) -> Node;
}

/// The real filesystem (the tests' lookup: scans record what they see, `scan::Recorder`).
#[cfg(test)]
pub(crate) struct RealFs;

#[cfg(test)]
impl Lookup for RealFs {
    fn lstat(&self, outside: &Path) -> Node {
        Node::of(outside)
    }
}

/// A resolved chain: the starting path, then each symlink target in turn, and what the final
/// (non-link) path is.
#[derive(Debug, Clone)]
pub(crate) struct Chain {
    /// The start and every hop; the first is the path asked for.
    pub hops: Vec<Hop>,
    /// What the last hop is (never a symlink).
    pub target: Node,
    /// Directory symlinks met on the way (in a parent of a hop), each with the inside path it
    /// resolved to; these must lie within the allowed roots too.
    pub via: Vec<Hop>,
}

/// Why a chain could not be followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ChainError {
    /// The starting path does not exist.
    #[error("{} does not exist", .0.display())]
    Missing(PathBuf),
    /// A link points at something that does not exist: the link, and its (outside) target.
    #[error("symlink {} points to {}, which does not exist", .0.display(), .1.display())]
    Dangling(PathBuf, PathBuf),
    /// More than [`MAX_HOPS`] hops, or a path seen twice.
    #[error("symlink loop at {}", .0.display())]
    Loop(PathBuf),
    /// Any other I/O error.
    #[error("cannot inspect {path}: {1}", path = .0.display())]
    Io(PathBuf, String),
    /// The path was not looked at by the scan whose record is being followed.
    #[error(
        "{} was not looked at by the scan (a bug in cuda-sandbox: please report it)",
        .0.display()
    )]
    Unscanned(PathBuf),
    /// A link leads outside the roots symlinks may be followed into: the link, and where it
    /// leads (inside paths).
    #[error(
        "symlink {} leads to {}, outside the roots symlinks may be followed into (add its root \
         to symlink_roots in the config to allow it)",
        .0.display(),
        .1.display()
    )]
    Escapes(PathBuf, PathBuf),
}

/// Follows the chain starting at (`inside`, `outside`) in `space`, looking entries up in
/// `fs`. Every directory of every hop is resolved too, component by component: a symlinked
/// directory in the middle of a path (`/dev/nvidia-caps -> /etc`) is recorded in
/// [`Chain::via`], so that [`check_within`] sees where the path really leads.
pub(crate) fn follow(
    inside: &Path,
    outside: &Path,
    space: Space<'_>,
    fs: &dyn Lookup,
) -> Result<Chain, ChainError> {
    let mut here = Hop {
        inside: inside.to_path_buf(),
        outside: outside.to_path_buf(),
    };
    // The hops before `here`.
    let mut hops: Vec<Hop> = Vec::new();
    let mut via = Vec::new();
    loop {
        resolve_parents(&here, space, fs, &mut via)?;
        let target = match fs.lstat(&here.outside) {
            Node::Missing => {
                return Err(match hops.last() {
                    None => ChainError::Missing(here.outside),
                    Some(link) => ChainError::Dangling(link.outside.clone(), here.outside),
                })
            }
            Node::Error(e) => return Err(ChainError::Io(here.outside, e)),
            Node::Unscanned => return Err(ChainError::Unscanned(here.outside)),
            Node::Symlink(t) => t,
            target => {
                hops.push(here);
                return Ok(Chain { hops, target, via });
            }
        };
        if hops.len() >= MAX_HOPS {
            return Err(ChainError::Loop(here.outside));
        }
        let next = next_hop(&here, &target, space);
        hops.push(here);
        if hops.iter().any(|h| h.outside == next.outside) {
            return Err(ChainError::Loop(next.outside));
        }
        here = next;
    }
}

/// Resolves every directory above `hop`, one component at a time, and records each symlinked
/// directory with the inside path it leads to (following links in the link targets too).
fn resolve_parents(
    hop: &Hop,
    space: Space<'_>,
    fs: &dyn Lookup,
    via: &mut Vec<Hop>,
) -> Result<(), ChainError> {
    let Some(parent) = hop.inside.parent() else {
        return Ok(());
    };
    // Which side to walk: inside paths under a root; the outside path for literal mounts.
    let walk = match space {
        Space::Rooted { .. } => parent,
        Space::Literal => hop.outside.parent().unwrap_or(Path::new("/")),
    };
    let mut resolved = PathBuf::from("/");
    let mut pending = names_last_first(walk);
    let mut links = 0;
    while let Some(name) = pending.pop() {
        let here = resolved.join(&name);
        let outside = space.outside(&here);
        match fs.lstat(&outside) {
            Node::Symlink(target) => {
                links += 1;
                if links > MAX_HOPS {
                    return Err(ChainError::Loop(outside));
                }
                // An absolute target replaces the path it is joined to.
                let to = normalize(&resolved.join(&target));
                // Inside paths under a root, host paths for literal mounts: either way the
                // place the directory really is, for check_within.
                via.push(Hop {
                    inside: here.clone(),
                    outside: to.clone(),
                });
                // Continue from the target: its components, then what was left.
                resolved = PathBuf::from("/");
                pending.extend(names_last_first(&to));
            }
            _ => resolved = here,
        }
    }
    Ok(())
}

/// The normal components of `path`, last first: a stack to pop them from in order.
fn names_last_first(path: &Path) -> Vec<std::ffi::OsString> {
    let names = path.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n.to_os_string()),
        _ => None,
    });
    names.rev().collect()
}

/// Places a symlink never leads a build into, whatever `symlink_roots` says: directories
/// every local user can write, where anyone could plant a "device" or a "library".
pub(crate) const NEVER_FOLLOWED: &[&str] = &[
    "/dev/shm",
    "/dev/mqueue",
    "/run/user",
    "/run/lock",
    "/tmp",
    "/var/tmp",
];

/// Checks that every hop after the first (the configured path itself), and every symlinked
/// directory met on the way, lies under one of `roots` (inside paths) and not in a
/// [`NEVER_FOLLOWED`] place below that root: a link in an allowed place must not lead the build to, say,
/// `/etc/shadow`.
pub(crate) fn check_within(chain: &Chain, roots: &[PathBuf]) -> Result<(), ChainError> {
    // A root covers what lies under it, except the never-followed places below it (a root
    // of `/run` does not open `/run/user`; a root inside one of them, like a store in /tmp
    // for tests, is taken as configured).
    let allowed = |p: &Path| {
        roots.iter().any(|r| {
            p.starts_with(r)
                && !NEVER_FOLLOWED
                    .iter()
                    .any(|n| p.starts_with(n) && !r.starts_with(n))
        })
    };
    // Each (link, where it leads): the directories met on the way, then the hops.
    let via = chain.via.iter().map(|v| (&v.inside, &v.outside));
    let hops = chain.hops.iter().zip(chain.hops.iter().skip(1));
    match via
        .chain(hops.map(|(link, to)| (&link.inside, &to.inside)))
        .find(|(_, target)| !allowed(target))
    {
        Some((link, target)) => Err(ChainError::Escapes(link.clone(), target.clone())),
        None => Ok(()),
    }
}

/// Where a link's target lies, inside and out. A relative target resolves against the link's
/// directory on both sides, as a copied link would inside the sandbox (an absolute one replaces
/// the directory it is joined to).
fn next_hop(link: &Hop, target: &Path, space: Space<'_>) -> Hop {
    let beside = |p: &Path| normalize(&p.parent().unwrap_or(Path::new("/")).join(target));
    let inside = beside(&link.inside);
    let outside = match space {
        Space::Rooted { .. } => space.outside(&inside),
        Space::Literal => beside(&link.outside),
    };
    Hop { inside, outside }
}

/// Lexically removes `.` and `..` components (`..` at the root stays at the root).
pub(crate) use cuda_sandbox_elfkit::normalize;

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn chain_in_a_fake_root_keeps_store_paths_shared() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::fs::create_dir_all(root.join("opt/drv")).unwrap();
        symlink("../opt/drv", root.join("run/link2")).unwrap();
        symlink("/run/link2", root.join("run/link1")).unwrap();
        let space = Space::Rooted {
            root,
            store_dir: Path::new("/nix/store"),
        };
        let inside = Path::new("/run/link1");
        let chain = follow(inside, &space.outside(inside), space, &RealFs).unwrap();
        let insides: Vec<_> = chain.hops.iter().map(|h| h.inside.clone()).collect();
        assert_eq!(
            insides,
            [
                PathBuf::from("/run/link1"),
                PathBuf::from("/run/link2"),
                PathBuf::from("/opt/drv")
            ]
        );
        assert_eq!(chain.hops[2].outside, root.join("opt/drv"));
        assert_eq!(chain.target, Node::Dir);
        assert_eq!(
            space.outside(Path::new("/nix/store/abc")),
            Path::new("/nix/store/abc")
        );
    }

    #[test]
    fn loops_and_dangling_links_are_errors() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        symlink(d.join("b"), d.join("a")).unwrap();
        symlink(d.join("a"), d.join("b")).unwrap();
        symlink(d.join("nowhere"), d.join("c")).unwrap();
        assert!(matches!(
            follow(&d.join("a"), &d.join("a"), Space::Literal, &RealFs),
            Err(ChainError::Loop(_))
        ));
        assert!(matches!(
            follow(&d.join("c"), &d.join("c"), Space::Literal, &RealFs),
            Err(ChainError::Dangling(..))
        ));
        assert!(matches!(
            follow(&d.join("zz"), &d.join("zz"), Space::Literal, &RealFs),
            Err(ChainError::Missing(_))
        ));
    }

    #[test]
    fn literal_mount_with_relative_target() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        std::fs::create_dir(d.join("lib64")).unwrap();
        symlink("lib64", d.join("lib")).unwrap();
        let chain = follow(
            Path::new("/run/x/lib"),
            &d.join("lib"),
            Space::Literal,
            &RealFs,
        )
        .unwrap();
        assert_eq!(chain.hops[1].inside, Path::new("/run/x/lib64"));
        assert_eq!(chain.hops[1].outside, d.join("lib64"));
    }
}
