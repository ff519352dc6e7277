//! `cuda-sandbox-check features` and the `devices::features` check under the FAKE driver: the GPUs' compute capabilities come
//! from the sidecar (`compute_capability`, `device_capability`), through the real code path
//! (`cuInit`, `cuDeviceGetAttribute`). Each expected list is written out by hand from Nixpkgs'
//! `_cuda.db` at the commit gpus.txt pins (ConnorBaker/nixpkgs 748b3c28: 3.5 3.7 5.0 5.2 6.0
//! 6.1 7.0 7.2 7.5 8.0 8.6 8.7 8.9 9.0 9.0a; 10.0 10.1 10.3 11.0 12.0 12.1, each with a and f)
//! and the three rules of `getCudaSystemFeatures` there, not computed by the code under test.

#[path = "../common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;

use common::{FakeDriver, RUNNER};
use cuda_sandbox_check::checks::devices::FeaturesFacts;
use cuda_sandbox_manifest::{DriverManifest, Manifest, MANIFEST_VERSION};
use fake_driver::{FakeDevice, FakeMig, Mode, Sidecar};
use serde_json::Value;

const BELOW_75: &str = "cuda cuda-sm-35 cuda-sm-37 cuda-sm-50 cuda-sm-52 cuda-sm-60 cuda-sm-61 \
                        cuda-sm-70 cuda-sm-72";
const TO_87: &str = "cuda-sm-75 cuda-sm-80 cuda-sm-86 cuda-sm-87";
const TO_90: &str = "cuda-sm-89 cuda-sm-90";
const TO_110: &str = "cuda-sm-100 cuda-sm-101 cuda-sm-103 cuda-sm-110";

/// The six capabilities the issue names, each with its whole list.
fn expected() -> Vec<((i32, i32), String)> {
    vec![
        ((7, 5), format!("{BELOW_75} cuda-sm-75")),
        ((8, 7), format!("{BELOW_75} {TO_87}")),
        ((9, 0), format!("{BELOW_75} {TO_87} {TO_90} cuda-sm-90a")),
        (
            (10, 0),
            format!("{BELOW_75} {TO_87} {TO_90} cuda-sm-100 cuda-sm-100a cuda-sm-100f"),
        ),
        (
            (12, 0),
            format!("{BELOW_75} {TO_87} {TO_90} {TO_110} cuda-sm-120 cuda-sm-120a cuda-sm-120f"),
        ),
        (
            (12, 1),
            format!(
                "{BELOW_75} {TO_87} {TO_90} {TO_110} cuda-sm-120 cuda-sm-120f cuda-sm-121 \
                 cuda-sm-121a cuda-sm-121f"
            ),
        ),
    ]
}

struct Features {
    code: i32,
    stdout: String,
    stderr: String,
}

fn features(driver: Option<&FakeDriver>, args: &[&str]) -> Features {
    let empty = tempfile::tempdir().unwrap();
    let library_path = driver.map_or(empty.path(), |d| d.dir.as_path());
    let output = Command::new(RUNNER)
        .env("LD_LIBRARY_PATH", library_path)
        .arg("features")
        .args(args)
        .output()
        .expect("run cuda-sandbox-check features");
    Features {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn json(run: &Features) -> Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", run.stdout, run.stderr))
}

fn gpus(capabilities: &[(i32, i32)]) -> Sidecar {
    let mut sidecar = Sidecar {
        devices: (0..capabilities.len()).map(FakeDevice::generated).collect(),
        ..Sidecar::default()
    };
    for (device, &cc) in sidecar.devices.iter_mut().zip(capabilities) {
        device.compute_capability = Some(cc);
    }
    sidecar
}

// `devices::features`: the build's cuda-sm-* features held to the GPUs this process can use.

/// Runs `devices::features` alone on GPUs of `capabilities`, with `env` (the build's
/// environment: `requiredSystemFeatures`, `NIX_ATTRS_JSON_FILE`, `NIX_BUILD_TOP`) and the
/// hook's `manifest` when given (else `--no-manifest`).
fn check_on(
    capabilities: &[(i32, i32)],
    env: &[(&str, &str)],
    manifest: Option<&Path>,
) -> common::Run {
    let driver = FakeDriver::driver(&gpus(capabilities));
    let mut args = vec!["--exact", "devices::features"];
    match manifest {
        Some(path) => args.extend(["--manifest", path.to_str().unwrap()]),
        None => args.push("--no-manifest"),
    }
    common::run_with_env(&driver.dir, &args, env)
}

const REQUIRED: &str = "requiredSystemFeatures";

// The tests, one module per tier (docs/testing.md).
mod cli;
