//! Real Nix builds in a real sandbox with the freshly built hook as `pre-build-hook` and a fake
//! device tree of real character devices. Needs root and `nix-build`; under `CI=true` these
//! tests fail rather than skip when either is missing.

use cuda_sandbox_testkit::{nix_available, nonce, FakeHost, NixSandbox};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[path = "../common/mod.rs"]
mod common;

use common::{nix_file, HOOK};

/// A fake host: devices under `root/dev`, a closure cache, and a config pointing at them.
struct Host {
    _dir: tempfile::TempDir,
    root: PathBuf,
    config: PathBuf,
}

impl Host {
    fn new(uvm: bool) -> Host {
        let host = FakeHost::new(
            2,
            uvm,
            "",
            &["cuda", "gpu"],
            "[[rule.device]]\nglob = \"/dev/nvidia-uvm-tools\"\n\
             [[rule.path]]\npath = \"/run/opengl-driver\"\nrequired = true\n",
        );
        Host {
            root: host.root.clone(),
            config: host.config.clone(),
            _dir: host.dir,
        }
    }

    fn sandbox(&self) -> NixSandbox {
        let mut s = NixSandbox::with_hook(Path::new(HOOK), &self.config);
        s.system_features = "cuda benchmark".to_string();
        s
    }

    /// Builds the fake driver store path (a closure of three) and links
    /// `root/run/opengl-driver` to it. Returns the closure.
    fn install_store_driver(&self) -> Vec<PathBuf> {
        let build =
            self.sandbox()
                .build(&nix_file("driver-store.nix"), &[("nonce", &nonce())], &[]);
        assert!(
            build.ok(),
            "building the fake driver failed:\n{}",
            build.log
        );
        let driver = build.out_paths[0].clone();
        std::fs::create_dir_all(self.root.join("run")).unwrap();
        std::os::unix::fs::symlink(&driver, self.root.join("run/opengl-driver")).unwrap();
        let closure =
            cuda_sandbox_elfkit::requisites(Path::new("nix-store"), Path::new(&driver)).unwrap();
        assert!(closure.len() >= 3, "closure too small: {closure:?}");
        closure
    }
}

/// Builds probe.nix and returns each probe's report, keyed by derivation name.
fn probe(
    sandbox: &NixSandbox,
    read: &[PathBuf],
    attrs: &[&str],
) -> (bool, String, BTreeMap<String, String>) {
    let read: Vec<String> = read.iter().map(|p| p.display().to_string()).collect();
    let read = read.join(" ");
    let nonce = nonce();
    let mut extra = Vec::new();
    for a in attrs {
        extra.push("-A");
        extra.push(a);
    }
    let build = sandbox.build(
        &nix_file("probe.nix"),
        &[("nonce", &nonce), ("readPaths", &read)],
        &extra,
    );
    let mut reports = BTreeMap::new();
    for out in &build.out_paths {
        let name = out.file_name().unwrap().to_string_lossy();
        let name = name.split_once('-').unwrap().1.to_string();
        // A report quotes the first bytes of each driver file, which may be ELF.
        let report = String::from_utf8_lossy(&std::fs::read(out).unwrap()).into_owned();
        reports.insert(name, report);
    }
    (build.ok(), build.log, reports)
}

/// A fake host whose driver link holds the fake driver named `libcuda.so.535.104.05` while
/// the kernel module `kernel` is loaded; the rule configures the driver.
fn driver_host(kernel: &str) -> FakeHost {
    let host = FakeHost::new(1, true, "", &["cuda"], "[rule.driver]\ncompat = []\n");
    std::fs::create_dir_all(host.root.join("proc/driver/nvidia")).unwrap();
    std::fs::write(
        host.root.join("proc/driver/nvidia/version"),
        format!("NVRM version: NVIDIA UNIX x86_64 Kernel Module  {kernel}  (FAKE)\n"),
    )
    .unwrap();
    cuda_sandbox_testkit::run_ok(
        std::process::Command::new(cuda_sandbox_testkit::workspace_binary("make-fake-driver"))
            .arg(host.root.join("run/opengl-driver/lib"))
            .args(["--libcuda-version", "535.104.05"]),
    );
    host
}

// The tests, one module per tier (docs/testing.md).
mod sandbox;
