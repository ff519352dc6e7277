//! Whether Nix's build users can open the device nodes a build is given. `explain` only: the
//! hook itself neither reads nor judges this (a node the build cannot open fails the build
//! inside, with `EACCES`, which is what `explain` is there to foresee).
//!
//! Who a build runs as (Nix's `UserLock`, `lock.cc`, and `setUser` in the derivation builder):
//! - with `build-users-group` (the default `nixbld` as root): a member's uid, the group's gid,
//!   and the member's other groups (`getgrouplist`) as supplementary groups: "to allow admins
//!   to specify groups such as kvm";
//! - with `auto-allocate-uids` (Nix ≥ 2.12, experimental): a uid from `start-id` on, in steps
//!   of 65536 per build within `id-count`, the same number as gid in a sandboxed build, and no
//!   supplementary groups; no host account or group has those ids, so only the "other"
//!   permission bits of a node count. A `uid-range` build is uid and gid 0 inside, mapped to
//!   65536 host ids from there: the "other" bits still decide, as root inside a user namespace
//!   has no power over a node whose owner and group it does not map (measured in real builds
//!   under Nix 2.26 and 2.34, `hook/tests/concurrency/`);
//! - with an empty `build-users-group`: as the Nix user itself (root for the daemon).
//!
//! A node is judged as the kernel judges an `open(O_RDWR)` (CUDA opens the NVIDIA nodes read
//! and write): the owner's bits if the uid owns it, else the group's bits if one of its groups
//! is the node's, else the other bits (`path_resolution(7)`).

pub(crate) mod accounts;
pub(crate) mod nix_conf;

use crate::plan::Exposure;
use accounts::BuildUser;
use serde::Serialize;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// Who Nix runs builds as on this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub(crate) enum Builders {
    /// `build-users-group` is empty: builds run as the Nix user (root for the daemon).
    NixUser,
    /// The members of the build users group.
    Users {
        /// The group.
        group: String,
        /// Its gid.
        gid: u32,
        /// Its members, as builds run with them.
        users: Vec<BuildUser>,
    },
    /// The configured group is not in `/etc/group`: Nix refuses to build.
    MissingGroup {
        /// The group named by `build-users-group`.
        group: String,
    },
    /// `auto-allocate-uids`: uids (and gids) from `start_id`, no supplementary groups.
    AutoAllocated {
        /// `start-id`.
        start_id: u64,
        /// `id-count`.
        id_count: u64,
    },
}

impl Builders {
    /// Who builds run as, in words.
    pub(crate) fn describe(&self) -> String {
        match self {
            Builders::NixUser => "the Nix user itself (build-users-group is empty)".to_string(),
            Builders::Users { group, users, .. } => {
                let names: Vec<&str> = users.iter().map(|u| u.name.as_str()).collect();
                format!("the members of group '{group}' ({})", names.join(", "))
            }
            Builders::MissingGroup { group } => {
                format!("group '{group}' (build-users-group), which does not exist")
            }
            Builders::AutoAllocated { start_id, id_count } => format!(
                "auto-allocated uids {start_id}..{} with gid = uid and no supplementary groups \
                 (auto-allocate-uids; a uid-range build is root inside, mapped to 65536 of them)",
                start_id + id_count
            ),
        }
    }
}

/// A device node a build user could not open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Unopenable {
    /// The node, as the build sees it.
    pub node: String,
    /// Its mode, owner and group.
    #[serde(flatten)]
    pub stat: Node,
    /// Its group's name, when `/etc/group` has one.
    pub group: Option<String>,
    /// The build users who could not open it.
    pub users: Vec<String>,
}

impl Unopenable {
    /// The fix, in one line.
    pub(crate) fn fix(&self, builders: &Builders) -> String {
        let node = self.node.trim_start_matches("/dev/");
        let udev = format!(
            "a udev rule giving the node mode 0666 (KERNEL==\"{node}\", MODE=\"0666\"; on NixOS \
             services.udev.extraRules)"
        );
        match (builders, &self.group) {
            (Builders::Users { .. }, Some(group))
                if self.stat.mode & 0o060 == 0o060 && self.stat.gid != 0 =>
            {
                format!(
                "add the build users to group '{group}' (on NixOS: users.users.<name>.extraGroups \
                 for each nixbld user, else usermod -aG {group} <user>), or {udev}"
            )
            }
            _ => format!("give it {udev}"),
        }
    }
}

impl std::fmt::Display for Unopenable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Node { mode, uid, gid } = self.stat;
        let group = self.group.clone().unwrap_or_else(|| gid.to_string());
        let users = match self.users.as_slice() {
            [] => "the build user".to_string(),
            [one] => one.clone(),
            [first, rest @ ..] => format!("{first} and {} other build users", rest.len()),
        };
        let node = &self.node;
        write!(
            f,
            "{users} cannot open {node} (mode {mode:04o}, owner {uid}, group {group})"
        )
    }
}

/// The check: who builds run as, and the nodes some of them could not open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct AccessCheck {
    /// The Nix configuration file read.
    pub nix_conf: String,
    /// Who builds run as.
    pub builders: Builders,
    /// The device nodes some build user could not open, with the fix.
    pub unopenable: Vec<Unopenable>,
}

impl AccessCheck {
    /// One warning line per node a build user could not open, each naming the fix.
    pub(crate) fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .unopenable
            .iter()
            .map(|u| format!("{u}: {}", u.fix(&self.builders)))
            .collect();
        if let Builders::MissingGroup { group } = &self.builders {
            out.push(format!(
                "build-users-group = {group} ({}) is not in /etc/group: Nix refuses to build; \
                 create the group and its build users",
                self.nix_conf
            ));
        }
        out
    }
}

/// Checks the device nodes among `exposures` (those a device glob matched; character devices
/// only) against the build users of the host at `root`.
pub(crate) fn check(exposures: &[Exposure], root: &Path) -> AccessCheck {
    let settings = nix_conf::read(root);
    let groups = accounts::groups(root);
    // Who builds run as, from the host's nix.conf and accounts.
    let group = &settings.build_users_group;
    let builders = if settings.auto_allocate_uids {
        Builders::AutoAllocated {
            start_id: settings.start_id,
            id_count: settings.id_count,
        }
    } else if group.is_empty() {
        Builders::NixUser
    } else {
        match accounts::build_users(root, group) {
            Some((group, users)) => Builders::Users {
                group: group.name,
                gid: group.gid,
                users,
            },
            None => Builders::MissingGroup {
                group: group.clone(),
            },
        }
    };
    let unopenable = exposures
        .iter()
        .filter(|e| e.reason.is_device())
        .filter_map(|e| {
            let meta = std::fs::metadata(&e.outside).ok()?;
            if !meta.file_type().is_char_device() {
                return None;
            }
            let node = Node {
                uid: meta.uid(),
                gid: meta.gid(),
                mode: meta.mode() & 0o7777,
            };
            let users = who_cannot_open(&builders, node);
            (!users.is_empty()).then(|| Unopenable {
                node: e.inside.to_string_lossy().into_owned(),
                stat: node,
                group: (groups.iter().find(|g| g.gid == node.gid)).map(|g| g.name.clone()),
                users,
            })
        })
        .collect();
    AccessCheck {
        nix_conf: settings.file.display().to_string(),
        builders,
        unopenable,
    }
}

/// A node's mode, owner and group, as `stat` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Node {
    /// Permission bits (`0o660`, …).
    pub mode: u32,
    /// Owner uid.
    pub uid: u32,
    /// Group gid.
    pub gid: u32,
}

/// Whether a process with `uid`, `gid` and supplementary `groups` may open `node` for reading
/// and writing (`path_resolution(7)`: one class of bits applies, the first that matches).
pub(crate) fn can_open(uid: u32, gid: u32, groups: &[u32], node: Node) -> bool {
    let bits = if uid == node.uid {
        node.mode >> 6
    } else if gid == node.gid || groups.contains(&node.gid) {
        node.mode >> 3
    } else {
        node.mode
    };
    bits & 0o6 == 0o6
}

/// The build users (by name, or a description of the range) who could not open `node`.
fn who_cannot_open(builders: &Builders, node: Node) -> Vec<String> {
    match builders {
        Builders::NixUser | Builders::MissingGroup { .. } => Vec::new(),
        Builders::Users { users, .. } => users
            .iter()
            .filter(|u| !can_open(u.uid, u.gid, &u.groups, node))
            .map(|u| u.name.clone())
            .collect(),
        // The build's uid and gid are in the allocated range, which holds no host account
        // (Nix refuses a uid that clashes with one): only the "other" bits apply.
        Builders::AutoAllocated { start_id, .. } if node.mode & 0o6 != 0o6 => {
            vec![format!("auto-allocated build uids from {start_id}")]
        }
        Builders::AutoAllocated { .. } => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VIDEO: u32 = 44;

    fn node(mode: u32, gid: u32) -> Node {
        Node { uid: 0, gid, mode }
    }

    #[test]
    fn the_first_matching_class_of_bits_decides() {
        assert!(can_open(30001, 30000, &[], node(0o666, 0)));
        assert!(!can_open(30001, 30000, &[], node(0o660, VIDEO)));
        assert!(can_open(30001, 30000, &[VIDEO], node(0o660, VIDEO)));
        assert!(can_open(30001, VIDEO, &[], node(0o660, VIDEO)));
        // A group that matches takes the group bits, even when "other" would allow more.
        assert!(!can_open(30001, 30000, &[VIDEO], node(0o606, VIDEO)));
        // Read-only is not enough.
        assert!(!can_open(30001, 30000, &[VIDEO], node(0o640, VIDEO)));
        assert!(can_open(0, 0, &[], node(0o600, VIDEO)));
    }

    #[test]
    fn auto_allocated_uids_only_get_the_other_bits() {
        let auto = Builders::AutoAllocated {
            start_id: nix_conf::DEFAULT_START_ID,
            id_count: nix_conf::DEFAULT_ID_COUNT,
        };
        assert!(who_cannot_open(&auto, node(0o666, VIDEO)).is_empty());
        assert_eq!(who_cannot_open(&auto, node(0o660, VIDEO)).len(), 1);
        assert!(who_cannot_open(&Builders::NixUser, node(0o600, VIDEO)).is_empty());
    }
}
