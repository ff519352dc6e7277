//! `--expect-no-gpu` (`isolation::no_gpu`): the negative check passes only when nothing of the
//! GPU is visible, and names what it sees otherwise.

#[path = "../common/mod.rs"]
mod common;

use std::process::Command;

use common::{FakeDriver, RUNNER};
use fake_driver::Sidecar;

/// Runs the negative check with every path it looks at inside `dev_root`'s parent, so the
/// host's real /run/opengl-driver and manifest (a GPU host has them) never count.
fn run(dev_root: &std::path::Path, library_path: Option<&std::path::Path>) -> (bool, String) {
    let here = dev_root.parent().unwrap();
    let mut cmd = Command::new(RUNNER);
    cmd.args(["--expect-no-gpu", "--dev-root"])
        .arg(dev_root)
        .arg("--manifest")
        .arg(here.join("run/cuda-sandbox/manifest.json"))
        .arg("--driver-link")
        .arg(here.join("run/opengl-driver/lib"));
    match library_path {
        Some(p) => cmd.env("LD_LIBRARY_PATH", p),
        None => cmd.env_remove("LD_LIBRARY_PATH"),
    };
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

// The tests, one module per tier (docs/testing.md).
mod cli;
