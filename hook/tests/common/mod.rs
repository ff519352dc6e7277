//! What the hook's integration tests share: the built binary, the Nix files, `explain`.
#![allow(dead_code)] // each test file uses a different part

use std::path::{Path, PathBuf};
use std::process::Command;

pub mod ssh;

/// The hook binary cargo built for these tests.
pub const HOOK: &str = env!("CARGO_BIN_EXE_cuda-sandbox-hook");

/// A Nix file of `hook/tests/nix/`.
pub fn nix_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/nix")
        .join(name)
}

/// `cuda-sandbox-hook explain --features FEATURES --config CONFIG [--json]`'s stdout; panics
/// (with its stderr) when it fails.
pub fn explain_output(config: &Path, features: &str, json: bool) -> String {
    let mut cmd = Command::new(HOOK);
    cmd.args(["explain", "--features", features, "--config"])
        .arg(config);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "explain failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The JSON `explain` of a build requiring `features` under `config`.
pub fn explain_json(config: &Path, features: &str) -> serde_json::Value {
    serde_json::from_str(&explain_output(config, features, true)).unwrap()
}

/// The root directory (device, inode) of process `pid`, while it runs.
pub fn root_of(pid: u32) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(format!("/proc/{pid}/root")).ok()?;
    Some((m.dev(), m.ino()))
}

/// Whether process `pid` is PID 1 of its PID namespace (the last `NSpid` of its status).
pub fn is_namespace_init(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|status| {
        status
            .lines()
            .any(|l| l.starts_with("NSpid:") && l.ends_with("\t1"))
    })
}
