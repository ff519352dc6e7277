//! Memory and time of the hook on a 100 MiB `.drv` (hostile or just huge): one process per
//! case, peak RSS from the kernel's accounting of waited-for children.
//!
//! `cargo bench -p cuda-sandbox-hook --bench large_drv` prints, for untagged and tagged 100 MiB
//! derivations (one env value full of escapes; structured attrs, a 100 MiB `__json` with
//! `cudaSandboxGpus`, holding one big string, or 2^25 small array values, an escape-free run
//! of 100 MiB): wall time, the peak RSS of
//! that hook process alone (`wait4`), and the peak as a multiple of the file (the goal: at
//! most 2×, and linear time on every shape). The hook reads the file once
//! and parses it in place, so the peak stays near the file size plus the one escaped value it
//! must copy; `__json` is read by typed structs that skip every key but the two they need.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const HOOK: &str = env!("CARGO_BIN_EXE_cuda-sandbox-hook");
const SIZE: usize = 100 << 20;

/// Writes `head`, about [`SIZE`] bytes of `chunk`, then `tail` to `path`, a chunk at a time:
/// this process never holds the file, whose pages a spawned child would otherwise count as its
/// own peak RSS until it execs. Returns the file's size.
fn write_streamed(path: &Path, head: &str, chunk: &str, tail: &str) -> usize {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    out.write_all(head.as_bytes()).unwrap();
    let mut len = head.len() + tail.len();
    while len < SIZE {
        out.write_all(chunk.as_bytes()).unwrap();
        len += chunk.len();
    }
    out.write_all(tail.as_bytes()).unwrap();
    out.flush().unwrap();
    len
}

/// Writes a derivation requiring the given features to a path; returns its size.
type WriteDrv = fn(&Path, &str) -> usize;

/// A 100 MiB derivation with one env value full of escapes.
fn drv(path: &Path, features: &str) -> usize {
    write_streamed(
        path,
        r#"Derive([("out","/nix/store/x-big","","")],[],[],"x86_64-linux","/bin/sh",[],[("big",""#,
        "line one\\nline \\\"two\\\"\\ttabbed \\\\ backslash ",
        &format!(r#""),("out","/nix/store/x-big"),("requiredSystemFeatures","{features}")])"#),
    )
}

/// A 100 MiB structured-attrs derivation: `__json` holds the features, the GPU count and one
/// big string.
fn structured_drv(path: &Path, features: &str) -> usize {
    // ATerm text `line one\\n \\\"quoted\\\" `: JSON text `line one\n \"quoted\" `.
    write_streamed(
        path,
        r#"Derive([("out","/nix/store/x-big","","")],[],[],"x86_64-linux","/bin/sh",[],[("__json","{\"big\":\""#,
        r#"line one\\n \\\"quoted\\\" "#,
        &format!(
            r#"\",\"cudaSandboxGpus\":1,\"requiredSystemFeatures\":[\"{features}\"]}}"),("out","/nix/store/x-big")])"#
        ),
    )
}

/// A 100 MiB structured-attrs derivation whose `__json` holds an array of small values: no
/// escape for 100 MiB (quadratic on f51a825).
fn array_drv(path: &Path, features: &str) -> usize {
    write_streamed(
        path,
        r#"Derive([("out","/nix/store/x-big","","")],[],[],"x86_64-linux","/bin/sh",[],[("__json","{\"big\":["#,
        "0,1,2,3,",
        &format!(
            r#"4],\"cudaSandboxGpus\":1,\"requiredSystemFeatures\":[\"{features}\"]}}"),("out","/nix/store/x-big")])"#
        ),
    )
}

/// Runs `cmd` and returns its exit status and its own peak RSS in KiB (`wait4`).
fn run_measured(cmd: &mut Command) -> (std::process::ExitStatus, i64) {
    // Reaped below with wait4(2), which also gives its peak RSS.
    #[allow(clippy::zombie_processes)]
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: nix::libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `child.id()` is our own unwaited child; both out-pointers are valid.
    let pid = unsafe { nix::libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    (std::process::ExitStatus::from_raw(status), usage.ru_maxrss)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("large_drv: run with `cargo bench -p cuda-sandbox-hook --bench large_drv`");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "runtime_dir = \"{}\"\n[[rule]]\nname = \"n\"\nfeatures = [\"cuda\"]\n[[rule.device]]\nglob = \"/dev/nvidia0\"\n",
            dir.path().join("run").display()
        ),
    )
    .unwrap();
    println!("hook on 100 MiB derivations (peak RSS of each hook process alone)");
    let cases: [(&str, WriteDrv, &str); 6] = [
        ("untagged", drv, "big-parallel"),
        ("tagged", drv, "cuda"),
        ("untagged __json", structured_drv, "big-parallel"),
        ("tagged __json", structured_drv, "cuda"),
        ("untagged array", array_drv, "big-parallel"),
        ("tagged array", array_drv, "cuda"),
    ];
    for (name, make, features) in cases {
        let path = dir.path().join(format!("{}.drv", name.replace(' ', "-")));
        let len = make(&path, features);
        let mut cmd = Command::new(HOOK);
        cmd.arg(&path)
            .arg(dir.path().join("chroot"))
            .env("CUDA_SANDBOX_CONFIG", &config);
        let start = Instant::now();
        let (status, peak_kib) = run_measured(&mut cmd);
        let wall = start.elapsed();
        assert!(status.success(), "{name}: {status}");
        let mib = len as f64 / (1 << 20) as f64;
        let peak = peak_kib as f64 / 1024.0;
        println!(
            "{name:<17} {mib:.1} MiB: {:>7.1} ms, peak RSS {peak:.1} MiB = {:.2}x the file (target <= 2x: {})",
            wall.as_secs_f64() * 1e3,
            peak / mib,
            if peak / mib <= 2.0 { "met" } else { "NOT met" }
        );
        let _ = std::fs::remove_file(&path);
    }
}
