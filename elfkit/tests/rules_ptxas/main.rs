//! The rules' data held to NVIDIA's ptxas, each release `scripts/nvidia-userspace` fetches
//! (11.7, 11.8, 12.0, 12.6, 12.8, 12.9, 13.0, 13.3, 13.4, 13.5; PyPI wheels):
//! - the architecture table (`cuda-facts/src/gpus.txt`): each architecture's first release
//!   is the first of these whose `ptxas --help` lists it (ptxas accepting an architecture
//!   stands in for the driver of that release driving it), its 'a' and 'f' variants likewise,
//!   and the newest ptxas lists no architecture the table lacks;
//! - what a cubin records: cubins ptxas 11.8 to 13.5 build from our PTX name their toolkit
//!   (`e_version` in ELF ABI 7, `.note.nv.tkinfo` in ABI 8), mark kernels `STO_CUDA_ENTRY`
//!   and managed variables `STO_CUDA_MANAGED` (plain `__device__` data is neither); a PTX
//!   module with only a device function and data assembles to a cubin with neither (cuFFT
//!   11.4's sm_52 module).
//!
//! Under `CI=true` a missing cache fails the tests.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use cuda_sandbox_cuda_facts::gpus::{architectures, Retired};
use cuda_sandbox_cuda_facts::CudaVersion;
use cuda_sandbox_elfkit::fatbin::image::cubin_facts;
use cuda_sandbox_testkit::real_nvidia::RealNvidia;

/// The `sm_*` values a ptxas lists for `--gpu-name` in its `--help`.
fn accepted(ptxas: &Path) -> BTreeSet<String> {
    let out = Command::new(ptxas).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let start = help.find("--gpu-name").expect("--gpu-name in ptxas --help");
    let section = &help[start..];
    let end = section.find("Default value").unwrap_or(section.len());
    section[..end]
        .split('\'')
        .filter(|w| w.starts_with("sm_"))
        .map(str::to_owned)
        .collect()
}

/// `12.8` → (12, 8), for ordering releases.
fn key(release: &str) -> (u32, u32) {
    let (a, b) = release.split_once('.').unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

/// A PTX module for sm_XY of ISA `isa` holding plain device data, with a kernel, a managed
/// variable, or neither.
fn ptx(isa: &str, sm: u32, kernel: bool, managed: bool) -> String {
    let mut text = format!(".version {isa}\n.target sm_{sm}\n.address_size 64\n");
    text.push_str(".visible .global .align 4 .u32 plain;\n");
    if managed {
        text.push_str(".visible .global .attribute(.managed) .align 4 .u32 counter;\n");
    }
    text.push_str(".visible .func f()\n{\nret;\n}\n");
    if kernel {
        text.push_str(".visible .entry k(\n.param .u64 p\n)\n{\nret;\n}\n");
    }
    text
}

fn assemble(ptxas: &Path, source: &str, sm: u32, dir: &Path, name: &str) -> Vec<u8> {
    let input = dir.join(format!("{name}.ptx"));
    let output = dir.join(format!("{name}.cubin"));
    std::fs::write(&input, source).unwrap();
    let run = Command::new(ptxas)
        .arg(format!("-arch=sm_{sm}"))
        .arg(&input)
        .arg("-o")
        .arg(&output)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    std::fs::read(&output).unwrap()
}

// The tests, one module per tier (docs/testing.md).
mod pure;
