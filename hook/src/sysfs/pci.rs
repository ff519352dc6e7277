//! Where a GPU's PCI device is in the host's `/sys`: its bus address from
//! `/proc/driver/nvidia/gpus/<BDF>/information` ("Device Minor" names its `/dev/nvidiaN`),
//! its path from the link `/sys/bus/pci/devices/<BDF>` (both under the host root). A DRM
//! node's (any vendor's) from its link `/sys/dev/char/226:<minor>`.

use crate::trust::{self, TrustError};
use cuda_sandbox_manifest::inventory::{self, is_bdf};
use std::path::{Path, PathBuf};

/// The driver's directory of GPUs, by bus address (under the host root).
const GPUS_DIR: &str = "proc/driver/nvidia/gpus";
/// The PCI devices' links, by bus address (under the host root).
const BUS_DEVICES_DIR: &str = "sys/bus/pci/devices";
/// The most a `/proc/driver/nvidia/gpus/<BDF>/information` file may hold (it is ~400 bytes).
const INFORMATION_MAX: u64 = 4096;
/// The most a sysfs `device` attribute may hold (`0x2330` and a newline).
const PCI_ID_MAX: u64 = 64;
/// The most PCI bridges a device's path may cross (real ones cross two to four).
const PATH_MAX_DEPTH: usize = 16;

/// One GPU's PCI device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PciGpu {
    /// Its `/dev/nvidia<minor>` (or, found from a DRM node, that node's minor).
    pub minor: u32,
    /// Its bus address, `dddd:bb:dd.f`.
    pub bdf: String,
    /// Its path below `/sys/devices`: the root bus `pci<dddd>:<bb>`, each bridge's bus
    /// address, then its own.
    pub path: Vec<String>,
}

/// Why a GPU's PCI device cannot be given. One line.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PciError {
    /// A file or link failed the trust checks or could not be read.
    #[error(transparent)]
    Untrusted(#[from] TrustError),
    /// A file or link (the entry) could not be read, and why.
    #[error("cannot read {path}: {1}", path = .0.display())]
    Read(PathBuf, #[source] std::io::Error),
    /// The `information` file names no device minor.
    #[error("{} names no \"Device Minor\"", .0.display())]
    NoMinor(PathBuf),
    /// The `device` attribute holds no PCI id.
    #[error("{} holds no PCI device id 0xNNNN", .0.display())]
    NoDeviceId(PathBuf),
    /// The device's path is not `pci<dddd>:<bb>/<BDF>/…/<BDF>` under `/sys/devices` (for a
    /// DRM node, followed by `/drm/<node>`): the link, and where it leads.
    #[error("{link} leads to {target}, not to pci<domain>:<bus>/…/<its address> under /sys/devices", link = .0.display(), target = .1.display())]
    UnexpectedPath(PathBuf, PathBuf),
}

/// Whether `name` is a root bus directory, `pci<dddd>:<bb>`.
fn is_root_bus(name: &str) -> bool {
    let hex = |s: &str, len| s.len() == len && s.bytes().all(|c| c.is_ascii_hexdigit());
    name.strip_prefix("pci")
        .and_then(|rest| rest.split_once(':'))
        .is_some_and(|(domain, bus)| hex(domain, 4) && hex(bus, 2))
}

/// The PCI devices of the GPUs `/proc/driver/nvidia/gpus` lists under `host_root`, each or
/// why it cannot be given, by bus address. No such directory (no NVIDIA driver loaded): none.
pub(crate) fn discover(host_root: &Path) -> Vec<Result<PciGpu, PciError>> {
    let Ok((dir, names)) = listed_gpus(host_root) else {
        return Vec::new();
    };
    let gpu = |bdf: String| {
        let minor = device_minor(&dir.join(&bdf).join("information"))?;
        linked_device(&host_root.join(BUS_DEVICES_DIR).join(&bdf), &bdf, minor)
    };
    names.into_iter().map(gpu).collect()
}

/// The directory `/proc/driver/nvidia/gpus` under `host_root`, trusted, and the bus addresses
/// it lists, sorted.
pub(crate) fn listed_gpus(host_root: &Path) -> Result<(PathBuf, Vec<String>), TrustError> {
    let dir = trust::listed_dir(&host_root.join(GPUS_DIR))?;
    let entries = std::fs::read_dir(&dir).map_err(|e| TrustError::Inspect(dir.clone(), e))?;
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| is_bdf(n))
        .collect();
    names.sort();
    Ok((dir, names))
}

/// What the host says now of the GPU at bus address `bdf` (under `host_root`): the "Device
/// Minor" of `/proc/driver/nvidia/gpus/<bdf>/information` and the PCI device id of
/// `/sys/bus/pci/devices/<bdf>/device`, each file opened once trusted. What the GPU
/// inventory is checked against.
pub(crate) fn identity(host_root: &Path, bdf: &str) -> Result<(u32, u16), PciError> {
    let minor = device_minor(&host_root.join(format!("{GPUS_DIR}/{bdf}/information")))?;
    let device = host_root.join(format!("{BUS_DEVICES_DIR}/{bdf}/device"));
    let bytes = read_small(&device, PCI_ID_MAX)?;
    let id = inventory::pci_id(&String::from_utf8_lossy(&bytes))
        .ok_or_else(|| PciError::NoDeviceId(device.clone()))?;
    Ok((minor, id))
}

/// The "Device Minor" of an `information` file.
fn device_minor(information: &Path) -> Result<u32, PciError> {
    let bytes = read_small(information, INFORMATION_MAX)?;
    inventory::device_minor(&String::from_utf8_lossy(&bytes))
        .ok_or_else(|| PciError::NoMinor(information.to_path_buf()))
}

/// The regular file at `path`, opened once trusted ([`trust::open_file`]), read to at most
/// `max` bytes: a longer one is an error, never read further.
pub(super) fn read_small(path: &Path, max: u64) -> Result<Vec<u8>, PciError> {
    use std::io::Read;
    let (file, _) = trust::open_file(path)?;
    let mut bytes = Vec::new();
    let read = |source| PciError::Read(path.to_path_buf(), source);
    file.take(max + 1).read_to_end(&mut bytes).map_err(read)?;
    if bytes.len() as u64 > max {
        return Err(read(std::io::Error::other(format!(
            "longer than {max} bytes"
        ))));
    }
    Ok(bytes)
}

/// The device at `bdf` (its `/dev/nvidia<minor>`), its path below `/sys/devices` from its
/// link in `/sys/bus/pci/devices` (`../../../devices/pci0000:00/0000:00:01.0/<bdf>`), which
/// must be root's (or the hook's user's).
fn linked_device(link: &Path, bdf: &str, minor: u32) -> Result<PciGpu, PciError> {
    let target = root_link(link)?;
    target
        .strip_prefix("../../../devices/")
        .and_then(|below| pci_device(below, minor))
        .filter(|gpu| gpu.bdf == bdf)
        .ok_or_else(|| unexpected(link, &target))
}

/// The major number of DRM nodes (`/dev/dri/card<N>`, `/dev/dri/renderD<N>`).
pub(crate) const DRM_MAJOR: u64 = 226;

/// One DRM node's PCI device, from its link `/sys/dev/char/226:<minor>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DrmDevice {
    /// Where the link leads (`../../devices/<PCI path>/drm/renderD128`).
    pub target: String,
    /// The PCI device the node belongs to (its `minor` is the node's).
    pub gpu: PciGpu,
}

/// The PCI devices of the DRM nodes numbered `minors`, each or why it cannot be given, from
/// their links in `/sys/dev/char` under `host_root` (`226:<minor>` ->
/// `../../devices/pci<dddd>:<bb>/…/<BDF>/drm/<node>`, root's). A node of no PCI device (a
/// virtual one, `devices/platform/…`) is an error, so it is left out saying why.
pub(crate) fn discover_drm(host_root: &Path, minors: &[u32]) -> Vec<Result<DrmDevice, PciError>> {
    let dir = host_root.join("sys/dev/char");
    minors
        .iter()
        .map(|&minor| {
            let link = dir.join(format!("{DRM_MAJOR}:{minor}"));
            let target = root_link(&link)?;
            let gpu = drm_pci_path(&target)
                .and_then(|below| pci_device(below, minor))
                .ok_or_else(|| unexpected(&link, &target))?;
            Ok(DrmDevice { target, gpu })
        })
        .collect()
}

/// The PCI path of a DRM node's link target, `../../devices/<PCI path>/drm/<node>`.
fn drm_pci_path(target: &str) -> Option<&str> {
    let below = target.strip_prefix("../../devices/")?;
    let (device, node) = below.rsplit_once("/drm/")?;
    let number = node
        .strip_prefix("renderD")
        .or_else(|| node.strip_prefix("card"))?;
    (!number.is_empty() && number.bytes().all(|b| b.is_ascii_digit())).then_some(device)
}

/// The PCI device (numbered `minor`) at `below` (a path below `/sys/devices`), when that is a
/// root bus and bus addresses, the device's last.
fn pci_device(below: &str, minor: u32) -> Option<PciGpu> {
    let path: Vec<String> = below.split('/').map(str::to_string).collect();
    let well_formed = path.len() >= 2
        && path.len() <= PATH_MAX_DEPTH
        && is_root_bus(&path[0])
        && path[1..].iter().all(|p| is_bdf(p));
    let bdf = path.last()?.clone();
    well_formed.then_some(PciGpu { minor, bdf, path })
}

/// The target of the symlink `link`, which must be root's (or the hook's user's), in a
/// directory that passes [`trust::listed_dir`], and UTF-8.
fn root_link(link: &Path) -> Result<String, PciError> {
    use std::os::unix::fs::MetadataExt;
    let read = |source| PciError::Read(link.to_path_buf(), source);
    let parent = link.parent().expect("a link in a directory");
    trust::listed_dir(parent)?;
    let meta = std::fs::symlink_metadata(link).map_err(read)?;
    let target = std::fs::read_link(link).map_err(read)?;
    let owned = meta.uid() == 0 || meta.uid() == nix::unistd::geteuid().as_raw();
    match target.to_str() {
        Some(text) if meta.file_type().is_symlink() && owned => Ok(text.to_string()),
        _ => Err(unexpected(link, target)),
    }
}

fn unexpected(link: &Path, target: impl Into<PathBuf>) -> PciError {
    PciError::UnexpectedPath(link.to_path_buf(), target.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_addresses_and_root_buses_are_told_apart() {
        assert!(is_bdf("0000:01:00.0"));
        assert!(is_bdf("0001:a1:1f.7"));
        for bad in [
            "0000:01:00.8",
            "0000:01:00",
            "0000:01:00.0/",
            "0000:0G:00.0",
            "../01:00.0",
        ] {
            assert!(!is_bdf(bad), "{bad}");
        }
        assert!(is_root_bus("pci0000:00"));
        assert!(!is_root_bus("pci0000:0"));
        assert!(!is_root_bus("0000:00:01.0"));
    }

    #[test]
    fn a_fake_host_gives_each_gpus_minor_and_path_and_refuses_a_stray_link() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let gpu = |bdf: &str, minor: u32, target: &str| {
            let info = root.join("proc/driver/nvidia/gpus").join(bdf);
            std::fs::create_dir_all(&info).unwrap();
            let text =
                format!("Model: \t\t FAKE\nBus Location: \t {bdf}\nDevice Minor: \t {minor}\n");
            std::fs::write(info.join("information"), text).unwrap();
            let devices = root.join("sys/bus/pci/devices");
            std::fs::create_dir_all(&devices).unwrap();
            std::os::unix::fs::symlink(target, devices.join(bdf)).unwrap();
        };
        gpu(
            "0000:01:00.0",
            0,
            "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0",
        );
        gpu(
            "0000:02:00.0",
            1,
            "../../../devices/pci0000:00/0000:00:02.0/0000:09:00.0",
        );
        gpu("0000:03:00.0", 2, "/sys/devices/pci0000:00/0000:03:00.0");
        let found = discover(root);
        assert_eq!(found.len(), 3);
        let first = found[0].as_ref().unwrap();
        assert_eq!(first.minor, 0);
        assert_eq!(first.path, ["pci0000:00", "0000:00:01.0", "0000:01:00.0"]);
        for refused in &found[1..] {
            let e = refused.as_ref().unwrap_err().to_string();
            assert!(e.contains("not to pci<domain>:<bus>"), "{e}");
        }
        assert!(discover(&root.join("none")).is_empty());
    }

    #[test]
    fn a_drm_nodes_link_gives_its_pci_device_and_a_virtual_nodes_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let chars = root.join("sys/dev/char");
        std::fs::create_dir_all(&chars).unwrap();
        let render = "../../devices/pci0000:00/0000:00:03.1/0000:0a:00.0/0000:0b:00.0/0000:0c:00.0/drm/renderD128";
        for (name, target) in [
            ("226:128", render),
            ("226:1", "../../devices/platform/vkms/drm/card1"),
            ("226:2", "../../devices/pci0000:00/0000:01:00.0/drm/evil"),
        ] {
            std::os::unix::fs::symlink(target, chars.join(name)).unwrap();
        }
        let found = discover_drm(root, &[128, 1, 2, 3]);
        let node = found[0].as_ref().unwrap();
        assert_eq!(node.gpu.minor, 128);
        assert_eq!(node.target, render);
        assert_eq!(node.gpu.bdf, "0000:0c:00.0");
        assert_eq!(node.gpu.path.len(), 5);
        for refused in &found[1..3] {
            let e = refused.as_ref().unwrap_err().to_string();
            assert!(e.contains("not to pci<domain>:<bus>"), "{e}");
        }
        let e = found[3].as_ref().unwrap_err().to_string();
        assert!(e.contains("226:3"), "{e}");
    }
}
