//! The sandbox tier of these tests (docs/testing.md).

use super::*;

#[test]
fn a_check_requiring_cuda_sm_90a_is_built_only_on_the_builder_advertising_it() {
    if !remote_available(
        "a_check_requiring_cuda_sm_90a_is_built_only_on_the_builder_advertising_it",
    ) {
        return;
    }
    // Both orders of the machines file, so that the first listed is not simply taken.
    for machines in [[&ADA, &HOPPER], [&HOPPER, &ADA]] {
        let fleet = Fleet::start(&machines);
        for _ in 0..2 {
            let build = fleet.build("cuda cuda-sm-90a");
            let message = build.passed_with();
            let on = format!("' on '{}'", fleet.uri(&HOPPER));
            assert!(
                build.client_log.contains(&on),
                "not built on the hopper builder:\n{build:#?}"
            );
            assert_eq!(build.builders_that_ran(), ["hopper"], "{build:#?}");
            assert!(
                message.starts_with(
                    "cuda-sm-90a met by the GPUs this process can use (GPU 0: 9.0); note: the \
                     hook's manifest lacks cuda-sm-90a"
                ),
                "{message}"
            );
        }
        // A check the 8.9 builder can take too is not refused: it goes to one of them.
        let build = fleet.build("cuda cuda-sm-89");
        assert!(
            build.passed_with().starts_with("cuda-sm-89 met"),
            "{build:#?}"
        );
        assert_eq!(build.builders_that_ran().len(), 1, "{build:#?}");
    }
}

/// Nix trusts the advertisement: a builder saying `cuda-sm-90a` over an 8.9 gets the build, and
/// `devices::features` fails it there, in the build log the client shows.
#[test]
fn a_builder_advertising_cuda_sm_90a_over_an_8_9_fails_the_check_there() {
    if !remote_available("a_builder_advertising_cuda_sm_90a_over_an_8_9_fails_the_check_there") {
        return;
    }
    let fleet = Fleet::start(&[&AMPERE, &LIAR]);
    let build = fleet.build("cuda cuda-sm-90a");
    assert!(!build.ok, "built:\n{build:#?}");
    assert_eq!(build.builders_that_ran(), ["liar"], "{build:#?}");
    for needle in [
        "devices::features",
        "cuda-sm-90a not met by the GPUs this process can use (GPU 0: 8.9)",
    ] {
        assert!(
            build.client_log.contains(needle),
            "{needle:?} not in the client's log:\n{build:#?}"
        );
    }
}

#[test]
fn with_no_builder_advertising_cuda_sm_90a_nix_refuses_the_check() {
    if !remote_available("with_no_builder_advertising_cuda_sm_90a_nix_refuses_the_check") {
        return;
    }
    let version = NixVersion::current().expect("nix-build --version");
    let fleet = Fleet::start(&[&AMPERE, &ADA]);
    let build = fleet.build("cuda cuda-sm-90a");
    assert!(!build.ok, "built:\n{build:#?}");
    assert!(build.builders_that_ran().is_empty(), "{build:#?}");
    eprintln!("Nix {version} refuses it with:\n{}", build.client_log);
    let system = format!("{}-linux", std::env::consts::ARCH);
    for line in version.no_machine_for_features(&system, &["cuda", "cuda-sm-90a"]) {
        assert!(
            build.client_log.contains(&line),
            "Nix {version}'s refusal lacks {line:?}:\n{}",
            build.client_log
        );
    }
    // The machines Nix considered, as it lists them: neither has cuda-sm-90a.
    assert!(
        build.client_log.contains("2 available machines:"),
        "{}",
        build.client_log
    );
}
