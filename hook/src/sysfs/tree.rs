//! The trees on the host: made for a build ([`build`]), removed by its [`TreeGuard`] when the
//! hook fails after making it, else by [`sweep`] once the build has ended. Each tree `<name>/`
//! has the record `<name>.json` beside it in `<runtime_dir>/sysfs/`, a verified [`StateDir`].

use super::layout::{Entry, PciLayout};
use super::mount::{self, MountError};
use super::pci::{self, PciError};
use super::{TreeBind, TREES_DIR};
use crate::lease::{born, Leases};
use crate::statedir::{StateDir, StateDirError};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why a build's tree could not be made, or an ended one removed. One line.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TreeError {
    /// The trees' directory (or a tree) failed its check or could not be opened.
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    /// The build's chroot could not be looked at, or a record, directory or mount point could
    /// not be written or removed: what was being done, the entry, and why.
    #[error("cannot {0} {path}: {2}", path = .1.display())]
    Io(&'static str, PathBuf, #[source] std::io::Error),
    /// A bind could not be made read-only, or undone.
    #[error(transparent)]
    Mount(#[from] MountError),
    /// A bridge's attribute could not be read for its copy.
    #[error(transparent)]
    Pci(#[from] PciError),
}

/// The most a copied attribute file may hold (sysfs attributes are at most a page).
const ATTRIBUTE_MAX: u64 = 4096;

/// What a tree's record says: whose it is and what is mounted in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    /// The build's chroot.
    chroot: PathBuf,
    /// Its device and inode when the tree was made.
    chroot_id: (u64, u64),
    /// Its birth time, where the filesystem keeps one (an inode can be reused).
    chroot_born: Option<u128>,
    /// Whether the build held a GPU lease: the tree then lives as long as a lease file names
    /// the chroot; else as long as the chroot exists as it was.
    leased: bool,
    /// The tree's mount points (paths in it), in the order they are made; each is
    /// unmounted, then removed by name, never by a walk.
    mount_points: Vec<String>,
    /// Its other entries (paths in it, and whether each is a directory), parents first;
    /// removed by name in the reverse order, once nothing is mounted.
    #[serde(default)]
    entries: Vec<(String, bool)>,
}

impl Record {
    /// Whether the build the tree was made for may still need it.
    fn live(&self, leases: &Leases) -> bool {
        if self.leased {
            return leases.names_chroot(&self.chroot, self.chroot_id);
        }
        std::fs::metadata(&self.chroot).is_ok_and(|m| (m.dev(), m.ino()) == self.chroot_id)
            && born(&self.chroot) == self.chroot_born
    }
}

/// What a build's tree holds: the topology's read-only binds and the PCI part.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TreeParts<'a> {
    /// The read-only binds of host directories at the tree's top.
    pub binds: &'a [TreeBind],
    /// The GPUs' PCI devices, their bridges' attributes and the links to them.
    pub pci: &'a PciLayout,
}

/// Makes the tree `name` holding `parts` for the build in `chroot` (`leased`: whether it
/// holds a lease): first its record, then each mount point and its read-only bind, then the
/// PCI entries, each PCI top bound on itself read-only and the GPUs' directories bound in
/// it, all in the mount namespace of the Nix that ran the hook. On an error every bind made
/// is undone and the tree removed (or, where that fails too, left to [`sweep`]).
pub(crate) fn build(
    parts: TreeParts<'_>,
    name: &str,
    runtime_dir: &Path,
    chroot: &Path,
    leased: bool,
) -> Result<TreeGuard, TreeError> {
    mount::in_parents_namespace(|| -> Result<(), TreeError> {
        let trees = StateDir::open(&runtime_dir.join(TREES_DIR))?;
        let meta = std::fs::metadata(chroot)
            .map_err(io("look at the build's chroot", chroot.to_path_buf()))?;
        // A tree of the same name is an ended build's whose chroot had this inode.
        remove_in(&trees, name)?;
        let record = Record {
            chroot: chroot.to_path_buf(),
            chroot_id: (meta.dev(), meta.ino()),
            chroot_born: born(chroot),
            leased,
            mount_points: parts
                .binds
                .iter()
                .map(|b| b.mount_point.clone())
                .chain(parts.pci.tops().cloned())
                .chain(parts.pci.devices.iter().map(|(d, _)| d.clone()))
                .collect(),
            entries: parts
                .pci
                .entries
                .iter()
                .map(|e| (e.path().to_string(), matches!(e, Entry::Dir(_))))
                .collect(),
        };
        let bytes = serde_json::to_vec(&record).expect("a record serialises");
        let record_name = record_file(name);
        trees
            .write_atomic(&record_name, &bytes, 0o600, false)
            .map_err(io("write", trees.path.join(&record_name)))?;
        let made = make_binds(&trees, parts, name);
        if made.is_err() {
            let _ = remove_in(&trees, name);
        }
        made
    })??;
    Ok(TreeGuard {
        runtime_dir: runtime_dir.to_path_buf(),
        name: name.to_string(),
        committed: false,
    })
}

/// The tree [`build`] made for one build. Dropped uncommitted (the hook failed after making
/// it, so Nix never starts the build), it removes the tree; once [`TreeGuard::commit`]ted it
/// stays, for [`sweep`] to remove when the build has ended.
#[derive(Debug)]
#[must_use = "dropping the guard removes the tree"]
pub(crate) struct TreeGuard {
    runtime_dir: PathBuf,
    name: String,
    committed: bool,
}

impl TreeGuard {
    /// Keeps the tree for the build: it is no longer removed on drop.
    pub(crate) fn commit(&mut self) {
        self.committed = true;
    }
}

impl Drop for TreeGuard {
    fn drop(&mut self) {
        if !self.committed {
            let _ = mount::in_parents_namespace(|| {
                match StateDir::open_existing(&self.runtime_dir.join(TREES_DIR))? {
                    Some(trees) => remove_in(&trees, &self.name),
                    None => Ok(()),
                }
            });
        }
    }
}

fn make_binds(trees: &StateDir, parts: TreeParts<'_>, name: &str) -> Result<(), TreeError> {
    trees
        .make_dir(name, 0o700)
        .map_err(io("make", trees.path.join(name)))?;
    let tree = StateDir::open(&trees.path.join(name))?;
    for bind in parts.binds {
        let target = tree.path.join(&bind.mount_point);
        tree.make_dir(&bind.mount_point, 0o755)
            .map_err(io("make", target.clone()))?;
        mount::bind_read_only(&bind.source, &target)?;
    }
    // The PCI entries (paths in the tree, which this hook made and only root can change: no
    // link is ever crossed, links are only ever leaves), then the tops bound on themselves
    // read-only, then the GPUs' directories bound in them.
    for entry in &parts.pci.entries {
        let at = tree.path.join(entry.path());
        match entry {
            Entry::Dir(p) => tree.make_dir(p, 0o755).map_err(io("make", at))?,
            Entry::Link(p, target) => tree.make_link(p, target).map_err(io("make", at))?,
            Entry::Copy(p, source) => {
                if std::fs::symlink_metadata(source).is_err() {
                    continue;
                }
                let bytes = pci::read_small(source, ATTRIBUTE_MAX)?;
                tree.write_atomic(p, &bytes, 0o444, false)
                    .map_err(io("write", at))?;
            }
        }
    }
    for top in parts.pci.tops() {
        let at = tree.path.join(top);
        mount::bind_read_only(&at, &at)?;
    }
    for (dir, source) in &parts.pci.devices {
        mount::bind_read_only(source, &tree.path.join(dir))?;
    }
    Ok(())
}

/// Removes every tree whose build has ended (see [`Record::live`]); one that cannot be
/// removed keeps its record, for the next sweep. A record that cannot be read is left.
pub(crate) fn sweep(runtime_dir: &Path) -> Result<(), TreeError> {
    // No tree was ever made here: nothing to enter a namespace for (most hosts, every run).
    if std::fs::symlink_metadata(runtime_dir.join(TREES_DIR)).is_err() {
        return Ok(());
    }
    mount::in_parents_namespace(|| {
        let Some(trees) = StateDir::open_existing(&runtime_dir.join(TREES_DIR))? else {
            return Ok(());
        };
        let leases = Leases::new(runtime_dir);
        let names = trees.names();
        // Every ended tree is tried; the first error is returned.
        (names.iter())
            .filter_map(|name| name.strip_suffix(".json"))
            .filter(|tree| read(&trees, tree).is_some_and(|record| !record.live(&leases)))
            .map(|tree| remove_in(&trees, tree))
            .fold(Ok(()), Result::and)
    })?
}

fn read(trees: &StateDir, name: &str) -> Option<Record> {
    let bytes = trees.read_bytes(&record_file(name)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Unmounts and removes the tree `name` as its record lists it, then the record. Nothing is
/// removed recursively: a mount point is removed only once nothing is mounted on it.
fn remove_in(trees: &StateDir, name: &str) -> Result<(), TreeError> {
    let Some(record) = read(trees, name) else {
        return Ok(());
    };
    let dir = trees.path.join(name);
    if let Some(tree) = StateDir::open_existing(&dir)? {
        for point in record.mount_points.iter().rev() {
            mount::detach(&tree.path.join(point))?;
        }
        // The other entries, then the mount points (directories), each in reverse.
        let points = record.mount_points.iter().rev().map(|p| (p, true));
        let entries = record.entries.iter().rev().map(|(e, d)| (e, *d));
        for (entry, is_dir) in entries.chain(points) {
            let removed = if is_dir {
                tree.remove_dir(entry)
            } else {
                tree.remove(entry)
            };
            absent_ok(removed).map_err(io("remove", tree.path.join(entry)))?;
        }
        drop(tree);
        absent_ok(trees.remove_dir(name)).map_err(io("remove", dir))?;
    }
    let record_name = record_file(name);
    absent_ok(trees.remove(&record_name)).map_err(io("remove", trees.path.join(record_name)))
}

fn record_file(name: &str) -> String {
    format!("{name}.json")
}

fn absent_ok(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn io(what: &'static str, path: PathBuf) -> impl FnOnce(std::io::Error) -> TreeError {
    move |source| TreeError::Io(what, path, source)
}
