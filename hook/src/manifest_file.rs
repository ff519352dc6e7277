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
//!
//! Each build's manifest has a name of its own ([`name_for`]): from the whole chroot path and
//! the chroot directory's identity, never from its last component alone, which current Nix
//! makes `root` for every build.

use crate::plan::PlannedManifest;
use crate::statedir::StateDir;
use std::path::Path;

/// How many manifests the directory may hold before a write sweeps out those of ended builds.
pub(crate) const SWEEP_AT: usize = 64;

/// The file name of the manifest of the build whose sandbox root is `chroot` (`explain.json`
/// without one), unique among the builds that exist at once.
///
/// Nix 2.8 passes the hook `<drv>.chroot`; current Nix passes `<drv>.chroot/root` (the
/// `chrootRootDir` of `getPreBuildHookArgs`, NixOS/nix `src/libstore/unix/build/
/// linux-derivation-builder.cc`), so the last component alone named every build `root`
/// (Nix 2.26 and later). The name is a label for people, the chroot's last components
/// (`…-x.drv.chroot.root`, at most 120 bytes of them, unsafe bytes as `_`), then the chroot
/// directory's device and inode: no two directories that exist at once share them, so no two
/// running builds share a manifest, whatever their paths. A chroot that does not exist (a
/// test's) is named by a 64-bit FNV-1a hash of its whole path instead.
pub fn name_for(chroot: Option<&Path>) -> String {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let Some(chroot) = chroot else {
        return "explain.json".to_owned();
    };
    let mut names = chroot.iter().rev().filter(|c| c.as_bytes() != b"/");
    let last = names.next().map(|n| n.as_bytes()).unwrap_or(b"chroot");
    let mut label = Vec::new();
    if last == b"root" {
        if let Some(parent) = names.next() {
            label.extend_from_slice(parent.as_bytes());
            label.push(b'.');
        }
    }
    label.extend_from_slice(last);
    let label: String = label
        .iter()
        .take(120)
        .map(|&b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'+' | b'-' | b'.' | b'_' => b as char,
            _ => '_',
        })
        .collect();
    // A name may not start with a dot (`names` would hide it) or be `.`/`..`.
    let label = label.trim_start_matches('.');
    let id = match std::fs::symlink_metadata(chroot) {
        Ok(m) => format!("{:x}-{:x}", m.dev(), m.ino()),
        Err(_) => format!("{:016x}", fnv1a(chroot.as_os_str().as_bytes())),
    };
    format!("{label}-{id}.json")
}

/// 64-bit FNV-1a of `bytes`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Writes `m`, first removing manifests of builds that are gone when there are
/// [`SWEEP_AT`] or more.
pub(crate) fn write(m: &PlannedManifest, runtime_dir: &Path) -> std::io::Result<()> {
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
    if !dir.may_hold(SWEEP_AT) {
        return;
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
        let stale = dir
            .read_bytes(&name)
            .ok()
            .and_then(|b| serde_json::from_slice::<Owner>(&b).ok())
            .is_none_or(|o| o.chroot.is_empty() || !Path::new(&o.chroot).exists());
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
            outside: dir.join(name_for(Some(chroot))),
            content: Manifest {
                version: MANIFEST_VERSION,
                derivation: format!("/nix/store/x-{name}.drv"),
                chroot: chroot.display().to_string(),
                rules: vec!["nvidia".to_string()],
                features: vec!["cuda".to_string()],
                devices: Vec::new(),
                leased_gpus: Vec::new(),
                mig: None,
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
        for kept in [&live, &new] {
            Manifest::read(&dir.join(name_for(Some(kept)))).unwrap();
        }
    }

    /// Current Nix passes `<drv>.chroot/root`, and every manifest was
    /// `root.json`; two builds then bound each other's, with each other's GPUs.
    #[test]
    fn every_build_gets_its_own_manifest_with_either_shape_of_chroot() {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("store");
        let mut chroots = Vec::new();
        for drv in ["aaa-x.drv", "bbb-x.drv", "ccc-y.drv"] {
            // Nix 2.8: `<drv>.chroot`; current Nix: `<drv>.chroot/root`.
            let old = store.join(format!("{drv}.chroot"));
            let new = old.join("root");
            std::fs::create_dir_all(&new).unwrap();
            chroots.push(old);
            chroots.push(new);
        }
        // Existing chroots are named by their identity, missing ones by their whole path.
        chroots.push(tmp.path().join("gone/root"));
        chroots.push(tmp.path().join("elsewhere/root"));
        let names: std::collections::BTreeSet<String> =
            chroots.iter().map(|c| name_for(Some(c))).collect();
        assert_eq!(names.len(), chroots.len(), "{names:?}");
        let new_shape = name_for(Some(&store.join("bbb-x.drv.chroot/root")));
        assert!(
            new_shape.starts_with("bbb-x.drv.chroot.root-"),
            "{new_shape}"
        );
        assert!(name_for(Some(&store.join("aaa-x.drv.chroot"))).starts_with("aaa-x.drv.chroot-"));
        // Stable for one chroot, readable, and a plain file name whatever the path holds.
        assert_eq!(name_for(Some(&chroots[1])), name_for(Some(&chroots[1])));
        for odd in [
            "/",
            "/root",
            "/a/.hidden",
            "/x/\n=\u{1b}",
            &"/l".repeat(400),
        ] {
            let name = name_for(Some(Path::new(odd)));
            assert!(name.len() < 200 && !name.starts_with('.'), "{name}");
            assert!(
                name.bytes().all(|b| b.is_ascii_graphic() && b != b'/'),
                "{name}"
            );
        }
        assert_eq!(name_for(None), "explain.json");

        // Written for two live builds of the new shape: two manifests, each its own.
        let run = tmp.path().join("run");
        let dir = run.join("manifests");
        for c in [&chroots[1], &chroots[3]] {
            write(&manifest(&dir, c), &run).unwrap();
        }
        for c in [&chroots[1], &chroots[3]] {
            let m = Manifest::read(&dir.join(name_for(Some(c)))).unwrap();
            assert_eq!(m.chroot, c.display().to_string());
        }
    }
}
