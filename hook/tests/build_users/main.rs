//! `explain` checks the device nodes a build gets against Nix's build users: real character
//! devices with chosen modes and groups, and real accounts made by `groupadd`, `useradd` and
//! `usermod` in the fake root (`--root`), so the host's own accounts are never touched and
//! the accounts go with the temporary directory. Needs root (mknod, chown).

use cuda_sandbox_testkit::{hook_config, root_available, run_ok, FakeDevices};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

#[path = "../common/mod.rs"]
mod common;

/// The gid of the group that owns the GPU node, as `video` does on a Jetson.
const VIDEO_GID: u32 = 4401;

struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    /// Nodes `nvidia0` (0660, group `csbxvideo`), `nvidiactl` and `nvidia-uvm` (0666); the
    /// group `nixbld` with one member `nixbld1`; `nix_conf` as `/etc/nix/nix.conf`.
    fn new(nix_conf: &str) -> Host {
        let host = Host {
            dir: tempfile::tempdir().unwrap(),
        };
        let root = host.root();
        FakeDevices::create(&root, 1, true).unwrap();
        for (node, mode) in [
            ("nvidia0", 0o660),
            ("nvidiactl", 0o666),
            ("nvidia-uvm", 0o666),
        ] {
            let path = root.join("dev").join(node);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        std::fs::create_dir_all(root.join("etc/nix")).unwrap();
        std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
        std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
        std::fs::write(root.join("etc/shadow"), "").unwrap();
        std::fs::write(root.join("etc/gshadow"), "").unwrap();
        host.account("groupadd", &["-g", "30000", "nixbld"]);
        host.account("groupadd", &["-g", &VIDEO_GID.to_string(), "csbxvideo"]);
        host.account(
            "useradd",
            &[
                "-u", "30001", "-g", "nixbld", "-G", "nixbld", "-M", "-N", "nixbld1",
            ],
        );
        std::os::unix::fs::chown(root.join("dev/nvidia0"), Some(0), Some(VIDEO_GID)).unwrap();
        std::fs::write(root.join("etc/nix/nix.conf"), nix_conf).unwrap();
        std::fs::write(
            host.config(),
            hook_config(&root, host.dir.path(), "", &["cuda"], ""),
        )
        .unwrap();
        host
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    /// Runs an account tool of `shadow` on the fake root's account files.
    fn account(&self, tool: &str, args: &[&str]) {
        run_ok(Command::new(tool).arg("--root").arg(self.root()).args(args));
    }

    fn explain(&self) -> (Value, String) {
        (
            common::explain_json(&self.config(), "cuda"),
            common::explain_output(&self.config(), "cuda", false),
        )
    }
}

fn unopenable(e: &Value) -> Vec<String> {
    e["build_users"]["unopenable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["node"].as_str().unwrap().to_string())
        .collect()
}

fn warnings(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with("warning:")).collect()
}

// The tests, one module per tier (docs/testing.md).
mod root;
