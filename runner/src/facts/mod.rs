//! What the runner reads and judges, apart from the checks that report it: GPU access and
//! the hook's manifest, a package's files (walked, their GPU code, CUDA runtimes and who built
//! them), the ELF lint, NVML's MIG view, and the `gpu-confirm` and `features` commands.
//! `crate::cuda` is the driver wrapper these call.

pub mod access;
pub mod confirm;
pub mod elf_lint;
pub mod expectations;
pub mod features;
pub mod gpu_code;
pub mod gpu_words;
pub mod mixing;
pub mod module_images;
pub mod nvml_mig;
pub mod package_under_test;
pub mod provenance;
pub mod runtime_scan;
pub mod stub_libcuda;
pub mod walk;
