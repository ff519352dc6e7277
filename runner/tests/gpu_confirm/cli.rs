//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn the_runtime_takes_the_registration_and_without_a_gpu_says_so() {
    let Some(real) =
        RealNvidia::find("the_runtime_takes_the_registration_and_without_a_gpu_says_so")
    else {
        return;
    };
    // Every hand-built module: a kernel and a managed variable registered as nvcc's stubs do.
    let modules = [
        "--register",
        "kernelless",
        "--register",
        "sm80-only",
        "--register",
        "managed",
    ];
    for (cudart, no_gpu_answer) in [(Cudart::V12_9, 100), (Cudart::V13_0, 35)] {
        let out = Command::new(RUNNER)
            .env("LD_LIBRARY_PATH", real.driver_dir(Branch::R535))
            .arg("gpu-confirm")
            .arg("--cudart")
            .arg(real.cudart(cudart))
            .args(modules)
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let run = &report["registration"];
        assert_eq!(run["registered"], 4, "{report:#}");
        assert_eq!(
            report["registered"],
            serde_json::json!(["kernelless", "sm80-only", "managed"]),
            "{report:#}"
        );
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
