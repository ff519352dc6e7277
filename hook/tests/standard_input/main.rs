//! The hook never reads its standard input: Nix says nothing about it. Nix runs the hook with
//! the standard input of the process that builds, which is the user's terminal under
//! `nix-build` run from a shell, and the connection to the client under `nix-daemon --stdio`
//! on a remote builder. NixOS/nix#16413 (open) would `dup2` a JSON record of the derivation
//! onto it, in the revision under review, without saying so in the environment.
//!
//! Each run below would hang, or consume bytes that are not the hook's, if the hook read it:
//! a pipe holding bytes whose writer never closes it, a terminal nobody types into, and a
//! file holding the record #16413 proposes for a derivation that is not on disk.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;

use common::HOOK;
use cuda_sandbox_testkit::terminal::run_on_a_fresh_terminal;

/// Far longer than any run of the hook here takes (a few milliseconds).
const LIMIT: Duration = Duration::from_secs(20);

/// What is on the standard input the hook must leave alone.
const NOT_THE_HOOKS: &[u8] = b"typed by the user, not for the hook\n";

/// A temporary directory with a config, a tagged and an untagged `.drv`.
struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    fn new() -> Host {
        let h = Host {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::write(
            h.path("config.toml"),
            format!(
                "host_root = \"{}\"\nruntime_dir = \"{}\"\n[[rule]]\nname = \"gpu\"\n\
                 features = [\"cuda\"]\n[[rule.device]]\nglob = \"/dev/nvidia0\"\n",
                h.path("root").display(),
                h.path("run").display()
            ),
        )
        .unwrap();
        for (name, features) in [("tagged", "cuda"), ("untagged", "kvm")] {
            std::fs::write(
                h.path(&format!("{name}.drv")),
                format!(
                    r#"Derive([("out","/nix/store/x-out","","")],[],[],"x86_64-linux","/bin/sh",[],[("out","/nix/store/x-out"),("requiredSystemFeatures","{features}")])"#
                ),
            )
            .unwrap();
        }
        h
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Every way the hook is run: by Nix (tagged, untagged, the `.drv` absent), `explain`
    /// and `check-config`, each with this host's config.
    fn commands(&self) -> Vec<(String, Command)> {
        let config = self.path("config.toml");
        let as_nix = |drv: &str| {
            let mut c = Command::new(HOOK);
            c.arg(self.path(drv))
                .arg(self.path("chroot"))
                .env("CUDA_SANDBOX_CONFIG", &config)
                .env_remove("NIX_DERIVATION_V4");
            c
        };
        let mut explain = Command::new(HOOK);
        explain
            .args(["explain", "--features", "cuda", "--config"])
            .arg(&config);
        let mut check = Command::new(HOOK);
        check
            .args(["check-config", "--content-only", "--config"])
            .arg(&config);
        vec![
            ("the hook, tagged".into(), as_nix("tagged.drv")),
            ("the hook, untagged".into(), as_nix("untagged.drv")),
            ("the hook, .drv absent".into(), as_nix("absent.drv")),
            ("explain".into(), explain),
            ("check-config".into(), check),
        ]
    }
}

/// Runs `command` with `stdin`, for at most [`LIMIT`]; panics naming `what` if it hangs.
fn run_within_limit(what: &str, command: &mut Command, stdin: Stdio) -> Output {
    let mut child = command
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {LIMIT:?}: it is waiting on its standard input");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.wait_with_output().unwrap()
}

fn assert_ran(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// The tests, one module per tier (docs/testing.md).
mod cli;
