//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn untagged_build_gets_nothing_even_with_a_broken_config() {
    let c = Case::new();
    let broken = c.path("broken.toml");
    std::fs::write(&broken, "this is [not toml").unwrap();
    for features in [None, Some(""), Some("big-parallel kvm")] {
        let out = c.hook(&c.drv("plain", features), &broken);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(out.stdout.is_empty());
    }
    // A feature that appears nowhere in the config's text cannot be answered by it: the hook
    // does not parse it (the fast path), so it has nothing to warn about.
    let out = c.hook(&c.drv("plain", Some("kvm")), &broken);
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    // A feature the broken text mentions makes the hook read it, and only warn.
    let mentions_kvm = c.path("broken-kvm.toml");
    std::fs::write(&mentions_kvm, "features = [\"kvm\"\nthis is [not toml").unwrap();
    let out = c.hook(&c.drv("plain", Some("kvm")), &mentions_kvm);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).starts_with("cuda-sandbox-hook: warning:"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn tagged_build_with_broken_config_fails_in_one_line() {
    let c = Case::new();
    let broken = c.path("broken.toml");
    std::fs::write(
        &broken,
        "[[rule]]\nname = \"x\"\nfeatures = [\"cuda\"]\ndevice = 3\n",
    )
    .unwrap();
    let out = c.hook(&c.drv("tagged", Some("cuda")), &broken);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("tagged.drv") && err.contains("'cuda'") && err.contains("line 4"),
        "{err}"
    );
}

#[test]
fn missing_drv_exposes_nothing_with_a_warning() {
    let c = Case::new();
    let out = c.hook(&c.path("absent.drv"), &c.config(A_DEVICE));
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    let err = stderr(&out);
    assert!(
        err.contains("missing_drv = \"skip\"") && err.contains("remote GPU builder"),
        "{err}"
    );
}

#[test]
fn missing_drv_policies_expose_or_fail() {
    let (c, config) = remote_case("expose");
    let out = c.hook(&c.path("absent.drv"), &config);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("/run/gpu-tools="),
        "{:?}",
        out
    );

    let (c, config) = remote_case("fail");
    let out = c.hook(&c.path("absent.drv"), &config);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("missing_drv = \"fail\""),
        "{}",
        stderr(&out)
    );

    let (c, config) = remote_case("sometimes");
    let out = Command::new(HOOK)
        .args(["check-config", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("line 1") && stderr(&out).contains("`sometimes`"),
        "{}",
        stderr(&out)
    );
    let _ = c;
}

#[test]
fn derivation_json_from_the_environment_is_used_when_the_drv_is_absent() {
    let (c, config) = remote_case("fail");
    let run = |json: &str| {
        Command::new(HOOK)
            .arg(c.path("absent.drv"))
            .arg(c.path("chroot"))
            .env("CUDA_SANDBOX_CONFIG", &config)
            .env("NIX_DERIVATION_V4", json)
            .output()
            .unwrap()
    };
    let tagged = run(r#"{"env":{"requiredSystemFeatures":"cuda"}}"#);
    assert!(tagged.status.success(), "{}", stderr(&tagged));
    assert!(String::from_utf8_lossy(&tagged.stdout).contains("/run/gpu-tools="));
    let untagged = run(r#"{"env":{"requiredSystemFeatures":"kvm"}}"#);
    assert!(untagged.status.success() && untagged.stdout.is_empty());
    let broken = run("{not json");
    assert!(
        broken.status.success(),
        "a broken JSON naming no GPU feature must not fail"
    );
    let broken_tagged = run("{not json cuda");
    assert_eq!(broken_tagged.status.code(), Some(1));
    assert!(
        stderr(&broken_tagged).contains("NIX_DERIVATION_V4"),
        "{}",
        stderr(&broken_tagged)
    );
}

#[test]
fn malformed_drv_fails_only_when_it_may_be_tagged() {
    let c = Case::new();
    let config = c.config(A_DEVICE);
    let bad = c.path("bad.drv");
    std::fs::write(
        &bad,
        b"Derive([(\"out\",\"/x\",\"\",\"\")],[],oops requiredSystemFeatures cuda",
    )
    .unwrap();
    let out = c.hook(&bad, &config);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("at byte 31"), "{}", stderr(&out));
    std::fs::write(&bad, b"Derive([(\"out\",\"/x\",\"\",\"\")],[],oops").unwrap();
    let out = c.hook(&bad, &config);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
}

#[test]
fn tagged_build_gets_devices_mounts_and_link_targets_in_protocol_order() {
    let c = Case::new();
    let root = c.path("root");
    cuda_sandbox_testkit::FakeDevices::create(&root, 0, false).ok();
    // Devices need mknod (root); without it, stand in with directories, which also count.
    if !root.join("dev/nvidiactl").exists() {
        std::fs::create_dir_all(root.join("dev/nvidiactl")).unwrap();
    }
    std::fs::create_dir_all(root.join("opt/driver-1.0/lib")).unwrap();
    std::os::unix::fs::symlink("driver-1.0", root.join("opt/driver")).unwrap();
    std::fs::create_dir_all(c.path("libs")).unwrap();
    let config = c.config(
        "[[rule.device]]\nglob = \"/dev/nvidiactl\"\nrequired = true\n\
         [[rule.device]]\nglob = \"/dev/nvidia-modeset\"\n\
         [[rule.path]]\npath = \"/opt/driver\"\nrequired = true\n\
         [[rule.path]]\npath = \"/opt/driver/lib\"\n\
         [[rule.mount]]\ninside = \"/run/opengl-driver/lib\"\noutside = \"LIBS\"\nrequired = true\n"
            .replace("LIBS", &c.path("libs").display().to_string())
            .as_str(),
    );
    let out = c.hook(&c.drv("t", Some("cuda")), &config);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = root.display();
    let expected = format!(
        "extra-sandbox-paths\n/dev/nvidiactl={r}/dev/nvidiactl\n/opt/driver={r}/opt/driver\n\
         /opt/driver-1.0={r}/opt/driver-1.0\n/run/cuda-sandbox/manifest.json={}\n\
         /run/opengl-driver/lib={}\n\n",
        c.manifest().display(),
        c.path("libs").display()
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);

    let e = c.explain_json(&config, "cuda");
    let kinds: Vec<&str> = e["plan"]["exposures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["reason"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["device", "host-path", "symlink-target", "manifest", "mount"]
    );
    let skipped = e["plan"]["skipped"].to_string();
    assert!(skipped.contains("nvidia-modeset"), "{skipped}");
    // explain plans the same, except for the manifest's file name (no chroot).
    let explained = expected.replace(
        &c.manifest().display().to_string(),
        &c.path("run/manifests/explain.json").display().to_string(),
    );
    assert_eq!(e["nix_answer"].as_str().unwrap(), explained);
    assert!(e["verdict"]
        .as_str()
        .unwrap()
        .starts_with("tagged: 5 paths"));
    // The hook wrote the manifest, read-only, naming the devices and the build.
    let manifest = c.manifest();
    let m = cuda_sandbox_manifest::Manifest::read(&manifest).unwrap();
    assert_eq!(m.devices, ["/dev/nvidiactl"]);
    assert!(m.derivation.ends_with("t.drv"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&manifest).unwrap().permissions().mode() & 0o777,
        0o444
    );
}

#[test]
fn store_paths_bring_their_closure_once_cached() {
    let c = Case::new();
    let store = c.path("store");
    std::fs::create_dir_all(store.join("aaa-driver/lib")).unwrap();
    std::fs::create_dir_all(c.path("root/run")).unwrap();
    std::os::unix::fs::symlink(store.join("aaa-driver"), c.path("root/run/opengl-driver")).unwrap();
    // A stand-in nix-store: answers a two-path closure and counts its calls.
    write_script(
        &c.path("nix-store"),
        &format!(
            "#!/bin/sh\necho call >> {calls}\necho \"$3\"\necho {store}/bbb-dep\n",
            calls = c.path("calls").display(),
            store = store.display()
        ),
    )
    .unwrap();
    let config = c.config("[[rule.path]]\npath = \"/run/opengl-driver\"\n");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("store_dir = \"{}\"\n{text}", store.display()),
    )
    .unwrap();

    let first = c.explain_json(&config, "cuda");
    let second = c.explain_json(&config, "gpu,cuda");
    assert_eq!(first["plan"]["closures_computed"], 1, "{first}");
    assert_eq!(second["plan"]["closures_cached"], 1, "{second}");
    assert_eq!(first["nix_answer"], second["nix_answer"]);
    let exposures: Vec<(String, String)> = second["plan"]["exposures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["inside"].as_str().unwrap().to_string(),
                x["reason"]["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let s = store.display().to_string();
    assert_eq!(
        exposures,
        [
            (
                "/run/cuda-sandbox/manifest.json".to_string(),
                "manifest".to_string()
            ),
            ("/run/opengl-driver".to_string(), "host-path".to_string()),
            (format!("{s}/aaa-driver"), "symlink-target".to_string()),
            (format!("{s}/bbb-dep"), "closure-member".to_string()),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(c.path("calls"))
            .unwrap()
            .lines()
            .count(),
        1
    );
}

#[test]
fn link_targets_with_newline_or_equals_are_refused_by_name() {
    for (dir, shown) in [("odd\ndir", "\"/opt/odd\\ndir\""), ("a=b", "\"/opt/a=b\"")] {
        let c = Case::new();
        std::fs::create_dir_all(c.path("root/run")).unwrap();
        std::fs::create_dir_all(c.path("root/opt").join(dir)).unwrap();
        std::os::unix::fs::symlink(
            Path::new("/opt").join(dir),
            c.path("root/run/opengl-driver"),
        )
        .unwrap();
        let config = c.config("[[rule.path]]\npath = \"/run/opengl-driver\"\n");
        let out = c.hook(&c.drv("t", Some("cuda")), &config);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            out.stdout.is_empty(),
            "printed {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
        let err = stderr(&out);
        assert!(
            err.contains(shown) && err.contains("cannot express"),
            "{err}"
        );
        // An untagged build on the same host is untouched.
        let out = c.hook(&c.drv("u", Some("kvm")), &config);
        assert!(out.status.success() && out.stdout.is_empty());
    }
}

#[test]
fn symlinks_leading_outside_the_allowed_roots_are_not_followed() {
    let c = Case::new();
    std::fs::create_dir_all(c.path("root/run")).unwrap();
    std::fs::create_dir_all(c.path("root/etc")).unwrap();
    std::fs::write(c.path("root/etc/shadow"), "secret").unwrap();
    std::fs::create_dir_all(c.path("root/dev")).unwrap();
    std::os::unix::fs::symlink("/etc", c.path("root/run/opengl-driver")).unwrap();
    std::os::unix::fs::symlink("../etc/shadow", c.path("root/dev/nvidia0")).unwrap();
    let config = c.config(
        "[[rule.path]]\npath = \"/run/opengl-driver\"\n[[rule.device]]\nglob = \"/dev/nvidia*\"\n",
    );
    let e = c.explain_json(&config, "cuda");
    let exposed = e["plan"]["exposures"].to_string();
    assert!(!exposed.contains("/etc"), "followed into /etc: {exposed}");
    let skipped = e["plan"]["skipped"].to_string();
    assert!(
        skipped.contains("outside the roots symlinks may be followed into"),
        "{skipped}"
    );
    // Required, it fails the tagged build with the reason.
    let config = c.config("[[rule.path]]\npath = \"/run/opengl-driver\"\nrequired = true\n");
    let out = c.hook(&c.drv("t", Some("cuda")), &config);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("symlink_roots"), "{}", stderr(&out));
    // Allowed explicitly, it is followed.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("symlink_roots = [\"/etc\"]\n{text}")).unwrap();
    let out = c.hook(&c.drv("t", Some("cuda")), &config);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn hostile_feature_lists_are_a_safe_no_op_or_tagged() {
    let c = Case::new();
    let config = c.config(A_DEVICE);
    for features in ["cuda\\u0000", "c=uda", "cu\\nda", "\\u0001cuda\\u0001"] {
        let out = c.hook(&c.drv("odd", Some(features)), &config);
        assert!(out.status.success(), "{features}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{features} was treated as tagged");
    }
    // Real control bytes around a real feature: whitespace splits, other bytes stay.
    let drv = c.path("ctl.drv");
    let mut text = br#"Derive([],[],[],"s","b",[],[("requiredSystemFeatures","kvm"#.to_vec();
    text.extend_from_slice(b"\x01\x7f\n cuda\r");
    text.extend_from_slice(br#"")])"#);
    std::fs::write(&drv, text).unwrap();
    let out = c.hook(&drv, &config);
    assert!(out.status.success(), "{}", stderr(&out));
    // `cuda` is a feature of its own here, so the rule answers: the manifest is exposed.
    assert!(String::from_utf8_lossy(&out.stdout).contains("/run/cuda-sandbox/manifest.json"));
}

#[test]
fn missing_required_path_names_the_fix() {
    let c = Case::new();
    let config = c.config("[[rule.path]]\npath = \"/run/opengl-driver\"\nrequired = true\n");
    let out = c.hook(&c.drv("t", Some("big-parallel cuda")), &config);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("feature 'cuda'")
            && err.contains("rule 'gpu'")
            && err.contains("hardware.graphics"),
        "{err}"
    );
}

#[test]
fn explain_text_says_untagged() {
    let c = Case::new();
    let config = c.config(A_DEVICE);
    let out = Command::new(HOOK)
        .args(["explain", "--config"])
        .arg(&config)
        .arg(c.drv("t", Some("kvm")))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("features:    kvm"), "{text}");
    assert!(text.contains("verdict:     untagged"), "{text}");
}

#[test]
fn cuda_sandbox_gpus_is_validated_and_honoured() {
    let c = Case::new();
    for gpu in ["nvidia0", "nvidia1", "nvidiactl"] {
        // Directories stand in for device nodes (they count as devices for the hook).
        std::fs::create_dir_all(c.path("root/dev").join(gpu)).unwrap();
    }
    let config = c.config(
        "[[rule.device]]\nglob = \"/dev/nvidia[0-9]*\"\nrequired = true\n\
         [[rule.device]]\nglob = \"/dev/nvidiactl\"\nrequired = true\n",
    );
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("gpus_per_build = 1\nlease_wait_seconds = 0\n{text}"),
    )
    .unwrap();
    let drv = |name: &str, gpus: &str| {
        let p = c.path(&format!("{name}.drv"));
        std::fs::write(
            &p,
            format!(
                r#"Derive([("out","/nix/store/x-out","","")],[],[],"x86_64-linux","/bin/sh",[],[("cudaSandboxGpus","{gpus}"),("requiredSystemFeatures","cuda")])"#
            ),
        )
        .unwrap();
        p
    };
    for bad in ["zero", "0", "3", "-1"] {
        let out = c.hook(&drv("bad", bad), &config);
        assert_eq!(
            out.status.code(),
            Some(1),
            "cudaSandboxGpus = {bad} accepted"
        );
        let err = stderr(&out);
        assert!(
            err.contains("cudaSandboxGpus") && err.lines().count() == 1,
            "{err}"
        );
    }
    // Nix creates the sandbox directory before it runs the hook; a lease records it.
    std::fs::create_dir_all(c.path("chroot")).unwrap();
    let out = c.hook(&drv("two", "2"), &config);
    assert!(out.status.success(), "{}", stderr(&out));
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(
        answer.contains("/dev/nvidia0=") && answer.contains("/dev/nvidia1="),
        "{answer}"
    );
    let one = c.hook(&c.drv("one", Some("cuda")), &config);
    assert!(one.status.success(), "{}", stderr(&one));
    let answer = String::from_utf8_lossy(&one.stdout);
    assert_eq!(
        answer.matches("/dev/nvidia0=").count() + answer.matches("/dev/nvidia1=").count(),
        1,
        "{answer}"
    );
}

/// A hook that fails after it took the GPU lease (here its manifest cannot be written:
/// `manifests` is a file) ends that lease: Nix never starts the build, and nothing else would
/// end the lease before that Nix ends. Once the build may start, the lease is kept.
#[test]
fn a_build_refused_after_its_lease_was_taken_leaves_no_lease() {
    let c = Case::new();
    for gpu in ["nvidia0", "nvidiactl"] {
        // Directories stand in for device nodes (they count as devices for the hook).
        std::fs::create_dir_all(c.path("root/dev").join(gpu)).unwrap();
    }
    let config = c.config(
        "[[rule.device]]\nglob = \"/dev/nvidia[0-9]*\"\nrequired = true\n\
         [[rule.device]]\nglob = \"/dev/nvidiactl\"\nrequired = true\n",
    );
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("gpus_per_build = 1\nlease_wait_seconds = 0\n{text}"),
    )
    .unwrap();
    std::fs::create_dir_all(c.path("chroot")).unwrap();
    std::fs::create_dir_all(c.path("run")).unwrap();
    std::fs::write(c.path("run/manifests"), "").unwrap();
    let leases = || -> Vec<String> {
        std::fs::read_dir(c.path("run/leases"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".lease"))
            .collect()
    };
    let drv = c.drv("x", Some("cuda"));
    let out = c.hook(&drv, &config);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot write the manifest"),
        "{}",
        stderr(&out)
    );
    // The lease was taken (its use is counted) and ended again.
    let usage = std::fs::read_to_string(c.path("run/leases/usage.json")).unwrap();
    assert!(usage.contains("\"nvidia0\""), "{usage}");
    assert_eq!(leases(), Vec::<String>::new());
    std::fs::remove_file(c.path("run/manifests")).unwrap();
    let out = c.hook(&drv, &config);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(leases(), ["nvidia0.lease"]);
}

/// Current Nix (`chrootRootDir` in `getPreBuildHookArgs`) passes
/// `<drv>.chroot/root`, Nix 2.8 `<drv>.chroot`. Every build of the first shape got the manifest
/// `root.json`, so concurrent builds bound each other's. Now each build binds its own.
#[test]
fn each_build_binds_its_own_manifest_with_either_shape_of_chroot() {
    let c = Case::new();
    std::fs::create_dir_all(c.path("root/run/gpu-tools")).unwrap();
    let config = c.config("[[rule.path]]\npath = \"/run/gpu-tools\"\n");
    let mut bound = std::collections::BTreeSet::new();
    for (name, chroot) in [
        ("aaa-x", "store/aaa-x.drv.chroot/root"),
        ("bbb-y", "store/bbb-y.drv.chroot/root"),
        ("ccc-z", "store/ccc-z.drv.chroot"),
        ("ddd-w", "store/ddd-w.drv.chroot"),
    ] {
        let chroot = c.path(chroot);
        std::fs::create_dir_all(&chroot).unwrap();
        let out = Command::new(HOOK)
            .arg(c.drv(name, Some("cuda")))
            .arg(&chroot)
            .env("CUDA_SANDBOX_CONFIG", &config)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let answer = String::from_utf8(out.stdout).unwrap();
        let manifest = answer
            .lines()
            .find_map(|l| l.strip_prefix("/run/cuda-sandbox/manifest.json="))
            .unwrap_or_else(|| panic!("{answer}"))
            .to_owned();
        let m = cuda_sandbox_manifest::Manifest::read(Path::new(&manifest)).unwrap();
        assert!(
            m.derivation.ends_with(&format!("{name}.drv")),
            "{manifest}: {m:?}"
        );
        assert_eq!(m.chroot, chroot.display().to_string());
        bound.insert(manifest);
    }
    assert_eq!(bound.len(), 4, "{bound:?}");
    assert_eq!(
        std::fs::read_dir(c.path("run/manifests")).unwrap().count(),
        4
    );
}

/// `max_gpus_per_build` was silently ignored with `gpus_per_build = 0`.
#[test]
fn check_config_says_when_max_gpus_per_build_has_no_effect() {
    let c = Case::new();
    let check = |top: &str| {
        let config = c.path("check.toml");
        std::fs::write(
            &config,
            format!("{top}[[rule]]\nname = \"gpu\"\nfeatures = [\"cuda\"]\n{A_DEVICE}"),
        )
        .unwrap();
        let out = Command::new(HOOK)
            .args(["check-config", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let ignored = check("max_gpus_per_build = 2\n");
    assert!(
        ignored.contains("note: max_gpus_per_build = 2 has no effect")
            && ignored.contains("set gpus_per_build"),
        "{ignored}"
    );
    for used in ["gpus_per_build = 1\nmax_gpus_per_build = 2\n", ""] {
        assert!(!check(used).contains("note:"), "{used}");
    }
}

/// An optional device whose name holds `=` (or a newline) cannot be said
/// in the hook protocol, and failed every tagged build. It is skipped with a warning now; a
/// required one still fails, naming it.
#[test]
fn an_optional_device_the_protocol_cannot_express_is_skipped_with_a_warning() {
    let c = Case::new();
    for dir in [
        "root/dev/nvidiactl",
        "root/dev/extra/ok",
        "root/dev/extra/a=b",
    ] {
        std::fs::create_dir_all(c.path(dir)).unwrap();
    }
    let optional = c.config(
        "[[rule.device]]\nglob = \"/dev/nvidiactl\"\nrequired = true\n\
         [[rule.device]]\nglob = \"/dev/extra/*\"\n",
    );
    let out = c.hook(&c.drv("t", Some("cuda")), &optional);
    assert!(out.status.success(), "{}", stderr(&out));
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(
        answer.contains("/dev/extra/ok=") && !answer.contains("a=b"),
        "{answer}"
    );
    assert!(
        stderr(&out).contains("warning") && stderr(&out).contains("/dev/extra/a=b"),
        "{}",
        stderr(&out)
    );
    let required = c.config("[[rule.device]]\nglob = \"/dev/extra/*\"\nrequired = true\n");
    let out = c.hook(&c.drv("t", Some("cuda")), &required);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("a=b"), "{}", stderr(&out));
}

/// `explain` printed structured-attrs features raw; a newline in one
/// forged a `verdict:` line.
#[test]
fn explain_text_escapes_what_the_derivation_says() {
    let c = Case::new();
    let config = c.config(A_DEVICE);
    let drv = c.path("hostile.drv");
    std::fs::write(
        &drv,
        r#"Derive([("out","/nix/store/x-out","","")],[],[],"x86_64-linux","/bin/sh",[],[("__json","{\"requiredSystemFeatures\":[\"kvm\\nverdict:     tagged: 9 paths exposed\",\"\\u001b[2J\"]}"),("out","/nix/store/x-out")])"#,
    )
    .unwrap();
    let out = Command::new(HOOK)
        .args(["explain", "--config"])
        .arg(&config)
        .arg(&drv)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let verdicts: Vec<&str> = text.lines().filter(|l| l.starts_with("verdict:")).collect();
    assert_eq!(verdicts.len(), 1, "{text}");
    assert!(verdicts[0].contains("untagged"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text:?}");
    assert!(text.contains(r"kvm\nverdict:"), "{text}");
}

/// `follow_entry_symlinks` on a mount (nix-required-mounts' `unsafeFollowSymlinks`, as in its
/// own NixOS test: a directory whose entries are symlinks into /usr): the targets of the links
/// directly inside it are exposed, within `symlink_roots`; a link elsewhere is not followed.
#[test]
fn entry_symlinks_of_a_mounted_directory_are_followed_only_when_asked() {
    let c = Case::new();
    let libs = c.path("libs");
    std::fs::create_dir_all(&libs).unwrap();
    std::os::unix::fs::symlink("/usr/bin/env", libs.join("env")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", libs.join("passwd")).unwrap();
    std::fs::write(libs.join("plain"), "not a link").unwrap();
    let body = |follow: bool| {
        format!(
            "[[rule.mount]]\ninside = \"/run/opengl-driver/lib\"\noutside = \"{}\"\n\
             follow_entry_symlinks = {follow}\n",
            libs.display()
        )
    };
    let drv = c.drv("t", Some("cuda"));
    let followed = c.config(&body(true));
    let out = c.hook(&drv, &followed);
    assert!(out.status.success(), "{}", stderr(&out));
    let answer = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(answer.contains("\n/usr/bin/env\n"), "{answer}");
    assert!(!answer.contains("passwd"), "{answer}");
    assert!(answer.contains(&format!("/run/opengl-driver/lib={}\n", libs.display())));
    let plain = c.config(&body(false));
    let out = c.hook(&drv, &plain);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("/usr/bin/env"));
}

/// Nix keeps the last of a repeated env key (2.8's `drv.env[name] = value`, `insert_or_assign`
/// since), and its JSON library the last of a repeated member, so `("requiredSystemFeatures",
/// "cuda")` then `("requiredSystemFeatures","")` is untagged for Nix, which builds it on a
/// machine without `cuda`; the hook took the first and exposed the GPU. A key the hook decides
/// on (the features, `__json`, the GPU count), set twice in any form, now fails the build in one
/// line, whichever value comes last.
#[test]
fn a_repeated_gpu_attribute_fails_the_build_in_every_form() {
    let c = Case::new();
    let config = c.config(A_DEVICE);
    let aterm = [
        (
            "requiredSystemFeatures",
            r#"("requiredSystemFeatures","cuda"),("requiredSystemFeatures","")"#,
        ),
        (
            "requiredSystemFeatures",
            r#"("requiredSystemFeatures",""),("requiredSystemFeatures","cuda")"#,
        ),
        // The same key, written with an escape: Nix's reader unescapes keys too.
        (
            "requiredSystemFeatures",
            r#"("re\quiredSystemFeatures","cuda"),("requiredSystemFeatures","kvm")"#,
        ),
        (
            "__json",
            r#"("__json","{\"requiredSystemFeatures\":[\"cuda\"]}"),("__json","{}")"#,
        ),
        (
            "cudaSandboxGpus",
            r#"("cudaSandboxGpus","2"),("cudaSandboxGpus","1"),("requiredSystemFeatures","cuda")"#,
        ),
        // Inside `__json`'s own object, which Nix reads with its JSON library.
        (
            "requiredSystemFeatures",
            r#"("__json","{\"requiredSystemFeatures\":[\"cuda\"],\"requiredSystemFeatures\":[]}")"#,
        ),
        (
            "requiredSystemFeatures",
            r#"("__json","{\"requiredSystemFeatures\":[],\"required\\u0053ystemFeatures\":[\"cuda\"]}")"#,
        ),
        (
            "cudaSandboxGpus",
            r#"("__json","{\"cudaSandboxGpus\":2,\"requiredSystemFeatures\":[\"cuda\"],\"cudaSandboxGpus\":1}")"#,
        ),
    ];
    for (i, (key, env)) in aterm.iter().enumerate() {
        let out = c.hook(&drv_with_env(&c, &format!("dup{i}"), env), &config);
        assert_refused_for(&out, key, env);
    }

    // The derivation as JSON, when the `.drv` is absent.
    let (c, config) = remote_case("skip");
    let json = [
        (
            "requiredSystemFeatures",
            r#"{"env":{"requiredSystemFeatures":"cuda","requiredSystemFeatures":""}}"#,
        ),
        (
            "cudaSandboxGpus",
            r#"{"env":{"cudaSandboxGpus":"2","requiredSystemFeatures":"cuda","cudaSandboxGpus":"1"}}"#,
        ),
        ("__json", r#"{"env":{"__json":"{}","__json":"{}"}}"#),
        (
            "requiredSystemFeatures",
            r#"{"env":{"__json":"{\"requiredSystemFeatures\":[\"cuda\"],\"requiredSystemFeatures\":[]}"}}"#,
        ),
        (
            "requiredSystemFeatures",
            r#"{"structuredAttrs":{"requiredSystemFeatures":["cuda"],"requiredSystemFeatures":[]}}"#,
        ),
        (
            "cudaSandboxGpus",
            r#"{"/nix/store/x.drv":{"structuredAttrs":{"cudaSandboxGpus":2,"cudaSandboxGpus":1,"requiredSystemFeatures":["cuda"]}}}"#,
        ),
    ];
    for (key, text) in json {
        let out = Command::new(HOOK)
            .arg(c.path("absent.drv"))
            .arg(c.path("chroot"))
            .env("CUDA_SANDBOX_CONFIG", &config)
            .env("NIX_DERIVATION_V4", text)
            .output()
            .unwrap();
        assert_refused_for(&out, key, text);
    }

    // `explain` says why.
    let out = Command::new(HOOK)
        .args(["explain", "--config"])
        .arg(&config)
        .arg(drv_with_env(&c, "explained", aterm[0].1))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let verdict = text
        .lines()
        .find(|l| l.starts_with("verdict:"))
        .unwrap_or_else(|| panic!("no verdict: {text}{}", stderr(&out)));
    assert!(
        verdict.contains("FAILS") && verdict.contains("\"requiredSystemFeatures\""),
        "{text}"
    );
}

/// Every other repeated key is read as Nix reads it: the last one counts. A repeated `env`
/// member or `.drv` path in the JSON is such a key (Nix's JSON library keeps the last member).
#[test]
fn other_repeated_keys_are_read_as_nix_reads_them() {
    let c = Case::new();
    let config = c.config(A_DEVICE);
    // A repeated key the hook does not decide on changes nothing.
    let out = c.hook(
        &drv_with_env(
            &c,
            "other",
            r#"("out","/a"),("out","/nix/store/x-out"),("requiredSystemFeatures","cuda")"#,
        ),
        &config,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("manifest.json"));
    let out = c.hook(
        &drv_with_env(
            &c,
            "inner-other",
            r#"("__json","{\"x\":1,\"x\":[2],\"requiredSystemFeatures\":[\"kvm\"]}")"#,
        ),
        &config,
    );
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "{}",
        stderr(&out)
    );

    let (c, config) = remote_case("fail");
    let run = |json: &str| {
        Command::new(HOOK)
            .arg(c.path("absent.drv"))
            .arg(c.path("chroot"))
            .env("CUDA_SANDBOX_CONFIG", &config)
            .env("NIX_DERIVATION_V4", json)
            .output()
            .unwrap()
    };
    for (json, tagged) in [
        (
            r#"{"env":{"requiredSystemFeatures":"cuda"},"env":{"requiredSystemFeatures":"kvm"}}"#,
            false,
        ),
        (
            r#"{"env":{"requiredSystemFeatures":"kvm"},"env":{"requiredSystemFeatures":"cuda"}}"#,
            true,
        ),
        (
            r#"{"/nix/store/a.drv":{"env":{"requiredSystemFeatures":"cuda"}},"/nix/store/a.drv":{"env":{}}}"#,
            false,
        ),
        (
            r#"{"/nix/store/a.drv":{"env":{}},"/nix/store/a.drv":{"env":{"requiredSystemFeatures":"cuda"}}}"#,
            true,
        ),
        (
            r#"{"derivation":{"env":{}},"derivation":{"env":{"requiredSystemFeatures":"cuda"}}}"#,
            true,
        ),
    ] {
        let out = run(json);
        assert!(out.status.success(), "{json}: {}", stderr(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).contains("/run/gpu-tools="),
            tagged,
            "{json}"
        );
    }
}

/// A red-team finding: the lease's holder was whoever ran the hook. Under a wrapper that does
/// not `exec` it, that is a shell that exits at once, and with no builder recorded yet the next
/// hook judged the build ended: its GPU went to another build. The hook now leases only for a
/// parent that reads its standard output as Nix does, and refuses otherwise.
#[test]
fn a_hook_under_a_wrapper_that_does_not_exec_it_takes_no_lease() {
    let c = Case::new();
    for gpu in ["nvidia0", "nvidiactl"] {
        // Directories stand in for device nodes (they count as devices for the hook).
        std::fs::create_dir_all(c.path("root/dev").join(gpu)).unwrap();
    }
    let config = c.config(
        "[[rule.device]]\nglob = \"/dev/nvidia[0-9]*\"\nrequired = true\n\
         [[rule.device]]\nglob = \"/dev/nvidiactl\"\nrequired = true\n",
    );
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("gpus_per_build = 1\nlease_wait_seconds = 0\n{text}"),
    )
    .unwrap();
    std::fs::create_dir_all(c.path("chroot")).unwrap();
    let drv = c.drv("x", Some("cuda"));
    let wrapped = |script: &str| {
        Command::new("sh")
            .args(["-c", script, "wrapper", HOOK])
            .arg(&drv)
            .arg(c.path("chroot"))
            .env("CUDA_SANDBOX_CONFIG", &config)
            .output()
            .unwrap()
    };
    let leases = || {
        std::fs::read_dir(c.path("run/leases")).map_or(0, |d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension() == Some("lease".as_ref()))
            })
            .count()
        })
    };
    // The wrapper's shell runs the hook as its child and goes on.
    let out = wrapped("\"$@\"; status=$?; exit $status");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("the hook's parent is not a Nix reading its output")
            && err.contains("must `exec` it")
            && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(leases(), 0, "a lease was taken for the wrapper's shell");
    // A wrapper that `exec`s the hook leaves this test, which reads its output, its parent.
    let out = wrapped("exec \"$@\"");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(leases(), 1);
}

/// Issue 49: `explain` and `check-config` printed with `println!`, which panics on a closed
/// stdout (the hook ignores SIGPIPE). They end quietly with the status they would have had,
/// and a log line to a closed stderr is dropped.
#[test]
fn a_closed_stdout_or_stderr_ends_explain_and_check_config_quietly() {
    let c = Case::new();
    let config = c.config(A_DEVICE);
    let config = config.to_str().unwrap();
    let cases: [(&[&str], i32); 4] = [
        (&["explain", "--features", "cuda", "--config", config], 0),
        (
            &[
                "explain",
                "--features",
                "cuda",
                "--json",
                "--config",
                config,
            ],
            0,
        ),
        (&["check-config", "--content-only", "--config", config], 0),
        (&["explain"], 2),
    ];
    for (args, code) in cases {
        let out = Command::new(HOOK)
            .args(args)
            .stdout(cuda_sandbox_testkit::closed_pipe())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
        let both = Command::new(HOOK)
            .args(args)
            .stdout(cuda_sandbox_testkit::closed_pipe())
            .stderr(cuda_sandbox_testkit::closed_pipe())
            .status()
            .unwrap();
        assert_eq!(
            both.code(),
            Some(code),
            "{args:?}, stdout and stderr closed"
        );
    }
}

/// `explain`'s output, text and JSON, byte for byte, on a grant with every kind of list: an
/// exposed path whose store closure a stand-in `nix-store` gives, a mount, an optional
/// device that is absent (skipped), the manifest and the driver none. The expected files
/// were written by the binary before the grant's model changed (issue 56): the JSON's keys
/// and their order are what scripts read. The text is compared line by line, its padding
/// aside.
#[test]
fn explain_prints_a_grant_byte_for_byte_as_before() {
    let c = Case::new();
    let store = c.path("store");
    std::fs::create_dir_all(store.join("aaa-tools/bin")).unwrap();
    std::fs::create_dir_all(c.path("root/run")).unwrap();
    std::fs::create_dir_all(c.path("libs")).unwrap();
    std::os::unix::fs::symlink(store.join("aaa-tools"), c.path("root/run/gpu-tools")).unwrap();
    write_script(
        &c.path("nix-store"),
        &format!("#!/bin/sh\necho \"$3\"\necho {}/bbb-dep\n", store.display()),
    )
    .unwrap();
    let config = c.config(&format!(
        "[[rule.path]]\npath = \"/run/gpu-tools\"\n\
         [[rule.mount]]\ninside = \"/run/opengl-driver/lib\"\noutside = \"{}\"\n\
         [[rule.device]]\nglob = \"/dev/nvidia9\"\nrequired = false\n",
        c.path("libs").display()
    ));
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("store_dir = \"{}\"\n{text}", store.display()),
    )
    .unwrap();
    let dir = c.path("").display().to_string();
    let anonymous = |s: String| s.replace(&dir, "@DIR@/");
    assert_eq!(
        anonymous(common::explain_output(&config, "cuda", true)),
        include_str!("explain.golden.json")
    );
    // The text's columns are padded to 60 characters, so their width depends on the
    // temporary directory's name: runs of spaces count as one.
    let columns = |s: &str| -> Vec<String> {
        s.lines()
            .map(|l| {
                l.split(' ')
                    .filter(|w| !w.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    };
    assert_eq!(
        columns(&anonymous(common::explain_output(&config, "cuda", false))),
        columns(include_str!("explain.golden.txt"))
    );
}
