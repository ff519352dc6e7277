//! The root tier of these tests (docs/testing.md).

use super::*;

#[test]
fn the_cdi_projects_test_specs_expose_what_they_list() {
    if !root_available("the_cdi_projects_test_specs_expose_what_they_list")
        || !testdata_available("the_cdi_projects_test_specs_expose_what_they_list")
    {
        return;
    }
    let h = Host::new();
    let read = |f: &str| std::fs::read_to_string(Path::new(CDI_TESTDATA).join(f)).unwrap();
    // Both good specs define vendor.com/device=myDevice: the higher directory's wins. The bad
    // ones are reported and change nothing.
    h.spec("low", "minimal.json", &read("good/minimal.json"));
    h.spec("high", "spec-example.json", &read("good/spec-example.json"));
    h.spec("high", "empty.json", &read("bad/empty.json"));
    h.spec(
        "high",
        "explicit-empty.json",
        &read("bad/explicit-empty.json"),
    );
    h.node("vendorroot/dev/card1", 226, 1);
    h.node("dev/card2", 226, 2);
    h.node("dev/vendorctl", 240, 0);
    let lib = h.file("usr/lib/libVendor.so.0", Some("libVendor.so.0"));
    h.file("bin/vendorBin", None);
    let config = h.config(&["vendor.com/device=myDevice"], "");

    let e = common::explain_json(&config, "cuda");
    assert!(
        e["plan"]["problems"].as_array().unwrap().is_empty(),
        "{e:#}"
    );
    let root = h.root();
    for (inside, outside) in [
        ("/dev/card1", root.join("vendorroot/dev/card1")),
        ("/dev/card2", root.join("dev/card2")),
        ("/dev/vendorctl", root.join("dev/vendorctl")),
    ] {
        assert_eq!(
            exposed(&e, inside, &outside),
            Some(("cdi".into(), "device-node".into())),
            "{inside}: {e:#}"
        );
    }
    assert_eq!(
        exposed(&e, "/run/opengl-driver/lib/libVendor.so.0", &lib),
        Some(("cdi".into(), "library".into()))
    );
    assert!(
        skipped_why(&e, "/bin/vendorBin").contains("FHS program"),
        "{e:#}"
    );
    let not_done = not_carried_out(&e);
    for want in [
        "FOO=CDI_SPEC",
        "BAR=BARVALUE1",
        "vendor-hook",
        "startContainer",
        "/dev/vendorctl",
    ] {
        assert!(
            not_done.iter().any(|n| n.contains(want)),
            "{want} not listed: {not_done:#?}"
        );
    }
    let errors = e["plan"]["skipped"].to_string();
    assert!(
        errors.contains("empty.json") && errors.contains("explicit-empty.json"),
        "{errors}"
    );

    let text = common::explain_output(&config, "cuda", false);
    assert!(text.contains("not carried out (5):"), "{text}");
    assert!(
        text.contains("CDI vendor.com/device=myDevice: env FOO=CDI_SPEC"),
        "{text}"
    );

    let (answer, manifest) = h.hook(&config);
    assert!(
        answer.contains(&format!(
            "/dev/card1={}",
            root.join("vendorroot/dev/card1").display()
        )),
        "{answer}"
    );
    assert!(!answer.contains("vendorBin"), "{answer}");
    assert_eq!(
        manifest.devices,
        ["/dev/card1", "/dev/card2", "/dev/vendorctl"]
    );

    // The lower directory's spec alone: the minimal one.
    std::fs::remove_file(h.path("specs/high/spec-example.json")).unwrap();
    let e = common::explain_json(&config, "cuda");
    assert!(exposed(&e, "/dev/card1", &root.join("dev/card1")).is_none());
    let problems = e["plan"]["problems"].to_string();
    assert!(problems.contains("device node /dev/card1"), "{problems}");
}

#[test]
fn an_nvidia_ctk_gpu_host_spec_gives_devices_libraries_and_the_driver_in_json_and_yaml() {
    if !root_available(
        "an_nvidia_ctk_gpu_host_spec_gives_devices_libraries_and_the_driver_in_json_and_yaml",
    ) {
        return;
    }
    let mut plans = Vec::new();
    for name in ["gpu-host.yaml", "gpu-host.json"] {
        let h = Host::new();
        h.spec("high", name, &fixture(name));
        h.nvidia_nodes();
        let libcuda = h.file(
            &format!("{LIBDIR}/libcuda.so.550.54.14"),
            Some("libcuda.so.1"),
        );
        let nvml = h.file(
            &format!("{LIBDIR}/libnvidia-ml.so.550.54.14"),
            Some("libnvidia-ml.so.1"),
        );
        let cuvid = h.file(
            &format!("{LIBDIR}/libnvcuvid.so.550.54.14"),
            Some("libnvcuvid.so.1"),
        );
        h.file(&format!("{LIBDIR}/libc.so.6"), Some("libc.so.6"));
        let icd = h.file("usr/share/vulkan/icd.d/nvidia_icd.json", None);
        h.file("usr/bin/nvidia-smi", None);
        let config = h.config(&["nvidia.com/gpu=all"], "[rule.driver]\ncompat = []\n");
        let e = common::explain_json(&config, "cuda");
        assert!(
            e["plan"]["problems"].as_array().unwrap().is_empty(),
            "{e:#}"
        );
        let root = h.root();
        for node in ["nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"] {
            let inside = format!("/dev/{node}");
            assert!(
                exposed(&e, &inside, &root.join(&inside[1..])).is_some(),
                "{inside}"
            );
        }
        let spec = h.path(&format!("specs/high/{name}"));
        for (inside, outside, capability) in [
            ("libcuda.so.1", &libcuda, "compute"),
            ("libcuda.so.550.54.14", &libcuda, "compute"),
            ("libnvidia-ml.so.1", &nvml, "utility"),
            ("libnvcuvid.so.1", &cuvid, "video"),
        ] {
            let inside = format!("/run/opengl-driver/lib/{inside}");
            let from_spec = format!(
                "host-library ({capability}) from CDI spec {}",
                spec.display()
            );
            assert_eq!(
                exposed(&e, &inside, outside),
                Some(("driver".into(), from_spec)),
                "{inside}: {e:#}"
            );
        }
        // create-symlinks' libcuda.so, and the ICD file under the link's share.
        assert_eq!(
            exposed(&e, "/run/opengl-driver/lib/libcuda.so", &libcuda),
            Some(("cdi".into(), "link".into()))
        );
        assert_eq!(
            exposed(
                &e,
                "/run/opengl-driver/share/vulkan/icd.d/nvidia_icd.json",
                &icd
            ),
            Some(("cdi".into(), "data-file".into()))
        );
        assert!(skipped_why(&e, "/usr/bin/nvidia-smi").contains("FHS program"));
        assert!(
            skipped_why(&e, &format!("/{LIBDIR}/libc.so.6")).contains("C/C++ runtime"),
            "{e:#}"
        );
        for x in exposures(&e) {
            assert!(
                !x.0.contains("libc.so") && !x.1.contains("libc.so"),
                "{x:?}"
            );
        }
        let not_done = not_carried_out(&e);
        for want in [
            "NVIDIA_VISIBLE_DEVICES=void",
            "update-ldcache",
            "mount-options",
        ] {
            assert!(
                not_done.iter().any(|n| n.contains(want)),
                "{want}: {not_done:#?}"
            );
        }
        let driver = &e["plan"]["driver"];
        assert_eq!(driver["kind"], "host", "{driver:#}");
        assert_eq!(driver["cuda_version"], "12.4", "{driver:#}");

        let (answer, manifest) = h.hook(&config);
        assert!(
            answer.contains("/run/opengl-driver/lib/libcuda.so.1="),
            "{answer}"
        );
        assert_eq!(manifest.driver.kind, DriverKind::Host);
        assert!(manifest.devices.contains(&"/dev/nvidia0".to_string()));
        // The same plan from either format, but for where the spec is.
        let text = serde_json::to_string(&e["plan"]["exposures"])
            .unwrap()
            .replace(&h.dir.path().display().to_string(), "")
            .replace(name, "SPEC");
        plans.push(text);
    }
    assert_eq!(plans[0], plans[1]);
}

#[test]
fn a_spec_host_driver_gives_way_to_a_newer_compat_driver() {
    if !root_available("a_spec_host_driver_gives_way_to_a_newer_compat_driver") {
        return;
    }
    let h = Host::new();
    h.spec("high", "gpu-host.yaml", &fixture("gpu-host.yaml"));
    h.nvidia_nodes();
    h.file(
        &format!("{LIBDIR}/libcuda.so.550.54.14"),
        Some("libcuda.so.1"),
    );
    let compat = h.root().join("usr/local/cuda-12.8/compat");
    let compat_cuda = h.file(
        &compat.join("libcuda.so.570.86.10").display().to_string(),
        Some("libcuda.so.1"),
    );
    cuda_sandbox_testkit::add_compat_note(
        &compat_cuda,
        r#"{"cuda_version":"12.8","kernel_driver_branches":["550"]}"#,
    )
    .unwrap();
    std::os::unix::fs::symlink("libcuda.so.570.86.10", compat.join("libcuda.so.1")).unwrap();
    std::fs::create_dir_all(h.root().join("proc/driver/nvidia")).unwrap();
    std::fs::write(
        h.root().join("proc/driver/nvidia/version"),
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Jan 1 (FAKE)\n",
    )
    .unwrap();
    let config = h.config(
        &["nvidia.com/gpu=0"],
        "[rule.driver]\ncompat = [\"/usr/local/cuda*/compat\"]\n",
    );
    let e = common::explain_json(&config, "cuda");
    let driver = &e["plan"]["driver"];
    assert_eq!(driver["kind"], "compat", "{driver:#}");
    assert_eq!(
        exposed(
            &e,
            "/run/opengl-driver/lib/libcuda.so.1",
            &compat.join("libcuda.so.1")
        ),
        Some(("driver".into(), "compat-at-driver-link".into())),
        "{e:#}"
    );
    let libcuda = h.root().join(LIBDIR).join("libcuda.so.550.54.14");
    assert!(skipped_why(&e, &libcuda.display().to_string()).contains("replaced by the compat"));
}

#[test]
fn a_mig_device_gets_its_gpu_and_its_capability_nodes_under_either_name() {
    if !root_available("a_mig_device_gets_its_gpu_and_its_capability_nodes_under_either_name") {
        return;
    }
    let h = Host::new();
    h.spec("high", "mig.yaml", &fixture("mig.yaml"));
    h.nvidia_nodes();
    h.node("dev/nvidia-caps/nvidia-cap21", 511, 21);
    h.node("dev/nvidia-caps/nvidia-cap22", 511, 22);
    h.node("dev/nvidia-caps/nvidia-cap1", 511, 1);
    for name in [
        "nvidia.com/gpu=0:0",
        "nvidia.com/gpu=MIG-a4d2e8b9-5b1f-5c3d-8f2a-3a1c0e7b9d11",
    ] {
        let config = h.config(&[name], "");
        let (_, manifest) = h.hook(&config);
        assert_eq!(
            manifest.devices,
            [
                "/dev/nvidia-caps/nvidia-cap21",
                "/dev/nvidia-caps/nvidia-cap22",
                "/dev/nvidia-uvm",
                "/dev/nvidia0",
                "/dev/nvidiactl",
            ],
            "{name}"
        );
    }
    let config = h.config(&["nvidia.com/gpu=1:0"], "");
    let e = common::explain_json(&config, "cuda");
    let problems = e["plan"]["problems"].to_string();
    assert!(
        problems.contains("defines nvidia.com/gpu=1:0"),
        "{problems}"
    );
}

#[test]
fn a_nixos_spec_brings_store_closures_and_leaves_fhs_programs_out() {
    if !root_available("a_nixos_spec_brings_store_closures_and_leaves_fhs_programs_out") {
        return;
    }
    let h = Host::new();
    h.spec(
        "high",
        "nvidia-container-toolkit.json",
        &fixture("nixos.json"),
    );
    h.nvidia_nodes();
    let driver = h.path("store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-nvidia-x11-550.54.14");
    let libcuda = h.file(
        &driver
            .join("lib/libcuda.so.550.54.14")
            .display()
            .to_string(),
        Some("libcuda.so.1"),
    );
    h.file(
        &h.path("store/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-nvidia-x11-550.54.14-bin/bin/nvidia-smi")
            .display()
            .to_string(),
        None,
    );
    // No driver link on this host: the spec's libraries are bound at the link's place.
    let config = h.config(&["nvidia.com/gpu=all"], "[rule.driver]\ncompat = []\n");
    let e = common::explain_json(&config, "cuda");
    assert!(
        e["plan"]["problems"].as_array().unwrap().is_empty(),
        "{e:#}"
    );
    assert!(
        exposed(&e, "/run/opengl-driver/lib/libcuda.so.1", &libcuda).is_some(),
        "{e:#}"
    );
    assert!(skipped_why(&e, "/usr/bin/nvidia-smi").contains("FHS program"));
    // The store path's closure comes with it.
    assert_eq!(
        exposed(&e, &driver.display().to_string(), &driver),
        Some(("closure-member".into(), String::new())),
        "{e:#}"
    );
    assert!(not_carried_out(&e)
        .iter()
        .any(|n| n.contains("update-ldcache")));
}

#[test]
fn untrusted_spec_directories_give_nothing() {
    if !root_available("untrusted_spec_directories_give_nothing") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let h = Host::new();
    h.spec("high", "gpu-host.yaml", &fixture("gpu-host.yaml"));
    h.nvidia_nodes();
    std::fs::set_permissions(h.path("specs/high"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let config = h.config(&["nvidia.com/gpu=all"], "");
    let e = common::explain_json(&config, "cuda");
    assert!(exposures(&e).iter().all(|x| x.2 != "cdi"), "{e:#}");
    assert!(e["plan"]["skipped"]
        .to_string()
        .contains("writable by group or others"));
    assert!(e["verdict"].as_str().unwrap().starts_with("FAILS"), "{e:#}");
}

#[test]
fn with_gpus_per_build_a_cdi_rule_leases_one_gpu_of_those_its_spec_lists() {
    if !root_available("with_gpus_per_build_a_cdi_rule_leases_one_gpu_of_those_its_spec_lists") {
        return;
    }
    let h = Host::new();
    h.spec(
        "high",
        "two.yaml",
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n\
         - name: all\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n    - path: /dev/nvidia1\n\
         containerEdits:\n  deviceNodes:\n  - path: /dev/nvidiactl\n",
    );
    h.nvidia_nodes();
    h.node("dev/nvidia1", 195, 1);
    let config = h.config(&["nvidia.com/gpu=all"], "");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("gpus_per_build = 1\n{text}")).unwrap();
    let (answer, manifest) = h.hook(&config);
    assert_eq!(manifest.leased_gpus.len(), 1, "{manifest:?}");
    let gpus: Vec<&String> = manifest
        .devices
        .iter()
        .filter(|d| d.starts_with("/dev/nvidia") && d[11..].bytes().all(|b| b.is_ascii_digit()))
        .collect();
    assert_eq!(gpus.len(), 1, "{manifest:?}");
    assert!(answer.contains("/dev/nvidiactl="), "{answer}");
}

#[test]
fn the_spec_nixos_generates_in_run_cdi_gives_the_modules_rule_its_nodes_and_driver() {
    let name = "the_spec_nixos_generates_in_run_cdi_gives_the_modules_rule_its_nodes_and_driver";
    if !root_available(name) {
        return;
    }
    let h = Host::new();
    h.nvidia_nodes();
    h.node("dev/nvidia1", 195, 1);
    h.node("dev/nvidia-modeset", 195, 254);
    let store = h.path("store");
    let driver = store.join("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-nvidia-x11-550.54.14");
    let driver_bin = store.join("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-nvidia-x11-550.54.14-bin");
    let lib = |file: &str, soname: &str| {
        h.file(
            &driver.join("lib").join(file).display().to_string(),
            Some(soname),
        )
    };
    let libcuda = lib("libcuda.so.550.54.14", "libcuda.so.1");
    let nvml = lib("libnvidia-ml.so.550.54.14", "libnvidia-ml.so.1");
    h.file(
        &driver_bin.join("bin/nvidia-smi").display().to_string(),
        None,
    );
    let spec = nixos_toolkit_spec(&h, &driver, &driver_bin);
    let config = nixos_cdi_config(&h, Some(&store), true);

    let hook = with_private_run_cdi(h.dir.path(), Path::new(HOOK), Some(&spec));
    let e = explain_through(&hook, &config);
    assert!(
        e["plan"]["problems"].as_array().unwrap().is_empty(),
        "{e:#}"
    );
    let root = h.root();
    for node in [
        "nvidia0",
        "nvidia1",
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
        "nvidia-modeset",
    ] {
        let inside = format!("/dev/{node}");
        assert_eq!(
            exposed(&e, &inside, &root.join(&inside[1..])),
            Some(("cdi".into(), "device-node".into())),
            "{inside}: {e:#}"
        );
    }
    // No driver link on this host: the spec's libraries are the host driver, bound at the
    // link under their file names and sonames; the spec found in /run/cdi (or /var/run/cdi,
    // where that is a link to /run: one directory, read once).
    let from_spec = |capability: &str| {
        let found = e["plan"]["exposures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["inside"] == "/run/opengl-driver/lib/libcuda.so.1")
            .map(|x| x["reason"]["source"].as_str().unwrap_or("").to_string())
            .unwrap_or_default();
        assert!(
            found.starts_with(&format!("host-library ({capability}) from CDI spec "))
                && found.ends_with("/run/cdi/nvidia-container-toolkit.json"),
            "{found}: {e:#}"
        );
    };
    from_spec("compute");
    for (inside, outside) in [
        ("/run/opengl-driver/lib/libcuda.so.1", &libcuda),
        ("/run/opengl-driver/lib/libcuda.so.550.54.14", &libcuda),
        ("/run/opengl-driver/lib/libnvidia-ml.so.1", &nvml),
    ] {
        assert!(
            exposed(&e, inside, outside).is_some_and(|(k, _)| k == "driver"),
            "{inside}: {e:#}"
        );
    }
    assert_eq!(e["plan"]["driver"]["kind"], "host", "{e:#}");
    assert!(skipped_why(&e, "/usr/bin/nvidia-smi").contains("FHS program"));
    let not_done = not_carried_out(&e);
    for want in [
        "NVIDIA_VISIBLE_DEVICES=void",
        "update-ldcache",
        "enable-cuda-compat",
        "rprivate",
    ] {
        assert!(
            not_done.iter().any(|n| n.contains(want)),
            "{want}: {not_done:#?}"
        );
    }

    // Before the unit has run: /run/cdi is empty, and the tagged build fails naming the unit.
    let hook = with_private_run_cdi(h.dir.path(), Path::new(HOOK), None);
    let e = explain_through(&hook, &config);
    assert!(e["verdict"].as_str().unwrap().starts_with("FAILS"), "{e:#}");
    // (The driver, which came from the spec, is missing too: a second problem.)
    let problems = e["plan"]["problems"].as_array().unwrap();
    let missing = problems
        .iter()
        .find(|p| {
            p["what"]
                .as_str()
                .unwrap()
                .contains("defines nvidia.com/gpu=all")
        })
        .unwrap_or_else(|| panic!("no missing-spec problem: {e:#}"));
    assert_eq!(missing["fix"], NIXOS_CDI_HINT, "{e:#}");
    assert!(
        exposures(&e).iter().all(|x| !x.0.starts_with("/dev/")),
        "no device without the spec: {e:#}"
    );
}

#[test]
fn with_leases_the_device_all_gives_a_build_only_its_gpus_own_nodes_of_the_spec_nixos_generates() {
    let name = "with_leases_the_device_all_gives_a_build_only_its_gpus_own_nodes_of_the_spec_nixos_generates";
    if !root_available(name) {
        return;
    }
    let h = Host::new();
    let store = h.path("store");
    let driver = store.join("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-nvidia-x11-550.54.14");
    h.file(
        &driver
            .join("lib/libcuda.so.550.54.14")
            .display()
            .to_string(),
        Some("libcuda.so.1"),
    );
    let spec = two_gpu_host(&h, &driver, &store.join("none-bin"));
    let config = nixos_cdi_config(&h, Some(&store), true);
    with_one_gpu_per_build(&config);
    let hook = with_private_run_cdi(h.dir.path(), Path::new(HOOK), Some(&spec));

    // A first build is leased GPU 0 and gets its own nodes only; it holds the lease while
    // this test runs, so a build now is leased GPU 1.
    let (answer, manifest) = h.hook_through(&hook, &config, "first");
    assert_eq!(manifest.leased_gpus, [0], "{manifest:?}");
    for (rel, _, _) in own_nodes_of_gpu(0) {
        assert!(answer.contains(&format!("/{rel}=")), "{rel}: {answer}");
    }
    for (rel, _, _) in own_nodes_of_gpu(1) {
        assert!(!answer.contains(&format!("/{rel}=")), "{rel}: {answer}");
    }

    let e = explain_through(&hook, &config);
    assert!(
        e["plan"]["problems"].as_array().unwrap().is_empty(),
        "{e:#}"
    );
    assert_eq!(e["plan"]["leased_gpus"], serde_json::json!([1]), "{e:#}");
    let root = h.root();
    let reason_of = |inside: &str| {
        e["plan"]["exposures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["inside"] == inside)
            .map(|x| (x["reason"]["device"].clone(), x["reason"]["gpu"].clone()))
    };
    for (rel, _, _) in own_nodes_of_gpu(1) {
        let inside = format!("/{rel}");
        assert_eq!(
            exposed(&e, &inside, &root.join(&rel)),
            Some(("cdi".into(), "device-node".into())),
            "{inside}: {e:#}"
        );
        assert_eq!(
            reason_of(&inside),
            Some((serde_json::json!("nvidia.com/gpu=1"), serde_json::json!(1))),
            "{inside}: {e:#}"
        );
    }
    // The spec-wide nodes reach every build; the driver comes from the spec-wide mounts.
    for node in [
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
        "nvidia-modeset",
    ] {
        let inside = format!("/dev/{node}");
        assert_eq!(
            reason_of(&inside),
            Some((serde_json::json!("nvidia.com/gpu=all"), Value::Null)),
            "{inside}: {e:#}"
        );
    }
    assert!(
        exposed(
            &e,
            "/run/opengl-driver/lib/libcuda.so.1",
            &driver.join("lib/libcuda.so.550.54.14")
        )
        .is_some(),
        "{e:#}"
    );
    // GPU 0's own nodes reach no other build: each is named as another build's GPU.
    for (rel, _, _) in own_nodes_of_gpu(0) {
        let inside = format!("/{rel}");
        assert!(reason_of(&inside).is_none(), "{inside}: {e:#}");
        assert!(
            skipped_why(&e, &inside).starts_with("another build's GPU"),
            "{inside}: {e:#}"
        );
    }
    // What GPU 1's device lists and cannot be carried out is listed; GPU 0's is not.
    let not_done = not_carried_out(&e).join("\n");
    assert!(not_done.contains("pci-0000:86:00.0-card"), "{not_done}");
    assert!(!not_done.contains("pci-0000:3b:00.0-card"), "{not_done}");

    // Without leases every build gets both GPUs' nodes, as `all` lists them.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replacen("gpus_per_build = 1\n", "", 1)).unwrap();
    let e = explain_through(&hook, &config);
    for n in 0..2 {
        for (rel, _, _) in own_nodes_of_gpu(n) {
            let inside = format!("/{rel}");
            assert!(
                exposed(&e, &inside, &root.join(&rel)).is_some(),
                "{inside}: {e:#}"
            );
        }
    }
}
