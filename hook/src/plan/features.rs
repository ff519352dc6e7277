//! A build's `cuda-sm-*` features against the GPUs the plan found, by the one rule
//! ([`Required`], union semantics) and the GPU inventory ([`InventoryView`]):
//!
//! - a host whose GPUs, all of them, busy or not, cannot satisfy the features (or, with
//!   leases, no `count` of them together) fails the build at once, naming the features and
//!   the GPUs with their capabilities and bus addresses;
//! - with leases, the demand carries the features ([`Fit`]), and the lease takes only a set
//!   that satisfies them, waiting while only held sets do;
//! - with every GPU exposed (`gpus_per_build = 0`), the exposure does not change;
//! - with no usable inventory the features select nothing: the build is served as though it
//!   required none of them, and `explain` (and the hook's warning) says why. Never more than
//!   that build would get anyway.

use super::{devices, gpu_numbers, Decision, ProblemKind, Skipped};
use crate::fit::Fit;
use crate::scan::inventory::InventoryView;
use cuda_sandbox_cuda_facts::features::Required;
use std::collections::BTreeMap;

impl Decision {
    /// Holds the plan's GPUs to `required` (non-empty) by `inventory`.
    pub(super) fn add_features(&mut self, required: &Required, inventory: Option<&InventoryView>) {
        let names = required.unmet_by(&[]).join(", ");
        let gpus = gpu_numbers(devices(&self.exposures).map(|e| e.inside.as_path()));
        let known = match inventory {
            Some(InventoryView::Gpus(known)) => known,
            Some(InventoryView::Tegra(capability)) => {
                let unmet = required.unmet_by(&[*capability]);
                if !unmet.is_empty() {
                    self.unsatisfiable(ProblemKind::TegraUnmet(capability.to_string(), unmet));
                }
                return;
            }
            Some(InventoryView::Missing(why)) => return self.no_inventory(&names, why),
            None => return self.no_inventory(&names, "it was not read"),
        };
        let mut capabilities = BTreeMap::new();
        let mut described = Vec::new();
        for gpu in &gpus {
            let Some(found) = known.iter().find(|k| k.minor == *gpu) else {
                let why = format!("it lists no nvidia{gpu}");
                return self.no_inventory(&names, &why);
            };
            capabilities.insert(*gpu, found.capability);
            // `nvidia1 9.0 at 0000:02:00.0`.
            described.push(format!("nvidia{gpu} {} at {}", found.capability, found.bdf));
        }
        let all: Vec<_> = capabilities.values().copied().collect();
        let here = if described.is_empty() {
            "no GPU".to_string()
        } else {
            described.join(", ")
        };
        let unmet = required.unmet_by(&all);
        if !unmet.is_empty() {
            return self.unsatisfiable(ProblemKind::FeaturesUnmet(unmet, here));
        }
        let Some(demand) = &mut self.gpu_demand else {
            return;
        };
        let fit = Fit {
            required: required.clone(),
            capabilities,
        };
        if fit.choose(&demand.slots, demand.count).is_none() {
            let kind =
                ProblemKind::FeaturesUnmetTogether(demand.count, required.unmet_by(&[]), here);
            return self.unsatisfiable(kind);
        }
        demand.fit = Some(fit);
    }

    /// The features select nothing: said in `explain` and on the hook's stderr.
    fn no_inventory(&mut self, names: &str, why: &str) {
        let skipped = Skipped::NoInventory(names.to_string(), why.to_string());
        self.warnings.push(skipped.to_string());
        self.skip(names, skipped);
    }

    /// The build fails at once: no wait can help.
    fn unsatisfiable(&mut self, kind: ProblemKind) {
        self.gpu_demand = None;
        self.add_problem(kind);
    }
}
