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

#[test]
fn what_needs_no_gpu_passes_and_what_needs_one_names_the_missing_kernel_module() {
    let Some(real) = can_run("real_driver_matrix") else {
        return;
    };
    let mut table = vec![String::from(
        "| driver | cudart | check | verdict | message |\n|---|---|---|---|---|",
    )];
    for branch in Branch::ALL {
        let v = branch.cuda_version();
        let driver = format!("CUDA {}.{} ({v})", v / 1000, v % 1000 / 10);
        let real_file = real.libcuda_file(branch);
        let real_name = real_file
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for cudart in Cudart::ALL {
            let report = run(&real, Host::NodesNoModule, branch, Some(cudart));
            expect(&report, "driver::library", "pass", &[&real_name]);
            expect(
                &report,
                "driver::version",
                "pass",
                &[&driver, "kernel module not loaded"],
            );
            expect(
                &report,
                "devices::nodes",
                "pass",
                &["nvidiactl, nvidia-uvm and 1 GPU node"],
            );
            expect(
                &report,
                "driver::entry_points",
                "pass",
                &["symbols match their versioned exports"],
            );
            expect(&report, "kernel::saxpy", "fail", &["100", MODULE]);
            expect(&report, "nvml::consistency", "fail", &[MODULE]);
            expect(
                &report,
                "mig::instance",
                "skipped",
                &["no MIG instance to check"],
            );
            let newer_major = cudart.cuda_version() / 1000 > branch.cuda_version() / 1000;
            if newer_major {
                expect(
                    &report,
                    "runtime::compatibility",
                    "fail",
                    &[
                        "cudaErrorInsufficientDriver (35)",
                        "answered 35 here",
                        "cuda_compat",
                    ],
                );
                expect(&report, "runtime::entry_points", "fail", &["(35)"]);
            } else {
                expect(&report, "runtime::compatibility", "pass", &[]);
                expect(&report, "runtime::entry_points", "fail", &["(100)", MODULE]);
            }
            if cudart == Cudart::V12_9 && branch == Branch::R535 {
                expect(
                    &report,
                    "runtime::compatibility",
                    "pass",
                    &[
                        "minor-version compatibility",
                        "cuCtxCreate_v3",
                        "cuCtxCreate_v4",
                    ],
                );
            }
            for (name, check) in report["checks"].as_object().unwrap() {
                table.push(format!(
                    "| {} | {} | `{name}` | {} | {} |",
                    real_name.trim_start_matches("libcuda.so."),
                    cudart.file_name(),
                    check["verdict"].as_str().unwrap_or(""),
                    check["message"].as_str().unwrap_or("").replace('|', "\\|"),
                ));
            }
        }
    }
    println!("{}", table.join("\n"));
}

#[test]
fn missing_nodes_are_named_not_exposed_and_nodes_the_driver_made_are_noted() {
    let Some(real) = can_run("missing_nodes_are_named_not_exposed") else {
        return;
    };
    let report = run(&real, Host::NoNodes, Branch::R535, None);
    // As root the real cuInit creates /dev/nvidiactl itself; the check judges what was exposed.
    expect(
        &report,
        "devices::nodes",
        "fail",
        &[
            "was missing before any driver call",
            "not exposed",
            "requiredSystemFeatures",
        ],
    );
    // The test runs as root, so the driver made the node: the check says so.
    let (_, message) = verdict(&report, "devices::nodes");
    assert!(message.contains("the driver created it"), "{message}");
    expect(&report, "kernel::saxpy", "fail", &["not exposed"]);
    expect(&report, "driver::entry_points", "pass", &[]);
}

#[test]
fn a_loaded_module_without_a_gpu_is_named_no_usable_gpu() {
    let Some(real) = can_run("a_loaded_module_without_a_gpu") else {
        return;
    };
    let report = run(&real, Host::NodesModuleNoGpu, Branch::R535, None);
    let (v, message) = verdict(&report, "kernel::saxpy");
    assert_eq!(v, "fail", "{message}");
    assert!(!message.contains(MODULE), "{message}");
    assert!(!message.contains("not exposed"), "{message}");
    println!("kernel::saxpy with nodes and a module file but no GPU: {message}");
}

#[test]
fn every_loadable_runtime_is_checked_in_the_loaders_order() {
    let Some(real) = can_run("every_loadable_runtime") else {
        return;
    };
    // Two runtimes on the search path, 11.8 first: both are checked, 11.8 first, and flagged.
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let path = format!(
        "{}:{}:{}",
        real.driver_dir(Branch::R535).display(),
        real.cudart_dir(Cudart::V11_8).display(),
        real.cudart_dir(Cudart::V12_9).display()
    );
    let out = Command::new("unshare")
        .args([
            "--mount",
            "sh",
            "-c",
            "mount -t tmpfs none /dev && exec \"$@\"",
            "sh",
            RUNNER,
        ])
        .args(["--no-manifest", "runtime::compatibility", "--report"])
        .arg(&report)
        .env("LD_LIBRARY_PATH", &path)
        .output()
        .unwrap();
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap())
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stdout)));
    let facts: RuntimesFacts =
        serde_json::from_value(report["checks"]["runtime::compatibility"]["facts"].clone())
            .unwrap_or_else(|e| panic!("{e}: {report:#}"));
    let files: Vec<&Path> = facts
        .cudarts
        .iter()
        .map(|c| c.cudart.real_path.as_deref().expect("a loaded runtime"))
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files[0].ends_with("libcudart.so.11.0"), "{files:?}");
    assert!(files[1].ends_with("libcudart.so.12"), "{files:?}");
    assert!(files[0].starts_with(real.dir()), "{files:?}");
    // One process that can load both gets two ABIs of the same driver functions.
    let check = &report["checks"]["runtime::compatibility"];
    assert_eq!(check["verdict"], "fail", "{check}");
    let message = check["message"].as_str().unwrap();
    for part in [
        "mixed CUDA runtimes",
        "at 11.x",
        "at 12.2",
        "cuGetProcAddress_v2",
    ] {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
}
