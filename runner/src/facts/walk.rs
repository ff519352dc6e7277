//! The files under the paths a user gives (`lint PATH`, `--package PATH`), as a user means
//! them: a relative path is relative to the working directory, a path that does not exist is
//! an error naming it, and symlinks are followed where they point into the Nix store or
//! within the paths given (the outputs of `symlinkJoin` and `buildEnv` are all symlinks into
//! the store), each file they reach judged once (by its real path). A path given is followed
//! wherever it points. A symlink found inside that leads elsewhere is not followed (a package
//! does not reach into the host's files): it is counted, and a directory holding nothing else
//! has no file to judge.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A path given that cannot be walked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {why}", .path.display())]
pub(crate) struct PathError {
    /// The path as given.
    pub path: PathBuf,
    /// Why: it does not exist, or it cannot be read.
    pub why: String,
}

/// `path` made absolute against the working directory (`./result` → `$PWD/result`), when it
/// exists (a dangling symlink does not).
pub(crate) fn resolve(path: &Path) -> Result<PathBuf, PathError> {
    let error = |why: String| PathError {
        path: path.to_path_buf(),
        why,
    };
    let absolute = std::path::absolute(path).map_err(|e| error(e.to_string()))?;
    std::fs::metadata(&absolute).map_err(|e| error(e.to_string()))?;
    Ok(absolute)
}

/// What walking the roots found.
#[derive(Debug, Default)]
pub(crate) struct Walked {
    /// Each regular file once, by the first path that reached it, in walk order.
    pub files: Vec<PathBuf>,
    /// How many files each root reached, those an earlier root reached too included (the
    /// roots' order).
    pub per_root: Vec<usize>,
    /// How many symlinks under each root were not followed (the roots' order).
    pub links_not_followed: Vec<usize>,
    /// Entries that could not be walked, with why.
    pub errors: Vec<PathError>,
}

/// Walks `roots` (absolute: [`resolve`]), following symlinks whose real path lies in
/// `store_dir` or within a root; a file reached twice (by a link and by its own path, or by
/// two links) is listed once.
pub(crate) fn walk(roots: &[PathBuf], store_dir: &Path) -> Walked {
    let mut within: Vec<PathBuf> = roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .collect();
    within.extend(std::fs::canonicalize(store_dir).ok());
    within.push(store_dir.to_path_buf());
    let followed = |path: &Path| {
        std::fs::canonicalize(path).is_ok_and(|real| within.iter().any(|w| real.starts_with(w)))
    };
    let mut out = Walked::default();
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    for root in roots {
        let mut reached = 0;
        let not_followed = std::cell::Cell::new(0);
        let walker = walkdir::WalkDir::new(root)
            .follow_links(true)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| {
                let follow = !e.path_is_symlink() || e.depth() == 0 || followed(e.path());
                not_followed.set(not_followed.get() + usize::from(!follow));
                follow
            });
        for entry in walker {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    out.errors.push(PathError {
                        path: e.path().unwrap_or(root).to_path_buf(),
                        why: format!("cannot be walked: {e}"),
                    });
                    continue;
                }
            };
            if !entry.file_type().is_file() {
                continue;
            }
            reached += 1;
            let real = std::fs::canonicalize(entry.path()).unwrap_or_else(|_| entry.path().into());
            if seen.insert(real) {
                out.files.push(entry.path().to_path_buf());
            }
        }
        out.per_root.push(reached);
        out.links_not_followed.push(not_followed.get());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// Issue 34: a directory of symlinks (symlinkJoin's output) was 0 files.
    #[test]
    fn links_into_the_store_and_within_the_roots_are_followed_each_target_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let pkg = store.join("aaa-pkg/lib");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(pkg.join("libx.so"), b"x").unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"s").unwrap();
        let join = dir.path().join("join/lib");
        std::fs::create_dir_all(&join).unwrap();
        symlink(pkg.join("libx.so"), join.join("libx.so")).unwrap();
        symlink(pkg.join("libx.so"), join.join("libx.so.1")).unwrap();
        symlink(outside.join("secret"), join.join("secret")).unwrap();
        let root = dir.path().join("join");
        let walked = walk(std::slice::from_ref(&root), &store);
        assert_eq!(walked.files, [join.join("libx.so")], "{walked:?}");
        assert_eq!(walked.per_root, [2], "two links reach the file");
        assert_eq!(walked.links_not_followed, [1]);
        // Given both, the store file is still judged once.
        let both = walk(&[root, store.join("aaa-pkg")], &store);
        assert_eq!(both.files.len(), 1, "{both:?}");
        // Issue 49: the second root reached its file too; it does not hold "no file".
        assert_eq!(both.per_root, [2, 1]);
    }

    /// Issue 34: `--package ./result` became `/result`, and a missing path was "0 files".
    #[test]
    fn relative_paths_resolve_against_the_working_directory_and_missing_ones_are_named() {
        let here = std::env::current_dir().unwrap();
        assert_eq!(resolve(Path::new("./src")).unwrap(), here.join("./src"));
        let missing = resolve(Path::new("/does/not/exist")).unwrap_err();
        assert!(
            missing.to_string().starts_with("/does/not/exist: "),
            "{missing}"
        );
    }
}
