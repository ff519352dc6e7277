//! The planner of `sysfs = "topology"`: which host directories a build's tree binds (in
//! decide), and, once act knows the tree's name, where the build sees each one.

use super::{Exposure, Plan, Reason, Skip};
use crate::config::{Config, Sysfs};
use crate::sysfs::{TreeBind, TreeSpec, TOPOLOGY, TREES_DIR};
use std::path::{Path, PathBuf};

impl Plan {
    /// Plans the binds of `rule`'s `sysfs` (under the host root); a part another rule asked
    /// for already is planned once.
    pub(super) fn add_sysfs(&mut self, rule: &str, sysfs: Sysfs, config: &Config) {
        let spec = self.sysfs.get_or_insert_with(|| TreeSpec {
            name: String::new(),
            binds: Vec::new(),
        });
        let parts = match sysfs {
            Sysfs::Topology => TOPOLOGY,
        };
        for (inside, mount_point) in parts {
            if spec.binds.iter().any(|b| b.mount_point == mount_point) {
                continue;
            }
            spec.binds.push(TreeBind {
                source: under(&config.host_root, Path::new(inside)),
                mount_point: mount_point.to_string(),
            });
            self.sysfs_rules
                .push((mount_point.to_string(), rule.to_string()));
        }
    }

    /// Names the planned tree `name` and exposes each of its mount points at its place under
    /// `/sys` (for act, which knows the build's chroot and so the name).
    pub fn place_sysfs(&mut self, name: &str, runtime_dir: &Path) {
        let Some(spec) = &mut self.sysfs else {
            return;
        };
        spec.name = name.to_string();
        let tree = runtime_dir.join(TREES_DIR).join(name);
        for (inside, mount_point) in TOPOLOGY {
            let Some((_, rule)) = self.sysfs_rules.iter().find(|(m, _)| m == mount_point) else {
                continue;
            };
            self.exposures.push(Exposure {
                inside: PathBuf::from(inside),
                outside: tree.join(mount_point),
                reason: Reason::Sysfs { rule: rule.clone() },
            });
        }
    }

    /// Leaves the tree out (`exec`, which makes no tree), saying `why`.
    pub fn drop_sysfs(&mut self, why: &str) {
        if self.sysfs.take().is_none() {
            return;
        }
        let (dropped, kept): (Vec<Exposure>, Vec<Exposure>) = std::mem::take(&mut self.exposures)
            .into_iter()
            .partition(|e| matches!(e.reason, Reason::Sysfs { .. }));
        self.exposures = kept;
        for e in dropped {
            self.skipped.push(Skip {
                path: e.inside.display().to_string(),
                why: why.to_string(),
            });
        }
    }
}

/// `path` (absolute) under `root`.
fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
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
        let mut plan = Plan::default();
        plan.add_sysfs("a", Sysfs::Topology, &c);
        plan.add_sysfs("b", Sysfs::Topology, &c);
        let spec = plan.sysfs.clone().unwrap();
        let sources: Vec<_> = spec.binds.iter().map(|b| b.source.clone()).collect();
        assert_eq!(
            sources,
            [
                PathBuf::from("/fake/sys/devices/system/cpu"),
                PathBuf::from("/fake/sys/devices/system/node")
            ]
        );
        plan.place_sysfs("x-1-2", &c.runtime_dir);
        let seen: Vec<_> = plan
            .exposures
            .iter()
            .map(|e| (e.inside.clone(), e.outside.clone(), e.reason.clone()))
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
        assert_eq!(plan.sysfs.unwrap().name, "x-1-2");
    }

    #[test]
    fn a_plan_without_sysfs_places_nothing_and_exec_drops_the_tree() {
        let c = config("runtime_dir = \"/run/cs\"\n");
        let mut plan = Plan::default();
        plan.place_sysfs("x", &c.runtime_dir);
        assert!(plan.exposures.is_empty());
        plan.add_sysfs("a", Sysfs::Topology, &c);
        plan.place_sysfs("x", &c.runtime_dir);
        plan.drop_sysfs("exec makes no tree");
        assert!(plan.exposures.is_empty() && plan.sysfs.is_none());
        assert_eq!(plan.skipped.len(), 2);
    }
}
