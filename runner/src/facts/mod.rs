//! What the runner reads and judges, apart from the checks that report it: GPU access, the
//! build's declared features and the hook's manifest, a package's files (walked, wheels read, their GPU
//! code, CUDA runtimes and who built them), the ELF lint, NVML's MIG view, and the
//! `gpu-confirm`, `features`, `inventory` and `container-binds` commands. `crate::cuda` is the driver wrapper
//! these call.

pub(crate) mod access;
pub(crate) mod amd_nodes;
pub(crate) mod build_features;
pub mod confirm;
pub mod container_binds;
pub mod elf_lint;
pub mod expectations;
pub mod features;
pub(crate) mod gpu_code;
pub(crate) mod gpu_words;
pub mod inventory;
pub mod lint_report;
pub(crate) mod mixing;
pub mod module_images;
pub(crate) mod nvml;
pub(crate) mod package_under_test;
pub(crate) mod provenance;
pub mod runtime_scan;
pub(crate) mod stub_libcuda;
pub(crate) mod walk;
pub(crate) mod wheel;
pub(crate) mod zluda;
pub(crate) mod zluda_code;
