//! CUDA version numbers: the one implementation lives in the manifest crate, shared with the
//! hook (with the driver branch → CUDA table, `cuda_for_driver`).

pub(crate) use cuda_sandbox_manifest::versions::CudaVersion;
