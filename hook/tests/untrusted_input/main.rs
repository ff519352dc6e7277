//! Untrusted input in linear time and bounded memory: derivations as ATerm, their
//! `__json`, and derivations as JSON (`NIX_DERIVATION_V4`). The time bounds are so generous that only super-linear code can
//! miss them: 8 MiB in under 10 s in a debug build, where the quadratic `__json` reader of
//! f51a825 needed minutes (2 MiB took it 55 s).

use cuda_sandbox_hook::drv::{DrvAttrs, DrvEnv, DrvError, JsonDerivation};
use cuda_sandbox_testkit::lossy;
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;

use common::HOOK;

const SIZE: usize = 8 << 20;
const BOUND: Duration = Duration::from_secs(10);

/// `head`, then `unit` repeated to about [`SIZE`] bytes, then `tail`.
fn big(head: &str, unit: &str, tail: &str) -> Vec<u8> {
    big_of(SIZE, head, unit, tail)
}

/// `head`, then `unit` repeated to about `size` bytes, then `tail`.
fn big_of(size: usize, head: &str, unit: &str, tail: &str) -> Vec<u8> {
    let mut out = String::with_capacity(size + head.len() + tail.len() + unit.len());
    out.push_str(head);
    while out.len() < size {
        out.push_str(unit);
    }
    out.push_str(tail);
    out.into_bytes()
}

/// A structured-attrs `.drv` whose `__json` holds `"big":` `value_head` `unit`… `value_tail`
/// (JSON as the ATerm writes it: each `"` of the JSON escaped), then the features.
fn structured_drv(value_head: &str, unit: &str, value_tail: &str, features: &str) -> Vec<u8> {
    big(
        &format!(
            r#"Derive([("out","/nix/store/x-big","","")],[],[],"x86_64-linux","/bin/sh",[],[("__json","{{\"big\":{value_head}"#
        ),
        unit,
        &format!(
            r#"{value_tail},\"cudaSandboxGpus\":2,\"requiredSystemFeatures\":[\"{features}\"]}}"),("out","/nix/store/x-big")])"#
        ),
    )
}

/// What the hook decides on of a derivation given as JSON.
fn json_attrs(json: &[u8]) -> Result<DrvAttrs<'static>, DrvError> {
    JsonDerivation::parse(json)?.attrs()
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    assert!(
        took < BOUND,
        "{what}: {took:?} for 8 MiB (linear code takes well under 1 s)"
    );
    out
}

/// The peak RSS of the biggest child this process has waited for, in MiB.
fn children_peak_mib() -> f64 {
    let usage =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap();
    usage.max_rss() as f64 / 1024.0
}

// CDI specs in YAML: no anchor or alias is replayed, and the events read are capped.

/// What a child run of the hook cost.
struct Run {
    /// Its exit status (`None`: killed by a signal).
    code: Option<i32>,
    /// Its stdout.
    stdout: String,
    /// Its wall time.
    took: Duration,
    /// Its peak RSS, in MiB, from `wait4(2)`.
    peak_mib: f64,
}

/// `explain --json --features cuda --config CONFIG` as a child with at most 1 GiB of address
/// space (`ulimit -v`, so a run that amplifies fails fast instead of taking the machine's
/// memory), killed after `limit`. Returns what it cost.
fn explain_capped(config: &std::path::Path, stdout: &std::path::Path, limit: Duration) -> Run {
    let start = Instant::now();
    // Reaped below with wait4(2), which also gives its peak RSS.
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new("sh")
        .args(["-c", "ulimit -v 1048576; exec \"$@\"", "sh", HOOK])
        .args(["explain", "--json", "--features", "cuda", "--config"])
        .arg(config)
        .stdout(std::fs::File::create(stdout).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: nix::libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: our own unwaited child; both out-pointers are valid.
        let got = unsafe { nix::libc::wait4(pid, &mut status, nix::libc::WNOHANG, &mut usage) };
        assert!(got >= 0, "wait4: {}", std::io::Error::last_os_error());
        if got == pid {
            break;
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            // SAFETY: as above.
            unsafe { nix::libc::wait4(pid, &mut status, 0, &mut usage) };
            panic!("explain ran past {limit:?} on the spec (killed)");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let code = nix::libc::WIFEXITED(status).then(|| nix::libc::WEXITSTATUS(status));
    Run {
        code,
        stdout: std::fs::read_to_string(stdout).unwrap(),
        took: start.elapsed(),
        peak_mib: usage.ru_maxrss as f64 / 1024.0,
    }
}

/// A spec directory holding `spec.yaml` with `text`, and a config whose one rule names
/// `nvidia.com/gpu=all` from it. Returns the config and the spec's path.
fn yaml_spec_host(dir: &std::path::Path, text: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let specs = dir.join("cdi");
    std::fs::create_dir(&specs).unwrap();
    let spec = specs.join("spec.yaml");
    std::fs::write(&spec, text).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "runtime_dir = \"{}\"\nclosure_cache = \"{}\"\ncdi_spec_dirs = [\"{}\"]\n\
             [[rule]]\nname = \"r\"\nfeatures = [\"cuda\"]\ncdi = [\"nvidia.com/gpu=all\"]\n",
            dir.join("run").display(),
            dir.join("cache").display(),
            specs.display()
        ),
    )
    .unwrap();
    (config, spec)
}

// The tests, one module per tier (docs/testing.md).
mod cli;
mod pure;
