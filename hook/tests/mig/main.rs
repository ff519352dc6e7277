//! MIG on fake hosts: the driver's MIG files under a fake `/proc` and real capability nodes
//! (`mknod`) under a fake `/dev`, judged through `explain`. Needs root (`mknod`); under
//! `CI=true` these tests fail rather than skip without it. The sandboxed builds that lease
//! MIG instances are in `concurrency.rs`.

use cuda_sandbox_hook::config::BUILTIN_TOML;
use cuda_sandbox_testkit::fake_mig::{ci_minor, gi_minor};
use cuda_sandbox_testkit::{exposed_inside, root_available, FakeDevices, FakeMig};
use std::path::{Path, PathBuf};

#[path = "../common/mod.rs"]
mod common;

/// Seven one-slice GPU instances on GPU 0 (as an H200 split 1g × 7), each with CI 0.
const SEVEN: [(u32, u32, u32); 7] = [
    (0, 7, 0),
    (0, 8, 0),
    (0, 9, 0),
    (0, 10, 0),
    (0, 11, 0),
    (0, 12, 0),
    (0, 13, 0),
];

/// A fake host: `gpus` GPU nodes, the MIG `instances`, and a config of the built-in rule
/// without its driver (there is none here, and a missing one would stop the plan before the
/// lease) with `top` keys, rooted there.
struct Host {
    _dir: tempfile::TempDir,
    config: PathBuf,
}

fn host(gpus: u64, instances: &[(u32, u32, u32)], nodes: bool, top: &str) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    FakeDevices::create(&root, gpus, true).unwrap();
    FakeMig::create(&root, instances, nodes).unwrap();
    let config = dir.path().join("config.toml");
    let rule = BUILTIN_TOML.split("[rule.driver]").next().unwrap();
    let text = format!(
        "{top}host_root = \"{}\"\nruntime_dir = \"{}\"\nclosure_cache = \"{}\"\n{rule}",
        root.display(),
        dir.path().join("run").display(),
        dir.path().join("cache").display(),
    );
    std::fs::write(&config, text).unwrap();
    Host { _dir: dir, config }
}

fn exposed(config: &Path) -> Vec<String> {
    exposed_inside(&common::explain_json(config, "cuda"))
}

fn cap(minor: u32) -> String {
    format!("/dev/nvidia-caps/nvidia-cap{minor}")
}

// The tests, one module per tier (docs/testing.md).
mod root;
