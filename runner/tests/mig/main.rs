//! `mig::instance` and `nvml::consistency` against a fake MIG device: the sidecar's `mig`
//! lines make the fake libcuda enumerate one MIG instance (its `cuDeviceGetUuid_v2` the MIG
//! UUID) and the fake NVML report the parent GPU in MIG mode with MIG device handles. No real
//! MIG GPU was available: the fakes follow NVIDIA's documentation (fixtures/README.md).

#[path = "../common/mod.rs"]
mod common;

use common::{run_without_devices, FakeDriver, Run};
use cuda_sandbox_check::checks::mig::MigFacts;
use cuda_sandbox_check::checks::nvml::ConsistencyFacts;
use cuda_sandbox_manifest::versions::CudaVersion;
use cuda_sandbox_manifest::{DriverKind, DriverManifest, Manifest, MigInstance, MANIFEST_VERSION};
use fake_driver::{FakeDevice, FakeMig, Sidecar, LIBCUDA};

const H200: &str = "NVIDIA H200";
const SLICE: &str = "NVIDIA H200 MIG 1g.18gb";

fn gpu(n: usize) -> FakeDevice {
    FakeDevice {
        name: H200.into(),
        ..FakeDevice::generated(n)
    }
}

fn instance(parent: usize, gi: u32, ci: u32) -> FakeMig {
    FakeMig {
        parent,
        gi,
        ci,
        uuid: format!("MIG-fa4e0000-0000-4000-8000-{parent:04x}{gi:04x}{ci:04x}"),
        name: SLICE.into(),
    }
}

/// A fake driver with `devices` and `mig`, and NVML unless `nvml` is false.
fn driver(devices: Vec<FakeDevice>, mig: Vec<FakeMig>, nvml: bool) -> FakeDriver {
    let sidecar = Sidecar {
        compute_capability: (9, 0),
        devices,
        mig,
        ..Sidecar::default()
    };
    if nvml {
        FakeDriver::driver(&sidecar)
    } else {
        FakeDriver::with(&sidecar, &[LIBCUDA])
    }
}

/// Runs the runner with a manifest choosing `driver`'s libcuda and leasing `mig`.
fn run_leased(driver: &FakeDriver, mig: Option<MigInstance>) -> Run {
    let temp = tempfile::tempdir().unwrap();
    let path = temp.path().join("manifest.json");
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        derivation: "/nix/store/00000000000000000000000000000000-gpu-check.drv".into(),
        chroot: "/nix/store/00000000000000000000000000000000-gpu-check.drv.chroot".into(),
        rules: vec!["nvidia".into()],
        features: vec!["cuda".into()],
        devices: Vec::new(),
        leased_gpus: Vec::new(),
        mig,
        driver: DriverManifest {
            kind: DriverKind::Host,
            libcuda: vec![driver.dir.join("libcuda.so.1").display().to_string()],
            cuda_version: Some(CudaVersion(12020)),
            host_cuda_version: Some(CudaVersion(12020)),
            kernel_driver: Some("535.104.05".into()),
            compat_dir: None,
            driver_link_lib: Some(driver.dir.display().to_string()),
            reason: "the host driver".into(),
        },
    };
    std::fs::write(&path, manifest.to_json()).unwrap();
    run_without_devices(&driver.dir, &["--manifest", path.to_str().unwrap()])
}

fn lease(gpu: u32, gi: u32, ci: u32, uuid: Option<&str>) -> Option<MigInstance> {
    Some(MigInstance {
        gpu,
        gi,
        ci,
        uuid: uuid.map(str::to_owned),
    })
}

// The tests, one module per tier (docs/testing.md).
mod cli;
