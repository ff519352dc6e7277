//! Whether this process can reach a GPU, as it stood before any driver call: the device nodes,
//! the nvidia kernel module, and whether the hook made this build. One place turns "no device"
//! (CUDA's 100, the runtime's 100, NVML's "driver not loaded") into its true cause and its fix.
//!
//! The snapshot is taken before the driver is loaded, because the real `cuInit`, run as root,
//! creates a missing `/dev/nvidiactl` itself (mknod): looking afterwards would see a node that
//! nobody exposed.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The NVIDIA character device major number (`/dev/nvidiaN`, `/dev/nvidiactl`).
pub(crate) const NVIDIA_MAJOR: u32 = 195;
/// `/dev/nvidiactl`'s minor number.
pub(crate) const NVIDIACTL_MINOR: u32 = 255;
/// The file the nvidia kernel module creates when it is loaded.
pub(crate) const KERNEL_MODULE_FILE: &str = "/proc/driver/nvidia/version";

/// What a device path held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Node {
    /// A character device with these numbers.
    Char(u32, u32),
    /// Something else is there.
    NotCharDevice,
    /// Nothing is there.
    Missing,
}

impl Node {
    /// Looks at `path` (following symlinks, as the driver's open would).
    pub(crate) fn at(path: &Path) -> Node {
        match std::fs::metadata(path) {
            Err(_) => Node::Missing,
            Ok(m) if !m.file_type().is_char_device() => Node::NotCharDevice,
            Ok(m) => Node::Char(libc::major(m.rdev()), libc::minor(m.rdev())),
        }
    }

    /// Whether anything is there.
    pub(crate) fn exists(&self) -> bool {
        *self != Node::Missing
    }

    /// Every `PREFIX<N>` in `dir`, with N and what is there, sorted by N.
    pub(crate) fn numbered(dir: &Path, prefix: &str) -> Vec<(u32, PathBuf, Node)> {
        let mut nodes: Vec<(u32, PathBuf, Node)> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                let path = entry.ok()?.path();
                let number = path.file_name()?.to_str()?.strip_prefix(prefix)?;
                let number = number.parse().ok()?;
                let node = Node::at(&path);
                Some((number, path, node))
            })
            .collect();
        nodes.sort_by_key(|(number, _, _)| *number);
        nodes
    }
}

/// The device nodes in a device root at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NodeSnapshot {
    /// The directory looked at (`/dev`, or `--dev-root`).
    pub(crate) dev_root: PathBuf,
    /// `nvidiactl`.
    pub(crate) nvidiactl: Node,
    /// `nvidia-uvm`.
    pub(crate) nvidia_uvm: Node,
    /// Every `nvidiaN`, sorted by N.
    pub(crate) gpus: Vec<(u32, PathBuf, Node)>,
}

impl NodeSnapshot {
    /// Looks at `dev_root` now.
    pub(crate) fn take(dev_root: &Path) -> NodeSnapshot {
        NodeSnapshot {
            dev_root: dev_root.to_path_buf(),
            nvidiactl: Node::at(&dev_root.join("nvidiactl")),
            nvidia_uvm: Node::at(&dev_root.join("nvidia-uvm")),
            gpus: Node::numbered(dev_root, "nvidia"),
        }
    }

    /// The nodes every CUDA process needs that are missing, by path.
    pub(crate) fn missing(&self) -> Vec<PathBuf> {
        [
            (!self.nvidiactl.exists(), "nvidiactl"),
            (!self.nvidia_uvm.exists(), "nvidia-uvm"),
            (self.gpus.is_empty(), "nvidiaN"),
        ]
        .into_iter()
        .filter(|(missing, _)| *missing)
        .map(|(_, name)| self.dev_root.join(name))
        .collect()
    }
}

/// Why the driver finds no GPU: three causes with three different fixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NoGpuCause {
    /// Device nodes the driver needs are not in this process's `/dev`.
    NodesNotExposed,
    /// The nodes are here, but the nvidia kernel module is not loaded on the host.
    KernelModuleNotLoaded,
    /// Nodes and module are there, and still the driver sees no usable GPU.
    NoUsableGpu,
}

/// The state of GPU access, taken once before any driver call.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Access {
    /// The device nodes before any driver call.
    pub(crate) nodes: NodeSnapshot,
    /// The first line of `/proc/driver/nvidia/version`, or `None` when the module is not loaded.
    pub(crate) kernel_module: Option<String>,
    /// Whether the hook made this build (its manifest is here).
    pub(crate) in_hook_build: bool,
}

impl Access {
    /// Takes the snapshot: the nodes under `dev_root`, the module's [`KERNEL_MODULE_FILE`].
    pub(crate) fn scan(dev_root: &Path, in_hook_build: bool) -> Access {
        let kernel_module = std::fs::read_to_string(KERNEL_MODULE_FILE)
            .ok()
            .map(|text| text.lines().next().unwrap_or_default().trim().to_owned());
        Access {
            nodes: NodeSnapshot::take(dev_root),
            kernel_module,
            in_hook_build,
        }
    }

    /// The cause of a "no device" answer.
    pub(crate) fn no_gpu_cause(&self) -> NoGpuCause {
        if !self.nodes.missing().is_empty() {
            NoGpuCause::NodesNotExposed
        } else if self.kernel_module.is_none() {
            NoGpuCause::KernelModuleNotLoaded
        } else {
            NoGpuCause::NoUsableGpu
        }
    }

    /// One line: why no GPU is usable here, and what fixes it.
    pub(crate) fn explain_no_gpu(&self) -> String {
        match self.no_gpu_cause() {
            NoGpuCause::NodesNotExposed => {
                let missing: Vec<String> = self
                    .nodes
                    .missing()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                let missing = missing.join(", ");
                if self.in_hook_build {
                    format!(
                        "the GPU device nodes are not exposed ({missing} missing before any driver \
                         call), although cuda-sandbox-hook made this build (its manifest is here): \
                         the hook's rule did not expose them; run `cuda-sandbox-hook explain --drv \
                         DRV` on the builder to see its device globs and what the host has"
                    )
                } else {
                    format!(
                        "the GPU device nodes are not exposed ({missing} missing): tag the \
                         derivation with requiredSystemFeatures = [ \"cuda\" ] and install \
                         cuda-sandbox-hook as Nix's pre-build-hook (outside Nix: load the nvidia \
                         module and run nvidia-modprobe)"
                    )
                }
            }
            NoGpuCause::KernelModuleNotLoaded => format!(
                "the nvidia kernel module is not loaded on the host ({KERNEL_MODULE_FILE} is \
                 missing){}: load it on the host (`modprobe nvidia`; on NixOS set \
                 services.xserver.videoDrivers = [ \"nvidia\" ] or hardware.nvidia); nothing in \
                 the build can fix this",
                if self.in_hook_build {
                    ", though the hook exposed the device nodes"
                } else {
                    ", though the device nodes are here"
                }
            ),
            NoGpuCause::NoUsableGpu => format!(
                "the nvidia kernel module is loaded ({}) and the device nodes are here, but the \
                 driver finds no usable GPU{}: check `nvidia-smi` on the host (a GPU lost from \
                 the bus, MIG without compute instances, node permissions)",
                self.kernel_module.as_deref().unwrap_or_default(),
                std::env::var("CUDA_VISIBLE_DEVICES")
                    .map(|v| format!(" (CUDA_VISIBLE_DEVICES={v:?} narrows the GPUs)"))
                    .unwrap_or_default()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(nodes: bool, module: bool, hook: bool) -> Access {
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("dev");
        std::fs::create_dir(&dev).unwrap();
        let mut snapshot = NodeSnapshot::take(&dev);
        if nodes {
            snapshot.nvidiactl = Node::Char(195, 255);
            snapshot.nvidia_uvm = Node::Char(511, 0);
            snapshot.gpus = vec![(0, dev.join("nvidia0"), Node::Char(195, 0))];
        }
        Access {
            nodes: snapshot,
            kernel_module: module.then(|| "NVRM version: 535.309.01".to_owned()),
            in_hook_build: hook,
        }
    }

    #[test]
    fn three_causes_three_messages() {
        let exposed = access(false, true, false).explain_no_gpu();
        assert!(exposed.contains("not exposed") && exposed.contains("requiredSystemFeatures"));
        let in_hook = access(false, true, true).explain_no_gpu();
        assert!(in_hook.contains("explain") && !in_hook.contains("requiredSystemFeatures"));
        let module = access(true, false, true).explain_no_gpu();
        assert!(module.contains("kernel module is not loaded") && module.contains("modprobe"));
        let gpu = access(true, true, false).explain_no_gpu();
        assert!(gpu.contains("no usable GPU") && gpu.contains("nvidia-smi"));
    }

    #[test]
    fn missing_nodes_are_named() {
        let a = access(false, false, false);
        assert_eq!(a.no_gpu_cause(), NoGpuCause::NodesNotExposed);
        assert_eq!(a.nodes.missing().len(), 3);
    }
}
