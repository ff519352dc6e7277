//! The runner behaves as a libtest harness and as a Nix builder: stable names, `--list`,
//! filters, `--format json`, exit status 0/101, the report at `$out` inside a build.

#[path = "../common/mod.rs"]
mod common;

use std::process::Command;

use common::{report_facts, run_with_env, run_without_devices, FakeDriver, RUNNER};
use cuda_sandbox_check::checks::kernel::SaxpyFacts;
use fake_driver::{Mode, Sidecar};

const CHECK_NAMES: [&str; 9] = [
    "devices::nodes",
    "devices::features",
    "driver::library",
    "driver::version",
    "driver::entry_points",
    "runtime::entry_points",
    "kernel::saxpy",
    "nvml::consistency",
    "mig::instance",
];

// The tests, one module per tier (docs/testing.md).
mod cli;
