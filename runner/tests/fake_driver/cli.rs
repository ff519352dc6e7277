//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn working_driver_passes_every_check_and_reports_the_facts() {
    let driver = FakeDriver::driver(&Sidecar::default());
    let run = run_without_devices(&driver.dir, &[]);
    assert_eq!(run.code, 0, "{run}");
    let libcuda = driver.dir.join("libcuda.so.1");
    run.assert_check("driver::library", "pass", &[&libcuda.display().to_string()]);
    run.assert_check("driver::version", "pass", &["CUDA 12.2"]);
    run.assert_check(
        "driver::entry_points",
        "pass",
        &[
            "cuGetProcAddress_v2 at 12.2",
            "above the driver, it answers CUDA_SUCCESS with its 12.2 variants",
        ],
    );
    run.assert_check("kernel::saxpy", "pass", &["4096 elements verified"]);
    run.assert_check(
        "nvml::consistency",
        "pass",
        &["host driver", "agree on 1 GPU"],
    );
    let library: LibraryFacts = run.facts("driver::library");
    assert_eq!(library.real_path, libcuda);
    let saxpy: SaxpyFacts = run.facts("kernel::saxpy");
    assert_eq!(saxpy.wrong_elements, 0);
    assert!(saxpy.bandwidth_gb_per_s.unwrap() > 0.0, "{saxpy:?}");
    assert!(saxpy.jit_ms >= 0.0, "{saxpy:?}");
    assert_eq!(run.report["summary"]["exit_code"], 0);
    // The library path is always printed, not only in the report.
    assert!(
        run.stdout
            .contains(&format!("loaded {}", libcuda.display())),
        "{run}"
    );
}

#[test]
fn no_cuda_runtime_skips_the_runtime_check_with_its_reason() {
    let driver = FakeDriver::driver(&Sidecar::default());
    let run = run_without_devices(&driver.dir, &["runtime::"]);
    assert_eq!(run.code, 0, "{run}");
    run.assert_check(
        "runtime::entry_points",
        "skipped",
        &["no CUDA runtime loadable"],
    );
    assert!(run.stdout.contains("no CUDA runtime loadable"), "{run}");
    run.assert_check(
        "runtime::compatibility",
        "skipped",
        &["no CUDA runtime loadable"],
    );
    assert_eq!(run.report["summary"]["ignored"], 2);
}

#[test]
fn stub_library_is_explained() {
    let driver = FakeDriver::driver(&sidecar(Mode::Stub));
    let run = run_without_devices(&driver.dir, &[]);
    assert_eq!(run.code, 101, "{run}");
    let stub = [
        "34 CUDA_ERROR_STUB_LIBRARY",
        "stub libcuda.so",
        "not on the library path",
    ];
    run.assert_check("driver::version", "fail", &stub);
    run.assert_check("driver::entry_points", "fail", &stub);
    run.assert_check("kernel::saxpy", "fail", &stub);
    // Loading itself worked: the path is still reported.
    run.assert_check("driver::library", "pass", &["libcuda.so.1"]);
}

#[test]
fn no_device_is_explained() {
    let driver = FakeDriver::driver(&sidecar(Mode::NoDevice));
    let run = run_without_devices(&driver.dir, &[]);
    assert_eq!(run.code, 101, "{run}");
    let why = [
        "cuInit failed with 100 CUDA_ERROR_NO_DEVICE",
        "not exposed",
        "requiredSystemFeatures",
        "pre-build-hook",
    ];
    // The driver's version needs no GPU; the GPU checks name the cause.
    run.assert_check(
        "driver::version",
        "pass",
        &["cuInit finds no GPU (device nodes not exposed)"],
    );
    run.assert_check("kernel::saxpy", "fail", &why);
    run.assert_check(
        "nvml::consistency",
        "fail",
        &[
            "cannot reach the NVIDIA kernel driver",
            "nvidiactl",
            "not exposed",
        ],
    );
}

#[test]
fn missing_jit_compiler_is_explained() {
    let driver = FakeDriver::driver(&sidecar(Mode::NoJit));
    let run = run_without_devices(&driver.dir, &[]);
    assert_eq!(run.code, 101, "{run}");
    run.assert_check("driver::version", "pass", &[]);
    run.assert_check(
        "kernel::saxpy",
        "fail",
        &[
            "cuModuleLoadDataEx failed with 221 CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
            "libnvidia-ptxjitcompiler",
        ],
    );
}

#[test]
fn compat_against_an_unsupported_kernel_driver_is_explained() {
    let driver = FakeDriver::driver(&sidecar(Mode::SystemDriverMismatch));
    let run = run_without_devices(&driver.dir, &[]);
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "driver::version",
        "fail",
        &[
            "803 CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
            "cuda_compat",
            "kernel driver",
        ],
    );
    // The entry points do not depend on cuInit: still checked, still right.
    run.assert_check("driver::entry_points", "pass", &[]);
}

#[test]
fn compat_on_an_unsupported_gpu_is_explained() {
    let driver = FakeDriver::driver(&sidecar(Mode::CompatNotSupported));
    let run = run_without_devices(&driver.dir, &[]);
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "driver::version",
        "fail",
        &[
            "804 CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
            "data-center GPUs and Jetson",
            "host driver",
        ],
    );
}

#[test]
fn driver_not_on_the_library_path_is_explained() {
    let on_host = Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("libcuda.so.1"));
    if on_host.unwrap_or(false) {
        eprintln!("SKIPPED driver_not_on_the_library_path_is_explained: this host has a libcuda.so.1 in ld.so.cache");
        return;
    }
    let empty = tempfile::tempdir().unwrap();
    let run = run_without_devices(empty.path(), &[]);
    assert_eq!(run.code, 101, "{run}");
    let why = [
        "libcuda.so.1 cannot be loaded",
        "requiredSystemFeatures",
        "pre-build-hook",
    ];
    run.assert_check("driver::library", "fail", &why);
    run.assert_check("driver::version", "fail", &why);
    run.assert_check("kernel::saxpy", "fail", &why);
}

#[test]
fn minimum_cuda_version_is_enforced() {
    let driver = FakeDriver::driver(&Sidecar::default());
    let low = run_without_devices(
        &driver.dir,
        &["--min-cuda-version", "12.2", "driver::version"],
    );
    low.assert_check("driver::version", "pass", &[]);
    let high = run_without_devices(
        &driver.dir,
        &["--min-cuda-version", "12.4", "driver::version"],
    );
    assert_eq!(high.code, 101, "{high}");
    high.assert_check(
        "driver::version",
        "fail",
        &["CUDA 12.2, below the required 12.4"],
    );
}

#[test]
fn expected_driver_path_prefix_is_compared_with_the_loaded_file() {
    let driver = FakeDriver::driver(&Sidecar::default());
    let prefix = driver.dir.display().to_string();
    let same = run_without_devices(
        &driver.dir,
        &["--expect-driver", &prefix, "driver::library"],
    );
    same.assert_check("driver::library", "pass", &[]);
    let other = run_without_devices(
        &driver.dir,
        &[
            "--expect-driver",
            "/run/opengl-driver/lib",
            "driver::library",
        ],
    );
    assert_eq!(other.code, 101, "{other}");
    other.assert_check(
        "driver::library",
        "fail",
        &["not under the expected /run/opengl-driver/lib"],
    );
}

#[test]
fn compat_is_recognised_from_the_kernel_driver_version() {
    // A CUDA 12.2 libcuda on kernel driver 470 (CUDA 11.4): cuda_compat at work.
    let compat = Sidecar {
        cuda_version: 12020,
        kernel_driver: "470.82.01".into(),
        ..Sidecar::default()
    };
    let driver = FakeDriver::driver(&compat);
    let expected = run_without_devices(&driver.dir, &["--expect-driver", "compat"]);
    assert_eq!(expected.code, 0, "{expected}");
    expected.assert_check("nvml::consistency", "pass", &["compat active", "470.82.01"]);
    let nvml: ConsistencyFacts = expected.facts("nvml::consistency");
    assert_eq!(nvml.compat_active, Some(true), "{nvml:?}");

    let wrong = run_without_devices(&driver.dir, &["--expect-driver", "host", "nvml::"]);
    assert_eq!(wrong.code, 101, "{wrong}");
    wrong.assert_check(
        "nvml::consistency",
        "fail",
        &["expected the host driver", "compat active"],
    );
}

#[test]
fn host_driver_fails_a_compat_expectation() {
    let driver = FakeDriver::driver(&Sidecar::default());
    let run = run_without_devices(&driver.dir, &["--expect-driver", "compat", "nvml::"]);
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "nvml::consistency",
        "fail",
        &["expected a cuda_compat driver", "host"],
    );
    let nvml: ConsistencyFacts = run.facts("nvml::consistency");
    assert_eq!(nvml.compat_active, Some(false), "{nvml:?}");
}

#[test]
fn several_gpus_are_matched_between_cuda_and_nvml_by_uuid() {
    let gpus = Sidecar {
        devices: (0..3).map(FakeDevice::generated).collect(),
        ..Sidecar::default()
    };
    let driver = FakeDriver::driver(&gpus);
    let run = run_without_devices(&driver.dir, &["nvml::"]);
    assert_eq!(run.code, 0, "{run}");
    run.assert_check("nvml::consistency", "pass", &["agree on 3 GPU(s)"]);
    let nvml: ConsistencyFacts = run.facts("nvml::consistency");
    let cuda = nvml.cuda_devices.expect("CUDA lists its devices");
    assert_eq!(cuda[2].uuid, FakeDevice::generated(2).uuid);
    assert_eq!(nvml.gpus.map(|g| g.len()), Some(3));
}

#[test]
fn entry_points_resolve_to_the_abi_of_the_requested_version() {
    let driver = FakeDriver::driver(&Sidecar::default());
    let symbols = |run: &common::Run| {
        let facts: EntryPointsFacts = run.facts("driver::entry_points");
        move |symbol: &str| {
            let entry = facts.symbols.iter().find(|e| e.symbol == symbol).unwrap();
            entry.expected_export.clone()
        }
    };
    let new = run(
        &driver.dir,
        &["--api-version", "11.0", "driver::entry_points"],
    );
    new.assert_check("driver::entry_points", "pass", &["at 11.0"]);
    assert_eq!(symbols(&new)("cuMemAlloc"), "cuMemAlloc_v2");
    assert_eq!(
        symbols(&new)("cuDevicePrimaryCtxRelease"),
        "cuDevicePrimaryCtxRelease_v2"
    );

    let old = run(
        &driver.dir,
        &["--api-version", "10.2", "driver::entry_points"],
    );
    old.assert_check("driver::entry_points", "pass", &["at 10.2"]);
    assert_eq!(
        symbols(&old)("cuDevicePrimaryCtxRelease"),
        "cuDevicePrimaryCtxRelease"
    );

    let legacy = run(
        &driver.dir,
        &["--api-version", "3.0", "driver::entry_points"],
    );
    legacy.assert_check("driver::entry_points", "pass", &[]);
    assert_eq!(symbols(&legacy)("cuMemAlloc"), "cuMemAlloc");
}

#[test]
fn api_version_above_the_driver_fails() {
    let driver = FakeDriver::driver(&Sidecar::default());
    let run = run(
        &driver.dir,
        &["--api-version", "12.4", "driver::entry_points"],
    );
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "driver::entry_points",
        "fail",
        &["--api-version 12.4 is above the driver's CUDA 12.2"],
    );
}

/// ZLUDA whose `cuInit` finds no GPU (HIP without `/dev/kfd`): the cause named is the AMD
/// node that is missing, not NVIDIA's, and `devices::nodes` names it too.
#[test]
fn zluda_finding_no_gpu_names_the_missing_amd_node() {
    let zluda = FakeDriver::zluda(&sidecar(Mode::NoDevice));
    let empty = tempfile::tempdir().unwrap();
    let dev_root = empty.path().to_str().unwrap();
    let run = run(&zluda.dir, &["--no-manifest", "--dev-root", dev_root]);
    let missing = format!("{dev_root}/kfd is missing");
    run.assert_check(
        "devices::nodes",
        "fail",
        &[&missing, "expose /dev/kfd and /dev/dri"],
    );
    run.assert_check(
        "driver::version",
        "pass",
        &[
            "ZLUDA on AMD",
            "cuInit finds no GPU (on AMD: see devices::nodes)",
        ],
    );
    run.assert_check(
        "kernel::saxpy",
        "fail",
        &["cuInit failed with 100", &missing],
    );
    assert!(!run.stdout.contains("nvidiactl"), "{run}");
}
