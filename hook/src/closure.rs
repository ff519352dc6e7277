//! Runtime closures of store paths, computed with `nix-store --query --requisites`
//! ([`cuda_sandbox_elfkit::requisites`]) and cached
//! on disk.
//!
//! Nix adds no closure for hook paths (docs/architecture.md, the hook protocol), so exposing `/nix/store/X` means exposing
//! every path X refers to, transitively. Store paths are immutable, so a closure is cached
//! forever, keyed by the store path's base name. The cache directory is a verified
//! [`StateDir`] (root-owned, not writable by others, checked on every use), so only root can
//! have written an entry, and entries are written atomically (temporary file + rename), so none
//! is ever torn: one format, no version and no checksum. An entry that does not parse (not this
//! store path's, a member outside the store) is recomputed. `nix-store` is run only when it is
//! a trusted program ([`crate::trust::program`]).
//!
//! An entry also records what each member is (a directory, a file, a symlink…), looked at
//! once when the closure is computed: a store path never changes, so later builds need not
//! `lstat` every member again. A symlink member is looked at again on every use (its target
//! decides whether it may be exposed), as is anything that was not a plain directory, file
//! or device.

use crate::statedir::StateDir;
use crate::symlinks::Node;
use cuda_sandbox_elfkit::RequisitesError;
use std::path::{Path, PathBuf};

/// An entry's first line, before the store path it is the closure of.
const HEADER: &str = "cuda-sandbox closure";

/// A closure and whether it came from the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closure {
    /// Every store path in the closure, the path itself included, with what `lstat` found
    /// there.
    pub(crate) members: Vec<(PathBuf, Node)>,
    /// True when read from the cache, false when computed now.
    pub from_cache: bool,
}

/// Why a closure could not be had: the store path whose closure was wanted, and what went
/// wrong, in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot compute the closure of {path}: {1}", path = .0.display())]
pub struct ClosureError(pub PathBuf, pub String);

/// Computes and caches closures.
#[derive(Debug, Clone)]
pub struct ClosureCache {
    /// Cache directory (created on first write).
    pub dir: PathBuf,
    /// The store directory, e.g. `/nix/store`.
    pub store_dir: PathBuf,
    /// The `nix-store` program.
    pub nix_store: PathBuf,
    /// The `PATH` to find it in when it is a bare name (the caller's, read once).
    pub search_path: Option<std::ffi::OsString>,
}

/// The top-level store path containing a path (shared with the runner's helpers).
pub(crate) use cuda_sandbox_elfkit::store_path_of;

impl ClosureCache {
    /// The closure of `store_path` (a top-level store path), from the cache when a valid entry
    /// exists, else from `nix-store` (and then cached; a cache that cannot be written only costs
    /// a warning). Without `cached`, from `nix-store`, without reading or writing the cache (for
    /// `explain` run by a user who may not use root's cache).
    pub fn closure(&self, store_path: &Path, cached: bool) -> Result<Closure, ClosureError> {
        let fail = |message: String| ClosureError(store_path.to_path_buf(), message);
        let top = store_path_of(store_path, &self.store_dir).filter(|top| top == store_path);
        let Some(name) = top.as_deref().and_then(Path::file_name) else {
            return Err(fail(format!(
                "not a top-level path of the store {}",
                self.store_dir.display()
            )));
        };
        if !cached {
            let members = self.query(store_path)?;
            return Ok(Closure {
                members,
                from_cache: false,
            });
        }
        let entry = self.dir.join(name);
        let name = name
            .to_str()
            .ok_or_else(|| fail("the store path's name is not UTF-8".to_string()))?;
        let dir = StateDir::open(&self.dir).map_err(|e| fail(e.to_string()))?;
        if let Ok(text) = dir.read_bytes(name) {
            if let Some(members) = self.decode(store_path, &text) {
                return Ok(Closure {
                    members,
                    from_cache: true,
                });
            }
            crate::log::warn(format_args!(
                "closure cache entry {} is corrupt; recomputing it",
                entry.display()
            ));
        }
        let members = self.query(store_path)?;
        if let Err(e) = self.store(&dir, name, store_path, &members) {
            crate::log::warn(format_args!(
                "cannot write closure cache entry {}: {e}",
                entry.display()
            ));
        }
        Ok(Closure {
            members,
            from_cache: false,
        })
    }

    fn query(&self, store_path: &Path) -> Result<Vec<(PathBuf, Node)>, ClosureError> {
        let fail = |message: String| ClosureError(store_path.to_path_buf(), message);
        let nix_store = crate::trust::program(&self.nix_store, self.search_path.as_deref())
            .map_err(|e| {
                fail(format!(
                    "{e} (set nix_store in the config to the nix-store program)"
                ))
            })?;
        let lines =
            cuda_sandbox_elfkit::requisites(&nix_store, store_path).map_err(|e| match e {
                RequisitesError::Spawn(_, error) => fail(format!(
                    "cannot run {}: {error} (set nix_store in the config to the nix-store program)",
                    self.nix_store.display()
                )),
                failed => fail(failed.to_string()),
            })?;
        let members = self.check_members(store_path, lines).ok_or_else(|| {
            fail("nix-store printed something that is not a list of store paths".into())
        })?;
        let nodes: Vec<Node> = members.iter().map(|m| Node::of(m)).collect();
        Ok(members.into_iter().zip(nodes).collect())
    }

    /// The members an entry's `text` lists: its [`header`], then lines of `<kind> <store path>`,
    /// each path a direct child of the store, the path itself among them; a kind that is not
    /// kept is looked at again (see [`ClosureCache::store`]).
    fn decode(&self, store_path: &Path, text: &[u8]) -> Option<Vec<(PathBuf, Node)>> {
        use std::os::unix::ffi::OsStrExt;
        let body = text.strip_prefix(header(store_path).as_slice())?;
        let mut kinds = Vec::new();
        let mut paths = Vec::new();
        for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let (&kind, rest) = line.split_first()?;
            let path = rest.strip_prefix(b" ")?;
            if !b"df?".contains(&kind) {
                return None;
            }
            kinds.push(kind);
            paths.push(PathBuf::from(std::ffi::OsStr::from_bytes(path)));
        }
        let paths = self.check_members(store_path, paths)?;
        Some(
            paths
                .into_iter()
                .zip(kinds)
                .map(|(p, kind)| {
                    let node = match kind {
                        b'd' => Node::Dir,
                        b'f' => Node::File,
                        _ => Node::of(&p),
                    };
                    (p, node)
                })
                .collect(),
        )
    }

    /// `members` when each is a direct child of the store and `store_path` is among them.
    fn check_members(&self, store_path: &Path, members: Vec<PathBuf>) -> Option<Vec<PathBuf>> {
        let ok = members
            .iter()
            .all(|m| store_path_of(m, &self.store_dir).as_deref() == Some(m.as_path()));
        (ok && members.iter().any(|m| m == store_path)).then_some(members)
    }

    fn store(
        &self,
        dir: &StateDir,
        name: &str,
        store_path: &Path,
        members: &[(PathBuf, Node)],
    ) -> std::io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let mut file = header(store_path);
        for (m, node) in members {
            // What the entry records of a member: `d` a directory, `f` a regular file, `?`
            // anything else, looked at again on use.
            let kind = match node {
                Node::Dir => b'd',
                Node::File => b'f',
                _ => b'?',
            };
            file.extend_from_slice(&[kind, b' ']);
            file.extend_from_slice(m.as_os_str().as_bytes());
            file.push(b'\n');
        }
        dir.write_atomic(name, &file, 0o644, true)
    }
}

/// An entry's first line, with its newline: [`HEADER`] and the store path it is the closure of.
fn header(store_path: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut line = format!("{HEADER} ").into_bytes();
    line.extend_from_slice(store_path.as_os_str().as_bytes());
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(dir: &Path, nix_store: &Path) -> ClosureCache {
        ClosureCache {
            dir: dir.join("cache"),
            store_dir: PathBuf::from("/nix/store"),
            nix_store: nix_store.to_path_buf(),
            search_path: std::env::var_os("PATH"),
        }
    }

    /// A fake nix-store that prints a fixed closure and counts its calls.
    fn fake_nix_store(dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let script = dir.join("nix-store");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho x >> {}/calls\necho \"$3\"\necho /nix/store/bbb-dep\n",
                dir.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        script
    }

    fn calls(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("calls")).map_or(0, |s| s.lines().count())
    }

    #[test]
    fn second_query_comes_from_the_cache() {
        let t = tempfile::tempdir().unwrap();
        let c = cache(t.path(), &fake_nix_store(t.path()));
        let p = Path::new("/nix/store/aaa-top");
        let first = c.closure(p, true).unwrap();
        assert!(!first.from_cache);
        assert_eq!(first.members.len(), 2);
        let second = c.closure(p, true).unwrap();
        assert!(second.from_cache);
        assert_eq!(second.members, first.members);
        assert_eq!(calls(t.path()), 1);
    }

    #[test]
    fn corrupt_entry_is_recomputed() {
        let t = tempfile::tempdir().unwrap();
        let c = cache(t.path(), &fake_nix_store(t.path()));
        let p = Path::new("/nix/store/aaa-top");
        c.closure(p, true).unwrap();
        let entry = t.path().join("cache/aaa-top");
        for damage in [
            b"".to_vec(),
            b"garbage\n".to_vec(),
            std::fs::read(&entry)
                .unwrap()
                .replace_bytes(b"bbb-dep", b"/etc/shadow"),
            std::fs::read(&entry)
                .unwrap()
                .replace_bytes(b"aaa-top", b"aaa-other"),
            format!("{HEADER} /nix/store/aaa-top\n? /nix/store/bbb-dep\n").into_bytes(),
        ] {
            std::fs::write(&entry, &damage).unwrap();
            let again = c.closure(p, true).unwrap();
            assert!(
                !again.from_cache,
                "trusted {:?}",
                String::from_utf8_lossy(&damage)
            );
            assert_eq!(again.members[1].0, Path::new("/nix/store/bbb-dep"));
        }
    }

    #[test]
    fn member_kinds_are_kept_and_anything_else_is_looked_at_again() {
        let t = tempfile::tempdir().unwrap();
        let c = cache(t.path(), &fake_nix_store(t.path()));
        let p = Path::new("/nix/store/aaa-top");
        let body = b"d /nix/store/aaa-top\nf /nix/store/bbb-dep\n? /nix/store/ccc-gone\n";
        let mut entry = format!("{HEADER} {}\n", p.display()).into_bytes();
        entry.extend_from_slice(body);
        let members = c.decode(p, &entry).unwrap();
        assert_eq!(members[0], (PathBuf::from("/nix/store/aaa-top"), Node::Dir));
        assert_eq!(
            members[1],
            (PathBuf::from("/nix/store/bbb-dep"), Node::File)
        );
        // Not recorded: an lstat now (here: nothing there).
        assert_eq!(members[2].1, Node::Missing);
        let unknown = [&entry[..], b""]
            .concat()
            .replace_bytes(b"f /nix", b"x /nix");
        assert_eq!(
            c.decode(p, &unknown),
            None,
            "an unknown kind is a damaged entry"
        );
    }

    #[test]
    fn failing_nix_store_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        let c = cache(t.path(), Path::new("/bin/false"));
        let e = c
            .closure(Path::new("/nix/store/aaa-top"), true)
            .unwrap_err();
        assert!(e.to_string().contains("failed"), "{e}");
        let c = cache(t.path(), Path::new("/nonexistent/nix-store"));
        let e = c
            .closure(Path::new("/nix/store/aaa-top"), true)
            .unwrap_err();
        assert!(e.to_string().contains("set nix_store"), "{e}");
    }

    trait ReplaceBytes {
        fn replace_bytes(self, from: &[u8], to: &[u8]) -> Vec<u8>;
    }
    impl ReplaceBytes for Vec<u8> {
        fn replace_bytes(self, from: &[u8], to: &[u8]) -> Vec<u8> {
            let i = self.windows(from.len()).position(|w| w == from).unwrap();
            [&self[..i], to, &self[i + from.len()..]].concat()
        }
    }
}
