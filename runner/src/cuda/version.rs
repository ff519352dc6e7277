//! CUDA version numbers (1000*major + 10*minor) and the driver branch → CUDA table.

use std::fmt;

/// A CUDA version as the driver API encodes it: `12020` is CUDA 12.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CudaVersion(pub i32);

impl CudaVersion {
    /// Parses `12.2` or `12020`.
    pub fn parse(text: &str) -> Result<CudaVersion, String> {
        let bad = || format!("bad CUDA version {text:?}: write 12.2 or 12020");
        let value = match text.split_once('.') {
            Some((major, minor)) => {
                let major: i32 = major.parse().map_err(|_| bad())?;
                let minor: i32 = minor.parse().map_err(|_| bad())?;
                if !(0..100).contains(&minor) {
                    return Err(bad());
                }
                1000 * major + 10 * minor
            }
            None => text.parse().map_err(|_| bad())?,
        };
        if value <= 0 {
            return Err(bad());
        }
        Ok(CudaVersion(value))
    }

    /// The next minor version: the smallest version this one does not implement.
    pub fn next_minor(self) -> CudaVersion {
        CudaVersion(self.0 + 10)
    }
}

impl fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0 / 1000, (self.0 % 1000) / 10)
    }
}

/// Kernel driver branch → the CUDA version its own libcuda provides (DESIGN §6).
const BRANCHES: [(u32, i32); 17] = [
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

/// The CUDA version of the host driver whose kernel module is `kernel_driver`
/// (e.g. `535.104.05` → 12.2): the newest known branch at or below its major number.
/// `None` for branches older than 470 or newer than the table knows.
pub fn cuda_version_of_kernel_driver(kernel_driver: &str) -> Option<CudaVersion> {
    let major: u32 = kernel_driver.split('.').next()?.trim().parse().ok()?;
    let newest_known = BRANCHES[BRANCHES.len() - 1].0;
    if major > newest_known + 9 {
        return None;
    }
    BRANCHES
        .iter()
        .rev()
        .find(|(branch, _)| *branch <= major)
        .map(|(_, cuda)| CudaVersion(*cuda))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_print_both_ways() {
        assert_eq!(CudaVersion::parse("12.2"), Ok(CudaVersion(12020)));
        assert_eq!(CudaVersion::parse("11040"), Ok(CudaVersion(11040)));
        assert!(CudaVersion::parse("12.x").is_err());
        assert_eq!(CudaVersion(12090).to_string(), "12.9");
        assert_eq!(CudaVersion(12020).next_minor(), CudaVersion(12030));
    }

    #[test]
    fn kernel_branches_map_to_their_cuda_version() {
        assert_eq!(
            cuda_version_of_kernel_driver("535.104.05"),
            Some(CudaVersion(12020))
        );
        assert_eq!(
            cuda_version_of_kernel_driver("470.82.01"),
            Some(CudaVersion(11040))
        );
        assert_eq!(
            cuda_version_of_kernel_driver("550.54.15"),
            Some(CudaVersion(12040))
        );
        assert_eq!(cuda_version_of_kernel_driver("418.67"), None);
        assert_eq!(cuda_version_of_kernel_driver("900.1"), None);
    }
}
