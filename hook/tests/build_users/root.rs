//! The root tier of these tests (docs/testing.md).

use super::*;

#[test]
fn a_node_the_build_users_group_cannot_open_is_named_with_the_fix() {
    if !root_available("a_node_the_build_users_group_cannot_open_is_named_with_the_fix") {
        return;
    }
    let host = Host::new("build-users-group = nixbld\n");
    let (e, text) = host.explain();
    assert_eq!(unopenable(&e), ["/dev/nvidia0"], "{e:#}");
    assert_eq!(e["build_users"]["builders"]["kind"], "users");
    let w = warnings(&text);
    assert_eq!(w.len(), 1, "{text}");
    for needle in [
        "nixbld1 cannot open /dev/nvidia0",
        "mode 0660",
        "group csbxvideo",
        "add the build users to group 'csbxvideo'",
        "udev",
    ] {
        assert!(w[0].contains(needle), "{needle:?} missing from {}", w[0]);
    }
    // explain warns; the build itself is not refused for it.
    assert!(text.contains("verdict:     tagged"), "{text}");

    // The first fix: the build user joins the node's group.
    host.account("usermod", &["-a", "-G", "csbxvideo", "nixbld1"]);
    let (e, text) = host.explain();
    assert!(unopenable(&e).is_empty(), "{e:#}");
    assert!(warnings(&text).is_empty(), "{text}");
}

#[test]
fn auto_allocated_uids_need_the_other_bits() {
    if !root_available("auto_allocated_uids_need_the_other_bits") {
        return;
    }
    let host = Host::new(
        "build-users-group = nixbld\nexperimental-features = auto-allocate-uids\n\
         auto-allocate-uids = true\n",
    );
    // Group membership cannot help an auto-allocated uid.
    host.account("usermod", &["-a", "-G", "csbxvideo", "nixbld1"]);
    let (e, text) = host.explain();
    assert_eq!(unopenable(&e), ["/dev/nvidia0"], "{e:#}");
    assert_eq!(e["build_users"]["builders"]["start_id"], 872_415_232);
    let w = warnings(&text);
    assert_eq!(w.len(), 1, "{text}");
    assert!(w[0].contains("auto-allocated build uids"), "{}", w[0]);
    assert!(w[0].contains("MODE=\"0666\""), "{}", w[0]);
    assert!(!w[0].contains("add the build users"), "{}", w[0]);
    assert!(text.contains("a uid-range build is root inside"), "{text}");

    let mode = std::fs::Permissions::from_mode(0o666);
    std::fs::set_permissions(host.root().join("dev/nvidia0"), mode).unwrap();
    let (e, _) = host.explain();
    assert!(unopenable(&e).is_empty(), "{e:#}");
}

#[test]
fn without_build_users_nothing_is_judged_and_a_missing_group_is_said() {
    if !root_available("without_build_users_nothing_is_judged_and_a_missing_group_is_said") {
        return;
    }
    let host = Host::new("build-users-group =\n");
    let (e, _) = host.explain();
    assert!(unopenable(&e).is_empty(), "{e:#}");
    assert_eq!(e["build_users"]["builders"]["kind"], "nix-user");

    std::fs::write(
        host.root().join("etc/nix/nix.conf"),
        "build-users-group = nosuchgroup\n",
    )
    .unwrap();
    let (_, text) = host.explain();
    let w = warnings(&text);
    assert!(
        w.iter()
            .any(|l| l.contains("nosuchgroup") && l.contains("not in /etc/group")),
        "{text}"
    );
}
