//! cuda-sandbox-check: proves, from inside a Nix build sandbox (or anywhere), that the
//! NVIDIA GPU and CUDA driver exposed to the process work.
//!
//! A libtest-mimic harness of named checks ([`checks::CHECKS`]). The driver is dlopen'd by
//! plain name ([`cuda::driver`]), never linked, so the dynamic loader's normal search picks
//! it; NVML comes through `nvml-wrapper`. Facts and verdicts end in a JSON report
//! ([`report`]).

pub mod checks;
pub mod cli;
pub mod cuda;
pub mod harness;
pub mod report;
pub mod session;
