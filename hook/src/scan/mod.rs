//! Scan: what the host has, read once and only read. Writes nothing.
//!
//! Each kind of source a rule can name has its scan here, in its own module, and its planner
//! in the module of the same name under [`crate::plan`]:
//! - [`devices`]: the device globs (every entry they match, and the links on the way);
//! - [`paths`]: host paths and mounts (and, with `follow_entry_symlinks`, the links directly
//!   inside a directory);
//! - [`driver`]: the driver link, the host's libraries when there is no link (or those a CDI
//!   spec mounts), and the compat directories (their ELF notes);
//! - [`cdi`]: the CDI devices a rule names, with what their specs list;
//! - [`mig`]: the MIG instances the driver publishes, with their capability nodes;
//! - [`inventory`]: the GPUs' compute capabilities, for a build requiring `cuda-sm-*`
//!   features only.
//!
//! A scan result holds its source (the configured item, copied) beside what was found for it,
//! so a planner takes both from one value and never looks anything up by configuration text.
//! Host facts that several sources need (the kernel module version, the Tegra facts) are read
//! once into [`HostFacts`], and every `lstat` the scans made is kept in [`Snapshot`], over
//! which the planners follow symlink chains purely. The result, [`HostView`], is plain data:
//! [`crate::plan::decide`] works on it alone, so the decision is unit-tested on views made by
//! hand. How to add a source: `docs/architecture.md`.

pub(crate) mod booted;
pub(crate) mod cdi;
pub(crate) mod devices;
pub(crate) mod driver;
pub(crate) mod inventory;
pub(crate) mod mig;
pub(crate) mod paths;

use crate::config::{Config, Platform, Rule};
use crate::discover::versions;
use crate::symlinks::{self, Lookup, Node, Space};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub(crate) use booted::BootedDriver;
pub(crate) use cdi::{CdiDevice, CdiView};
pub(crate) use devices::{DeviceScan, DeviceView};
pub(crate) use driver::DriverView;
pub(crate) use mig::{CapNode, MigView, NodeState};
pub(crate) use paths::{PathOrigin, PathView};

/// What the host has, as data. Built by [`scan`]; tests build it by hand.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HostView {
    /// Facts of the host that are not one source's: platform, kernel module, L4T.
    pub facts: HostFacts,
    /// Every entry the scans looked at, and the real paths of the libcuda files.
    pub snapshot: Snapshot,
    /// Each matched rule's sources and what was found for them, in rule order.
    pub rules: Vec<RuleView>,
    /// The GPUs' capabilities, read only for a build requiring `cuda-sm-*` features.
    pub inventory: Option<inventory::InventoryView>,
    /// With `gpus_per_build > 0`: the NVIDIA GPU of each DRM node a device glob matched
    /// (under `/dev/dri`, by inside path), or why it cannot be told.
    pub drm: DrmOwners,
}

/// The GPU (`/dev/nvidia<N>`) of each DRM node, by inside path, or why it cannot be told.
pub(crate) type DrmOwners = BTreeMap<PathBuf, Result<u32, crate::sysfs::drm::DrmError>>;

/// Host facts read once for every source that needs them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HostFacts {
    /// Jetson or not: the one Tegra detector (`/etc/nv_tegra_release`, or
    /// `/sys/devices/soc0/family` starting with "tegra"). `None` when no matched rule has a
    /// driver or a platform-specific device, so nothing asks (nor was it read).
    pub platform: Option<Platform>,
    /// The kernel module version (`/proc/driver/nvidia/version`; read only when a matched rule
    /// has a driver or a platform-specific device, as the Tegra facts).
    pub kernel_driver: Option<String>,
    /// The L4T major release from `/etc/nv_tegra_release`.
    pub l4t: Option<u32>,
    /// The booted NixOS system's driver, read only when a matched rule has a driver and a
    /// libcuda found names a version other than the kernel module's (a stale driver is then
    /// offered this one).
    pub booted_driver: Option<BootedDriver>,
}

impl HostFacts {
    /// The kind of host; `Discrete` unless the scan found a Tegra.
    pub(crate) fn platform(&self) -> Platform {
        self.platform.unwrap_or(Platform::Discrete)
    }
}

/// What the scans saw of the filesystem.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// What `lstat` found at each host path looked at (hashed: the planners look paths up
    /// hundreds of times a run, and a sorted map compares paths component by component).
    pub nodes: HashMap<PathBuf, Node>,
    /// Real paths (every link resolved) of the libcuda files the driver planner names.
    pub real_paths: BTreeMap<PathBuf, PathBuf>,
}

impl Lookup for Snapshot {
    fn lstat(&self, outside: &Path) -> Node {
        self.nodes.get(outside).cloned().unwrap_or(Node::Unscanned)
    }
}

impl Lookup for HostView {
    fn lstat(&self, outside: &Path) -> Node {
        self.snapshot.lstat(outside)
    }
}

/// One matched rule: its sources, each beside what the scan found for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuleView {
    /// Its name, for reasons and problems.
    pub name: String,
    /// Its device globs.
    pub devices: Vec<DeviceView>,
    /// Its host paths, then its mounts.
    pub paths: Vec<PathView>,
    /// Its driver, when it configures one.
    pub driver: Option<DriverView>,
    /// Its CDI devices, when it names any.
    pub cdi: Option<CdiView>,
    /// Its MIG source, when it has one.
    pub mig: Option<MigView>,
    /// The part of `/sys` it asks for (checked when the build's tree is made).
    pub sysfs: Option<crate::config::Sysfs>,
}

/// The real filesystem, remembering every answer in the snapshot (each path is looked at once).
#[derive(Default)]
pub(crate) struct Recorder(RefCell<Snapshot>);

impl Lookup for Recorder {
    fn lstat(&self, outside: &Path) -> Node {
        if let Some(n) = self.0.borrow().nodes.get(outside) {
            return n.clone();
        }
        let n = Node::of(outside);
        let mut snapshot = self.0.borrow_mut();
        snapshot.nodes.insert(outside.to_path_buf(), n.clone());
        n
    }
}

impl Recorder {
    /// Follows the chain at (`inside`, `outside`), recording every entry on the way, so that a
    /// planner can follow it again over the snapshot.
    pub(crate) fn follow(&self, inside: &Path, outside: &Path, space: Space<'_>) {
        let _ = symlinks::follow(inside, outside, space, self);
    }

    /// Records the real path of the file at `outside` (every link resolved).
    pub(crate) fn record_real(&self, outside: &Path) {
        if let Some(real) = self.real_path(outside) {
            let mut snapshot = self.0.borrow_mut();
            snapshot.real_paths.insert(outside.to_path_buf(), real);
        }
    }

    /// What `realpath(3)` gives for `path` (absolute), resolved over this recorder: every
    /// component is looked at once per scan, so the libcuda files of one driver, which share
    /// their directories, cost one `lstat` per directory instead of a `readlink` per component
    /// each. `None` when a component is missing or cannot be looked at.
    fn real_path(&self, path: &Path) -> Option<PathBuf> {
        if !path.is_absolute() {
            return None;
        }
        let mut resolved = PathBuf::from("/");
        let mut pending = crate::trust::names(path);
        let mut links = 0;
        while let Some(name) = pending.pop() {
            if name == ".." {
                resolved.pop();
                continue;
            }
            let here = resolved.join(&name);
            match self.lstat(&here) {
                Node::Symlink(target) => {
                    links += 1;
                    if links > symlinks::MAX_HOPS {
                        return None;
                    }
                    if target.is_absolute() {
                        resolved = PathBuf::from("/");
                    }
                    pending.extend(crate::trust::names(&target));
                }
                Node::Missing | Node::Error(_) | Node::Unscanned => return None,
                Node::Dir | Node::CharDevice | Node::File | Node::Other => resolved = here,
            }
        }
        Some(resolved)
    }
}

/// Reads what the `rules` (matched) under `config` need to know of the host, and the GPU
/// inventory when the build's features `need_inventory`. Never writes.
pub(crate) fn scan(config: &Config, rules: &[&Rule], need_inventory: bool) -> HostView {
    let fs = Recorder::default();
    let mut facts = host_facts(config, rules);
    let rooted = config.space();
    let mut listings = devices::Listings::new();
    let mut specs = None;
    let views: Vec<RuleView> = rules
        .iter()
        .map(|rule| {
            let cdi = (!rule.cdi.is_empty()).then(|| cdi::scan(rule, config, &mut specs, &fs));
            // A host driver a spec mounts replaces the one the loader cache would give.
            let spec_libraries = cdi
                .as_ref()
                .map(|c| c.driver_libraries(config))
                .filter(|libs| !libs.is_empty());
            RuleView {
                name: rule.name.clone(),
                devices: rule
                    .devices
                    .iter()
                    .map(|d| devices::scan(d, config, facts.platform(), &mut listings, &fs))
                    .collect(),
                paths: rule
                    .paths
                    .iter()
                    .map(|p| paths::scan_host_path(p, rooted, &fs))
                    .chain(rule.mounts.iter().map(|m| paths::scan_mount(m, &fs)))
                    .collect(),
                driver: rule
                    .driver
                    .as_ref()
                    .map(|d| driver::scan(d, config, spec_libraries, &fs)),
                cdi,
                mig: rule.mig.as_ref().map(|m| mig::scan(m, config, &fs)),
                sysfs: rule.sysfs,
            }
        })
        .collect();
    let snapshot = fs.0.into_inner();
    // The booted system's driver serves only the fix for a stale driver: it is read when a
    // libcuda the scan found carries a version other than the kernel module's (a newer compat
    // driver does too, and is then judged by the planner), never on a host whose driver
    // matches its module.
    let has_driver = views.iter().any(|v| v.driver.is_some());
    // Whether a libcuda whose real path the scan recorded names a version other than `kernel`.
    let differs = |kernel: &str| {
        snapshot.real_paths.values().any(|real| {
            real.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| versions::version_in_file_name(n, "libcuda"))
                .is_some_and(|v| v != kernel)
        })
    };
    if has_driver && facts.kernel_driver.as_deref().is_some_and(differs) {
        facts.booted_driver = booted::booted_driver(&config.host_root, &config.store_dir);
    }
    HostView {
        facts,
        snapshot,
        drm: drm_owners(config, &views),
        rules: views,
        inventory: need_inventory.then(|| inventory::scan(config)),
    }
}

/// The NVIDIA GPU of each DRM node the rules' device globs matched ([`crate::sysfs::drm`]):
/// every entry under `/dev/dri`, and any other matched path that is a DRM character device
/// (226:N, links followed, as Nix binds the target), so that a glob such as `/dev/x` leading to
/// `/dev/dri/card1` is judged as that node. Under leases a build gets only its GPU's, so only
/// with `gpus_per_build > 0` is anything looked at.
fn drm_owners(config: &Config, views: &[RuleView]) -> DrmOwners {
    use crate::sysfs::drm::{self, DRM_DEV_DIR};
    if config.gpus_per_build == 0 {
        return DrmOwners::new();
    }
    let nodes: Vec<(PathBuf, &PathBuf)> = views
        .iter()
        .flat_map(|v| &v.devices)
        .filter_map(|d| match &d.found {
            devices::DeviceScan::Matched(m) => Some(m),
            devices::DeviceScan::OtherPlatform(..) => None,
        })
        .flatten()
        .filter_map(|m| {
            let outside = m.as_ref().ok()?;
            let inside = Path::new("/").join(outside.strip_prefix(&config.host_root).ok()?);
            Some((inside, outside))
        })
        .filter(|(inside, outside)| {
            inside.starts_with(DRM_DEV_DIR) || drm::drm_minor(outside).is_some()
        })
        .collect();
    if nodes.is_empty() {
        return DrmOwners::new();
    }
    let gpus: Vec<crate::sysfs::PciGpu> = crate::sysfs::discover(&config.host_root)
        .into_iter()
        .filter_map(Result::ok)
        .collect();
    nodes
        .into_iter()
        .map(|(inside, outside)| (inside, drm::nvidia_gpu(&config.host_root, outside, &gpus)))
        .collect()
}

/// The file at `path`, opened once trusted ([`crate::trust::open_file`]: root's, not writable
/// by group or others, a regular file opened without following a link or blocking), read to
/// at most `limit` + 1 bytes (so that a larger one is caught by its parser's bound); why not,
/// in one line.
pub(crate) fn read_trusted(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let (file, _) = crate::trust::open_file(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// The host facts, read only when a rule has a driver or a platform-specific device: a rule
/// with neither (device nodes and paths alone) does without the three reads.
fn host_facts(config: &Config, rules: &[&Rule]) -> HostFacts {
    let needed = rules
        .iter()
        .any(|r| r.driver.is_some() || r.devices.iter().any(|d| d.platform.is_some()));
    if !needed {
        return HostFacts::default();
    }
    let read = |p: &str| std::fs::read_to_string(config.space().outside(Path::new(p))).ok();
    let tegra_release = read("/etc/nv_tegra_release");
    let tegra = tegra_release.is_some()
        || read("/sys/devices/soc0/family")
            .is_some_and(|f| f.trim().to_ascii_lowercase().starts_with("tegra"));
    let kernel_driver = read("/proc/driver/nvidia/version")
        .as_deref()
        .and_then(versions::kernel_module_version);
    HostFacts {
        booted_driver: None,
        kernel_driver,
        l4t: tegra_release.as_deref().and_then(versions::l4t_release),
        platform: Some(if tegra {
            Platform::Tegra
        } else {
            Platform::Discrete
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// The recorder's real path is `canonicalize`'s, through absolute and relative links,
    /// `..` in a target and linked directories; and nothing for a dangling link.
    #[test]
    fn real_paths_are_what_canonicalize_gives() {
        let t = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(t.path()).unwrap();
        let store = base.join("store/aaa-driver/lib");
        std::fs::create_dir_all(&store).unwrap();
        std::fs::write(store.join("libcuda.so.550.54.14"), b"").unwrap();
        symlink("libcuda.so.550.54.14", store.join("libcuda.so.1")).unwrap();
        std::fs::create_dir_all(base.join("env/lib")).unwrap();
        symlink(
            store.join("libcuda.so.1"),
            base.join("env/lib/libcuda.so.1"),
        )
        .unwrap();
        symlink("../env", base.join("store/link")).unwrap();
        std::fs::create_dir_all(base.join("run")).unwrap();
        symlink(base.join("store/link"), base.join("run/opengl-driver")).unwrap();
        symlink("nowhere", base.join("run/dangling")).unwrap();
        let fs = Recorder::default();
        for p in [
            "run/opengl-driver/lib/libcuda.so.1",
            "env/lib/libcuda.so.1",
            "store/aaa-driver/lib/libcuda.so.1",
            "store/link/../run",
        ] {
            let p = base.join(p);
            assert_eq!(fs.real_path(&p), std::fs::canonicalize(&p).ok(), "{p:?}");
        }
        assert_eq!(fs.real_path(&base.join("run/dangling")), None);
        assert_eq!(
            fs.real_path(&base.join("store/aaa-driver/lib/libcuda.so.1/x")),
            None
        );
    }
}
