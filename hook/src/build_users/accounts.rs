//! The build users' accounts: `/etc/passwd` and `/etc/group` under the host root, read as
//! `getpwnam`, `getgrnam` and `getgrouplist` read them for local accounts (`passwd(5)`,
//! `group(5)`). Accounts from NSS services (LDAP, systemd's dynamic users) are not seen.

use std::path::Path;

/// A build user as Nix runs a build with it: its uid, the build users group's gid, and the
/// user's other groups (Nix's `SimpleUserLock`: `getgrouplist` minus the group itself).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct BuildUser {
    /// The account name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// The gid the build runs with: the build users group's.
    pub gid: u32,
    /// Its supplementary groups, by gid.
    pub groups: Vec<u32>,
}

/// One `/etc/group` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    /// The group name.
    pub name: String,
    /// Its gid.
    pub gid: u32,
    /// Its members, by name.
    pub members: Vec<String>,
}

/// The groups of `<root>/etc/group` (unreadable or malformed lines are left out).
pub(crate) fn groups(root: &Path) -> Vec<Group> {
    let text = std::fs::read_to_string(root.join("etc/group")).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            let [name, _, gid, members] = f.as_slice() else {
                return None;
            };
            Some(Group {
                name: name.to_string(),
                gid: gid.parse().ok()?,
                members: members
                    .split(',')
                    .filter(|m| !m.is_empty())
                    .map(str::to_string)
                    .collect(),
            })
        })
        .collect()
}

/// (uid, primary gid) of `name` in `<root>/etc/passwd`.
fn passwd_entry(text: &str, name: &str) -> Option<(u32, u32)> {
    text.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        match f.as_slice() {
            [n, _, uid, gid, ..] if *n == name => Some((uid.parse().ok()?, gid.parse().ok()?)),
            _ => None,
        }
    })
}

/// The members of the group `group` as build users, or `None` when the group does not exist.
/// A member without a passwd entry is left out (Nix refuses to build with it).
pub(crate) fn build_users(root: &Path, group: &str) -> Option<(Group, Vec<BuildUser>)> {
    let all = groups(root);
    let the_group = all.iter().find(|g| g.name == group)?.clone();
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap_or_default();
    let users = the_group
        .members
        .iter()
        .filter_map(|name| {
            let (uid, primary) = passwd_entry(&passwd, name)?;
            let groups: std::collections::BTreeSet<u32> = all
                .iter()
                .filter(|g| g.members.contains(name))
                .map(|g| g.gid)
                .chain(std::iter::once(primary))
                .filter(|g| *g != the_group.gid)
                .collect();
            Some(BuildUser {
                name: name.clone(),
                uid,
                gid: the_group.gid,
                groups: groups.into_iter().collect(),
            })
        })
        .collect();
    Some((the_group, users))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_get_the_groups_gid_and_their_other_groups() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("etc")).unwrap();
        std::fs::write(
            t.path().join("etc/group"),
            "root:x:0:\nvideo:x:44:nixbld2\nnixbld:x:30000:nixbld1,nixbld2,ghost\nkvm:x:302:nixbld1\n",
        )
        .unwrap();
        std::fs::write(
            t.path().join("etc/passwd"),
            "nixbld1:x:30001:30000:Nix build user 1:/var/empty:/bin/false\n\
             nixbld2:x:30002:65534::/var/empty:/bin/false\n",
        )
        .unwrap();
        let (group, users) = build_users(t.path(), "nixbld").unwrap();
        assert_eq!(group.gid, 30000);
        assert_eq!(users.len(), 2, "ghost has no passwd entry: {users:?}");
        assert_eq!(users[0].uid, 30001);
        assert_eq!(users[0].gid, 30000);
        assert_eq!(users[0].groups, [302]);
        assert_eq!(users[1].groups, [44, 65534]);
        assert!(build_users(t.path(), "nobody-here").is_none());
    }
}
