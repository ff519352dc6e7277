//! The MIG planner: each instance's GPU-instance and compute-instance capability nodes
//! (scanned by [`crate::scan::mig`]) as device exposures, and the administration capabilities
//! only where the rule names them; a node that is missing or wrong is a problem with its fix,
//! never a silent non-exposure. With `gpus_per_build`, [`super::GpuDemand::keep`] then keeps
//! only the leased instance's nodes.

use super::devices::unexpressible;
use super::{Decision, Problem, Reason};
use crate::config::Config;
use crate::scan::{CapNode, HostView, MigView, NodeState};
use crate::symlinks::{self, Space};
use std::collections::BTreeSet;

impl Decision {
    /// Plans the MIG source of the rule `rule`.
    pub(super) fn add_mig(&mut self, rule: &str, mig: &MigView, config: &Config, view: &HostView) {
        let host = match &mig.found {
            Ok(host) => host,
            Err(e) => {
                self.problems.push(Problem {
                    rule: rule.to_string(),
                    what: format!("the MIG instances cannot be read: {e}"),
                    fix: "check the NVIDIA driver's MIG files (`nvidia-smi mig -lgi`), or remove \
                          [rule.mig] from the rule"
                        .to_string(),
                });
                return;
            }
        };
        let mut gis = BTreeSet::new();
        for instance in &host.instances {
            if gis.insert(instance.gi.capability) {
                self.add_capability(rule, &instance.gi, config, view);
            }
            self.add_capability(rule, &instance.ci, config, view);
        }
        for admin in &host.admin {
            self.add_capability(rule, admin, config, view);
        }
    }

    fn add_capability(&mut self, rule: &str, cap: &CapNode, config: &Config, view: &HostView) {
        let inside = cap.inside();
        let create = format!(
            "create it with `nvidia-modprobe -f {}` (at boot, for each instance)",
            cap.capability.proc_path().display()
        );
        let problem = |what: String, fix: String| Problem {
            rule: rule.to_string(),
            what,
            fix,
        };
        match &cap.node {
            NodeState::Present => {}
            NodeState::Missing => {
                let what = format!(
                    "the {}'s device node {} is missing",
                    cap.capability,
                    inside.display()
                );
                self.problems.push(problem(what, create));
                return;
            }
            NodeState::Wrong(why) => {
                let what = format!(
                    "{} is not the {}'s device node: {why}",
                    inside.display(),
                    cap.capability
                );
                self.problems
                    .push(problem(what, format!("remove it, then {create}")));
                return;
            }
        }
        let space = Space::Rooted {
            root: &config.host_root,
            store_dir: &config.store_dir,
        };
        let outside = space.outside(&inside);
        let chain = symlinks::follow(&inside, &outside, space, view)
            .and_then(|c| symlinks::check_within(&c, &self.symlink_roots).map(|()| c));
        let chain = match chain {
            Ok(chain) => chain,
            Err(e) => {
                let what = format!(
                    "the {}'s device node {}: {e}",
                    cap.capability,
                    inside.display()
                );
                self.problems.push(problem(what, create));
                return;
            }
        };
        if let Some(bad) = unexpressible(&chain.hops) {
            let what = format!(
                "the {}'s device node cannot be given to the build: {bad:?} holds a newline or \
                 '=', which Nix's pre-build-hook protocol cannot express",
                cap.capability
            );
            self.problems.push(problem(
                what,
                "rename /dev/nvidia-caps (its udev rule)".into(),
            ));
            return;
        }
        let reason = Reason::Mig {
            rule: rule.to_string(),
            capability: cap.capability,
        };
        self.add_chain(chain.hops, reason);
    }
}
