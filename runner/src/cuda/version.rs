//! CUDA version numbers and the driver branch → CUDA table: the one implementation lives in the
//! manifest crate, shared with the hook.

pub(crate) use cuda_sandbox_manifest::versions::CudaVersion;

/// The CUDA version of the host driver whose kernel module is `kernel_driver`
/// (e.g. `535.104.05` → 12.2); `None` for branches the table does not know.
pub(crate) fn cuda_version_of_kernel_driver(kernel_driver: &str) -> Option<CudaVersion> {
    cuda_sandbox_manifest::versions::cuda_for_driver(kernel_driver)
}
