//! The nix_versions tier of these tests (docs/testing.md).

use super::*;

#[test]
fn every_field_matches_nix_show_derivation() {
    let Some(c) = corpus() else { return };
    for drv in &c.drvs {
        let ours = Derivation::parse(&drv.bytes)
            .unwrap_or_else(|e| panic!("{}: Nix wrote it, we cannot read it: {e}", drv.path));
        // Not shown by this Nix (not UTF-8): env_values_match_nix_store_binding asks
        // nix-store for its values.
        let Some(nix) = c.shown.get(drv.path.as_bytes()) else {
            assert!(c.not_shown.contains(&drv.path), "{}", drv.path);
            continue;
        };
        assert_same(&drv.path, &norm_ours(&ours), &norm_json(nix));
        // Nix writes env (and outputs, inputDrvs) sorted: so do we read them, in file order.
        assert!(ours.env.windows(2).all(|w| w[0].0 < w[1].0), "{}", drv.path);
    }
    eprintln!(
        "show-derivation agrees on every field of {} .drv files ({} corpus items, {} bytes; \
         {} not UTF-8, which Nix {} refuses to show)",
        c.shown.len(),
        c.items.len(),
        c.drvs.iter().map(|d| d.bytes.len()).sum::<usize>(),
        c.not_shown.len(),
        nix_version()
    );
}

/// Environment entries that are not plain UTF-8 text: the JSON oracle is out of spec there, so
/// `nix-store --query --binding` (which prints the raw value) is asked as well.
#[test]
fn env_values_match_nix_store_binding() {
    let Some(c) = corpus() else { return };
    let strings = &c.item("strings").path;
    let mut checked = 0;
    let mut non_utf8 = 0;
    for drv in &c.drvs {
        let parsed = Derivation::parse(&drv.bytes).unwrap();
        for (key, value) in &parsed.env {
            let odd = |b: &[u8]| {
                std::str::from_utf8(b).is_err()
                    || b.iter().any(|&c| c < 0x20 && !b"\n\r\t".contains(&c))
            };
            // Every entry of a derivation this Nix does not show: it is the only oracle there.
            let unshown = c.not_shown.contains(&drv.path);
            if !(odd(key) || odd(value) || value.len() >= MIB || &drv.path == strings || unshown) {
                continue;
            }
            let out = run_ok(
                nix_command("nix-store")
                    .args(["--query", "--binding"])
                    .arg(OsStr::from_bytes(key))
                    .arg(&drv.path),
            );
            let printed = out.stdout.strip_suffix(b"\n").unwrap_or(&out.stdout);
            assert!(
                printed == value.as_ref(),
                "{} {}: ours {} nix-store {}",
                drv.path,
                show(key),
                show(value),
                show(printed)
            );
            checked += 1;
            non_utf8 += usize::from(std::str::from_utf8(key).is_err())
                + usize::from(std::str::from_utf8(value).is_err());
        }
    }
    // Each item refused at instantiation held one non-UTF-8 value.
    assert!(
        checked >= 20 && non_utf8 + c.refused.len() >= 6,
        "{checked} / {non_utf8}"
    );
    eprintln!("nix-store --query --binding agrees on {checked} env entries ({non_utf8} non-UTF-8 keys/values)");
}

#[test]
fn required_features_match_nix() {
    let Some(c) = corpus() else { return };

    // 1. Every .drv, against the features derived from show-derivation's env.
    for drv in &c.drvs {
        let parsed = Derivation::parse(&drv.bytes).unwrap();
        let ours = parsed.attrs().map(|a| a.features);
        // Not shown by this Nix (not UTF-8): part 2 asks nix-store --realise.
        let Some(nix) = c.shown.get(drv.path.as_bytes()) else {
            continue;
        };
        let has_json = nix.env.0.iter().any(|(k, _)| k == b"__json");
        match (features_from_json_env(&nix.env), &ours) {
            (Ok(expected), Ok(ours)) => {
                let ours: Vec<Bytes> = ours.features.iter().map(|f| f.to_vec()).collect();
                assert_eq!(ours, expected, "{}", drv.path);
            }
            (Ok(expected), Err(e)) => panic!("{}: we fail ({e}), Nix: {expected:?}", drv.path),
            (Err(false), Ok(ours)) => {
                panic!(
                    "{}: Nix rejects requiredSystemFeatures, we read {ours:?}",
                    drv.path
                )
            }
            (Err(false), Err(_)) => {}
            // __json is not UTF-8: Nix fails on it; reading it anyway is allowed, but must be
            // exact.
            (Err(true), Ok(ours)) => {
                let json = parsed.env_var(b"__json").unwrap();
                let ours: Vec<Bytes> = ours.features.iter().map(|f| f.to_vec()).collect();
                assert_eq!(ours, features_from_json_bytes(json), "{}", drv.path);
            }
            (Err(true), Err(_)) => {}
        }
        if let Ok(f) = &ours {
            assert_eq!(f.structured, has_json, "{}", drv.path);
        }
    }

    // 2. Every corpus item against its expected features, and the ones with no platform
    //    against what `nix-store --realise` says Nix requires.
    let mut asked_nix = 0;
    for &(name, expected) in CORPUS {
        if c.refused.contains(&name) {
            continue; // refused at instantiation, as expected (see instantiate)
        }
        let drv = c.item(name);
        let parsed = Derivation::parse(&drv.bytes).unwrap();
        let ours = parsed
            .attrs()
            .map(|a| a.features)
            .map(|f| f.features.iter().map(|f| f.to_vec()).collect::<Vec<_>>());
        let as_vec = |l: &[&[u8]]| l.iter().map(|f| f.to_vec()).collect::<Vec<_>>();
        match (expected, &ours) {
            (Features::List(l), Ok(ours)) => assert_eq!(ours, &as_vec(l), "{name}"),
            (Features::ErrOr(l), Ok(ours)) => assert_eq!(ours, &as_vec(l), "{name}"),
            (Features::Err | Features::ErrOr(_), Err(_)) => {}
            (_, ours) => panic!("{name}: expected {expected:?}, got {ours:?}"),
        }
        if parsed.system.as_ref() != NO_PLATFORM {
            continue;
        }
        // Safety: only derivations that no machine can build, with nothing to build first.
        assert!(parsed.input_drvs.is_empty(), "{name}");
        asked_nix += 1;
        match (features_from_nix_realise(&drv.path), &ours) {
            (Ok(nix), Ok(ours)) => {
                let ours: BTreeSet<Bytes> = ours.iter().map(|f| as_nix_logs_it(f)).collect();
                assert_eq!(ours, nix, "{name}: our features vs the set Nix requires");
            }
            (Ok(nix), Err(e)) => panic!("{name}: we fail ({e}), Nix requires {nix:?}"),
            (Err(_), Err(_)) => {}
            (Err(_), Ok(_)) if matches!(expected, Features::ErrOr(_)) => {}
            (Err(nix), Ok(ours)) => panic!("{name}: Nix rejects ({nix}), we read {ours:?}"),
        }
    }
    assert!(
        asked_nix + c.refused.len() >= 15,
        "only {asked_nix} items checked with nix-store --realise"
    );
    eprintln!(
        "the required features agree with Nix on {} .drv files; {asked_nix} items also checked \
         with nix-store --realise; {} items refused by Nix {} at instantiation",
        c.shown.len(),
        c.refused.len(),
        nix_version()
    );
}

#[test]
fn corpus_covers_every_case() {
    let Some(c) = corpus() else { return };
    assert_eq!(c.items.len() + c.refused.len(), CORPUS.len());
    assert_eq!(CORPUS.len(), 27, "corpus size changed: update this test");
    assert!(c.drvs.len() >= c.items.len());
    let parse = |name: &str| Derivation::parse(&c.item(name).bytes).unwrap();
    let names =
        |d: &Derivation<'_>| -> Vec<Bytes> { d.outputs.iter().map(|o| o.name.to_vec()).collect() };

    let d = parse("plain");
    assert_eq!(names(&d), [b"out".to_vec()]);
    assert!(d.outputs[0].path.starts_with(b"/nix/store/"));
    assert!(d.outputs[0].hash_algo.is_empty() && d.outputs[0].hash.is_empty());
    assert_eq!(d.args.len(), 2);

    let d = parse("structured");
    assert!(d.env_var(b"__json").is_some());
    assert!(d.env_var(b"requiredSystemFeatures").is_none());
    assert!(d.attrs().map(|a| a.features).unwrap().structured);

    let d = parse("multi-output");
    assert_eq!(
        names(&d),
        [b"dev".to_vec(), b"lib".to_vec(), b"out".to_vec()]
    );
    assert!(d.outputs.iter().all(|o| o.path.starts_with(b"/nix/store/")));

    let d = parse("fod-flat");
    assert_eq!(d.outputs[0].hash_algo.as_ref(), b"sha256");
    assert_eq!(d.outputs[0].hash.len(), 64);
    let d = parse("fod-recursive");
    assert_eq!(d.outputs[0].hash_algo.as_ref(), b"r:sha512");
    assert_eq!(d.outputs[0].hash.len(), 128);

    let d = parse("ca-floating");
    assert!(d
        .outputs
        .iter()
        .all(|o| o.path.is_empty() && o.hash.is_empty()));
    assert!(d
        .outputs
        .iter()
        .all(|o| o.hash_algo.as_ref() == b"r:sha256"));

    let d = parse("impure");
    assert_eq!(d.outputs[0].hash.as_ref(), b"impure");

    let d = parse("deps");
    let inputs: Vec<(String, Vec<Bytes>)> = d
        .input_drvs
        .iter()
        .map(|i| {
            let name = String::from_utf8_lossy(&i.path[44..]).into_owned();
            (name, i.outputs.iter().map(|o| o.to_vec()).collect())
        })
        .collect();
    assert_eq!(
        inputs,
        [
            (
                "multi-output.drv".to_string(),
                vec![b"dev".to_vec(), b"lib".to_vec()]
            ),
            ("plain.drv".to_string(), vec![b"out".to_vec()]),
        ]
    );
    assert!(!d.outputs[0].path.is_empty());
    let srcs: Vec<String> = d
        .input_srcs
        .iter()
        .map(|s| String::from_utf8_lossy(&s[44..]).into_owned())
        .collect();
    assert_eq!(srcs.len(), 3, "{srcs:?}");
    for want in ["data-file", "script.sh", "plain.drv"] {
        assert!(srcs.iter().any(|s| s == want), "{want} not in {srcs:?}");
    }

    let d = parse("deps-deferred");
    assert!(d.outputs[0].path.is_empty(), "output should be deferred");
    assert!(d.input_drvs[0].path.ends_with(b"-ca-floating.drv"));
    assert_eq!(d.input_drvs[0].outputs, [b"dev".to_vec()]);

    let d = parse("strings");
    let everything: Vec<&[u8]> = d
        .env
        .iter()
        .flat_map(|(k, v)| [k.as_ref(), v.as_ref()])
        .chain(d.args.iter().map(|a| a.as_ref()))
        .collect();
    for byte in [b'"', b'\\', b'\n', b'\t', b'\r'] {
        assert!(everything.iter().any(|s| s.contains(&byte)), "no {byte:#x}");
    }
    let raw = &c.item("strings").bytes;
    for escape in [&b"\\\""[..], b"\\\\", b"\\n", b"\\t", b"\\r"] {
        assert!(
            raw.windows(2).any(|w| w == escape),
            "no escape {}",
            show(escape)
        );
    }
    let emoji = "🎉".as_bytes();
    assert!(d.env.iter().any(|(_, v)| v.windows(4).any(|w| w == emoji)));
    assert!(
        d.env.iter().any(|(k, _)| k.contains(&b'\n')),
        "a key with a newline"
    );
    assert!(d.args.iter().any(|a| a.is_empty()) && d.env_var(b"empty") == Some(&b""[..]));

    let d = parse("latin1");
    assert_eq!(d.env_var(b"text"), Some(LATIN1));
    assert_eq!(d.args[1].as_ref(), LATIN1);
    assert!(std::str::from_utf8(&c.item("latin1").bytes).is_err());
    let d = parse("latin1-key");
    assert!(d.env.iter().any(|(k, _)| std::str::from_utf8(k).is_err()));

    let big = c.item("big");
    assert!(big.bytes.len() >= 5 * MIB, "{}", big.bytes.len());
    let d = parse("big");
    let value = d.env_var(b"big").unwrap();
    assert!(value.len() >= 5 * MIB, "{}", value.len());
    assert!(value.starts_with(LATIN1) && value.ends_with(LATIN1));
    assert!(value.contains(&b'"') && value.contains(&b'\\') && value.contains(&b'\r'));

    let d = parse("many-env");
    assert!(d.env.len() >= 3000, "{}", d.env.len());

    for name in ["features-empty-string", "features-empty-list"] {
        assert_eq!(
            parse(name).env_var(b"requiredSystemFeatures"),
            Some(&b""[..])
        );
    }
    assert_eq!(
        parse("features-duplicates").env_var(b"requiredSystemFeatures"),
        Some(&b"cuda gpu cuda"[..])
    );
    assert_eq!(
        parse("features-vtab").env_var(b"requiredSystemFeatures"),
        Some(&b" cuda\x0b\x0cgpu \t"[..])
    );
}

#[test]
fn every_truncation_of_a_real_drv_is_an_error() {
    let Some(c) = corpus() else { return };
    let mut checked = 0usize;
    let mut rng = Rng(seed());
    for drv in &c.drvs {
        let len = drv.bytes.len();
        // Every offset of the small files. The big ones are sampled (a debug build parses a
        // few MiB/s with the naive reference): both ends, the start of the 5 MiB value, and
        // random offsets.
        let offsets: Vec<usize> = if len <= 16 * 1024 {
            (0..len).collect()
        } else if len <= MIB {
            let mut o: Vec<usize> = (0..1024).chain(len - 1024..len).collect();
            o.extend((0..500).map(|_| rng.below(len)));
            o
        } else {
            let mut o: Vec<usize> = (0..512).chain(len - 8..len).collect();
            let value_start = drv.bytes.windows(6).position(|w| w == b"\"big\",").unwrap() + 6;
            o.extend(value_start - 16..value_start + 512);
            o.extend((0..16).map(|_| rng.below(len)));
            o
        };
        for end in offsets {
            let input = &drv.bytes[..end];
            let what = || format!("{} cut at {end} of {len}", drv.path);
            assert!(parse_checked(input, &what).is_none(), "{} parsed", what());
            assert!(reference::parse(input).is_none(), "{}", what());
            checked += 1;
        }
    }
    eprintln!(
        "{checked} truncations of {} real .drv files: all errors",
        c.drvs.len()
    );
}

#[test]
fn corrupted_real_drvs_agree_with_the_reference_parser() {
    let Some(c) = corpus() else { return };
    // Bytes that matter to the grammar are tried more often than others.
    const INTERESTING: &[u8] = b"\"\\,()[]ntr \x00\xff";
    let mut rng = Rng(seed());
    let (mut total, mut still_valid) = (0usize, 0usize);
    for drv in &c.drvs {
        let len = drv.bytes.len();
        let rounds = match len {
            0..=16384 => 1500,
            16385..=MIB => 300,
            _ => 12,
        };
        // Half of the positions are on a byte that matters to the grammar (corrupting the
        // inside of a long string mostly leaves a valid derivation).
        let structural: Vec<usize> = (0..len)
            .filter(|&i| b"\"\\,()[]".contains(&drv.bytes[i]))
            .collect();
        for round in 0..rounds {
            let at = if rng.next() % 2 == 0 {
                structural[rng.below(structural.len())]
            } else {
                rng.below(len)
            };
            let byte = if rng.next() % 2 == 0 {
                INTERESTING[rng.below(INTERESTING.len())]
            } else {
                rng.next() as u8
            };
            let mut input = drv.bytes.clone();
            let kind = match round % 4 {
                0 | 1 => {
                    input[at] = byte;
                    "replaced"
                }
                2 => {
                    input.remove(at);
                    "deleted"
                }
                _ => {
                    input.insert(at, byte);
                    "inserted"
                }
            };
            let what = || {
                format!(
                    "{} with byte {at} {kind} ({byte:#04x}), seed {}",
                    drv.path,
                    seed()
                )
            };
            let ours = parse_checked(&input, &what);
            let reference = reference::parse(&input);
            match (&ours, &reference) {
                (None, None) => {}
                (Some(a), Some(b)) => {
                    assert_same(&what(), a, b);
                    still_valid += 1;
                }
                (Some(_), None) => panic!("{}: accepted, but it is not a derivation", what()),
                (None, Some(_)) => panic!("{}: rejected, but it is a valid derivation", what()),
            }
            total += 1;
        }
    }
    assert!(
        still_valid > 0 && still_valid < total,
        "{still_valid} of {total}"
    );
    eprintln!(
        "{total} corruptions of {} real .drv files: {} errors, {still_valid} still valid and \
         identical to the reference parse",
        c.drvs.len(),
        total - still_valid
    );
}

#[test]
fn generated_derivations_agree_with_nix() {
    if corpus().is_none() {
        return; // skipped (or failed under CI) by the gate above
    }
    const CASES: usize = 64;
    let seed = seed();
    let mut rng = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
    let dir = tempfile::tempdir().unwrap();
    let mut nix = String::from("{\n");
    for i in 0..CASES {
        nix.push_str(&generated_case(&mut rng, i, dir.path()));
    }
    nix.push_str("}\n");
    let file = dir.path().join("generated.nix");
    std::fs::write(&file, &nix).unwrap();
    let mut command = nix_command("nix-instantiate");
    command
        .arg(&file)
        .arg("--add-root")
        .arg(dir.path().join("root"));
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "seed {seed}: nix-instantiate rejected a generated case:\n{}\n{nix}",
        String::from_utf8_lossy(&out.stderr)
    );
    let paths: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| std::fs::read_link(l).unwrap().display().to_string())
        .collect();
    assert_eq!(paths.len(), CASES);
    let (shown, not_shown) = show_derivations(&paths);
    for path in &paths {
        let bytes = std::fs::read(path).unwrap();
        let ours = Derivation::parse(&bytes).unwrap_or_else(|e| {
            panic!("seed {seed}: {path}: Nix wrote it, we cannot read it: {e}")
        });
        // Not UTF-8, so not shown by this Nix: its env against nix-store's binding instead.
        let Some(theirs) = shown.get(path.as_bytes()) else {
            assert!(not_shown.contains(path), "{path}");
            for (key, value) in &ours.env {
                let out = run_ok(
                    nix_command("nix-store")
                        .args(["--query", "--binding"])
                        .arg(OsStr::from_bytes(key))
                        .arg(path),
                );
                let printed = out.stdout.strip_suffix(b"\n").unwrap_or(&out.stdout);
                assert!(
                    printed == value.as_ref(),
                    "seed {seed}: {path}: {}",
                    show(key)
                );
            }
            continue;
        };
        assert_same(
            &format!("seed {seed}: {path}"),
            &norm_ours(&ours),
            &norm_json(theirs),
        );
        let expected = features_from_json_env(&theirs.env);
        let got = ours
            .attrs()
            .map(|a| a.features)
            .map(|f| f.features.iter().map(|x| x.to_vec()).collect::<Vec<_>>());
        match (expected, got) {
            (Ok(e), Ok(g)) => assert_eq!(g, e, "seed {seed}: {path}: features"),
            (Err(_), Err(_)) => {}
            (e, g) => panic!("seed {seed}: {path}: Nix {e:?} vs ours {g:?}"),
        }
    }
    eprintln!(
        "{CASES} generated derivations (seed {seed}): every field and the features agree \
         ({} not UTF-8: not shown by Nix {}, their env checked with nix-store)",
        not_shown.len(),
        nix_version()
    );
}

/// A `.drv` may set an env key twice, and a `__json` member twice: no Nix writes one from an
/// expression (except a `__json` attribute's string under 2.8 and 2.26), but `nix-store --add`
/// takes one. Measured on 2.8.0, 2.26.3 and 2.34.8, each holding this test to it:
/// - **Nix keeps the last.** `show-derivation` / `derivation show` print the last value of a
///   repeated env key; `nix-store --realise` requires the features of the last
///   `requiredSystemFeatures`, of the last `__json`, and of the last member inside it.
/// - **`nix-store --add` accepts the repeat** when the outputs are those of the derivation with
///   the last values (the output path hashes the parsed derivation); with the first value's
///   outputs it refuses ("has incorrect output …, should be …").
/// - **Inside `__json`**: 2.8 and 2.26 write a `__json` attribute's string as given, repeats
///   and all, and hash it so; 2.34 rewrites it ([`NixVersion::rewrites_structured_attrs`]),
///   so that a repeat reaches its `.drv` only by `nix-store --add` of a file with the
///   outputs of the rewrite, which it then accepts. Its `derivation show` prints the attrs as
///   an object (repeats gone), the other versions the string (repeats kept).
/// - **JSON**: `nix derivation add` (2.26, 2.34; [`NixVersion::derivation_add`]) keeps the last
///   of a repeated env member (2.34: and of a `structuredAttrs` member), and writes the `.drv`
///   of the last values.
///
/// So which value counts depends on the reader, and a reader that takes the first (the hook
/// did, and exposed the GPU to `("requiredSystemFeatures","cuda")` then
/// `("requiredSystemFeatures","")`, which Nix builds on a machine without `cuda`) disagrees
/// with Nix. The hook reads every other repeat as Nix does, and refuses one of a key it decides
/// on (`requiredSystemFeatures`, `__json`, `cudaSandboxGpus`), in every form.
#[test]
fn repeated_keys_are_read_as_nix_reads_them_and_refused_where_the_hook_decides() {
    if corpus().is_none() {
        return; // skipped (or failed under CI) by the gate above
    }
    let version = nix_version();
    let dir = tempfile::tempdir().unwrap();
    let mut nix = REPEATS_NIX.to_string();
    for (name, json) in INNER {
        nix = nix.replace(name, &format!("''{json}''"));
    }
    let file = dir.path().join("repeats.nix");
    std::fs::write(&file, nix).unwrap();
    let instantiated = |base: &str| -> (String, Vec<u8>) {
        let out = run_ok(
            nix_command("nix-instantiate")
                .arg(&file)
                .args(["-A", base, "--add-root"])
                .arg(dir.path().join(format!("root-{base}"))),
        );
        let link = String::from_utf8(out.stdout).unwrap();
        let path = std::fs::read_link(link.trim()).unwrap();
        let path = path.to_str().unwrap().to_string();
        let bytes = std::fs::read(&path).unwrap();
        (path, bytes)
    };
    let mut checked = 0;
    for case in REPEATS {
        let (base_path, base) = instantiated(case.base);
        let name = base_path.rsplit_once('/').unwrap().1[33..].to_string();
        let what = format!("{}{:?} (Nix {version})", case.base, case.first);
        // The `.drv` with the repeat, and the value Nix must keep.
        let (path, bytes) = match case.first {
            Some((key, value)) => {
                let needle = [b"(\"", key.as_bytes(), b"\","].concat();
                let entry = format!("(\"{key}\",\"{value}\")");
                let before = spliced(&base, &needle, format!("{entry},").as_bytes(), true);
                let path = add_drv(dir.path(), &name, &before)
                    .unwrap_or_else(|e| panic!("{what}: nix-store --add refused it: {e}"));
                // The first value's outputs are wrong for Nix: it hashes the last.
                let end = entry_end(&base, &needle);
                let after = [&base[..end], b",", entry.as_bytes(), &base[end..]].concat();
                let refused = add_drv(dir.path(), &name, &after);
                assert!(
                    refused
                        .as_ref()
                        .is_err_and(|e| e.contains("incorrect output")),
                    "{what}: with the base's value first, nix-store --add: {refused:?}"
                );
                (path, before)
            }
            None => {
                let given = INNER
                    .iter()
                    .find(|(n, _)| n.to_lowercase().replace('_', "-") == case.base)
                    .unwrap()
                    .1;
                let written = Derivation::parse(&base).unwrap();
                let written = written.env_var(b"__json").unwrap().to_vec();
                if version.rewrites_structured_attrs() {
                    assert_ne!(written, given.as_bytes(), "{what}: not rewritten");
                    let old = aterm_quoted(&written);
                    let at = base.windows(old.len()).position(|w| w == old).unwrap();
                    let crafted = [
                        &base[..at],
                        &aterm_quoted(given.as_bytes()),
                        &base[at + old.len()..],
                    ]
                    .concat();
                    let path = add_drv(dir.path(), &name, &crafted)
                        .unwrap_or_else(|e| panic!("{what}: nix-store --add refused it: {e}"));
                    (path, crafted)
                } else {
                    assert_eq!(written, given.as_bytes(), "{what}: rewritten");
                    (base_path.clone(), base.clone())
                }
            }
        };

        // What Nix makes of it: the env it shows, the features it requires.
        let (shown, _) = show_derivations(std::slice::from_ref(&path));
        let shown = &shown[path.as_bytes()];
        let nix_env: BTreeMap<Bytes, Bytes> = shown
            .env
            .0
            .iter()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect();
        let nix_features = features_from_nix_realise(&path)
            .unwrap_or_else(|e| panic!("{what}: Nix rejects its features: {e}"));
        assert_eq!(
            nix_features,
            BTreeSet::from([b"kvm".to_vec()]),
            "{what}: Nix keeps the last"
        );

        // Ours: every key with its last value, as Nix shows it (the `__json` object compared
        // as JSON: a Nix that rewrites it shows it without the repeat).
        let ours = Derivation::parse(&bytes).unwrap();
        let mut our_env = last_of_each(&ours);
        let mut their_env = nix_env.clone();
        if let (Some(a), Some(b)) = (
            our_env.remove(&b"__json"[..]),
            their_env.remove(&b"__json"[..]),
        ) {
            let json = |v: &[u8]| serde_json::from_slice::<serde_json::Value>(v).unwrap();
            assert_eq!(json(&a), json(&b), "{what}: __json");
        }
        assert_eq!(our_env, their_env, "{what}: env");
        if let Some((key, _)) = case.first {
            assert_eq!(
                ours.env_var(key.as_bytes()),
                nix_env.get(key.as_bytes()).map(Vec::as_slice),
                "{what}: {key}"
            );
        }

        // The hook's readers: the oracle's and the lean one the hook runs.
        let lean = DrvEnv::parse(&bytes).unwrap();
        match case.refused {
            Some(key) => {
                assert_refuses(ours.attrs().map(|a| a.features), key, &what);
                assert_refuses(lean.attrs().map(|a| a.features), key, &what);
            }
            None => {
                for features in [
                    ours.attrs().map(|a| a.features),
                    lean.attrs().map(|a| a.features),
                ] {
                    let features = features.unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(lossy(&features.features), ["kvm"], "{what}");
                }
            }
        }

        // The JSON this Nix prints for it, as a hook may be given it: no repeated member,
        // except inside a `__json` string, which only a Nix that prints the attrs as an
        // object rewrites.
        let json = serde_json::to_vec(&nix_json_of(&path)).unwrap();
        let json_repeats = case.first.is_none() && version.derivation_json() != DerivationJson::V4;
        match case.refused.filter(|_| json_repeats) {
            Some(key) => assert_refuses(json_features(&json), key, &what),
            None => {
                let features = json_features(&json).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(lossy(&features.features), ["kvm"], "{what}: JSON");
            }
        }
        checked += 1;
    }
    assert_eq!(checked, REPEATS.len());

    // Repeated JSON members, as `nix derivation add` reads them: the last counts.
    let Some(add) = version.derivation_add() else {
        eprintln!(
            "repeated keys: {checked} cases agree with Nix {version} (it has no `derivation add`)"
        );
        return;
    };
    let mut injections = vec![
        ("plain", r#""other":"last""#, r#""other":"first","#, None),
        (
            "plain",
            r#""requiredSystemFeatures":"kvm""#,
            r#""requiredSystemFeatures":"cuda","#,
            Some("requiredSystemFeatures"),
        ),
    ];
    if version.derivation_json() == DerivationJson::V4 {
        injections.push((
            "structured",
            r#""requiredSystemFeatures":["kvm"]"#,
            r#""requiredSystemFeatures":["cuda"],"#,
            Some("requiredSystemFeatures"),
        ));
    }
    for (base, needle, first, refused) in injections {
        let (base_path, _) = instantiated(base);
        let json = serde_json::to_vec(&nix_json_of(&base_path)).unwrap();
        let json = spliced(&json, needle.as_bytes(), first.as_bytes(), true);
        let what = format!("{} (Nix {version})", String::from_utf8_lossy(&json));
        let mut child = nix_command("nix")
            .args(add)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child.stdin.take().unwrap().write_all(&json).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{what}: nix derivation add: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            base_path,
            "{what}: Nix wrote another derivation than the one of the last values"
        );
        match refused {
            Some(key) => assert_refuses(json_features(&json), key, &what),
            None => {
                let features = json_features(&json).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(lossy(&features.features), ["kvm"], "{what}");
            }
        }
        checked += 1;
    }
    eprintln!("repeated keys: {checked} cases agree with Nix {version}");
}

/// Nix reads a list's commas as optional (`endOfList`, 2.8 to 2.34), ignores bytes after the
/// derivation, and (2.26, 2.34) reads `DrvWithVersion("xp-dyn-drv",…)`: hand-made `.drv` files
/// that use each, added with `nix-store --add`, are read by the hook as Nix shows them, and
/// their features as Nix requires them. The hook once refused them all ("expected ',' or ']'"),
/// failing such an untagged build whose text mentions "cuda".
#[test]
fn lists_without_commas_and_other_forms_nix_reads_are_read_as_nix_reads_them() {
    if corpus().is_none() {
        return; // skipped (or failed under CI) by the gate above
    }
    let version = nix_version();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("commas.nix");
    std::fs::write(
        &file,
        r#"derivation { name = "commas"; system = "cuda-sandbox-none"; builder = "/bin/sh";
             args = [ "-c" "echo cuda" ]; note = "mentions cuda";
             requiredSystemFeatures = "kvm big-parallel"; outputs = [ "out" "dev" ]; }"#,
    )
    .unwrap();
    let out = run_ok(
        nix_command("nix-instantiate")
            .arg(&file)
            .arg("--add-root")
            .arg(dir.path().join("root")),
    );
    let link = String::from_utf8(out.stdout).unwrap();
    let base_path = std::fs::read_link(link.trim()).unwrap();
    let base = std::fs::read(&base_path).unwrap();
    let name = base_path.file_name().unwrap().to_str().unwrap()[33..].to_string();
    let replaced = |b: &[u8], from: &[u8], to: &[u8]| -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = b;
        while let Some(at) = rest.windows(from.len()).position(|w| w == from) {
            out.extend_from_slice(&rest[..at]);
            out.extend_from_slice(to);
            rest = &rest[at + from.len()..];
        }
        out.extend_from_slice(rest);
        assert_ne!(out, b, "{} not found", show(from));
        out
    };
    let no_commas = replaced(&replaced(&base, b"),(", b")("), b"\"-c\",", b"\"-c\"");
    let leading = replaced(&replaced(&base, b"[(", b"[,("), b"[\"-c", b"[,\"-c");
    let trailing = [&base[..], b"\n)(\"requiredSystemFeatures\",\"cuda\")]"].concat();
    let versioned = replaced(&base, b"Derive(", b"DrvWithVersion(\"xp-dyn-drv\",");
    let cases = [
        ("no commas between items", no_commas.clone(), true),
        ("leading commas", leading, true),
        ("bytes after the derivation", trailing, true),
        (
            "DrvWithVersion without commas",
            replaced(&no_commas, b"Derive(", b"DrvWithVersion(\"xp-dyn-drv\","),
            version.reads_drv_with_version(),
        ),
        (
            "DrvWithVersion",
            versioned,
            version.reads_drv_with_version(),
        ),
    ];
    for (case, bytes, nix_reads) in cases {
        let what = format!("{case} (Nix {version})");
        let added = add_drv(dir.path(), &name, &bytes);
        let path = match (added, nix_reads) {
            (Ok(path), true) => path,
            (Err(e), false) => {
                eprintln!("{what}: refused by Nix, as expected: {}", e.trim());
                continue;
            }
            (added, _) => panic!("{what}: nix-store --add: {added:?}"),
        };
        let ours = Derivation::parse(&bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (shown, _) = show_derivations(std::slice::from_ref(&path));
        let shown = shown
            .get(path.as_bytes())
            .unwrap_or_else(|| panic!("{what}: not shown"));
        assert_same(&what, &norm_ours(&ours), &norm_json(shown));
        let nix_features = features_from_nix_realise(&path).unwrap();
        let lean = DrvEnv::parse(&bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
        for attrs in [ours.attrs(), lean.attrs()] {
            let features: BTreeSet<Bytes> = attrs
                .unwrap_or_else(|e| panic!("{what}: {e}"))
                .features
                .features
                .iter()
                .map(|f| f.to_vec())
                .collect();
            assert_eq!(features, nix_features, "{what}");
        }
        eprintln!("{what}: read as Nix reads it");
    }
}
