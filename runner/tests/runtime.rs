//! `runtime::entry_points` with a (fake) CUDA runtime: a runtime no newer than the driver
//! agrees with the driver; a newer one is the mixed-versions footgun, failed and explained.

mod common;

use common::{run_without_devices, FakeDriver};
use fake_driver::assemble::LIBCUDART;
use fake_driver::{Sidecar, ALL_LIBRARIES};

/// A directory holding only a fake libcudart of version `runtime`.
fn cudart(runtime: i32) -> FakeDriver {
    let sidecar = Sidecar {
        runtime_version: runtime,
        ..Sidecar::default()
    };
    FakeDriver::with(&sidecar, &[LIBCUDART])
}

#[test]
fn runtime_older_than_the_driver_agrees_with_it() {
    let driver = FakeDriver::driver(&Sidecar::default()); // CUDA 12.2
    let runtime = cudart(12000);
    let libcudart = runtime.dir.join("libcudart.so.12");
    let run = run_without_devices(
        &driver.dir,
        &["--cudart", libcudart.to_str().unwrap(), "entry_points"],
    );
    assert_eq!(run.code, 0, "{run}");
    run.assert_check(
        "runtime::entry_points",
        "pass",
        &[
            "libcudart 12.0 on driver 12.2",
            "matches cuGetProcAddress at 12.0",
        ],
    );
    // Without --api-version, the driver check uses min(driver, runtime).
    run.assert_check("driver::entry_points", "pass", &["at 12.0"]);
    assert_eq!(run.fact("runtime::entry_points", "compared_at"), "12.0");
}

#[test]
fn runtime_equal_to_the_driver_is_found_on_the_library_path() {
    let driver = FakeDriver::with(&Sidecar::default(), &ALL_LIBRARIES);
    let run = run_without_devices(&driver.dir, &["runtime::"]);
    assert_eq!(run.code, 0, "{run}");
    run.assert_check(
        "runtime::entry_points",
        "pass",
        &["libcudart 12.2 on driver 12.2"],
    );
    let found = run.fact("runtime::entry_points", "cudart")["path"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(found.starts_with(driver.dir.to_str().unwrap()), "{found}");
}

#[test]
fn runtime_newer_than_the_driver_fails_with_the_footgun_explained() {
    let driver = FakeDriver::driver(&Sidecar::default()); // CUDA 12.2
    let runtime = cudart(12040);
    let libcudart = runtime.dir.join("libcudart.so.12");
    let run = run_without_devices(
        &driver.dir,
        &["--cudart", libcudart.to_str().unwrap(), "runtime::"],
    );
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "runtime::entry_points",
        "fail",
        &[
            "is CUDA 12.4, newer than the driver's CUDA 12.2",
            "cudaGetDriverEntryPoint",
            "use a CUDA runtime <= 12.2",
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
    run.assert_check(
        "runtime::entry_points",
        "fail",
        &["--cudart /nonexistent/libcudart.so"],
    );
}
