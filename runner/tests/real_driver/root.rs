//! The root tier of these tests (docs/testing.md).

use super::*;

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
