//! Support for the runner's integration tests: fake driver directories assembled from the
//! fixtures' cdylibs, and runs of the built `cuda-sandbox-check` against them.
#![allow(dead_code)] // each test file uses a different part

use std::path::{Path, PathBuf};
use std::process::Command;

use fake_driver::layout::zluda_layout;
use fake_driver::{assemble, FakeLibrary, Sidecar, DRIVER_LIBRARIES, LIBCUDA};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The runner binary cargo built for these tests.
pub const RUNNER: &str = env!("CARGO_BIN_EXE_cuda-sandbox-check");

/// Where cargo put the runner, hence the fixtures' cdylibs (same profile directory).
pub fn artifacts_dir() -> PathBuf {
    Path::new(RUNNER)
        .parent()
        .expect("runner binary directory")
        .to_path_buf()
}

/// A fake driver directory in a temporary directory.
pub struct FakeDriver {
    _temp: tempfile::TempDir,
    /// The directory holding `libcuda.so.1` & co. and `fake-driver.conf`.
    pub dir: PathBuf,
}

impl FakeDriver {
    /// A directory with `libraries` playing `sidecar`. Panics, naming the command to run, when
    /// the fixtures have not been built.
    pub fn with(sidecar: &Sidecar, libraries: &[FakeLibrary]) -> FakeDriver {
        let temp = tempfile::tempdir().expect("temporary directory");
        let dir = temp.path().join("driver");
        if let Err(error) = assemble(&artifacts_dir(), &dir, libraries, sidecar) {
            panic!("cannot assemble a fake driver: {error}");
        }
        FakeDriver { _temp: temp, dir }
    }

    /// A driver directory (libcuda and NVML) playing `sidecar`.
    pub fn driver(sidecar: &Sidecar) -> FakeDriver {
        FakeDriver::with(sidecar, &DRIVER_LIBRARIES)
    }

    /// ZLUDA's driver directory as Nixpkgs builds it (`libnvcuda.so`, its `libcuda.so.1`
    /// link, `libamdhip64.so.6` in `DT_NEEDED`, no NVML), playing `sidecar` as ZLUDA.
    pub fn zluda(sidecar: &Sidecar) -> FakeDriver {
        let sidecar = sidecar.clone().playing_zluda();
        let driver = FakeDriver::with(&sidecar, &[LIBCUDA]);
        if let Err(error) = zluda_layout(&driver.dir) {
            panic!("cannot lay the fake driver out as ZLUDA (patchelf, cc): {error}");
        }
        driver
    }
}

/// One finished run of the runner.
#[derive(Debug)]
pub struct Run {
    /// Exit status.
    pub code: i32,
    /// libtest's output and the printed facts.
    pub stdout: String,
    /// Diagnostics.
    pub stderr: String,
    /// The `--report` JSON.
    pub report: Value,
}

impl Run {
    /// The report entry of `check`, or a panic showing the whole output.
    pub fn check(&self, check: &str) -> &Value {
        let entry = &self.report["checks"][check];
        assert!(!entry.is_null(), "{check} did not run\n{self}");
        entry
    }

    /// Asserts `check`'s verdict and that its message contains every needle.
    pub fn assert_check(&self, check: &str, verdict: &str, needles: &[&str]) {
        let entry = self.check(check);
        assert_eq!(entry["verdict"], verdict, "{check}\n{self}");
        let message = entry["message"].as_str().unwrap_or_default();
        assert!(
            !message.contains('\n'),
            "{check}: message is not one line: {message}"
        );
        for needle in needles {
            assert!(
                message.contains(needle),
                "{check}: message lacks {needle:?}: {message}\n{self}"
            );
        }
    }

    /// The facts of `check` as its typed facts (e.g. `LibraryFacts` of `driver::library`), or
    /// a panic showing the whole output.
    pub fn facts<T: DeserializeOwned>(&self, check: &str) -> T {
        serde_json::from_value(self.check(check)["facts"].clone()).unwrap_or_else(|e| {
            panic!(
                "{check}: its facts do not read as {}: {e}\n{self}",
                std::any::type_name::<T>()
            )
        })
    }
}

/// The facts of `check` in a report read from a file (a build's `$out`) as its typed facts, or
/// a panic showing the report.
pub fn report_facts<T: DeserializeOwned>(report: &Value, check: &str) -> T {
    serde_json::from_value(report["checks"][check]["facts"].clone()).unwrap_or_else(|e| {
        panic!(
            "{check}: its facts do not read as {}: {e}\n{report:#}",
            std::any::type_name::<T>()
        )
    })
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--- exit {} --- stdout:\n{}\n--- stderr:\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs the runner with `LD_LIBRARY_PATH=library_path`, small saxpy, a report in a temp dir.
pub fn run(library_path: &Path, args: &[&str]) -> Run {
    run_with_env(library_path, args, &[])
}

/// [`run`] with extra environment variables.
pub fn run_with_env(library_path: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let temp = tempfile::tempdir().expect("temporary directory");
    let report = temp.path().join("report.json");
    let output = Command::new(RUNNER)
        .env("LD_LIBRARY_PATH", library_path)
        .env_remove("out")
        .env_remove("NIX_BUILD_TOP")
        // A build's declared features (devices::features): only what a test gives.
        .env_remove("requiredSystemFeatures")
        .env_remove("NIX_ATTRS_JSON_FILE")
        .envs(env.iter().copied())
        .arg("--report")
        .arg(&report)
        .args(["--saxpy-elements", "4096"])
        .args(args)
        .output()
        .expect("run cuda-sandbox-check");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let report = std::fs::read_to_string(&report)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout,
        stderr,
        report,
    }
}

/// Runs every check except `devices::nodes` (which needs a device tree, hence root), with an
/// empty device root, so that a GPU host's real `/dev/nvidia*` never count.
pub fn run_without_devices(library_path: &Path, args: &[&str]) -> Run {
    let empty = tempfile::tempdir().expect("temporary directory");
    let dev_root = empty
        .path()
        .to_str()
        .expect("UTF-8 temporary path")
        .to_owned();
    let mut all = vec!["--skip", "devices::nodes", "--dev-root", &dev_root];
    all.extend_from_slice(args);
    run(library_path, &all)
}

/// Whether this process may `mknod` character devices (root): testkit's rule, skip outside CI
/// with a printed reason, fail under `CI=true`.
pub fn can_make_devices(test: &str) -> bool {
    cuda_sandbox_testkit::root_available(test)
}
