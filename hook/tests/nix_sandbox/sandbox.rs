//! The sandbox tier of these tests (docs/testing.md).

use super::*;

#[test]
fn tagged_build_sees_gpu_and_driver_closure_untagged_sees_nothing() {
    if !nix_available("tagged_build_sees_gpu_and_driver_closure_untagged_sees_nothing") {
        return;
    }
    let host = Host::new(true);
    let closure = host.install_store_driver();
    // Every probe but sm90a, which needs a builder advertising cuda-sm-90a (remote_build.rs).
    let attrs = ["tagged", "untagged", "structured", "other-feature"];
    let (ok, log, reports) = probe(&host.sandbox(), &closure, &attrs);
    assert!(ok, "nix-build failed:\n{log}");
    assert_eq!(reports.len(), 4, "{reports:?}");

    for name in ["probe-tagged", "probe-structured"] {
        let r = &reports[name];
        for line in [
            "char /dev/nvidia0 195:0",
            "char /dev/nvidia1 195:1",
            "char /dev/nvidiactl 195:255",
            "char /dev/nvidia-uvm 235:0",
            "char /dev/nvidia-uvm-tools 235:1",
            "driver present",
            "driver-file ./lib/libcuda.so.1 FAKE libcuda",
        ] {
            assert!(r.contains(line), "{name} lacks {line:?}:\n{r}");
        }
        let manifest = r.lines().find(|l| l.starts_with("manifest ")).unwrap();
        assert!(manifest.contains(&format!("-{name}.drv\"")), "{manifest}");
        assert!(manifest.contains("\"/dev/nvidia-uvm\""), "{manifest}");
        for member in &closure {
            let line = format!("read {}", member.display());
            assert!(
                r.lines().any(|l| l == line),
                "{name} cannot read closure member {}:\n{r}",
                member.display()
            );
        }
    }
    for name in ["probe-untagged", "probe-other-feature"] {
        let r = &reports[name];
        for dev in ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"] {
            assert!(
                r.contains(&format!("absent /dev/{dev}\n")),
                "{name} sees /dev/{dev}:\n{r}"
            );
        }
        assert!(r.contains("driver absent"), "{name} sees the driver:\n{r}");
        assert!(
            r.contains("manifest absent"),
            "{name} sees a manifest:\n{r}"
        );
        for member in &closure {
            assert!(
                r.contains(&format!("unreadable {}", member.display())),
                "{name} reads {}:\n{r}",
                member.display()
            );
        }
    }
}

#[test]
fn tagged_build_with_missing_required_device_fails_with_the_hooks_reason() {
    if !nix_available("tagged_build_with_missing_required_device_fails_with_the_hooks_reason") {
        return;
    }
    let host = Host::new(false);
    host.install_store_driver();
    let (ok, log, _) = probe(&host.sandbox(), &[], &["tagged"]);
    assert!(
        !ok,
        "a tagged build without /dev/nvidia-uvm succeeded:\n{log}"
    );
    let line = log
        .lines()
        .find(|l| l.starts_with("cuda-sandbox-hook: error:"))
        .unwrap_or_else(|| panic!("no hook error line in the build log:\n{log}"));
    for needle in [
        "probe-tagged.drv",
        "feature 'cuda'",
        "/dev/nvidia-uvm",
        "nvidia-modprobe",
    ] {
        assert!(line.contains(needle), "{needle:?} missing from {line:?}");
    }
    // The same host still builds untagged derivations.
    let (ok, log, reports) = probe(&host.sandbox(), &[], &["untagged"]);
    assert!(ok, "untagged build failed:\n{log}");
    assert!(reports["probe-untagged"].contains("absent /dev/nvidia0"));
}

#[test]
fn broken_config_fails_tagged_builds_only() {
    if !nix_available("broken_config_fails_tagged_builds_only") {
        return;
    }
    let host = Host::new(true);
    std::fs::write(
        &host.config,
        "[[rule]]\nname = \"x\"\nfeatures = [\"cuda\"]\nbogus = 1\n",
    )
    .unwrap();
    let (ok, log, reports) = probe(&host.sandbox(), &[], &["untagged", "other-feature"]);
    assert!(
        ok,
        "untagged builds failed because of a broken config:\n{log}"
    );
    assert_eq!(reports.len(), 2);

    let (ok, log, _) = probe(&host.sandbox(), &[], &["tagged"]);
    assert!(!ok, "tagged build succeeded with a broken config:\n{log}");
    assert!(
        log.lines()
            .any(|l| l.starts_with("cuda-sandbox-hook: error:")
                && l.contains("configuration is broken")
                && l.contains("bogus")
                && l.contains("line 4")),
        "{log}"
    );
}

#[test]
fn a_stale_driver_fails_the_tagged_build_in_the_hook_and_a_matching_one_builds() {
    if !nix_available("a_stale_driver_fails_the_tagged_build_in_the_hook_and_a_matching_one_builds")
    {
        return;
    }
    let host = driver_host("550.54.14");
    let sandbox = NixSandbox::with_hook(Path::new(HOOK), &host.config);
    let (ok, log, _) = probe(&sandbox, &[], &["tagged"]);
    assert!(!ok, "a tagged build ran on a stale driver:\n{log}");
    let line = log
        .lines()
        .find(|l| l.starts_with("cuda-sandbox-hook: error:"))
        .unwrap_or_else(|| panic!("no hook error line in the build log:\n{log}"));
    for needle in ["probe-tagged.drv", "535.104.05", "550.54.14", "reboot"] {
        assert!(line.contains(needle), "{needle:?} missing from {line:?}");
    }
    // Untagged builds on the same host are untouched.
    let (ok, log, reports) = probe(&sandbox, &[], &["untagged"]);
    assert!(ok, "untagged build failed:\n{log}");
    assert!(reports["probe-untagged"].contains("driver absent"));

    // After the reboot the module matches, and the same build gets the driver.
    std::fs::write(
        host.root.join("proc/driver/nvidia/version"),
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  (FAKE)\n",
    )
    .unwrap();
    let (ok, log, reports) = probe(&sandbox, &[], &["tagged"]);
    assert!(ok, "a matching driver failed:\n{log}");
    let r = &reports["probe-tagged"];
    assert!(r.contains("driver present"), "{r}");
    assert!(r.contains("char /dev/nvidia0 195:0"), "{r}");
}

/// The `.drv` of issue 30 (item 5), built for real: `("requiredSystemFeatures","cuda")` then
/// `("requiredSystemFeatures","")`. Nix keeps the last, so the build is untagged for it and
/// runs anywhere, `nix-store --add` accepts the file (its outputs are those of the derivation
/// with the last value), and the hook, which took the first, exposed the GPU. Now the hook
/// refuses the build in one line, and the builder never runs.
#[test]
fn a_drv_that_repeats_its_features_is_refused_in_a_real_build() {
    if !nix_available("a_drv_that_repeats_its_features_is_refused_in_a_real_build") {
        return;
    }
    let host = Host::new(true);
    host.install_store_driver();
    let sandbox = host.sandbox();
    let dir = tempfile::tempdir().unwrap();
    let expr = dir.path().join("repeat.nix");
    std::fs::write(
        &expr,
        format!(
            "derivation {{ name = \"repeat\"; nonce = \"{}\"; system = builtins.currentSystem; \
             builder = \"/bin/sh\"; PATH = \"/bin:/usr/bin\"; requiredSystemFeatures = \"\"; \
             args = [ \"-c\" \"if [ -e /dev/nvidia0 ]; then echo exposed; else echo hidden; fi > $out\" ]; }}\n",
            nonce()
        ),
    )
    .unwrap();
    let out = std::process::Command::new("nix-instantiate")
        .arg(&expr)
        .env("NIX_CONFIG", sandbox.nix_config())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let drv = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let text = std::fs::read_to_string(&drv).unwrap();
    let repeated = text.replacen(
        r#"("requiredSystemFeatures","")"#,
        r#"("requiredSystemFeatures","cuda"),("requiredSystemFeatures","")"#,
        1,
    );
    assert_ne!(repeated, text);
    let file = dir.path().join("repeat.drv");
    std::fs::write(&file, repeated).unwrap();
    let out = std::process::Command::new("nix-store")
        .arg("--add")
        .arg(&file)
        .env("NIX_CONFIG", sandbox.nix_config())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "nix-store --add refused the repeat: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let added = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());

    let build = sandbox.build(&added, &[], &[]);
    let built = build.out_paths.first().map(std::fs::read_to_string);
    assert!(
        !build.ok(),
        "built, and the builder saw: {built:?}\n{}",
        build.log
    );
    let line = build
        .log
        .lines()
        .find(|l| l.starts_with("cuda-sandbox-hook: error:"))
        .unwrap_or_else(|| panic!("no hook error line in the build log:\n{}", build.log));
    assert!(
        line.contains("\"requiredSystemFeatures\"") && line.contains("more than once"),
        "{line}"
    );
}

/// Issue 51: an untagged `.drv` whose lists leave out commas (Nix's `endOfList` allows it),
/// with bytes after it, and on 2.26 and 2.34 one in the `DrvWithVersion` form, each added with
/// `nix-store --add` and mentioning "cuda": Nix builds them, and so must it with the hook (which
/// failed them, "expected ',' or ']'"), exposing nothing.
#[test]
fn untagged_drvs_in_every_form_nix_reads_build_with_the_hook_and_see_no_gpu() {
    let test = "untagged_drvs_in_every_form_nix_reads_build_with_the_hook_and_see_no_gpu";
    if !nix_available(test) {
        return;
    }
    let host = Host::new(true);
    host.install_store_driver();
    let mut sandbox = host.sandbox();
    let version = cuda_sandbox_testkit::NixVersion::current().unwrap();
    if version.reads_drv_with_version() {
        sandbox
            .extra_settings
            .push("extra-experimental-features = dynamic-derivations".to_string());
    }
    let dir = tempfile::tempdir().unwrap();
    let expr = dir.path().join("commas.nix");
    std::fs::write(
        &expr,
        format!(
            "derivation {{ name = \"commas\"; nonce = \"{}\"; system = builtins.currentSystem; \
             builder = \"/bin/sh\"; PATH = \"/bin:/usr/bin\"; note = \"no cuda here\"; \
             args = [ \"-c\" \"if [ -e /dev/nvidia0 ]; then echo exposed; else echo hidden; fi > $out\" ]; }}\n",
            nonce()
        ),
    )
    .unwrap();
    let out = std::process::Command::new("nix-instantiate")
        .arg(&expr)
        .env("NIX_CONFIG", sandbox.nix_config())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let drv = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let text = std::fs::read_to_string(&drv).unwrap();
    let no_commas = text.replace("),(", ")(");
    assert_ne!(no_commas, text);
    let mut forms = vec![
        ("no commas", no_commas.clone()),
        (
            "bytes after it",
            format!("{no_commas}\n(\"requiredSystemFeatures\",\"cuda\")"),
        ),
    ];
    if version.reads_drv_with_version() {
        let versioned = no_commas.replacen("Derive(", "DrvWithVersion(\"xp-dyn-drv\",", 1);
        forms.push(("DrvWithVersion", versioned));
    }
    // Every form has the same output (Nix hashes the derivation as it writes it): the first
    // build makes it, the others rebuild it (`--check`), so the hook runs for each.
    for (i, (form, bytes)) in forms.into_iter().enumerate() {
        let sub = tempfile::tempdir_in(dir.path()).unwrap();
        let file = sub
            .path()
            .join(&Path::new(&drv).file_name().unwrap().to_str().unwrap()[33..]);
        std::fs::write(&file, bytes).unwrap();
        let out = std::process::Command::new("nix-store")
            .arg("--add")
            .arg(&file)
            .env("NIX_CONFIG", sandbox.nix_config())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{form}: nix-store --add: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let added = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        let check: &[&str] = if i == 0 { &[] } else { &["--check"] };
        let build = sandbox.build(&added, &[], check);
        assert!(build.ok(), "{form} (Nix {version}): {}", build.log);
        let seen = std::fs::read_to_string(&build.out_paths[0]).unwrap();
        assert_eq!(seen.trim(), "hidden", "{form}");
    }
}
