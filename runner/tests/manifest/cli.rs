//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn compat_first_on_the_search_path_matches_the_hooks_compat_choice() {
    let d = Drivers::new();
    let manifest = d.choose(DriverKind::Compat, COMPAT_REASON);
    let path = Drivers::path(&d.compat.dir, &d.host.dir);
    let run = run_without_devices(&path, &["--manifest", manifest.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{run}");
    run.assert_check(
        "driver::library",
        "pass",
        &["the compat driver the hook chose"],
    );
    run.assert_check("driver::version", "pass", &["CUDA 12.2"]);
    run.assert_check("nvml::consistency", "pass", &["compat active", KERNEL]);
    assert_eq!(run.report["manifest"]["status"], "loaded", "{run}");
    assert_eq!(
        run.report["manifest"]["content"]["driver"]["kind"],
        "compat"
    );
    assert_eq!(
        run.report["manifest"]["path"],
        manifest.display().to_string().as_str()
    );
}

#[test]
fn driver_link_first_where_the_hook_chose_compat_fails_with_the_runpath_fix() {
    let d = Drivers::new();
    let manifest = d.choose(DriverKind::Compat, COMPAT_REASON);
    let path = Drivers::path(&d.host.dir, &d.compat.dir);
    let run = run_without_devices(&path, &["--manifest", manifest.to_str().unwrap()]);
    assert_eq!(run.code, 101, "{run}");
    let expected = format!(
        "loaded {}/libcuda.so.1 (host, CUDA 11.4) but the hook chose compat {}/libcuda.so.1 \
         (CUDA 12.2): put the compat directory before the driver link in DT_RUNPATH or \
         LD_LIBRARY_PATH",
        d.host.dir.display(),
        d.compat.dir.display()
    );
    assert_eq!(
        run.check("driver::library")["message"],
        expected.as_str(),
        "{run}"
    );
    run.assert_check(
        "driver::version",
        "fail",
        &[
            "CUDA 11.4",
            "compat driver providing CUDA 12.2",
            "before the driver link",
        ],
    );
    run.assert_check(
        "nvml::consistency",
        "fail",
        &[
            "the hook chose the compat driver (CUDA 12.2)",
            "host driver",
        ],
    );
}

#[test]
fn compat_loaded_where_the_hook_chose_host_fails_with_the_hooks_reason() {
    let d = Drivers::new();
    let manifest = d.choose(DriverKind::Host, HOST_REASON);
    let path = Drivers::path(&d.compat.dir, &d.host.dir);
    let run = run_without_devices(&path, &["--manifest", manifest.to_str().unwrap()]);
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "driver::library",
        "fail",
        &[
            "(compat, CUDA 12.2) but the hook chose host",
            "the compat driver does not support this kernel driver 470.82.01",
            "does not list the host's kernel driver branch 470",
            "remove the compat directory from DT_RUNPATH and LD_LIBRARY_PATH",
        ],
    );
    run.assert_check(
        "nvml::consistency",
        "fail",
        &["the hook chose the host driver"],
    );
}

#[test]
fn host_choice_with_the_host_driver_loaded_passes() {
    let d = Drivers::new();
    let manifest = d.choose(DriverKind::Host, HOST_REASON);
    let run = run_without_devices(&d.host.dir, &["--manifest", manifest.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{run}");
    run.assert_check(
        "driver::library",
        "pass",
        &["the host driver the hook chose"],
    );
    run.assert_check("nvml::consistency", "pass", &["host driver"]);
}

#[test]
fn kernel_driver_other_than_the_hooks_fails_naming_both() {
    let d = Drivers::new();
    let mut driver = DriverManifest {
        kind: DriverKind::Host,
        libcuda: vec![d.host.dir.join("libcuda.so.1").display().to_string()],
        cuda_version: Some(CudaVersion(11040)),
        host_cuda_version: Some(CudaVersion(11040)),
        kernel_driver: Some("535.104.05".into()),
        compat_dir: None,
        driver_link_lib: None,
        reason: "the host driver".into(),
    };
    write_manifest(&d.manifest, driver.clone(), &[]);
    let run = run_without_devices(&d.host.dir, &["--manifest", d.manifest.to_str().unwrap()]);
    run.assert_check(
        "nvml::consistency",
        "fail",
        &["NVML reports kernel driver 470.82.01 but the hook read 535.104.05"],
    );
    // A CUDA version other than the one the hook chose is explained too.
    driver.kernel_driver = None;
    driver.cuda_version = Some(CudaVersion(12000));
    write_manifest(&d.manifest, driver, &[]);
    let run = run_without_devices(&d.host.dir, &["--manifest", d.manifest.to_str().unwrap()]);
    run.assert_check(
        "driver::version",
        "fail",
        &["provides CUDA 11.4 but the hook chose the host driver providing CUDA 12.0"],
    );
}

#[test]
fn missing_named_manifest_fails_and_no_manifest_ignores_it() {
    let d = Drivers::new();
    let missing = d.manifest.display().to_string();
    let run = run_without_devices(&d.host.dir, &["--manifest", &missing]);
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "driver::library",
        "fail",
        &["manifest is unusable", &missing, "--no-manifest"],
    );
    assert_eq!(run.report["manifest"]["status"], "broken");

    let run = run_without_devices(&d.host.dir, &["--no-manifest"]);
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(run.report["manifest"]["status"], "absent");
    let library: LibraryFacts = run.facts("driver::library");
    let fact = library.manifest.as_str().unwrap();
    assert!(fact.starts_with("no manifest:"), "{fact}");
}

#[test]
fn a_cuda_version_that_does_not_parse_makes_the_manifest_fail_naming_the_field() {
    let d = Drivers::new();
    d.choose(DriverKind::Host, HOST_REASON);
    let written = std::fs::read_to_string(&d.manifest).unwrap();
    let bad = written.replace("\"cuda_version\": \"11.4\"", "\"cuda_version\": \"twelve\"");
    assert_ne!(bad, written, "the manifest the hook writes: {written}");
    std::fs::write(&d.manifest, bad).unwrap();
    let path = d.manifest.to_str().unwrap();
    let why = ["manifest is unusable", "driver.cuda_version", "\"twelve\""];

    let run = run_without_devices(&d.host.dir, &["--manifest", path]);
    assert_eq!(run.code, 101, "{run}");
    run.assert_check("driver::library", "fail", &why);
    assert_eq!(run.report["manifest"]["status"], "broken");

    // The lint subcommand refuses it as well, in one line.
    let lint = Command::new(common::RUNNER)
        .args(["lint", "--manifest", path])
        .arg(&d.host.dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&lint.stderr);
    assert_eq!(lint.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    for part in why {
        assert!(stderr.contains(part), "{part:?} not in {stderr}");
    }
}

#[test]
fn absent_default_manifest_is_reported_as_a_fact() {
    if Path::new(cuda_sandbox_manifest::MANIFEST_PATH).exists() {
        eprintln!(
            "SKIPPED: this machine has a real {}",
            cuda_sandbox_manifest::MANIFEST_PATH
        );
        return;
    }
    let d = Drivers::new();
    let run = run_without_devices(&d.host.dir, &["driver::"]);
    assert_eq!(run.code, 0, "{run}");
    let library: LibraryFacts = run.facts("driver::library");
    let fact = library.manifest.as_str().unwrap();
    assert!(
        fact.contains("no manifest:") && fact.contains("does not exist"),
        "{fact}"
    );
    assert!(
        run.stdout
            .contains("driver::library:   manifest = \"no manifest:"),
        "{run}"
    );
}
