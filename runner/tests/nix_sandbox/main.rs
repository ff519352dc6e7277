//! The runner as the builder of a tagged derivation in a real Nix sandbox, with the fake
//! driver and a fake device tree exposed by the real hook; and the same derivation failing,
//! explained, when the hook is not installed. Needs root and `nix-build`; under `CI=true`
//! these tests fail rather than skip when either is missing.

#[path = "../common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};

use common::{report_facts, FakeDriver, RUNNER};
use cuda_sandbox_check::checks::devices::{FeaturesFacts, NodesFacts};
use cuda_sandbox_check::checks::driver::LibraryFacts;
use cuda_sandbox_check::checks::kernel::SaxpyFacts;
use cuda_sandbox_check::checks::package_driver::{DriverFacts, ObjectSearch};
use cuda_sandbox_testkit::{
    builder_sandbox_paths, driver_mount, nix_available, nonce, workspace_binary, FakeHost,
    NixSandbox, NixVersion,
};
use fake_driver::Sidecar;

fn gpu_check_nix() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nix/gpu-check.nix")
}

/// A fake host: one GPU's device nodes under `root/dev`, a fake driver directory, and a hook
/// config that exposes both (the driver at /run/opengl-driver/lib).
struct Host {
    _dir: tempfile::TempDir,
    _driver: FakeDriver,
    config: PathBuf,
}

impl Host {
    fn new() -> Host {
        Host::with_gpus(1, 0)
    }

    /// `gpus` GPU nodes, each build leased `gpus_per_build` of them (0: all), and a fake
    /// driver that, like the real one, sees as many GPUs as the sandbox has nodes.
    fn with_gpus(gpus: u64, gpus_per_build: u32) -> Host {
        Host::playing(
            gpus,
            gpus_per_build,
            Sidecar {
                devices_from_nodes: gpus_per_build > 0,
                ..Sidecar::default()
            },
        )
    }

    /// `gpus` GPU nodes and a fake driver playing `sidecar` (a GPU's compute capability, a
    /// driver's CUDA version).
    fn playing(gpus: u64, gpus_per_build: u32, sidecar: Sidecar) -> Host {
        let driver = FakeDriver::driver(&sidecar);
        let top = format!("gpus_per_build = {gpus_per_build}\n");
        let host = FakeHost::new(gpus, true, &top, &["cuda"], &driver_mount(&driver.dir));
        Host {
            config: host.config.clone(),
            _dir: host.dir,
            _driver: driver,
        }
    }
}

/// A fake AMD host running CUDA through ZLUDA: `/dev/kfd` and one GPU's DRM nodes
/// (`/dev/dri/card0`, `/dev/dri/renderD128`) under `root/dev`, ZLUDA's driver directory as
/// Nixpkgs builds it, and a hook config whose one rule, `zluda`, exposes `/dev/kfd` and the
/// render nodes and mounts the driver at /run/opengl-driver/lib. No `/dev/nvidia*` exists.
struct ZludaHost {
    _dir: tempfile::TempDir,
    _driver: FakeDriver,
    config: PathBuf,
}

impl ZludaHost {
    fn new(sidecar: &Sidecar) -> ZludaHost {
        let driver = FakeDriver::zluda(sidecar);
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("dev/dri")).unwrap();
        // kfd's major is dynamic: the host's own when it has one, else one the kernel leaves
        // to dynamic allocation.
        let kfd_major = std::fs::read_to_string("/proc/devices")
            .ok()
            .and_then(|text| {
                text.lines().find_map(|line| {
                    let (major, name) = line.trim().split_once(' ')?;
                    (name == "kfd").then(|| major.to_owned())
                })
            })
            .unwrap_or_else(|| "235".to_owned());
        for (node, major, minor) in [
            ("kfd", kfd_major.as_str(), "0"),
            ("dri/card0", "226", "0"),
            ("dri/renderD128", "226", "128"),
        ] {
            cuda_sandbox_testkit::run_ok(
                std::process::Command::new("mknod")
                    .arg(root.join("dev").join(node))
                    .args(["c", major, minor]),
            );
        }
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "host_root = \"{root}\"\nclosure_cache = \"{cache}\"\nruntime_dir = \"{run}\"\n\
                 [[rule]]\nname = \"zluda\"\nfeatures = [\"cuda\"]\n\
                 [[rule.device]]\nglob = \"/dev/kfd\"\nrequired = true\n\
                 [[rule.device]]\nglob = \"/dev/dri/renderD*\"\nrequired = true\n{mount}",
                root = root.display(),
                cache = dir.path().join("cache").display(),
                run = dir.path().join("run").display(),
                mount = driver_mount(&driver.dir),
            ),
        )
        .unwrap();
        ZludaHost {
            _dir: dir,
            _driver: driver,
            config,
        }
    }
}

/// What a dynamically linked builder needs from the host, and nothing else.
fn minimal(mut sandbox: NixSandbox) -> NixSandbox {
    sandbox.sandbox_paths = builder_sandbox_paths();
    sandbox
}

fn build(sandbox: &NixSandbox) -> cuda_sandbox_testkit::Build {
    sandbox.build(
        &gpu_check_nix(),
        &[("runner", RUNNER), ("nonce", &nonce())],
        &[],
    )
}

/// A library built like Nixpkgs with `cudaCapabilities = [ "8.0" ]` and cudaForwardCompat by
/// CUDA 12.9 (SASS sm_80, PTX compute_80 of ISA 8.8), in `dir/lib`.
fn ampere_package(dir: &Path) -> Option<PathBuf> {
    let real = cuda_sandbox_testkit::real_nvidia::RealNvidia::find(
        "package_checks_judge_the_package_on_the_gpu_the_fake_driver_plays",
    )?;
    let lib = dir.join("pkg/lib");
    std::fs::create_dir_all(&lib).unwrap();
    cuda_sandbox_testkit::gpu_library::gpu_library_of(
        &real,
        "12.9",
        &lib,
        "libampere",
        &["sm_80"],
        &[("compute_80", "8.8")],
        &[],
    );
    Some(dir.join("pkg"))
}

/// A copy of the runner whose DT_RUNPATH has the driver link, as Nixpkgs builds it
/// (autoAddDriverRunpath), so that a build needs no LD_LIBRARY_PATH.
fn runner_with_driver_link(dir: &Path) -> PathBuf {
    let copy = dir.join("cuda-sandbox-check");
    std::fs::copy(RUNNER, &copy).unwrap();
    cuda_sandbox_testkit::run_ok(
        std::process::Command::new("patchelf")
            .args(["--add-rpath", "/run/opengl-driver/lib"])
            .arg(&copy),
    );
    copy
}

// The tests, one module per tier (docs/testing.md).
mod sandbox;
