//! Which GPU a DRM node (`/dev/dri/card<N>`, `/dev/dri/renderD<N>`) belongs to. The kernel
//! names each DRM minor's device in `/sys/class/drm/<node>/device`, a link to its PCI device
//! (`../../../0000:01:00.0`), so [`pci_address`] gives any vendor's bus address; for an NVIDIA
//! GPU, `/proc/driver/nvidia/gpus/<address>/information` gives its device minor (the N of
//! `/dev/nvidia<N>`, [`super::discover`]). NVIDIA's nodes exist only with `nvidia-drm` loaded.
//! Reads only; everything under the host root.

use super::pci::PciGpu;
use cuda_sandbox_manifest::inventory::is_bdf;
use std::path::Path;

/// The directory DRM nodes are in.
pub(crate) const DRM_DEV_DIR: &str = "/dev/dri";

/// Why a DRM node's GPU cannot be told. One line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DrmError {
    /// The scan did not look the node up (it was not matched by a device glob itself).
    #[error("its GPU was not looked up")]
    Unscanned,
    /// The node is not `/dev/dri/<name>` with a plain name.
    #[error("not a node directly in /dev/dri")]
    NotANode,
    /// `/sys/class/drm/<name>/device` cannot be read.
    #[error("{path}: {why}")]
    NoDevice {
        /// The link.
        path: String,
        /// What the system said.
        why: String,
    },
    /// The device is not a PCI device (a platform framebuffer, a virtual GPU).
    #[error("its device {0} is not a PCI device")]
    NotPci(String),
    /// The PCI device is no GPU the NVIDIA driver lists.
    #[error("its PCI device {0} is not an NVIDIA GPU (/proc/driver/nvidia/gpus has no {0})")]
    NotNvidia(String),
}

/// The PCI bus address (`dddd:bb:dd.f`) of the device behind the DRM node `name` (`card1`,
/// `renderD128`), from `/sys/class/drm/<name>/device` under `host_root`.
pub(crate) fn pci_address(host_root: &Path, name: &str) -> Result<String, DrmError> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(DrmError::NotANode);
    }
    let link = host_root.join("sys/class/drm").join(name).join("device");
    let target = std::fs::read_link(&link).map_err(|e| DrmError::NoDevice {
        path: link.display().to_string(),
        why: e.to_string(),
    })?;
    let last = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if is_bdf(last) {
        Ok(last.to_string())
    } else {
        Err(DrmError::NotPci(target.display().to_string()))
    }
}

/// The NVIDIA GPU (`/dev/nvidia<N>`) whose DRM node is `inside` (`/dev/dri/card1`), among the
/// `gpus` the driver lists.
pub(crate) fn nvidia_gpu(
    host_root: &Path,
    inside: &Path,
    gpus: &[PciGpu],
) -> Result<u32, DrmError> {
    let name = inside
        .strip_prefix(DRM_DEV_DIR)
        .ok()
        .filter(|rest| rest.components().count() == 1)
        .and_then(|rest| rest.to_str())
        .ok_or(DrmError::NotANode)?;
    let bdf = pci_address(host_root, name)?;
    gpus.iter()
        .find(|g| g.bdf == bdf)
        .map(|g| g.minor)
        .ok_or(DrmError::NotNvidia(bdf))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host with GPUs at 0000:01:00.0 (nvidia0) and 0000:02:00.0 (nvidia1), their DRM
    /// nodes card1/renderD128 and card2/renderD129, and a platform framebuffer's card0.
    #[test]
    fn each_drm_node_maps_to_its_gpu_and_others_say_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let node = |name: &str, device: &str| {
            let at = root.join("sys/devices/x/drm").join(name);
            std::fs::create_dir_all(&at).unwrap();
            std::os::unix::fs::symlink(device, at.join("device")).unwrap();
            std::fs::create_dir_all(root.join("sys/class/drm")).unwrap();
            std::os::unix::fs::symlink(&at, root.join("sys/class/drm").join(name)).unwrap();
        };
        node("card0", "../../../simple-framebuffer.0");
        node("card1", "../../../0000:01:00.0");
        node("renderD128", "../../../0000:01:00.0");
        node("card2", "../../../0000:02:00.0");
        node("renderD129", "../../../0000:02:00.0");
        node("card3", "../../../0000:03:00.0");
        let gpu = |minor, bdf: &str| PciGpu {
            minor,
            bdf: bdf.into(),
            path: Vec::new(),
        };
        let gpus = [gpu(0, "0000:01:00.0"), gpu(1, "0000:02:00.0")];
        let of = |inside: &str| nvidia_gpu(root, Path::new(inside), &gpus);
        assert_eq!(of("/dev/dri/card1"), Ok(0));
        assert_eq!(of("/dev/dri/renderD128"), Ok(0));
        assert_eq!(of("/dev/dri/card2"), Ok(1));
        assert_eq!(of("/dev/dri/renderD129"), Ok(1));
        assert_eq!(
            of("/dev/dri/card0"),
            Err(DrmError::NotPci("../../../simple-framebuffer.0".into()))
        );
        assert_eq!(
            of("/dev/dri/card3"),
            Err(DrmError::NotNvidia("0000:03:00.0".into()))
        );
        assert!(matches!(
            of("/dev/dri/renderD200"),
            Err(DrmError::NoDevice { .. })
        ));
        for not_a_node in [
            "/dev/dri",
            "/dev/dri/by-path/pci-0000:01:00.0-card",
            "/dev/nvidia0",
        ] {
            assert_eq!(of(not_a_node), Err(DrmError::NotANode), "{not_a_node}");
        }
        assert_eq!(
            of("/dev/dri/card0").unwrap_err().to_string(),
            "its device ../../../simple-framebuffer.0 is not a PCI device"
        );
    }
}
