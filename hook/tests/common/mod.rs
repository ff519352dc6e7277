//! What the hook's integration tests share: the built binary, the Nix files, `explain`.
#![allow(dead_code)] // each test file uses a different part

use std::os::unix::fs::PermissionsExt;
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

/// Writes a GPU inventory in `run_dir` (the hook's `runtime_dir`), root's and 0644 as
/// `cuda-sandbox-check inventory` writes it, in the schema it writes: GPU `i` is
/// `/dev/nvidia<i>` at [`FakePci::gpu`](cuda_sandbox_testkit::FakePci::gpu)`(i)` with the
/// fake device id, of capability `capabilities[i]`.
pub fn write_inventory(run_dir: &Path, capabilities: &[&str]) {
    use cuda_sandbox_manifest::inventory::{Bdf, Inventory, InventoryGpu, INVENTORY_FILE};
    let gpus = capabilities
        .iter()
        .enumerate()
        .map(|(i, cc)| InventoryGpu {
            bdf: Bdf::parse(&cuda_sandbox_testkit::FakePci::gpu(i as u32)).unwrap(),
            pci_device: cuda_sandbox_testkit::fake_pci::FAKE_GPU_DEVICE,
            minor: i as u32,
            capability: cuda_sandbox_cuda_facts::Capability::parse(cc).unwrap(),
        })
        .collect();
    std::fs::create_dir_all(run_dir).unwrap();
    std::fs::set_permissions(run_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = run_dir.join(INVENTORY_FILE);
    std::fs::write(&file, Inventory::new(gpus).to_json()).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
}
