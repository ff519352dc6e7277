//! `cuda-sandbox-check container-binds` inside real tagged builds on fake hosts: the
//! systemd-nspawn binds a NixOS test container started in that build would get, rendered from
//! the manifest the real hook wrote for it, for a plain GPU, a leased `nvidia1` and a MIG
//! instance. The driver is a store path behind the host's `/run/opengl-driver`, as on NixOS.
//! Those need root and `nix-build`; under `CI=true` they fail rather than skip when either is
//! missing. The cli tier runs the built runner on a saved `/run` of its own making.

#[path = "../common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{FakeDriver, RUNNER};
use cuda_sandbox_manifest::Manifest;
use cuda_sandbox_testkit::fake_mig::{ci_minor, gi_minor};
use cuda_sandbox_testkit::{
    hook_config, nix_available, nonce, run_ok, workspace_binary, Build, FakeDevices, FakeMig,
    NixSandbox, NixVersion,
};
use fake_driver::Sidecar;

fn nix_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/nix")
        .join(name)
}

/// A fake host: GPU nodes, the kernel module's version, a FAKE driver as a store path behind
/// `root/run/opengl-driver`, and a hook config with the default rule's `[rule.driver]`.
struct Host {
    _temp: tempfile::TempDir,
    _driver: FakeDriver,
    config: PathBuf,
    /// The driver's store path and its closure (`nix-store --query --requisites`).
    closure: Vec<String>,
}

impl Host {
    /// `gpus` GPUs, `top` top-level config lines, `rule` more of the rule, and MIG compute
    /// instances `mig` (GPU, GI, CI) with their capability nodes.
    fn new(gpus: u64, top: &str, rule: &str, mig: &[(u32, u32, u32)]) -> Host {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().join("root");
        FakeDevices::create(&root, gpus, true).unwrap();
        if !mig.is_empty() {
            FakeMig::create(&root, mig, true).unwrap();
        }
        let proc = root.join("proc/driver/nvidia");
        std::fs::create_dir_all(&proc).unwrap();
        std::fs::write(
            proc.join("version"),
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  (FAKE)\n",
        )
        .unwrap();
        let config = temp.path().join("config.toml");
        let rule = format!("[rule.driver]\n{rule}");
        std::fs::write(
            &config,
            hook_config(&root, temp.path(), top, &["cuda"], &rule),
        )
        .unwrap();
        let driver = FakeDriver::driver(&Sidecar::default());
        let built = NixSandbox::without_hook().build(
            &nix_file("fake-driver-store.nix"),
            &[("host", driver.dir.to_str().unwrap())],
            &[],
        );
        assert!(
            built.ok(),
            "building the fake driver failed:\n{}",
            built.log
        );
        let store_driver = &built.out_paths[0];
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::os::unix::fs::symlink(store_driver, root.join("run/opengl-driver")).unwrap();
        let requisites = run_ok(
            Command::new("nix-store")
                .args(["--query", "--requisites"])
                .arg(store_driver),
        );
        let closure = String::from_utf8(requisites.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        Host {
            _temp: temp,
            _driver: driver,
            config,
            closure,
        }
    }

    /// Nix with the real hook reading this host's config.
    fn sandbox(&self) -> NixSandbox {
        NixSandbox::with_hook(&workspace_binary("cuda-sandbox-hook"), &self.config)
    }

    /// Builds container-binds.nix's `attrs` (one job each, `max_jobs` at once) with the real
    /// hook, each build sleeping `sleep` seconds after rendering.
    fn build(&self, attrs: &[&str], max_jobs: usize, sleep: &str) -> Build {
        let mut sandbox = self.sandbox();
        sandbox
            .extra_settings
            .push(format!("max-jobs = {max_jobs}"));
        let closure = self.closure.join(" ");
        let mut extra = Vec::new();
        for attr in attrs {
            extra.extend(["-A", attr]);
        }
        sandbox.build(
            &nix_file("container-binds.nix"),
            &[
                ("runner", RUNNER),
                ("nonce", &nonce()),
                ("closure", &closure),
                ("sleep", sleep),
            ],
            &extra,
        )
    }
}

/// What one build rendered.
#[derive(Debug)]
struct Rendered {
    manifest: Manifest,
    binds: Vec<String>,
    sources: Vec<String>,
    closure: Vec<String>,
}

impl Rendered {
    fn read(out: &Path) -> Rendered {
        let lines = |name: &str| -> Vec<String> {
            std::fs::read_to_string(out.join(name))
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect()
        };
        Rendered {
            manifest: Manifest::read(&out.join("manifest.json")).unwrap(),
            binds: lines("binds"),
            sources: lines("sources"),
            closure: lines("closure"),
        }
    }

    /// The device nodes bound into the container.
    fn devices(&self) -> Vec<&str> {
        self.binds
            .iter()
            .filter_map(|b| b.strip_prefix("--bind=/dev/"))
            .map(|b| b.split_once(':').map_or(b, |(source, _)| source))
            .collect()
    }

    /// Holds what every build must render: each device of the manifest read-write at its
    /// place, the driver link read-only, the manifest read-only, nothing else; each source a
    /// character device, the driver link's directory and a file as this build saw them; and
    /// the driver's whole closure present for the container's recursive `/nix/store` bind.
    fn assert_whole(&self, host: &Host) {
        let mut expected: Vec<String> = self
            .manifest
            .devices
            .iter()
            .map(|d| format!("--bind={d}:{d}"))
            .collect();
        expected.push("--bind-ro=/run/opengl-driver:/run/opengl-driver".into());
        expected.push(
            "--bind-ro=/run/cuda-sandbox/manifest.json:/run/cuda-sandbox/manifest.json".into(),
        );
        assert_eq!(self.binds, expected, "{self:#?}");
        let mut types: Vec<String> = self
            .manifest
            .devices
            .iter()
            .map(|d| format!("character special file {d}"))
            .collect();
        types.push("directory /run/opengl-driver".into());
        types.push("regular file /run/cuda-sandbox/manifest.json".into());
        assert_eq!(self.sources, types, "{self:#?}");
        assert_eq!(self.closure, host.closure, "{self:#?}");
        assert!(host.closure.len() >= 2, "{:?}", host.closure);
    }
}

// The tests, one module per tier (docs/testing.md).
mod cli;
mod nix_versions;
mod sandbox;
