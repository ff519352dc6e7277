//! The root tier of these tests (docs/testing.md).

use super::*;

#[test]
fn complete_tree_passes() {
    if !can_make_devices("complete_tree_passes") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    FakeDevices::create(root.path(), 2, true).unwrap();
    let driver = FakeDriver::driver(&Sidecar::default());
    let run = run_nodes(&driver, &root.path().join("dev"));
    assert_eq!(run.code, 0, "{run}");
    run.assert_check(
        "devices::nodes",
        "pass",
        &["2 GPU node(s) present for 1 CUDA device(s)"],
    );
    let nodes: NodesFacts = run.facts("devices::nodes");
    assert_eq!(nodes.nvidiactl, Some((195, 255)));
}

#[test]
fn empty_tree_fails_naming_the_hook() {
    if !can_make_devices("empty_tree_fails_naming_the_hook") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let driver = FakeDriver::driver(&Sidecar::default());
    let run = run_nodes(&driver, root.path());
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "devices::nodes",
        "fail",
        &[
            "nvidiactl was missing before any driver call",
            "requiredSystemFeatures",
            "pre-build-hook",
        ],
    );
}

#[test]
fn missing_uvm_node_says_how_to_create_it() {
    if !can_make_devices("missing_uvm_node_says_how_to_create_it") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    FakeDevices::create(root.path(), 1, false).unwrap();
    let driver = FakeDriver::driver(&Sidecar::default());
    let run = run_nodes(&driver, &root.path().join("dev"));
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "devices::nodes",
        "fail",
        &["nvidia-uvm is missing", "nvidia-modprobe"],
    );
}

#[test]
fn wrong_device_numbers_are_refused() {
    if !can_make_devices("wrong_device_numbers_are_refused") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let dev = root.path();
    mknod_char(&dev.join("nvidiactl"), NVIDIA_MAJOR, 0).unwrap();
    mknod_char(&dev.join("nvidia-uvm"), 235, 0).unwrap();
    mknod_char(&dev.join("nvidia0"), NVIDIA_MAJOR, 0).unwrap();
    let driver = FakeDriver::driver(&Sidecar::default());
    let run = run_nodes(&driver, dev);
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "devices::nodes",
        "fail",
        &["nvidiactl is 195:0, not 195:255"],
    );
}

#[test]
fn fewer_nodes_than_cuda_devices_fails() {
    if !can_make_devices("fewer_nodes_than_cuda_devices_fails") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    FakeDevices::create(root.path(), 1, true).unwrap();
    let two_gpus = Sidecar {
        devices: (0..2).map(FakeDevice::generated).collect(),
        ..Sidecar::default()
    };
    let driver = FakeDriver::driver(&two_gpus);
    let run = run_nodes(&driver, &root.path().join("dev"));
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "devices::nodes",
        "fail",
        &["CUDA reports 2 devices but only 1 /dev/nvidiaN"],
    );
}

#[test]
fn nodes_are_checked_even_when_cuda_cannot_count_devices() {
    if !can_make_devices("nodes_are_checked_even_when_cuda_cannot_count_devices") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    FakeDevices::create(root.path(), 1, true).unwrap();
    let driver = FakeDriver::driver(&Sidecar {
        mode: Mode::NoDevice,
        ..Sidecar::default()
    });
    let run = run_nodes(&driver, &root.path().join("dev"));
    assert_eq!(run.code, 0, "{run}");
    run.assert_check("devices::nodes", "pass", &["CUDA device count unavailable"]);
}
