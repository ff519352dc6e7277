//! CUDA version numbers and the driver branch → CUDA lookups, shared by the hook (which
//! chooses a driver by them) and the runner (which checks the loaded one); the branch table
//! itself is `cuda_sandbox_cuda_facts::releases` (docs/architecture.md, driver facts).

use cuda_sandbox_cuda_facts::releases;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A CUDA version as the driver API encodes it: `1000 * major + 10 * minor` (`12020` is 12.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CudaVersion(pub i32);

impl CudaVersion {
    /// Parses `12.2`, `13` (a major version) or the encoded `12020`.
    pub fn parse(text: &str) -> Result<CudaVersion, String> {
        let bad = || format!("bad CUDA version {text:?}: write 12.2 or 12020");
        let text = text.trim();
        let value = match text.split_once('.') {
            Some((major, minor)) => {
                let major: i32 = major.parse().map_err(|_| bad())?;
                let minor: i32 = minor.parse().map_err(|_| bad())?;
                if !(0..100).contains(&minor) || !(0..1000).contains(&major) {
                    return Err(bad());
                }
                1000 * major + 10 * minor
            }
            None => match text.parse::<i32>().map_err(|_| bad())? {
                major @ 1..=999 => 1000 * major,
                encoded => encoded,
            },
        };
        if value <= 0 {
            return Err(bad());
        }
        Ok(CudaVersion(value))
    }

    /// The major version (`12` for 12.2): runtimes of a newer major need a newer driver.
    pub fn major(self) -> i32 {
        self.0 / 1000
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

/// Read from the text [`CudaVersion::parse`] reads (the manifest writes `"12.2"`); anything
/// else is an error that quotes it.
impl<'de> Deserialize<'de> for CudaVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        CudaVersion::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// The CUDA version a driver branch provides (e.g. 535 → 12.2): the newest known branch at or
/// below it. `None` for branches older than 470, or newer than the table knows. The table is
/// `cuda_sandbox_cuda_facts::releases` (with its sources), the one place for it.
pub fn cuda_for_branch(branch: u32) -> Option<CudaVersion> {
    releases::cuda_for_branch(branch).map(CudaVersion)
}

/// The branch (major number) of a driver version: `"550.54.14"` → 550.
pub fn driver_branch(version: &str) -> Option<u32> {
    version.split('.').next()?.trim().parse().ok()
}

/// The CUDA version of the driver whose version is `driver` (e.g. `535.104.05` → 12.2).
pub fn cuda_for_driver(driver: &str) -> Option<CudaVersion> {
    driver_branch(driver).and_then(cuda_for_branch)
}

/// The first driver branch that provides CUDA `cuda` (12.8 → 570), when the table has one.
pub fn branch_for_cuda(cuda: CudaVersion) -> Option<u32> {
    releases::branch_for_cuda(cuda.0)
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_first_branch_of_a_release_is_named() {
        assert_eq!(branch_for_cuda(CudaVersion(12080)), Some(570));
        assert_eq!(branch_for_cuda(CudaVersion(12040)), Some(550));
        assert_eq!(branch_for_cuda(CudaVersion(12070)), Some(565));
        assert_eq!(branch_for_cuda(CudaVersion(10000)), None);
    }

    #[test]
    fn versions_parse_and_print_both_ways() {
        assert_eq!(CudaVersion::parse("12.2"), Ok(CudaVersion(12020)));
        assert_eq!(CudaVersion::parse("11040"), Ok(CudaVersion(11040)));
        assert_eq!(CudaVersion::parse("13"), Ok(CudaVersion(13000)));
        assert!(CudaVersion::parse("12.x").is_err());
        assert!(CudaVersion::parse("0").is_err());
        assert_eq!(CudaVersion(12090).to_string(), "12.9");
        assert_eq!(CudaVersion(12020).major(), 12);
    }

    #[test]
    fn versions_are_json_strings_both_ways() {
        assert_eq!(
            serde_json::to_string(&CudaVersion(12020)).unwrap(),
            "\"12.2\""
        );
        let v: CudaVersion = serde_json::from_str("\"12.2\"").unwrap();
        assert_eq!(v, CudaVersion(12020));
        let e = serde_json::from_str::<CudaVersion>("\"twelve\"").unwrap_err();
        assert!(e.to_string().contains("bad CUDA version \"twelve\""), "{e}");
        assert!(serde_json::from_str::<CudaVersion>("12020").is_err());
    }

    #[test]
    fn branches_map_to_their_cuda_version() {
        assert_eq!(cuda_for_driver("535.104.05"), Some(CudaVersion(12020)));
        assert_eq!(cuda_for_driver("536.1"), Some(CudaVersion(12020)));
        assert_eq!(cuda_for_driver("470.82.01"), Some(CudaVersion(11040)));
        assert_eq!(cuda_for_branch(590), Some(CudaVersion(13010)));
        assert_eq!(cuda_for_driver("418.67"), None);
        assert_eq!(cuda_for_driver("900.1"), None);
    }
}
