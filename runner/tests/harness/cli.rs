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

/// Issue 49: `--exact package::` ran no check, wrote `"checks": {}` and exited 0. A filter that
/// selects no check fails (2), saying so, unless `--allow-no-checks` accepts it.
#[test]
fn a_filter_that_selects_no_check_fails_unless_allowed() {
    let temp = tempfile::tempdir().unwrap();
    let report = temp.path().join("report.json");
    let run = |extra: &[&str]| {
        Command::new(RUNNER)
            .args(["--no-manifest", "--exact", "package::", "--report"])
            .arg(&report)
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = run(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the filter selects no check of this run")
            && stderr.contains("--allow-no-checks"),
        "{stderr}"
    );
    let allowed = run(&["--allow-no-checks"]);
    assert_eq!(allowed.status.code(), Some(0));
    // A filter that selects a check is unaffected.
    let one = Command::new(RUNNER)
        .args(["--no-manifest", "--exact", "devices::features"])
        .env("requiredSystemFeatures", "cuda")
        .output()
        .unwrap();
    assert_ne!(
        one.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
}

/// Issue 49: `--help` was mostly libtest's flags, `lint` named only at its end. It opens with
/// the usage and the commands, one line each; libtest's flags come after the runner's, under
/// their own heading; `--expect-no-gpu` (which nix-tests/sandbox-builds looks for) is there.
#[test]
fn help_opens_with_the_usage_and_commands_and_puts_libtests_flags_last() {
    let output = Command::new(RUNNER).arg("--help").output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = help.lines().collect();
    let usage = lines.iter().position(|l| l.starts_with("Usage: ")).unwrap();
    let commands = lines
        .iter()
        .position(|l| l.starts_with("Commands"))
        .unwrap();
    assert!(commands <= usage + 3, "{help}");
    for (i, command) in ["lint PATH...", "features", "inventory", "gpu-confirm"]
        .iter()
        .enumerate()
    {
        assert!(
            lines[commands + 1 + i].starts_with(&format!("  {command} ")),
            "{help}"
        );
    }
    let at = |needle: &str| {
        help.find(needle)
            .unwrap_or_else(|| panic!("{needle}: {help}"))
    };
    let libtest = at("libtest's flags (as in `cargo test`):");
    assert!(at("--expect-no-gpu") < libtest, "{help}");
    assert!(at("--allow-no-checks") < libtest, "{help}");
    assert!(
        at("--bench") > libtest && at("--test-threads") > libtest,
        "{help}"
    );
}
