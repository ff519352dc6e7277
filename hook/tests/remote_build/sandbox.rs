//! The sandbox tier of these tests (docs/testing.md).

use super::*;

#[test]
fn remote_build_missing_drv_expose_gives_the_tagged_build_the_gpu() {
    if !remote_available("remote_build_missing_drv_expose_gives_the_tagged_build_the_gpu") {
        return;
    }
    let builder = Builder::start("expose", Stores::Separate);
    let remote = builder.build("tagged", "cuda");
    assert!(!builder.drv_where_the_hook_looks(&remote));
    assert_sees_gpu(remote.report(), "probe-tagged");
    let line = remote
        .hook_lines()
        .into_iter()
        .find(|l| l.contains("-probe-tagged.drv is not on disk"))
        .unwrap_or_else(|| panic!("no missing_drv line on the builder:\n{remote:#?}"));
    assert!(line.contains("missing_drv = \"expose\""), "{line}");

    // Why `expose` belongs on a builder whose mandatory features include cuda: the hook cannot
    // tell an untagged build from a tagged one there, so one that reaches it gets the GPU too.
    let remote = builder.build("untagged", "-");
    assert_sees_gpu(remote.report(), "probe-untagged");
}

#[test]
fn remote_build_missing_drv_skip_builds_without_gpu_and_warns_on_the_builder() {
    if !remote_available(
        "remote_build_missing_drv_skip_builds_without_gpu_and_warns_on_the_builder",
    ) {
        return;
    }
    let builder = Builder::start("skip", Stores::Separate);
    let remote = builder.build("tagged", "cuda");
    assert!(!builder.drv_where_the_hook_looks(&remote));
    assert_sees_nothing(remote.report(), "probe-tagged");
    let line = assert_drv_missing_on_builder(&remote, "missing_drv = \"skip\"");
    assert!(line.starts_with("cuda-sandbox-hook: warning:"), "{line}");
    assert!(line.contains("set missing_drv = \"expose\""), "{line}");
}

#[test]
fn remote_build_missing_drv_fail_fails_with_the_hooks_reason() {
    if !remote_available("remote_build_missing_drv_fail_fails_with_the_hooks_reason") {
        return;
    }
    let builder = Builder::start("fail", Stores::Separate);
    let remote = builder.build("tagged", "cuda");
    assert!(!builder.drv_where_the_hook_looks(&remote));
    assert!(!remote.ok, "the build succeeded:\n{remote:#?}");
    assert!(remote.report.is_none());
    // The client learns that the hook failed on the builder ...
    assert!(
        remote.client_log.contains("on 'ssh-ng://root@127.0.0.1")
            && remote
                .client_log
                .contains(&nix_version().program_failed(HOOK, 1)),
        "{remote:#?}"
    );
    // ... and the builder's log has the hook's one-line reason.
    let line = assert_drv_missing_on_builder(&remote, "missing_drv = \"fail\"");
    assert!(line.starts_with("cuda-sandbox-hook: error:"), "{line}");
}

#[test]
fn remote_build_with_the_drv_on_the_builder_follows_its_tags() {
    if !remote_available("remote_build_with_the_drv_on_the_builder_follows_its_tags") {
        return;
    }
    // The client wrote the .drv to /nix/store, where the builder's hook looks for it (the
    // builder's own store is a chroot store), so `missing_drv` (here "fail") never applies and
    // the derivation's tags decide.
    let builder = Builder::start("fail", Stores::DrvVisible);
    let remote = builder.build("tagged", "cuda");
    assert!(builder.drv_where_the_hook_looks(&remote));
    assert_sees_gpu(remote.report(), "probe-tagged");
    let remote = builder.build("untagged", "-");
    assert!(builder.drv_where_the_hook_looks(&remote));
    assert_sees_nothing(remote.report(), "probe-untagged");
    assert!(remote.hook_lines().is_empty(), "{remote:#?}");
}

/// NixOS/hydra#1565, which the NixOS-CUDA Hydra runs as a patch: the queue runner adds the
/// `.drv` to the paths it copies to the builder before the build, so the builder's hook finds
/// it on disk and reads its tags. `missing_drv` is never consulted: "fail" would fail both.
/// The hook's standard input there is the daemon's, the connection to the client: never read.
#[test]
fn remote_build_with_the_drv_copied_to_the_builder_as_hydra_1565_does_follows_its_tags() {
    if !remote_available(
        "remote_build_with_the_drv_copied_to_the_builder_as_hydra_1565_does_follows_its_tags",
    ) {
        return;
    }
    let builder = Builder::start_with("fail", Stores::Separate, HookAs::ShowingStdin);
    for (attr, mandatory) in [("tagged", "cuda"), ("untagged", "-")] {
        let nonce = nonce();
        let drv = builder.instantiate(attr, &nonce);
        assert!(
            !drv.is_file(),
            "{} is on the builder already",
            drv.display()
        );
        builder.copy_to_builder(&drv);
        assert!(
            drv.is_file(),
            "{} was not copied to the builder",
            drv.display()
        );
        let remote = builder.build_with_nonce(attr, mandatory, &nonce);
        assert_eq!(remote.drv(), drv);
        let name = format!("probe-{attr}");
        if attr == "tagged" {
            assert_sees_gpu(remote.report(), &name);
        } else {
            assert_sees_nothing(remote.report(), &name);
        }
        assert!(remote.hook_lines().is_empty(), "{remote:#?}");
        let stdin = remote
            .builder_log
            .lines()
            .find(|l| l.starts_with("hook-stdin: "))
            .unwrap_or_else(|| panic!("the hook did not run:\n{remote:#?}"));
        let (hook, daemon) = stdin
            .trim_start_matches("hook-stdin: ")
            .split_once(" daemon-stdin: ")
            .unwrap();
        eprintln!("{name} on the builder: {stdin}");
        assert!(
            hook == daemon && (hook.starts_with("socket:") || hook.starts_with("pipe:")),
            "the hook's stdin is not the daemon's connection: {stdin}"
        );
    }
}

/// A build's `cuda-sm-*` features reach the builder's hook only with the derivation, as
/// NixOS/hydra#1565 copies the `.drv`: a build requiring `cuda-sm-90a` is then leased the 9.0,
/// though the 8.9 is less used.
#[test]
fn remote_build_with_its_derivation_is_leased_the_gpu_its_cuda_sm_features_need() {
    if !remote_available(
        "remote_build_with_its_derivation_is_leased_the_gpu_its_cuda_sm_features_need",
    ) {
        return;
    }
    let mandatory = "cuda";
    let builder = Builder::start_on("fail", Stores::Separate, HookAs::Itself, Gpus::Mixed);
    let nonce = nonce();
    let drv = builder.instantiate("sm90a", &nonce);
    builder.copy_to_builder(&drv);
    let remote = builder.build_with_nonce("sm90a", mandatory, &nonce);
    assert_eq!(remote.drv(), drv);
    assert_eq!(leased_gpu(remote.report()), "nvidia1", "{remote:#?}");
}

/// Without the derivation the builder's hook cannot know a build's `cuda-sm-*` features:
/// under `missing_drv = "expose"` it is leased the least used GPU, the 8.9, and the hook
/// says its features select nothing (docs/data-centre.md, "Remote builds").
#[test]
fn remote_build_without_its_derivation_cannot_be_held_to_its_cuda_sm_features() {
    if !remote_available(
        "remote_build_without_its_derivation_cannot_be_held_to_its_cuda_sm_features",
    ) {
        return;
    }
    let builder = Builder::start_on("expose", Stores::Separate, HookAs::Itself, Gpus::Mixed);
    let remote = builder.build("sm90a", "cuda");
    assert!(!builder.drv_where_the_hook_looks(&remote));
    assert_eq!(leased_gpu(remote.report()), "nvidia0", "{remote:#?}");
    assert!(
        remote
            .hook_lines()
            .iter()
            .any(|l| l.contains("cuda-sm-* features cannot be known, so they select no GPU")),
        "{remote:#?}"
    );
}
