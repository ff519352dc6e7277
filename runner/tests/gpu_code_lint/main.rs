//! `cuda-sandbox-check lint --target` on packages built here with NVIDIA's ptxas and
//! fatbinary 13.5 (testkit::fatbin_fixtures::gpu_library), and on NVIDIA's cuRAND: a package
//! without its GPU's architecture fails with 209 or 222, named and explained; one with it, or
//! with PTX the driver can JIT, passes; without a target nothing is judged. Needs the real
//! NVIDIA tools (scripts/nvidia-userspace); under CI=true their absence fails the tests.

#[path = "../common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::RUNNER;
use cuda_sandbox_testkit::gpu_library::{gpu_library_of, kernelless_library};
use cuda_sandbox_testkit::real_nvidia::RealNvidia;

/// `lint`'s exit status for a file that cannot run on a target.
const CANNOT_RUN: i32 = 4;

/// `lint`'s exit status for findings that are not about running (a static archive).
const FINDINGS: i32 = 1;

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

/// `member kind arch` for each entry `lint --json` lists in `file`'s modules, as cuobjdump
/// names them (a cubin's 'f' dropped, PTX named `sm_*`).
fn lint_listing(file: &Path) -> Vec<String> {
    let out = lint(&["--json"], &[file]);
    let v: serde_json::Value =
        serde_json::from_str(&out.out).unwrap_or_else(|e| panic!("{e}: {}", out.out));
    let mut listed = Vec::new();
    for module in v["gpu_code"][0]["modules"]
        .as_array()
        .unwrap_or(&Vec::new())
    {
        let member = module["member"].as_str().unwrap_or("-");
        for e in module["entries"].as_array().unwrap() {
            let kind = match e["kind"].as_str().unwrap() {
                "sass" => "elf",
                "ptx" => "ptx",
                _ => continue,
            };
            let mut arch = e["arch"].as_str().unwrap().to_owned();
            if kind == "elf" && arch.ends_with('f') {
                arch.pop();
            }
            listed.push(format!("{member} {kind} {arch}"));
        }
    }
    listed
}

// The tests, one module per tier (docs/testing.md).
mod cli;
