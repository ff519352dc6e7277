//! The readers of `super`, on hand-made derivations: the grammar and its errors, each form's
//! attributes, repeats, and the hook's reader against the oracle.

use super::*;
use cuda_sandbox_testkit::lossy;

/// What the hook decides on of a derivation given as JSON.
fn json_attrs(json: &[u8]) -> Result<DrvAttrs<'static>, DrvError> {
    JsonDerivation::parse(json)?.attrs()
}

/// The features of a derivation given as JSON.
fn features_from_json(json: &[u8]) -> Result<RequiredFeatures<'static>, DrvError> {
    json_attrs(json).map(|a| a.features)
}

/// The GPU count of a derivation given as JSON, `None` when unset or unreadable.
fn gpus_attr_from_json(json: &[u8]) -> Option<String> {
    json_attrs(json).ok()?.gpus
}

const SIMPLE: &[u8] = br#"Derive([("out","/nix/store/abc-x","","")],[("/nix/store/def-y.drv",["dev","out"])],["/nix/store/ghi-src"],"x86_64-linux","/bin/sh",["-c","echo \"hi\"\n"],[("out","/nix/store/abc-x"),("requiredSystemFeatures","cuda  big-parallel\t")])"#;

#[test]
fn parses_every_field() {
    let drv = Derivation::parse(SIMPLE).unwrap();
    assert_eq!(drv.outputs.len(), 1);
    assert_eq!(drv.outputs[0].name.as_ref(), b"out");
    assert_eq!(drv.input_drvs[0].outputs.len(), 2);
    assert_eq!(drv.input_srcs[0].as_ref(), b"/nix/store/ghi-src");
    assert_eq!(drv.system.as_ref(), b"x86_64-linux");
    assert_eq!(drv.args[1].as_ref(), b"echo \"hi\"\n");
    assert!(matches!(drv.args[0], Cow::Borrowed(_)));
    assert!(matches!(drv.args[1], Cow::Owned(_)));
}

#[test]
fn plain_features_split_on_nix_whitespace() {
    let drv = Derivation::parse(SIMPLE).unwrap();
    let f = drv.attrs().map(|a| a.features).unwrap();
    assert!(!f.structured);
    assert_eq!(lossy(&f.features), vec!["cuda", "big-parallel"]);
    assert!(f.contains(b"cuda"));
    assert!(!f.contains(b"gpu"));
}

#[test]
fn structured_features_come_from_json() {
    let text = br#"Derive([],[],[],"s","b",[],[("__json","{\"requiredSystemFeatures\":[\"cuda\",\"kvm\"],\"x\":{\"y\":[1,2]}}"),("requiredSystemFeatures","ignored")])"#;
    let drv = Derivation::parse(text).unwrap();
    let f = drv.attrs().map(|a| a.features).unwrap();
    assert!(f.structured);
    assert_eq!(lossy(&f.features), vec!["cuda", "kvm"]);
}

#[test]
fn structured_features_must_be_strings() {
    let text = br#"Derive([],[],[],"s","b",[],[("__json","{\"requiredSystemFeatures\":[1]}")])"#;
    let drv = Derivation::parse(text).unwrap();
    assert!(drv.attrs().map(|a| a.features).is_err());
}

#[test]
fn structured_features_null_is_an_error_like_in_nix() {
    // Nix 2.8: "attribute 'requiredSystemFeatures' of derivation … must be a list of strings".
    let text = br#"Derive([],[],[],"s","b",[],[("__json","{\"requiredSystemFeatures\":null}")])"#;
    let drv = Derivation::parse(text).unwrap();
    assert!(drv.attrs().map(|a| a.features).is_err());
    let text = br#"Derive([],[],[],"s","b",[],[("__json","{\"other\":null}")])"#;
    let drv = Derivation::parse(text).unwrap();
    assert!(drv.attrs().map(|a| a.features).unwrap().features.is_empty());
}

#[test]
fn json_derivations_give_the_same_features() {
    let plain = br#"{"/nix/store/x.drv":{"env":{"requiredSystemFeatures":" cuda\tkvm "}}}"#;
    assert_eq!(
        lossy(&features_from_json(plain).unwrap().features),
        ["cuda", "kvm"]
    );
    let bare = br#"{"env":{"out":"/x"}}"#;
    assert!(features_from_json(bare).unwrap().features.is_empty());
    let v4 = br#"{"env":{},"structuredAttrs":{"requiredSystemFeatures":["gpu"]}}"#;
    let f = features_from_json(v4).unwrap();
    assert!(f.structured);
    assert_eq!(lossy(&f.features), ["gpu"]);
    let json_env = br#"{"env":{"__json":"{\"requiredSystemFeatures\":[\"cuda\"]}"}}"#;
    assert_eq!(
        lossy(&features_from_json(json_env).unwrap().features),
        ["cuda"]
    );
    for bad in [
        &b"[]"[..],
        b"{",
        b"{\"a\":1,\"b\":2}",
        br#"{"env":{"requiredSystemFeatures":3}}"#,
    ] {
        assert!(
            features_from_json(bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn json_derivations_in_every_shape_are_read_with_typed_structs() {
    // The record NixOS/nix#16413 proposes for hooks (the derivation as `derivation`, beside
    // `outputs`) is no derivation JSON any released Nix passes: refused, as any two objects.
    let hook_input = br#"{"derivation":{"env":{"requiredSystemFeatures":"cuda"}},"outputs":{"out":"/nix/store/x"}}"#;
    assert!(JsonDerivation::parse(hook_input).is_err());
    // `structuredAttrs: null` means none: the env is read.
    let null_attrs = br#"{"env":{"requiredSystemFeatures":"kvm"},"structuredAttrs":null}"#;
    let f = features_from_json(null_attrs).unwrap();
    assert!(!f.structured);
    assert_eq!(lossy(&f.features), ["kvm"]);
    // As in Nix, a `null` list of features is an error, not an empty list.
    let null_list = br#"{"structuredAttrs":{"requiredSystemFeatures":null}}"#;
    assert!(features_from_json(null_list).is_err());
    // A hostile GPU count is shown, never built: a list as `[…]`, numbers as JSON writes them.
    let listed = br#"{"structuredAttrs":{"cudaSandboxGpus":[1,[2,{"a":3}]]}}"#;
    assert_eq!(gpus_attr_from_json(listed).as_deref(), Some("[…]"));
    for (value, text) in [
        ("3", "3"),
        ("3.0", "3.0"),
        ("null", "null"),
        ("true", "true"),
    ] {
        let json = format!(r#"{{"structuredAttrs":{{"cudaSandboxGpus":{value}}}}}"#);
        assert_eq!(gpus_attr_from_json(json.as_bytes()).as_deref(), Some(text));
    }
    // Not one derivation: an error naming the shape.
    let two = br#"{"/nix/store/a.drv":{"env":{}},"/nix/store/b.drv":{"env":{}}}"#;
    assert!(features_from_json(two)
        .unwrap_err()
        .to_string()
        .contains("single"));
    assert!(features_from_json(br#"{"/nix/store/a.drv":3}"#)
        .unwrap_err()
        .to_string()
        .contains("no derivation object"));
}

/// An ATerm `.drv` with the env entries `env`.
fn with_env(env: &str) -> Vec<u8> {
    format!(r#"Derive([("out","/nix/store/a-x","","")],[],[],"x86_64-linux","/bin/sh",[],[{env}])"#)
        .into_bytes()
}

#[test]
fn a_repeated_deciding_key_is_refused_in_every_form() {
    use DecidingKey::*;
    let repeated = |key, within| Err(DrvError::Repeated { key, within });
    for (env, key, within) in [
        (
            r#"("requiredSystemFeatures","cuda"),("requiredSystemFeatures","")"#,
            Features,
            Within::Env,
        ),
        (
            r#"("re\quiredSystemFeatures","cuda"),("requiredSystemFeatures","")"#,
            Features,
            Within::Env,
        ),
        (
            r#"("__json","{}"),("__json","{}")"#,
            StructuredAttrs,
            Within::Env,
        ),
        (
            r#"("cudaSandboxGpus","1"),("requiredSystemFeatures","cuda"),("cudaSandboxGpus","2")"#,
            Gpus,
            Within::Env,
        ),
        // With structured attrs, the env's features are not read, but still refused.
        (
            r#"("__json","{}"),("requiredSystemFeatures",""),("requiredSystemFeatures","")"#,
            Features,
            Within::Env,
        ),
        (
            r#"("__json","{\"requiredSystemFeatures\":[\"cuda\"],\"requiredSystemFeatures\":[]}")"#,
            Features,
            Within::StructuredAttrs,
        ),
        (
            r#"("__json","{\"requiredSystemFeatures\":[],\"required\\u0053ystemFeatures\":[\"cuda\"]}")"#,
            Features,
            Within::StructuredAttrs,
        ),
        (
            r#"("__json","{\"cudaSandboxGpus\":1,\"cudaSandboxGpus\":[2]}")"#,
            Gpus,
            Within::StructuredAttrs,
        ),
    ] {
        let drv = with_env(env);
        let full = Derivation::parse(&drv).unwrap();
        assert_eq!(full.attrs(), repeated(key, within), "{env}");
        let lean = DrvEnv::parse(&drv).unwrap();
        assert_eq!(lean.attrs(), repeated(key, within), "{env}");
        assert_eq!(lean.attrs().ok().and_then(|a| a.gpus), None, "{env}");
    }
    for (json, key, within) in [
        (
            r#"{"env":{"requiredSystemFeatures":"cuda","requiredSystemFeatures":""}}"#,
            Features,
            Within::Env,
        ),
        (
            r#"{"env":{"__json":"{}","__json":"{}"}}"#,
            StructuredAttrs,
            Within::Env,
        ),
        (
            r#"{"env":{"cudaSandboxGpus":"1","cudaSandboxGpus":"1"},"structuredAttrs":{}}"#,
            Gpus,
            Within::Env,
        ),
        (
            r#"{"env":{"__json":"{\"requiredSystemFeatures\":[],\"requiredSystemFeatures\":[]}"}}"#,
            Features,
            Within::StructuredAttrs,
        ),
        (
            r#"{"structuredAttrs":{"cudaSandboxGpus":1,"requiredSystemFeatures":[],"cudaSandboxGpus":1}}"#,
            Gpus,
            Within::StructuredAttrs,
        ),
        (
            r#"{"derivation":{"structuredAttrs":{"requiredSystemFeatures":[],"requiredSystemFeature\u0073":[]}}}"#,
            Features,
            Within::StructuredAttrs,
        ),
    ] {
        let d = JsonDerivation::parse(json.as_bytes()).unwrap();
        assert_eq!(d.attrs(), repeated(key, within), "{json}");
        let e = features_from_json(json.as_bytes()).unwrap_err();
        assert_eq!(e.to_string().lines().count(), 1);
        assert!(
            e.to_string()
                .contains(&format!("\"{}\" is set more than once", key.name())),
            "{e}"
        );
    }
}

#[test]
fn every_other_repeat_counts_as_its_last() {
    let drv = with_env(
        r#"("out","/a"),("out","/nix/store/a-x"),("requiredSystemFeatures","kvm"),("x","1"),("x","2")"#,
    );
    let full = Derivation::parse(&drv).unwrap();
    assert_eq!(full.env_var(b"out"), Some(&b"/nix/store/a-x"[..]));
    assert_eq!(full.env_var(b"x"), Some(&b"2"[..]));
    assert_eq!(full.env.len(), 5, "the oracle keeps every entry");
    assert_eq!(
        lossy(&full.attrs().map(|a| a.features).unwrap().features),
        ["kvm"]
    );
    let features = DrvEnv::parse(&drv).unwrap().attrs().unwrap().features;
    assert_eq!(lossy(&features.features), ["kvm"]);
    // Inside `__json`, a member the hook does not read.
    let drv = with_env(
        r#"("__json","{\"x\":1,\"x\":{\"requiredSystemFeatures\":[]},\"requiredSystemFeatures\":[\"cuda\"]}")"#,
    );
    let features = DrvEnv::parse(&drv).unwrap().attrs().unwrap().features;
    assert_eq!(lossy(&features.features), ["cuda"]);
    // JSON: a repeated `env`, `structuredAttrs`, `derivation` or `.drv` path is its last.
    for (json, features) in [
        (
            r#"{"env":{"requiredSystemFeatures":"cuda"},"env":{"requiredSystemFeatures":"kvm"}}"#,
            vec!["kvm"],
        ),
        (
            r#"{"structuredAttrs":{"requiredSystemFeatures":["cuda"]},"structuredAttrs":null,"env":{}}"#,
            vec![],
        ),
        (
            r#"{"derivation":{"env":{}},"derivation":{"env":{"requiredSystemFeatures":"cuda"}}}"#,
            vec!["cuda"],
        ),
        (
            r#"{"/nix/store/a.drv":{"env":{"requiredSystemFeatures":"cuda"}},"/nix/store/a.drv":{"env":{}}}"#,
            vec![],
        ),
        (
            r#"{"/nix/store/a.drv":3,"/nix/store/a.drv":{"env":{"x":"1","x":"2","requiredSystemFeatures":"gpu"}}}"#,
            vec!["gpu"],
        ),
    ] {
        assert_eq!(
            lossy(&features_from_json(json.as_bytes()).unwrap().features),
            features,
            "{json}"
        );
    }
    let two = br#"{"/nix/store/a.drv":{"env":{}},"/nix/store/b.drv":{"env":{}},"/nix/store/a.drv":{"env":{}}}"#;
    assert!(features_from_json(two)
        .unwrap_err()
        .to_string()
        .contains("single"));
}

#[test]
fn escapes_follow_nix() {
    let text = br#"Derive([],[],[],"a\\b\"c\qd\re","b",[],[])"#;
    let drv = Derivation::parse(text).unwrap();
    assert_eq!(drv.system.as_ref(), b"a\\b\"cqd\re");
}

#[test]
fn non_utf8_bytes_are_kept() {
    let mut text = br#"Derive([],[],[],"caf"#.to_vec();
    text.push(0xe9);
    text.extend_from_slice(br#"","b",[],[])"#);
    let drv = Derivation::parse(&text).unwrap();
    assert_eq!(drv.system.as_ref(), b"caf\xe9");
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    for end in 0..SIMPLE.len() {
        let offset = Derivation::parse(&SIMPLE[..end])
            .unwrap_err()
            .offset()
            .unwrap();
        assert!(offset <= end, "offset {offset} beyond input {end}");
    }
}

#[test]
fn errors_carry_the_offset() {
    let err = Derivation::parse(br#"Derive([],[],[] "s","b",[],[])"#).unwrap_err();
    assert_eq!(err.offset(), Some(15));
    assert!(err.to_string().contains("byte 15"), "{err}");
    let err = Derivation::parse(b"DrvWithVersion(\"xp-dyn-drv\",[])").unwrap_err();
    assert_eq!(err.offset(), Some(30), "{err}");
    let err = Derivation::parse(b"DrvWithVersion(\"v2\",[],[],[],\"\",\"\",[],[])").unwrap_err();
    assert!(
        err.to_string()
            .contains("unknown derivation ATerm format version"),
        "{err}"
    );
}

/// Nix's `endOfList` (2.8, 2.26, 2.34): a comma before an item is optional, may lead, never
/// trails or repeats; bytes after the derivation are ignored; `DrvWithVersion("xp-dyn-drv",…)`
/// (2.26, 2.34) may name outputs of outputs in its input derivations.
#[test]
fn lists_are_read_as_nix_reads_them() {
    let env = |drv: &[u8]| -> Vec<(Vec<u8>, Vec<u8>)> {
        let d = Derivation::parse(drv)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(drv)));
        let lean = DrvEnv::parse(drv).unwrap().attrs().unwrap();
        assert_eq!(lean, d.attrs().unwrap());
        d.env
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect()
    };
    let want = vec![
        (b"a".to_vec(), b"1".to_vec()),
        (b"requiredSystemFeatures".to_vec(), b"cuda".to_vec()),
    ];
    for accepted in [
        &br#"Derive([("out","/o","","")],[("/d.drv",["out""dev"])],["/s"],"x","b",["-c"],[("a","1")("requiredSystemFeatures","cuda")])"#[..],
        br#"Derive([,("out","/o","","")],[],[],"x","b",[,"-c"],[,("a","1"),("requiredSystemFeatures","cuda")])"#,
        br#"Derive([("out","/o","","")],[],[],"x","b",[],[("a","1")("requiredSystemFeatures","cuda")])anything"#,
        br#"DrvWithVersion("xp-dyn-drv",[("out","/o","","")],[("/d.drv",(["out"],[("out",["a"]),("dev",([],[("x",["y"])("z",([],[]))]))]))("/e.drv",["out"])],[],"x","b",[],[("a","1"),("requiredSystemFeatures","cuda")])"#,
    ] {
        assert_eq!(env(accepted), want, "{}", String::from_utf8_lossy(accepted));
    }
    let d = Derivation::parse(br#"DrvWithVersion("xp-dyn-drv",[],[("/d.drv",(["out"],[("out",["a"])]))],[],"x","b",[],[])"#).unwrap();
    assert_eq!(d.input_drvs[0].outputs, [b"out".to_vec()]);
    for refused in [
        &br#"Derive([],[],[],"x","b",[],[("a","1"),])"#[..],
        br#"Derive([],[],[],"x","b",[],[,,("a","1")])"#,
        br#"Derive([],[],[],"x","b",[],[("a","1"),,("b","2")])"#,
        br#"Derive([],[],[],"x","b",[,],[])"#,
        br#"Derive([],[("/d.drv",(["out"],[]))],[],"x","b",[],[])"#,
        br#"DrvWithVersion("xp-dyn-drv",[],[("/d.drv",(["out"],[("out",["a"])))],[],"x","b",[],[])"#,
        br#"DrvWithVersion("xp-dyn-drv",[],[("/d.drv",(["out"],[("out","a")]))],[],"x","b",[],[])"#,
    ] {
        assert!(Derivation::parse(refused).is_err(), "{}", String::from_utf8_lossy(refused));
        assert!(DrvEnv::parse(refused).is_err(), "{}", String::from_utf8_lossy(refused));
    }
    // Depth costs no stack: a million nested nodes.
    let depth = 1_000_000;
    let mut deep = br#"DrvWithVersion("xp-dyn-drv",[],[("/d.drv","#.to_vec();
    for _ in 0..depth {
        deep.extend_from_slice(br#"([],[("o","#);
    }
    deep.extend_from_slice(b"[]");
    for _ in 0..depth {
        deep.extend_from_slice(b")])");
    }
    deep.extend_from_slice(br#")],[],"x","b",[],[])"#);
    assert!(Derivation::parse(&deep).is_ok());
    assert!(Derivation::parse(&deep[..deep.len() - 20]).is_err());
}

#[test]
fn the_hooks_lean_reader_agrees_with_the_full_parser() {
    let samples: [&[u8]; 6] = [
        br#"Derive([("out","/nix/store/a-x","","")],[("/nix/store/b.drv",["out"])],["/nix/store/c"],"x86_64-linux","/bin/sh",["-e","a\"b"],[("cudaSandboxGpus","2"),("out","/nix/store/a-x"),("requiredSystemFeatures","big-parallel\tcuda")])"#,
        br#"Derive([("out","/nix/store/a-x","","")],[],[],"x86_64-linux","/bin/sh",[],[("__json","{\"big\":\"a\\nb\\\"c\",\"cudaSandboxGpus\":3,\"requiredSystemFeatures\":[\"cuda\",\"kvm\"]}"),("out","/nix/store/a-x")])"#,
        br#"Derive([],[],[],"","",[],[("__json","{\"requiredSystemFeatures\":null}")])"#,
        br#"Derive([],[],[],"","",[],[("re\quiredSystemFeatures","x\ny")])"#,
        br#"Derive([],[],[],"","",[],[("cudaSandboxGpus","1"),("requiredSystemFeatures","cuda"),("requiredSystemFeatures","")])"#,
        br#"Derive([],[],[],"","",[],[("__json","{\"cudaSandboxGpus\":1,\"x\":2,\"x\":3,\"cudaSandboxGpus\":2}")])"#,
    ];
    let mut checked = 0;
    for sample in samples {
        let mut inputs: Vec<Vec<u8>> = (0..=sample.len()).map(|n| sample[..n].to_vec()).collect();
        for i in 0..sample.len() {
            for b in [b'"', b'\\', b',', b')', b'x'] {
                let mut v = sample.to_vec();
                v[i] = b;
                inputs.push(v);
            }
        }
        for input in inputs {
            let full = Derivation::parse(&input);
            let lean = DrvEnv::parse(&input);
            match (&full, &lean) {
                (Ok(d), Ok(e)) => match (d.attrs(), e.attrs()) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b, "{}", String::from_utf8_lossy(&input)),
                    (Err(a), Err(b)) => assert_eq!(
                        std::mem::discriminant(&a),
                        std::mem::discriminant(&b),
                        "{}: {a} vs {b}",
                        String::from_utf8_lossy(&input)
                    ),
                    (a, b) => panic!("{}: {a:?} vs {b:?}", String::from_utf8_lossy(&input)),
                },
                (Err(a), Err(b)) => assert_eq!(a, b),
                _ => panic!("{}: {full:?} vs {lean:?}", String::from_utf8_lossy(&input)),
            }
            checked += 1;
        }
    }
    assert!(checked > 1000);
}

#[test]
fn the_gpus_attribute_is_read_plain_and_structured() {
    let plain = br#"Derive([("out","/nix/store/a-x","","")],[],[],"x86_64-linux","/bin/sh",[],[("cudaSandboxGpus","2"),("out","/nix/store/a-x")])"#;
    assert_eq!(
        Derivation::parse(plain)
            .unwrap()
            .attrs()
            .unwrap()
            .gpus
            .as_deref(),
        Some("2")
    );
    let structured = br#"Derive([("out","/nix/store/a-x","","")],[],[],"x86_64-linux","/bin/sh",[],[("__json","{\"cudaSandboxGpus\":3,\"requiredSystemFeatures\":[\"cuda\"]}"),("out","/nix/store/a-x")])"#;
    assert_eq!(
        DrvEnv::parse(structured)
            .unwrap()
            .attrs()
            .unwrap()
            .gpus
            .as_deref(),
        Some("3")
    );
    let none = br#"Derive([("out","/nix/store/a-x","","")],[],[],"x86_64-linux","/bin/sh",[],[("out","/nix/store/a-x")])"#;
    assert_eq!(DrvEnv::parse(none).unwrap().attrs().unwrap().gpus, None);
    assert_eq!(
        gpus_attr_from_json(br#"{"env":{"cudaSandboxGpus":"2"}}"#).as_deref(),
        Some("2")
    );
    assert_eq!(
        gpus_attr_from_json(br#"{"/nix/store/x.drv":{"structuredAttrs":{"cudaSandboxGpus":3}}}"#)
            .as_deref(),
        Some("3")
    );
    assert_eq!(gpus_attr_from_json(br#"{"env":{}}"#), None);
}

/// A fixed-output or impure derivation is known in every form: an `outputHash` or `__impure`
/// in the env or the structured attrs, or an output with a hash (fixed, or `impure`); a
/// floating content-addressed output (an algorithm, no hash) is sandboxed like any other.
#[test]
fn fixed_output_and_impure_derivations_are_known_in_every_form() {
    use DecidingKey::{Impure, OutputHash};
    let attr = |key, within| Some(Unsandboxed::Attr(key, within));
    let output = |name: &str| Some(Unsandboxed::HashedOutput(name.to_owned()));
    let drv = |outputs: &str, env: &str| {
        format!(r#"Derive([{outputs}],[],[],"x86_64-linux","/bin/sh",[],[{env}])"#).into_bytes()
    };
    let plain = r#"("out","/nix/store/a-x","","")"#;
    let fixed = r#"("out","/nix/store/a-x","sha256","e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")"#;
    let impure = r#"("out","","r:sha256","impure")"#;
    let floating = r#"("out","","r:sha256","")"#;
    for (outputs, env, expected) in [
        (plain, r#"("requiredSystemFeatures","cuda")"#, None),
        (floating, r#"("requiredSystemFeatures","cuda")"#, None),
        (
            plain,
            r#"("outputHash","sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=")"#,
            attr(OutputHash, Within::Env),
        ),
        (plain, r#"("__impure","1")"#, attr(Impure, Within::Env)),
        (
            plain,
            r#"("__json","{\"outputHash\":\"x\",\"requiredSystemFeatures\":[\"cuda\"]}")"#,
            attr(OutputHash, Within::StructuredAttrs),
        ),
        (
            plain,
            r#"("__json","{\"__impure\":true}")"#,
            attr(Impure, Within::StructuredAttrs),
        ),
        (fixed, r#"("requiredSystemFeatures","cuda")"#, output("out")),
        (
            &format!(r#"("dev","","r:sha256",""),{impure}"#),
            "",
            output("out"),
        ),
        // An attribute is named before an output.
        (
            fixed,
            r#"("outputHash","x")"#,
            attr(OutputHash, Within::Env),
        ),
    ] {
        let text = drv(outputs, env);
        let lean = DrvEnv::parse(&text).unwrap().attrs().unwrap();
        assert_eq!(lean.unsandboxed, expected, "{outputs} {env}");
        let full = Derivation::parse(&text).unwrap();
        assert_eq!(
            full.attrs().unwrap().unsandboxed,
            expected,
            "{outputs} {env}"
        );
    }
    let json = |text: &str| json_attrs(text.as_bytes()).unwrap().unsandboxed;
    assert_eq!(
        json(r#"{"env":{"outputHash":"x","requiredSystemFeatures":"cuda"}}"#),
        attr(OutputHash, Within::Env)
    );
    assert_eq!(
        json(r#"{"env":{},"structuredAttrs":{"__impure":true,"requiredSystemFeatures":["cuda"]}}"#),
        attr(Impure, Within::StructuredAttrs)
    );
    assert_eq!(json(r#"{"env":{"requiredSystemFeatures":"cuda"}}"#), None);
    assert_eq!(
        Unsandboxed::HashedOutput("out".into()).to_string(),
        "its output \"out\" has a hash"
    );
    assert_eq!(
        Unsandboxed::Attr(OutputHash, Within::StructuredAttrs).to_string(),
        "it sets \"outputHash\" in its structured attrs (__json)"
    );
}
