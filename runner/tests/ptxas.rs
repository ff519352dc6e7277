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

#[test]
fn saxpy_ptx_assembles_for_every_architecture_from_volta_that_ptxas_knows() {
    let Some(real) = RealNvidia::find("saxpy_ptx_assembles_for_every_architecture_from_volta")
    else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let ptx = temp.path().join("saxpy.ptx");
    std::fs::write(&ptx, SAXPY_PTX).unwrap();
    let out = temp.path().join("saxpy.cubin");
    let mut failures = Vec::new();
    for (major, must_have) in [
        (12, &["sm_70", "sm_80", "sm_90", "sm_100", "sm_120"][..]),
        (13, &["sm_75", "sm_80", "sm_90", "sm_100", "sm_120"][..]),
    ] {
        let ptxas = real.ptxas(major);
        let mut names: Vec<String> = gpu_names(&ptxas)
            .into_iter()
            .filter(|name| arch_number(name) >= OLDEST)
            .collect();
        names.sort_by_key(|name| (arch_number(name), name.clone()));
        for name in must_have {
            assert!(
                names.iter().any(|n| n == name),
                "ptxas {major} lists no {name} in --help: {names:?}"
            );
        }
        let mut assembled = Vec::new();
        for name in &names {
            match assemble(&ptxas, name, &ptx, &out) {
                Ok(()) => assembled.push(name.as_str()),
                Err(why) => failures.push(format!("ptxas {major} -arch={name}: {why}")),
            }
        }
        println!(
            "ptxas {major}: saxpy.ptx assembles for {} ({} architectures)",
            assembled.join(" "),
            assembled.len()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The test above can fail: ptxas refuses a broken copy of the same PTX.
#[test]
fn ptxas_refuses_a_broken_saxpy() {
    let Some(real) = RealNvidia::find("ptxas_refuses_a_broken_saxpy") else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let ptx = temp.path().join("broken.ptx");
    let broken = SAXPY_PTX.replacen("ret;", "ret.bogus;", 1);
    assert_ne!(broken, SAXPY_PTX, "the PTX has a ret; to break");
    std::fs::write(&ptx, broken).unwrap();
    for major in [12, 13] {
        let refused = assemble(&real.ptxas(major), "sm_90", &ptx, &temp.path().join("x"));
        assert!(refused.is_err(), "ptxas {major} accepted broken PTX");
    }
}
