//! The pure tier of these tests (docs/testing.md).

use super::*;

#[test]
fn structured_attrs_with_long_escape_free_runs_parse_in_linear_time() {
    // 2^22 small array values, and one 8 MiB string without an escape: no `\` for 8 MiB.
    for (name, drv) in [
        (
            "array of small values",
            structured_drv("[", "0,", "0]", "cuda"),
        ),
        (
            "escape-free string",
            structured_drv(r#"\""#, "abcdefgh", r#"\""#, "cuda"),
        ),
    ] {
        let DrvAttrs {
            features,
            gpus,
            unsandboxed,
        } = timed(name, || DrvEnv::parse(&drv).unwrap().attrs().unwrap());
        assert_eq!(lossy(&features.features), ["cuda"], "{name}");
        assert!(features.structured);
        assert_eq!(gpus.as_deref(), Some("2"), "{name}");
        assert_eq!(unsandboxed, None, "{name}");
    }
}

#[test]
fn json_derivations_parse_in_linear_time() {
    for (name, json) in [
        (
            "env value",
            big(
                r#"{"env":{"big":""#,
                "abcdefgh",
                r#"","requiredSystemFeatures":"cuda"}}"#,
            ),
        ),
        (
            "array",
            big(
                r#"{"/nix/store/x.drv":{"args":["#,
                "0,",
                r#"0],"env":{"requiredSystemFeatures":"kvm cuda","cudaSandboxGpus":"1"}}}"#,
            ),
        ),
        (
            "__json in env",
            big(
                r#"{"env":{"__json":"{\"big\":["#,
                "0,",
                r#"0],\"requiredSystemFeatures\":[\"cuda\"]}"}}"#,
            ),
        ),
    ] {
        let attrs = timed(name, || json_attrs(&json).unwrap());
        assert!(
            attrs.features.contains(b"cuda"),
            "{name}: {:?}",
            lossy(&attrs.features.features)
        );
    }
}

/// A key repeated a million times, in each form: found in one pass, kept once (the readers
/// hold the deciding keys' first values only), and refused.
#[test]
fn repeated_keys_are_refused_in_linear_time() {
    let aterm = |unit: &str| {
        big(
            r#"Derive([("out","/nix/store/x-big","","")],[],[],"x86_64-linux","/bin/sh",[],["#,
            unit,
            r#"("out","/nix/store/x-big")])"#,
        )
    };
    for (name, drv) in [
        ("env key", aterm(r#"("requiredSystemFeatures","cuda"),"#)),
        (
            "escaped env key",
            aterm(r#"("re\quiredSystemFeatures","cuda"),"#),
        ),
        ("other env key", aterm(r#"("x","cuda"),"#)),
        (
            "__json member",
            structured_drv(
                r#"0,\"cudaSandboxGpus\":"#,
                r#"1,\"cudaSandboxGpus\":"#,
                "1",
                "cuda",
            ),
        ),
    ] {
        let result = timed(name, || DrvEnv::parse(&drv).unwrap().attrs());
        match name {
            "other env key" => assert!(result.unwrap().features.features.is_empty()),
            _ => assert!(
                matches!(result, Err(DrvError::Repeated { .. })),
                "{name}: {result:?}"
            ),
        }
    }
    for (name, json) in [
        (
            "env member",
            big(
                r#"{"env":{"#,
                r#""requiredSystemFeatures":"cuda","#,
                r#""x":""}}"#,
            ),
        ),
        (
            "structuredAttrs member",
            big(
                r#"{"structuredAttrs":{"#,
                r#""cudaSandboxGpus":1,"#,
                r#""requiredSystemFeatures":["cuda"]}}"#,
            ),
        ),
        (
            ".drv path",
            big(
                r#"{"#,
                r#""/nix/store/a.drv":{"env":{"x":""}},"#,
                r#""/nix/store/a.drv":{"env":{"requiredSystemFeatures":"cuda"}}}"#,
            ),
        ),
    ] {
        let result = timed(name, || json_attrs(&json));
        match name {
            ".drv path" => assert_eq!(lossy(&result.unwrap().features.features), ["cuda"]),
            _ => assert!(
                matches!(result, Err(DrvError::Repeated { .. })),
                "{name}: {result:?}"
            ),
        }
    }
}

#[test]
fn the_forms_nix_reads_but_never_writes_parse_in_linear_time() {
    // 8 MiB of env entries without commas, of args with leading commas, and of input
    // derivation outputs nested (DrvWithVersion) about a million levels deep.
    let features = r#"("requiredSystemFeatures","cuda")])"#;
    let no_commas = big(
        r#"Derive([],[],[],"x","/bin/sh",[],["#,
        r#"("a","b")"#,
        features,
    );
    let leading = big(
        r#"Derive([],[],[],"x","/bin/sh",["#,
        r#","a""#,
        &format!("],[{features}"),
    );
    let levels = SIZE / 20;
    let nested = [
        br#"DrvWithVersion("xp-dyn-drv",[],[("/nix/store/d.drv","#.to_vec(),
        br#"([],[("o","#.repeat(levels),
        b"[]".to_vec(),
        b")])".repeat(levels),
        format!(r#")],[],"x","/bin/sh",[],[{features}"#).into_bytes(),
    ]
    .concat();
    for (name, drv) in [
        ("env without commas", no_commas),
        ("args with leading commas", leading),
        ("nested input outputs", nested),
    ] {
        let DrvAttrs { features, .. } =
            timed(name, || DrvEnv::parse(&drv).unwrap().attrs().unwrap());
        assert_eq!(lossy(&features.features), ["cuda"], "{name}");
    }
}
