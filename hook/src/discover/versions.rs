//! Driver version facts read from the host: the kernel module's version, Tegra's L4T release, the
//! user-space driver version in `libcuda.so.<version>`. The CUDA version type and the
//! branch → CUDA table (docs/architecture.md) live in the manifest crate, shared with the runner.

pub(crate) use cuda_sandbox_manifest::versions::{
    cuda_for_branch, driver_branch, kernel_module_version, CudaVersion,
};

/// The L4T major release from `/etc/nv_tegra_release`, e.g. `# R35 (release), REVISION: 4.1,
/// …` → `35`.
pub(crate) fn l4t_release(text: &str) -> Option<u32> {
    let line = text.lines().find(|l| l.trim_start().starts_with("# R"))?;
    line.trim_start()[3..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The CUDA version of a Jetson's own (non-compat) driver by L4T major release.
pub(crate) fn cuda_for_l4t(major: u32) -> Option<CudaVersion> {
    match major {
        32 => Some(CudaVersion(10020)),
        34 | 35 => Some(CudaVersion(11040)),
        36 => Some(CudaVersion(12020)),
        _ => None,
    }
}

/// The user-space driver version in a library file name: `libcuda.so.550.54.14` →
/// `550.54.14`. Tegra's `libcuda.so.1.1` carries none (returns `None`).
pub(crate) fn version_in_file_name(name: &str, stem: &str) -> Option<String> {
    let v = name.strip_prefix(stem)?.strip_prefix(".so.")?;
    let branch = driver_branch(v)?;
    (branch >= 100 && v.chars().all(|c| c.is_ascii_digit() || c == '.')).then(|| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tegra_release() {
        let t = "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023\n";
        assert_eq!(l4t_release(t), Some(35));
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
