//! `cuda-sandbox-check lint --target` on packages built here with NVIDIA's ptxas and
//! fatbinary 13.5 (testkit::fatbin_fixtures::gpu_library), and on NVIDIA's cuRAND: a package
//! without its GPU's architecture fails with 209 or 222, named and explained; one with it, or
//! with PTX the driver can JIT, passes; without a target nothing is judged. Needs the real
//! NVIDIA tools (scripts/nvidia-userspace); under CI=true their absence fails the tests.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::RUNNER;
use cuda_sandbox_testkit::fatbin_fixtures::gpu_library_of;
use cuda_sandbox_testkit::real_nvidia::RealNvidia;

struct Lint {
    code: i32,
    out: String,
}

impl Lint {
    /// Asserts the exit status and that the output says every one of `needles`.
    fn says(&self, code: i32, needles: &[&str]) {
        assert_eq!(self.code, code, "{}", self.out);
        for needle in needles {
            assert!(
                self.out.contains(needle),
                "{needle:?} not in:\n{}",
                self.out
            );
        }
    }
}

fn lint(args: &[&str], paths: &[&Path]) -> Lint {
    let output = Command::new(RUNNER)
        .arg("lint")
        .arg("--no-manifest")
        .args(args)
        .args(paths)
        .output()
        .unwrap();
    Lint {
        code: output.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr),
    }
}

/// A package built like Nixpkgs with `cudaCapabilities = [ "8.0" ]` and cudaForwardCompat by
/// CUDA 12.9 (SASS sm_80 from ptxas 12.9, PTX compute_80 of ISA 8.8), and one with SASS for
/// sm_75 alone (CUDA 12.9 too).
fn packages(real: &RealNvidia, dir: &Path) -> (PathBuf, PathBuf) {
    let ampere = gpu_library_of(
        real,
        "12.9",
        dir,
        "libampere",
        &["sm_80"],
        &[("compute_80", "8.8")],
        &[],
    );
    let turing = gpu_library_of(real, "12.9", dir, "libturing", &["sm_75"], &[], &[]);
    (ampere, turing)
}

#[test]
fn a_package_without_its_gpus_architecture_fails_with_209_or_222_and_the_fix() {
    let Some(real) = RealNvidia::find(
        "a_package_without_its_gpus_architecture_fails_with_209_or_222_and_the_fix",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (ampere, turing) = packages(&real, dir.path());

    // Its own SASS within the major: sm_80 runs on an 8.6 GPU with a 535 driver.
    let ok = lint(&["--target", "sm_86", "--driver-cuda", "12.2"], &[&ampere]);
    assert_eq!(ok.code, 0, "{}", ok.out);
    assert!(
        ok.out.contains("runs on sm_86 (driver CUDA 12.2) by SASS"),
        "{}",
        ok.out
    );

    // Hopper with a 535 driver: only the PTX fits, and ISA 8.8 needs CUDA 12.9.
    let ptx = lint(&["--target", "sm_90", "--driver-cuda", "12.2"], &[&ampere]);
    ptx.says(
        101,
        &[
            "cannot run on sm_90 (driver CUDA 12.2)",
            "ISA 8.8, which needs a CUDA 12.9 driver",
            "JITs PTX up to ISA 8.2",
            "CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222",
            "cudaCapabilities = [ \"9.0\" ]",
            "libampere.so",
        ],
    );

    // With a 12.9 driver the same PTX JITs: it runs, and the first launch compiles.
    let jit = lint(&["--target", "9.0", "--driver-cuda", "12.9"], &[&ampere]);
    assert_eq!(jit.code, 0, "{}", jit.out);
    assert!(jit.out.contains("by JIT"), "{}", jit.out);

    // SASS for Turing alone, no PTX: no kernel image for Ampere.
    let none = lint(&["--target", "sm_80", "--driver-cuda", "13.0"], &[&turing]);
    none.says(
        101,
        &[
            "no kernel image for a 8.0 GPU",
            "CUDA_ERROR_NO_BINARY_FOR_GPU, 209",
            "SASS sm_80, or PTX for compute_80 or older",
            "carries SASS sm_75",
        ],
    );

    // Without a target the GPU code is listed, not judged.
    let listed = lint(&[], &[&ampere, &turing]);
    assert_eq!(listed.code, 0, "{}", listed.out);
    assert!(
        listed
            .out
            .contains("1 module(s): SASS sm_80, PTX compute_80 (ISA 8.8)"),
        "{}",
        listed.out
    );
    assert!(!listed.out.contains("runs on"), "{}", listed.out);

    // --target without a driver version (and no manifest) is bad usage, saying what to add.
    let usage = lint(&["--target", "sm_90"], &[&ampere]);
    assert_eq!(usage.code, 2, "{}", usage.out);
    assert!(usage.out.contains("--driver-cuda"), "{}", usage.out);
}

#[test]
fn lint_json_names_every_entry_and_the_verdict_for_the_target() {
    let Some(real) = RealNvidia::find("lint_json_names_every_entry_and_the_verdict_for_the_target")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (ampere, _) = packages(&real, dir.path());
    let out = lint(
        &["--json", "--target", "sm_90", "--driver-cuda", "12.2"],
        &[&ampere],
    );
    assert_eq!(out.code, 101, "{}", out.out);
    let json: serde_json::Value = serde_json::from_str(&out.out).unwrap();
    let file = &json["gpu_code"][0];
    let entries = &file["modules"][0]["entries"];
    assert_eq!(entries[0]["kind"], "sass");
    assert_eq!(entries[0]["arch"], "sm_80");
    assert_eq!(entries[1]["kind"], "ptx");
    assert_eq!(entries[1]["arch"], "sm_80");
    assert_eq!(entries[1]["ptx_isa"], "8.8");
    let verdict = &file["verdicts"][0];
    assert_eq!(verdict["verdict"], "fails");
    assert_eq!(verdict["rule"], "ptx-too-new");
    assert_eq!(verdict["target"]["device"], "9.0");
    assert_eq!(
        verdict["judgement"]["modules"][0]["load"],
        "unsupported-ptx"
    );
    assert_eq!(json["findings"][0]["kind"], "ptx-too-new");
}

#[test]
fn curand_runs_on_every_gpu_it_supports_and_not_on_older_ones() {
    let Some(real) = RealNvidia::find("curand_runs_on_every_gpu_it_supports_and_not_on_older_ones")
    else {
        return;
    };
    // cuRAND 10.4 (CUDA 13.x, PTX ISA 9.4) carries SASS sm_75 to sm_120 and PTX from
    // compute_75: every GPU from Turing on runs it with a driver of its own CUDA version.
    let curand = real.curand();
    let every = "7.5,8.0,8.6,8.7,8.9,9.0,10.0,10.3,11.0,12.0,12.1";
    let out = lint(&["--target", every, "--driver-cuda", "13.5"], &[&curand]);
    assert_eq!(out.code, 0, "{}", out.out);
    assert_eq!(out.out.matches("runs on").count(), 11, "{}", out.out);
    // Volta and Pascal have no image, JIT or SASS: 209, on a 580 driver (CUDA 13.0), the last
    // branch that drives them.
    let older = lint(
        &["--target", "7.0,6.1", "--driver-cuda", "13.0"],
        &[&curand],
    );
    older.says(
        101,
        &[
            "cannot run on sm_70 (driver CUDA 13.0): module 1 of",
            "cannot run on sm_61 (driver CUDA 13.0): module 1 of",
            "CUDA_ERROR_NO_BINARY_FOR_GPU, 209",
        ],
    );
    // A newer driver does not drive them at all (NVIDIA: R580 is their last branch).
    let dropped = lint(&["--target", "7.0", "--driver-cuda", "13.1"], &[&curand]);
    dropped.says(
        101,
        &["compute capability 7.0 (Volta) is driven up to CUDA 13.0 (R580)"],
    );
}
