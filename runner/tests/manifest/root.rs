//! The root tier of these tests (docs/testing.md).

use super::*;

#[test]
fn devices_the_manifest_lists_must_be_present() {
    if !can_make_devices("devices_the_manifest_lists_must_be_present") {
        return;
    }
    let d = Drivers::new();
    let temp = tempfile::tempdir().unwrap();
    FakeDevices::create(temp.path(), 1, true).unwrap();
    let driver = DriverManifest::none("no driver configured");
    write_manifest(
        &d.manifest,
        driver.clone(),
        &["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"],
    );
    let dev = temp.path().join("dev");
    let args = [
        "--manifest",
        d.manifest.to_str().unwrap(),
        "--dev-root",
        dev.to_str().unwrap(),
        "devices::",
    ];
    let ok = run(&d.host.dir, &args);
    ok.assert_check("devices::nodes", "pass", &["1 GPU node(s)"]);
    let nodes: NodesFacts = ok.facts("devices::nodes");
    assert_eq!(nodes.manifest_gpu_nodes, Some(1));

    write_manifest(
        &d.manifest,
        driver,
        &["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"],
    );
    let missing = run(&d.host.dir, &args);
    missing.assert_check(
        "devices::nodes",
        "fail",
        &["lists /dev/nvidia1 as exposed", "is missing"],
    );
}

#[test]
fn cuda_device_count_must_equal_the_leased_gpus() {
    if !can_make_devices("cuda_device_count_must_equal_the_leased_gpus") {
        return;
    }
    let d = Drivers::new();
    let temp = tempfile::tempdir().unwrap();
    FakeDevices::create(temp.path(), 2, true).unwrap();
    let driver = DriverManifest::none("no driver configured");
    let devices = [
        "/dev/nvidia0",
        "/dev/nvidia1",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
    ];
    let dev = temp.path().join("dev");
    let args = [
        "--manifest",
        d.manifest.to_str().unwrap(),
        "--dev-root",
        dev.to_str().unwrap(),
        "devices::nodes",
    ];
    // The fake driver plays one CUDA device.
    write_leased_manifest(&d.manifest, driver.clone(), &devices, &[1]);
    let one = run(&d.host.dir, &args);
    one.assert_check("devices::nodes", "pass", &["for 1 CUDA device(s)"]);
    let nodes: NodesFacts = one.facts("devices::nodes");
    assert_eq!(nodes.manifest_leased_gpus, Some(vec![1]));

    write_leased_manifest(&d.manifest, driver, &devices, &[0, 1]);
    let two = run(&d.host.dir, &args);
    two.assert_check(
        "devices::nodes",
        "fail",
        &[
            "CUDA reports 1 device(s) but the hook leased this build 2 GPU(s) [0, 1]: some \
           leased GPU nodes are not usable here (check the hook's device globs and the nodes' \
           permissions)",
        ],
    );
}
