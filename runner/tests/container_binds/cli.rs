//! The cli tier of these tests (docs/testing.md): the built runner's `container-binds` on a
//! saved `/run` of this test's making, as the container launcher runs it.

use super::*;

/// A saved `/run` holding a manifest that lists `device` and no driver.
fn saved_run(device: &str) -> tempfile::TempDir {
    let run = tempfile::tempdir().unwrap();
    std::fs::create_dir(run.path().join("cuda-sandbox")).unwrap();
    std::fs::write(
        run.path().join("cuda-sandbox/manifest.json"),
        format!(
            r#"{{"version": 1, "derivation": "/nix/store/x-t.drv", "chroot": "/nix/store/x-t.drv.chroot",
                "rules": ["nvidia"], "features": ["cuda"], "devices": ["{device}"],
                "driver": {{"kind": "none", "libcuda": [], "kernel_driver": null,
                            "compat_dir": null, "driver_link_lib": null, "reason": "none"}}}}"#
        ),
    )
    .unwrap();
    run
}

fn container_binds(run: &Path) -> std::process::Output {
    Command::new(RUNNER)
        .args(["container-binds", "--run-dir"])
        .arg(run)
        .output()
        .unwrap()
}

#[test]
fn cli_prints_one_argument_a_line_with_sources_under_the_saved_run() {
    let run = saved_run("/dev/null");
    let out = container_binds(run.path());
    assert!(out.status.success(), "{out:?}");
    let mut expected = vec!["--bind=/dev/null:/dev/null".to_string()];
    for part in ["/sys/devices/system/cpu", "/sys/devices/system/node"] {
        if Path::new(part).is_dir() {
            expected.push(format!("--bind-ro={part}:{part}"));
        }
    }
    expected.push(format!(
        "--bind-ro={}:/run/cuda-sandbox/manifest.json",
        run.path().join("cuda-sandbox/manifest.json").display()
    ));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        expected.join("\n") + "\n"
    );
}

#[test]
fn cli_refuses_a_missing_device_or_manifest_with_one_line_and_prints_nothing() {
    let run = saved_run("/dev/nvidia-absent-here");
    let missing = container_binds(run.path());
    let no_manifest = container_binds(&run.path().join("nowhere"));
    for (out, why) in [
        (
            missing,
            "/dev/nvidia-absent-here (a device in the manifest) is missing from this build",
        ),
        (no_manifest, "cannot read "),
    ] {
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(
            stderr.starts_with("cuda-sandbox-check container-binds: "),
            "{stderr}"
        );
        assert!(stderr.contains(why), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}
