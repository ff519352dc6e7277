//! Slot choice: which of the host's slots (whole GPUs, MIG instances) a build gets, given the
//! live leases and the per-slot count of leases granted.

use super::record::{LeaseRecord, Usage};
use crate::fit::Fit;
use crate::slot::Slot;

/// `count` of `slots` that no lease in `held` overlaps ([`Slot::overlaps`]), the least used
/// first (by `usage`), then in order, returned in ascending order. With `fit` (a build's
/// `cuda-sm-*` features), only a set that satisfies them ([`Fit::choose`]). Not enough free:
/// `held` back, the live leases on the others.
pub(super) fn choose(
    slots: &[Slot],
    held: Vec<LeaseRecord>,
    usage: &Usage,
    count: usize,
    fit: Option<&Fit>,
) -> Result<Vec<Slot>, Vec<LeaseRecord>> {
    let mut free: Vec<Slot> = slots
        .iter()
        .copied()
        .filter(|s| !held.iter().any(|h| h.slot().overlaps(s)))
        .collect();
    if free.len() < count {
        return Err(held);
    }
    free.sort_by_key(|s| (usage.get(&s.key()).copied().unwrap_or(0), *s));
    match fit {
        Some(fit) => fit.choose(&free, count).ok_or(held),
        None => {
            free.truncate(count);
            free.sort_unstable();
            Ok(free)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::mig::InstanceId;

    fn lease(gpu: u32) -> LeaseRecord {
        LeaseRecord {
            gpu,
            ..LeaseRecord::test_record()
        }
    }

    fn gpus(numbers: &[u32]) -> Vec<Slot> {
        numbers.iter().map(|g| Slot::Gpu(*g)).collect()
    }

    #[test]
    fn the_least_used_free_gpus_are_chosen_then_by_number() {
        let usage = Usage::from([
            ("nvidia0".into(), 3),
            ("nvidia1".into(), 1),
            ("nvidia2".into(), 1),
        ]);
        let all = gpus(&[0, 1, 2, 3]);
        assert_eq!(
            choose(&all, vec![], &usage, 2, None).unwrap(),
            gpus(&[1, 3])
        );
        assert_eq!(
            choose(&all, vec![lease(3)], &usage, 2, None).unwrap(),
            gpus(&[1, 2])
        );
        let short = choose(&gpus(&[0, 1]), vec![lease(1)], &usage, 2, None).unwrap_err();
        assert_eq!(short, [lease(1)]);
    }

    #[test]
    fn a_slice_is_free_unless_it_or_its_whole_gpu_is_held() {
        let slice = |gi, ci| Slot::Mig(InstanceId { gpu: 0, gi, ci });
        let slices = [slice(1, 0), slice(2, 0)];
        let held = LeaseRecord {
            mig: slice(1, 0).mig(),
            ..lease(0)
        };
        let usage = Usage::new();
        assert_eq!(
            choose(&slices, vec![held], &usage, 1, None).unwrap(),
            [slice(2, 0)]
        );
        assert!(choose(&slices, vec![lease(0)], &usage, 1, None).is_err());
    }

    /// A build requiring `cuda-sm-90a` on an 8.9 + 9.0 host gets the 9.0 though the 8.9 is
    /// less used, and waits while the 9.0 is held though the 8.9 is free.
    #[test]
    fn with_features_only_a_satisfying_free_set_is_chosen() {
        use cuda_sandbox_cuda_facts::{features, Capability};
        let fit = Fit {
            required: features::required(["cuda", "cuda-sm-90a"]),
            capabilities: [(0, "8.9"), (1, "9.0")]
                .map(|(g, c)| (g, Capability::parse(c).unwrap()))
                .into(),
        };
        let usage = Usage::from([("nvidia1".into(), 5)]);
        let all = gpus(&[0, 1]);
        assert_eq!(
            choose(&all, vec![], &usage, 1, Some(&fit)).unwrap(),
            gpus(&[1])
        );
        let short = choose(&all, vec![lease(1)], &usage, 1, Some(&fit)).unwrap_err();
        assert_eq!(short, [lease(1)]);
        assert_eq!(
            choose(&all, vec![lease(1)], &usage, 1, None).unwrap(),
            gpus(&[0])
        );
    }
}
