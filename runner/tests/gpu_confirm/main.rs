//! `gpu-confirm`'s parts that need no GPU, on the real NVIDIA userspace: the hand-built
//! modules are what NVIDIA's cuobjdump lists (a kernel-less sm_52 cubin as cuFFT 11.4 ships
//! one; saxpy PTX for compute_50), and the runtime takes their registration (a real libcudart
//! with the real 535 libcuda and no GPU answers the first call with cudaErrorNoDevice, 100, and
//! 13.0's with cudaErrorInsufficientDriver, 35). What a GPU answers is for
//! `tests-gpu/device-check`. Under `CI=true` a missing cache fails the tests.

#[path = "../common/mod.rs"]
mod common;

use std::process::Command;

use common::RUNNER;
use cuda_sandbox_check::facts::module_images::{
    kernelless_sm52_fatbin, managed_sm52_fatbin, saxpy_fatbin, sm80_only_fatbin, MANAGED_VARIABLE,
    SM80_KERNEL,
};
use cuda_sandbox_testkit::real_nvidia::{Branch, Cudart, RealNvidia};
use serde_json::Value;

fn cuobjdump(real: &RealNvidia, args: &[&str], file: &std::path::Path) -> String {
    let out = Command::new(real.cuobjdump())
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// The tests, one module per tier (docs/testing.md).
mod cli;
mod pure;
