//! The sandbox tier of these tests (docs/testing.md).

use super::*;

#[test]
fn nixos_link_host_driver_passes() {
    if !nix_available("nixos_link_host_driver_passes") {
        return;
    }
    let host = Host::new("535.104.05", true);
    let files = host.scratch.join("host-driver");
    fake_driver_dir(
        &files,
        &Sidecar::default(),
        &DRIVER_LIBRARIES,
        "535.104.05",
        None,
    );
    let (store, _) = host.install_store_drivers(&files, None);
    host.configure("[rule.driver]\n");

    let (_, explain) = host.explain();
    let driver = &explain["plan"]["driver"];
    assert_eq!(driver["kind"], "host", "{explain:#}");
    assert_eq!(driver["cuda_version"], "12.2", "{explain:#}");
    assert_eq!(driver["kernel_driver"], "535.104.05");
    let closure: Vec<String> =
        cuda_sandbox_elfkit::requisites(Path::new("nix-store"), Path::new(&store))
            .unwrap()
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
    assert!(closure.len() >= 2, "the fake driver's closure: {closure:?}");
    let inside = exposed_inside(&explain);
    for member in &closure {
        assert!(inside.contains(member), "{member} not exposed: {inside:?}");
    }

    let report = report(&host.check(LINK_LIB, "host"));
    assert_all_pass(&report);
    let library: LibraryFacts = report_facts(&report, "driver::library");
    assert_eq!(
        library.path,
        Path::new("/run/opengl-driver/lib/libcuda.so.1")
    );
    assert!(message(&report, "driver::library").contains("the host driver the hook chose"));
    assert_eq!(report["manifest"]["status"], "loaded", "{report:#}");
    assert_eq!(report["manifest"]["content"]["driver"]["kind"], "host");
    assert!(report["manifest"]["content"]["devices"]
        .as_array()
        .unwrap()
        .contains(&Value::from("/dev/nvidia0")));
}

#[test]
fn jetson_compat_first_passes() {
    if !nix_available("jetson_compat_first_passes") {
        return;
    }
    let (host, compat_dir) = jetson();
    let (text, explain) = host.explain();
    let driver = &explain["plan"]["driver"];
    assert_eq!(driver["kind"], "compat", "{text}");
    assert_eq!(driver["compat_dir"], compat_dir.as_str());
    assert_eq!(driver["cuda_version"], "12.2");
    assert_eq!(driver["host_cuda_version"], "11.4");

    let report = report(&host.check(&format!("{compat_dir}:{LINK_LIB}"), "compat"));
    assert_all_pass(&report);
    let library: LibraryFacts = report_facts(&report, "driver::library");
    assert_eq!(
        library.path,
        PathBuf::from(format!("{compat_dir}/libcuda.so.1"))
    );
    assert!(
        message(&report, "driver::library").contains("the compat driver the hook chose"),
        "{report:#}"
    );
    assert!(message(&report, "driver::version").contains("CUDA 12.2"));
    assert!(message(&report, "nvml::consistency").contains("compat active"));
}

#[test]
fn jetson_driver_link_first_fails_with_runpath_fix() {
    if !nix_available("jetson_driver_link_first_fails_with_runpath_fix") {
        return;
    }
    let (host, compat_dir) = jetson();
    let build = host.check(&format!("{LINK_LIB}:{compat_dir}"), "");
    assert!(!build.ok(), "the driver link first passed:\n{}", build.log);
    let expected = format!(
        "loaded /run/opengl-driver/lib/libcuda.so.1 (host, CUDA 11.4) but the hook chose \
         compat {compat_dir}/libcuda.so.1 (CUDA 12.2): put the compat directory before the \
         driver link in DT_RUNPATH or LD_LIBRARY_PATH"
    );
    assert!(
        build
            .log
            .lines()
            .any(|l| l.trim_start_matches("driver::library: ") == expected),
        "the build log lacks {expected:?}:\n{}",
        build.log
    );
    assert!(
        build.log.contains(
            "the hook chose the compat driver (CUDA 12.2) but the loaded libcuda is the host's"
        ),
        "{}",
        build.log
    );
}

#[test]
fn other_distro_ld_cache_libraries_pass_without_libc() {
    if !nix_available("other_distro_ld_cache_libraries_pass_without_libc") {
        return;
    }
    let host = Host::new("535.104.05", true);
    // A Debian-like root: the FAKE driver's real ELF files and a dummy libc.so.6 in the
    // multiarch directory, and the loader cache ldconfig makes from them.
    let libdir = host.root.join("usr/lib/x86_64-linux-gnu");
    let files = host.scratch.join("host-driver");
    assemble(
        &artifacts_dir(),
        &files,
        &DRIVER_LIBRARIES,
        &Sidecar::default(),
    )
    .unwrap();
    std::fs::create_dir_all(&libdir).unwrap();
    for name in ["libcuda.so.1", "libnvidia-ml.so.1", SIDECAR_NAME] {
        std::fs::copy(files.join(name), libdir.join(name)).unwrap();
    }
    let src = host.scratch.join("libc.c");
    std::fs::write(&src, "int not_the_host_libc(void) { return 0; }\n").unwrap();
    let ok = Command::new("cc")
        .args([
            "-shared",
            "-fPIC",
            "-nostdlib",
            "-Wl,-soname,libc.so.6",
            "-o",
        ])
        .arg(libdir.join("libc.so.6"))
        .arg(&src)
        .status()
        .expect("run cc (install gcc)");
    assert!(ok.success(), "cc failed");
    std::fs::create_dir_all(host.root.join("etc")).unwrap();
    std::fs::write(
        host.root.join("etc/ld.so.conf"),
        "/usr/lib/x86_64-linux-gnu\n",
    )
    .unwrap();
    let ldconfig = Command::new("ldconfig")
        .arg("-r")
        .arg(&host.root)
        .output()
        .expect("run ldconfig");
    assert!(
        ldconfig.status.success(),
        "ldconfig -r failed: {}",
        String::from_utf8_lossy(&ldconfig.stderr)
    );
    assert!(host.root.join("etc/ld.so.cache").is_file());
    // The fake libraries read their sidecar next to where they are loaded from.
    host.configure(&format!(
        "[rule.driver]\nlibrary_dirs = []\n[[rule.mount]]\ninside = \"{LINK_LIB}/{SIDECAR_NAME}\"\n\
         outside = \"{}\"\nrequired = true\n",
        libdir.join(SIDECAR_NAME).display()
    ));

    let (text, explain) = host.explain();
    assert_eq!(explain["plan"]["driver"]["kind"], "host", "{text}");
    let exposures = explain["plan"]["exposures"].as_array().unwrap();
    let libcuda = exposures
        .iter()
        .find(|x| x["inside"] == "/run/opengl-driver/lib/libcuda.so.1")
        .unwrap_or_else(|| panic!("libcuda.so.1 not exposed:\n{text}"));
    assert_eq!(
        libcuda["outside"],
        libdir.join("libcuda.so.1").display().to_string().as_str()
    );
    assert!(
        libcuda["reason"]["source"]
            .as_str()
            .unwrap()
            .contains("/etc/ld.so.cache"),
        "{libcuda:#}"
    );
    for x in exposures {
        for side in ["inside", "outside"] {
            let path = x[side].as_str().unwrap();
            assert!(
                !path.contains("libc.so") && !path.contains("libstdc++"),
                "host libc exposed: {x:#}"
            );
        }
    }
    assert!(
        !explain["nix_answer"]
            .as_str()
            .unwrap()
            .contains("libc.so.6"),
        "{explain:#}"
    );

    let report = report(&host.check(LINK_LIB, "host"));
    assert_all_pass(&report);
    let library: LibraryFacts = report_facts(&report, "driver::library");
    assert_eq!(
        library.path,
        Path::new("/run/opengl-driver/lib/libcuda.so.1")
    );
    assert_eq!(report["manifest"]["content"]["driver"]["kind"], "host");
}

#[test]
fn lint_finds_static_cuda_archives_in_a_store_packages_closure() {
    if !nix_available("lint_finds_static_cuda_archives_in_a_store_packages_closure") {
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let t = temp.path();
    let compat = "/nix/store/00000000000000000000000000000000-fake-cuda-compat/compat";
    // A libcuda user with the compat directory first, linked against a stub libcuda.
    std::fs::create_dir_all(t.join("stubs")).unwrap();
    std::fs::write(
        t.join("stub.c"),
        "int cuInit(unsigned int f) { return 34; }\n",
    )
    .unwrap();
    std::fs::write(
        t.join("app.c"),
        "int cuInit(unsigned int);\nint app(void) { return cuInit(0); }\n",
    )
    .unwrap();
    let s = |p: &str| t.join(p).display().to_string();
    cc(&[
        "-shared",
        "-fPIC",
        "-Wl,-soname,libcuda.so.1",
        "-o",
        &s("stubs/libcuda.so"),
        &s("stub.c"),
    ]);
    std::fs::create_dir_all(t.join("app/lib")).unwrap();
    let runpath = format!("-Wl,--enable-new-dtags,-rpath,{compat}:{LINK_LIB}");
    let stubs = format!("-L{}", s("stubs"));
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        &s("app/lib/libapp.so"),
        &s("app.c"),
        &runpath,
        &stubs,
        "-lcuda",
    ]);
    // The toolkit's static runtime, referenced by the package.
    std::fs::create_dir_all(t.join("toolkit/lib")).unwrap();
    cc(&["-c", "-o", &s("toolkit/lib/cudart.o"), &s("app.c")]);
    let ar = Command::new("ar")
        .args([
            "rcs",
            &s("toolkit/lib/libcudart_static.a"),
            &s("toolkit/lib/cudart.o"),
        ])
        .status()
        .unwrap();
    assert!(ar.success());
    std::fs::remove_file(t.join("toolkit/lib/cudart.o")).unwrap();

    let hook = workspace_binary("cuda-sandbox-hook");
    let config = t.join("config.toml");
    std::fs::write(
        &config,
        "[[rule]]\nname = \"nvidia\"\nfeatures = [\"cuda\"]\n[[rule.device]]\nglob = \"/dev/nvidia0\"\n",
    )
    .unwrap();
    let build = NixSandbox::with_hook(&hook, &config).build(
        &nix_file("lint-package.nix"),
        &[("package", &s("app")), ("toolkit", &s("toolkit"))],
        &[],
    );
    assert!(build.ok(), "building the package failed:\n{}", build.log);
    let package = build.out_paths[0].display().to_string();

    let lint = |closure: bool| {
        let mut cmd = Command::new(common::RUNNER);
        cmd.args(["lint", "--no-manifest", "--compat-dir", compat]);
        if closure {
            cmd.arg("--closure");
        }
        let out = cmd.arg(&package).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = lint(false);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("1 using libcuda, 0 CUDA runtime(s), 0 with GPU code; 0 finding(s)"),
        "{text}"
    );
    let (code, text) = lint(true);
    // Issue 49: findings (a static archive) are lint's exit status 1.
    assert_eq!(code, Some(1), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("libcudart_static.a: "))
        .unwrap_or_else(|| panic!("no static archive finding:\n{text}"));
    assert!(
        line.contains("-fake-cuda-toolkit-static/lib/libcudart_static.a"),
        "{line}"
    );
    assert!(
        line.contains(&format!("in the runtime closure of {package}")),
        "{line}"
    );
}
