//! The runner against the REAL NVIDIA userspace: Debian's driver libraries of the 535 (CUDA
//! 12.2) and 470 (CUDA 11.4) branches and NVIDIA's cudart 11.8, 12.9 and 13.0, fetched by
//! `scripts/nvidia-userspace`. Each run happens on a GPU-shaped host made for it: a private
//! mount namespace whose `/dev` holds real NVIDIA character devices (mknod) and whose
//! `/proc/driver` is empty, so the nvidia kernel module is absent even on a GPU machine.
//!
//! Every check's verdict and cause must be true for that host: what needs no GPU passes (the
//! library, the versions, the entry points, the runtime's version rules); what needs a GPU
//! fails naming the missing kernel module, or the missing nodes, or the missing GPU. The test
//! prints the table that runner/README.md reports.

use std::path::Path;
use std::process::Command;

use cuda_sandbox_check::checks::runtime::RuntimesFacts;
use cuda_sandbox_testkit::real_nvidia::{Branch, Cudart, RealNvidia};
use serde_json::Value;

const RUNNER: &str = env!("CARGO_BIN_EXE_cuda-sandbox-check");

/// What the private host has.
#[derive(Clone, Copy, Debug)]
enum Host {
    /// nvidiactl, nvidia0, nvidia-uvm; no kernel module.
    NodesNoModule,
    /// No NVIDIA node at all; no kernel module.
    NoNodes,
    /// The nodes and a `/proc/driver/nvidia/version` that says the module is loaded, but no
    /// GPU answers behind the nodes.
    NodesModuleNoGpu,
}

/// Runs the runner in a private mount namespace shaped as `host`, with the real `branch` on
/// LD_LIBRARY_PATH and `cudart` given; returns the report.
fn run(real: &RealNvidia, host: Host, branch: Branch, cudart: Option<Cudart>) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let nodes = match host {
        Host::NoNodes => "",
        _ => {
            "mknod -m 666 /dev/nvidiactl c 195 255; mknod -m 666 /dev/nvidia0 c 195 0; \
              mknod -m 666 /dev/nvidia-uvm c 235 0;"
        }
    };
    let module = match host {
        Host::NodesModuleNoGpu => format!(
            "mkdir /proc/driver/nvidia; echo 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  \
             {}' > /proc/driver/nvidia/version;",
            real.libcuda_file(branch)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .trim_start_matches("libcuda.so.")
        ),
        _ => String::new(),
    };
    let script = format!(
        "set -e; mount -t tmpfs -o mode=755 none /dev; \
         mknod -m 666 /dev/null c 1 3; mknod -m 666 /dev/zero c 1 5; \
         mknod -m 666 /dev/urandom c 1 9; {nodes} \
         if [ -d /proc/driver ]; then mount -t tmpfs none /proc/driver; fi; {module} \
         exec \"$@\""
    );
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        "sh",
        RUNNER,
    ])
    .args(["--no-manifest", "--report"])
    .arg(&report)
    .env("LD_LIBRARY_PATH", real.driver_dir(branch));
    if let Some(cudart) = cudart {
        cmd.arg("--cudart").arg(real.cudart(cudart));
    }
    let out = cmd.output().expect("unshare (util-linux)");
    let text = std::fs::read_to_string(&report).unwrap_or_else(|_| {
        panic!(
            "no report; stdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    serde_json::from_str(&text).unwrap()
}

fn verdict<'a>(report: &'a Value, check: &str) -> (&'a str, &'a str) {
    let c = &report["checks"][check];
    (
        c["verdict"].as_str().unwrap_or("absent"),
        c["message"].as_str().unwrap_or(""),
    )
}

#[track_caller]
fn expect(report: &Value, check: &str, want: &str, contains: &[&str]) {
    let (got, message) = verdict(report, check);
    assert_eq!(got, want, "{check}: {message}");
    for part in contains {
        assert!(
            message.contains(part),
            "{check}: {message:?} lacks {part:?}"
        );
    }
}

fn can_run(test: &str) -> Option<RealNvidia> {
    if !cuda_sandbox_testkit::root_available(test) {
        return None;
    }
    RealNvidia::find(test)
}

const MODULE: &str = "nvidia kernel module is not loaded";

// The tests, one module per tier (docs/testing.md).
mod root;
