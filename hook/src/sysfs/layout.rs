//! The PCI part of a build's tree, planned purely from its GPUs' [`PciGpu`]s: what the tree
//! holds, what is mounted in it, and what Nix is told to bind.
//!
//! For a GPU at `/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0` the tree holds
//! `pci0000:00/` mirroring that path: each bridge a directory of its own holding copies of
//! its [`BRIDGE_ATTRIBUTES`] and an empty `pci_bus/<bus below>/` (which NCCL's
//! `/sys/class/pci_bus/<bus>/../../<BDF>` crosses), and the GPU's own directory a read-only
//! bind of the host's. `bus-pci-devices/<BDF>` and `class-pci_bus/<bus>` hold the same
//! relative links as the host's. Nix is told to bind the three *directories*
//! (`/sys/devices/pci0000:00`, `/sys/bus/pci/devices`, `/sys/class/pci_bus`), never a link:
//! every Nix version binds a directory alike (Nix 2.8 binds a linked source's target, newer
//! Nix copies the link), and the links inside resolve within the sandbox as on the host.
//! Each of the three is bound on itself read-only before the GPUs' directories are bound in
//! it, so Nix's recursive bind carries both, read-only.

use super::pci::{DrmDevice, PciGpu, DRM_MAJOR};
use std::path::{Path, PathBuf};

/// The attribute files of each bridge above a GPU that the tree copies (those the bridge
/// has): what NCCL reads walking up (`class`, ids, link speed and width, `numa_node`) and
/// the locality hwloc and NVML read.
pub(crate) const BRIDGE_ATTRIBUTES: [&str; 13] = [
    "class",
    "vendor",
    "device",
    "subsystem_vendor",
    "subsystem_device",
    "revision",
    "numa_node",
    "local_cpus",
    "local_cpulist",
    "max_link_speed",
    "max_link_width",
    "current_link_speed",
    "current_link_width",
];

/// The tree entry bound at `/sys/bus/pci/devices`.
const BUS_DEVICES: &str = "bus-pci-devices";
/// The tree entry bound at `/sys/class/pci_bus`.
const CLASS_PCI_BUS: &str = "class-pci_bus";
/// The tree entry bound at `/sys/dev/char`.
const DEV_CHAR: &str = "dev-char";

/// One entry the tree holds, by its path in the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// A directory (mode 0755).
    Dir(String),
    /// A copy (mode 0444) of the host file `source`, made when it exists.
    Copy(String, PathBuf),
    /// A symlink to `target`.
    Link(String, String),
}

impl Entry {
    /// Its path in the tree.
    pub(crate) fn path(&self) -> &str {
        match self {
            Entry::Dir(p) | Entry::Copy(p, _) | Entry::Link(p, _) => p,
        }
    }
}

/// The PCI part of a tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PciLayout {
    /// What the tree holds, parents first.
    pub entries: Vec<Entry>,
    /// Each GPU's directory in the tree and the host's it is a read-only bind of.
    pub devices: Vec<(String, PathBuf)>,
    /// Where the build sees each top directory (under `/sys`), and the top.
    pub exposed: Vec<(PathBuf, String)>,
}

impl PciLayout {
    /// The top directories, each bound on itself read-only once `entries` are made.
    pub(crate) fn tops(&self) -> impl Iterator<Item = &String> {
        self.exposed.iter().map(|(_, top)| top)
    }

    /// The layout for `gpus` (on the host under `host_root`; a device listed twice, as a
    /// GPU's card and render nodes are, once); empty for none.
    pub(crate) fn new(gpus: &[PciGpu], host_root: &Path) -> PciLayout {
        let mut layout = PciLayout::default();
        if gpus.is_empty() {
            return layout;
        }
        let sys_devices = host_root.join("sys/devices");
        for gpu in gpus {
            let path = &gpu.path;
            let (below, device) = path.split_at(path.len() - 1);
            let root = &below[0];
            if !layout.tops().any(|top| top == root) {
                layout
                    .exposed
                    .push((PathBuf::from("/sys/devices").join(root), root.clone()));
            }
            // Each level: its directory (the root bus, then each bridge), then the bus below.
            for depth in 0..below.len() {
                let dir = below[..=depth].join("/");
                layout.add(Entry::Dir(dir.clone()));
                if depth > 0 {
                    for name in BRIDGE_ATTRIBUTES {
                        let source = sys_devices.join(&dir).join(name);
                        layout.add(Entry::Copy(format!("{dir}/{name}"), source));
                    }
                }
                let bus = &path[depth + 1][..7];
                layout.add(Entry::Dir(format!("{dir}/pci_bus")));
                layout.add(Entry::Dir(format!("{dir}/pci_bus/{bus}")));
                let link = format!("{CLASS_PCI_BUS}/{bus}");
                let target = format!("../../devices/{dir}/pci_bus/{bus}");
                layout.add(Entry::Dir(CLASS_PCI_BUS.to_string()));
                layout.add(Entry::Link(link, target));
            }
            let dir = path.join("/");
            if layout.devices.iter().any(|(d, _)| *d == dir) {
                continue;
            }
            layout.add(Entry::Dir(dir.clone()));
            layout.devices.push((dir.clone(), sys_devices.join(&dir)));
            layout.add(Entry::Dir(BUS_DEVICES.to_string()));
            layout.add(Entry::Link(
                format!("{BUS_DEVICES}/{}", device[0]),
                format!("../../../devices/{dir}"),
            ));
        }
        for (top, inside) in [
            (BUS_DEVICES, "/sys/bus/pci/devices"),
            (CLASS_PCI_BUS, "/sys/class/pci_bus"),
        ] {
            layout
                .exposed
                .push((PathBuf::from(inside), top.to_string()));
        }
        layout
    }

    /// Adds a `/sys/dev/char` holding each DRM node's link, as the host's (`226:128 ->
    /// ../../devices/<PCI path>/drm/renderD128`), which leads into the PCI part.
    pub(crate) fn add_drm_links(&mut self, drm: &[DrmDevice]) {
        if drm.is_empty() {
            return;
        }
        self.add(Entry::Dir(DEV_CHAR.to_string()));
        for node in drm {
            let link = format!("{DEV_CHAR}/{DRM_MAJOR}:{}", node.gpu.minor);
            self.add(Entry::Link(link, node.target.clone()));
        }
        self.exposed
            .push((PathBuf::from("/sys/dev/char"), DEV_CHAR.to_string()));
    }

    /// Adds `entry` unless the tree holds an entry at its path already (a bridge two GPUs
    /// share).
    fn add(&mut self, entry: Entry) {
        if !self.entries.iter().any(|e| e.path() == entry.path()) {
            self.entries.push(entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(minor: u32, path: &[&str]) -> PciGpu {
        PciGpu {
            minor,
            bdf: path.last().unwrap().to_string(),
            path: path.iter().map(|p| p.to_string()).collect(),
        }
    }

    #[test]
    fn a_gpu_behind_a_bridge_gets_its_directory_the_bridges_attributes_and_the_links() {
        let g = gpu(0, &["pci0000:00", "0000:00:01.0", "0000:01:00.0"]);
        let layout = PciLayout::new(&[g], Path::new("/host"));
        let dirs: Vec<&str> = layout
            .entries
            .iter()
            .filter_map(|e| match e {
                Entry::Dir(p) => Some(p.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            dirs,
            [
                "pci0000:00",
                "pci0000:00/pci_bus",
                "pci0000:00/pci_bus/0000:00",
                "class-pci_bus",
                "pci0000:00/0000:00:01.0",
                "pci0000:00/0000:00:01.0/pci_bus",
                "pci0000:00/0000:00:01.0/pci_bus/0000:01",
                "pci0000:00/0000:00:01.0/0000:01:00.0",
                "bus-pci-devices",
            ]
        );
        let links: Vec<(&str, &str)> = layout
            .entries
            .iter()
            .filter_map(|e| match e {
                Entry::Link(p, t) => Some((p.as_str(), t.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(
            links,
            [
                (
                    "class-pci_bus/0000:00",
                    "../../devices/pci0000:00/pci_bus/0000:00"
                ),
                (
                    "class-pci_bus/0000:01",
                    "../../devices/pci0000:00/0000:00:01.0/pci_bus/0000:01"
                ),
                (
                    "bus-pci-devices/0000:01:00.0",
                    "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0"
                ),
            ]
        );
        assert!(layout.entries.contains(&Entry::Copy(
            "pci0000:00/0000:00:01.0/numa_node".into(),
            "/host/sys/devices/pci0000:00/0000:00:01.0/numa_node".into()
        )));
        assert_eq!(
            layout.devices,
            [(
                "pci0000:00/0000:00:01.0/0000:01:00.0".to_string(),
                PathBuf::from("/host/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0")
            )]
        );
        let exposed: Vec<_> = layout.exposed.iter().map(|(i, _)| i.clone()).collect();
        assert_eq!(
            exposed,
            [
                PathBuf::from("/sys/devices/pci0000:00"),
                "/sys/bus/pci/devices".into(),
                "/sys/class/pci_bus".into()
            ]
        );
    }

    #[test]
    fn two_gpus_under_one_bridge_share_its_entries_and_no_gpus_make_nothing() {
        let a = gpu(0, &["pci0000:00", "0000:00:01.0", "0000:01:00.0"]);
        let b = gpu(1, &["pci0000:00", "0000:00:01.0", "0000:01:00.1"]);
        let layout = PciLayout::new(&[a, b], Path::new("/"));
        let mut paths: Vec<&str> = layout.entries.iter().map(Entry::path).collect();
        let all = paths.len();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), all);
        assert_eq!(layout.devices.len(), 2);
        assert_eq!(layout.tops().count(), 3);
        assert_eq!(PciLayout::new(&[], Path::new("/")), PciLayout::default());
    }

    #[test]
    fn a_gpus_card_and_render_nodes_share_its_device_and_get_their_dev_char_links() {
        let g = gpu(0, &["pci0000:00", "0000:00:01.0", "0000:01:00.0"]);
        let nodes: Vec<DrmDevice> = [0, 128]
            .into_iter()
            .map(|minor| DrmDevice {
                target: format!("../../devices/{}/drm/n{minor}", g.path.join("/")),
                gpu: PciGpu { minor, ..g.clone() },
            })
            .collect();
        let gpus: Vec<PciGpu> = nodes.iter().map(|n| n.gpu.clone()).collect();
        let mut layout = PciLayout::new(&gpus, Path::new("/"));
        layout.add_drm_links(&nodes);
        assert_eq!(layout.devices.len(), 1);
        assert!(layout.entries.contains(&Entry::Link(
            "dev-char/226:128".into(),
            "../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/drm/n128".into()
        )));
        assert_eq!(
            layout.exposed.last().unwrap(),
            &(PathBuf::from("/sys/dev/char"), "dev-char".to_string())
        );
        let before = layout.clone();
        layout.add_drm_links(&[]);
        assert_eq!(layout, before);
    }
}
