//! Driver and CUDA version facts: the kernel module's version, Tegra's L4T release, the
//! user-space driver version in `libcuda.so.<version>`, and the branch → CUDA table of
//! DESIGN.md §6.

use serde::{Serialize, Serializer};
use std::fmt;

/// A CUDA version as the driver API encodes it: `1000 * major + 10 * minor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CudaVersion(pub u32);

impl CudaVersion {
    /// Parses `"12.2"` (or `"12"`).
    pub fn parse(text: &str) -> Option<CudaVersion> {
        let mut parts = text.trim().split('.');
        let major: u32 = parts.next()?.parse().ok()?;
        let minor: u32 = parts.next().map_or(Some(0), |m| m.parse().ok())?;
        (major < 1000 && minor < 100).then_some(CudaVersion(major * 1000 + minor * 10))
    }
}

impl fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0 / 1000, (self.0 % 1000) / 10)
    }
}

impl Serialize for CudaVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

/// The newest CUDA version a driver branch supports (DESIGN.md §6), e.g. 535 → 12.2.
pub fn cuda_for_branch(branch: u32) -> Option<CudaVersion> {
    const TABLE: &[(u32, u32)] = &[
        (470, 11040),
        (495, 11050),
        (510, 11060),
        (515, 11070),
        (520, 11080),
        (525, 12000),
        (530, 12010),
        (535, 12020),
        (545, 12030),
        (550, 12040),
        (555, 12050),
        (560, 12060),
        (565, 12070),
        (570, 12080),
        (575, 12090),
        (580, 13000),
        (590, 13010),
    ];
    // A branch between two listed ones supports what the lower one does.
    TABLE
        .iter()
        .rev()
        .find(|(b, _)| *b <= branch)
        .map(|(_, v)| CudaVersion(*v))
}

/// The major number of a driver version string: `"550.54.14"` → 550.
pub fn driver_branch(version: &str) -> Option<u32> {
    version.split('.').next()?.parse().ok()
}

/// The kernel module version from `/proc/driver/nvidia/version`, e.g.
/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 …` → `550.54.14`.
pub fn kernel_module_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    let after = line.split("Kernel Module").nth(1)?;
    // "… Kernel Module  550.54.14  …" or "… Open Kernel Module for x86_64  570.86.15  …"
    after
        .split_whitespace()
        .find(|t| {
            t.contains('.')
                && t.starts_with(|c: char| c.is_ascii_digit())
                && t.chars().all(|c| c.is_ascii_digit() || c == '.')
        })
        .map(str::to_string)
}

/// The L4T release from `/etc/nv_tegra_release`, e.g. `# R35 (release), REVISION: 4.1, …` →
/// `(35, "35.4.1")`.
pub fn l4t_release(text: &str) -> Option<(u32, String)> {
    let line = text.lines().find(|l| l.trim_start().starts_with("# R"))?;
    let major: u32 = line.trim_start()[3..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    let revision = line
        .split("REVISION:")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .map(str::trim)
        .unwrap_or("0");
    Some((major, format!("{major}.{revision}")))
}

/// The CUDA version of a Jetson's own (non-compat) driver by L4T major release.
pub fn cuda_for_l4t(major: u32) -> Option<CudaVersion> {
    match major {
        32 => Some(CudaVersion(10020)),
        34 | 35 => Some(CudaVersion(11040)),
        36 => Some(CudaVersion(12020)),
        _ => None,
    }
}

/// The user-space driver version in a library file name: `libcuda.so.550.54.14` →
/// `550.54.14`. Tegra's `libcuda.so.1.1` carries none (returns `None`).
pub fn version_in_file_name(name: &str, stem: &str) -> Option<String> {
    let v = name.strip_prefix(stem)?.strip_prefix(".so.")?;
    let branch = driver_branch(v)?;
    (branch >= 100 && v.chars().all(|c| c.is_ascii_digit() || c == '.')).then(|| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_versions() {
        assert_eq!(CudaVersion::parse("12.2"), Some(CudaVersion(12020)));
        assert_eq!(CudaVersion::parse("13"), Some(CudaVersion(13000)));
        assert_eq!(CudaVersion::parse("x"), None);
        assert_eq!(CudaVersion(11040).to_string(), "11.4");
        assert_eq!(cuda_for_branch(470), Some(CudaVersion(11040)));
        assert_eq!(cuda_for_branch(535), Some(CudaVersion(12020)));
        assert_eq!(cuda_for_branch(536), Some(CudaVersion(12020)));
        assert_eq!(cuda_for_branch(590), Some(CudaVersion(13010)));
        assert_eq!(cuda_for_branch(390), None);
    }

    #[test]
    fn kernel_module_lines() {
        let t = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\nGCC version:  gcc version 12.2.0\n";
        assert_eq!(kernel_module_version(t).as_deref(), Some("550.54.14"));
        let open =
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\n";
        assert_eq!(kernel_module_version(open).as_deref(), Some("570.86.15"));
        assert_eq!(kernel_module_version("garbage"), None);
    }

    #[test]
    fn tegra_release() {
        let t = "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023\n";
        assert_eq!(l4t_release(t), Some((35, "35.4.1".to_string())));
        assert_eq!(cuda_for_l4t(35), Some(CudaVersion(11040)));
    }

    #[test]
    fn file_name_versions() {
        assert_eq!(
            version_in_file_name("libcuda.so.550.54.14", "libcuda").as_deref(),
            Some("550.54.14")
        );
        assert_eq!(version_in_file_name("libcuda.so.1.1", "libcuda"), None);
        assert_eq!(version_in_file_name("libcuda.so.1", "libcuda"), None);
        assert_eq!(version_in_file_name("libcudart.so.12", "libcuda"), None);
    }
}
