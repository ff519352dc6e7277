//! The planner of a rule's `sysfs` (`"topology"`, `"kfd"`): which host directories a build's tree binds (in
//! decide), and, once act knows the tree's name, where the build sees each one.

use super::{Decision, Exposure, Reason, Skip, Skipped};
use crate::config::{Config, Sysfs};
use crate::sysfs::{TreeBind, KFD, TOPOLOGY, TREES_DIR};
use std::path::{Path, PathBuf};

impl Decision {
    /// Plans the binds of `rule`'s `sysfs` (under the host root); a part another rule asked
    /// for already is planned once.
    pub(super) fn add_sysfs(&mut self, rule: &str, sysfs: Sysfs, config: &Config) {
        let parts: &[(&str, &str)] = match sysfs {
            Sysfs::Topology => &TOPOLOGY,
            Sysfs::Kfd => &KFD,
        };
        for &(inside, mount_point) in parts {
            if self.sysfs.iter().any(|b| b.mount_point == mount_point) {
                continue;
            }
            self.sysfs.push(TreeBind {
                inside: PathBuf::from(inside),
                source: config.host_root.join(inside.trim_start_matches('/')),
                rule: rule.to_string(),
                mount_point: mount_point.to_string(),
            });
        }
    }

    /// Leaves the tree's exposures out (`exec`, which makes no tree), each skipped saying `why`.
    pub(crate) fn drop_sysfs(&mut self, why: &'static str) {
        let skipped = &mut self.skipped;
        self.exposures.retain(|e| {
            let sysfs = matches!(e.reason, Reason::Sysfs { .. });
            if sysfs {
                skipped.push(Skip::new(e.inside.display(), Skipped::NoSysfsTree(why)));
            }
            !sysfs
        });
    }
}

/// The exposures of the tree `name` holding `binds`: each mount point at its place under
/// `/sys` (for act, which knows the build's chroot and so the name).
pub(crate) fn sysfs_exposures(binds: &[TreeBind], name: &str, runtime_dir: &Path) -> Vec<Exposure> {
    let tree = runtime_dir.join(TREES_DIR).join(name);
    binds
        .iter()
        .map(|b| Exposure {
            inside: b.inside.clone(),
            outside: tree.join(&b.mount_point),
            reason: Reason::Sysfs {
                rule: b.rule.clone(),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn topology_binds_cpu_and_node_under_the_host_root_once() {
        let c = config("host_root = \"/fake\"\nruntime_dir = \"/run/cs\"\n");
        let mut decision = Decision::default();
        decision.add_sysfs("a", Sysfs::Topology, &c);
        decision.add_sysfs("b", Sysfs::Topology, &c);
        let sources: Vec<_> = decision.sysfs.iter().map(|b| b.source.clone()).collect();
        assert_eq!(
            sources,
            [
                PathBuf::from("/fake/sys/devices/system/cpu"),
                PathBuf::from("/fake/sys/devices/system/node")
            ]
        );
        let seen: Vec<_> = sysfs_exposures(&decision.sysfs, "x-1-2", &c.runtime_dir)
            .into_iter()
            .map(|e| (e.inside, e.outside, e.reason))
            .collect();
        let sysfs = Reason::Sysfs { rule: "a".into() };
        assert_eq!(
            seen,
            [
                (
                    PathBuf::from("/sys/devices/system/cpu"),
                    PathBuf::from("/run/cs/sysfs/x-1-2/cpu"),
                    sysfs.clone()
                ),
                (
                    PathBuf::from("/sys/devices/system/node"),
                    PathBuf::from("/run/cs/sysfs/x-1-2/node"),
                    sysfs
                ),
            ]
        );
    }

    #[test]
    fn exec_drops_only_the_tree_saying_why() {
        let c = config("runtime_dir = \"/run/cs\"\n");
        let mut decision = Decision::default();
        decision.add_sysfs("a", Sysfs::Topology, &c);
        let mut exposures = sysfs_exposures(&decision.sysfs, "x", &c.runtime_dir);
        decision.exposures.append(&mut exposures);
        decision.exposures.push(Exposure {
            inside: "/dev/nvidia0".into(),
            outside: "/dev/nvidia0".into(),
            reason: Reason::HostPath { rule: "a".into() },
        });
        decision.drop_sysfs("exec makes no tree");
        assert_eq!(decision.exposures.len(), 1);
        assert_eq!(decision.skipped.len(), 2);
        assert!(decision
            .skipped
            .iter()
            .all(|s| s.why == Skipped::NoSysfsTree("exec makes no tree")));
    }
}
