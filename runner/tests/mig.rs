//! `mig::instance` and `nvml::consistency` against a fake MIG device: the sidecar's `mig`
//! lines make the fake libcuda enumerate one MIG instance (its `cuDeviceGetUuid_v2` the MIG
//! UUID) and the fake NVML report the parent GPU in MIG mode with MIG device handles. No real
//! MIG GPU was available: the fakes follow NVIDIA's documentation (fixtures/README.md).

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

#[test]
fn the_leased_instance_passes_and_says_what_it_verified_without_a_uuid() {
    let d = driver(
        vec![gpu(0)],
        vec![instance(0, 1, 0), instance(0, 2, 0)],
        true,
    );
    let run = run_leased(&d, lease(0, 1, 0, None));
    run.assert_check(
        "mig::instance",
        "pass",
        &[
            "MIG instance gpu0/gi1/ci0",
            SLICE,
            "MIG-fa4e0000-0000-4000-8000-000000010000",
            "CUDA sees exactly one device",
            "NVML lists it as MIG device",
            "parent /dev/nvidiaN minor 0",
            "GPU instance 1",
            "compute instance 0",
        ],
    );
    let facts: MigFacts = run.facts("mig::instance");
    assert!(facts.not_verified.is_empty(), "{facts:?}");
    assert_eq!(facts.cuda_has_uuid_v2, Some(true));
    // NVML sees the parent GPU, CUDA the instance: they agree through the MIG handle.
    run.assert_check("nvml::consistency", "pass", &["agree on 1 GPU(s)"]);
    let nvml: ConsistencyFacts = run.facts("nvml::consistency");
    let gpus = nvml.gpus.unwrap();
    assert_eq!(gpus.len(), 1);
    assert!(
        gpus[0].contains("MIG device of NVIDIA H200 GPU-fa4e0000"),
        "{gpus:?}"
    );
    assert_eq!(run.code, 0, "{run}");
}

#[test]
fn a_manifest_uuid_is_compared() {
    let d = driver(vec![gpu(0)], vec![instance(0, 1, 0)], true);
    let uuid = "MIG-fa4e0000-0000-4000-8000-000000010000";
    let run = run_leased(&d, lease(0, 1, 0, Some(uuid)));
    run.assert_check("mig::instance", "pass", &["its UUID is the manifest's"]);
    let other = "MIG-fa4e0000-0000-4000-8000-000000020000";
    let run = run_leased(&d, lease(0, 2, 0, Some(other)));
    run.assert_check(
        "mig::instance",
        "fail",
        &[uuid, other, "another instance than its lease"],
    );
}

#[test]
fn another_gpu_instance_than_the_lease_fails_naming_both() {
    let d = driver(vec![gpu(0)], vec![instance(0, 1, 0)], true);
    let run = run_leased(&d, lease(0, 2, 0, None));
    run.assert_check(
        "mig::instance",
        "fail",
        &["leased MIG instance gpu0/gi2/ci0", "GPU instance 1, not 2"],
    );
    let run = run_leased(&d, lease(3, 1, 0, None));
    run.assert_check(
        "mig::instance",
        "fail",
        &["parent /dev/nvidiaN minor 0, not 3"],
    );
}

#[test]
fn two_cuda_devices_fail_naming_them() {
    // GPU 0 whole, GPU 1 in MIG mode: CUDA sees GPU 0 and one instance of GPU 1.
    let d = driver(vec![gpu(0), gpu(1)], vec![instance(1, 1, 0)], true);
    let run = run_leased(&d, lease(1, 1, 0, None));
    run.assert_check(
        "mig::instance",
        "fail",
        &[
            "leased MIG instance gpu1/gi1/ci0 but CUDA sees 2 device(s)",
            "NVIDIA H200 GPU-fa4e0000-0000-4000-8000-000000000000",
            SLICE,
            "one MIG instance",
            "/dev/nvidia1",
        ],
    );
    // NVML and CUDA still agree: one whole GPU and one MIG instance.
    run.assert_check("nvml::consistency", "pass", &["agree on 2 GPU(s)"]);
    assert_eq!(run.code, 101, "{run}");
}

#[test]
fn a_whole_gpu_fails_as_not_a_mig_instance() {
    let d = driver(vec![gpu(0)], Vec::new(), true);
    let run = run_leased(&d, lease(0, 1, 0, None));
    run.assert_check(
        "mig::instance",
        "fail",
        &[
            "CUDA's only device is the whole GPU NVIDIA H200 GPU-fa4e0000",
            "MIG mode disabled",
            "not a MIG instance",
        ],
    );
}

#[test]
fn without_nvml_it_says_what_it_could_not_verify() {
    let d = driver(vec![gpu(0)], vec![instance(0, 1, 0)], false);
    let run = run_leased(&d, lease(0, 1, 0, None));
    run.assert_check(
        "mig::instance",
        "pass",
        &[
            "CUDA sees exactly one device",
            "not verified: that it is a MIG device, and its GPU, GPU instance and compute instance",
        ],
    );
}

#[test]
fn without_a_leased_instance_it_is_skipped() {
    let d = driver(vec![gpu(0)], vec![instance(0, 1, 0)], true);
    let run = run_leased(&d, None);
    run.assert_check("mig::instance", "skipped", &["names no MIG instance"]);
    let run = run_without_devices(&d.dir, &["--no-manifest"]);
    run.assert_check("mig::instance", "skipped", &["no MIG instance to check"]);
}
