//! The MIG planner: each instance's GPU-instance and compute-instance capability nodes
//! (scanned by [`crate::scan::mig`]) as device exposures, and the administration capabilities
//! only where the rule names them; a node that is missing or wrong is a problem with its fix,
//! never a silent non-exposure. With `gpus_per_build`, [`super::GpuDemand::keep`] then keeps
//! only the leased instance's nodes.

use super::devices::unexpressible;
use super::{Decision, Problem, ProblemKind, Reason};
use crate::config::Config;
use crate::scan::{CapNode, HostView, MigView, NodeState};
use crate::symlinks;
use std::collections::BTreeSet;

impl Decision {
    /// Plans the MIG source of the rule `rule`.
    pub(super) fn add_mig(&mut self, rule: &str, mig: &MigView, config: &Config, view: &HostView) {
        let host = match &mig.found {
            Ok(host) => host,
            Err(e) => {
                self.problems
                    .push(Problem::new(rule, ProblemKind::MigUnreadable(e.clone())));
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
        let capability = cap.capability;
        let problem = |kind: ProblemKind| Problem::new(rule, kind);
        match &cap.node {
            NodeState::Present => {}
            NodeState::Missing => {
                self.problems
                    .push(problem(ProblemKind::MigNodeMissing { capability, inside }));
                return;
            }
            NodeState::Wrong(why) => {
                self.problems.push(problem(ProblemKind::MigNodeWrong {
                    capability,
                    inside,
                    why: why.clone(),
                }));
                return;
            }
        }
        let space = config.space();
        let outside = space.outside(&inside);
        let chain = symlinks::follow(&inside, &outside, space, view)
            .and_then(|c| symlinks::check_within(&c, &self.symlink_roots).map(|()| c));
        let chain = match chain {
            Ok(chain) => chain,
            Err(error) => {
                self.problems.push(problem(ProblemKind::MigNodeChain {
                    capability,
                    inside,
                    error,
                }));
                return;
            }
        };
        if let Some(bad) = unexpressible(&chain.hops) {
            self.problems
                .push(problem(ProblemKind::MigNodeUnexpressible {
                    capability,
                    bad: bad.to_path_buf(),
                }));
            return;
        }
        let reason = Reason::Mig {
            rule: rule.to_string(),
            capability: cap.capability,
        };
        self.add_chain(chain.hops, reason);
    }
}
