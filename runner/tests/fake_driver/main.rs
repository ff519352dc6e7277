//! The runner against the fake driver in every mode: each failure mode fails the checks it
//! concerns, with the one-line explanation that names the cause and the fix.

#[path = "../common/mod.rs"]
mod common;

use std::process::Command;

use common::{run, run_without_devices, FakeDriver};
use cuda_sandbox_check::checks::driver::LibraryFacts;
use cuda_sandbox_check::checks::entry_points::EntryPointsFacts;
use cuda_sandbox_check::checks::kernel::SaxpyFacts;
use cuda_sandbox_check::checks::nvml::ConsistencyFacts;
use fake_driver::{FakeDevice, Mode, Sidecar};

fn sidecar(mode: Mode) -> Sidecar {
    Sidecar {
        mode,
        ..Sidecar::default()
    }
}

// The tests, one module per tier (docs/testing.md).
mod cli;
