//! `gpu-confirm`'s parts that need no GPU, on the real NVIDIA userspace: the hand-built
//! modules are what NVIDIA's cuobjdump lists (a kernel-less sm_52 cubin as cuFFT 11.4 ships
//! one; saxpy PTX for compute_50), and the runtime takes their registration (a real libcudart
//! with the real 535 libcuda and no GPU answers the first call with cudaErrorNoDevice, 100, and
//! 13.0's with cudaErrorInsufficientDriver, 35). What a GPU answers is for
//! `tests-gpu/device-check`. Under `CI=true` a missing cache fails the tests.

mod common;

use std::process::Command;

use common::RUNNER;
use cuda_sandbox_check::facts::module_images::{kernelless_sm52_fatbin, saxpy_fatbin};
use cuda_sandbox_testkit::real_nvidia::{Branch, Cudart, RealNvidia};
use serde_json::Value;

fn cuobjdump(real: &RealNvidia, args: &[&str], file: &std::path::Path) -> String {
    let out = Command::new(real.cuobjdump())
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_hand_built_modules_are_what_cuobjdump_lists() {
    let Some(real) = RealNvidia::find("the_hand_built_modules_are_what_cuobjdump_lists") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let kernelless = dir.path().join("kernelless.fatbin");
    std::fs::write(&kernelless, kernelless_sm52_fatbin()).unwrap();
    let listed = cuobjdump(&real, &["--list-elf"], &kernelless);
    assert!(listed.contains("sm_52"), "{listed}");
    let elf = cuobjdump(&real, &["-elf"], &kernelless);
    for needed in [
        "arch = sm_52",
        "abi=7",
        "sm=52",
        "toolkit=129",
        ".nv.callgraph",
    ] {
        assert!(elf.contains(needed), "{needed:?} not in:\n{elf}");
    }
    // Nothing to launch: no symbol marked ENTRY, no function section.
    assert!(!elf.contains("ENTRY") && !elf.contains(".text."), "{elf}");
    let saxpy = dir.path().join("saxpy.fatbin");
    std::fs::write(&saxpy, saxpy_fatbin()).unwrap();
    let ptx = cuobjdump(&real, &["-ptx"], &saxpy);
    assert!(
        ptx.contains("arch = sm_50") && ptx.contains(".entry saxpy"),
        "{ptx}"
    );
}

#[test]
fn the_runtime_takes_the_registration_and_without_a_gpu_says_so() {
    let Some(real) =
        RealNvidia::find("the_runtime_takes_the_registration_and_without_a_gpu_says_so")
    else {
        return;
    };
    for (cudart, no_gpu_answer) in [(Cudart::V12_9, 100), (Cudart::V13_0, 35)] {
        let out = Command::new(RUNNER)
            .env("LD_LIBRARY_PATH", real.driver_dir(Branch::R535))
            .arg("gpu-confirm")
            .arg("--cudart")
            .arg(real.cudart(cudart))
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let run = &report["registration"];
        assert_eq!(run["registered"], 2, "{report:#}");
        if report["no_gpu"].is_string() {
            // No GPU here (or the cache's 535 libcuda beside another kernel module).
            assert_eq!(out.status.code(), Some(2), "{report:#}");
            assert_eq!(run["first_call"], no_gpu_answer, "{cudart:?}: {report:#}");
        } else {
            // A GPU host whose kernel module the cache's 535 libcuda matches: its own answer.
            assert!(run["first_call"].is_i64(), "{report:#}");
        }
    }
}
