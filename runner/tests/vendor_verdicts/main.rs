//! The verdict table on NVIDIA's own libraries: file × target GPU × driver, each cell the
//! verdict and the rule that decides it, held on both routes a user takes: `lint --target`
//! and `--package` (the `package::gpu_code` check). Both must give the same verdict, rule and
//! words for every cell.
//!
//! The table is OUR READING of NVIDIA's rules (the CUDA Compatibility guide, the PTX ISA's
//! release history, the architectures each ptxas release accepts, the cubins' own toolkit
//! records; `docs/fatbin.md` has each with its source), not NVIDIA's word and not a GPU's:
//! no GPU ran here. The cells a GPU can confirm are run by `tests-gpu/device-check` on one.
//!
//! The files (`scripts/nvidia-userspace` fetches the pinned wheels; nothing is committed):
//! - `cufft`: `libcufft.so.11` of nvidia-cufft-cu12 11.4.1.4, 24,454 modules (1 in
//!   `.nv_fatbin`: an sm_52 cubin with no kernel and no data, built by ptxas 12.9; the rest
//!   byte arrays in `.ldata`, SASS sm_50..sm_120 built by 11.8 and 12.x, PTX of ISA 7.0..7.8);
//!   no CUDA runtime of its own;
//! - `cufftw`: its `libcufftw.so.11`, the one kernel-less sm_52 module alone;
//! - `curand12`: `libcurand.so.10` of nvidia-curand-cu12 10.3.10.19 (a static runtime 12.9);
//! - `curand13`: `libcurand.so.10` of nvidia-curand 10.4.4.72 (a static runtime 13.4);
//! - `nvjpeg12`: `libnvjpeg.so.12` of nvidia-nvjpeg-cu12 12.4.0.76 (static runtime 12.9);
//! - `nvjpeg13`: `libnvjpeg.so.13` of nvidia-nvjpeg 13.2.3.58 (static runtime 13.4, zstd).
//!
//! Under `CI=true` a missing file fails the test. Each route runs once per driver over all
//! files and targets (`--target` takes a list), so each large file is read once per run.

#[path = "../common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use common::{run_without_devices, FakeDriver, RUNNER};
use cuda_sandbox_testkit::real_nvidia::RealNvidia;
use fake_driver::{Mode, Sidecar};
use serde_json::Value;

/// The targets, one per column: every capability from Turing on (Thor as 10.1, its name up to
/// CUDA 12.9, and as 11.0, its name from 13.0).
const TARGETS: [&str; 12] = [
    "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.1", "10.3", "11.0", "12.0", "12.1",
];

/// One row per file and driver (the driver's CUDA version, libcuda and kernel module alike),
/// one cell per target. A cell is a rule, hence a verdict:
/// - `sass` runs by SASS; `jit` runs, some module JIT-compiled from PTX (cuFFT keeps
///   PTX-only modules); `none` nothing the driver must load (cuFFTW's only module has no kernel
///   and no data);
/// - `35` cannot run: a CUDA runtime of a newer major than the driver's
///   (cudaErrorInsufficientDriver);
/// - `old` cannot run: the kernel module predates the GPU's architecture (Blackwell sm_100 and
///   sm_120 first in CUDA 12.8, sm_103 and sm_121 in 12.9, Thor as 11.0 in 13.0);
/// - `tk` cannot run: the file's own cubin records a toolkit of a newer major (cuFFT's sm_52
///   cubin: ptxas 12.9) than the driver's;
/// - `209` cannot run: no kernel image for the GPU (CUDA 12 builds for Thor as sm_101, on a
///   CUDA 13 driver that calls it 11.0);
/// - `ren` cannot be judged: under a CUDA 13 driver Thor reports 11.0, not 10.1.
///
/// The rows the issue asks for: cuFFT runs on 9.0 and 12.0 with 12.8; cuRAND 13 cannot run on
/// every 12.x driver and runs on 13.0; cuRAND 12 cannot run on 12.0 with 12.4 and runs with
/// 12.8.
const TABLE: &str = "
# file     driver | 7.5  8.0  8.6  8.7  8.9  9.0  10.0 10.1 10.3 11.0 12.0 12.1
cufft      11.8   | tk   tk   tk   tk   tk   tk   old  old  old  old  old  old
cufft      12.0   | jit  jit  jit  jit  jit  jit  old  old  old  old  old  old
cufft      12.4   | jit  jit  jit  jit  jit  jit  old  old  old  old  old  old
cufft      12.8   | jit  jit  jit  jit  jit  jit  jit  jit  old  old  jit  old
cufft      12.9   | jit  jit  jit  jit  jit  jit  jit  jit  jit  old  jit  jit
cufft      13.0   | jit  jit  jit  jit  jit  jit  jit  ren  jit  jit  jit  jit
cufft      13.4   | jit  jit  jit  jit  jit  jit  jit  ren  jit  jit  jit  jit
cufftw     11.8   | tk   tk   tk   tk   tk   tk   old  old  old  old  old  old
cufftw     12.4   | none none none none none none old  old  old  old  old  old
cufftw     12.8   | none none none none none none none none old  old  none old
cufftw     13.0   | none none none none none none none ren  none none none none
curand12   11.8   | 35   35   35   35   35   35   old  old  old  old  old  old
curand12   12.0   | sass sass sass sass sass sass old  old  old  old  old  old
curand12   12.4   | sass sass sass sass sass sass old  old  old  old  old  old
curand12   12.8   | sass sass sass sass sass sass sass sass old  old  sass old
curand12   12.9   | sass sass sass sass sass sass sass sass sass old  sass sass
curand12   13.0   | sass sass sass sass sass sass sass ren  sass 209  sass sass
curand12   13.4   | sass sass sass sass sass sass sass ren  sass 209  sass sass
curand13   11.8   | 35   35   35   35   35   35   old  old  old  old  old  old
curand13   12.0   | 35   35   35   35   35   35   old  old  old  old  old  old
curand13   12.4   | 35   35   35   35   35   35   old  old  old  old  old  old
curand13   12.8   | 35   35   35   35   35   35   35   35   old  old  35   old
curand13   12.9   | 35   35   35   35   35   35   35   35   35   old  35   35
curand13   13.0   | sass sass sass sass sass sass sass ren  sass 209  sass sass
curand13   13.4   | sass sass sass sass sass sass sass ren  sass 209  sass sass
nvjpeg12   11.8   | 35   35   35   35   35   35   old  old  old  old  old  old
nvjpeg12   12.4   | sass sass sass sass sass sass old  old  old  old  old  old
nvjpeg12   12.8   | sass sass sass sass sass sass sass sass old  old  sass old
nvjpeg12   13.0   | sass sass sass sass sass sass sass ren  sass 209  sass sass
nvjpeg13   12.4   | 35   35   35   35   35   35   old  old  old  old  old  old
nvjpeg13   12.8   | 35   35   35   35   35   35   35   35   old  old  35   old
nvjpeg13   13.0   | sass sass sass sass sass sass sass ren  sass sass sass sass
";

/// A cell's verdict and rule, as both routes' JSON spell them.
fn expected(cell: &str) -> (&'static str, &'static str) {
    match cell {
        "sass" => ("runs-by-sass", "sass"),
        "jit" => ("runs-by-jit", "jit"),
        "none" => ("no-gpu-code", "nothing-to-load"),
        "35" => ("fails", "runtime-newer-major"),
        "old" => ("fails", "driver-predates-gpu"),
        "tk" => ("fails", "cubin-too-new"),
        "209" => ("fails", "no-kernel-image"),
        "ren" => ("unknown", "gpu-renamed"),
        other => panic!("unknown cell {other:?} in the table"),
    }
}

/// The corpus file of a row's name.
fn file(real: &RealNvidia, name: &str) -> PathBuf {
    let (wheel, file) = match name {
        "cufft" => ("cufft-11.4.1", "libcufft.so.11"),
        "cufftw" => ("cufft-11.4.1", "libcufftw.so.11"),
        "curand12" => ("curand-10.3.10", "libcurand.so.10"),
        "curand13" => ("curand-10.4.4", "libcurand.so.10"),
        "nvjpeg12" => ("nvjpeg-12.4.0", "libnvjpeg.so.12"),
        "nvjpeg13" => ("nvjpeg-13.2.3", "libnvjpeg.so.13"),
        other => panic!("unknown file {other:?} in the table"),
    };
    real.corpus(wheel, file)
}

/// (file, target) → (verdict, rule, reason), from one route's JSON.
type Verdicts = BTreeMap<(PathBuf, String), (String, String, String)>;

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// `lint --json --target ALL --driver-cuda DRIVER FILES...`.
fn by_lint(files: &[PathBuf], driver: &str) -> Verdicts {
    let out = Command::new(RUNNER)
        .args(["lint", "--no-manifest", "--json", "--target"])
        .arg(TARGETS.join(","))
        .args(["--driver-cuda", driver])
        .args(files)
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("lint --json: {e}\n{}", String::from_utf8_lossy(&out.stderr)));
    let mut verdicts = Verdicts::new();
    for file in json["gpu_code"].as_array().unwrap() {
        for v in file["verdicts"].as_array().unwrap() {
            verdicts.insert(
                (
                    PathBuf::from(text(&file["file"])),
                    text(&v["target"]["device"]),
                ),
                (text(&v["verdict"]), text(&v["rule"]), text(&v["reason"])),
            );
        }
    }
    verdicts
}

/// `--package FILE... --target ALL --driver-cuda DRIVER`, `package::gpu_code` alone, on a
/// driver that finds no GPU (so a GPU host's own GPUs never count).
fn by_package(no_gpu: &FakeDriver, files: &[PathBuf], driver: &str) -> Verdicts {
    let mut args = vec!["--no-manifest".to_owned()];
    for f in files {
        args.extend(["--package".to_owned(), f.display().to_string()]);
    }
    args.extend(["--target".into(), TARGETS.join(",")]);
    args.extend(["--driver-cuda".into(), driver.into()]);
    args.extend(["--exact".into(), "package::gpu_code".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = run_without_devices(&no_gpu.dir, &args);
    let judged = run.check("package::gpu_code")["facts"]["judged"].clone();
    let mut verdicts = Verdicts::new();
    for v in judged
        .as_array()
        .unwrap_or_else(|| panic!("no judged files\n{run}"))
    {
        verdicts.insert(
            (
                PathBuf::from(text(&v["file"])),
                text(&v["target"]["device"]),
            ),
            (text(&v["verdict"]), text(&v["rule"]), text(&v["reason"])),
        );
    }
    verdicts
}

// The tests, one module per tier (docs/testing.md).
mod cli;
