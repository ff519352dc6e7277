//! The nix_versions tier of these tests (docs/testing.md).

use super::*;

#[test]
fn a_nix_2_34_client_builds_on_a_nix_2_8_builder_over_ssh_ng_and_gets_the_output_back() {
    // Across versions: the client inside the 2.34 root (scripts/with-nix), the builder the
    // host's 2.8 daemon. A 2.8 daemon does not say whether it trusts the client (its protocol,
    // 1.34, is older than the 1.35 that does), so the 2.34 client sends a BasicDerivation
    // (build-remote.cc: trusted or unknown -> buildDerivation) and the .drv is not on the
    // builder when its hook runs: missing_drv decides.
    let test = "a_nix_2_34_client_builds_on_a_nix_2_8_builder_over_ssh_ng_and_gets_the_output_back";
    if !remote_available(test) {
        return;
    }
    if !nix_version().is("2.8") {
        eprintln!("note: {test} runs with the host's Nix 2.8 as the builder");
        return;
    }
    let root = Path::new(&std::env::var("HOME").unwrap()).join(".cache/cuda-sandbox/nix-2.34/root");
    if !root.join("usr/bin/nix-build").exists() {
        let why = "no Nix 2.34 root (run scripts/nix-versions 2.34 as root)";
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: {why}"
        );
        eprintln!("SKIPPED {test}: {why}");
        return;
    }
    let with_nix = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/with-nix");
    let client = run_ok(Command::new(&with_nix).args(["2.34", "nix-build", "--version"]));
    let client = String::from_utf8_lossy(&client.stdout).into_owned();
    assert!(
        NixVersion::parse(client.lines().next().unwrap_or("")).is_some_and(|v| v.is("2.34")),
        "the client is {client}"
    );
    let mut builder = Builder::start("expose", Stores::Separate);
    builder.client_nix = Some("2.34");
    let remote = builder.build("tagged", "cuda");
    assert!(!builder.drv_where_the_hook_looks(&remote));
    assert_sees_gpu(remote.report(), "probe-tagged");
    assert!(
        remote
            .hook_lines()
            .iter()
            .any(|l| l.contains("-probe-tagged.drv is not on disk")),
        "{remote:#?}"
    );
    let remote = builder.build("untagged", "-");
    assert_sees_gpu(remote.report(), "probe-untagged");
}
