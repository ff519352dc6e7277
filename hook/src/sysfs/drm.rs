//! Which NVIDIA GPU a DRM node (`/dev/dri/card<N>`, `/dev/dri/renderD<N>`) belongs to, so that a
//! leased build gets only its GPU's. The node's own device number (226:`<minor>`) leads through
//! `/sys/dev/char/226:<minor>` to its PCI device ([`super::discover_drm`], which any vendor's
//! nodes share), and for an NVIDIA GPU `/proc/driver/nvidia/gpus/<address>/information` gives
//! its device minor, the N of `/dev/nvidia<N>` ([`super::discover`]). NVIDIA's nodes exist only
//! with `nvidia-drm` loaded. Reads only; everything under the host root.

use super::pci::PciGpu;
use std::path::Path;

/// The directory DRM nodes are in.
pub(crate) const DRM_DEV_DIR: &str = "/dev/dri";

/// Why a DRM node's GPU cannot be told. One line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DrmError {
    /// The scan did not look the node up (it was not matched by a device glob itself).
    #[error("its GPU was not looked up")]
    Unscanned,
    /// The entry is not a DRM character device (226:N): a directory, a link to one, another node.
    #[error("not a DRM character device (226:N)")]
    NotANode,
    /// Its PCI device cannot be found (no `/sys/dev/char` link, or one leading to no PCI
    /// device: a platform framebuffer, a virtual GPU).
    #[error("{0}")]
    NoPciDevice(String),
    /// The PCI device is no GPU the NVIDIA driver lists.
    #[error("its PCI device {0} is not an NVIDIA GPU (/proc/driver/nvidia/gpus has no {0})")]
    NotNvidia(String),
}

/// The minor of the DRM character device at `path` (links followed), 226:N.
pub(crate) fn drm_minor(path: &Path) -> Option<u32> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::metadata(path).ok()?;
    let rdev = meta.rdev();
    (meta.file_type().is_char_device() && nix::sys::stat::major(rdev) == super::DRM_MAJOR)
        .then(|| nix::sys::stat::minor(rdev) as u32)
}

/// The NVIDIA GPU (`/dev/nvidia<N>`) of the DRM node at `outside` (a host path, links
/// followed), among the `gpus` the driver lists.
pub(crate) fn nvidia_gpu(
    host_root: &Path,
    outside: &Path,
    gpus: &[PciGpu],
) -> Result<u32, DrmError> {
    let minor = drm_minor(outside).ok_or(DrmError::NotANode)?;
    nvidia_gpu_of_minor(host_root, minor, gpus)
}

/// The NVIDIA GPU of DRM minor `minor`, among `gpus`.
fn nvidia_gpu_of_minor(host_root: &Path, minor: u32, gpus: &[PciGpu]) -> Result<u32, DrmError> {
    let found = super::discover_drm(host_root, &[minor]).pop();
    let device =
        (found.ok_or(DrmError::Unscanned)?).map_err(|e| DrmError::NoPciDevice(e.to_string()))?;
    gpus.iter()
        .find(|g| g.bdf == device.gpu.bdf)
        .map(|g| g.minor)
        .ok_or(DrmError::NotNvidia(device.gpu.bdf))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host with GPUs at 0000:01:00.0 (nvidia0) and 0000:02:00.0 (nvidia1), their DRM
    /// minors 1/128 and 2/129, a platform framebuffer's 0 and another vendor's 3.
    #[test]
    fn each_drm_minor_maps_to_its_gpu_and_others_say_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let chars = root.join("sys/dev/char");
        std::fs::create_dir_all(&chars).unwrap();
        let node = |minor: u32, device: &str, name: &str| {
            let target = format!("../../devices/{device}/drm/{name}");
            std::os::unix::fs::symlink(target, chars.join(format!("226:{minor}"))).unwrap();
        };
        node(0, "platform/simple-framebuffer.0", "card0");
        node(1, "pci0000:00/0000:00:01.0/0000:01:00.0", "card1");
        node(128, "pci0000:00/0000:00:01.0/0000:01:00.0", "renderD128");
        node(2, "pci0000:00/0000:00:02.0/0000:02:00.0", "card2");
        node(129, "pci0000:00/0000:00:02.0/0000:02:00.0", "renderD129");
        node(3, "pci0000:00/0000:00:03.0/0000:03:00.0", "card3");
        let gpu = |minor, bdf: &str| PciGpu {
            minor,
            bdf: bdf.into(),
            path: Vec::new(),
        };
        let gpus = [gpu(0, "0000:01:00.0"), gpu(1, "0000:02:00.0")];
        let of = |minor| nvidia_gpu_of_minor(root, minor, &gpus);
        assert_eq!(of(1), Ok(0));
        assert_eq!(of(128), Ok(0));
        assert_eq!(of(2), Ok(1));
        assert_eq!(of(129), Ok(1));
        assert_eq!(of(3), Err(DrmError::NotNvidia("0000:03:00.0".into())));
        for unknown in [0, 200] {
            assert!(
                matches!(of(unknown), Err(DrmError::NoPciDevice(_))),
                "{unknown}"
            );
        }
        assert!(of(0)
            .unwrap_err()
            .to_string()
            .contains("simple-framebuffer.0"));
        // A directory (`/dev/dri` itself, `by-path`) or any other entry is no DRM node.
        assert_eq!(nvidia_gpu(root, root, &gpus), Err(DrmError::NotANode));
    }
}
