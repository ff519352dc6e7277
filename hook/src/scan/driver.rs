//! The driver source: the NixOS driver link (and the libcuda behind it), the host's driver
//! libraries found through the loader cache and library directories when there is no link,
//! and the compat directories (their ELF notes and libraries). The planner is
//! [`crate::plan`]'s `driver` module.

use super::Recorder;
use crate::config::{Config, DriverConfig};
use crate::discover::compat::{self, CompatDriver, CompatError};
use crate::discover::host::{self, HostDataFile, HostLibrary};
use crate::symlinks::{self, Lookup, Node, Space};
use std::path::{Path, PathBuf};

/// A rule's driver configuration and what the scan found for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DriverView {
    /// The driver configuration.
    pub source: DriverConfig,
    /// Whether the driver link (inside path `source.link`) exists on the host.
    pub link_present: bool,
    /// The host's driver libraries, looked for when the link is absent and
    /// `host_libraries` is set.
    pub host_libraries: Option<HostLibraries>,
    /// The directories the compat globs matched, in configuration order.
    pub compat: Vec<CompatSeen>,
}

/// The host's libraries found through the loader cache and the library directories, with the
/// warnings (e.g. an unreadable cache) met on the way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HostLibraries {
    /// The driver libraries, by name.
    pub libraries: Vec<HostLibrary>,
    /// The driver's data files (ICD files, `nvoptix.bin`); none when the libraries come from a
    /// CDI spec, whose planner binds the spec's own.
    pub data_files: Vec<HostDataFile>,
    /// What could not be read.
    pub warnings: Vec<String>,
}

/// One directory a compat glob matched, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CompatSeen {
    /// Inside path of the directory.
    pub inside: PathBuf,
    /// The compat driver in it (`Ok(None)`: no compat libcuda there).
    pub found: Result<Option<CompatDriver>, CompatError>,
}

/// Scans `driver` under `config`: every path the planner follows is recorded in `fs`. Without
/// the link, the host's libraries are `from_spec` (those a CDI spec mounts) when given, else
/// found through the loader cache and the library directories.
pub(crate) fn scan(
    driver: &DriverConfig,
    config: &Config,
    from_spec: Option<Vec<HostLibrary>>,
    fs: &Recorder,
) -> DriverView {
    let rooted = config.space();
    let link = symlinks::normalize(&driver.link);
    fs.follow(&link, &rooted.outside(&link), rooted);
    let libcuda = link.join("lib/libcuda.so.1");
    let libcuda_outside = rooted.outside(&libcuda);
    fs.follow(&libcuda, &libcuda_outside, rooted);
    fs.record_real(&libcuda_outside);
    let link_present = !matches!(fs.lstat(&rooted.outside(&link)), Node::Missing);
    let wanted = from_spec.is_some() || driver.host_libraries;
    let link_lib = link.join("lib");
    // The host's driver libraries (`from_spec` when given, else found through the loader cache
    // and `library_dirs`) and data files, each followed in `fs` from where it is bound under
    // `link`.
    let host_libraries = (!link_present && wanted).then(|| {
        let mut warnings = Vec::new();
        let data_files = match from_spec {
            Some(_) => Vec::new(),
            None => host::host_data_files(&config.host_root, &config.store_dir),
        };
        for f in &data_files {
            fs.follow(&link.join("share").join(&f.rel), &f.outside, Space::Literal);
        }
        let libraries = from_spec.unwrap_or_else(|| {
            host::host_libraries(
                &config.host_root,
                &config.store_dir,
                &driver.library_dirs,
                &mut warnings,
            )
        });
        for lib in &libraries {
            fs.follow(&link_lib.join(&lib.name), &lib.outside, Space::Literal);
            if lib.stem == "libcuda" {
                fs.record_real(&lib.outside);
            }
        }
        HostLibraries {
            libraries,
            data_files,
            warnings,
        }
    });
    DriverView {
        source: driver.clone(),
        link_present,
        host_libraries,
        compat: scan_compat(driver, config, &link_lib, fs),
    }
}

/// Each directory the compat globs name, with the compat driver found there (its libcuda
/// followed in `fs`) and the libraries it would bind at `link_lib`.
fn scan_compat(
    driver: &DriverConfig,
    config: &Config,
    link_lib: &Path,
    fs: &Recorder,
) -> Vec<CompatSeen> {
    let rooted = config.space();
    let mut compat_seen = Vec::new();
    for pattern in &driver.compat {
        for (inside, outside) in compat_dirs(config, pattern) {
            let found = compat::inspect_dir(&inside, &outside);
            if let Ok(Some(c)) = &found {
                fs.follow(&c.dir, &c.dir_outside, rooted);
                for name in ["libcuda.so.1", c.libcuda.as_str()] {
                    let inside = c.dir.join(name);
                    let outside = rooted.outside(&inside);
                    fs.follow(&inside, &outside, rooted);
                    fs.record_real(&outside);
                }
                // The compat libraries it holds, sorted.
                for name in &c.libraries {
                    fs.follow(
                        &link_lib.join(name),
                        &c.dir_outside.join(name),
                        Space::Literal,
                    );
                }
            }
            compat_seen.push(CompatSeen { inside, found });
        }
    }
    compat_seen
}

/// The (inside, outside) directories a compat glob names: under the host root unless in the
/// store.
fn compat_dirs(config: &Config, pattern: &str) -> Vec<(PathBuf, PathBuf)> {
    let in_store = Path::new(pattern).starts_with(&config.store_dir);
    let root = if in_store {
        Path::new("/")
    } else {
        &config.host_root
    };
    let Ok(paths) = glob::glob(&super::devices::rooted_glob(root, pattern)) else {
        return Vec::new();
    };
    paths
        .filter_map(Result::ok)
        .filter_map(|outside| {
            let inside = if root == Path::new("/") {
                outside.clone()
            } else {
                Path::new("/").join(outside.strip_prefix(root).ok()?)
            };
            Some((inside, outside))
        })
        .collect()
}
