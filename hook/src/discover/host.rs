//! The host's driver libraries when they are not behind a NixOS driver link (found through
//! `/etc/ld.so.cache`, then the usual directories), read under the configured host root, and
//! the lists of library names that count as the driver.

use super::ldcache;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Stems of the compute driver's libraries (the NVIDIA container toolkit's list, DESIGN.md §5).
pub const DRIVER_LIBRARIES: &[&str] = &[
    "libcuda",
    "libnvidia-ptxjitcompiler",
    "libnvidia-nvvm",
    "libcudadebugger",
    "libnvidia-ml",
    "libnvidia-gpucomp",
    "libnvidia-pkcs11",
    "libnvidia-pkcs11-openssl3",
    "libnvidia-tileiras",
    "libnvidia-allocator",
    "libnvidia-opencl",
    "libnvidia-cfg",
    "libnvidia-nscq",
];

/// Stems of Jetson's host-only libraries, which a compat driver needs too.
pub const JETSON_LIBRARIES: &[&str] = &[
    "libnvos",
    "libnvsocsys",
    "libnvsciipc",
    "libnvcucompat",
    "libnvscibuf",
    "libnvscisync",
    "libnvscicommon",
    "libnvtegrahv",
    "libnvidia-rmapi-tegra",
];

/// Stems a compat driver ships, replacing the host's.
pub const COMPAT_LIBRARIES: &[&str] = &[
    "libcuda",
    "libnvidia-ptxjitcompiler",
    "libnvidia-nvvm",
    "libcudadebugger",
];

/// Directories searched after the loader cache.
pub const USUAL_LIBRARY_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu/nvidia",
    "/usr/lib/aarch64-linux-gnu/tegra",
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
];

/// The stem of `name` when it is a driver library (`libcuda.so.1` → `libcuda`); `None` for
/// everything else, libc and libstdc++ included.
pub fn driver_library_stem(name: &str) -> Option<&'static str> {
    let (stem, rest) = name.split_once(".so")?;
    if !(rest.is_empty() || rest.starts_with('.')) {
        return None;
    }
    if let Some(s) = DRIVER_LIBRARIES
        .iter()
        .chain(JETSON_LIBRARIES)
        .find(|s| **s == stem)
    {
        return Some(s);
    }
    stem.starts_with("libnvrm_").then_some("libnvrm_")
}

/// A host driver library to expose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLibrary {
    /// Its file name (the soname for cache entries), e.g. `libcuda.so.1`.
    pub name: String,
    /// Its stem, e.g. `libcuda`.
    pub stem: &'static str,
    /// Where it is on the host (under the host root).
    pub outside: PathBuf,
    /// Where it was found (`ld.so.cache` or a directory).
    pub found_in: String,
}

/// The host's driver libraries: loader-cache entries for this architecture first (the first
/// entry of a name wins, as for the loader), then files in `dirs` under `root`.
pub fn host_libraries(
    root: &Path,
    store_dir: &Path,
    dirs: &[PathBuf],
    warnings: &mut Vec<String>,
) -> Vec<HostLibrary> {
    let mut found: BTreeMap<String, HostLibrary> = BTreeMap::new();
    let cache_path = under(root, store_dir, Path::new("/etc/ld.so.cache"));
    match std::fs::read(&cache_path) {
        Ok(bytes) => match ldcache::parse(&bytes) {
            Ok(entries) => {
                let native = ldcache::native_flags();
                for e in entries {
                    if native.is_some_and(|f| e.flags != f) {
                        continue;
                    }
                    let Ok(name) = String::from_utf8(e.soname) else {
                        continue;
                    };
                    let Some(stem) = driver_library_stem(&name) else {
                        continue;
                    };
                    found.entry(name.clone()).or_insert(HostLibrary {
                        name,
                        stem,
                        outside: under(root, store_dir, &e.path),
                        found_in: "/etc/ld.so.cache".to_string(),
                    });
                }
            }
            Err(e) => warnings.push(format!("{}: {e}", cache_path.display())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => warnings.push(format!("cannot read {}: {e}", cache_path.display())),
    }
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(under(root, store_dir, dir)) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let Some(stem) = driver_library_stem(&name) else {
                continue;
            };
            found.entry(name.clone()).or_insert(HostLibrary {
                name,
                stem,
                outside: entry.path(),
                found_in: dir.display().to_string(),
            });
        }
    }
    found.into_values().collect()
}

/// `path` under `root` (store paths and a root of `/` leave it as it is).
pub fn under(root: &Path, store_dir: &Path, path: &Path) -> PathBuf {
    if root == Path::new("/") || path.starts_with(store_dir) {
        path.to_path_buf()
    } else {
        root.join(path.strip_prefix("/").unwrap_or(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_driver_libraries_count() {
        assert_eq!(driver_library_stem("libcuda.so.1"), Some("libcuda"));
        assert_eq!(driver_library_stem("libcuda.so.550.54.14"), Some("libcuda"));
        assert_eq!(driver_library_stem("libcuda.so"), Some("libcuda"));
        assert_eq!(driver_library_stem("libnvrm_gpu.so"), Some("libnvrm_"));
        assert_eq!(
            driver_library_stem("libnvidia-ml.so.1"),
            Some("libnvidia-ml")
        );
        for not in [
            "libc.so.6",
            "libstdc++.so.6",
            "libm.so.6",
            "libcudart.so.12",
            "libcuda.sox",
            "libcublas.so.12",
            "libnvidia-glcore.so.550",
        ] {
            assert_eq!(driver_library_stem(not), None, "{not}");
        }
    }
}
