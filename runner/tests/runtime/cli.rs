//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn runtime_older_than_the_driver_agrees_with_it() {
    let driver = FakeDriver::driver(&Sidecar::default()); // CUDA 12.2
    let runtime = cudart(12000);
    let run = run_without_devices(
        &driver.dir,
        &["--cudart", &libcudart(&runtime, 12000), "entry_points"],
    );
    assert_eq!(run.code, 0, "{run}");
    run.assert_check(
        "runtime::entry_points",
        "pass",
        &["libcudart 12.0: cudaGetDriverEntryPoint gives the CUDA 12.0 variants (min(runtime 12.0, driver 12.2))"],
    );
    // Without --api-version, the driver check asks at min(driver, runtime) first.
    run.assert_check("driver::entry_points", "pass", &["at 12.0:"]);
    let entry_points: RuntimeEntryPointsFacts = run.facts("runtime::entry_points");
    assert_eq!(entry_points.cudarts[0].compared_at, "12.0");
}

#[test]
fn runtime_equal_to_the_driver_is_found_on_the_library_path() {
    let driver = FakeDriver::with(&Sidecar::default(), &ALL_LIBRARIES);
    let run = run_without_devices(&driver.dir, &["runtime::"]);
    assert_eq!(run.code, 0, "{run}");
    run.assert_check(
        "runtime::compatibility",
        "pass",
        &["libcudart 12.2 on driver 12.2: supported"],
    );
    run.assert_check("runtime::entry_points", "pass", &["libcudart 12.2"]);
    let compatibility: RuntimesFacts = run.facts("runtime::compatibility");
    let found = &compatibility.cudarts[0].cudart.path;
    assert!(found.starts_with(&driver.dir), "{found:?}");
}

#[test]
fn runtime_of_a_newer_minor_passes_with_the_functions_whose_abi_differs() {
    let driver = FakeDriver::driver(&Sidecar::default()); // CUDA 12.2
    let runtime = cudart(12090);
    let run = run_without_devices(
        &driver.dir,
        &["--cudart", &libcudart(&runtime, 12090), "runtime::"],
    );
    assert_eq!(run.code, 0, "{run}");
    run.assert_check(
        "runtime::compatibility",
        "pass",
        &[
            "libcudart 12.9 on driver 12.2: minor-version compatibility",
            "cuCtxCreate (12.2 gets cuCtxCreate_v3, code built for 12.9 expects cuCtxCreate_v4)",
        ],
    );
    // The rule the footgun follows: entry points at min(12.9, 12.2) = 12.2.
    run.assert_check(
        "runtime::entry_points",
        "pass",
        &["gives the CUDA 12.2 variants (min(runtime 12.9, driver 12.2))"],
    );
}

#[test]
fn runtime_of_a_newer_major_fails_naming_35_and_the_fix() {
    let driver = FakeDriver::driver(&Sidecar::default()); // CUDA 12.2
    let runtime = cudart(13000);
    let run = run_without_devices(
        &driver.dir,
        &["--cudart", &libcudart(&runtime, 13000), "runtime::"],
    );
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "runtime::compatibility",
        "fail",
        &[
            "newer major than the driver's CUDA 12.2",
            "cudaErrorInsufficientDriver (35)",
            "answered 35 here",
            "cuda_compat >= 13.0",
        ],
    );
    run.assert_check("runtime::entry_points", "fail", &["(35)"]);
}

#[test]
fn two_runtimes_that_resolve_at_different_versions_are_flagged() {
    let driver = FakeDriver::driver(&Sidecar::default()); // CUDA 12.2
    let old = cudart(11080);
    let new = cudart(12020);
    let run = run_without_devices(
        &driver.dir,
        &[
            "--cudart",
            &libcudart(&old, 11080),
            "--cudart",
            &libcudart(&new, 12020),
            "runtime::compatibility",
        ],
    );
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "runtime::compatibility",
        "fail",
        &[
            "mixed CUDA runtimes",
            "at 11.8",
            "at 12.2",
            "cuGetProcAddress",
        ],
    );
}

#[test]
fn an_unloadable_cudart_flag_fails_instead_of_skipping() {
    let driver = FakeDriver::driver(&Sidecar::default());
    let run = run_without_devices(
        &driver.dir,
        &["--cudart", "/nonexistent/libcudart.so", "runtime::"],
    );
    assert_eq!(run.code, 101, "{run}");
    for check in ["runtime::compatibility", "runtime::entry_points"] {
        run.assert_check(check, "fail", &["--cudart /nonexistent/libcudart.so"]);
    }
}
