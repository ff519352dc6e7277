//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn list_names_every_check_and_runs_none() {
    let output = Command::new(RUNNER)
        .arg("--list")
        .env("LD_LIBRARY_PATH", "/nonexistent")
        .output()
        .unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    for name in CHECK_NAMES {
        assert!(
            stdout.contains(&format!("{name}: test")),
            "{name} not listed:\n{stdout}"
        );
    }
    assert!(
        !stdout.contains("cannot be loaded"),
        "--list ran a check:\n{stdout}"
    );
}

#[test]
fn exact_filter_runs_one_check() {
    let driver = FakeDriver::driver(&Sidecar::default());
    let run = run_without_devices(&driver.dir, &["--exact", "driver::version"]);
    assert_eq!(run.code, 0, "{run}");
    let checks = run.report["checks"].as_object().unwrap();
    assert_eq!(checks.keys().collect::<Vec<_>>(), ["driver::version"]);
    assert_eq!(run.report["summary"]["filtered_out"], 9);
}

#[test]
fn json_format_keeps_stdout_machine_readable() {
    let driver = FakeDriver::driver(&Sidecar::default());
    let run = run_without_devices(
        &driver.dir,
        &["--format", "json", "-Z", "unstable-options", "driver::"],
    );
    assert_eq!(run.code, 0, "{run}");
    for line in run.stdout.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "not JSON: {line}\n{run}"
        );
    }
    assert!(run.stderr.contains("driver::library: loaded"), "{run}");
}

#[test]
fn failures_exit_101_and_show_the_explanation() {
    let driver = FakeDriver::driver(&Sidecar {
        mode: Mode::NoDevice,
        ..Sidecar::default()
    });
    let run = run_without_devices(&driver.dir, &["kernel::saxpy"]);
    assert_eq!(run.code, 101, "{run}");
    assert!(
        run.stdout.contains("test kernel::saxpy ... FAILED"),
        "{run}"
    );
    assert!(run.stdout.contains("CUDA_ERROR_NO_DEVICE"), "{run}");
    assert_eq!(run.report["summary"]["exit_code"], 101);
    assert_eq!(run.report["summary"]["failed"], 1);
}

#[test]
fn report_goes_to_out_inside_a_nix_build() {
    let driver = FakeDriver::driver(&Sidecar::default());
    let build = tempfile::tempdir().unwrap();
    let out = build.path().join("out");
    let output = Command::new(RUNNER)
        .env("LD_LIBRARY_PATH", &driver.dir)
        .env("out", &out)
        .env("NIX_BUILD_TOP", build.path())
        .args(["--saxpy-elements", "1024", "--exact", "driver::version"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(report["tool"], "cuda-sandbox-check");
    assert_eq!(report["checks"]["driver::version"]["verdict"], "pass");
}

#[test]
fn out_alone_is_not_a_nix_build() {
    let driver = FakeDriver::driver(&Sidecar::default());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let output = Command::new(RUNNER)
        .env("LD_LIBRARY_PATH", &driver.dir)
        .env("out", &out)
        .env_remove("NIX_BUILD_TOP")
        .args(["--exact", "driver::version"])
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(
        !out.exists(),
        "a report was written to $out outside a Nix build"
    );
}

#[test]
fn report_records_options_and_every_check_that_ran() {
    let driver = FakeDriver::driver(&Sidecar::default());
    let run = run_with_env(
        &driver.dir,
        &["--skip", "devices::nodes", "--min-cuda-version", "11.8"],
        &[],
    );
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(run.report["options"]["min_cuda_version"], "11.8");
    assert_eq!(run.report["options"]["saxpy_elements"], 4096);
    let checks = run.report["checks"].as_object().unwrap();
    assert_eq!(checks.len(), 9);
    for (name, entry) in checks {
        assert!(entry["facts"].is_object(), "{name} has no facts");
    }
}

#[test]
fn default_saxpy_runs_two_to_the_24_elements() {
    let driver = FakeDriver::driver(&Sidecar::default());
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let output = Command::new(RUNNER)
        .env("LD_LIBRARY_PATH", &driver.dir)
        .arg("--report")
        .arg(&report)
        .args(["--exact", "kernel::saxpy"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let facts: SaxpyFacts = report_facts(&report, "kernel::saxpy");
    assert_eq!(facts.elements, 1 << 24);
    assert_eq!(facts.bytes_moved, 12.0 * f64::from(1 << 24));
    assert_eq!(facts.wrong_elements, 0);
}
