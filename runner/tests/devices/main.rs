//! `devices::nodes` against fake device trees of real character devices (needs root for
//! mknod; under CI=true a non-root run fails instead of skipping).

#[path = "../common/mod.rs"]
mod common;

use std::path::Path;

use common::{can_make_devices, run, FakeDriver};
use cuda_sandbox_check::checks::devices::NodesFacts;
use cuda_sandbox_testkit::{mknod_char, FakeDevices, NVIDIA_MAJOR};
use fake_driver::{FakeDevice, Mode, Sidecar};

fn run_nodes(driver: &FakeDriver, dev: &Path) -> common::Run {
    run(
        &driver.dir,
        &[
            "--dev-root",
            dev.to_str().unwrap(),
            "--exact",
            "devices::nodes",
        ],
    )
}

// The tests, one module per tier (docs/testing.md).
mod root;
