//! The hook's driver choice on fake host roots: other distributions (a real `ld.so.cache` made
//! by `ldconfig -r`), compat drivers with and without the host's kernel branch in their note,
//! and Jetson. Checked through `explain --json` and through the hook's real answer and manifest.

use cuda_sandbox_manifest::{DriverKind, Manifest};
use cuda_sandbox_testkit::{add_compat_note, root_available, shared_library};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../common/mod.rs"]
mod common;

use common::HOOK;
const LIBDIR: &str = "usr/lib/x86_64-linux-gnu";

struct Root {
    dir: tempfile::TempDir,
}

impl Root {
    fn new(kernel_driver: &str) -> Root {
        let dir = tempfile::tempdir().unwrap();
        let r = Root { dir };
        for dev in ["nvidia0", "nvidiactl", "nvidia-uvm"] {
            // Directories stand in for device nodes (they count as devices for the hook).
            std::fs::create_dir_all(r.path(&format!("root/dev/{dev}"))).unwrap();
        }
        std::fs::create_dir_all(r.path("root/proc/driver/nvidia")).unwrap();
        std::fs::write(
            r.path("root/proc/driver/nvidia/version"),
            format!("NVRM version: NVIDIA UNIX x86_64 Kernel Module  {kernel_driver}  Thu Jan 1 (FAKE)\n"),
        )
        .unwrap();
        std::fs::create_dir_all(r.path(&format!("root/{LIBDIR}"))).unwrap();
        r
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// A host library `file` with `soname`, plus the soname link, as driver packages install.
    fn host_library(&self, file: &str, soname: &str) {
        let lib = self.path(&format!("root/{LIBDIR}/{file}"));
        shared_library(&lib, Some(soname)).unwrap();
        if file != soname {
            std::os::unix::fs::symlink(file, self.path(&format!("root/{LIBDIR}/{soname}")))
                .unwrap();
        }
    }

    /// Writes the loader cache of the fake root with the real ldconfig.
    fn ldconfig(&self) {
        std::fs::create_dir_all(self.path("root/etc")).unwrap();
        std::fs::write(self.path("root/etc/ld.so.conf"), format!("/{LIBDIR}\n")).unwrap();
        let out = Command::new("ldconfig")
            .arg("-r")
            .arg(self.path("root"))
            .output()
            .expect("ldconfig");
        assert!(
            out.status.success(),
            "ldconfig: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(self.path("root/etc/ld.so.cache").exists());
    }

    /// A compat directory `rel` (under the root) with a versioned libcuda and its note.
    fn compat(&self, rel: &str, file: &str, note: Option<&str>) {
        let dir = self.path(&format!("root/{rel}"));
        std::fs::create_dir_all(&dir).unwrap();
        shared_library(&dir.join(file), Some("libcuda.so.1")).unwrap();
        if let Some(json) = note {
            add_compat_note(&dir.join(file), json).unwrap();
        }
        std::os::unix::fs::symlink(file, dir.join("libcuda.so.1")).unwrap();
    }

    fn config(&self, compat: &[&str]) -> PathBuf {
        let globs: Vec<String> = compat.iter().map(|c| format!("{c:?}")).collect();
        let p = self.path("config.toml");
        std::fs::write(
            &p,
            format!(
                "host_root = \"{}\"\nruntime_dir = \"{}\"\nclosure_cache = \"{}\"\n\
                 [[rule]]\nname = \"nvidia\"\nfeatures = [\"cuda\"]\n\
                 [[rule.device]]\nglob = \"/dev/nvidia[0-9]*\"\nrequired = true\n\
                 [rule.driver]\ncompat = [{}]\n",
                self.path("root").display(),
                self.path("run").display(),
                self.path("cache").display(),
                globs.join(", ")
            ),
        )
        .unwrap();
        p
    }

    fn explain(&self, config: &Path) -> Value {
        common::explain_json(config, "cuda")
    }

    fn explain_text(&self, config: &Path) -> String {
        common::explain_output(config, "cuda", false)
    }

    /// Runs the hook as Nix would for a tagged .drv; returns its answer and the manifest.
    fn hook(&self, config: &Path) -> (String, Manifest) {
        let (out, chroot) = self.run_hook(config);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let name = cuda_sandbox_hook::manifest_file::name_for(Some(&chroot));
        let manifest = Manifest::read(&self.path("run/manifests").join(name)).unwrap();
        (String::from_utf8(out.stdout).unwrap(), manifest)
    }

    /// Runs the hook as Nix would for a tagged .drv; returns its output and the chroot.
    fn run_hook(&self, config: &Path) -> (std::process::Output, PathBuf) {
        let drv = self.path("t.drv");
        std::fs::write(
            &drv,
            r#"Derive([("out","/nix/store/x-t","","")],[],[],"x86_64-linux","/bin/sh",[],[("requiredSystemFeatures","cuda")])"#,
        )
        .unwrap();
        // Nix creates the chroot before it runs the hook.
        let chroot = self.path("t.drv.chroot");
        std::fs::create_dir_all(&chroot).unwrap();
        let out = Command::new(HOOK)
            .arg(&drv)
            .arg(&chroot)
            .env("CUDA_SANDBOX_CONFIG", config)
            .output()
            .unwrap();
        (out, chroot)
    }
}

fn exposures(e: &Value) -> Vec<(String, String, String)> {
    e["plan"]["exposures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["inside"].as_str().unwrap().to_string(),
                x["outside"].as_str().unwrap().to_string(),
                x["reason"]["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

// The tests, one module per tier (docs/testing.md).
mod root;
