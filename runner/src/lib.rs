//! cuda-sandbox-check: proves, from inside a Nix build sandbox (or anywhere), that the
//! NVIDIA GPU and CUDA driver exposed to the process work.
//!
//! A libtest-mimic harness of named checks ([`checks::CHECKS`], each a [`check::Check`]
//! returning a [`check::Outcome`]). The driver is dlopen'd by
//! plain name ([`cuda::driver`]), never linked, so the dynamic loader's normal search picks
//! it; NVML comes through `nvml-wrapper`. When the hook left a manifest ([`expectations`]), the
//! checks compare the loaded driver with the one it chose. [`lint`] checks a package's ELF
//! files (`cuda-sandbox-check lint`, or the `lint::elf` check). Facts and verdicts end in a
//! JSON report ([`report`]).

pub mod access;
pub mod check;
pub mod checks;
pub mod cli;
pub mod confirm;
pub mod cuda;
pub mod expectations;
pub mod features;
pub mod gpu_code;
pub mod gpu_words;
pub mod harness;
pub mod lint;
pub mod mixing;
pub mod module_images;
pub mod nvml_mig;
pub mod package;
pub mod pretty_json;
pub mod provenance;
pub mod report;
pub mod runtime_scan;
pub mod session;
pub mod stub_libcuda;
pub mod walk;
