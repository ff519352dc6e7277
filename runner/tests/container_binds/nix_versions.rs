//! The nix_versions tier of these tests (docs/testing.md): a NixOS GPU container test's build
//! needs `uid-range` (Nix runs it as root of a user namespace of its own, with
//! `auto-allocate-uids`). Measured here, as lib.runGpuContainerTest and the test driver do it:
//! under 2.26 and 2.34 such a build is root, cannot write the `/run` Nix made (so the test
//! driver would mount a tmpfs over it, hiding the hook's manifest and driver link), has a sysfs
//! of its own at `/sys`, and can keep `/run` aside with `mount --rbind`, from where
//! `container-binds` renders every bind. Nix 2.8 has no `auto-allocate-uids`: the build runs
//! as a build user, and none of it can be done.

use super::*;

#[test]
fn nix_versions_a_uid_range_build_keeps_run_aside_and_renders_the_binds_from_there() {
    let test = "nix_versions_a_uid_range_build_keeps_run_aside_and_renders_the_binds_from_there";
    if !nix_available(test) {
        return;
    }
    let version = NixVersion::current().expect("nix-build --version");
    let host = Host::new(1, "", "", &[]);
    let mut sandbox = host.sandbox();
    sandbox.system_features = "cuda uid-range".into();
    // The builder's settings of docs/nixos-tests.md (Nix puts uid-range builds in cgroups of
    // their own, which needs the `cgroups` feature, not `use-cgroups`).
    sandbox.extra_settings.extend([
        "experimental-features = auto-allocate-uids cgroups".to_string(),
        "auto-allocate-uids = true".to_string(),
    ]);
    let build = sandbox.build(
        &nix_file("container-binds-uid-range.nix"),
        &[("runner", RUNNER), ("nonce", &nonce())],
        &[],
    );
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let out = &build.out_paths[0];
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
    let facts = read("facts");
    // auto-allocate-uids and uid-range came with Nix 2.12 (its release notes).
    if version < NixVersion::parse("2.12").unwrap() {
        // Nix 2.8: a warning names the unknown setting, and a build user builds.
        assert!(!facts.starts_with("uid 0\n"), "{facts}");
        assert!(facts.contains("rbind failed\n"), "{facts}");
        assert!(facts.contains("manifest-in-run visible\n"), "{facts}");
        return;
    }
    assert_eq!(
        facts,
        "uid 0\nrun not-writable\nsys sysfs\nrbind ok\ntmpfs ok\nmanifest-in-run hidden\n\
         container-binds ok\n",
        "{}",
        read("binds-error")
    );
    let binds: Vec<String> = read("binds").lines().map(str::to_owned).collect();
    let devices: Vec<&String> = binds
        .iter()
        .filter(|b| b.starts_with("--bind=/dev/"))
        .collect();
    assert_eq!(devices.len(), 3, "{binds:#?}");
    let rest: Vec<&str> = binds[3..].iter().map(String::as_str).collect();
    assert_eq!(
        rest,
        [
            "--bind-ro=/cuda-sandbox-run/opengl-driver:/run/opengl-driver",
            "--bind-ro=/sys/devices/system/cpu:/sys/devices/system/cpu",
            "--bind-ro=/sys/devices/system/node:/sys/devices/system/node",
            "--bind-ro=/cuda-sandbox-run/cuda-sandbox/manifest.json:/run/cuda-sandbox/manifest.json",
        ],
        "{binds:#?}"
    );
    let sources = read("sources");
    assert_eq!(sources.lines().count(), binds.len(), "{sources}");
    for line in sources.lines().take(3) {
        assert!(
            line.starts_with("character special file /dev/nvidia"),
            "{sources}"
        );
    }
    assert!(
        sources.ends_with(
            "directory /cuda-sandbox-run/opengl-driver\ndirectory /sys/devices/system/cpu\n\
             directory /sys/devices/system/node\n\
             regular file /cuda-sandbox-run/cuda-sandbox/manifest.json\n"
        ),
        "{sources}"
    );
}
