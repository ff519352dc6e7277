//! Scan: what the host has, read once and only read. Writes nothing.
//!
//! Reads, under the configured host root: the device globs of the matched rules and every
//! entry on the way to what they match (symlinks followed component by component), the rules'
//! paths and mounts likewise, the driver link, the loader cache and library directories when
//! there is no link, the compat directories (their ELF notes), the kernel module version and
//! the Tegra facts. The result, [`HostView`], is plain data: [`crate::plan::decide`] works on
//! it alone, so the decision is pure and unit-tested on hand-made views.

use crate::config::{Config, Platform, Rule};
use crate::discover::compat::{self, CompatDriver};
use crate::discover::host::{self, HostLibrary, COMPAT_LIBRARIES};
use crate::discover::versions;
use crate::symlinks::{self, Lookup, Node, Space};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One directory a compat glob matched, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompatSeen {
    /// Inside path of the directory.
    pub inside: PathBuf,
    /// Host path.
    pub outside: PathBuf,
    /// The compat driver in it (`Ok(None)`: no compat libcuda there).
    pub found: Result<Option<CompatDriver>, String>,
}

/// The host's libraries found through the loader cache and the library directories, with the
/// warnings (e.g. an unreadable cache) met on the way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostLibraries {
    /// The driver libraries, by name.
    pub libraries: Vec<HostLibrary>,
    /// What could not be read.
    pub warnings: Vec<String>,
}

/// What a glob matched: host paths, or an entry that could not be read (its path, the error).
pub type GlobMatches = Vec<Result<PathBuf, (PathBuf, String)>>;

/// What the host has, as data. Built by [`scan`]; tests build it by hand.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostView {
    /// Jetson or not: the one Tegra detector (`/etc/nv_tegra_release`, or
    /// `/sys/devices/soc0/family` starting with "tegra"). `None` when no matched rule has a
    /// driver or a platform-specific device, so nothing asks (nor was it read).
    pub platform: Option<Platform>,
    /// The kernel module version (`/proc/driver/nvidia/version`; read only when a matched rule
    /// has a driver or a platform-specific device, as the Tegra facts).
    pub kernel_driver: Option<String>,
    /// The L4T release (major, revision) from `/etc/nv_tegra_release`.
    pub l4t: Option<(u32, String)>,
    /// What `lstat` found at each host path looked at.
    pub nodes: BTreeMap<PathBuf, Node>,
    /// The host paths each device glob (as configured) matched, or the error for an entry.
    pub globs: BTreeMap<String, GlobMatches>,
    /// Real paths (every link resolved) of the libcuda files the plan names.
    pub real_paths: BTreeMap<PathBuf, PathBuf>,
    /// Host driver libraries, keyed by the library directories searched.
    pub host_libraries: BTreeMap<Vec<PathBuf>, HostLibraries>,
    /// Each compat glob (as configured) and the directories it matched.
    pub compat: BTreeMap<String, Vec<CompatSeen>>,
    /// Names of the compat libraries in each compat directory (host path).
    pub listings: BTreeMap<PathBuf, Vec<String>>,
    /// The symlinks directly inside each directory whose entries' links a rule follows
    /// (`follow_entry_symlinks`), keyed by the directory's host path, at most
    /// [`ENTRY_SYMLINKS_MAX`] each.
    pub entry_symlinks: BTreeMap<PathBuf, Vec<String>>,
}

/// The most entries of one directory that `follow_entry_symlinks` looks at: a bound on the
/// work a directory anyone filled can cause.
pub const ENTRY_SYMLINKS_MAX: usize = 4096;

impl Lookup for HostView {
    fn lstat(&self, outside: &Path) -> Node {
        self.nodes
            .get(outside)
            .cloned()
            .unwrap_or_else(|| Node::Error("not looked at by the scan".to_string()))
    }
}

impl HostView {
    /// The kind of host; `Discrete` unless the scan found a Tegra.
    pub fn platform(&self) -> Platform {
        self.platform.unwrap_or(Platform::Discrete)
    }

    /// Records `node` at `path` (for hand-made views in tests).
    pub fn with(mut self, path: &str, node: Node) -> HostView {
        self.nodes.insert(PathBuf::from(path), node);
        self
    }
}

/// The real filesystem, remembering every answer in the view (each path is looked at once).
struct Recorder<'v> {
    nodes: &'v RefCell<BTreeMap<PathBuf, Node>>,
}

impl Lookup for Recorder<'_> {
    fn lstat(&self, outside: &Path) -> Node {
        if let Some(n) = self.nodes.borrow().get(outside) {
            return n.clone();
        }
        let n = Node::of(outside);
        self.nodes
            .borrow_mut()
            .insert(outside.to_path_buf(), n.clone());
        n
    }
}

/// Where the directory `inside` (host path `outside`) really is, once its own links are
/// followed: `None` when it is not a directory.
pub fn entry_symlink_dir(
    inside: &Path,
    outside: &Path,
    space: Space<'_>,
    fs: &impl Lookup,
) -> Option<symlinks::Hop> {
    let chain = symlinks::follow(inside, outside, space, fs).ok()?;
    (chain.target == Node::Dir).then(|| chain.hops.last().cloned())?
}

/// Lists the symlinks directly inside the directory at `inside` (for `follow_entry_symlinks`)
/// and follows each, so that the plan can expose their targets.
fn entry_symlinks(
    inside: &Path,
    outside: &Path,
    space: Space<'_>,
    fs: &Recorder<'_>,
    view: &mut HostView,
) {
    let Some(dir) = entry_symlink_dir(inside, outside, space, fs) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(&dir.outside) else {
        return;
    };
    let mut names = Vec::new();
    for entry in entries.flatten().take(ENTRY_SYMLINKS_MAX) {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let link_outside = dir.outside.join(&name);
        if matches!(fs.lstat(&link_outside), Node::Symlink(_)) {
            let _ = symlinks::follow(&dir.inside.join(&name), &link_outside, space, fs);
            names.push(name);
        }
    }
    names.sort();
    view.entry_symlinks.insert(dir.outside, names);
}

/// Reads what `rules` under `config` need to know of the host. Never writes.
pub fn scan(config: &Config, rules: &[&Rule]) -> HostView {
    let mut view = HostView::default();
    let nodes = RefCell::new(BTreeMap::new());
    let fs = Recorder { nodes: &nodes };
    let rooted = Space::Rooted {
        root: &config.host_root,
        store_dir: &config.store_dir,
    };
    let under = |p: &str| host::under(&config.host_root, &config.store_dir, Path::new(p));
    let read = |p: &str| std::fs::read_to_string(under(p)).ok();
    // The host facts serve the driver choice and platform-specific devices only: a rule with
    // neither (device nodes and paths alone) does without the three reads.
    let facts_needed = rules
        .iter()
        .any(|r| r.driver.is_some() || r.devices.iter().any(|d| d.platform.is_some()));
    if facts_needed {
        view.kernel_driver = read("/proc/driver/nvidia/version")
            .as_deref()
            .and_then(versions::kernel_module_version);
        let tegra_release = read("/etc/nv_tegra_release");
        view.l4t = tegra_release.as_deref().and_then(versions::l4t_release);
        let tegra = tegra_release.is_some()
            || read("/sys/devices/soc0/family")
                .is_some_and(|f| f.trim().to_ascii_lowercase().starts_with("tegra"));
        view.platform = Some(if tegra {
            Platform::Tegra
        } else {
            Platform::Discrete
        });
    }
    let platform = view.platform();
    // Each device directory is listed once, however many globs look into it.
    let mut listed = BTreeMap::new();
    let chain = |inside: &Path, outside: &Path, space: Space<'_>| {
        let _ = symlinks::follow(inside, outside, space, &fs);
    };

    for rule in rules {
        for device in &rule.devices {
            if device.platform.is_some_and(|p| p != platform) {
                continue;
            }
            let matches = glob_under(&config.host_root, &device.glob, &mut listed, &fs);
            for m in matches.iter().flatten() {
                if let Ok(rel) = m.strip_prefix(&config.host_root) {
                    chain(&Path::new("/").join(rel), m, rooted);
                }
            }
            view.globs.insert(device.glob.clone(), matches);
        }
        for p in &rule.paths {
            let inside = symlinks::normalize(&p.path);
            chain(&inside, &rooted.outside(&inside), rooted);
            if p.follow_entry_symlinks {
                entry_symlinks(&inside, &rooted.outside(&inside), rooted, &fs, &mut view);
            }
        }
        for m in &rule.mounts {
            let inside = symlinks::normalize(&m.inside);
            chain(&inside, &m.outside, Space::Literal);
            if m.follow_entry_symlinks {
                entry_symlinks(&inside, &m.outside, Space::Literal, &fs, &mut view);
            }
        }
        let Some(driver) = &rule.driver else { continue };
        let link = symlinks::normalize(&driver.link);
        let link_lib = link.join("lib");
        chain(&link, &rooted.outside(&link), rooted);
        let libcuda = link.join("lib/libcuda.so.1");
        let libcuda_outside = rooted.outside(&libcuda);
        chain(&libcuda, &libcuda_outside, rooted);
        view.record_real(&libcuda_outside);
        let link_present = !matches!(fs.lstat(&rooted.outside(&link)), Node::Missing);
        if !link_present && driver.host_libraries {
            let mut warnings = Vec::new();
            let libraries = host::host_libraries(
                &config.host_root,
                &config.store_dir,
                &driver.library_dirs,
                &mut warnings,
            );
            for lib in &libraries {
                chain(&link_lib.join(&lib.name), &lib.outside, Space::Literal);
                if lib.stem == "libcuda" {
                    view.record_real(&lib.outside);
                }
            }
            view.host_libraries.insert(
                driver.library_dirs.clone(),
                HostLibraries {
                    libraries,
                    warnings,
                },
            );
        }
        for pattern in &driver.compat {
            let mut seen = Vec::new();
            for (inside, outside) in compat_dirs(config, pattern) {
                let found = compat::inspect_dir(&inside, &outside);
                if let Ok(Some(c)) = &found {
                    chain(&c.dir, &c.dir_outside, rooted);
                    for name in ["libcuda.so.1", c.libcuda.as_str()] {
                        let inside = c.dir.join(name);
                        let outside = rooted.outside(&inside);
                        chain(&inside, &outside, rooted);
                        view.record_real(&outside);
                    }
                    let names = compat_library_names(&c.dir_outside);
                    for name in &names {
                        chain(
                            &link_lib.join(name),
                            &c.dir_outside.join(name),
                            Space::Literal,
                        );
                    }
                    view.listings.insert(c.dir_outside.clone(), names);
                }
                seen.push(CompatSeen {
                    inside,
                    outside,
                    found,
                });
            }
            view.compat.insert(pattern.clone(), seen);
        }
    }
    view.nodes = nodes.into_inner();
    view
}

impl HostView {
    fn record_real(&mut self, outside: &Path) {
        if let Ok(real) = std::fs::canonicalize(outside) {
            self.real_paths.insert(outside.to_path_buf(), real);
        }
    }
}

/// A directory's entry names, read once per scan (`None`: it could not be listed).
type Listings = BTreeMap<PathBuf, Result<Vec<std::ffi::OsString>, String>>;

/// The host paths `glob` (absolute, as configured) matches under `root`, in the order
/// `glob::glob` gives them. The usual device glob (wildcards in the last component only) is
/// matched against one listing of its directory, shared by every glob there; others go to
/// `glob::glob`.
fn glob_under(root: &Path, glob: &str, listed: &mut Listings, fs: &impl Lookup) -> GlobMatches {
    let wild = |t: &str| t.contains(['*', '?', '[']);
    let (dir, last) = match glob.rsplit_once('/') {
        Some((dir, last)) if !wild(dir) && !last.is_empty() => (dir, last),
        _ => return glob_crate(root, glob),
    };
    let dir = if root == Path::new("/") {
        PathBuf::from(if dir.is_empty() { "/" } else { dir })
    } else {
        root.join(dir.trim_start_matches('/'))
    };
    if !wild(last) {
        // A literal: there when it (or what it links to) exists, as glob::glob has it. Its
        // `lstat` (recorded in `fs`, which the scan follows next) says so but for a link.
        let path = dir.join(last);
        let there = match fs.lstat(&path) {
            Node::Missing => false,
            Node::Symlink(_) | Node::Error(_) => path.metadata().is_ok(),
            Node::Dir | Node::CharDevice | Node::File | Node::Other => true,
        };
        return if there { vec![Ok(path)] } else { Vec::new() };
    }
    let Ok(pattern) = glob::Pattern::new(last) else {
        return glob_crate(root, glob);
    };
    let names = listed
        .entry(dir.clone())
        .or_insert_with(|| match std::fs::read_dir(&dir) {
            Ok(entries) => {
                let mut names: Vec<std::ffi::OsString> = entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name())
                    .collect();
                names.sort();
                Ok(names)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) if e.raw_os_error() == Some(20) => Ok(Vec::new()),
            Err(e) => Err(e.to_string()),
        });
    match names {
        Ok(names) => names
            .iter()
            .filter(|n| n.to_str().is_some_and(|n| pattern.matches(n)))
            .map(|n| Ok(dir.join(n)))
            .collect(),
        Err(e) => vec![Err((dir, e.clone()))],
    }
}

/// `glob::glob` of `glob` under `root`.
fn glob_crate(root: &Path, glob: &str) -> GlobMatches {
    let pattern = if root == Path::new("/") {
        glob.to_string()
    } else {
        let root = glob::Pattern::escape(&root.to_string_lossy());
        format!(
            "{}/{}",
            root.trim_end_matches('/'),
            glob.trim_start_matches('/')
        )
    };
    match glob::glob(&pattern) {
        Ok(m) => m
            .map(|e| e.map_err(|e| (e.path().to_path_buf(), e.error().to_string())))
            .collect(),
        Err(e) => vec![Err((PathBuf::from(glob), format!("invalid glob: {e}")))],
    }
}

/// The (inside, outside) directories a compat glob names: under the host root unless in the
/// store.
fn compat_dirs(config: &Config, pattern: &str) -> Vec<(PathBuf, PathBuf)> {
    let in_store = Path::new(pattern).starts_with(&config.store_dir);
    let root = &config.host_root;
    let full = if in_store || root == Path::new("/") {
        pattern.to_string()
    } else {
        format!(
            "{}/{}",
            glob::Pattern::escape(&root.to_string_lossy()).trim_end_matches('/'),
            pattern.trim_start_matches('/')
        )
    };
    let Ok(paths) = glob::glob(&full) else {
        return Vec::new();
    };
    paths
        .filter_map(Result::ok)
        .filter_map(|outside| {
            let inside = if in_store || root == Path::new("/") {
                outside.clone()
            } else {
                Path::new("/").join(outside.strip_prefix(root).ok()?)
            };
            Some((inside, outside))
        })
        .collect()
}

/// The compat libraries (`libcuda`, the JIT compiler, …) directly in `dir`, sorted.
fn compat_library_names(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| host::driver_library_stem(n).is_some_and(|s| COMPAT_LIBRARIES.contains(&s)))
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_glob_matches_like_glob_crate() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        for d in [
            "dev/nvidia0",
            "dev/nvidia12",
            "dev/nvidiactl",
            "dev/.nvidia9",
            "dev/dri/card0",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::os::unix::fs::symlink("nowhere", root.join("dev/nvidia7")).unwrap();
        let mut listed = Listings::new();
        for pattern in [
            "/dev/nvidia[0-9]*",
            "/dev/nvidia*",
            "/dev/*",
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/dri/card*",
            "/dev/absent/x*",
            "/dev/*/card*",
            "/dev/nvidiactl/x*",
        ] {
            assert_eq!(
                glob_under(root, pattern, &mut listed, &crate::symlinks::RealFs),
                glob_crate(root, pattern),
                "{pattern}"
            );
        }
    }
}
