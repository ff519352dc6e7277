//! The runner's saxpy PTX is valid PTX: NVIDIA's real ptxas (12.9 and 13.0, from
//! `scripts/nvidia-userspace`) assembles it for every GPU architecture from Volta (sm_70)
//! up that each ptxas accepts, including the `a`/`f` variants. Which ones is asked of each
//! ptxas (`--help`, the allowed values of `--gpu-name`), never assumed, and printed.
//!
//! Run: `cargo test -p cuda-sandbox-check --test ptxas -- --nocapture`.

use std::path::Path;
use std::process::Command;

use cuda_sandbox_check::checks::kernel::SAXPY_PTX;
use cuda_sandbox_testkit::real_nvidia::RealNvidia;

/// The first real GPU architecture this test wants covered: Volta.
const OLDEST: u32 = 70;

/// The `sm_*` values `ptxas --help` allows for `--gpu-name`, in its order, without repeats.
fn gpu_names(ptxas: &Path) -> Vec<String> {
    let output = Command::new(ptxas)
        .arg("--help")
        .output()
        .expect("run ptxas --help");
    assert!(output.status.success(), "ptxas --help failed");
    let help = String::from_utf8_lossy(&output.stdout);
    let section: Vec<&str> = help
        .lines()
        .skip_while(|line| !line.starts_with("--gpu-name"))
        .enumerate()
        .take_while(|(i, line)| *i == 0 || !line.starts_with("--"))
        .map(|(_, line)| line)
        .collect();
    let mut names: Vec<String> = Vec::new();
    for quoted in section.join(" ").split('\'').skip(1).step_by(2) {
        if quoted.starts_with("sm_") && !names.iter().any(|n| n == quoted) {
            names.push(quoted.to_owned());
        }
    }
    names
}

/// The number in `sm_100a`.
fn arch_number(name: &str) -> u32 {
    let digits: String = name
        .trim_start_matches("sm_")
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap_or_else(|_| panic!("odd arch {name}"))
}

/// `ptxas -arch=ARCH ptx -o out`: `Err(ptxas's message)` when it refuses.
fn assemble(ptxas: &Path, arch: &str, ptx: &Path, out: &Path) -> Result<(), String> {
    let output = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg(ptx)
        .arg("-o")
        .arg(out)
        .output()
        .expect("run ptxas");
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
    }
}

// The tests, one module per tier (docs/testing.md).
mod pure;
