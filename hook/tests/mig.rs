//! MIG on fake hosts: the driver's MIG files under a fake `/proc` and real capability nodes
//! (`mknod`) under a fake `/dev`, judged through `explain`. Needs root (`mknod`); under
//! `CI=true` these tests fail rather than skip without it. The sandboxed builds that lease
//! MIG instances are in `concurrency.rs`.

use cuda_sandbox_hook::config::BUILTIN_TOML;
use cuda_sandbox_testkit::fake_mig::{ci_minor, gi_minor};
use cuda_sandbox_testkit::{root_available, FakeDevices, FakeMig};
use std::path::{Path, PathBuf};

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
    let json = common::explain_json(config, "cuda");
    json["plan"]["exposures"]
        .as_array()
        .unwrap_or_else(|| panic!("no exposures in {json}"))
        .iter()
        .map(|e| e["inside"].as_str().unwrap().to_string())
        .collect()
}

fn cap(minor: u32) -> String {
    format!("/dev/nvidia-caps/nvidia-cap{minor}")
}

#[test]
fn the_builtin_rule_gives_every_instance_but_never_config_or_monitor() {
    if !root_available("the_builtin_rule_gives_every_instance_but_never_config_or_monitor") {
        return;
    }
    let h = host(1, &SEVEN, true, "");
    let exposed = exposed(&h.config);
    for (gpu, gi, ci) in SEVEN {
        for node in [cap(gi_minor(gpu, gi)), cap(ci_minor(gpu, gi, ci))] {
            assert!(exposed.contains(&node), "{node} missing: {exposed:?}");
        }
    }
    for admin in [cap(1), cap(2)] {
        assert!(!exposed.contains(&admin), "{admin} exposed: {exposed:?}");
    }
    assert!(
        !exposed.iter().any(|e| e == "/dev/nvidia-caps"),
        "{exposed:?}"
    );
}

#[test]
fn a_rule_naming_the_config_capability_gets_it() {
    if !root_available("a_rule_naming_the_config_capability_gets_it") {
        return;
    }
    let h = host(1, &SEVEN[..1], true, "");
    let text = std::fs::read_to_string(&h.config)
        .unwrap()
        .replace("[rule.mig]\n", "[rule.mig]\nconfig = true\n");
    std::fs::write(&h.config, text).unwrap();
    let exposed = exposed(&h.config);
    assert!(exposed.contains(&cap(1)), "{exposed:?}");
    assert!(!exposed.contains(&cap(2)), "{exposed:?}");
}

#[test]
fn with_leases_a_build_is_shown_one_instance_and_its_nodes_only() {
    if !root_available("with_leases_a_build_is_shown_one_instance_and_its_nodes_only") {
        return;
    }
    let h = host(1, &SEVEN, true, "gpus_per_build = 1\n");
    let exposed = exposed(&h.config);
    let caps: Vec<&String> = exposed
        .iter()
        .filter(|e| e.starts_with("/dev/nvidia-caps/"))
        .collect();
    assert_eq!(
        caps,
        [&cap(gi_minor(0, 7)), &cap(ci_minor(0, 7, 0))],
        "{exposed:?}"
    );
    assert!(exposed.contains(&"/dev/nvidia0".to_string()), "{exposed:?}");
    let text = common::explain_output(&h.config, "cuda", false);
    assert!(
        text.contains("nvidia0 MIG instance gi7 ci0 (one MIG instance per build)"),
        "{text}"
    );
    assert!(text.contains("another build's MIG instance"), "{text}");
}

#[test]
fn a_gpu_without_mig_is_leased_whole_beside_a_split_one() {
    if !root_available("a_gpu_without_mig_is_leased_whole_beside_a_split_one") {
        return;
    }
    // GPU 0 is split, GPU 1 is whole; the build shown gets GPU 1 (the first free slot) and
    // no capability node, so no MIG instance.
    let h = host(2, &SEVEN, true, "gpus_per_build = 1\n");
    let exposed = exposed(&h.config);
    assert!(exposed.contains(&"/dev/nvidia1".to_string()), "{exposed:?}");
    assert!(
        !exposed.contains(&"/dev/nvidia0".to_string()),
        "{exposed:?}"
    );
    assert!(
        !exposed.iter().any(|e| e.starts_with("/dev/nvidia-caps")),
        "{exposed:?}"
    );
}

#[test]
fn a_missing_capability_node_is_a_problem_with_the_fix() {
    if !root_available("a_missing_capability_node_is_a_problem_with_the_fix") {
        return;
    }
    let h = host(1, &SEVEN[..1], false, "");
    let json = common::explain_json(&h.config, "cuda");
    let problems = json["plan"]["problems"].to_string();
    assert!(
        problems.contains("nvidia-cap66 is missing")
            && problems.contains(
                "nvidia-modprobe -f /proc/driver/nvidia/capabilities/gpu0/mig/gi7/access"
            ),
        "{problems}"
    );
}
