//! The MIG planner: each instance's GPU-instance and compute-instance capability nodes
//! (scanned by [`crate::scan::mig`]) as device exposures, and the administration capabilities
//! only where the rule names them; a node that is missing or wrong is a problem with its fix,
//! never a silent non-exposure. With `gpus_per_build`, [`super::GpuDemand::keep`] then keeps
//! only the leased instance's nodes.

use super::devices::unexpressible;
use super::{Decision, ProblemKind, Reason};
use crate::config::Config;
use crate::scan::{CapNode, HostView, MigView, NodeState};
use std::collections::BTreeSet;

impl Decision {
    /// Plans the MIG source of the rule `rule`.
    pub(super) fn add_mig(&mut self, rule: &str, mig: &MigView, config: &Config, view: &HostView) {
        let host = match mig {
            Ok(host) => host,
            Err(e) => return self.add_problem_of(rule, ProblemKind::MigUnreadable(e.clone())),
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

    /// Exposes the node of `cap` with its chain, or adds the problem that stops it: a node
    /// that is missing or wrong, whose chain leaves the roots or that Nix's protocol cannot
    /// express.
    fn add_capability(&mut self, rule: &str, cap: &CapNode, config: &Config, view: &HostView) {
        let (inside, capability) = (cap.inside(), cap.capability);
        let space = config.space();
        let kind = match &cap.node {
            NodeState::Missing => ProblemKind::MigNodeMissing(capability, inside),
            NodeState::Wrong(why) => ProblemKind::MigNodeWrong(capability, inside, why.clone()),
            NodeState::Present => {
                match self.follow(&inside, &space.outside(&inside), space, view) {
                    Err(error) => ProblemKind::MigNodeChain(capability, inside, error),
                    Ok(chain) => match unexpressible(&chain.hops) {
                        Some(bad) => ProblemKind::MigNodeUnexpressible(capability, bad),
                        None => {
                            let rule = rule.to_string();
                            return self.add_chain(chain.hops, Reason::Mig { rule, capability });
                        }
                    },
                }
            }
        };
        self.add_problem_of(rule, kind);
    }
}
