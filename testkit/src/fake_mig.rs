//! A fake MIG host: the files the NVIDIA driver publishes for MIG instances, under a host
//! root's `/proc`, and their capability nodes under its `/dev`, as NVIDIA's MIG user guide
//! ("Device Nodes and Capabilities") shows them.
//!
//! Minors follow the driver's `mig-minors` numbering: `config` 1, `monitor` 2, then for each
//! GPU 15 GPU instances of 9 capabilities each (the GI's own, then its CIs 0–7), so
//! `gpu0/gi1/access` is 12 and `gpu0/gi1/ci0/access` is 13.

use crate::mknod_char;
use std::path::{Path, PathBuf};

/// A major number standing in for the dynamically allocated `nvidia-caps` one.
pub const FAKE_CAPS_MAJOR: u64 = 237;

/// The GPUs `mig-minors` lists here (the real driver lists 32).
const LISTED_GPUS: u32 = 8;

/// The fake MIG files of a host root.
#[derive(Debug)]
pub struct FakeMig {
    /// The host root.
    pub root: PathBuf,
}

/// The minor of a GPU instance's capability.
pub fn gi_minor(gpu: u32, gi: u32) -> u32 {
    3 + gpu * 135 + gi * 9
}

/// The minor of a compute instance's capability.
pub fn ci_minor(gpu: u32, gi: u32, ci: u32) -> u32 {
    gi_minor(gpu, gi) + 1 + ci
}

impl FakeMig {
    /// Publishes the compute instances `instances` (GPU, GI, CI) under `root`: their
    /// capability files, `mig-minors`, the `nvidia-caps` major in `/proc/devices`, the
    /// `config` and `monitor` capabilities, and (when `nodes`) every capability node.
    pub fn create(
        root: &Path,
        instances: &[(u32, u32, u32)],
        nodes: bool,
    ) -> std::io::Result<FakeMig> {
        let caps = root.join("proc/driver/nvidia/capabilities");
        let access = |minor: u32| {
            format!("DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
        };
        std::fs::create_dir_all(caps.join("mig"))?;
        std::fs::write(caps.join("mig/config"), access(1))?;
        std::fs::write(caps.join("mig/monitor"), access(2))?;
        let mut minors = vec![1, 2];
        for &(gpu, gi, ci) in instances {
            let gi_dir = caps.join(format!("gpu{gpu}/mig/gi{gi}"));
            std::fs::create_dir_all(gi_dir.join(format!("ci{ci}")))?;
            std::fs::write(gi_dir.join("access"), access(gi_minor(gpu, gi)))?;
            std::fs::write(
                gi_dir.join(format!("ci{ci}/access")),
                access(ci_minor(gpu, gi, ci)),
            )?;
            minors.extend([gi_minor(gpu, gi), ci_minor(gpu, gi, ci)]);
        }
        let mut listed = String::from("config 1\nmonitor 2\n");
        for gpu in 0..LISTED_GPUS {
            for gi in 0..15 {
                listed.push_str(&format!("gpu{gpu}/gi{gi}/access {}\n", gi_minor(gpu, gi)));
                for ci in 0..8 {
                    listed.push_str(&format!(
                        "gpu{gpu}/gi{gi}/ci{ci}/access {}\n",
                        ci_minor(gpu, gi, ci)
                    ));
                }
            }
        }
        std::fs::create_dir_all(root.join("proc/driver/nvidia-caps"))?;
        std::fs::write(root.join("proc/driver/nvidia-caps/mig-minors"), listed)?;
        std::fs::write(
            root.join("proc/devices"),
            format!(
                "Character devices:\n  1 mem\n195 nvidia\n{FAKE_CAPS_MAJOR} nvidia-caps\n\n\
                 Block devices:\n  7 loop\n"
            ),
        )?;
        if nodes {
            let dev = root.join("dev/nvidia-caps");
            std::fs::create_dir_all(&dev)?;
            minors.sort_unstable();
            minors.dedup();
            for minor in minors {
                let node = dev.join(format!("nvidia-cap{minor}"));
                if !node.exists() {
                    mknod_char(&node, FAKE_CAPS_MAJOR, u64::from(minor))?;
                }
            }
        }
        Ok(FakeMig {
            root: root.to_path_buf(),
        })
    }
}
