//! The booted NixOS system's driver: what `/run/opengl-driver` pointed at when the running
//! kernel booted, so that a stale-driver problem can offer it.
//!
//! On NixOS, stage 2 of boot links `/run/booted-system` to the system it booted
//! (`nixos/modules/system/boot/stage-2-init.sh`), and a tmpfiles rule keeps it a GC root
//! (`/nix/var/nix/gcroots/booted-system`, `nixos/modules/system/boot/systemd/tmpfiles.nix`),
//! so its closure stays in the store. A system links its `/etc` at `<system>/etc`
//! (`nixos/modules/system/activation/top-level.nix`); `hardware.graphics` makes the driver
//! link with the tmpfiles rule `L+ /run/opengl-driver - - - - <drivers>` in
//! `etc/tmpfiles.d/graphics-driver.conf` (`nixos/modules/hardware/graphics.nix`; before 24.11,
//! `hardware.opengl` wrote the same rule into `etc/tmpfiles.d/00-nixos.conf`).
//!
//! Only the store is read past `/run/booted-system`, and only store paths are believed: the
//! link must lead into the store, and so must every file read through it.

use crate::discover::versions;
use std::path::{Path, PathBuf};

/// The booted system's driver, still in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BootedDriver {
    /// The store path `/run/opengl-driver` pointed at in the booted system.
    pub driver: PathBuf,
    /// The user-space version of its libcuda (`lib/libcuda.so.<version>`), when it has one.
    pub libcuda_version: Option<String>,
}

/// The tmpfiles files that may hold the driver link's rule, newest layout first.
const RULE_FILES: [&str; 2] = [
    "etc/tmpfiles.d/graphics-driver.conf",
    "etc/tmpfiles.d/00-nixos.conf",
];

/// The driver link of the system `/run/booted-system` (under `root`) names, when that link
/// leads into `store_dir` and its rule names a store path that still exists.
pub(crate) fn booted_driver(root: &Path, store_dir: &Path) -> Option<BootedDriver> {
    let link = crate::discover::host::under(root, store_dir, Path::new("/run/booted-system"));
    crate::trust::check_path(&link).ok()?;
    let system = in_store(&std::fs::read_link(&link).ok()?, store_dir)?;
    let driver = RULE_FILES.iter().find_map(|rel| {
        let file = in_store(&std::fs::canonicalize(system.join(rel)).ok()?, store_dir)?;
        driver_link_target(&std::fs::read_to_string(file).ok()?)
    })?;
    let driver = in_store(&driver, store_dir)?;
    let real = std::fs::canonicalize(driver.join("lib/libcuda.so.1")).ok();
    let libcuda = real.as_deref().and_then(|p| in_store(p, store_dir));
    let name = libcuda.as_ref().and_then(|p| p.file_name()?.to_str());
    let libcuda_version = name.and_then(|n| versions::version_in_file_name(n, "libcuda"));
    driver.exists().then_some(BootedDriver {
        driver,
        libcuda_version,
    })
}

/// `path` when it is absolute, normal and inside `store_dir`.
fn in_store(path: &Path, store_dir: &Path) -> Option<PathBuf> {
    let normal = crate::symlinks::normalize(path);
    (normal.is_absolute() && normal.starts_with(store_dir) && normal != store_dir).then_some(normal)
}

/// The argument of the tmpfiles `L`/`L+` rule for `/run/opengl-driver` in `text`
/// (`tmpfiles.d(5)`: type, path, mode, user, group, age, argument; NixOS quotes the fields
/// of `systemd.tmpfiles.settings` in single quotes).
fn driver_link_target(text: &str) -> Option<PathBuf> {
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line
            .split_whitespace()
            .map(|f| f.trim_matches('\''))
            .collect();
        match fields.as_slice() {
            [kind, "/run/opengl-driver", _, _, _, _, target] if kind.starts_with('L') => {
                Some(PathBuf::from(target))
            }
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn both_rule_layouts_are_read() {
        let settings =
            "'L+' '/run/opengl-driver' '-' '-' '-' '-' /nix/store/aaa-graphics-drivers\n\
                        'r' '/run/opengl-driver-32' '-' '-' '-' '-' \n";
        assert_eq!(
            driver_link_target(settings),
            Some(PathBuf::from("/nix/store/aaa-graphics-drivers"))
        );
        let rules = "# This file is created automatically\n\
                     L+ /run/opengl-driver - - - - /nix/store/bbb-mesa-drivers\n";
        assert_eq!(
            driver_link_target(rules),
            Some(PathBuf::from("/nix/store/bbb-mesa-drivers"))
        );
        assert_eq!(
            driver_link_target("d /run/opengl-driver 0755 root root - -\n"),
            None
        );
    }

    /// A fake root and store: `/run/booted-system` → a system whose `etc` holds the rule.
    fn booted(rule_target: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        let store = t.path().join("store");
        let system = store.join("sss-nixos-system");
        let etc = store.join("eee-etc/etc/tmpfiles.d");
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::fs::create_dir_all(&system).unwrap();
        std::fs::create_dir_all(&etc).unwrap();
        symlink(store.join("eee-etc/etc"), system.join("etc")).unwrap();
        std::fs::write(
            etc.join("graphics-driver.conf"),
            format!("'L+' '/run/opengl-driver' '-' '-' '-' '-' {rule_target}\n"),
        )
        .unwrap();
        symlink(&system, root.join("run/booted-system")).unwrap();
        (t, root, store)
    }

    #[test]
    fn the_booted_driver_and_its_libcuda_version_are_found() {
        let (t, root, store) = booted("");
        let driver = store.join("ddd-graphics-drivers");
        std::fs::create_dir_all(driver.join("lib")).unwrap();
        std::fs::write(driver.join("lib/libcuda.so.550.54.14"), b"").unwrap();
        symlink("libcuda.so.550.54.14", driver.join("lib/libcuda.so.1")).unwrap();
        std::fs::write(
            store.join("eee-etc/etc/tmpfiles.d/graphics-driver.conf"),
            format!(
                "'L+' '/run/opengl-driver' '-' '-' '-' '-' {}\n",
                driver.display()
            ),
        )
        .unwrap();
        let found = booted_driver(&root, &store).unwrap();
        assert_eq!(found.driver, driver);
        assert_eq!(found.libcuda_version.as_deref(), Some("550.54.14"));
        drop(t);
    }

    #[test]
    fn nothing_outside_the_store_is_believed() {
        let (t, root, store) = booted("/tmp/evil-driver");
        assert_eq!(booted_driver(&root, &store), None);
        // A booted-system link out of the store is not followed at all.
        let elsewhere = t.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::remove_file(root.join("run/booted-system")).unwrap();
        symlink(&elsewhere, root.join("run/booted-system")).unwrap();
        assert_eq!(booted_driver(&root, &store), None);
        // A driver gone from the store is not offered.
        let (_t, root, store) = booted("");
        std::fs::write(
            store.join("eee-etc/etc/tmpfiles.d/graphics-driver.conf"),
            format!(
                "L+ /run/opengl-driver - - - - {}\n",
                store.join("zzz-gone").display()
            ),
        )
        .unwrap();
        assert_eq!(booted_driver(&root, &store), None);
    }
}
