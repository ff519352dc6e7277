//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn hook_and_explain_agree_on_every_scenario() {
    let s = Scenario::new();
    let config = s.config("", "");
    let tagged = s.drv(
        "tagged",
        r#",("requiredSystemFeatures","big-parallel cuda")"#,
    );
    let out = agree("tagged", &s, &tagged, &config, None);
    assert!(String::from_utf8_lossy(&out.stdout).contains("/dev/nvidia0="));
    let structured = s.drv(
        "structured",
        r#",("__json","{\"requiredSystemFeatures\":[\"cuda\"]}")"#,
    );
    agree("structured attrs", &s, &structured, &config, None);
    let out = agree(
        "untagged",
        &s,
        &s.drv("kvm", r#",("requiredSystemFeatures","kvm")"#),
        &config,
        None,
    );
    assert!(out.stdout.is_empty());
    agree("no features", &s, &s.drv("plain", ""), &config, None);
    let out = agree(
        "malformed, may be tagged",
        &s,
        &{
            let p = s.path("bad.drv");
            std::fs::write(&p, "Derive([cuda").unwrap();
            p
        },
        &config,
        None,
    );
    assert!(!out.status.success());
    agree(
        "malformed, untagged",
        &s,
        &{
            let p = s.path("bad2.drv");
            std::fs::write(&p, "Derive([kvm").unwrap();
            p
        },
        &config,
        None,
    );

    // A required device missing: both refuse, for the same reason.
    let missing = s.config(
        "",
        "[[rule.device]]\nglob = \"/dev/nvidia-uvm\"\nrequired = true\n",
    );
    let out = agree("missing device", &s, &tagged, &missing, None);
    assert!(!out.status.success());

    // Remote builders: the .drv is not on disk.
    let absent = s.path("absent.drv");
    for policy in ["skip", "expose", "fail"] {
        let c = s.config(&format!("missing_drv = \"{policy}\"\n"), "");
        let out = agree(&format!("missing_drv = {policy}"), &s, &absent, &c, None);
        assert_eq!(out.status.success(), policy != "fail", "{policy}");
    }
    let c = s.config("missing_drv = \"fail\"\n", "");
    let v4 = r#"{"env":{"requiredSystemFeatures":"cuda"}}"#;
    let out = agree("NIX_DERIVATION_V4 tagged", &s, &absent, &c, Some(v4));
    assert!(String::from_utf8_lossy(&out.stdout).contains("/dev/nvidiactl="));
    agree(
        "NIX_DERIVATION_V4 untagged",
        &s,
        &absent,
        &c,
        Some(r#"{"env":{}}"#),
    );
    agree("NIX_DERIVATION_V4 broken", &s, &absent, &c, Some("{cuda"));

    // A broken configuration fails tagged builds only, in both.
    let broken = s.path("broken.toml");
    std::fs::write(&broken, "[[rule]\n").unwrap();
    let out = agree("broken config, tagged", &s, &tagged, &broken, None);
    assert!(!out.status.success());
    agree(
        "broken config, untagged",
        &s,
        &s.drv("kvm2", r#",("requiredSystemFeatures","kvm")"#),
        &broken,
        None,
    );

    // GPU leases: explain shows the GPU the hook then leases.
    let leasing = s.config("gpus_per_build = 1\n", "");
    let out = agree("gpu lease", &s, &tagged, &leasing, None);
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(
        answer.contains("/dev/nvidia0=") && !answer.contains("/dev/nvidia1="),
        "{answer}"
    );
    let asks = s.drv(
        "asks",
        r#",("cudaSandboxGpus","3"),("requiredSystemFeatures","cuda")"#,
    );
    let out = agree("too many GPUs asked", &s, &asks, &leasing, None);
    assert!(!out.status.success());
}
