//! A read-only part of the host's `/sys` for the builds of a rule with `sysfs = "topology"`.
//!
//! The Nix sandbox has no `/sys`, and a pre-build hook can only ask Nix for
//! `extra-sandbox-paths`, which Nix binds with `MS_BIND | MS_REC` and no read-only flag. A
//! bind of a read-only bind mount is read-only too (the kernel copies the mount's flags, and
//! a build's user namespace cannot clear a flag it inherited), so the hook builds, for each
//! build, a tree of its own under `<runtime_dir>/sysfs/<name>/` whose entries are read-only
//! bind mounts of the host's directories, and hands Nix those ([`TreeBind`]s, planned purely
//! by [`crate::plan`]; made by [`build`], whose [`TreeGuard`] removes it again unless the
//! build may start).
//!
//! - `topology`: `/sys/devices/system/cpu` and `/sys/devices/system/node` (under the host
//!   root), each bound alone (`MS_BIND` without `MS_REC`: nothing mounted below them comes
//!   along), then remounted `MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC`; the links inside
//!   them that stay inside (`node0/cpu0 -> ../../cpu/cpu0`) work, those that lead elsewhere in
//!   `/sys` dangle.
//! - `kfd`: `/sys/devices/virtual/kfd` bound the same way, and the PCI part for the GPUs of
//!   the DRM nodes the build gets: each node's `/sys/dev/char/226:<minor>` link is read, and
//!   the build sees the PCI device it leads to (the node's own directory is in it, under
//!   `drm/`) and a `/sys/dev/char` holding the same relative links.
//!
//! The mounts are made in the mount namespace of the Nix that ran the hook
//! (`mount::in_parents_namespace`): Nix runs its hook in the namespace it saved at start,
//! while it may set up sandboxes from a private one of its own (`nix-build` as root on Nix
//! 2.8), where a mount of the hook's namespace never arrives. They end with that namespace,
//! or when a sweep unmounts them (an `rmdir` of a mount point also detaches it in every other
//! namespace).
//!
//! Each tree has a record, `<runtime_dir>/sysfs/<name>.json` ([`tree`]), written before any
//! mount is made, naming the build's chroot and the tree's mount points, so a hook killed
//! half-way leaves nothing that [`sweep`] does not find. A tree lives while the build's lease
//! does (a lease file names its chroot), or, when builds take no lease, while its chroot
//! exists as it was; [`sweep`] unmounts the others' mount points and removes their
//! directories (never a recursive removal: an entry still mounted stays, and so does its
//! record, for the next sweep). Every step that fails leaves the build without the tree, never
//! with a writable one: a mount is offered to Nix only once it is read-only.
//!
//! Beside the trees, what `/sys` says of a GPU: its PCI device ([`discover`], [`identity`])
//! and the GPU a DRM node belongs to ([`drm`], which keeps a leased build to its GPU's
//! `/dev/dri` nodes).

pub(crate) mod drm;
mod layout;
mod mount;
mod pci;
mod tree;

pub(crate) use layout::PciLayout;
pub(crate) use pci::{discover, discover_drm, identity, listed_gpus, PciGpu, DRM_MAJOR};
pub(crate) use tree::{build, sweep, TreeGuard, TreeParts};

use std::path::PathBuf;

/// The host directories `topology` binds, by their path inside (under `/sys`), and the name
/// of each one's mount point in a build's tree.
pub(crate) const TOPOLOGY: [(&str, &str); 2] = [
    ("/sys/devices/system/cpu", "cpu"),
    ("/sys/devices/system/node", "node"),
];

/// The host directory `kfd` binds (the KFD topology ROCm reads: `kfd/topology/nodes/<N>/`
/// with each GPU's properties), and its mount point. The PCI devices of the DRM nodes come
/// with it ([`PciLayout`]).
pub(crate) const KFD: [(&str, &str); 1] = [("/sys/devices/virtual/kfd", "virtual-kfd")];

/// The directory, under the runtime directory, that holds the trees and their records.
pub(crate) const TREES_DIR: &str = "sysfs";

/// One read-only bind of a tree.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct TreeBind {
    /// Where the build sees it (under `/sys`).
    pub inside: PathBuf,
    /// The host directory (under the host root).
    pub source: PathBuf,
    /// The rule that asked for it.
    pub rule: String,
    /// The name of its mount point in the tree.
    pub mount_point: String,
}

/// The name of the tree of the build whose manifest is `manifest_name`
/// ([`crate::manifest_file::name_for`]): the same name without its `.json`.
pub(crate) fn tree_name(manifest_name: &str) -> &str {
    manifest_name.strip_suffix(".json").unwrap_or(manifest_name)
}
