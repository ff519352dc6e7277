//! The hook as Nix runs it (a process with two arguments), and `explain`, against fake roots.
//! Runs everywhere: needs neither root nor Nix (store closures use a stand-in nix-store).

use cuda_sandbox_testkit::write_script;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "../common/mod.rs"]
mod common;

use common::HOOK;

struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    fn new() -> Case {
        Case {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    /// Writes a .drv requiring `features` (plain env entry) and returns its path.
    fn drv(&self, name: &str, features: Option<&str>) -> PathBuf {
        let mut env = String::from(r#"("out","/nix/store/x-out")"#);
        if let Some(f) = features {
            env.push_str(&format!(r#",("requiredSystemFeatures","{f}")"#));
        }
        let text = format!(
            r#"Derive([("out","/nix/store/x-out","","")],[],[],"x86_64-linux","/bin/sh",[],[{env}])"#
        );
        let p = self.path(&format!("{name}.drv"));
        std::fs::write(&p, text).unwrap();
        p
    }
    /// A config whose host root is `root` with one rule for `cuda`; `body` adds entries.
    fn config(&self, body: &str) -> PathBuf {
        let p = self.path("config.toml");
        std::fs::write(
            &p,
            format!(
                "host_root = \"{}\"\nruntime_dir = \"{}\"\nclosure_cache = \"{}\"\nnix_store = \"{}\"\n[[rule]]\nname = \"gpu\"\nfeatures = [\"cuda\"]\n{body}",
                self.path("root").display(),
                self.path("run").display(),
                self.path("cache").display(),
                self.path("nix-store").display()
            ),
        )
        .unwrap();
        p
    }
    fn hook(&self, drv: &Path, config: &Path) -> Output {
        Command::new(HOOK)
            .arg(drv)
            .arg(self.path("chroot"))
            .env("CUDA_SANDBOX_CONFIG", config)
            .output()
            .unwrap()
    }
    /// The manifest the hook writes for a build in `chroot/`.
    fn manifest(&self) -> PathBuf {
        let name = cuda_sandbox_hook::manifest_file::name_for(Some(&self.path("chroot")));
        self.path("run/manifests").join(name)
    }
    fn explain_json(&self, config: &Path, features: &str) -> serde_json::Value {
        common::explain_json(config, features)
    }
}

/// An optional device for a rule that needs nothing else: a rule must name something to expose.
const A_DEVICE: &str = "[[rule.device]]\nglob = \"/dev/nvidia0\"\n";

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A config whose rule exposes one directory, with `missing_drv` set.
fn remote_case(policy: &str) -> (Case, PathBuf) {
    let c = Case::new();
    std::fs::create_dir_all(c.path("root/run/gpu-tools")).unwrap();
    let config = c.config("[[rule.path]]\npath = \"/run/gpu-tools\"\n");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("missing_drv = \"{policy}\"\n{text}")).unwrap();
    (c, config)
}

/// A `.drv` with the env entries `env` (ATerm, as written between the brackets).
fn drv_with_env(c: &Case, name: &str, env: &str) -> PathBuf {
    let p = c.path(&format!("{name}.drv"));
    std::fs::write(
        &p,
        format!(
            r#"Derive([("out","/nix/store/x-out","","")],[],[],"x86_64-linux","/bin/sh",[],[{env}])"#
        ),
    )
    .unwrap();
    p
}

/// Asserts that `out` is the hook refusing a derivation that sets `key` twice: exit 1 and one
/// line naming the key, nothing for Nix.
fn assert_refused_for(out: &Output, key: &str, case: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{case}: {err}");
    assert!(out.stdout.is_empty(), "{case}: exposed");
    assert_eq!(err.lines().count(), 1, "{case}: {err}");
    assert!(
        err.contains(&format!("\"{key}\"")) && err.contains("more than once"),
        "{case}: {err}"
    );
}

// The tests, one module per tier (docs/testing.md).
mod cli;
mod pure;
mod root;
