//! Which slots a build requiring `cuda-sm-*` features may be given: a set whose GPUs'
//! capabilities satisfy every feature by the one rule the hook and the runner share
//! ([`Required::satisfied_by`]: each feature met by at least one of them). Plain data and a
//! pure search, shared by the planner (can any set of this host's slots satisfy the build?)
//! and the leases (which free set?); reads and writes nothing.
//!
//! The search is exhaustive over the distinct capabilities of the candidates that meet at
//! least one feature, each stood for by its most preferred slot, smallest sets first, so
//! the fewest slots are bound to the features and the rest of the count goes to the most
//! preferred slots left. Capabilities, not slots, are searched: slots of one capability are
//! alike to the rule. At most [`MAX_CAPABILITIES`] capabilities are considered (the most
//! preferred), so one search looks at no more than 2^12 = 4096 sets, each judged in time
//! linear in the features; no real host has that many GPU generations.

use crate::slot::Slot;
use cuda_sandbox_cuda_facts::features::Required;
use cuda_sandbox_cuda_facts::Capability;
use std::collections::BTreeMap;

/// The most distinct capabilities one search considers.
pub(crate) const MAX_CAPABILITIES: usize = 12;

/// A build's `cuda-sm-*` features and the capabilities of the GPUs it may be given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fit {
    /// The features.
    pub required: Required,
    /// Each GPU's capability, by its `/dev/nvidiaN` number (a MIG instance has its GPU's).
    pub capabilities: BTreeMap<u32, Capability>,
}

impl Fit {
    /// `count` of `candidates` (most preferred first) that together satisfy the features, in
    /// ascending order; `None` when no `count` of them do.
    pub(crate) fn choose(&self, candidates: &[Slot], count: usize) -> Option<Vec<Slot>> {
        let mut picked = if self.required.is_empty() {
            Vec::new()
        } else {
            self.smallest_cover(candidates, count)?
        };
        for slot in candidates {
            if picked.len() >= count {
                break;
            }
            if !picked.contains(slot) {
                picked.push(*slot);
            }
        }
        if picked.len() < count {
            return None;
        }
        picked.sort_unstable();
        Some(picked)
    }

    /// The fewest candidates, at most `count`, that satisfy the features: the first such set
    /// of the most preferred slot of each useful capability, in order.
    fn smallest_cover(&self, candidates: &[Slot], count: usize) -> Option<Vec<Slot>> {
        let met_by_none = self.required.unmet_by(&[]).len();
        let mut useful: Vec<(Capability, Slot)> = Vec::new();
        for slot in candidates {
            let Some(&capability) = self.capabilities.get(&slot.gpu()) else {
                continue;
            };
            if useful.len() < MAX_CAPABILITIES
                && !useful.iter().any(|(c, _)| *c == capability)
                && self.required.unmet_by(&[capability]).len() < met_by_none
            {
                useful.push((capability, *slot));
            }
        }
        let mut set: Vec<usize> = Vec::new();
        for size in 1..=count.min(useful.len()) {
            set.clear();
            set.extend(0..size);
            loop {
                let capabilities: Vec<Capability> = set.iter().map(|&i| useful[i].0).collect();
                if self.required.satisfied_by(&capabilities) {
                    return Some(set.iter().map(|&i| useful[i].1).collect());
                }
                if !next_combination(&mut set, useful.len()) {
                    break;
                }
            }
        }
        None
    }
}

/// Advances `set` (ascending indices below `n`) to the next combination of its size in
/// lexicographic order; false after the last.
fn next_combination(set: &mut [usize], n: usize) -> bool {
    let k = set.len();
    let Some(i) = (0..k).rev().find(|&i| set[i] < n - k + i) else {
        return false;
    };
    set[i] += 1;
    for j in i + 1..k {
        set[j] = set[j - 1] + 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuda_sandbox_cuda_facts::features::required;

    fn fit(features: &[&str], gpus: &[&str]) -> Fit {
        Fit {
            required: required(features.iter().copied()),
            capabilities: gpus
                .iter()
                .enumerate()
                .map(|(i, c)| (i as u32, Capability::parse(c).unwrap()))
                .collect(),
        }
    }

    fn whole(gpus: &[u32]) -> Vec<Slot> {
        gpus.iter().map(|g| Slot::Gpu(*g)).collect()
    }

    #[test]
    fn the_gpu_that_satisfies_is_chosen_whatever_the_preference() {
        let f = fit(&["cuda", "cuda-sm-90a"], &["8.9", "9.0"]);
        assert_eq!(f.choose(&whole(&[0, 1]), 1), Some(whole(&[1])));
        assert_eq!(f.choose(&whole(&[1, 0]), 1), Some(whole(&[1])));
        assert_eq!(f.choose(&whole(&[0]), 1), None);
        // The rest of the count goes to the preferred slots.
        assert_eq!(f.choose(&whole(&[0, 1]), 2), Some(whole(&[0, 1])));
        let baseline = fit(&["cuda-sm-86"], &["8.9", "9.0", "8.0"]);
        assert_eq!(baseline.choose(&whole(&[2, 1, 0]), 1), Some(whole(&[1])));
    }

    /// The example: `[cuda-sm-90a, cuda-sm-100f]` on a 9.0 + 10.0 host is met by the
    /// two together, never by one.
    #[test]
    fn a_set_satisfies_by_the_union_of_its_gpus() {
        let f = fit(&["cuda-sm-90a", "cuda-sm-100f"], &["9.0", "8.9", "10.0"]);
        assert_eq!(f.choose(&whole(&[0, 1, 2]), 1), None);
        assert_eq!(f.choose(&whole(&[1, 2, 0]), 2), Some(whole(&[0, 2])));
        assert_eq!(f.choose(&whole(&[1, 2, 0]), 3), Some(whole(&[0, 1, 2])));
        assert_eq!(f.choose(&whole(&[0, 1]), 2), None);
    }

    #[test]
    fn a_mig_instance_has_its_gpu_s_capability() {
        use crate::mig::InstanceId;
        let f = fit(&["cuda-sm-90"], &["8.0", "9.0"]);
        let slice = Slot::Mig(InstanceId {
            gpu: 1,
            gi: 2,
            ci: 0,
        });
        assert_eq!(f.choose(&[Slot::Gpu(0), slice], 1), Some(vec![slice]));
    }

    #[test]
    fn a_malformed_feature_or_an_unknown_gpu_is_never_satisfied() {
        let f = fit(&["cuda-sm-9x"], &["9.0"]);
        assert_eq!(f.choose(&whole(&[0]), 1), None);
        let f = fit(&["cuda-sm-90"], &["9.0"]);
        assert_eq!(f.choose(&whole(&[5]), 1), None);
        let none = fit(&["cuda"], &[]);
        assert_eq!(none.choose(&whole(&[3, 1]), 1), Some(whole(&[3])));
    }

    #[test]
    fn combinations_run_in_lexicographic_order_to_the_last() {
        let mut set = vec![0, 1];
        let mut seen = vec![set.clone()];
        while next_combination(&mut set, 4) {
            seen.push(set.clone());
        }
        assert_eq!(
            seen,
            [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]].map(|s| s.to_vec())
        );
    }

    /// The bound: twelve capabilities and every feature of the convention, none coverable by
    /// fewer than all twelve, is one search of every set, quickly.
    #[test]
    fn the_search_is_bounded_by_the_capabilities() {
        let gpus = [
            "5.0", "5.2", "6.0", "6.1", "7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0",
            "10.0", "12.0",
        ];
        let features: Vec<String> = gpus
            .iter()
            .map(|g| format!("cuda-sm-{}a", g.replace('.', "")))
            .collect();
        let names: Vec<&str> = features.iter().map(String::as_str).collect();
        let f = fit(&names, &gpus);
        let all: Vec<Slot> = whole(&(0..gpus.len() as u32).collect::<Vec<_>>());
        let started = std::time::Instant::now();
        // 14 capabilities, but only the 12 most preferred are searched: no cover.
        assert_eq!(f.choose(&all, gpus.len()), None);
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }
}
