//! GPU choice: which of the host's GPUs a build gets, given the live leases and the per-GPU
//! count of leases granted.

use super::record::{LeaseRecord, Usage};

/// Not enough GPUs are free: the live leases on the others.
#[derive(Debug)]
pub struct Shortage {
    /// The leases that hold GPUs.
    pub held: Vec<LeaseRecord>,
}

/// `count` of `gpus` that no lease in `held` holds, the least used first (by `usage`), then by
/// number, returned in ascending order.
pub fn choose(
    gpus: &[u32],
    held: Vec<LeaseRecord>,
    usage: &Usage,
    count: usize,
) -> Result<Vec<u32>, Shortage> {
    let mut free: Vec<u32> = gpus
        .iter()
        .copied()
        .filter(|g| !held.iter().any(|h| h.gpu == *g))
        .collect();
    if free.len() < count {
        return Err(Shortage { held });
    }
    free.sort_by_key(|g| (usage.get(g).copied().unwrap_or(0), *g));
    free.truncate(count);
    free.sort_unstable();
    Ok(free)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(gpu: u32) -> LeaseRecord {
        LeaseRecord {
            gpu,
            ..LeaseRecord::test_record()
        }
    }

    #[test]
    fn the_least_used_free_gpus_are_chosen_then_by_number() {
        let usage = Usage::from([(0, 3), (1, 1), (2, 1)]);
        assert_eq!(choose(&[0, 1, 2, 3], vec![], &usage, 2).unwrap(), [1, 3]);
        assert_eq!(
            choose(&[0, 1, 2, 3], vec![lease(3)], &usage, 2).unwrap(),
            [1, 2]
        );
        let short = choose(&[0, 1], vec![lease(1)], &usage, 2).unwrap_err();
        assert_eq!(short.held, [lease(1)]);
    }
}
