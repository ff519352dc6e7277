//! Writing a build's manifest to the runtime directory, and removing stale ones.
//!
//! The manifests directory is a verified [`StateDir`] (root-owned, mode 0700 when created, not a
//! symlink; checked on every write). Files are written atomically (temporary file + rename)
//! with mode 0444 through the directory's descriptor, so a concurrent reader never sees a torn
//! manifest, the build (which runs as a build user) cannot change it, and nothing can be
//! swapped in by another user. A manifest whose sandbox directory no longer exists belongs to
//! a finished build and is removed the next time the hook writes one.

use crate::plan::PlannedManifest;
use crate::statedir::StateDir;
use std::path::Path;

/// Writes `m` and removes manifests of builds that are gone.
pub fn write(m: &PlannedManifest, runtime_dir: &Path) -> std::io::Result<()> {
    let dir_path = m.outside.parent().unwrap_or(runtime_dir);
    let name = m
        .outside
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| std::io::Error::other("the manifest's name is not UTF-8"))?;
    let dir = StateDir::open(dir_path).map_err(std::io::Error::other)?;
    remove_stale(&dir);
    let mut bytes = m.content.to_json().into_bytes();
    bytes.push(b'\n');
    dir.write_atomic(name, &bytes, 0o444, false)
}

/// Removes manifests whose chroot directory no longer exists (and unreadable leftovers).
fn remove_stale(dir: &StateDir) {
    #[derive(serde::Deserialize)]
    struct Owner {
        chroot: String,
    }
    for name in dir.names() {
        if !name.ends_with(".json") {
            continue;
        }
        let stale = match dir
            .read_bytes(&name)
            .ok()
            .and_then(|b| serde_json::from_slice::<Owner>(&b).ok())
        {
            Some(o) => o.chroot.is_empty() || !Path::new(&o.chroot).exists(),
            None => true,
        };
        if stale {
            let _ = dir.remove(&name);
        }
    }
}
