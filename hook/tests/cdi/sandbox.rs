//! The sandbox tier of these tests (docs/testing.md).

use super::*;

#[test]
fn a_sandboxed_build_gets_what_the_cdi_test_spec_lists_with_closures_and_relocated_libraries() {
    let name =
        "a_sandboxed_build_gets_what_the_cdi_test_spec_lists_with_closures_and_relocated_libraries";
    if !nix_available(name) || !testdata_available(name) {
        return;
    }
    let h = Host::new();
    h.spec(
        "high",
        "spec-example.json",
        &std::fs::read_to_string(Path::new(CDI_TESTDATA).join("good/spec-example.json")).unwrap(),
    );
    h.node("vendorroot/dev/card1", 226, 1);
    h.node("dev/card2", 226, 2);
    h.node("dev/vendorctl", 240, 0);
    h.file("usr/lib/libVendor.so.0", Some("libVendor.so.0"));
    h.file("bin/vendorBin", None);
    // The real store and nix-store: a store path a spec mounts brings its closure.
    let config = h.config(
        &["vendor.com/device=myDevice", "vendor.com/store=driver"],
        "",
    );
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(
            &format!("store_dir = \"{}\"\n", h.path("store").display()),
            "",
        )
        .replace(
            &format!("nix_store = \"{}\"\n", h.path("nix-store").display()),
            "",
        );
    std::fs::write(&config, text).unwrap();
    let sandbox = NixSandbox::with_hook(Path::new(HOOK), &config);
    let driver = sandbox.build(
        &common::nix_file("driver-store.nix"),
        &[("nonce", &nonce())],
        &[],
    );
    assert!(
        driver.ok(),
        "building the fake driver failed:\n{}",
        driver.log
    );
    let driver = driver.out_paths[0].clone();
    let closure =
        cuda_sandbox_elfkit::requisites(Path::new("nix-store"), &driver).expect("closure");
    assert!(closure.len() >= 3, "{closure:?}");
    h.spec(
        "high",
        "store.yaml",
        &format!(
            "cdiVersion: 0.5.0\nkind: vendor.com/store\ndevices:\n- name: driver\n  \
             containerEdits:\n    mounts:\n    - hostPath: {}/lib/libcuda.so.1\n      \
             containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.1\n",
            driver.display()
        ),
    );
    let read: Vec<String> = closure.iter().map(|p| p.display().to_string()).collect();
    let build = sandbox.build(
        &common::nix_file("cdi-probe.nix"),
        &[("nonce", &nonce()), ("readPaths", &read.join(" "))],
        &[],
    );
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let r = std::fs::read_to_string(&build.out_paths[0]).unwrap();
    for line in [
        "char /dev/card1 226:1",
        "char /dev/card2 226:2",
        "char /dev/vendorctl 240:0",
        "file /run/opengl-driver/lib/libVendor.so.0 .ELF",
        "file /run/opengl-driver/lib/libcuda.so.1 FAKE libcuda",
        "absent /bin/vendorBin",
    ] {
        assert!(r.contains(line), "the build lacks {line:?}:\n{r}");
    }
    for member in &read {
        assert!(
            r.contains(&format!("read {member}\n")),
            "closure member {member}:\n{r}"
        );
    }
    assert!(r.contains("\"/dev/card1\""), "manifest devices:\n{r}");
}

#[test]
fn a_sandboxed_build_gets_the_nodes_and_relocated_driver_of_the_spec_nixos_generates() {
    let name = "a_sandboxed_build_gets_the_nodes_and_relocated_driver_of_the_spec_nixos_generates";
    if !nix_available(name) {
        return;
    }
    let h = Host::new();
    h.nvidia_nodes();
    h.node("dev/nvidia1", 195, 1);
    h.node("dev/nvidia-modeset", 195, 254);
    let config = nixos_cdi_config(&h, None, false);
    let plain = NixSandbox::with_hook(Path::new(HOOK), &config);
    let driver = plain.build(
        &common::nix_file("driver-store.nix"),
        &[("nonce", &nonce())],
        &[],
    );
    assert!(
        driver.ok(),
        "building the fake driver failed:\n{}",
        driver.log
    );
    let driver = driver.out_paths[0].clone();
    // The real store's fake driver holds lib/libcuda.so.1 only: the spec mounts that.
    let spec = nixos_toolkit_spec(&h, &driver, &h.path("store/none-bin"));
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("lib/libcuda.so.550.54.14", "lib/libcuda.so.1");
    std::fs::write(&spec, text).unwrap();
    let closure =
        cuda_sandbox_elfkit::requisites(Path::new("nix-store"), &driver).expect("closure");
    let read: Vec<String> = closure.iter().map(|p| p.display().to_string()).collect();

    let hook = with_private_run_cdi(h.dir.path(), Path::new(HOOK), Some(&spec));
    let sandbox = NixSandbox::with_hook(&hook, &config);
    let build = sandbox.build(
        &common::nix_file("nixos-cdi-probe.nix"),
        &[("nonce", &nonce()), ("readPaths", &read.join(" "))],
        &[],
    );
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let r = std::fs::read_to_string(&build.out_paths[0]).unwrap();
    for line in [
        "char /dev/nvidia0 195:0",
        "char /dev/nvidia1 195:1",
        "char /dev/nvidiactl 195:255",
        "char /dev/nvidia-modeset 195:254",
        "char /dev/nvidia-uvm 235:0",
        "file /run/opengl-driver/lib/libcuda.so.1 FAKE libcuda",
        "absent /usr/bin/nvidia-smi",
    ] {
        assert!(r.contains(line), "the build lacks {line:?}:\n{r}");
    }
    for member in &read {
        assert!(
            r.contains(&format!("read {member}\n")),
            "closure member {member}:\n{r}"
        );
    }

    // Before the unit has run: the same build fails, naming the unit to start.
    let hook = with_private_run_cdi(h.dir.path(), Path::new(HOOK), None);
    let sandbox = NixSandbox::with_hook(&hook, &config);
    let build = sandbox.build(
        &common::nix_file("nixos-cdi-probe.nix"),
        &[("nonce", &nonce())],
        &[],
    );
    assert!(
        !build.ok(),
        "a build without the spec succeeded:\n{}",
        build.log
    );
    assert!(
        build
            .log
            .contains("systemctl start nvidia-container-toolkit-cdi-generator.service"),
        "{}",
        build.log
    );
}

#[test]
fn with_leases_a_sandboxed_build_sees_only_its_gpus_nodes_of_the_spec_nixos_generates() {
    let name = "with_leases_a_sandboxed_build_sees_only_its_gpus_nodes_of_the_spec_nixos_generates";
    if !nix_available(name) {
        return;
    }
    let h = Host::new();
    let config = nixos_cdi_config(&h, None, false);
    let plain = NixSandbox::with_hook(Path::new(HOOK), &config);
    let driver = plain.build(
        &common::nix_file("driver-store.nix"),
        &[("nonce", &nonce())],
        &[],
    );
    assert!(
        driver.ok(),
        "building the fake driver failed:\n{}",
        driver.log
    );
    let driver = driver.out_paths[0].clone();
    let spec = two_gpu_host(&h, &driver, &h.path("store/none-bin"));
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("lib/libcuda.so.550.54.14", "lib/libcuda.so.1");
    std::fs::write(&spec, text).unwrap();
    with_one_gpu_per_build(&config);
    let hook = with_private_run_cdi(h.dir.path(), Path::new(HOOK), Some(&spec));
    // GPU 0 is leased to another build while this one runs.
    let (_, first) = h.hook_through(&hook, &config, "first");
    assert_eq!(first.leased_gpus, [0], "{first:?}");

    let sandbox = NixSandbox::with_hook(&hook, &config);
    let build = sandbox.build(
        &common::nix_file("nixos-cdi-probe.nix"),
        &[("nonce", &nonce())],
        &[],
    );
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let r = std::fs::read_to_string(&build.out_paths[0]).unwrap();
    for line in [
        "char /dev/nvidia1 195:1",
        "char /dev/dri/card2 226:2",
        "char /dev/dri/renderD129 226:129",
        "char /dev/nvidiactl 195:255",
        "char /dev/nvidia-uvm 235:0",
        "file /run/opengl-driver/lib/libcuda.so.1 FAKE libcuda",
        "absent /dev/nvidia0",
        "absent /dev/dri/card1",
        "absent /dev/dri/renderD128",
    ] {
        assert!(r.contains(line), "the build lacks {line:?}:\n{r}");
    }
}
