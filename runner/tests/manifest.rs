//! The checks against the hook's manifest, outside Nix: fake host and compat driver
//! directories on LD_LIBRARY_PATH and a manifest file written here, as the hook would write it.
//! Loading the driver the hook chose passes; loading the other one fails with the fix.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{can_make_devices, run, run_without_devices, FakeDriver};
use cuda_sandbox_check::checks::devices::NodesFacts;
use cuda_sandbox_check::checks::driver::LibraryFacts;
use cuda_sandbox_manifest::versions::CudaVersion;
use cuda_sandbox_manifest::{DriverKind, DriverManifest, Manifest, MANIFEST_VERSION};
use cuda_sandbox_testkit::FakeDevices;
use fake_driver::{Sidecar, LIBCUDA};

/// A Jetson-like pair: the host driver (CUDA 11.4 on kernel module 470) and a compat
/// libcuda (CUDA 12.2) in its own directory, as cuda_compat ships it.
struct Drivers {
    host: FakeDriver,
    compat: FakeDriver,
    _temp: tempfile::TempDir,
    manifest: PathBuf,
}

const KERNEL: &str = "470.82.01";

impl Drivers {
    fn new() -> Drivers {
        let host = FakeDriver::driver(&Sidecar {
            cuda_version: 11040,
            kernel_driver: KERNEL.into(),
            ..Sidecar::default()
        });
        let compat = FakeDriver::with(
            &Sidecar {
                cuda_version: 12020,
                kernel_driver: KERNEL.into(),
                ..Sidecar::default()
            },
            &[LIBCUDA],
        );
        let temp = tempfile::tempdir().unwrap();
        let manifest = temp.path().join("manifest.json");
        Drivers {
            host,
            compat,
            _temp: temp,
            manifest,
        }
    }

    /// The search path: `first` then `second`, joined with `:`.
    fn path(first: &Path, second: &Path) -> PathBuf {
        PathBuf::from(format!("{}:{}", first.display(), second.display()))
    }

    /// Writes the manifest the hook writes when it chooses `kind`.
    fn choose(&self, kind: DriverKind, reason: &str) -> &Path {
        let lib = |dir: &Path| dir.join("libcuda.so.1").display().to_string();
        let driver = DriverManifest {
            kind,
            libcuda: match kind {
                DriverKind::Compat => vec![lib(&self.compat.dir)],
                _ => vec![lib(&self.host.dir)],
            },
            cuda_version: Some(if kind == DriverKind::Compat {
                CudaVersion(12020)
            } else {
                CudaVersion(11040)
            }),
            host_cuda_version: Some(CudaVersion(11040)),
            kernel_driver: Some(KERNEL.into()),
            compat_dir: (kind == DriverKind::Compat).then(|| self.compat.dir.display().to_string()),
            driver_link_lib: Some(self.host.dir.display().to_string()),
            reason: reason.into(),
        };
        write_manifest(&self.manifest, driver, &[]);
        &self.manifest
    }
}

fn write_manifest(path: &Path, driver: DriverManifest, devices: &[&str]) {
    write_leased_manifest(path, driver, devices, &[]);
}

fn write_leased_manifest(path: &Path, driver: DriverManifest, devices: &[&str], leased: &[u32]) {
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        derivation: "/nix/store/00000000000000000000000000000000-gpu-check.drv".into(),
        chroot: "/nix/store/00000000000000000000000000000000-gpu-check.drv.chroot".into(),
        rules: vec!["nvidia".into()],
        features: vec!["cuda".into()],
        devices: devices.iter().map(|d| d.to_string()).collect(),
        leased_gpus: leased.to_vec(),
        mig: None,
        driver,
    };
    std::fs::write(path, manifest.to_json()).unwrap();
}

const COMPAT_REASON: &str = "compat driver /c provides CUDA 12.2, newer than the host driver's \
    CUDA 11.4, and its note lists kernel driver branch 470";
const HOST_REASON: &str = "the host driver (CUDA 11.4); compat not used: /c: its note does not \
    list the host's kernel driver branch 470 (it lists [525]); cuInit would fail with 803";

#[test]
fn compat_first_on_the_search_path_matches_the_hooks_compat_choice() {
    let d = Drivers::new();
    let manifest = d.choose(DriverKind::Compat, COMPAT_REASON);
    let path = Drivers::path(&d.compat.dir, &d.host.dir);
    let run = run_without_devices(&path, &["--manifest", manifest.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{run}");
    run.assert_check(
        "driver::library",
        "pass",
        &["the compat driver the hook chose"],
    );
    run.assert_check("driver::version", "pass", &["CUDA 12.2"]);
    run.assert_check("nvml::consistency", "pass", &["compat active", KERNEL]);
    assert_eq!(run.report["manifest"]["status"], "loaded", "{run}");
    assert_eq!(
        run.report["manifest"]["content"]["driver"]["kind"],
        "compat"
    );
    assert_eq!(
        run.report["manifest"]["path"],
        manifest.display().to_string().as_str()
    );
}

#[test]
fn driver_link_first_where_the_hook_chose_compat_fails_with_the_runpath_fix() {
    let d = Drivers::new();
    let manifest = d.choose(DriverKind::Compat, COMPAT_REASON);
    let path = Drivers::path(&d.host.dir, &d.compat.dir);
    let run = run_without_devices(&path, &["--manifest", manifest.to_str().unwrap()]);
    assert_eq!(run.code, 101, "{run}");
    let expected = format!(
        "loaded {}/libcuda.so.1 (host, CUDA 11.4) but the hook chose compat {}/libcuda.so.1 \
         (CUDA 12.2): put the compat directory before the driver link in DT_RUNPATH or \
         LD_LIBRARY_PATH",
        d.host.dir.display(),
        d.compat.dir.display()
    );
    assert_eq!(
        run.check("driver::library")["message"],
        expected.as_str(),
        "{run}"
    );
    run.assert_check(
        "driver::version",
        "fail",
        &[
            "CUDA 11.4",
            "compat driver providing CUDA 12.2",
            "before the driver link",
        ],
    );
    run.assert_check(
        "nvml::consistency",
        "fail",
        &[
            "the hook chose the compat driver (CUDA 12.2)",
            "host driver",
        ],
    );
}

#[test]
fn compat_loaded_where_the_hook_chose_host_fails_with_the_hooks_reason() {
    let d = Drivers::new();
    let manifest = d.choose(DriverKind::Host, HOST_REASON);
    let path = Drivers::path(&d.compat.dir, &d.host.dir);
    let run = run_without_devices(&path, &["--manifest", manifest.to_str().unwrap()]);
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "driver::library",
        "fail",
        &[
            "(compat, CUDA 12.2) but the hook chose host",
            "the compat driver does not support this kernel driver 470.82.01",
            "does not list the host's kernel driver branch 470",
            "remove the compat directory from DT_RUNPATH and LD_LIBRARY_PATH",
        ],
    );
    run.assert_check(
        "nvml::consistency",
        "fail",
        &["the hook chose the host driver"],
    );
}

#[test]
fn host_choice_with_the_host_driver_loaded_passes() {
    let d = Drivers::new();
    let manifest = d.choose(DriverKind::Host, HOST_REASON);
    let run = run_without_devices(&d.host.dir, &["--manifest", manifest.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{run}");
    run.assert_check(
        "driver::library",
        "pass",
        &["the host driver the hook chose"],
    );
    run.assert_check("nvml::consistency", "pass", &["host driver"]);
}

#[test]
fn kernel_driver_other_than_the_hooks_fails_naming_both() {
    let d = Drivers::new();
    let mut driver = DriverManifest {
        kind: DriverKind::Host,
        libcuda: vec![d.host.dir.join("libcuda.so.1").display().to_string()],
        cuda_version: Some(CudaVersion(11040)),
        host_cuda_version: Some(CudaVersion(11040)),
        kernel_driver: Some("535.104.05".into()),
        compat_dir: None,
        driver_link_lib: None,
        reason: "the host driver".into(),
    };
    write_manifest(&d.manifest, driver.clone(), &[]);
    let run = run_without_devices(&d.host.dir, &["--manifest", d.manifest.to_str().unwrap()]);
    run.assert_check(
        "nvml::consistency",
        "fail",
        &["NVML reports kernel driver 470.82.01 but the hook read 535.104.05"],
    );
    // A CUDA version other than the one the hook chose is explained too.
    driver.kernel_driver = None;
    driver.cuda_version = Some(CudaVersion(12000));
    write_manifest(&d.manifest, driver, &[]);
    let run = run_without_devices(&d.host.dir, &["--manifest", d.manifest.to_str().unwrap()]);
    run.assert_check(
        "driver::version",
        "fail",
        &["provides CUDA 11.4 but the hook chose the host driver providing CUDA 12.0"],
    );
}

#[test]
fn missing_named_manifest_fails_and_no_manifest_ignores_it() {
    let d = Drivers::new();
    let missing = d.manifest.display().to_string();
    let run = run_without_devices(&d.host.dir, &["--manifest", &missing]);
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "driver::library",
        "fail",
        &["manifest is unusable", &missing, "--no-manifest"],
    );
    assert_eq!(run.report["manifest"]["status"], "broken");

    let run = run_without_devices(&d.host.dir, &["--no-manifest"]);
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(run.report["manifest"]["status"], "absent");
    let library: LibraryFacts = run.facts("driver::library");
    let fact = library.manifest.as_str().unwrap();
    assert!(fact.starts_with("no manifest:"), "{fact}");
}

#[test]
fn a_cuda_version_that_does_not_parse_makes_the_manifest_fail_naming_the_field() {
    let d = Drivers::new();
    d.choose(DriverKind::Host, HOST_REASON);
    let written = std::fs::read_to_string(&d.manifest).unwrap();
    let bad = written.replace("\"cuda_version\": \"11.4\"", "\"cuda_version\": \"twelve\"");
    assert_ne!(bad, written, "the manifest the hook writes: {written}");
    std::fs::write(&d.manifest, bad).unwrap();
    let path = d.manifest.to_str().unwrap();
    let why = ["manifest is unusable", "driver.cuda_version", "\"twelve\""];

    let run = run_without_devices(&d.host.dir, &["--manifest", path]);
    assert_eq!(run.code, 101, "{run}");
    run.assert_check("driver::library", "fail", &why);
    assert_eq!(run.report["manifest"]["status"], "broken");

    // The lint subcommand refuses it as well, in one line.
    let lint = Command::new(common::RUNNER)
        .args(["lint", "--manifest", path])
        .arg(&d.host.dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&lint.stderr);
    assert_eq!(lint.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    for part in why {
        assert!(stderr.contains(part), "{part:?} not in {stderr}");
    }
}

#[test]
fn absent_default_manifest_is_reported_as_a_fact() {
    if Path::new(cuda_sandbox_manifest::MANIFEST_PATH).exists() {
        eprintln!(
            "SKIPPED: this machine has a real {}",
            cuda_sandbox_manifest::MANIFEST_PATH
        );
        return;
    }
    let d = Drivers::new();
    let run = run_without_devices(&d.host.dir, &["driver::"]);
    assert_eq!(run.code, 0, "{run}");
    let library: LibraryFacts = run.facts("driver::library");
    let fact = library.manifest.as_str().unwrap();
    assert!(
        fact.contains("no manifest:") && fact.contains("does not exist"),
        "{fact}"
    );
    assert!(
        run.stdout
            .contains("driver::library:   manifest = \"no manifest:"),
        "{run}"
    );
}

#[test]
fn devices_the_manifest_lists_must_be_present() {
    if !can_make_devices("devices_the_manifest_lists_must_be_present") {
        return;
    }
    let d = Drivers::new();
    let temp = tempfile::tempdir().unwrap();
    FakeDevices::create(temp.path(), 1, true).unwrap();
    let driver = DriverManifest::none("no driver configured");
    write_manifest(
        &d.manifest,
        driver.clone(),
        &["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"],
    );
    let dev = temp.path().join("dev");
    let args = [
        "--manifest",
        d.manifest.to_str().unwrap(),
        "--dev-root",
        dev.to_str().unwrap(),
        "devices::",
    ];
    let ok = run(&d.host.dir, &args);
    ok.assert_check("devices::nodes", "pass", &["1 GPU node(s)"]);
    let nodes: NodesFacts = ok.facts("devices::nodes");
    assert_eq!(nodes.manifest_gpu_nodes, Some(1));

    write_manifest(
        &d.manifest,
        driver,
        &["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"],
    );
    let missing = run(&d.host.dir, &args);
    missing.assert_check(
        "devices::nodes",
        "fail",
        &["lists /dev/nvidia1 as exposed", "is missing"],
    );
}

#[test]
fn cuda_device_count_must_equal_the_leased_gpus() {
    if !can_make_devices("cuda_device_count_must_equal_the_leased_gpus") {
        return;
    }
    let d = Drivers::new();
    let temp = tempfile::tempdir().unwrap();
    FakeDevices::create(temp.path(), 2, true).unwrap();
    let driver = DriverManifest::none("no driver configured");
    let devices = [
        "/dev/nvidia0",
        "/dev/nvidia1",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
    ];
    let dev = temp.path().join("dev");
    let args = [
        "--manifest",
        d.manifest.to_str().unwrap(),
        "--dev-root",
        dev.to_str().unwrap(),
        "devices::nodes",
    ];
    // The fake driver plays one CUDA device.
    write_leased_manifest(&d.manifest, driver.clone(), &devices, &[1]);
    let one = run(&d.host.dir, &args);
    one.assert_check("devices::nodes", "pass", &["for 1 CUDA device(s)"]);
    let nodes: NodesFacts = one.facts("devices::nodes");
    assert_eq!(nodes.manifest_leased_gpus, Some(vec![1]));

    write_leased_manifest(&d.manifest, driver, &devices, &[0, 1]);
    let two = run(&d.host.dir, &args);
    two.assert_check(
        "devices::nodes",
        "fail",
        &["CUDA reports 1 device(s) but the hook leased this build 2 GPU(s) [0, 1]"],
    );
}
