//! MIG (Multi-Instance GPU): the instances the NVIDIA driver publishes, and the capability
//! device nodes a process needs to use one.
//!
//! NVIDIA's MIG user guide ("Device Nodes and Capabilities"): each GPU instance (GI) and each
//! compute instance (CI) in it is a capability, published by the kernel driver as
//! `/proc/driver/nvidia/capabilities/gpu<N>/mig/gi<G>/access` and `…/gi<G>/ci<C>/access`,
//! whose `DeviceFileMinor` is the minor of the character device
//! `/dev/nvidia-caps/nvidia-cap<minor>` (major: `nvidia-caps` in `/proc/devices`).
//! `/proc/driver/nvidia-caps/mig-minors` lists every capability the driver can publish with
//! its minor, including `config` (create and destroy instances) and `monitor` (see every
//! instance), which are for administration only. A CUDA process using one instance needs the
//! parent GPU's `/dev/nvidia<N>`, `nvidiactl`, `nvidia-uvm` and that instance's GI and CI
//! nodes; CUDA enumerates at most one MIG instance per process. The driver does not create
//! the nodes: `nvidia-modprobe -f <capability file>` does.
//!
//! [`formats`] parses the three files (bounded, typed errors); [`crate::scan::mig`] reads
//! them under the host root and [`crate::plan`] decides what a build gets.

pub(crate) mod formats;

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where the driver publishes its capabilities (as the host sees it).
pub(crate) const CAPABILITIES_DIR: &str = "/proc/driver/nvidia/capabilities";
/// The list of every capability the driver can publish, with its minor.
pub(crate) const MIG_MINORS: &str = "/proc/driver/nvidia-caps/mig-minors";
/// The kernel's list of device majors.
pub(crate) const PROC_DEVICES: &str = "/proc/devices";
/// The directory of the capability device nodes.
pub(crate) const CAPS_DEV_DIR: &str = "/dev/nvidia-caps";

/// One MIG compute instance: the unit a build is leased.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InstanceId {
    /// The parent GPU (`/dev/nvidia<gpu>`, `gpu<N>` in the capability paths).
    pub gpu: u32,
    /// The GPU instance.
    pub gi: u32,
    /// The compute instance in it.
    pub ci: u32,
}

impl std::fmt::Display for InstanceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "nvidia{}/gi{}/ci{}", self.gpu, self.gi, self.ci)
    }
}

/// Which capability a node grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "capability", rename_all = "kebab-case")]
pub(crate) enum Capability {
    /// Access to a GPU instance.
    Gi {
        /// The parent GPU.
        gpu: u32,
        /// The GPU instance.
        gi: u32,
    },
    /// Access to a compute instance.
    Ci(InstanceId),
    /// Creating and destroying instances (administration only).
    Config,
    /// Seeing every instance (administration only).
    Monitor,
}

impl Capability {
    /// The capability's file as the host sees it (`…/gpu0/mig/gi1/access`), which
    /// `nvidia-modprobe -f` takes to create its node.
    pub(crate) fn proc_path(&self) -> PathBuf {
        let dir = PathBuf::from(CAPABILITIES_DIR);
        match self {
            Capability::Gi { gpu, gi } => dir.join(format!("gpu{gpu}/mig/gi{gi}/access")),
            Capability::Ci(i) => dir.join(format!("gpu{}/mig/gi{}/ci{}/access", i.gpu, i.gi, i.ci)),
            Capability::Config => dir.join("mig/config"),
            Capability::Monitor => dir.join("mig/monitor"),
        }
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Capability::Gi { gpu, gi } => write!(f, "GPU instance nvidia{gpu}/gi{gi}"),
            Capability::Ci(i) => write!(f, "compute instance {i}"),
            Capability::Config => f.write_str("MIG config capability"),
            Capability::Monitor => f.write_str("MIG monitor capability"),
        }
    }
}

/// The device node of the capability with `minor`, as the build sees it.
pub(crate) fn node_path(minor: u32) -> PathBuf {
    PathBuf::from(format!("{CAPS_DEV_DIR}/nvidia-cap{minor}"))
}
