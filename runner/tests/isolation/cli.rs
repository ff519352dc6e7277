//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn nothing_visible_passes() {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("dev");
    std::fs::create_dir(&dev).unwrap();
    std::fs::write(dev.join("null"), "").unwrap();
    let (ok, text) = run(&dev, None);
    // A GPU host whose loader cache knows libcuda.so.1 would (rightly) fail here.
    if text.contains("libcuda.so.1 loads") {
        eprintln!("SKIPPED: this host's loader finds libcuda.so.1 outside any sandbox");
        return;
    }
    assert!(ok, "{text}");
    assert!(text.contains("test isolation::no_gpu ... ok"), "{text}");
    assert!(
        !text.contains("devices::nodes"),
        "GPU checks ran too:\n{text}"
    );
}

#[test]
fn a_visible_device_node_fails_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("dev");
    std::fs::create_dir(&dev).unwrap();
    std::fs::write(dev.join("nvidiactl"), "").unwrap();
    let (ok, text) = run(&dev, None);
    assert!(!ok, "{text}");
    assert!(
        text.contains("must not see the GPU") && text.contains("nvidiactl"),
        "{text}"
    );
}

#[test]
fn a_loadable_driver_fails_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("dev");
    std::fs::create_dir(&dev).unwrap();
    let driver = FakeDriver::driver(&Sidecar::default());
    let (ok, text) = run(&dev, Some(&driver.dir));
    assert!(!ok, "{text}");
    assert!(text.contains("libcuda.so.1 loads"), "{text}");
}

#[test]
fn a_driver_link_fails_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("dev");
    std::fs::create_dir(&dev).unwrap();
    std::fs::create_dir_all(dir.path().join("run/opengl-driver/lib")).unwrap();
    let (ok, text) = run(&dev, None);
    assert!(!ok, "{text}");
    assert!(text.contains("run/opengl-driver"), "{text}");
}
