//! The `package::*` checks on packages built here with NVIDIA's ptxas 12.9 and fatbinary 13.5
//! (testkit::fatbin_fixtures::gpu_library_of), run against the fake driver playing a GPU of a
//! chosen compute capability and driver version. The fake's `cuDeviceGetAttribute` answers the
//! capability as the real driver does on a GPU (its differential test holds it to the real
//! 535 and 470 drivers where they can answer without one). Needs the real NVIDIA tools
//! (scripts/nvidia-userspace); under CI=true their absence fails the tests.

#[path = "../common/mod.rs"]
mod common;

use std::path::Path;

use common::{run_without_devices, FakeDriver};
use cuda_sandbox_testkit::cc;
use cuda_sandbox_testkit::gpu_library::gpu_library_of;
use cuda_sandbox_testkit::real_nvidia::RealNvidia;
use fake_driver::{Mode, Sidecar};

fn driver(cc: (i32, i32), cuda: i32) -> FakeDriver {
    FakeDriver::driver(&Sidecar {
        compute_capability: cc,
        cuda_version: cuda,
        runtime_version: cuda,
        ..Sidecar::default()
    })
}

fn package_args(dir: &Path) -> Vec<String> {
    vec![
        "--no-manifest".into(),
        "--package".into(),
        dir.display().to_string(),
        "package::".into(),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

// The tests, one module per tier (docs/testing.md).
mod cli;
