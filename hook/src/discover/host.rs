//! The host's driver libraries when they are not behind a NixOS driver link (found through
//! `/etc/ld.so.cache`, then the usual directories), read under the configured host root, and
//! the lists of library names that count as the driver.

use cuda_sandbox_elfkit::ldso::cache::{native_flags, Cache};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a driver library or file is for: the NVIDIA container toolkit's driver capabilities
/// (`NVIDIA_DRIVER_CAPABILITIES`, whose `graphics` the `opengl` feature asks for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Capability {
    /// CUDA and OpenCL.
    Compute,
    /// NVML and the configuration libraries (`nvidia-smi`'s).
    Utility,
    /// Video decoding and encoding (NVDEC, NVENC, optical flow).
    Video,
    /// OpenGL, EGL, GLX, Vulkan and OptiX.
    Graphics,
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Capability::Compute => "compute",
            Capability::Utility => "utility",
            Capability::Video => "video",
            Capability::Graphics => "graphics",
        })
    }
}

/// Stems of the driver's libraries by capability: the lists of libnvidia-container
/// (`src/nvc_info.c`: `utility_libs`, `compute_libs`, `video_libs`, `graphics_libs`,
/// `graphics_libs_glvnd`), which the NVIDIA container toolkit mounts for each capability.
/// Left out: the GLVND dispatchers (`libGL`, `libEGL`, …, which Nixpkgs brings itself), and
/// `libvdpau_nvidia`, which lives in a `vdpau/` directory of its own.
pub(crate) const DRIVER_LIBRARIES: &[(Capability, &[&str])] = &[
    (
        Capability::Compute,
        &[
            "libcuda",
            "libcudadebugger",
            "libnvidia-opencl",
            "libnvidia-gpucomp",
            "libnvidia-ptxjitcompiler",
            "libnvidia-fatbinaryloader",
            "libnvidia-allocator",
            "libnvidia-compiler",
            "libnvidia-pkcs11",
            "libnvidia-pkcs11-openssl3",
            "libnvidia-nvvm",
            "libnvidia-tileiras",
        ],
    ),
    (
        Capability::Utility,
        &["libnvidia-ml", "libnvidia-cfg", "libnvidia-nscq"],
    ),
    (
        Capability::Video,
        &["libnvidia-encode", "libnvidia-opticalflow", "libnvcuvid"],
    ),
    (
        Capability::Graphics,
        &[
            "libnvidia-eglcore",
            "libnvidia-glcore",
            "libnvidia-tls",
            "libnvidia-glsi",
            "libnvidia-fbc",
            "libnvidia-ifr",
            "libnvidia-rtcore",
            "libnvoptix",
            "libGLX_nvidia",
            "libEGL_nvidia",
            "libGLESv2_nvidia",
            "libGLESv1_CM_nvidia",
            "libnvidia-glvkspirv",
            "libnvidia-cbl",
        ],
    ),
];

/// The driver's data files, all of the graphics capability, relative to a configuration
/// directory (`/etc`, `/usr/share`): the NVIDIA container toolkit's graphics mounts
/// (`internal/discover/graphics.go`: the EGL vendor and external-platform files,
/// `nvoptix.bin`, the Vulkan ICD and layer files). They are bound under the driver link's
/// `share`, where Nixpkgs' loaders look.
pub(crate) const DRIVER_DATA_FILES: &[&str] = &[
    "glvnd/egl_vendor.d/10_nvidia.json",
    "egl/egl_external_platform.d/15_nvidia_gbm.json",
    "egl/egl_external_platform.d/10_nvidia_wayland.json",
    "nvidia/nvoptix.bin",
    "vulkan/icd.d/nvidia_icd.json",
    "vulkan/icd.d/nvidia_layers.json",
    "vulkan/implicit_layer.d/nvidia_layers.json",
];

/// The configuration directories data files are looked for in, first found wins (the
/// toolkit's order).
pub(crate) const DATA_FILE_DIRS: &[&str] = &["/etc", "/usr/local/share", "/usr/share"];

/// Stems of Jetson's host-only libraries, which a compat driver needs too.
pub(crate) const JETSON_LIBRARIES: &[&str] = &[
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
pub(crate) const COMPAT_LIBRARIES: &[&str] = &[
    "libcuda",
    "libnvidia-ptxjitcompiler",
    "libnvidia-nvvm",
    "libcudadebugger",
];

/// Directories searched after the loader cache.
pub(crate) const USUAL_LIBRARY_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu/nvidia",
    "/usr/lib/aarch64-linux-gnu/tegra",
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
];

/// Whether a file name is a shared library's (`libX.so`, `libX.so.1`, `libX.so.570.86`).
pub(crate) fn is_library_name(name: &str) -> bool {
    name.starts_with("lib")
        && name
            .split_once(".so")
            .is_some_and(|(_, rest)| rest.is_empty() || rest.starts_with('.'))
}

/// The stem of `name` when it is a driver library (`libcuda.so.1` → `libcuda`); `None` for
/// everything else, libc and libstdc++ included.
pub(crate) fn driver_library_stem(name: &str) -> Option<&'static str> {
    let (stem, _) = name.split_once(".so").filter(|_| is_library_name(name))?;
    DRIVER_LIBRARIES
        .iter()
        .flat_map(|(_, stems)| stems.iter())
        .chain(JETSON_LIBRARIES)
        .find(|s| **s == stem)
        .copied()
        .or_else(|| stem.starts_with("libnvrm_").then_some("libnvrm_"))
}

/// The capability a driver library's stem serves (Jetson's host libraries: compute).
pub(crate) fn capability_of(stem: &str) -> Capability {
    DRIVER_LIBRARIES
        .iter()
        .find(|(_, stems)| stems.contains(&stem))
        .map_or(Capability::Compute, |(c, _)| *c)
}

/// A host driver library to expose (what it is for: [`capability_of`] its stem).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostLibrary {
    /// Its file name (the soname for cache entries), e.g. `libcuda.so.1`.
    pub name: String,
    /// Its stem, e.g. `libcuda`.
    pub stem: &'static str,
    /// Where it is on the host (under the host root).
    pub outside: PathBuf,
    /// Where it was found (`ld.so.cache` or a directory).
    pub found_in: String,
}

/// A driver data file of the host's (an ICD file, `nvoptix.bin`), for graphics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostDataFile {
    /// Its place relative to its configuration directory, and under the driver link's `share`.
    pub rel: PathBuf,
    /// Where it is on the host (under the host root).
    pub outside: PathBuf,
    /// The configuration directory it was found in.
    pub found_in: String,
}

/// The host's driver data files ([`DRIVER_DATA_FILES`]), each from the first of
/// [`DATA_FILE_DIRS`] that has it under `root` (looked at with `lstat`, nothing opened).
pub(crate) fn host_data_files(root: &Path, store_dir: &Path) -> Vec<HostDataFile> {
    DRIVER_DATA_FILES
        .iter()
        .filter_map(|rel| {
            DATA_FILE_DIRS.iter().find_map(|dir| {
                let outside = under(root, store_dir, &Path::new(dir).join(rel));
                outside.symlink_metadata().ok().map(|_| HostDataFile {
                    rel: PathBuf::from(rel),
                    outside,
                    found_in: (*dir).to_string(),
                })
            })
        })
        .collect()
}

/// The host's driver libraries: loader-cache entries for this architecture first (the first
/// entry of a name wins, as for the loader), then files in `dirs` under `root`.
pub(crate) fn host_libraries(
    root: &Path,
    store_dir: &Path,
    dirs: &[PathBuf],
    warnings: &mut Vec<String>,
) -> Vec<HostLibrary> {
    let mut found: BTreeMap<String, HostLibrary> = BTreeMap::new();
    // A driver library named `name` at `outside`, unless an earlier entry has its name.
    let mut add = |name: Option<String>, outside: PathBuf, found_in: String| {
        let Some((name, stem)) = name.and_then(|n| driver_library_stem(&n).map(|s| (n, s))) else {
            return;
        };
        found.entry(name.clone()).or_insert(HostLibrary {
            name,
            stem,
            outside,
            found_in,
        });
    };
    let cache_path = under(root, store_dir, Path::new("/etc/ld.so.cache"));
    match std::fs::read(&cache_path) {
        Ok(bytes) => match Cache::parse(&bytes) {
            Ok(cache) => {
                let native = native_flags();
                for e in cache.entries {
                    if native.is_some_and(|f| e.flags != f) || e.glibc_hwcaps.is_some() {
                        continue;
                    }
                    add(
                        String::from_utf8(e.soname).ok(),
                        under(root, store_dir, &e.path),
                        "/etc/ld.so.cache".into(),
                    );
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
            let name = entry.file_name().into_string().ok();
            add(name, entry.path(), dir.display().to_string());
        }
    }
    found.into_values().collect()
}

/// `path` under `root` (store paths and a root of `/` leave it as it is).
pub(crate) fn under(root: &Path, store_dir: &Path, path: &Path) -> PathBuf {
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
            "libGL.so.1",
            "libEGL.so.1",
        ] {
            assert_eq!(driver_library_stem(not), None, "{not}");
        }
    }

    #[test]
    fn graphics_and_video_libraries_count_with_their_capability() {
        for (name, capability) in [
            ("libnvidia-glcore.so.550.54.14", Capability::Graphics),
            ("libGLX_nvidia.so.0", Capability::Graphics),
            ("libnvoptix.so.1", Capability::Graphics),
            ("libnvcuvid.so.1", Capability::Video),
            ("libnvidia-encode.so.1", Capability::Video),
            ("libnvidia-ml.so.1", Capability::Utility),
            ("libcuda.so.1", Capability::Compute),
        ] {
            let stem = driver_library_stem(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(capability_of(stem), capability, "{name}");
        }
    }
}
