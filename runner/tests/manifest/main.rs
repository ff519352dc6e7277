//! The checks against the hook's manifest, outside Nix: fake host and compat driver
//! directories on LD_LIBRARY_PATH and a manifest file written here, as the hook would write it.
//! Loading the driver the hook chose passes; loading the other one fails with the fix.

#[path = "../common/mod.rs"]
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

// The tests, one module per tier (docs/testing.md).
mod cli;
mod root;
