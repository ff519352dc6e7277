//! Following symlink chains so that a link and everything it points to are exposed together.
//!
//! Nix 2.8 binds a symlink's target at the link's inside path; newer Nix copies the link itself
//! into the sandbox, where its target must then exist too (DESIGN.md §3). So for every exposed
//! path the plan exposes the link *and* each hop of its chain, each at the place the copied link
//! would resolve to inside the sandbox.

use std::fmt;
use std::fs::Metadata;
use std::path::{Component, Path, PathBuf};

/// The most hops followed before a chain counts as a loop (the kernel's limit is 40).
pub const MAX_HOPS: usize = 40;

/// Where an inside path's outside counterpart is found.
#[derive(Debug, Clone, Copy)]
pub enum Space<'a> {
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

impl Space<'_> {
    /// The outside path for `inside`.
    pub fn outside(&self, inside: &Path) -> PathBuf {
        match self {
            Space::Rooted { root, store_dir } => {
                if inside.starts_with(store_dir) || *root == Path::new("/") {
                    inside.to_path_buf()
                } else {
                    root.join(inside.strip_prefix("/").unwrap_or(inside))
                }
            }
            Space::Literal => inside.to_path_buf(),
        }
    }
}

/// One path of a chain: where the build sees it and where it is on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// Path inside the sandbox.
    pub inside: PathBuf,
    /// Path on the host.
    pub outside: PathBuf,
}

/// A resolved chain: the starting path, then each symlink target in turn, and the metadata of
/// the final (non-link) path.
#[derive(Debug)]
pub struct Chain {
    /// The start and every hop; the first is the path asked for.
    pub hops: Vec<Hop>,
    /// Metadata of the last hop, which is not a symlink.
    pub target: Metadata,
}

/// Why a chain could not be followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainError {
    /// The starting path does not exist.
    Missing(PathBuf),
    /// A link points at something that does not exist.
    Dangling {
        /// The link.
        link: PathBuf,
        /// Its (outside) target.
        target: PathBuf,
    },
    /// More than [`MAX_HOPS`] hops, or a path seen twice.
    Loop(PathBuf),
    /// Any other I/O error.
    Io(PathBuf, String),
    /// A link leads outside the roots symlinks may be followed into.
    Escapes {
        /// The link (inside path).
        link: PathBuf,
        /// Where it leads (inside path).
        target: PathBuf,
    },
}

impl fmt::Display for ChainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChainError::Missing(p) => write!(f, "{} does not exist", p.display()),
            ChainError::Dangling { link, target } => write!(
                f,
                "symlink {} points to {}, which does not exist",
                link.display(),
                target.display()
            ),
            ChainError::Loop(p) => write!(f, "symlink loop at {}", p.display()),
            ChainError::Io(p, e) => write!(f, "cannot inspect {}: {e}", p.display()),
            ChainError::Escapes { link, target } => write!(
                f,
                "symlink {} leads to {}, outside the roots symlinks may be followed into \
                 (add its root to symlink_roots in the config to allow it)",
                link.display(),
                target.display()
            ),
        }
    }
}

/// Follows the chain starting at (`inside`, `outside`) in `space`.
pub fn follow(inside: &Path, outside: &Path, space: Space<'_>) -> Result<Chain, ChainError> {
    let mut hops = vec![Hop {
        inside: inside.to_path_buf(),
        outside: outside.to_path_buf(),
    }];
    loop {
        let here = hops.last().expect("chain is never empty");
        let meta = match std::fs::symlink_metadata(&here.outside) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(if hops.len() == 1 {
                    ChainError::Missing(here.outside.clone())
                } else {
                    ChainError::Dangling {
                        link: hops[hops.len() - 2].outside.clone(),
                        target: here.outside.clone(),
                    }
                })
            }
            Err(e) => return Err(ChainError::Io(here.outside.clone(), e.to_string())),
        };
        if !meta.file_type().is_symlink() {
            return Ok(Chain { hops, target: meta });
        }
        if hops.len() > MAX_HOPS {
            return Err(ChainError::Loop(here.outside.clone()));
        }
        let target = std::fs::read_link(&here.outside)
            .map_err(|e| ChainError::Io(here.outside.clone(), e.to_string()))?;
        let next = next_hop(here, &target, space);
        if hops.iter().any(|h| h.outside == next.outside) {
            return Err(ChainError::Loop(next.outside));
        }
        hops.push(next);
    }
}

/// Checks that every hop after the first (the configured path itself) lies under one of
/// `roots` (inside paths): a link in an allowed place must not lead the build to, say,
/// `/etc/shadow`.
pub fn check_within(chain: &Chain, roots: &[PathBuf]) -> Result<(), ChainError> {
    for pair in chain.hops.windows(2) {
        let target = &pair[1].inside;
        if !roots.iter().any(|r| target.starts_with(r)) {
            return Err(ChainError::Escapes {
                link: pair[0].inside.clone(),
                target: target.clone(),
            });
        }
    }
    Ok(())
}

/// Where a link's target lies, inside and out. A relative target resolves against the link's
/// directory on both sides, as a copied link would inside the sandbox.
fn next_hop(link: &Hop, target: &Path, space: Space<'_>) -> Hop {
    let parent = |p: &Path| p.parent().unwrap_or(Path::new("/")).to_path_buf();
    let inside = if target.is_absolute() {
        normalize(target)
    } else {
        normalize(&parent(&link.inside).join(target))
    };
    let outside = match space {
        Space::Rooted { .. } => space.outside(&inside),
        Space::Literal if target.is_absolute() => inside.clone(),
        Space::Literal => normalize(&parent(&link.outside).join(target)),
    };
    Hop { inside, outside }
}

/// Lexically removes `.` and `..` components (`..` at the root stays at the root).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn normalize_handles_dots() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), Path::new("/a/c"));
        assert_eq!(normalize(Path::new("/../../x")), Path::new("/x"));
    }

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
        let chain = follow(inside, &space.outside(inside), space).unwrap();
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
        assert!(chain.target.is_dir());
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
            follow(&d.join("a"), &d.join("a"), Space::Literal),
            Err(ChainError::Loop(_))
        ));
        assert!(matches!(
            follow(&d.join("c"), &d.join("c"), Space::Literal),
            Err(ChainError::Dangling { .. })
        ));
        assert!(matches!(
            follow(&d.join("zz"), &d.join("zz"), Space::Literal),
            Err(ChainError::Missing(_))
        ));
    }

    #[test]
    fn literal_mount_with_relative_target() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        std::fs::create_dir(d.join("lib64")).unwrap();
        symlink("lib64", d.join("lib")).unwrap();
        let chain = follow(Path::new("/run/x/lib"), &d.join("lib"), Space::Literal).unwrap();
        assert_eq!(chain.hops[1].inside, Path::new("/run/x/lib64"));
        assert_eq!(chain.hops[1].outside, d.join("lib64"));
    }
}
