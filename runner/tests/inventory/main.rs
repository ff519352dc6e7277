//! `cuda-sandbox-check inventory` under the FAKE driver, on a fake host's
//! `/proc/driver/nvidia/gpus` and `/sys/bus/pci/devices` ([`FakePci`]): the capabilities come
//! from the fake NVML (`device_capability`), the minors from `nvmlDeviceGetMinorNumber`, and
//! the file is read back with the schema the hook reads ([`Inventory::parse`]).

#[path = "../common/mod.rs"]
mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::{FakeDriver, RUNNER};
use cuda_sandbox_manifest::inventory::Inventory;
use cuda_sandbox_testkit::FakePci;
use fake_driver::{FakeDevice, FakeMig, Sidecar};

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

fn inventory(driver: &FakeDriver, root: &Path, output: &Path) -> (i32, String, String) {
    let out = Command::new(RUNNER)
        .env("LD_LIBRARY_PATH", &driver.dir)
        .arg("inventory")
        .arg("--root")
        .arg(root)
        .arg("--output")
        .arg(output)
        .output()
        .expect("run cuda-sandbox-check inventory");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// The tests, one module per tier (docs/testing.md).
mod cli;
