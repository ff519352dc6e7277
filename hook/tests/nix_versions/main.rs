//! What differs between the Nix versions the tests run under (2.8 on the host; 2.26 and 2.34
//! with `scripts/with-nix`), each difference a test that holds the Nix in use to the
//! behaviour `cuda_sandbox_testkit::NixVersion` says it has, and the proof that a build under
//! that Nix is really sandboxed (a Nix whose sandbox is silently off would pass every other
//! test that only looks at what a build sees).
//!
//! Run under another Nix: `CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="scripts/with-nix 2.34"
//! cargo test -p cuda-sandbox-hook --test nix_versions`. Needs root and Nix; under `CI=true`
//! they fail rather than skip without them.

use cuda_sandbox_testkit::{nix_available, nonce, write_script, NixSandbox, NixVersion};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;

fn version() -> NixVersion {
    NixVersion::current().expect("nix-build --version")
}

/// A sandbox without the hook: what a builder needs from the host, and nothing else.
fn plain_sandbox() -> NixSandbox {
    NixSandbox::without_hook()
}

/// Writes `expr` (a Nix function of `{ nonce }`) to `dir/NAME.nix`.
fn nix_file(dir: &Path, name: &str, expr: &str) -> PathBuf {
    let file = dir.join(format!("{name}.nix"));
    std::fs::write(&file, expr).unwrap();
    file
}

/// A derivation running `script` with /bin/sh, its output a directory.
fn sh_derivation(name: &str, script: &str, features: &str) -> String {
    format!(
        "{{ nonce }}: derivation {{\n  name = \"{name}\";\n  inherit nonce;\n  \
         system = builtins.currentSystem;\n  builder = \"/bin/sh\";\n  \
         PATH = \"/bin:/usr/bin\";\n  requiredSystemFeatures = [ {features} ];\n  \
         args = [ \"-c\" ''\n{script}\n'' ];\n}}\n"
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_string()
}

/// The derivation `drv` in a `show-derivation`/`derivation show` answer: Nix 2.8 keys the
/// top-level object by the full store path; newer Nix may key it by the base name and nest it
/// under `derivations`.
fn derivation_of<'a>(json: &'a serde_json::Value, drv: &str) -> Option<&'a serde_json::Value> {
    let base = drv.rsplit('/').next().unwrap_or(drv);
    let map = json.get("derivations").unwrap_or(json);
    map.get(drv).or_else(|| map.get(base))
}

/// The pids whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            if String::from_utf8_lossy(&cmdline).contains(marker) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// The uids of the `nixbld*` users in the passwd file `path`; empty when it cannot be read.
fn build_uids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("nixbld"))
        .filter_map(|l| l.split(':').nth(2)?.parse().ok())
        .collect()
}

// The tests, one module per tier (docs/testing.md).
mod nix_versions;
