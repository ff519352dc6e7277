//! Who built a file's GPU code, for the fix a verdict offers: `cudaCapabilities` changes only
//! what Nixpkgs compiles itself; NVIDIA's prebuilt binaries (its redistributables, as
//! Nixpkgs' `cudaPackages` repackage them, or as its PyPI wheels ship them) carry the GPU code
//! NVIDIA built, and only a newer release of the package (or another GPU) changes it.
//!
//! "Prebuilt" is recognised by where the file is, never by its bytes (NVIDIA's libraries and
//! Nixpkgs' builds use the same nvcc):
//! - a store path whose name (after the hash) starts with the name of one of NVIDIA's
//!   redistributable packages as Nixpkgs' `cudaPackages` names them (`cuda_cudart-12.8.90`,
//!   `libcublas-12.8.4.1-lib`, `cudnn-9.8.0.87`, ...: [`REDIST_PACKAGES`]);
//! - a file under a Python wheel's `site-packages/nvidia/` (NVIDIA's `nvidia-*` wheels);
//! - a file whose DT_SONAME is one of NVIDIA's closed-source libraries ([`NVIDIA_SONAMES`]:
//!   `libcufft.so.11`, `libcurand.so.10`...), wherever it lies: no one else builds them (a
//!   library Nixpkgs builds from source, NCCL, is not among them).
//!
//! Any other store path is a Nixpkgs build; a file outside the store is built some other way.

use std::path::{Component, Path};

use cuda_sandbox_cuda_facts::Capability;

/// The names Nixpkgs' `cudaPackages` gives NVIDIA's redistributables (its `redist` manifests'
/// package names: `cuda_*` for the toolkit's parts, `lib*` for the libraries), the store path
/// name's start before `-VERSION`.
pub(crate) const REDIST_PACKAGES: &[&str] = &[
    "cuda_",
    "libcublas",
    "libcufft",
    "libcufile",
    "libcurand",
    "libcusolver",
    "libcusparse",
    "libcusparse_lt",
    "libnpp",
    "libnvjitlink",
    "libnvjpeg",
    "libnvfatbin",
    "libcudla",
    "libcutensor",
    "cudnn",
    "cutensor",
    "cusparselt",
    "tensorrt",
    "nvidia-driver",
];

/// The DT_SONAME prefixes of NVIDIA's closed-source libraries, which only NVIDIA builds.
pub(crate) const NVIDIA_SONAMES: &[&str] = &[
    "libcublas",
    "libcudart",
    "libcudnn",
    "libcufft",
    "libcufile",
    "libcupti",
    "libcurand",
    "libcusolver",
    "libcusparse",
    "libcutensor",
    "libnpp",
    "libnvjitlink",
    "libnvjpeg",
    "libnvrtc",
    "libnvptxcompiler",
    "libnvinfer",
];

/// Who built a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Provenance {
    /// Nixpkgs compiled it (a store path that is not a redistributable).
    Nixpkgs,
    /// NVIDIA built it: a redistributable or a wheel.
    Prebuilt,
    /// Outside the store, not a wheel, not NVIDIA's: built by Nixpkgs or otherwise (both fixes
    /// are named).
    Other,
}

impl Provenance {
    /// Where `file` (an absolute path, of DT_SONAME `soname`) comes from, by the rules of the
    /// module doc.
    pub(crate) fn of(file: &Path, soname: Option<&str>, store_dir: &Path) -> Provenance {
        // `libcufft.so.11`, `libcublasLt.so.12`: one of NVIDIA's, by the name before `.so`.
        let stem = soname
            .and_then(|s| s.split(".so").next())
            .map(str::to_ascii_lowercase);
        if stem.is_some_and(|stem| NVIDIA_SONAMES.iter().any(|p| stem.starts_with(p))) {
            return Provenance::Prebuilt;
        }
        let names: Vec<&str> = file
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => n.to_str(),
                _ => None,
            })
            .collect();
        if names
            .windows(2)
            .any(|w| w[0] == "site-packages" && w[1] == "nvidia")
        {
            return Provenance::Prebuilt;
        }
        let Some(entry) = file
            .strip_prefix(store_dir)
            .ok()
            .and_then(|rest| rest.components().next())
            .and_then(|c| c.as_os_str().to_str())
        else {
            return Provenance::Other;
        };
        let name = entry.split_once('-').map_or("", |(_, name)| name);
        let redist = REDIST_PACKAGES.iter().any(|p| {
            name.strip_prefix(p)
                .is_some_and(|after| p.ends_with('_') || after.is_empty() || after.starts_with('-'))
        });
        if redist {
            Provenance::Prebuilt
        } else {
            Provenance::Nixpkgs
        }
    }

    /// What to change when the file has no image a `cc` GPU can load, after "it needs ...;".
    pub(crate) fn build_for(self, cc: Capability) -> String {
        match self {
            Provenance::Nixpkgs => format!(
                "build for it (Nixpkgs: cudaCapabilities = [ \"{cc}\" ], and cudaForwardCompat \
                 = true for PTX of the newest capability)"
            ),
            Provenance::Prebuilt => format!(
                "NVIDIA built this file (a prebuilt redistributable): use a release of the \
                 package that supports compute capability {cc}, or another GPU"
            ),
            Provenance::Other => format!(
                "build for it (Nixpkgs: cudaCapabilities = [ \"{cc}\" ]; nvcc: -gencode \
                 arch=compute_{0},code=sm_{0})",
                cc.sm()
            ),
        }
    }

    /// What to change when the file's PTX is newer than the driver's JIT, before "or load it
    /// with a newer driver".
    pub(crate) fn sass_instead(self, cc: Capability) -> String {
        match self {
            Provenance::Nixpkgs => {
                format!("build SASS for it (Nixpkgs: cudaCapabilities = [ \"{cc}\" ])")
            }
            Provenance::Prebuilt => {
                "use a release of the package built with SASS for this GPU".to_string()
            }
            Provenance::Other => format!(
                "build SASS for it (Nixpkgs: cudaCapabilities = [ \"{cc}\" ]; nvcc: -arch=sm_{})",
                cc.sm()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(path: &str) -> Provenance {
        Provenance::of(Path::new(path), None, Path::new("/nix/store"))
    }

    #[test]
    fn nvidias_own_libraries_are_prebuilt_wherever_they_lie() {
        let p = |soname| {
            Provenance::of(
                Path::new("/tmp/x/lib.so"),
                Some(soname),
                Path::new("/nix/store"),
            )
        };
        assert_eq!(p("libcufft.so.11"), Provenance::Prebuilt);
        assert_eq!(p("libcublasLt.so.12"), Provenance::Prebuilt);
        assert_eq!(p("libnccl.so.2"), Provenance::Other);
        assert_eq!(p("libkernels.so"), Provenance::Other);
    }

    #[test]
    fn redistributables_and_wheels_are_prebuilt_nixpkgs_builds_are_not() {
        let h = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz";
        assert_eq!(
            of(&format!("{h}-libcublas-12.8.4.1-lib/lib/libcublasLt.so.12")),
            Provenance::Prebuilt
        );
        assert_eq!(
            of(&format!("{h}-cuda_cudart-12.8.90-lib/lib/libcudart.so.12")),
            Provenance::Prebuilt
        );
        assert_eq!(
            of(&format!("{h}-cudnn-9.8.0.87-lib/lib/libcudnn.so.9")),
            Provenance::Prebuilt
        );
        assert_eq!(
            of("/venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12"),
            Provenance::Prebuilt
        );
        assert_eq!(
            of(&format!(
                "{h}-python3.12-torch-2.6.0-lib/lib/libtorch_cuda.so"
            )),
            Provenance::Nixpkgs
        );
        // A Nixpkgs package whose name merely starts like a redistributable's.
        assert_eq!(
            of(&format!("{h}-libcublasx-1.0/lib/libx.so")),
            Provenance::Nixpkgs
        );
        assert_eq!(of("/home/me/build/libkernels.so"), Provenance::Other);
    }

    #[test]
    fn the_fix_fits_who_built_it() {
        let cc = Capability::parse("12.0").unwrap();
        assert!(Provenance::Nixpkgs
            .build_for(cc)
            .contains("cudaCapabilities = [ \"12.0\" ]"));
        let prebuilt = Provenance::Prebuilt.build_for(cc);
        assert!(!prebuilt.contains("cudaCapabilities"), "{prebuilt}");
        assert!(prebuilt.contains("release of the package"), "{prebuilt}");
        assert!(Provenance::Other.build_for(cc).contains("code=sm_120"));
    }
}
