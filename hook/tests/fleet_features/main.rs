//! A mixed host through the real Nix sandbox: GPUs of two capabilities (an 8.9 as
//! `/dev/nvidia0`, a 9.0 as `/dev/nvidia1`; real character devices), their
//! `/proc/driver/nvidia/gpus` and `/sys/bus/pci/devices` entries ([`FakePci`]) and a GPU
//! inventory in the schema `cuda-sandbox-check inventory` writes. A build requiring
//! `cuda-sm-90a` is leased the 9.0, and waits for it while another holds it though the 8.9 is
//! free; a build neither GPU satisfies fails at once in one line; an inventory entry that no
//! longer matches the host is "no inventory". Needs root and `nix-build`; under `CI=true`
//! these tests fail rather than skip when either is missing.

use cuda_sandbox_testkit::{hook_config, nix_available, nonce, FakeDevices, FakePci, NixSandbox};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;

use common::{nix_file, HOOK};

/// One test at a time: each times its builds, and builds of one host share its leases.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// What the builder advertises: the union of an 8.9 and a 9.0, and `cuda-sm-100a`, which
/// neither has (a lying advertisement, so that Nix hands the hook such a build).
const SYSTEM_FEATURES: &str = "cuda cuda-sm-89 cuda-sm-90 cuda-sm-90a cuda-sm-100a";

/// The host: GPU `i` is `/dev/nvidia<i>` at [`FakePci::gpu`]`(i)`.
struct Host {
    dir: tempfile::TempDir,
    root: PathBuf,
    config: PathBuf,
}

impl Host {
    /// The mixed host with a config of `top` (`gpus_per_build`, …) and a matching inventory.
    fn new(top: &str) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        FakeDevices::create(&root, 2, true).unwrap();
        FakePci::create(&root, 2).unwrap();
        let config = dir.path().join("config.toml");
        std::fs::write(&config, hook_config(&root, dir.path(), top, &["cuda"], "")).unwrap();
        let host = Host { dir, root, config };
        host.write_inventory(&["8.9", "9.0"]);
        host
    }

    fn run_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    /// Writes the inventory, GPU `i` of capability `capabilities[i]`.
    fn write_inventory(&self, capabilities: &[&str]) {
        common::write_inventory(&self.run_dir(), capabilities);
    }

    fn sandbox(&self, max_jobs: usize) -> NixSandbox {
        let mut s = NixSandbox::with_hook(Path::new(HOOK), &self.config);
        s.system_features = SYSTEM_FEATURES.to_string();
        s.extra_settings.push(format!("max-jobs = {max_jobs}"));
        s
    }

    /// Builds `count` derivations of concurrent.nix requiring `features`, at once, each
    /// sleeping `sleep` seconds. Returns success, the log and each build's report.
    fn build(&self, features: &str, count: usize, sleep: &str) -> (bool, String, Vec<Report>) {
        self.build_with(features, count, sleep, &[])
    }

    /// As [`Host::build`], with `extra` arguments to nix-build.
    fn build_with(
        &self,
        features: &str,
        count: usize,
        sleep: &str,
        extra: &[&str],
    ) -> (bool, String, Vec<Report>) {
        let count_text = count.to_string();
        let build = self.sandbox(count).build(
            &nix_file("concurrent.nix"),
            &[
                ("nonce", &nonce()),
                ("count", &count_text),
                ("features", features),
                ("sleep", sleep),
                ("prefix", "fleet"),
            ],
            extra,
        );
        let reports = build
            .out_paths
            .iter()
            .map(|out| Report::of(&std::fs::read_to_string(out).unwrap()))
            .collect();
        (build.ok(), build.log, reports)
    }
}

/// What one build of concurrent.nix saw: its GPU nodes and when it ran.
#[derive(Debug)]
struct Report {
    gpus: Vec<String>,
    start: f64,
    end: f64,
}

impl Report {
    fn of(text: &str) -> Report {
        let time = |key: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap_or_else(|| panic!("no {key:?} line in:\n{text}"))
                .trim()
                .parse()
                .unwrap()
        };
        Report {
            gpus: text
                .lines()
                .filter_map(|l| l.strip_prefix("char /dev/"))
                .filter(|d| {
                    d.strip_prefix("nvidia")
                        .is_some_and(|n| n.parse::<u32>().is_ok())
                })
                .map(str::to_string)
                .collect(),
            start: time("start "),
            end: time("end "),
        }
    }
}

fn ready(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    if !nix_available(test) {
        return None;
    }
    Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

// The tests, one module per tier (docs/testing.md).
mod sandbox;
