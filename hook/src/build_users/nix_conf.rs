//! The settings of `nix.conf` that say who a build runs as: `build-users-group`,
//! `auto-allocate-uids`, `start-id` and `id-count` (the Nix manual's nix.conf reference).
//!
//! Read as the daemon reads its system configuration: `/etc/nix/nix.conf` (under the host
//! root), `key = value` lines, `#` comments, a later line overriding an earlier one, and
//! `include FILE` / `!include FILE` (relative to the including file; `!include` of a missing
//! file is no error). Not read: `NIX_CONF_DIR`, `NIX_CONFIG` and the per-user files, which
//! the daemon's environment may add.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Nix's default for `build-users-group` when it runs as root (`nix config show` with no
/// configuration file, Nix 2.8 and 2.34).
pub(crate) const DEFAULT_BUILD_USERS_GROUP: &str = "nixbld";
/// Nix's default `start-id`: the first uid of `auto-allocate-uids`.
pub(crate) const DEFAULT_START_ID: u64 = 872_415_232;
/// Nix's default `id-count`: how many uids `auto-allocate-uids` may use.
pub(crate) const DEFAULT_ID_COUNT: u64 = 8_388_608;

/// How deep `include`s may nest before the rest is ignored.
const MAX_INCLUDE_DEPTH: usize = 8;

/// Who Nix runs builds as, from its configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BuildUserSettings {
    /// The file read (under the host root).
    pub file: PathBuf,
    /// `build-users-group`; empty: builds run as the Nix user itself.
    pub build_users_group: String,
    /// `auto-allocate-uids`.
    pub auto_allocate_uids: bool,
    /// `start-id`.
    pub start_id: u64,
    /// `id-count`.
    pub id_count: u64,
}

/// Reads the settings from `<root>/etc/nix/nix.conf`; Nix's defaults where a setting (or the
/// file) is absent.
pub(crate) fn read(root: &Path) -> BuildUserSettings {
    let file = root.join("etc/nix/nix.conf");
    let mut values = BTreeMap::new();
    read_file(&file, &mut values, 0);
    let number = |key: &str, default: u64| {
        values
            .get(key)
            .and_then(|v: &String| v.parse().ok())
            .unwrap_or(default)
    };
    BuildUserSettings {
        build_users_group: values
            .get("build-users-group")
            .cloned()
            .unwrap_or_else(|| DEFAULT_BUILD_USERS_GROUP.to_string()),
        auto_allocate_uids: values.get("auto-allocate-uids").map(String::as_str) == Some("true"),
        start_id: number("start-id", DEFAULT_START_ID),
        id_count: number("id-count", DEFAULT_ID_COUNT),
        file,
    }
}

/// Reads `file` into `values`. A missing or unreadable file adds nothing: Nix refuses a
/// missing `include` at start-up, so a daemon that runs has none.
fn read_file(file: &Path, values: &mut BTreeMap<String, String>, depth: usize) {
    let Ok(text) = std::fs::read_to_string(file) else {
        return;
    };
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["include" | "!include", path] if depth < MAX_INCLUDE_DEPTH => {
                let path = file.parent().unwrap_or(Path::new("/")).join(path);
                read_file(&path, values, depth + 1);
            }
            _ => {
                if let Some((key, value)) = line.split_once('=') {
                    values.insert(key.trim().to_string(), value.trim().to_string());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_apply_without_a_file() {
        let t = tempfile::tempdir().unwrap();
        let s = read(t.path());
        assert_eq!(s.build_users_group, "nixbld");
        assert!(!s.auto_allocate_uids);
        assert_eq!((s.start_id, s.id_count), (872_415_232, 8_388_608));
    }

    #[test]
    fn later_lines_and_includes_override() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("etc/nix");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("nix.conf"),
            "build-users-group = nixbld # the installer's\n\
             include extra.conf\n!include missing.conf\nstart-id = 100000\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("extra.conf"),
            "build-users-group = builders\nauto-allocate-uids = true\nid-count = 65536\n",
        )
        .unwrap();
        let s = read(t.path());
        assert_eq!(s.build_users_group, "builders");
        assert!(s.auto_allocate_uids);
        assert_eq!((s.start_id, s.id_count), (100_000, 65_536));
    }

    #[test]
    fn an_empty_group_means_no_build_users() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("etc/nix")).unwrap();
        std::fs::write(t.path().join("etc/nix/nix.conf"), "build-users-group =\n").unwrap();
        assert_eq!(read(t.path()).build_users_group, "");
    }
}
