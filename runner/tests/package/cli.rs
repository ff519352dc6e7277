//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn gpu_code_is_judged_on_the_gpu_the_driver_reports() {
    let Some(real) = RealNvidia::find("gpu_code_is_judged_on_the_gpu_the_driver_reports") else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let pkg = temp.path().join("pkg/lib");
    std::fs::create_dir_all(&pkg).unwrap();
    // cudaCapabilities = [ "8.0" ] with cudaForwardCompat, built by CUDA 12.9.
    gpu_library_of(
        &real,
        "12.9",
        &pkg,
        "libampere",
        &["sm_80"],
        &[("compute_80", "8.8")],
        &[],
    );
    let args = package_args(&temp.path().join("pkg"));

    // An A100-class GPU with a 535 driver: its own SASS.
    let a100 = driver((8, 0), 12020);
    let run = run_without_devices(&a100.dir, &strs(&args));
    run.assert_check(
        "package::gpu_code",
        "pass",
        &["runs on sm_80 (driver CUDA 12.2) by SASS"],
    );

    // An H100-class GPU with a 535 driver: only PTX of ISA 8.8, which needs 12.9: 222.
    let h100 = driver((9, 0), 12020);
    let run = run_without_devices(&h100.dir, &strs(&args));
    run.assert_check(
        "package::gpu_code",
        "fail",
        &[
            "libampere.so: cannot run on sm_90 (driver CUDA 12.2)",
            "CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222",
            "cudaCapabilities = [ \"9.0\" ]",
        ],
    );
    assert_ne!(run.code, 0, "{run}");

    // The same GPU with a 12.9 driver JITs it: a pass with a note.
    let h100_new = driver((9, 0), 12090);
    let run = run_without_devices(&h100_new.dir, &strs(&args));
    run.assert_check(
        "package::gpu_code",
        "pass",
        &[
            "runs on sm_90 (driver CUDA 12.9)",
            "1 by JIT",
            "first launch compiles",
        ],
    );
}

#[test]
fn without_a_gpu_gpu_code_is_judged_only_for_a_target() {
    let Some(real) = RealNvidia::find("without_a_gpu_gpu_code_is_judged_only_for_a_target") else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let pkg = temp.path().join("pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    gpu_library_of(&real, "12.9", &pkg, "libturing", &["sm_75"], &[], &[]);
    let no_gpu = FakeDriver::driver(&Sidecar {
        mode: Mode::NoKernelModule,
        ..Sidecar::default()
    });
    let args = package_args(&pkg);
    let run = run_without_devices(&no_gpu.dir, &strs(&args));
    run.assert_check(
        "package::gpu_code",
        "skipped",
        &["no --target", "not judged"],
    );

    let mut with_target = args.clone();
    with_target.extend([
        "--target".into(),
        "sm_86".into(),
        "--driver-cuda".into(),
        "12.2".into(),
    ]);
    let run = run_without_devices(&no_gpu.dir, &strs(&with_target));
    run.assert_check(
        "package::gpu_code",
        "fail",
        &["cannot run on sm_86", "CUDA_ERROR_NO_BINARY_FOR_GPU, 209"],
    );
    let mut ok_target = args.clone();
    ok_target.extend([
        "--target".into(),
        "7.5".into(),
        "--driver-cuda".into(),
        "12.2".into(),
    ]);
    let run = run_without_devices(&no_gpu.dir, &strs(&ok_target));
    run.assert_check("package::gpu_code", "pass", &["by SASS"]);

    // A GPU the rules do not know: not a pass, not a failure, and its own exit status (3),
    // as `lint` gives for the same file and target.
    let mut unknown = args;
    unknown.extend([
        "--target".into(),
        "9.5".into(),
        "--driver-cuda".into(),
        "12.2".into(),
    ]);
    let run = run_without_devices(&no_gpu.dir, &strs(&unknown));
    run.assert_check(
        "package::gpu_code",
        "skipped",
        &["the rules cannot judge", "cannot be judged for sm_95"],
    );
    assert_eq!(run.check("package::gpu_code")["undecided"], true, "{run}");
    assert_eq!(run.code, 3, "{run}");
}

#[test]
fn the_packages_cuda_runtimes_are_judged_against_the_driver_in_use() {
    let Some(real) =
        RealNvidia::find("the_packages_cuda_runtimes_are_judged_against_the_driver_in_use")
    else {
        return;
    };
    use cuda_sandbox_testkit::real_nvidia::Cudart;
    let temp = tempfile::tempdir().unwrap();
    let with = |name: &str, cudarts: &[Cudart]| {
        let lib = temp.path().join(name).join("lib");
        std::fs::create_dir_all(&lib).unwrap();
        for c in cudarts {
            std::fs::copy(real.cudart(*c), lib.join(c.file_name())).unwrap();
        }
        package_args(&temp.path().join(name))
    };
    let driver_535 = driver((9, 0), 12020);
    // NVIDIA's cudart 12.9 on a 12.2 driver: minor-version compatibility, with the report.
    let run = run_without_devices(&driver_535.dir, &strs(&with("minor", &[Cudart::V12_9])));
    run.assert_check(
        "package::runtimes",
        "pass",
        &["libcudart 12.9 on driver 12.2: minor-version compatibility"],
    );
    // cudart 13.0 on the same driver: a newer major, 35.
    let run = run_without_devices(&driver_535.dir, &strs(&with("major", &[Cudart::V13_0])));
    run.assert_check(
        "package::runtimes",
        "fail",
        &[
            "is a newer major than the driver's CUDA 12.2",
            "cudaErrorInsufficientDriver (35)",
        ],
    );
    // 11.8 and 12.9 in one closure: version mixing, naming the functions that differ.
    let run = run_without_devices(
        &driver_535.dir,
        &strs(&with("mixed", &[Cudart::V11_8, Cudart::V12_9])),
    );
    run.assert_check(
        "package::runtimes",
        "fail",
        &["mixed CUDA runtimes", "cuGetProcAddress_v2"],
    );
    // None at all: nothing to judge, said so.
    let none = with("none", &[]);
    std::fs::write(temp.path().join("none/lib/README"), "no GPU code").unwrap();
    let run = run_without_devices(&driver_535.dir, &strs(&none));
    run.assert_check("package::runtimes", "pass", &["carries no CUDA runtime"]);
    // Issue 34: a package of 0 files, or a path that does not exist, passed all three checks.
    let empty = temp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let run = run_without_devices(&driver_535.dir, &strs(&package_args(&empty)));
    let named = format!("--package {}: no file in it", empty.display());
    run.assert_check("package::runtimes", "fail", &[&named]);
    run.assert_check("package::gpu_code", "fail", &[&named]);
    let missing = temp.path().join("does-not-exist");
    let run = run_without_devices(&driver_535.dir, &strs(&package_args(&missing)));
    let named = format!("--package {}: No such file or directory", missing.display());
    run.assert_check("package::driver", "fail", &[&named]);
}

#[test]
fn each_object_that_opens_libcuda_gets_the_driver_in_use_or_is_named() {
    let temp = tempfile::tempdir().unwrap();
    let t = temp.path();
    // The driver in use (LD_LIBRARY_PATH), and another one a package might carry a path to.
    let in_use = driver((9, 0), 12020);
    let other = driver((9, 0), 12090);
    let source = t.join("user.c");
    std::fs::write(
        &source,
        "int cuInit(unsigned int);\nint use_gpu(void) { return cuInit(0); }\n",
    )
    .unwrap();
    let library = |name: &str, flags: &[&str]| {
        let dir = t.join(name).join("lib");
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join(format!("lib{name}.so"));
        let link = format!("-L{}", in_use.dir.display());
        let mut args = vec![
            "-shared",
            "-fPIC",
            "-o",
            out.to_str().unwrap(),
            source.to_str().unwrap(),
        ];
        args.extend_from_slice(flags);
        args.extend([link.as_str(), "-l:libcuda.so.1"]);
        cc(&args);
        t.join(name)
    };
    // DT_RUNPATH of its own comes after LD_LIBRARY_PATH: it gets the driver in use.
    let good = library("good", &["-Wl,--enable-new-dtags,-rpath,/nonexistent/lib"]);
    let run = run_without_devices(&in_use.dir, &strs(&package_args(&good)));
    run.assert_check(
        "package::driver",
        "pass",
        &["1 object(s) opening libcuda.so.1 get the libcuda.so.1 this runner loaded"],
    );
    // DT_RPATH comes before LD_LIBRARY_PATH: it gets the other driver, named with its search.
    let rpath = format!("-Wl,--disable-new-dtags,-rpath,{}", other.dir.display());
    let bad = library("bad", &[rpath.as_str()]);
    let run = run_without_devices(&in_use.dir, &strs(&package_args(&bad)));
    run.assert_check(
        "package::driver",
        "fail",
        &[
            "libbad.so (needs libcuda.so.1 (DT_NEEDED)) would load",
            &format!("{}/libcuda.so.1", other.dir.display()),
            "but this runner loaded",
            "DT_RPATH",
        ],
    );
}

/// The Jetson case (context: cuda_compat must come before the driver link): the hook chose the
/// compat driver; an object whose search path has the host driver first gets the wrong one.
#[test]
fn an_object_that_finds_the_host_driver_before_the_hooks_compat_choice_fails_with_the_fix() {
    use cuda_sandbox_manifest::versions::CudaVersion as V;
    use cuda_sandbox_manifest::{DriverKind, DriverManifest, Manifest, MANIFEST_VERSION};
    let temp = tempfile::tempdir().unwrap();
    let t = temp.path();
    let host = driver((8, 7), 11040);
    let compat = driver((8, 7), 12020);
    let manifest = t.join("manifest.json");
    let lib = |d: &Path| d.join("libcuda.so.1").display().to_string();
    let chosen = Manifest {
        version: MANIFEST_VERSION,
        derivation: "/nix/store/00000000000000000000000000000000-check.drv".into(),
        chroot: "/nix/store/00000000000000000000000000000000-check.drv.chroot".into(),
        rules: vec!["nvidia".into()],
        features: vec!["cuda".into()],
        devices: vec![],
        leased_gpus: vec![],
        mig: None,
        driver: DriverManifest {
            kind: DriverKind::Compat,
            libcuda: vec![lib(&compat.dir)],
            cuda_version: Some(V(12020)),
            host_cuda_version: Some(V(11040)),
            kernel_driver: Some("470.256.02".into()),
            compat_dir: Some(compat.dir.display().to_string()),
            driver_link_lib: Some(host.dir.display().to_string()),
            reason: "compat driver provides CUDA 12.2, newer than the host's 11.4".into(),
        },
    };
    std::fs::write(&manifest, chosen.to_json()).unwrap();
    let source = t.join("user.c");
    std::fs::write(
        &source,
        "int cuInit(unsigned int);\nint use_gpu(void) { return cuInit(0); }\n",
    )
    .unwrap();
    let library = |name: &str, first: &Path, second: &Path| {
        let dir = t.join(name).join("lib");
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join(format!("lib{name}.so"));
        // DT_RPATH, which comes before LD_LIBRARY_PATH (the runner's own driver path here).
        let rpath = format!(
            "-Wl,--disable-new-dtags,-rpath,{}:{}",
            first.display(),
            second.display()
        );
        let link = format!("-L{}", compat.dir.display());
        cc(&[
            "-shared",
            "-fPIC",
            "-o",
            out.to_str().unwrap(),
            source.to_str().unwrap(),
            &rpath,
            &link,
            "-l:libcuda.so.1",
        ]);
        t.join(name)
    };
    let with_manifest = |pkg: &Path| {
        vec![
            "--manifest".to_string(),
            manifest.display().to_string(),
            "--package".into(),
            pkg.display().to_string(),
            "package::driver".into(),
        ]
    };
    let right = library("right", &compat.dir, &host.dir);
    let run = run_without_devices(&compat.dir, &strs(&with_manifest(&right)));
    run.assert_check(
        "package::driver",
        "pass",
        &["get the hook's choice (compat"],
    );
    let wrong = library("wrong", &host.dir, &compat.dir);
    let run = run_without_devices(&compat.dir, &strs(&with_manifest(&wrong)));
    run.assert_check(
        "package::driver",
        "fail",
        &[
            "libwrong.so",
            "(host, CUDA unknown) but the hook chose compat",
            "put the compat directory before the driver link",
        ],
    );
}

/// An object whose DT_RPATH reaches NVIDIA's real stub libcuda, renamed libcuda.so.1 in a
/// directory not called `stubs`, fails `package::driver` naming the stub by its fingerprint.
#[test]
fn an_object_that_would_load_nvidias_stub_libcuda_fails_naming_it() {
    let test = "an_object_that_would_load_nvidias_stub_libcuda_fails_naming_it";
    let Some(real) = RealNvidia::find(test) else {
        return;
    };
    let stub = real.stub_libcuda("11.8");
    if !real.has(test, &stub) {
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let t = temp.path();
    let in_use = driver((9, 0), 12020);
    let link = t.join("cuda-link");
    std::fs::create_dir_all(&link).unwrap();
    std::fs::copy(&stub, link.join("libcuda.so.1")).unwrap();
    let source = t.join("user.c");
    std::fs::write(
        &source,
        "int cuInit(unsigned int);\nint use_gpu(void) { return cuInit(0); }\n",
    )
    .unwrap();
    let lib = t.join("pkg/lib");
    std::fs::create_dir_all(&lib).unwrap();
    let out = lib.join("libuser.so");
    let rpath = format!("-Wl,--disable-new-dtags,-rpath,{}", link.display());
    let against = format!("-L{}", link.display());
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        out.to_str().unwrap(),
        source.to_str().unwrap(),
        &rpath,
        &against,
        "-l:libcuda.so.1",
    ]);
    let run = run_without_devices(&in_use.dir, &strs(&package_args(&t.join("pkg"))));
    run.assert_check(
        "package::driver",
        "fail",
        &[
            &format!(
                "libuser.so (needs libcuda.so.1 (DT_NEEDED)) would load {}/libcuda.so.1, \
                 NVIDIA's stub libcuda (545 driver entry points, each returning 34, \
                 CUDA_ERROR_STUB_LIBRARY): every driver call fails",
                link.display()
            ),
            "DT_RPATH",
        ],
    );
}

/// On ZLUDA the package's GPU code is judged as ZLUDA loads it, at the capability it reports
/// (8.8 by default, 8.5 from v7-preview.8): the PTX of a library built with
/// cudaForwardCompat is compiled, a library of SASS alone (even for sm_80, which NVIDIA's
/// rules would run on an 8.8 GPU) cannot run.
#[test]
fn on_zluda_gpu_code_runs_from_ptx_and_not_from_sass() {
    let Some(real) = RealNvidia::find("on_zluda_gpu_code_runs_from_ptx_and_not_from_sass") else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let with_ptx = temp.path().join("ptx/lib");
    let sass_only = temp.path().join("sass/lib");
    std::fs::create_dir_all(&with_ptx).unwrap();
    std::fs::create_dir_all(&sass_only).unwrap();
    let ptx = &[("compute_80", "8.8")];
    gpu_library_of(&real, "12.9", &with_ptx, "libampere", &["sm_80"], ptx, &[]);
    gpu_library_of(&real, "12.9", &sass_only, "libsass", &["sm_80"], &[], &[]);
    for (capability, sm) in [((8, 8), "sm_88"), ((8, 5), "sm_85")] {
        let zluda = FakeDriver::zluda(&Sidecar {
            compute_capability: capability,
            cuda_version: 12040,
            ..Sidecar::default()
        });
        let on = format!("ZLUDA on AMD (reporting {sm})");
        let args = package_args(&temp.path().join("ptx"));
        let run = run_without_devices(&zluda.dir, &strs(&args));
        run.assert_check(
            "package::gpu_code",
            "pass",
            &[&format!(
                "every file with GPU code (1) runs on {on}; 1 by JIT"
            )],
        );
        let args = package_args(&temp.path().join("sass"));
        let run = run_without_devices(&zluda.dir, &strs(&args));
        run.assert_check(
            "package::gpu_code",
            "fail",
            &[
                &format!("libsass.so: cannot run on {on}"),
                "SASS only, and ZLUDA loads no SASS",
            ],
        );
    }
}
