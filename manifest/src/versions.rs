//! CUDA version numbers and the driver branch → CUDA lookups, shared by the hook (which
//! chooses a driver by them) and the runner (which checks the loaded one); the branch table
//! itself is `cuda_sandbox_cuda_facts::releases` (docs/architecture.md, driver facts).

pub use cuda_sandbox_cuda_facts::releases::{branch_for_cuda, cuda_for_branch};
pub use cuda_sandbox_cuda_facts::CudaVersion;

/// The branch (major number) of a driver version: `"550.54.14"` → 550.
pub fn driver_branch(version: &str) -> Option<u32> {
    version.split('.').next()?.trim().parse().ok()
}

/// The CUDA version of the driver whose version is `driver` (e.g. `535.104.05` → 12.2).
pub fn cuda_for_driver(driver: &str) -> Option<CudaVersion> {
    driver_branch(driver).and_then(cuda_for_branch)
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
    fn branches_map_to_their_cuda_version() {
        assert_eq!(cuda_for_driver("535.104.05"), Some(CudaVersion(12020)));
        assert_eq!(cuda_for_driver("536.1"), Some(CudaVersion(12020)));
        assert_eq!(cuda_for_driver("470.82.01"), Some(CudaVersion(11040)));
        assert_eq!(cuda_for_branch(590), Some(CudaVersion(13010)));
        assert_eq!(cuda_for_driver("418.67"), None);
        assert_eq!(cuda_for_driver("900.1"), None);
    }
}
