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
//! A second table holds the libraries whose modules keep kernels for some GPUs only (issue
//! 47: cuBLAS 12.9/13.10, cuDNN 9.28 cnn, cuSPARSE 12.5, NCCL 2.32, and two third-party
//! builds) to NVIDIA's published support: each row cites the page that says the library
//! supports the GPU with that driver (it must run, wholly or partly) or does not (it must not
//! run). [`SUPPORT`] has the rows.
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

/// CUDA 12.8 release notes (docs.nvidia.com/cuda/archive/12.8.0/cuda-toolkit-release-notes):
/// 12.8 adds Blackwell (sm_100, sm_120) to the toolkit and its libraries, cuBLAS among them.
const CUDA_12_8: &str = "https://docs.nvidia.com/cuda/archive/12.8.0/cuda-toolkit-release-notes";
/// NVIDIA's CUDA Compatibility guide, "Minor Version Compatibility", table 1: CUDA 13.x needs a
/// driver >= 580 (CUDA 13.0), 12.x one >= 525 and < 580.
const MINOR_VERSION: &str =
    "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html";
/// cuDNN's support matrix (docs.nvidia.com/deeplearning/cudnn/latest/support-matrix): cuDNN 9
/// for CUDA 12.8/12.9 with a driver >= 570.26 supports compute capability 12.0, 10.0, 9.0,
/// 8.9, 8.6, 8.0, 7.5 (and older); the CUDA 13 package needs a 13.x (>= 580) driver.
const CUDNN: &str = "https://docs.nvidia.com/deeplearning/cudnn/latest/support-matrix/index.html";
/// bitsandbytes 0.50.2's installation guide: NVIDIA GPUs of compute capability 6.0 and newer;
/// its PyPI builds carry a library per CUDA release (sm60 to sm90 for 11.8 to 12.6, more after).
const BITSANDBYTES: &str = "https://huggingface.co/docs/bitsandbytes/v0.50.2/en/installation";
/// CuPy's installation guide (v14): an NVIDIA GPU of compute capability 3.0 or larger, CUDA
/// 12.0 to 13.1; cupy-cuda12x is the wheel for CUDA 12.x.
const CUPY: &str = "https://docs.cupy.dev/en/stable/install.html";

/// The verdict table against NVIDIA's published support: (file, target, driver, whether the
/// page says it is supported there, the page). A supported pair must run (wholly or partly:
/// `runs-by-sass`, `runs-by-jit`, `runs-partly`); an unsupported one must not (`fails`).
pub(crate) const SUPPORT: &[(&str, &str, &str, bool, &str)] = &[
    ("cublaslt12", "8.0", "12.8", true, CUDA_12_8),
    ("cublaslt12", "8.6", "12.8", true, CUDA_12_8),
    ("cublaslt12", "8.9", "12.8", true, CUDA_12_8),
    ("cublaslt12", "9.0", "12.8", true, CUDA_12_8),
    ("cublaslt12", "12.0", "12.8", true, CUDA_12_8),
    ("cublas12", "8.0", "12.8", true, CUDA_12_8),
    ("cublas12", "9.0", "12.8", true, CUDA_12_8),
    ("cublas12", "12.0", "12.8", true, CUDA_12_8),
    // Blackwell on a driver before 12.8: outside support.
    ("cublaslt12", "12.0", "12.4", false, CUDA_12_8),
    ("cublas12", "10.0", "12.4", false, CUDA_12_8),
    ("cudnn12", "8.0", "12.8", true, CUDNN),
    ("cudnn12", "9.0", "12.8", true, CUDNN),
    ("cudnn12", "12.0", "12.8", true, CUDNN),
    ("cudnn13", "9.0", "13.0", true, CUDNN),
    ("cudnn13", "9.0", "12.8", false, CUDNN),
    ("cublas13", "9.0", "13.0", true, MINOR_VERSION),
    ("cublaslt13", "9.0", "13.0", true, MINOR_VERSION),
    ("cublas13", "9.0", "12.8", false, MINOR_VERSION),
    ("cublaslt13", "9.0", "12.8", false, MINOR_VERSION),
    ("nvblas13", "9.0", "12.8", false, MINOR_VERSION),
    ("cusparse12", "8.0", "12.8", true, CUDA_12_8),
    ("cusparse12", "9.0", "12.8", true, CUDA_12_8),
    ("nccl13", "9.0", "13.0", true, MINOR_VERSION),
    ("nccl13", "9.0", "12.8", false, MINOR_VERSION),
    ("bnb128", "8.0", "12.8", true, BITSANDBYTES),
    ("bnb128", "9.0", "12.8", true, BITSANDBYTES),
    ("bnb130", "9.0", "12.8", false, MINOR_VERSION),
    ("cupy12", "8.0", "12.8", true, CUPY),
    ("cupy12", "9.0", "12.8", true, CUPY),
];

/// The corpus file of a row's name.
fn file(real: &RealNvidia, name: &str) -> PathBuf {
    let (wheel, file) = match name {
        "cufft" => ("cufft-11.4.1", "libcufft.so.11"),
        "cufftw" => ("cufft-11.4.1", "libcufftw.so.11"),
        "curand12" => ("curand-10.3.10", "libcurand.so.10"),
        "curand13" => ("curand-10.4.4", "libcurand.so.10"),
        "nvjpeg12" => ("nvjpeg-12.4.0", "libnvjpeg.so.12"),
        "nvjpeg13" => ("nvjpeg-13.2.3", "libnvjpeg.so.13"),
        "cublas12" => ("cublas-12.9.3", "libcublas.so.12"),
        "cublaslt12" => ("cublas-12.9.3", "libcublasLt.so.12"),
        "cublas13" => ("cublas-13.10.0", "libcublas.so.13"),
        "cublaslt13" => ("cublas-13.10.0", "libcublasLt.so.13"),
        "nvblas13" => ("cublas-13.10.0", "libnvblas.so.13"),
        "cudnn12" => ("cudnn-cu12-9.28.0", "libcudnn_cnn.so.9"),
        "cudnn13" => ("cudnn-cu13-9.28.1", "libcudnn_cnn.so.9"),
        "cusparse12" => ("cusparse-12.5.10", "libcusparse.so.12"),
        "nccl13" => ("nccl-2.32.3", "libnccl.so.2"),
        "bnb128" => ("bitsandbytes-0.50.2", "libbitsandbytes_cuda128.so"),
        "bnb130" => ("bitsandbytes-0.50.2", "libbitsandbytes_cuda130.so"),
        "cupy12" => ("cupy-14.2.0", "cub.cpython-312-x86_64-linux-gnu.so"),
        other => panic!("unknown file {other:?} in the table"),
    };
    real.corpus(wheel, file)
}

/// (file, target) → (verdict, rule, reason), from one route's JSON.
type Verdicts = BTreeMap<(PathBuf, String), (String, String, String)>;

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// `lint --json --target TARGETS --driver-cuda DRIVER FILES...`.
fn by_lint(files: &[PathBuf], targets: &[&str], driver: &str) -> Verdicts {
    let out = Command::new(RUNNER)
        .args(["lint", "--no-manifest", "--json", "--target"])
        .arg(targets.join(","))
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

/// `--package FILE... --target TARGETS --driver-cuda DRIVER`, `package::gpu_code` alone, on
/// a driver that finds no GPU (so a GPU host's own GPUs never count).
fn by_package(no_gpu: &FakeDriver, files: &[PathBuf], targets: &[&str], driver: &str) -> Verdicts {
    let mut args = vec!["--no-manifest".to_owned()];
    for f in files {
        args.extend(["--package".to_owned(), f.display().to_string()]);
    }
    args.extend(["--target".into(), targets.join(",")]);
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
