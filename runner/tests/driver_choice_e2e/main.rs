//! The hook's driver choice end to end: a fake host root (real character devices, a fake
//! `/proc/driver/nvidia/version`, FAKE drivers in the Nix store or behind a fake
//! `ld.so.cache`), the real `cuda-sandbox-hook` as Nix's `pre-build-hook`, and
//! `cuda-sandbox-check` as the builder of a tagged derivation in a real Nix sandbox. The
//! runner reads the manifest the hook wrote and checks that the libcuda the loader picked is
//! the one the hook chose.
//!
//! Tests that build with Nix need root and `nix-build` (skipped with a reason otherwise, and
//! failing under `CI=true`); the explain-only test needs neither.

#[path = "../common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{artifacts_dir, report_facts};
use cuda_sandbox_check::checks::driver::LibraryFacts;
use cuda_sandbox_testkit::{
    cc, exposed_inside, nix_available, nonce, workspace_binary, Build, FakeDevices, NixSandbox,
};
use fake_driver::layout::{add_compat_note, version_libcuda};
use fake_driver::sidecar::format_cuda_version;
use fake_driver::{assemble, FakeLibrary, Sidecar, DRIVER_LIBRARIES, LIBCUDA, SIDECAR_NAME};
use serde_json::Value;

const LINK_LIB: &str = "/run/opengl-driver/lib";

fn nix_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/nix")
        .join(name)
}

/// Assembles a FAKE driver directory at `dir`: `libraries` playing `sidecar`, libcuda installed
/// as `libcuda.so.<libcuda_version>` with the `libcuda.so.1` link, and with the compat note
/// listing `note_drivers` when given.
fn fake_driver_dir(
    dir: &Path,
    sidecar: &Sidecar,
    libraries: &[FakeLibrary],
    libcuda_version: &str,
    note_drivers: Option<&[u32]>,
) {
    if let Err(e) = assemble(&artifacts_dir(), dir, libraries, sidecar) {
        panic!("cannot assemble a fake driver: {e}");
    }
    let file = version_libcuda(dir, libcuda_version).unwrap();
    if let Some(drivers) = note_drivers {
        add_compat_note(&file, &format_cuda_version(sidecar.cuda_version), drivers).unwrap();
    }
}

/// A fake host: its root (devices, kernel module version), a hook config, and scratch space.
struct Host {
    _temp: tempfile::TempDir,
    scratch: PathBuf,
    root: PathBuf,
    config: PathBuf,
    devices: bool,
}

impl Host {
    /// A host root with NVIDIA kernel module `kernel`, and (when `devices`) GPU 0, nvidiactl
    /// and nvidia-uvm as real character devices.
    fn new(kernel: &str, devices: bool) -> Host {
        let temp = tempfile::tempdir().unwrap();
        let scratch = temp.path().to_path_buf();
        let root = scratch.join("root");
        if devices {
            FakeDevices::create(&root, 1, true).unwrap();
        }
        let proc = root.join("proc/driver/nvidia");
        std::fs::create_dir_all(&proc).unwrap();
        std::fs::write(
            proc.join("version"),
            format!(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {kernel}  Thu Jan  1 00:00:00 UTC 2024\n\
                 GCC version:  gcc version 12.2.0 (FAKE)\n"
            ),
        )
        .unwrap();
        Host {
            config: scratch.join("config.toml"),
            _temp: temp,
            scratch,
            root,
            devices,
        }
    }

    /// Writes the hook config: this host's root, one `cuda` rule with the devices, and
    /// `driver_toml` (the `[rule.driver]` table and anything else for the rule).
    fn configure(&self, driver_toml: &str) {
        let devices = if self.devices {
            ["/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/nvidia-uvm"]
                .iter()
                .map(|g| format!("[[rule.device]]\nglob = \"{g}\"\nrequired = true\n"))
                .collect::<String>()
        } else {
            String::new()
        };
        std::fs::write(
            &self.config,
            format!(
                "host_root = \"{root}\"\nclosure_cache = \"{s}/cache\"\nruntime_dir = \"{s}/run\"\n\
                 [[rule]]\nname = \"nvidia\"\nfeatures = [\"cuda\"]\n{devices}{driver_toml}",
                root = self.root.display(),
                s = self.scratch.display(),
            ),
        )
        .unwrap();
    }

    /// `cuda-sandbox-hook explain --features cuda` for this host, as text and as JSON.
    fn explain(&self) -> (String, Value) {
        let hook = workspace_binary("cuda-sandbox-hook");
        let run = |json: bool| {
            let mut cmd = Command::new(&hook);
            cmd.arg("explain")
                .arg("--config")
                .arg(&self.config)
                .args(["--features", "cuda"]);
            if json {
                cmd.arg("--json");
            }
            let out = cmd.output().unwrap();
            assert!(
                out.status.success(),
                "explain failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        };
        let json = serde_json::from_str(&run(true)).unwrap();
        (run(false), json)
    }

    /// Nix with the real hook reading this host's config.
    fn sandbox(&self) -> NixSandbox {
        NixSandbox::with_hook(&workspace_binary("cuda-sandbox-hook"), &self.config)
    }

    /// Builds the fake drivers into the store (a closure of two paths each) and points this
    /// host's `/run/opengl-driver` at the host one. Returns (host, compat) store paths.
    fn install_store_drivers(
        &self,
        host_dir: &Path,
        compat_dir: Option<&Path>,
    ) -> (PathBuf, Option<PathBuf>) {
        let host_arg = host_dir.display().to_string();
        let compat_arg = compat_dir.map(|d| d.display().to_string());
        let mut args = vec![("host", host_arg.as_str())];
        if let Some(c) = &compat_arg {
            args.push(("compat", c.as_str()));
        }
        let build = self
            .sandbox()
            .build(&nix_file("fake-driver-store.nix"), &args, &[]);
        assert!(
            build.ok(),
            "building the fake drivers failed:\n{}",
            build.log
        );
        let named = |part: &str| {
            build
                .out_paths
                .iter()
                .find(|p| p.to_string_lossy().contains(part))
                .cloned()
        };
        let host = named("-fake-nvidia-driver").expect("host driver store path");
        std::fs::create_dir_all(self.root.join("run")).unwrap();
        std::os::unix::fs::symlink(&host, self.root.join("run/opengl-driver")).unwrap();
        (host, named("-fake-cuda-compat"))
    }

    /// Builds the tagged runner derivation finding libcuda through `library_path`.
    fn check(&self, library_path: &str, expect_driver: &str) -> Build {
        let mut sandbox = self.sandbox();
        // Only what the dynamically linked runner needs: everything else comes from the hook.
        sandbox.sandbox_paths = ["/lib", "/lib64"]
            .iter()
            .filter(|p| Path::new(p).exists())
            .map(|p| p.to_string())
            .collect();
        let runner = common::RUNNER;
        sandbox.build(
            &nix_file("driver-choice.nix"),
            &[
                ("runner", runner),
                ("nonce", &nonce()),
                ("libraryPath", library_path),
                ("expectDriver", expect_driver),
            ],
            &[],
        )
    }
}

/// The runner's report from a successful build.
fn report(build: &Build) -> Value {
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    serde_json::from_str(&std::fs::read_to_string(&build.out_paths[0]).unwrap()).unwrap()
}

/// Asserts every GPU check passed (the runtime check is skipped: a driver has no cudart).
fn assert_all_pass(report: &Value) {
    for check in [
        "devices::nodes",
        "driver::library",
        "driver::version",
        "driver::entry_points",
        "kernel::saxpy",
        "nvml::consistency",
    ] {
        assert_eq!(
            report["checks"][check]["verdict"], "pass",
            "{check}: {report:#}"
        );
    }
    assert_eq!(
        report["checks"]["runtime::entry_points"]["verdict"],
        "skipped"
    );
    assert_eq!(report["summary"]["exit_code"], 0);
}

fn message<'a>(report: &'a Value, check: &str) -> &'a str {
    report["checks"][check]["message"]
        .as_str()
        .unwrap_or_default()
}

/// A Jetson-like host: kernel module 470 (CUDA 11.4), the host driver behind the driver link,
/// and a cuda_compat 12.2 store path whose note lists 470. Returns the host and the compat
/// directory (a store path's `compat`).
fn jetson() -> (Host, String) {
    let host = Host::new("470.82.01", true);
    std::fs::create_dir_all(host.root.join("etc")).unwrap();
    std::fs::write(
        host.root.join("etc/nv_tegra_release"),
        "# R32 (release), REVISION: 7.1, GCID: 0, BOARD: t186ref, EABI: aarch64 (FAKE)\n",
    )
    .unwrap();
    let host_files = host.scratch.join("host-driver");
    let on_470 = Sidecar {
        cuda_version: 11040,
        kernel_driver: "470.82.01".into(),
        ..Sidecar::default()
    };
    fake_driver_dir(&host_files, &on_470, &DRIVER_LIBRARIES, "470.82.01", None);
    let compat_files = host.scratch.join("compat");
    let compat_12_2 = Sidecar {
        cuda_version: 12020,
        ..on_470
    };
    fake_driver_dir(
        &compat_files,
        &compat_12_2,
        &[LIBCUDA],
        "535.104.05",
        Some(&[470]),
    );
    let (_, compat) = host.install_store_drivers(&host_files, Some(&compat_files));
    let compat_dir = format!("{}/compat", compat.unwrap().display());
    host.configure(&format!("[rule.driver]\ncompat = [\"{compat_dir}\"]\n"));
    (host, compat_dir)
}

// The tests, one module per tier (docs/testing.md).
mod cli;
mod sandbox;
