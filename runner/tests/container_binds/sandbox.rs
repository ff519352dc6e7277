//! The sandbox tier of these tests (docs/testing.md).

use super::*;

#[test]
fn a_plain_gpu_renders_its_nodes_the_driver_link_and_the_manifest() {
    if !nix_available("a_plain_gpu_renders_its_nodes_the_driver_link_and_the_manifest") {
        return;
    }
    let host = Host::new(1, "", "", &[]);
    let build = host.build(&["a"], 1, "0");
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let rendered = Rendered::read(&build.out_paths[0]);
    rendered.assert_whole(&host);
    let mut devices = rendered.devices();
    devices.sort_unstable();
    assert_eq!(
        devices,
        ["nvidia-uvm", "nvidia0", "nvidiactl"],
        "{rendered:#?}"
    );
}

#[test]
fn a_build_leased_nvidia1_while_another_holds_nvidia0_binds_nvidia1_alone() {
    if !nix_available("a_build_leased_nvidia1_while_another_holds_nvidia0_binds_nvidia1_alone") {
        return;
    }
    let host = Host::new(2, "gpus_per_build = 1\nlease_wait_seconds = 60\n", "", &[]);
    // Two builds at once, each holding its GPU for 5 s after rendering: one gets each GPU.
    let build = host.build(&["a", "b"], 2, "5");
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let rendered: Vec<Rendered> = build.out_paths.iter().map(|o| Rendered::read(o)).collect();
    let mut leased: Vec<Vec<u32>> = rendered
        .iter()
        .map(|r| r.manifest.leased_gpus.clone())
        .collect();
    leased.sort();
    assert_eq!(leased, [[0], [1]], "{rendered:#?}");
    for r in &rendered {
        r.assert_whole(&host);
        let gpu = format!("nvidia{}", r.manifest.leased_gpus[0]);
        let gpus: Vec<&str> = r
            .devices()
            .into_iter()
            .filter(|d| {
                d.strip_prefix("nvidia")
                    .is_some_and(|n| n.parse::<u32>().is_ok())
            })
            .collect();
        assert_eq!(gpus, [gpu.as_str()], "{r:#?}");
    }
}

#[test]
fn a_mig_instance_renders_its_parent_gpu_and_its_own_capability_nodes() {
    if !nix_available("a_mig_instance_renders_its_parent_gpu_and_its_own_capability_nodes") {
        return;
    }
    let host = Host::new(
        1,
        "gpus_per_build = 1\n",
        "[rule.mig]\n",
        &[(0, 1, 0), (0, 2, 0)],
    );
    let build = host.build(&["a"], 1, "0");
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let rendered = Rendered::read(&build.out_paths[0]);
    rendered.assert_whole(&host);
    let mig = rendered
        .manifest
        .mig
        .clone()
        .expect("a leased MIG instance");
    assert_eq!((mig.gpu, mig.ci), (0, 0), "{rendered:#?}");
    let other = if mig.gi == 1 { 2 } else { 1 };
    let devices = rendered.devices();
    for node in [
        "nvidia0".to_string(),
        format!("nvidia-caps/nvidia-cap{}", gi_minor(0, mig.gi)),
        format!("nvidia-caps/nvidia-cap{}", ci_minor(0, mig.gi, 0)),
    ] {
        assert!(devices.contains(&node.as_str()), "{node}: {rendered:#?}");
    }
    for node in [
        format!("nvidia-caps/nvidia-cap{}", gi_minor(0, other)),
        format!("nvidia-caps/nvidia-cap{}", ci_minor(0, other, 0)),
        "nvidia-caps/nvidia-cap1".to_string(),
        "nvidia-caps/nvidia-cap2".to_string(),
    ] {
        assert!(!devices.contains(&node.as_str()), "{node}: {rendered:#?}");
    }
}
