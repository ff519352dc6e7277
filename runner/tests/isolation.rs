//! `--expect-no-gpu` (`isolation::no_gpu`): the negative check passes only when nothing of the
//! GPU is visible, and names what it sees otherwise.

mod common;

use std::process::Command;

use common::{FakeDriver, RUNNER};
use fake_driver::Sidecar;

/// Runs the negative check with every path it looks at inside `dev_root`'s parent, so the
/// host's real /run/opengl-driver and manifest (a GPU host has them) never count.
fn run(dev_root: &std::path::Path, library_path: Option<&std::path::Path>) -> (bool, String) {
    let here = dev_root.parent().unwrap();
    let mut cmd = Command::new(RUNNER);
    cmd.args(["--expect-no-gpu", "--dev-root"])
        .arg(dev_root)
        .arg("--manifest")
        .arg(here.join("run/cuda-sandbox/manifest.json"))
        .arg("--driver-link")
        .arg(here.join("run/opengl-driver/lib"));
    match library_path {
        Some(p) => cmd.env("LD_LIBRARY_PATH", p),
        None => cmd.env_remove("LD_LIBRARY_PATH"),
    };
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

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
