//! The root tier of these tests (docs/testing.md).

use super::*;

#[test]
fn configs_others_can_write_are_refused_for_tagged_builds_only() {
    if !cuda_sandbox_testkit::root_available(
        "configs_others_can_write_are_refused_for_tagged_builds_only",
    ) {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let c = Case::new();
    let config = c.config(A_DEVICE);
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = c.hook(&c.drv("t", Some("cuda")), &config);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("writable by group or others") && stderr(&out).contains("chmod go-w"),
        "{}",
        stderr(&out)
    );
    let out = c.hook(&c.drv("u", Some("kvm")), &config);
    assert!(out.status.success() && out.stdout.is_empty());

    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::chown(&config, Some(65534), None).unwrap();
    let out = c.hook(&c.drv("t", Some("cuda")), &config);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("owned by uid 65534"),
        "{}",
        stderr(&out)
    );
    std::os::unix::fs::chown(&config, Some(0), None).unwrap();
    let out = c.hook(&c.drv("t", Some("cuda")), &config);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A store file inside a Nix build is owned by an unmapped uid (65534): `check-config
/// --content-only` validates what it says, plain `check-config` (like the hook) still refuses it.
#[test]
fn check_config_content_only_ignores_ownership_the_hook_does_not() {
    if !cuda_sandbox_testkit::root_available(
        "check_config_content_only_ignores_ownership_the_hook_does_not",
    ) {
        return;
    }
    let check = |config: &Path, content_only: bool| {
        let mut cmd = Command::new(HOOK);
        cmd.args(["check-config", "--config"]).arg(config);
        if content_only {
            cmd.arg("--content-only");
        }
        cmd.output().unwrap()
    };
    let c = Case::new();
    let config = c.config(A_DEVICE);
    std::os::unix::fs::chown(&config, Some(65534), Some(65534)).unwrap();

    let full = check(&config, false);
    assert_eq!(full.status.code(), Some(2));
    assert!(
        stderr(&full).contains("owned by uid 65534"),
        "{}",
        stderr(&full)
    );
    let content = check(&config, true);
    assert!(content.status.success(), "{}", stderr(&content));
    assert!(
        String::from_utf8_lossy(&content.stdout).contains("ok, 1 rule(s) (content only"),
        "{:?}",
        content
    );
    let tagged = c.hook(&c.drv("t", Some("cuda")), &config);
    assert_eq!(
        tagged.status.code(),
        Some(1),
        "the hook must keep the check"
    );

    // Content errors are still errors.
    std::fs::write(&config, "[[rule]]\nname = \"x\"\nfeatures = []\n").unwrap();
    let broken = check(&config, true);
    assert_eq!(broken.status.code(), Some(2));
    assert!(
        stderr(&broken).contains("no features"),
        "{}",
        stderr(&broken)
    );
}
