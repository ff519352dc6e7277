//! The root tier of these tests (docs/testing.md).

use super::*;

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
