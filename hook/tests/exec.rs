//! `cuda-sandbox-hook exec`: a command in a private mount namespace with exactly what the hook
//! exposes. Needs root (and the workspace's runner and fake driver, built by
//! `cargo build --workspace`); under `CI=true` a missing root fails instead of skipping.

use cuda_sandbox_testkit::{root_available, workspace_binary, FakeDevices};
use std::path::PathBuf;
use std::process::{Command, Output};

mod common;

use common::HOOK;

struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    /// Two GPUs on the host; the config exposes only `nvidia0`, plus the fake driver behind a
    /// driver link and a kernel module version.
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        FakeDevices::create(&root, 2, true).unwrap();
        std::fs::create_dir_all(root.join("proc/driver/nvidia")).unwrap();
        std::fs::write(
            root.join("proc/driver/nvidia/version"),
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  (FAKE)\n",
        )
        .unwrap();
        let out = Command::new(workspace_binary("make-fake-driver"))
            .arg(root.join("run/opengl-driver/lib"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(
            dir.path().join("config.toml"),
            format!(
                "host_root = \"{}\"\nruntime_dir = \"{}\"\nclosure_cache = \"{}\"\n\
                 [[rule]]\nname = \"nvidia\"\nfeatures = [\"cuda\"]\n\
                 [[rule.device]]\nglob = \"/dev/nvidia0\"\nrequired = true\n\
                 [[rule.device]]\nglob = \"/dev/nvidiactl\"\nrequired = true\n\
                 [[rule.device]]\nglob = \"/dev/nvidia-uvm\"\nrequired = true\n\
                 [rule.driver]\ncompat = []\n",
                root.display(),
                dir.path().join("run").display(),
                dir.path().join("cache").display()
            ),
        )
        .unwrap();
        Host { dir }
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    fn exec(&self, command: &[&str]) -> Output {
        let out = self.dir.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        // exec runs the command as nobody, like a build user: its output directory is its own.
        std::os::unix::fs::chown(&out, Some(65534), Some(65534)).unwrap();
        Command::new(HOOK)
            .args(["exec", "--features", "cuda", "--config"])
            .arg(self.config())
            .arg("--bind")
            .arg(&out)
            .arg("--")
            .args(command)
            .env("LD_LIBRARY_PATH", "/run/opengl-driver/lib")
            .output()
            .unwrap()
    }

    /// Runs `sh -c script` under exec; it must succeed and print every line of `expected`.
    /// Returns what it printed.
    fn run_script(&self, script: &str, expected: &[&str]) -> String {
        let out = self.exec(&["/bin/sh", "-c", script]);
        let t = text(&out);
        assert!(out.status.success(), "{t}");
        for line in expected {
            assert!(t.lines().any(|l| l == *line), "{line:?} missing:\n{t}");
        }
        t
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn runner_passes_inside_exec_with_the_fake_driver() {
    if !root_available("runner_passes_inside_exec_with_the_fake_driver") {
        return;
    }
    let host = Host::new();
    let runner = workspace_binary("cuda-sandbox-check");
    let report = host.dir.path().join("out/report.json");
    let out = host.exec(&[
        runner.to_str().unwrap(),
        "--saxpy-elements",
        "65536",
        "--report",
        report.to_str().unwrap(),
    ]);
    let t = text(&out);
    assert!(out.status.success(), "runner failed inside exec:\n{t}");
    // The report came out through --bind; its verdicts, not the (interleaved) console.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    for check in [
        "devices::nodes",
        "driver::library",
        "driver::version",
        "kernel::saxpy",
    ] {
        assert_eq!(report["checks"][check]["verdict"], "pass", "{check}:\n{t}");
    }
    assert_eq!(
        report["checks"]["driver::library"]["facts"]["path"],
        "/run/opengl-driver/lib/libcuda.so.1"
    );
}

#[test]
fn paths_the_hook_did_not_expose_are_absent_inside_exec() {
    if !root_available("paths_the_hook_did_not_expose_are_absent_inside_exec") {
        return;
    }
    let host = Host::new();
    let script = r#"
        for p in /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm; do [ -c "$p" ] && echo "char $p"; done
        for p in /dev/nvidia1 /etc/shadow /usr/bin /home /root /run/opengl-driver/lib/fake-driver.conf.missing; do
          [ -e "$p" ] && echo "PRESENT $p"
        done
        [ -f /run/cuda-sandbox/manifest.json ] && echo "manifest"
        [ -f /run/opengl-driver/lib/libcuda.so.1 ] && echo "libcuda"
        echo end
    "#;
    let t = host.run_script(
        script,
        &[
            "char /dev/nvidia0",
            "char /dev/nvidiactl",
            "char /dev/nvidia-uvm",
            "manifest",
            "libcuda",
            "end",
        ],
    );
    assert!(!t.contains("PRESENT"), "unexposed paths visible:\n{t}");
    // The host itself still has the second GPU: exec hid it.
    assert!(host.dir.path().join("root/dev/nvidia1").exists());
}

#[test]
fn exec_refuses_what_the_hook_would_refuse() {
    if !root_available("exec_refuses_what_the_hook_would_refuse") {
        return;
    }
    let host = Host::new();
    std::fs::remove_file(host.dir.path().join("root/dev/nvidia-uvm")).unwrap();
    let out = host.exec(&["/bin/true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("would refuse") && t.contains("/dev/nvidia-uvm"),
        "{t}"
    );
}

#[test]
fn exec_runs_isolated_like_a_build() {
    // Issue 12, finding 4: the command ran as root with the host's PID namespace and /proc, so
    // /proc/1/root reached the host.
    if !root_available("exec_runs_isolated_like_a_build") {
        return;
    }
    let host = Host::new();
    let script = r#"
        while read -r key value rest; do
          case $key in Uid:|NoNewPrivs:) echo "$key $value";; esac
        done < /proc/self/status
        n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo "processes $n"
        echo "pid $$"
        [ -e /proc/1/root/etc/shadow ] && echo "HOST REACHED"
        if (: > /run/opengl-driver/lib/planted) 2>/dev/null; then echo "WROTE"; else echo "read-only"; fi
        if (: > /build/mine) 2>/dev/null; then echo "build writable"; fi
        echo end
    "#;
    let t = host.run_script(
        script,
        &[
            "Uid: 65534",
            "NoNewPrivs: 1",
            "processes 1",
            "pid 1",
            "read-only",
            "build writable",
            "end",
        ],
    );
    assert!(!t.contains("HOST REACHED") && !t.contains("WROTE"), "{t}");
    // The exit status comes through.
    let out = host.exec(&["/bin/sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out));
}
