//! The CDI source: the devices a rule names, looked up in the spec directories, with what
//! their specs list (the device's edits, then its spec's) and, for each path, the chain from it
//! recorded for the CDI planner (`plan/cdi`). A library a spec mounts is opened (a
//! regular file only, without following a link or blocking) to read its `DT_SONAME`, the name
//! the loader looks for.
//!
//! The spec's paths are host paths: they are looked up under the configured host root (store
//! paths as they are), and their links are followed literally, as for `[[rule.mount]]`.

use super::Recorder;
use crate::cdi::load::{LookupError, SpecError, SpecSet};
use crate::cdi::{ContainerEdits, DeviceName, SpecDirs};
use crate::config::{Config, Rule};
pub(crate) use crate::discover::host::is_library_name;
use crate::discover::host::{self, HostLibrary};
use crate::symlinks::{self, Node, Space};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A rule's CDI devices and what their specs list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CdiView {
    /// Each device the rule names, in configuration order.
    pub devices: Vec<CdiDeviceView>,
    /// The spec directories and files that could not be used.
    pub spec_errors: Vec<SpecError>,
    /// The rule's fix for a device no spec defines (`cdi_hint`), copied.
    pub hint: Option<String>,
}

/// One named device and what was found for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CdiDeviceView {
    /// The device, as configured.
    pub name: DeviceName,
    /// Its spec's edits, or why there is none.
    pub found: Result<CdiDevice, LookupError>,
}

/// A device found in a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CdiDevice {
    /// The spec file that defines it.
    pub spec: PathBuf,
    /// The device's edits followed by its spec's.
    pub edits: ContainerEdits,
    /// The `DT_SONAME` of each library it mounts, by host path (under the host root).
    pub sonames: BTreeMap<PathBuf, String>,
    /// The device's own edits (`edits` less its spec's).
    pub own: ContainerEdits,
    /// Its spec's top-level edits, which every device of the spec carries.
    pub shared: ContainerEdits,
    /// With `gpus_per_build > 0`: the spec's other devices, each by its fully qualified name
    /// with its own edits, from which the CDI planner takes the leased GPUs' own devices
    /// (their nodes recorded too); empty without leases.
    pub siblings: Vec<(String, ContainerEdits)>,
}

impl CdiView {
    /// The driver libraries the found devices mount, each under its file name and under its
    /// soname, as the driver source binds host libraries; empty when they mount none.
    pub(crate) fn driver_libraries(&self, config: &Config) -> Vec<HostLibrary> {
        let mut out: BTreeMap<String, HostLibrary> = BTreeMap::new();
        for d in self.devices.iter().filter_map(|d| d.found.as_ref().ok()) {
            for m in &d.edits.mounts {
                let outside = host_path(&m.host_path, config);
                let inside = symlinks::normalize(Path::new(&m.container_path));
                let file = inside.file_name().and_then(|f| f.to_str());
                let Some(stem) = file.and_then(host::driver_library_stem) else {
                    continue;
                };
                let rel = below_library_dir(&inside);
                let found_in = format!("CDI spec {}", d.spec.display());
                let names = std::iter::once(rel.clone())
                    .chain(d.sonames.get(&outside).map(|s| rel.with_file_name(s)));
                for name in names.filter_map(|n| n.to_str().map(str::to_owned)) {
                    out.entry(name.clone()).or_insert(HostLibrary {
                        name,
                        stem,
                        outside: outside.clone(),
                        found_in: found_in.clone(),
                    });
                }
            }
        }
        out.into_values().collect()
    }
}

/// Where a spec's host path is: under the host root, store paths as they are.
pub(crate) fn host_path(path: &str, config: &Config) -> PathBuf {
    config
        .space()
        .outside(&symlinks::normalize(Path::new(path)))
}

/// The library directories a spec's libraries are in: their last component.
fn is_library_dir(name: &str) -> bool {
    name == "lib" || name == "lib64" || name.ends_with("-linux-gnu")
}

/// The place of a library below its library directory (`vdpau/libvdpau_nvidia.so.1`): the
/// part after the last `lib`, `lib64` or multiarch component, else the file name.
pub(crate) fn below_library_dir(path: &Path) -> PathBuf {
    let names: Vec<&std::ffi::OsStr> = path
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let start = names
        .iter()
        .rposition(|n| n.to_str().is_some_and(is_library_dir))
        .map_or(names.len().saturating_sub(1), |i| i + 1);
    names[start.min(names.len())..].iter().collect()
}

/// Scans the CDI devices `rule` names (with its `cdi_hint` for a missing one) under `config`,
/// reading the spec directories into `specs` (read once for every rule that names a CDI
/// device) the first time.
pub(crate) fn scan(
    rule: &Rule,
    config: &Config,
    specs: &mut Option<SpecSet>,
    fs: &Recorder,
) -> CdiView {
    let dirs: &SpecDirs = &config.cdi_spec_dirs;
    let set = specs.get_or_insert_with(|| SpecSet::load(dirs));
    let devices = rule
        .cdi
        .iter()
        .map(|name| CdiDeviceView {
            name: name.clone(),
            found: set.find(name, dirs).map(|(loaded, device)| {
                let mut edits = device.container_edits.clone();
                let shared = &loaded.spec.container_edits;
                edits.extend(shared);
                let sonames = record(&edits, config, fs);
                // The spec's other devices, with leases only.
                let siblings = (loaded.spec.devices.iter())
                    .filter(|d| config.gpus_per_build > 0 && d.name != device.name)
                    .map(|d| {
                        record_nodes(&d.container_edits, config, fs);
                        let qualified = format!("{}={}", loaded.spec.kind, d.name);
                        (qualified, d.container_edits.clone())
                    })
                    .collect();
                CdiDevice {
                    spec: loaded.file.to_path_buf(),
                    edits,
                    sonames,
                    own: device.container_edits.clone(),
                    shared: shared.clone(),
                    siblings,
                }
            }),
        })
        .collect();
    CdiView {
        devices,
        spec_errors: set.errors.clone(),
        hint: rule.cdi_hint.clone(),
    }
}

/// Follows every path the edits name, recording the chains, and reads each mounted library's
/// soname.
fn record(edits: &ContainerEdits, config: &Config, fs: &Recorder) -> BTreeMap<PathBuf, String> {
    record_nodes(edits, config, fs);
    let mut sonames = BTreeMap::new();
    for m in &edits.mounts {
        let outside = host_path(&m.host_path, config);
        let inside = Path::new(&m.container_path);
        fs.follow(inside, &outside, Space::Literal);
        let name = inside.file_name().and_then(|f| f.to_str());
        if !name.is_some_and(is_library_name) {
            continue;
        }
        let Ok(chain) = symlinks::follow(inside, &outside, Space::Literal, fs) else {
            continue;
        };
        // The library's soname, when its chain ends at a regular file.
        let file = chain.hops.last().filter(|_| chain.target == Node::File);
        if let Some(soname) = file.and_then(|f| soname_of(&f.outside)) {
            sonames.insert(outside, soname);
        }
    }
    sonames
}

/// Follows the path of every device node the edits list, recording the chains.
fn record_nodes(edits: &ContainerEdits, config: &Config, fs: &Recorder) {
    for n in &edits.device_nodes {
        let outside = host_path(n.host_path.as_deref().unwrap_or(&n.path), config);
        fs.follow(Path::new(&n.path), &outside, Space::Literal);
    }
}

/// The `DT_SONAME` of the regular file at `path` (no link: the chain was followed), opened
/// without following a link, without blocking and without taking a terminal, and checked
/// again on its descriptor.
fn soname_of(path: &Path) -> Option<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    cuda_sandbox_elfkit::dynamic_info_of_file(&file)
        .ok()
        .flatten()?
        .soname
        .filter(|s| !s.contains('/') && is_library_name(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libraries_keep_their_place_below_the_library_directory() {
        for (path, rel) in [
            ("/usr/lib/x86_64-linux-gnu/libcuda.so.1", "libcuda.so.1"),
            (
                "/usr/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.1",
                "vdpau/libvdpau_nvidia.so.1",
            ),
            ("/nix/store/x-nvidia/lib/libcuda.so", "libcuda.so"),
            ("/usr/lib/libVendor.so.0", "libVendor.so.0"),
            ("/opt/odd/libX.so", "libX.so"),
        ] {
            assert_eq!(below_library_dir(Path::new(path)), Path::new(rel), "{path}");
        }
    }
}
