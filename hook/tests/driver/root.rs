//! The root tier of these tests (docs/testing.md).

use super::*;

#[test]
fn other_distro_libraries_come_from_ld_cache_without_libc() {
    if !root_available("other_distro_libraries_come_from_ld_cache_without_libc") {
        return;
    }
    let r = Root::new("535.104.05");
    r.host_library("libcuda.so.535.104.05", "libcuda.so.1");
    r.host_library("libnvidia-ml.so.535.104.05", "libnvidia-ml.so.1");
    r.host_library(
        "libnvidia-ptxjitcompiler.so.535.104.05",
        "libnvidia-ptxjitcompiler.so.1",
    );
    r.host_library("libc.so.6", "libc.so.6");
    r.host_library("libstdc++.so.6.0.30", "libstdc++.so.6");
    r.ldconfig();
    let config = r.config(&[]);
    let e = r.explain(&config);
    let x = exposures(&e);
    let lib = r.path(&format!("root/{LIBDIR}"));
    let bound = |name: &str| {
        x.iter().any(|(i, o, _)| {
            i == &format!("/run/opengl-driver/lib/{name}")
                && o == &lib.join(name).display().to_string()
        })
    };
    for name in [
        "libcuda.so.1",
        "libcuda.so.535.104.05",
        "libnvidia-ml.so.1",
        "libnvidia-ptxjitcompiler.so.1",
    ] {
        assert!(bound(name), "{name} not bound at the driver link: {x:#?}");
    }
    for (inside, outside, _) in &x {
        for bad in ["libc.so", "libstdc++"] {
            assert!(
                !inside.contains(bad) && !outside.contains(bad),
                "host {bad} exposed: {inside} <- {outside}"
            );
        }
    }
    let driver = &e["plan"]["driver"];
    assert_eq!(driver["kind"], "host");
    assert_eq!(driver["cuda_version"], "12.2");
    assert_eq!(driver["kernel_driver"], "535.104.05");
    assert!(driver["libcuda"]
        .to_string()
        .contains("/run/opengl-driver/lib/libcuda.so.1"));

    let (answer, manifest) = r.hook(&config);
    assert!(
        answer.contains(&format!(
            "/run/opengl-driver/lib/libcuda.so.1={}/libcuda.so.1",
            lib.display()
        )),
        "{answer}"
    );
    assert_eq!(manifest.driver.kind, DriverKind::Host);
    assert_eq!(manifest.devices, ["/dev/nvidia0"]);
}

#[test]
fn compat_listing_the_kernel_branch_replaces_host_libcuda_at_the_link() {
    if !root_available("compat_listing_the_kernel_branch_replaces_host_libcuda_at_the_link") {
        return;
    }
    let r = Root::new("470.82.01");
    r.host_library("libcuda.so.470.82.01", "libcuda.so.1");
    r.host_library("libnvidia-ml.so.470.82.01", "libnvidia-ml.so.1");
    r.ldconfig();
    r.compat(
        "usr/local/cuda-12.2/compat",
        "libcuda.so.535.104.05",
        Some(r#"{"Format":1,"CUDA Version":"12.2","Driver":[470,525]}"#),
    );
    let config = r.config(&["/usr/local/cuda*/compat"]);
    let e = r.explain(&config);
    let driver = &e["plan"]["driver"];
    assert_eq!(driver["kind"], "compat", "{e:#}");
    assert_eq!(driver["cuda_version"], "12.2");
    assert_eq!(driver["host_cuda_version"], "11.4");
    assert!(driver["reason"]
        .as_str()
        .unwrap()
        .contains("lists kernel driver branch 470"));
    let x = exposures(&e);
    let compat = r.path("root/usr/local/cuda-12.2/compat");
    assert!(
        x.iter()
            .any(|(i, o, _)| i == "/run/opengl-driver/lib/libcuda.so.1"
                && o == &compat.join("libcuda.so.1").display().to_string()),
        "compat libcuda not at the driver link: {x:#?}"
    );
    assert!(
        x.iter().any(|(i, _, _)| i == "/usr/local/cuda-12.2/compat"),
        "{x:#?}"
    );
    assert!(
        !x.iter().any(|(_, o, _)| o.contains("libcuda.so.470")),
        "the host libcuda is still exposed: {x:#?}"
    );
    assert!(
        x.iter()
            .any(|(i, _, _)| i == "/run/opengl-driver/lib/libnvidia-ml.so.1"),
        "{x:#?}"
    );
    let (_, manifest) = r.hook(&config);
    assert_eq!(manifest.driver.kind, DriverKind::Compat);
    assert!(manifest
        .driver
        .libcuda
        .contains(&"/run/opengl-driver/lib/libcuda.so.1".to_string()));
    assert_eq!(
        manifest.driver.compat_dir.as_deref(),
        Some("/usr/local/cuda-12.2/compat")
    );
}

#[test]
fn compat_not_listing_the_kernel_branch_is_rejected_and_explained() {
    if !root_available("compat_not_listing_the_kernel_branch_is_rejected_and_explained") {
        return;
    }
    let r = Root::new("470.82.01");
    r.host_library("libcuda.so.470.82.01", "libcuda.so.1");
    r.ldconfig();
    r.compat(
        "usr/local/cuda-12.2/compat",
        "libcuda.so.535.104.05",
        Some(r#"{"Format":1,"CUDA Version":"12.2","Driver":[525,535]}"#),
    );
    let config = r.config(&["/usr/local/cuda*/compat"]);
    let e = r.explain(&config);
    assert_eq!(e["plan"]["driver"]["kind"], "host");
    let why = e["plan"]["driver_choice"]["rejected"][0]["why"]
        .as_str()
        .unwrap();
    assert!(
        why.contains("does not list the host's kernel driver branch 470"),
        "{why}"
    );
    let text = r.explain_text(&config);
    assert!(text.contains("driver:      host (CUDA 11.4)"), "{text}");
    assert!(
        text.contains("does not list the host's kernel driver branch 470"),
        "{text}"
    );
    assert!(!exposures(&e).iter().any(|(i, _, _)| i.contains("compat")));
}

#[test]
fn jetson_gets_tegra_devices_and_host_only_libraries() {
    if !root_available("jetson_gets_tegra_devices_and_host_only_libraries") {
        return;
    }
    let r = Root::new("540.3.0");
    std::fs::create_dir_all(r.path("root/etc")).unwrap();
    std::fs::write(
        r.path("root/etc/nv_tegra_release"),
        "# R36 (release), REVISION: 3.0, GCID: 1\n",
    )
    .unwrap();
    std::fs::create_dir_all(r.path("root/dev/nvmap")).unwrap();
    r.host_library("libcuda.so.1.1", "libcuda.so.1");
    r.host_library("libnvrm_gpu.so", "libnvrm_gpu.so");
    r.host_library("libnvos.so", "libnvos.so");
    r.ldconfig();
    // The built-in rule, re-rooted: its device list knows Tegra.
    let config = r.path("config.toml");
    std::fs::write(
        &config,
        format!(
            "host_root = \"{}\"\nruntime_dir = \"{}\"\n[[rule]]\nname = \"jetson\"\nfeatures = [\"cuda\"]\n\
             [[rule.device]]\nglob = \"/dev/nvidiactl\"\nrequired = true\nplatform = \"discrete\"\n\
             [[rule.device]]\nglob = \"/dev/nvmap\"\nrequired = true\nplatform = \"tegra\"\n[rule.driver]\n",
            r.path("root").display(),
            r.path("run").display()
        ),
    )
    .unwrap();
    let e = r.explain(&config);
    assert!(
        e["plan"]["problems"].as_array().unwrap().is_empty(),
        "{e:#}"
    );
    let x = exposures(&e);
    for inside in [
        "/dev/nvmap",
        "/run/opengl-driver/lib/libnvrm_gpu.so",
        "/run/opengl-driver/lib/libnvos.so",
        "/run/opengl-driver/lib/libcuda.so.1",
    ] {
        assert!(
            x.iter().any(|(i, _, _)| i == inside),
            "{inside} missing: {x:#?}"
        );
    }
    assert!(e["plan"]["skipped"]
        .to_string()
        .contains("only on discrete-GPU hosts"));
    assert_eq!(e["plan"]["driver"]["host_cuda_version"], "12.2");
}

/// After a driver upgrade without a reboot: user space 535.309.01 (the real Debian libcuda's
/// name) under a loaded 550.54.14 kernel module.
#[test]
fn a_stale_user_space_driver_fails_tagged_builds_with_one_line_naming_both_versions() {
    if !root_available(
        "a_stale_user_space_driver_fails_tagged_builds_with_one_line_naming_both_versions",
    ) {
        return;
    }
    let r = Root::new("550.54.14");
    r.host_library("libcuda.so.535.309.01", "libcuda.so.1");
    r.host_library("libnvidia-ml.so.535.309.01", "libnvidia-ml.so.1");
    r.ldconfig();
    let config = r.config(&[]);
    let (out, chroot) = r.run_hook(&config);
    assert!(!out.status.success(), "a stale driver was exposed");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    for needle in ["t.drv", "535.309.01", "550.54.14", "reboot", "reinstall"] {
        assert!(
            lines[0].contains(needle),
            "{needle:?} missing from {}",
            lines[0]
        );
    }
    let name = cuda_sandbox_hook::manifest_file::name_for(Some(&chroot));
    assert!(
        !r.path("run/manifests").join(name).exists(),
        "a refused build left a manifest"
    );

    let e = r.explain(&config);
    let problems = e["plan"]["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{e:#}");
    assert!(problems[0]["what"].as_str().unwrap().contains("550.54.14"));
    let text = r.explain_text(&config);
    assert!(text.contains("problems:"), "{text}");
    assert!(text.contains("verdict:     FAILS"), "{text}");
}

/// The NixOS layout after `nixos-rebuild switch`: `/run/opengl-driver` is the new driver,
/// `/run/booted-system` still names the old one, in the store, which matches the module.
#[test]
fn a_stale_nixos_driver_link_is_offered_the_booted_systems_driver() {
    if !root_available("a_stale_nixos_driver_link_is_offered_the_booted_systems_driver") {
        return;
    }
    let r = Root::new("550.54.14");
    let store = r.path("store");
    let driver = |name: &str, version: &str| {
        let lib = store.join(name).join("lib");
        std::fs::create_dir_all(&lib).unwrap();
        let file = format!("libcuda.so.{version}");
        shared_library(&lib.join(&file), Some("libcuda.so.1")).unwrap();
        std::os::unix::fs::symlink(&file, lib.join("libcuda.so.1")).unwrap();
        store.join(name)
    };
    let new = driver("nnn-graphics-drivers", "560.35.03");
    let old = driver("ooo-graphics-drivers", "550.54.14");
    let system = store.join("sss-nixos-system");
    std::fs::create_dir_all(system.join("etc/tmpfiles.d")).unwrap();
    std::fs::write(
        system.join("etc/tmpfiles.d/graphics-driver.conf"),
        format!(
            "'L+' '/run/opengl-driver' '-' '-' '-' '-' {}\n",
            old.display()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(r.path("root/run")).unwrap();
    std::os::unix::fs::symlink(&new, r.path("root/run/opengl-driver")).unwrap();
    std::os::unix::fs::symlink(&system, r.path("root/run/booted-system")).unwrap();
    let config = r.config(&[]);
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("store_dir = \"{}\"\n{text}", store.display()),
    )
    .unwrap();

    let (out, _) = r.run_hook(&config);
    assert!(!out.status.success(), "a stale driver was exposed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "560.35.03",
        "550.54.14",
        &format!("ln -sfn {} /run/opengl-driver", old.display()),
    ] {
        assert!(stderr.contains(needle), "{needle:?} missing from {stderr}");
    }

    // Once the link points at the booted driver again, it is no longer stale (this fake
    // store is no Nix store, so only its closure is then a problem).
    std::fs::remove_file(r.path("root/run/opengl-driver")).unwrap();
    std::os::unix::fs::symlink(&old, r.path("root/run/opengl-driver")).unwrap();
    let e = r.explain(&config);
    let problems = e["plan"]["problems"].to_string();
    assert!(!problems.contains("kernel module"), "{e:#}");
    assert_eq!(e["plan"]["driver"]["kernel_driver"], "550.54.14");
}

#[test]
fn without_cdi_an_opengl_build_gets_graphics_and_video_libraries_and_icd_files() {
    if !root_available(
        "without_cdi_an_opengl_build_gets_graphics_and_video_libraries_and_icd_files",
    ) {
        return;
    }
    let r = Root::new("550.54.14");
    r.host_library("libcuda.so.550.54.14", "libcuda.so.1");
    r.host_library(
        "libnvidia-glcore.so.550.54.14",
        "libnvidia-glcore.so.550.54.14",
    );
    r.host_library("libGLX_nvidia.so.550.54.14", "libGLX_nvidia.so.0");
    r.host_library("libEGL_nvidia.so.550.54.14", "libEGL_nvidia.so.0");
    r.host_library("libnvcuvid.so.550.54.14", "libnvcuvid.so.1");
    r.host_library("libnvidia-encode.so.550.54.14", "libnvidia-encode.so.1");
    r.host_library("libnvoptix.so.550.54.14", "libnvoptix.so.1");
    r.host_library("libGL.so.1.7.0", "libGL.so.1");
    r.ldconfig();
    for (dir, rel) in [
        ("usr/share", "vulkan/icd.d/nvidia_icd.json"),
        ("usr/share", "glvnd/egl_vendor.d/10_nvidia.json"),
        ("usr/share", "nvidia/nvoptix.bin"),
        ("etc", "vulkan/implicit_layer.d/nvidia_layers.json"),
    ] {
        let p = r.path(&format!("root/{dir}/{rel}"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "{}\n").unwrap();
    }
    let config = r.config(&[]);
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("features = [\"cuda\"]", "features = [\"cuda\", \"opengl\"]");
    std::fs::write(&config, text).unwrap();
    let e = common::explain_json(&config, "opengl");
    let lib = r.path(&format!("root/{LIBDIR}"));
    let x = e["plan"]["exposures"].as_array().unwrap();
    let source_of = |inside: &str| {
        x.iter()
            .find(|x| x["inside"] == inside)
            .map(|x| x["reason"]["source"].as_str().unwrap_or("").to_string())
            .unwrap_or_else(|| panic!("{inside} not exposed: {e:#}"))
    };
    for (name, capability) in [
        ("libnvidia-glcore.so.550.54.14", "graphics"),
        ("libGLX_nvidia.so.0", "graphics"),
        ("libEGL_nvidia.so.0", "graphics"),
        ("libnvoptix.so.1", "graphics"),
        ("libnvcuvid.so.1", "video"),
        ("libnvidia-encode.so.1", "video"),
        ("libcuda.so.1", "compute"),
    ] {
        let source = source_of(&format!("/run/opengl-driver/lib/{name}"));
        assert_eq!(
            source,
            format!("host-library ({capability}) from /etc/ld.so.cache"),
            "{name}"
        );
    }
    for (rel, from) in [
        ("vulkan/icd.d/nvidia_icd.json", "/usr/share"),
        ("glvnd/egl_vendor.d/10_nvidia.json", "/usr/share"),
        ("nvidia/nvoptix.bin", "/usr/share"),
        ("vulkan/implicit_layer.d/nvidia_layers.json", "/etc"),
    ] {
        let source = source_of(&format!("/run/opengl-driver/share/{rel}"));
        assert_eq!(
            source,
            format!("host-data-file (graphics) from {from}"),
            "{rel}"
        );
    }
    // The GLVND dispatcher is Nixpkgs' own.
    assert!(
        !x.iter()
            .any(|x| x["outside"] == lib.join("libGL.so.1").display().to_string()),
        "{e:#}"
    );
}
