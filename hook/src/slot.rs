//! What one GPU lease holds: a whole GPU, or one MIG compute instance of a GPU (a slice).
//! Plain data, shared by the planner (which GPUs a build may get) and the leases (which it
//! got); reads and writes nothing.

use crate::mig::InstanceId;
use serde::{Deserialize, Serialize};

/// A unit a build can be leased.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Slot {
    /// A GPU without MIG instances: `/dev/nvidia<N>` alone.
    Gpu(u32),
    /// One MIG compute instance: its parent `/dev/nvidia<N>` is shared with the GPU's other
    /// instances, its capability nodes are not.
    Mig(InstanceId),
}

/// The MIG part of a lease record (the GPU is the record's own field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigSlice {
    /// The GPU instance.
    pub gi: u32,
    /// The compute instance.
    pub ci: u32,
}

impl Slot {
    /// The GPU (`/dev/nvidia<N>`) the slot is on.
    pub fn gpu(&self) -> u32 {
        match self {
            Slot::Gpu(g) => *g,
            Slot::Mig(i) => i.gpu,
        }
    }

    /// Whether two slots cannot be leased to two builds at once: the same slot, or a whole
    /// GPU and a slice of it.
    pub fn overlaps(&self, other: &Slot) -> bool {
        match (self, other) {
            (Slot::Mig(a), Slot::Mig(b)) => a == b,
            _ => self.gpu() == other.gpu(),
        }
    }

    /// The name of its lease file without `.lease`, also its key in the usage counts:
    /// `nvidia0`, `nvidia0-gi1-ci0`.
    pub fn key(&self) -> String {
        match self {
            Slot::Gpu(g) => format!("nvidia{g}"),
            Slot::Mig(i) => format!("nvidia{}-gi{}-ci{}", i.gpu, i.gi, i.ci),
        }
    }

    /// The slot a [`Slot::key`] names.
    pub fn from_key(key: &str) -> Option<Slot> {
        let number = crate::mig::formats::number;
        let rest = key.strip_prefix("nvidia")?;
        let Some((gpu, rest)) = rest.split_once("-gi") else {
            return number(rest).map(Slot::Gpu);
        };
        let (gi, ci) = rest.split_once("-ci")?;
        Some(Slot::Mig(InstanceId {
            gpu: number(gpu)?,
            gi: number(gi)?,
            ci: number(ci)?,
        }))
    }

    /// The MIG part, for the lease record.
    pub fn mig(&self) -> Option<MigSlice> {
        match self {
            Slot::Gpu(_) => None,
            Slot::Mig(i) => Some(MigSlice { gi: i.gi, ci: i.ci }),
        }
    }

    /// The slot of a record's GPU and MIG part.
    pub fn of(gpu: u32, mig: Option<MigSlice>) -> Slot {
        match mig {
            None => Slot::Gpu(gpu),
            Some(MigSlice { gi, ci }) => Slot::Mig(InstanceId { gpu, gi, ci }),
        }
    }
}

impl From<u32> for Slot {
    fn from(gpu: u32) -> Slot {
        Slot::Gpu(gpu)
    }
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Slot::Gpu(g) => write!(f, "nvidia{g}"),
            Slot::Mig(i) => write!(f, "{i}"),
        }
    }
}

/// The GPUs (`/dev/nvidia<N>` numbers) `slots` are on, in their order, a GPU repeated by the
/// next slot listed once.
pub fn gpus(slots: &[Slot]) -> Vec<u32> {
    let mut gpus: Vec<u32> = slots.iter().map(Slot::gpu).collect();
    gpus.dedup();
    gpus
}

/// The first MIG instance among `slots` (a build is leased at most one).
pub fn mig(slots: &[Slot]) -> Option<InstanceId> {
    slots.iter().find_map(|s| match s {
        Slot::Mig(i) => Some(*i),
        Slot::Gpu(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_slot_and_overlaps_follow_the_gpu() {
        let mig = Slot::Mig(InstanceId {
            gpu: 1,
            gi: 2,
            ci: 0,
        });
        for slot in [Slot::Gpu(0), Slot::Gpu(12), mig] {
            assert_eq!(Slot::from_key(&slot.key()), Some(slot));
        }
        for bad in [
            "nvidia",
            "nvidia-1",
            "nvidia0-gi1",
            "nvidia0-gi-ci0",
            "gpu0",
            "usage",
        ] {
            assert_eq!(Slot::from_key(bad), None, "{bad}");
        }
        let other = Slot::Mig(InstanceId {
            gpu: 1,
            gi: 2,
            ci: 1,
        });
        assert!(Slot::Gpu(1).overlaps(&mig) && mig.overlaps(&Slot::Gpu(1)));
        assert!(!mig.overlaps(&other) && !Slot::Gpu(0).overlaps(&mig));
        assert_eq!(mig.to_string(), "nvidia1/gi2/ci0");
    }
}
