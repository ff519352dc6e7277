//! Writing a build's manifest to the runtime directory, and removing stale ones.
//!
//! The manifests directory is a verified [`StateDir`] (root-owned, mode 0700 when created, not a
//! symlink; checked on every write). Files are written atomically (temporary file + rename)
//! with mode 0444 through the directory's descriptor, so a concurrent reader never sees a torn
//! manifest, the build (which runs as a build user) cannot change it, and nothing can be
//! swapped in by another user. A manifest whose sandbox directory no longer exists belongs to
//! a finished build. Such manifests are removed in one sweep when the directory holds
//! [`SWEEP_AT`] or more, so a build reads the others' manifests only once in a while, not on
//! every run (the directory stays below `SWEEP_AT` plus the builds running at once).

use crate::plan::PlannedManifest;
use crate::statedir::StateDir;
use std::path::Path;

/// How many manifests the directory may hold before a write sweeps out those of ended builds.
pub const SWEEP_AT: usize = 64;

/// Writes `m`, first removing manifests of builds that are gone when there are
/// [`SWEEP_AT`] or more.
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

/// With [`SWEEP_AT`] manifests or more, removes those whose chroot directory no longer
/// exists (and unreadable leftovers).
fn remove_stale(dir: &StateDir) {
    #[derive(serde::Deserialize)]
    struct Owner {
        chroot: String,
    }
    let names: Vec<String> = dir
        .names()
        .into_iter()
        .filter(|n| n.ends_with(".json"))
        .collect();
    if names.len() < SWEEP_AT {
        return;
    }
    for name in names {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PlannedManifest;
    use cuda_sandbox_manifest::{DriverManifest, Manifest, MANIFEST_VERSION};

    fn manifest(dir: &Path, chroot: &Path) -> PlannedManifest {
        let name = chroot.file_name().unwrap().to_str().unwrap();
        PlannedManifest {
            outside: dir.join(format!("{name}.json")),
            content: Manifest {
                version: MANIFEST_VERSION,
                derivation: format!("/nix/store/x-{name}.drv"),
                chroot: chroot.display().to_string(),
                rules: vec!["nvidia".to_string()],
                features: vec!["cuda".to_string()],
                devices: Vec::new(),
                leased_gpus: Vec::new(),
                driver: DriverManifest::none("test"),
            },
        }
    }

    #[test]
    fn ended_builds_manifests_are_swept_once_there_are_many() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        let dir = run.join("manifests");
        let live = tmp.path().join("live");
        std::fs::create_dir(&live).unwrap();
        write(&manifest(&dir, &live), &run).unwrap();
        let count = || std::fs::read_dir(&dir).unwrap().count();
        // Ended builds (their chroots are gone) below the threshold: kept.
        for i in 1..SWEEP_AT {
            write(&manifest(&dir, &tmp.path().join(format!("gone-{i}"))), &run).unwrap();
        }
        assert_eq!(count(), SWEEP_AT);
        // The next write sweeps: only the live build's and the new one stay.
        let new = tmp.path().join("new");
        std::fs::create_dir(&new).unwrap();
        write(&manifest(&dir, &new), &run).unwrap();
        assert_eq!(count(), 2);
        for kept in ["live.json", "new.json"] {
            Manifest::read(&dir.join(kept)).unwrap();
        }
    }
}
