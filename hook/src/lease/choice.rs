//! Slot choice: which of the host's slots (whole GPUs, MIG instances) a build gets, given the
//! live leases and the per-slot count of leases granted.

use super::record::{LeaseRecord, Usage};
use crate::slot::Slot;

/// Not enough slots are free: the live leases on the others.
#[derive(Debug)]
pub struct Shortage {
    /// The leases that hold slots.
    pub held: Vec<LeaseRecord>,
}

/// `count` of `slots` that no lease in `held` overlaps ([`Slot::overlaps`]), the least used
/// first (by `usage`), then in order, returned in ascending order.
pub fn choose(
    slots: &[Slot],
    held: Vec<LeaseRecord>,
    usage: &Usage,
    count: usize,
) -> Result<Vec<Slot>, Shortage> {
    let mut free: Vec<Slot> = slots
        .iter()
        .copied()
        .filter(|s| !held.iter().any(|h| h.slot().overlaps(s)))
        .collect();
    if free.len() < count {
        return Err(Shortage { held });
    }
    free.sort_by_key(|s| (usage.get(&s.key()).copied().unwrap_or(0), *s));
    free.truncate(count);
    free.sort_unstable();
    Ok(free)
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
        assert_eq!(choose(&all, vec![], &usage, 2).unwrap(), gpus(&[1, 3]));
        assert_eq!(
            choose(&all, vec![lease(3)], &usage, 2).unwrap(),
            gpus(&[1, 2])
        );
        let short = choose(&gpus(&[0, 1]), vec![lease(1)], &usage, 2).unwrap_err();
        assert_eq!(short.held, [lease(1)]);
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
            choose(&slices, vec![held], &usage, 1).unwrap(),
            [slice(2, 0)]
        );
        assert!(choose(&slices, vec![lease(0)], &usage, 1).is_err());
    }
}
