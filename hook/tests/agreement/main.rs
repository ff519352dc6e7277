//! The hook's answer and `explain`'s agree, on every scenario: one request resolver, one plan.
//! Runs everywhere (fake roots, directories standing for devices, a stand-in nix-store).

use cuda_sandbox_testkit::write_script;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "../common/mod.rs"]
mod common;

use common::HOOK;

struct Scenario {
    dir: tempfile::TempDir,
}

impl Scenario {
    fn new() -> Scenario {
        let s = Scenario {
            dir: tempfile::tempdir().unwrap(),
        };
        for d in [
            "root/dev/nvidiactl",
            "root/dev/nvidia0",
            "root/dev/nvidia1",
            "chroot",
        ] {
            std::fs::create_dir_all(s.path(d)).unwrap();
        }
        std::fs::create_dir_all(s.path("store/aaa-driver/lib")).unwrap();
        std::fs::create_dir_all(s.path("root/run")).unwrap();
        std::os::unix::fs::symlink(s.path("store/aaa-driver"), s.path("root/run/opengl-driver"))
            .unwrap();
        write_script(
            &s.path("nix-store"),
            &format!(
                "#!/bin/sh\necho \"$3\"\necho {}/bbb-dep\n",
                s.path("store").display()
            ),
        )
        .unwrap();
        s
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn config(&self, top: &str, rule: &str) -> PathBuf {
        let p = self.path("config.toml");
        std::fs::write(
            &p,
            format!(
                "{top}host_root = \"{}\"\nstore_dir = \"{}\"\nruntime_dir = \"{}\"\n\
                 closure_cache = \"{}\"\nnix_store = \"{}\"\n[[rule]]\nname = \"gpu\"\n\
                 features = [\"cuda\"]\n[[rule.device]]\nglob = \"/dev/nvidiactl\"\n\
                 required = true\n[[rule.device]]\nglob = \"/dev/nvidia[0-9]*\"\n\
                 [[rule.path]]\npath = \"/run/opengl-driver\"\n{rule}",
                self.path("root").display(),
                self.path("store").display(),
                self.path("run").display(),
                self.path("cache").display(),
                self.path("nix-store").display()
            ),
        )
        .unwrap();
        p
    }

    fn drv(&self, name: &str, env: &str) -> PathBuf {
        let p = self.path(&format!("{name}.drv"));
        std::fs::write(
            &p,
            format!(
                r#"Derive([("out","/nix/store/x-out","","")],[],[],"x86_64-linux","/bin/sh",[],[("out","/nix/store/x-out"){env}])"#
            ),
        )
        .unwrap();
        p
    }
}

/// Runs `explain --json` and then the hook on the same derivation, config and environment,
/// and checks that they say the same thing.
fn agree(what: &str, s: &Scenario, drv: &Path, config: &Path, json: Option<&str>) -> Output {
    let with_env = |cmd: &mut Command| {
        cmd.env("CUDA_SANDBOX_CONFIG", config);
        match json {
            Some(j) => cmd.env("NIX_DERIVATION_V4", j),
            None => cmd.env_remove("NIX_DERIVATION_V4"),
        };
    };
    let mut explain = Command::new(HOOK);
    explain.args(["explain", "--json"]).arg(drv);
    with_env(&mut explain);
    let e = explain.output().unwrap();
    assert!(e.status.success(), "{what}: explain failed: {e:?}");
    let e: serde_json::Value = serde_json::from_slice(&e.stdout).unwrap();
    let mut hook = Command::new(HOOK);
    hook.arg(drv).arg(s.path("chroot"));
    with_env(&mut hook);
    let h = hook.output().unwrap();
    let verdict = e["verdict"].as_str().unwrap();
    let stderr = String::from_utf8_lossy(&h.stderr);
    if h.status.success() {
        assert!(
            !verdict.starts_with("FAILS"),
            "{what}: hook passed, explain says {verdict}"
        );
        // The manifest's file is named after the chroot; explain has none.
        let name = cuda_sandbox_hook::manifest_file::name_for(Some(&s.path("chroot")));
        let answer =
            String::from_utf8_lossy(&h.stdout).replace(&format!("/{name}"), "/explain.json");
        assert_eq!(answer, e["nix_answer"].as_str().unwrap(), "{what}");
        for w in e["warnings"].as_array().unwrap() {
            assert!(
                stderr.contains(w.as_str().unwrap()),
                "{what}: {stderr} lacks {w}"
            );
        }
    } else {
        assert_eq!(h.status.code(), Some(1), "{what}: {stderr}");
        assert!(
            verdict.starts_with("FAILS"),
            "{what}: hook failed ({stderr}), explain says {verdict}"
        );
        assert_eq!(e["nix_answer"], "", "{what}");
        let reason = match e["plan"]["problems"].as_array().and_then(|p| p.first()) {
            Some(p) => p["what"].as_str().unwrap().to_string(),
            None => verdict.trim_start_matches("FAILS: ").to_string(),
        };
        assert!(
            stderr.contains(&reason),
            "{what}: hook said {stderr}, explain {reason}"
        );
    }
    h
}

// The tests, one module per tier (docs/testing.md).
mod cli;
