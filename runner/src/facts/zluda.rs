//! ZLUDA (vosen/ZLUDA): the CUDA driver API implemented on AMD's ROCm/HIP, installed as
//! `libnvcuda.so` with the symlinks `libcuda.so` and `libcuda.so.1` (its `zluda` crate's
//! `[lib] name = "nvcuda"` and `linux_symlinks`). Its exports cover the whole driver API, the
//! functions it does not implement included (they return 801, NOT_SUPPORTED), so exports do not
//! tell it from NVIDIA's driver; two marks of the file do:
//!
//! - `libamdhip64` in `DT_NEEDED`: it links AMD's HIP runtime (`ext/hip_runtime-sys/build.rs`);
//! - the bytes `" [ZLUDA]\0"`: the suffix its `cuDeviceGetName` appends to the GPU's name
//!   (`PROJECT_SUFFIX`, in `zluda/src/impl/device.rs` of v4, `zluda_common/src/constants.rs` of
//!   v6).
//!
//! The file is ZLUDA when it has both; its name is reported, not required (a packager may
//! install it under another). Checked in ZLUDA's source at the commit Nixpkgs builds
//! (`zluda` 4-unstable-2025-01-28 = df5a96d9) and at v6, its newest release.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The suffix ZLUDA's `cuDeviceGetName` appends to the GPU's name.
pub(crate) const NAME_SUFFIX: &str = " [ZLUDA]";

/// The file ZLUDA builds its driver as.
const ZLUDA_FILE: &str = "libnvcuda.so";

/// What marks a loaded libcuda as ZLUDA (the report's `zluda` facts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Zluda {
    /// The real file's name (`libnvcuda.so` as ZLUDA builds it).
    pub file_name: String,
    /// Whether that is ZLUDA's own file name.
    pub zluda_file_name: bool,
    /// The HIP runtime in its `DT_NEEDED` (e.g. `libamdhip64.so.6`).
    pub hip_runtime: String,
}

impl Zluda {
    /// ZLUDA's marks in the file at `path` (a loaded libcuda's real file), or `None` when it
    /// lacks either mark or cannot be read as ELF.
    pub(crate) fn recognise(path: &Path) -> Option<Zluda> {
        let file = std::fs::File::open(path).ok()?;
        let info = cuda_sandbox_elfkit::dynamic_info_of_file(&file).ok()??;
        let hip_runtime = info
            .needed
            .into_iter()
            .find(|name| name.starts_with("libamdhip64"))?;
        let map = cuda_sandbox_elfkit::map::Mapped::of(&file).ok()?;
        let suffix = format!("{NAME_SUFFIX}\0");
        memchr::memmem::find(map.bytes(), suffix.as_bytes())?;
        let file_name = path.file_name()?.to_string_lossy().into_owned();
        Some(Zluda {
            zluda_file_name: file_name == ZLUDA_FILE,
            file_name,
            hip_runtime,
        })
    }

    /// "ZLUDA on AMD (libnvcuda.so, on libamdhip64.so.6)", for messages.
    pub(crate) fn describe(&self) -> String {
        format!("ZLUDA on AMD ({}, on {})", self.file_name, self.hip_runtime)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_without_the_hip_runtime_is_not_zluda_even_with_the_name_suffix() {
        // An ELF file that needs no libamdhip64.
        let me = std::env::current_exe().unwrap();
        assert_eq!(Zluda::recognise(&me), None);
    }
}
