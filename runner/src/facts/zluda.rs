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

    use std::process::Command;

    /// A shared library `name` built with `cc`, holding `text` as a C string, with
    /// `libamdhip64.so.6` added to its `DT_NEEDED` by `patchelf` when `hip`.
    fn library(dir: &Path, name: &str, text: &str, hip: bool) -> std::path::PathBuf {
        let source = dir.join(format!("{name}.c"));
        std::fs::write(&source, format!("const char marker[] = \"{text}\";\n")).unwrap();
        let out = dir.join(name);
        let cc = Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&out)
            .arg(&source)
            .status()
            .expect("cc");
        assert!(cc.success());
        if hip {
            let patch = Command::new("patchelf")
                .args(["--add-needed", "libamdhip64.so.6"])
                .arg(&out)
                .status()
                .expect("patchelf");
            assert!(patch.success());
        }
        out
    }

    #[test]
    fn zluda_is_told_by_the_hip_runtime_and_the_name_suffix_together() {
        let dir = tempfile::tempdir().unwrap();
        let zluda = library(dir.path(), "libnvcuda.so", " [ZLUDA]", true);
        assert_eq!(
            Zluda::recognise(&zluda),
            Some(Zluda {
                file_name: "libnvcuda.so".into(),
                zluda_file_name: true,
                hip_runtime: "libamdhip64.so.6".into(),
            })
        );
        let renamed = library(dir.path(), "libcuda.so.1", " [ZLUDA]", true);
        assert!(Zluda::recognise(&renamed).is_some_and(|z| !z.zluda_file_name));
        let no_hip = library(dir.path(), "nohip.so", " [ZLUDA]", false);
        assert_eq!(Zluda::recognise(&no_hip), None);
        let no_suffix = library(dir.path(), "nosuffix.so", " [NVIDIA]", true);
        assert_eq!(Zluda::recognise(&no_suffix), None);
        assert_eq!(Zluda::recognise(&dir.path().join("missing.so")), None);
    }
}
