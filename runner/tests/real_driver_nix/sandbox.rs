//! The sandbox tier of these tests (docs/testing.md).

use super::*;

#[test]
fn real_driver_in_a_hook_made_build_names_the_missing_kernel_module() {
    let test = "real_driver_in_a_hook_made_build_names_the_missing_kernel_module";
    if !nix_available(test) {
        return;
    }
    let Some(real) = RealNvidia::find(test) else {
        return;
    };
    let host = FakeHost::new(
        1,
        true,
        "",
        &["cuda"],
        &driver_mount(&real.driver_dir(Branch::R535)),
    );
    let hook = workspace_binary("cuda-sandbox-hook");
    let mut sandbox = NixSandbox::with_hook(&hook, &host.config);
    sandbox.sandbox_paths = builder_sandbox_paths();
    let build = sandbox.build(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nix/gpu-check.nix"),
        &[("runner", RUNNER), ("nonce", &nonce()), ("threads", "1")],
        &[],
    );
    let log = &build.log;
    // Without a GPU the build must fail, and say why.
    assert!(!build.ok(), "a build without a GPU passed:\n{log}");
    // libtest's closing lines: which checks failed, and the tally. The driver's library,
    // version and entry points, the device nodes and devices::features (the build requires no
    // cuda-sm-* feature) need no GPU and pass; no runtime is on the path (two skips); the two
    // GPU checks fail.
    let failures: Vec<&str> = log
        .rsplit_once("failures:\n")
        .map(|(_, tail)| tail)
        .unwrap_or_default()
        .lines()
        .take_while(|l| l.starts_with("    "))
        .map(str::trim)
        .collect();
    assert!(log.contains("libcuda.so.535."), "{log}");
    assert!(
        !failures.contains(&"driver::library") && !failures.contains(&"driver::entry_points"),
        "{log}"
    );
    if Path::new("/proc/driver/nvidia/version").exists() {
        // A real GPU host: its kernel module is not of this 535 userspace; only what needs no
        // GPU is judged here (tests-gpu/device-check is the GPU run).
        return;
    }
    assert_eq!(failures, ["kernel::saxpy", "nvml::consistency"], "{log}");
    assert!(
        log.contains("test result: FAILED. 5 passed; 2 failed; 3 ignored"),
        "{log}"
    );
    assert!(!log.contains("not exposed"), "{log}");
    assert!(
        log.contains(
            "the nvidia kernel module is not loaded on the host (/proc/driver/nvidia/version \
             is missing), though the hook exposed the device nodes"
        ),
        "{log}"
    );
}
