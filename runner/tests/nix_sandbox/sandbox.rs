//! The sandbox tier of these tests (docs/testing.md).

use super::*;

#[test]
fn runner_as_builder_passes_with_the_hook_and_writes_its_report_to_out() {
    if !nix_available("runner_as_builder_passes_with_the_hook_and_writes_its_report_to_out") {
        return;
    }
    let hook = workspace_binary("cuda-sandbox-hook");
    let host = Host::new();
    let build = build(&minimal(NixSandbox::with_hook(&hook, &host.config)));
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let out = &build.out_paths[0];
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    let verdict = |check: &str| {
        report["checks"][check]["verdict"]
            .as_str()
            .unwrap_or("missing")
            .to_owned()
    };
    for check in [
        "devices::nodes",
        "driver::library",
        "driver::version",
        "driver::entry_points",
        "kernel::saxpy",
        "nvml::consistency",
    ] {
        assert_eq!(verdict(check), "pass", "{check}: {report:#}");
    }
    assert_eq!(verdict("runtime::entry_points"), "skipped");
    let library: LibraryFacts = report_facts(&report, "driver::library");
    assert_eq!(
        library.path,
        Path::new("/run/opengl-driver/lib/libcuda.so.1"),
        "{report:#}"
    );
    // The fake NVIDIA libcuda holds ZLUDA's name suffix too, but needs no libamdhip64.
    assert_eq!(library.zluda, None, "{report:#}");
    let nodes: NodesFacts = report_facts(&report, "devices::nodes");
    assert_eq!(nodes.gpu_nodes[0], Path::new("/dev/nvidia0"), "{report:#}");
    let saxpy: SaxpyFacts = report_facts(&report, "kernel::saxpy");
    assert_eq!(saxpy.elements, 65536, "{report:#}");
    assert_eq!(report["summary"]["exit_code"], 0);
}

#[test]
fn same_derivation_without_the_hook_fails_with_the_runners_explanation() {
    if !nix_available("same_derivation_without_the_hook_fails_with_the_runners_explanation") {
        return;
    }
    let mut sandbox = minimal(NixSandbox::with_hook(
        Path::new("/unused"),
        Path::new("/unused"),
    ));
    sandbox.hook = None;
    sandbox.config = None;
    let build = build(&sandbox);
    assert!(!build.ok(), "built without the hook:\n{}", build.log);
    for explanation in [
        "/dev/nvidiactl was missing before any driver call",
        "libcuda.so.1 cannot be loaded",
        "requiredSystemFeatures = [ \"cuda\" ]",
        "pre-build-hook",
    ] {
        assert!(
            build.log.contains(explanation),
            "the build log lacks {explanation:?}:\n{}",
            build.log
        );
    }
}

#[test]
fn runner_as_builder_sees_exactly_its_leased_gpu() {
    if !nix_available("runner_as_builder_sees_exactly_its_leased_gpu") {
        return;
    }
    let hook = workspace_binary("cuda-sandbox-hook");
    let host = Host::with_gpus(3, 1);
    let build = build(&minimal(NixSandbox::with_hook(&hook, &host.config)));
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&build.out_paths[0]).unwrap()).unwrap();
    assert_eq!(
        report["checks"]["devices::nodes"]["verdict"], "pass",
        "{report:#}"
    );
    let nodes: NodesFacts = report_facts(&report, "devices::nodes");
    let leased = nodes.manifest_leased_gpus.expect("a manifest");
    assert_eq!(leased.len(), 1, "{report:#}");
    assert_eq!(
        nodes.gpu_nodes,
        [PathBuf::from(format!("/dev/nvidia{}", leased[0]))],
        "{report:#}"
    );
    assert_eq!(nodes.cuda_device_count, Some(1), "{report:#}");
    for check in ["kernel::saxpy", "nvml::consistency"] {
        assert_eq!(
            report["checks"][check]["verdict"], "pass",
            "{check}: {report:#}"
        );
    }
}

#[test]
fn package_checks_judge_the_package_on_the_gpu_the_fake_driver_plays() {
    if !nix_available("package_checks_judge_the_package_on_the_gpu_the_fake_driver_plays") {
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let Some(package) = ampere_package(temp.path()) else {
        return;
    };
    let package = package.display().to_string();
    let hook = workspace_binary("cuda-sandbox-hook");
    let build = |cc: (i32, i32), cuda: i32| {
        let host = Host::playing(
            1,
            0,
            Sidecar {
                compute_capability: cc,
                cuda_version: cuda,
                runtime_version: cuda,
                ..Sidecar::default()
            },
        );
        minimal(NixSandbox::with_hook(&hook, &host.config)).build(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nix/package-check.nix"),
            &[
                ("runner", RUNNER),
                ("nonce", &nonce()),
                ("package", &package),
            ],
            &[],
        )
    };
    // An A100-class GPU and a 535 driver: the package's own SASS; its report is $out.
    let a100 = build((8, 0), 12020);
    assert!(a100.ok(), "nix-build failed:\n{}", a100.log);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a100.out_paths[0]).unwrap()).unwrap();
    let check = &report["checks"]["package::gpu_code"];
    assert_eq!(check["verdict"], "pass", "{report:#}");
    assert!(
        check["message"]
            .as_str()
            .unwrap()
            .contains("runs on sm_80 (driver CUDA 12.2) by SASS"),
        "{report:#}"
    );
    assert_eq!(
        check["facts"]["closure_from"], "the closure file package-closure",
        "{report:#}"
    );
    // An H100-class GPU and the same driver: PTX of ISA 8.8 cannot be JIT-compiled by 12.2.
    let h100 = build((9, 0), 12020);
    assert!(!h100.ok(), "built:\n{}", h100.log);
    for needle in [
        "package::gpu_code",
        "libampere.so: cannot run on sm_90 (driver CUDA 12.2)",
        "CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222",
    ] {
        assert!(
            h100.log.contains(needle),
            "{needle:?} not in:\n{}",
            h100.log
        );
    }
}

#[test]
fn package_driver_check_follows_each_objects_runpath_inside_the_sandbox() {
    if !nix_available("package_driver_check_follows_each_objects_runpath_inside_the_sandbox") {
        return;
    }
    let Some(real) = cuda_sandbox_testkit::real_nvidia::RealNvidia::find(
        "package_driver_check_follows_each_objects_runpath_inside_the_sandbox",
    ) else {
        return;
    };
    use cuda_sandbox_testkit::real_nvidia::Cudart;
    let temp = tempfile::tempdir().unwrap();
    let runner = runner_with_driver_link(temp.path());
    let patchelf = |args: &[&str], file: &Path| {
        cuda_sandbox_testkit::run_ok(std::process::Command::new("patchelf").args(args).arg(file));
    };
    // NVIDIA's cudart 12.9 with the driver link in DT_RUNPATH, as Nixpkgs ships it.
    let good = temp.path().join("good/lib");
    std::fs::create_dir_all(&good).unwrap();
    let cudart = good.join(Cudart::V12_9.file_name());
    std::fs::copy(real.cudart(Cudart::V12_9), &cudart).unwrap();
    patchelf(&["--set-rpath", "/run/opengl-driver/lib"], &cudart);
    // The same runtime without it: inside the sandbox it finds no driver.
    let bad = temp.path().join("bad/lib");
    std::fs::create_dir_all(&bad).unwrap();
    let lost = bad.join(Cudart::V12_9.file_name());
    std::fs::copy(real.cudart(Cudart::V12_9), &lost).unwrap();
    patchelf(
        &[
            "--set-rpath",
            "/nix/store/00000000000000000000000000000000-x/lib",
        ],
        &lost,
    );

    let hook = workspace_binary("cuda-sandbox-hook");
    let host = Host::new();
    let build = |package: &Path| {
        minimal(NixSandbox::with_hook(&hook, &host.config)).build(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nix/package-check.nix"),
            &[
                ("runner", runner.to_str().unwrap()),
                ("nonce", &nonce()),
                ("package", package.parent().unwrap().to_str().unwrap()),
                ("ldLibraryPath", ""),
            ],
            &[],
        )
    };
    let ok = build(&good);
    assert!(ok.ok(), "nix-build failed:\n{}", ok.log);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&ok.out_paths[0]).unwrap()).unwrap();
    let check = &report["checks"]["package::driver"];
    assert_eq!(check["verdict"], "pass", "{report:#}");
    let message = check["message"].as_str().unwrap();
    // The fake host mounts the driver (no driver rule), so the manifest names no libcuda: the
    // objects are held to the one the runner loaded, /run/opengl-driver/lib/libcuda.so.1.
    assert!(
        message
            .contains("1 object(s) opening libcuda.so.1 get the libcuda.so.1 this runner loaded"),
        "{message}"
    );
    let driver: DriverFacts = report_facts(&report, "package::driver");
    assert_eq!(
        driver.objects[0].found,
        ObjectSearch::Found {
            gets: "/run/opengl-driver/lib/libcuda.so.1".into(),
            right: true
        },
        "{report:#}"
    );
    let runtimes = &report["checks"]["package::runtimes"];
    assert_eq!(runtimes["verdict"], "pass", "{report:#}");
    assert!(
        runtimes["message"]
            .as_str()
            .unwrap()
            .contains("libcudart 12.9 on driver 12.2: minor-version compatibility"),
        "{report:#}"
    );

    let lost = build(&bad);
    assert!(!lost.ok(), "built:\n{}", lost.log);
    for needle in [
        "package::driver",
        "libcudart.so.12 (a CUDA runtime: it dlopens libcuda.so.1) finds no libcuda.so.1",
        "DT_RUNPATH [/nix/store/00000000000000000000000000000000-x/lib]",
        "autoAddDriverRunpath",
    ] {
        assert!(
            lost.log.contains(needle),
            "{needle:?} not in:\n{}",
            lost.log
        );
    }
}

/// `devices::features` as the builder of a real sandboxed build, on a host advertising
/// `cuda-sm-90a` (nix.conf's `system-features`) whose one GPU the fake driver plays: an 8.9,
/// the lying advertisement, fails the build naming the feature and the GPU; a 9.0 passes. The
/// features come from `$requiredSystemFeatures`, and with structured attrs from `.attrs.json`,
/// which the runner finds under every Nix: 2.26 and 2.34 name it with `$NIX_ATTRS_JSON_FILE`,
/// 2.8 names a path outside the sandbox and the runner reads `$NIX_BUILD_TOP/.attrs.json`.
#[test]
fn devices_features_holds_the_gpu_to_the_derivation_s_features_in_a_sandboxed_build() {
    let test = "devices_features_holds_the_gpu_to_the_derivation_s_features_in_a_sandboxed_build";
    if !nix_available(test) {
        return;
    }
    let version = NixVersion::current().expect("nix-build --version");
    let hook = workspace_binary("cuda-sandbox-hook");
    let build = |cc: (i32, i32), structured: bool| {
        let host = Host::playing(
            1,
            0,
            Sidecar {
                compute_capability: cc,
                ..Sidecar::default()
            },
        );
        let mut sandbox = NixSandbox::with_hook(&hook, &host.config);
        sandbox.system_features = "cuda cuda-sm-90a".into();
        sandbox.build(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nix/features-check.nix"),
            &[
                ("runner", RUNNER),
                ("nonce", &nonce()),
                ("features", "cuda cuda-sm-90a"),
                ("structured", if structured { "1" } else { "" }),
            ],
            &[],
        )
    };
    let printed = |log: &str, key: &str| -> String {
        log.lines()
            .find_map(|line| line.trim().strip_prefix(key))
            .unwrap_or_else(|| panic!("the builder did not print {key:?}:\n{log}"))
            .trim()
            .to_owned()
    };
    for structured in [false, true] {
        let lie = build((8, 9), structured);
        assert!(
            !lie.ok(),
            "built on an 8.9 (structured: {structured}):\n{}",
            lie.log
        );
        for needle in [
            "devices::features",
            "cuda-sm-90a not met by the GPUs this process can use (GPU 0: 8.9)",
        ] {
            assert!(lie.log.contains(needle), "{needle:?} not in:\n{}", lie.log);
        }

        let ok = build((9, 0), structured);
        assert!(ok.ok(), "nix-build failed on a 9.0:\n{}", ok.log);
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&ok.out_paths[0]).unwrap()).unwrap();
        let check = &report["checks"]["devices::features"];
        assert_eq!(check["verdict"], "pass", "{report:#}");
        assert!(
            check["message"]
                .as_str()
                .unwrap()
                .starts_with("cuda-sm-90a met by the GPUs this process can use (GPU 0: 9.0)"),
            "{report:#}"
        );
        let facts: FeaturesFacts = report_facts(&report, "devices::features");
        assert_eq!(facts.required, ["cuda", "cuda-sm-90a"], "{report:#}");
        assert_eq!(
            facts.manifest_features.as_deref(),
            Some(&["cuda".to_owned(), "cuda-sm-90a".to_owned()][..]),
            "the hook's manifest: {report:#}"
        );
        let named = printed(&ok.log, "attrs-json-file:");
        if !structured {
            assert_eq!(facts.source, "$requiredSystemFeatures", "{report:#}");
            assert_eq!(named, "unset", "{}", ok.log);
            continue;
        }
        let top = printed(&ok.log, "build-top:");
        assert!(top.starts_with('/'), "{}", ok.log);
        let inside = format!("{top}/.attrs.json");
        assert_eq!(
            facts.source,
            format!("{inside}'s requiredSystemFeatures"),
            "{report:#}"
        );
        if version.names_attrs_json_inside_the_sandbox() {
            assert_eq!(named, inside, "Nix {version}: {}", ok.log);
        } else {
            assert!(
                named != inside && named.ends_with("/.attrs.json"),
                "Nix {version} names {named}, expected a path outside the sandbox"
            );
        }
        eprintln!("Nix {version}: NIX_ATTRS_JSON_FILE={named}; the runner read {inside}");
    }
}

/// The runner's default checks on a fake AMD host that runs CUDA through ZLUDA as Nixpkgs
/// builds it (capability 8.8, CUDA 12.4), exposed by a hook rule for `/dev/kfd`, the render
/// nodes and the driver: ZLUDA is recognised, the AMD nodes are checked instead of
/// `/dev/nvidia*`, saxpy runs from PTX, and what ZLUDA lacks is skipped with its reason.
#[test]
fn runner_as_builder_passes_on_a_zluda_host() {
    if !nix_available("runner_as_builder_passes_on_a_zluda_host") {
        return;
    }
    let hook = workspace_binary("cuda-sandbox-hook");
    let host = ZludaHost::new(&Sidecar {
        cuda_version: 12040,
        compute_capability: (8, 8),
        ..Sidecar::default()
    });
    let build = build(&minimal(NixSandbox::with_hook(&hook, &host.config)));
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&build.out_paths[0]).unwrap()).unwrap();
    let check = |name: &str| report["checks"][name].clone();
    for name in [
        "devices::nodes",
        "devices::features",
        "driver::library",
        "driver::version",
        "kernel::saxpy",
    ] {
        assert_eq!(check(name)["verdict"], "pass", "{name}: {report:#}");
    }
    for name in ["driver::entry_points", "nvml::consistency"] {
        assert_eq!(check(name)["verdict"], "skipped", "{name}: {report:#}");
    }
    let zluda = "ZLUDA on AMD (libnvcuda.so, on libamdhip64.so.6)";
    for name in [
        "devices::nodes",
        "driver::library",
        "driver::version",
        "kernel::saxpy",
    ] {
        let message = check(name)["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.contains(zluda), "{name}: {message}");
    }
    assert!(check("driver::version")["message"]
        .as_str()
        .unwrap_or_default()
        .contains("provides CUDA 12.4 (12040)"));
    let library: LibraryFacts = report_facts(&report, "driver::library");
    assert_eq!(
        library.path,
        Path::new("/run/opengl-driver/lib/libcuda.so.1")
    );
    assert!(library.real_path.ends_with("libnvcuda.so"), "{report:#}");
    let marks = library.zluda.expect("ZLUDA's marks");
    assert_eq!(marks.hip_runtime, "libamdhip64.so.6");
    let nodes = &check("devices::nodes")["facts"]["nodes"];
    assert_eq!(nodes["kfd"]["char"][1], 0, "{report:#}");
    assert_eq!(
        nodes["render_nodes"][0][1], "/dev/dri/renderD128",
        "{report:#}"
    );
    let features: FeaturesFacts = report_facts(&report, "devices::features");
    let gpus = features.gpus.expect("the GPUs ZLUDA reports");
    assert_eq!(
        gpus[0].capability.to_string(),
        "8.8",
        "ZLUDA's reported capability"
    );
    let saxpy: SaxpyFacts = report_facts(&report, "kernel::saxpy");
    assert_eq!(saxpy.wrong_elements, 0);
    let device = &check("kernel::saxpy")["facts"]["device"];
    assert_eq!(device["name"], "FAKE AMD GPU 0 [ZLUDA]", "{report:#}");
    assert_eq!(check("kernel::saxpy")["facts"]["timed_on_host"], true);
    assert_eq!(report["summary"]["exit_code"], 0);
}
