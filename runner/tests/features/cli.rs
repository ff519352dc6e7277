//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn each_gpu_advertises_the_pinned_convention_s_features() {
    for ((major, minor), want) in expected() {
        let driver = FakeDriver::driver(&Sidecar {
            compute_capability: (major, minor),
            ..Sidecar::default()
        });
        let run = features(Some(&driver), &[]);
        assert_eq!(run.code, 0, "{major}.{minor}: {}", run.stderr);
        assert_eq!(run.stdout, format!("{want}\n"), "{major}.{minor}");
        // The same without a driver, for a machine being configured.
        let given = features(None, &["--capability", &format!("{major}.{minor}")]);
        assert_eq!(
            (given.code, &given.stdout),
            (0, &run.stdout),
            "{major}.{minor}"
        );
    }
}

/// A host with a 9.0 and a 10.0 GPU advertises the union: both GPUs' arch-specific features,
/// which neither alone has.
#[test]
fn a_mixed_host_advertises_the_union_of_its_gpus() {
    let driver = FakeDriver::driver(&gpus(&[(9, 0), (10, 0)]));
    let run = features(Some(&driver), &["--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = json(&run);
    let want =
        format!("{BELOW_75} {TO_87} {TO_90} cuda-sm-90a cuda-sm-100 cuda-sm-100a cuda-sm-100f");
    let got: Vec<&str> = report["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(got.join(" "), want);
    assert_eq!(report["source"], "driver");
    let capabilities: Vec<&Value> = report["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["capability"])
        .collect();
    assert_eq!(capabilities, ["9.0", "10.0"]);
    assert_eq!(report["gpus"][1]["name"], "FAKE NVIDIA GPU 1");
    assert_eq!(report["unknown"], Value::Array(Vec::new()));
    assert_eq!(report["nixpkgs"]["repository"], "ConnorBaker/nixpkgs");
    assert_eq!(
        report["nixpkgs"]["commit"],
        "748b3c288fc42b23b2b66ddda7c36f8d1c6ae7f0"
    );
}

/// CUDA enumerates a MIG instance in place of its GPU, with the GPU's capability: a 12.1 GPU
/// sliced into MIG instances beside a 7.5 advertises what a 12.1 and a 7.5 do.
#[test]
fn a_mig_instance_counts_as_its_gpu() {
    let mut sidecar = gpus(&[(7, 5), (12, 1)]);
    sidecar.mig = vec![FakeMig {
        parent: 1,
        gi: 1,
        ci: 0,
        uuid: "MIG-fa4e0000-0000-4000-8000-000100010000".into(),
        name: "FAKE NVIDIA GPU 1 MIG 1g.10gb".into(),
    }];
    let driver = FakeDriver::driver(&sidecar);
    let run = features(Some(&driver), &["--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = json(&run);
    assert_eq!(report["gpus"][1]["name"], "FAKE NVIDIA GPU 1 MIG 1g.10gb");
    assert_eq!(report["gpus"][1]["capability"], "12.1");
    let plain = features(None, &["--capability", "7.5", "--capability", "12.1"]);
    let from_mig: Vec<&str> = report["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(format!("{}\n", from_mig.join(" ")), plain.stdout);
    assert_eq!(plain.stdout, format!("{}\n", expected()[5].1));
}

/// A capability newer than the table is named and adds nothing; the other GPUs' features are
/// still printed, and the exit status says the line is incomplete.
#[test]
fn a_capability_newer_than_the_table_is_named_never_guessed() {
    let driver = FakeDriver::driver(&gpus(&[(13, 0), (7, 5)]));
    let run = features(Some(&driver), &[]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert_eq!(run.stdout, format!("{}\n", expected()[0].1));
    assert!(
        run.stderr.contains(
            "compute capability 13.0 is newer than cuda-sandbox's capability table: it adds no \
             cuda-sm-* feature"
        ),
        "{}",
        run.stderr
    );
    // 8.8 is in gpus.txt, not in the pinned Nixpkgs convention: Nixpkgs names nothing for it.
    let run = features(None, &["--capability", "8.8", "--json"]);
    assert_eq!(run.code, 3);
    let report = json(&run);
    assert_eq!(report["features"], serde_json::json!(["cuda"]));
    assert_eq!(report["unknown"][0]["capability"], "8.8");
    assert_eq!(
        report["unknown"][0]["why"],
        "not in the Nixpkgs convention the table follows"
    );
}

#[test]
fn a_feature_set_no_gpu_and_no_driver_are_refused() {
    let run = features(None, &["--capability", "9.0a"]);
    assert_eq!(run.code, 2);
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr
            .contains("9.0a is a feature set rather than a GPU: give its GPU's capability, 9.0"),
        "{}",
        run.stderr
    );
    let run = features(None, &[]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("give --capability X.Y"),
        "{}",
        run.stderr
    );
    let no_device = FakeDriver::driver(&Sidecar {
        mode: Mode::NoDevice,
        ..Sidecar::default()
    });
    let run = features(Some(&no_device), &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("the driver cannot say which GPUs this is"),
        "{}",
        run.stderr
    );
}

/// The issue's lying advertisement: a builder says cuda-sm-90a, its GPU is an 8.9.
#[test]
fn a_build_requiring_90a_fails_on_an_8_9_gpu_naming_both() {
    let run = check_on(&[(8, 9)], &[(REQUIRED, "cuda cuda-sm-90a")], None);
    assert_eq!(run.code, 101, "{run}");
    run.assert_check(
        "devices::features",
        "fail",
        &[
            "cuda-sm-90a not met by the GPUs this process can use (GPU 0: 8.9)",
            "cuda-sandbox-check features",
        ],
    );
    let facts: FeaturesFacts = run.facts("devices::features");
    assert_eq!(facts.unmet, ["cuda-sm-90a"]);
    assert_eq!(facts.source, "$requiredSystemFeatures");
    assert_eq!(facts.gpus.unwrap()[0].capability.to_string(), "8.9");
}

#[test]
fn satisfied_features_pass_each_by_some_gpu() {
    // A baseline below the GPU, the GPU's own 'a', and the union of two GPUs.
    for (gpus, required, named) in [
        (&[(8, 9)][..], "cuda cuda-sm-86", "cuda-sm-86 met"),
        (&[(9, 0)][..], "cuda cuda-sm-90a", "cuda-sm-90a met"),
        (
            &[(9, 0), (10, 0)][..],
            "cuda cuda-sm-90a cuda-sm-100f big-parallel",
            "cuda-sm-90a cuda-sm-100f met by the GPUs this process can use (GPU 0: 9.0, GPU \
             1: 10.0)",
        ),
        (&[(10, 3)][..], "cuda-sm-100f", "cuda-sm-100f met"),
    ] {
        let run = check_on(gpus, &[(REQUIRED, required)], None);
        assert_eq!(run.code, 0, "{required}: {run}");
        run.assert_check("devices::features", "pass", &[named]);
    }
    // Neither GPU alone: the 10.0 lacks 90a, the 9.0 lacks 100f.
    let run = check_on(&[(10, 0)], &[(REQUIRED, "cuda-sm-90a cuda-sm-100f")], None);
    run.assert_check(
        "devices::features",
        "fail",
        &["cuda-sm-90a not met", "(GPU 0: 10.0)"],
    );
    // A family feature past its family, and a malformed name, are never met.
    let run = check_on(&[(12, 0)], &[(REQUIRED, "cuda-sm-100f cuda-sm-9.0")], None);
    run.assert_check(
        "devices::features",
        "fail",
        &[
            "cuda-sm-100f cuda-sm-9.0 not met",
            "cuda-sm-9.0 name no architecture",
        ],
    );
}

#[test]
fn no_cuda_sm_feature_passes_with_a_note_even_without_a_gpu() {
    for env in [&[(REQUIRED, "cuda big-parallel")][..], &[][..]] {
        let no_device = FakeDriver::driver(&Sidecar {
            mode: Mode::NoDevice,
            ..Sidecar::default()
        });
        let run = common::run_with_env(
            &no_device.dir,
            &["--exact", "devices::features", "--no-manifest"],
            env,
        );
        assert_eq!(run.code, 0, "{run}");
        run.assert_check(
            "devices::features",
            "pass",
            &["no cuda-sm-* feature required", "any GPU will do"],
        );
    }
    // Required, and no GPU to ask: a failure naming why.
    let no_device = FakeDriver::driver(&Sidecar {
        mode: Mode::NoDevice,
        ..Sidecar::default()
    });
    let run = common::run_with_env(
        &no_device.dir,
        &["--exact", "devices::features", "--no-manifest"],
        &[(REQUIRED, "cuda-sm-89")],
    );
    run.assert_check(
        "devices::features",
        "fail",
        &[
            "the build requires cuda-sm-89 but the GPUs cannot be asked",
            "CUDA_ERROR_NO_DEVICE",
        ],
    );
}

/// With structured attrs: `$NIX_ATTRS_JSON_FILE` when it names a file, else
/// `$NIX_BUILD_TOP/.attrs.json` (Nix before 2.15 names the file outside the sandbox).
#[test]
fn structured_attrs_are_read_from_the_attrs_json_file() {
    let top = tempfile::tempdir().unwrap();
    let attrs = top.path().join(".attrs.json");
    std::fs::write(
        &attrs,
        r#"{"name":"x","requiredSystemFeatures":["cuda","cuda-sm-90a"],"outputs":{"out":"/o"}}"#,
    )
    .unwrap();
    let top_str = top.path().to_str().unwrap();
    for env in [
        &[("NIX_ATTRS_JSON_FILE", attrs.to_str().unwrap())][..],
        &[
            ("NIX_ATTRS_JSON_FILE", "/tmp/nix-build-x.drv-0/.attrs.json"),
            ("NIX_BUILD_TOP", top_str),
        ][..],
    ] {
        let run = check_on(&[(8, 9)], env, None);
        run.assert_check("devices::features", "fail", &["cuda-sm-90a not met"]);
        let facts: FeaturesFacts = run.facts("devices::features");
        assert_eq!(
            facts.source,
            format!("{}'s requiredSystemFeatures", attrs.display())
        );
        let run = check_on(&[(9, 0)], env, None);
        run.assert_check("devices::features", "pass", &["cuda-sm-90a met"]);
    }
    std::fs::write(&attrs, r#"{"requiredSystemFeatures":"cuda-sm-90a"}"#).unwrap();
    let run = check_on(&[(9, 0)], &[("NIX_BUILD_TOP", top_str)], None);
    run.assert_check(
        "devices::features",
        "fail",
        &["is not structured attrs Nix wrote", "not a list of strings"],
    );
}

/// The manifest's features: one the build does not require fails (another build's manifest);
/// one it lacks is noted (the hook had no derivation); with nothing declared, its features
/// are the requirement.
#[test]
fn the_manifest_s_features_are_cross_checked() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("manifest.json");
    let write = |features: &[&str]| {
        let m = Manifest {
            version: MANIFEST_VERSION,
            derivation: "/nix/store/x-check.drv".into(),
            chroot: "/nix/store/x-check.drv.chroot".into(),
            rules: vec!["nvidia".into()],
            features: features.iter().map(|f| f.to_string()).collect(),
            devices: Vec::new(),
            leased_gpus: Vec::new(),
            mig: None,
            driver: DriverManifest::none("test"),
        };
        std::fs::write(&manifest, m.to_json()).unwrap();
    };
    write(&["cuda", "cuda-sm-90a"]);
    let run = check_on(&[(9, 0)], &[(REQUIRED, "cuda cuda-sm-89")], Some(&manifest));
    run.assert_check(
        "devices::features",
        "fail",
        &[
            "the hook's manifest holds this build to cuda-sm-90a, which it does not require",
            "another build's",
        ],
    );
    write(&["cuda", "gpu"]);
    let run = check_on(
        &[(9, 0)],
        &[(REQUIRED, "cuda cuda-sm-90a")],
        Some(&manifest),
    );
    run.assert_check(
        "devices::features",
        "pass",
        &[
            "cuda-sm-90a met",
            "the hook's manifest lacks cuda-sm-90a, so the hook did not choose GPUs by it",
        ],
    );
    write(&["cuda", "cuda-sm-90a"]);
    let run = check_on(&[(8, 9)], &[], Some(&manifest));
    run.assert_check("devices::features", "fail", &["cuda-sm-90a not met"]);
    let facts: FeaturesFacts = run.facts("devices::features");
    assert!(facts.source.starts_with("the hook's manifest"), "{facts:?}");
}
