//! The runtime checks with a (fake) CUDA runtime, whose answers the differential test holds
//! to NVIDIA's real cudart: a runtime no newer than the driver agrees with it; a newer minor is
//! CUDA's minor-version compatibility (passes, with the functions whose ABI differs); a newer
//! major fails naming cudaErrorInsufficientDriver (35) and the fix.

#[path = "../common/mod.rs"]
mod common;

use common::{run_without_devices, FakeDriver};
use cuda_sandbox_check::checks::runtime::{RuntimeEntryPointsFacts, RuntimesFacts};
use fake_driver::assemble::LIBCUDART;
use fake_driver::{Sidecar, ALL_LIBRARIES};

/// A directory holding only a fake libcudart of version `runtime`.
fn cudart(runtime: i32) -> FakeDriver {
    let sidecar = Sidecar {
        runtime_version: runtime,
        ..Sidecar::default()
    };
    FakeDriver::with(&sidecar, &[LIBCUDART])
}

/// The fake runtime's file in `dir` (the fake plays any version under one file name; the
/// version comes from its sidecar).
fn libcudart(dir: &FakeDriver, _runtime: i32) -> String {
    std::fs::read_dir(&dir.dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("libcudart.so")
        })
        .expect("a fake libcudart")
        .to_str()
        .unwrap()
        .to_owned()
}

// The tests, one module per tier (docs/testing.md).
mod cli;
