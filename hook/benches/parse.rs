//! Throughput of the `.drv` readers (`cuda_sandbox_hook::drv`): the hook's (`DrvEnv`: parse,
//! then `attrs()`, what the hook runs for every build) and the oracle's (`Derivation::parse`,
//! every field unescaped, for the tests).
//!
//! `cargo bench -p cuda-sandbox-hook --bench parse` prints, for a realistic ~5 MiB derivation
//! built in memory (normal fields plus one big environment value: a build script with the usual
//! sprinkling of quotes, backslashes, tabs and newlines), the throughput of each reader in MiB/s
//! (median and best over at least 1 s and 20 iterations); the same for an escape-dense worst
//! case and, when Nix and root are available, the real 5 MiB derivation of the differential
//! test's corpus; and the time of each on a typical small derivation and on a 5 MiB
//! structured-attrs (`__json`) one. Figures, not assertions: the target is ≥ 500 MiB/s for the
//! realistic derivation in release.

use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cuda_sandbox_hook::drv::{Derivation, DrvAttrs, DrvEnv};

const MIB: f64 = 1024.0 * 1024.0;
const MIN_TIME: Duration = Duration::from_secs(1);
const MIN_ITERATIONS: usize = 20;

/// Escapes a string the way Nix writes it into a `.drv`.
fn quote(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

fn store(i: usize, name: &str) -> String {
    format!("/nix/store/{:032}-{name}", i * 7919 % 1_000_003)
}

/// A derivation like nixpkgs writes: two outputs, a few inputs, ~60 env entries, and the given
/// extra env entries (sorted in, as Nix does).
fn derivation(extra_env: Vec<(String, Vec<u8>)>) -> Vec<u8> {
    let mut env: Vec<(String, Vec<u8>)> = vec![
        (
            "builder".into(),
            store(1, "bash-5.2-p15/bin/bash").into_bytes(),
        ),
        ("name".into(), b"python3.11-torch-2.1.0".to_vec()),
        (
            "out".into(),
            store(2, "python3.11-torch-2.1.0").into_bytes(),
        ),
        (
            "dev".into(),
            store(3, "python3.11-torch-2.1.0-dev").into_bytes(),
        ),
        ("outputs".into(), b"out dev".to_vec()),
        ("system".into(), b"x86_64-linux".to_vec()),
        ("src".into(), store(4, "source").into_bytes()),
        ("stdenv".into(), store(5, "stdenv-linux").into_bytes()),
        (
            "buildPhase".into(),
            b"runHook preBuild\nmake -j$NIX_BUILD_CORES \"CFLAGS=-O2\"\nrunHook postBuild\n"
                .to_vec(),
        ),
    ];
    for i in 0..50 {
        env.push((
            format!("var{i:02}"),
            format!(
                "{} {}",
                store(100 + i, "dep/lib"),
                store(200 + i, "dep-dev")
            )
            .into_bytes(),
        ));
    }
    env.extend(extra_env);
    env.sort();

    let mut out = b"Derive([".to_vec();
    for (i, (name, path)) in [("dev", store(3, "x-dev")), ("out", store(2, "x"))]
        .iter()
        .enumerate()
    {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'(');
        quote(&mut out, name.as_bytes());
        out.push(b',');
        quote(&mut out, path.as_bytes());
        out.extend_from_slice(b",\"\",\"\")");
    }
    out.extend_from_slice(b"],[");
    for i in 0..3 {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'(');
        quote(&mut out, store(300 + i, "dep.drv").as_bytes());
        out.extend_from_slice(b",[\"dev\",\"out\"])");
    }
    out.extend_from_slice(b"],[");
    quote(&mut out, store(4, "source").as_bytes());
    out.push(b',');
    quote(&mut out, store(6, "default-builder.sh").as_bytes());
    out.extend_from_slice(b"],\"x86_64-linux\",");
    quote(&mut out, store(1, "bash-5.2-p15/bin/bash").as_bytes());
    out.extend_from_slice(b",[\"-e\",");
    quote(&mut out, store(6, "default-builder.sh").as_bytes());
    out.extend_from_slice(b"],[");
    for (i, (k, v)) in env.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'(');
        quote(&mut out, k.as_bytes());
        out.push(b',');
        quote(&mut out, v);
        out.push(b')');
    }
    out.extend_from_slice(b"])");
    out
}

/// About `size` bytes of build script: ~60-byte lines, a quote pair every few lines, some
/// backslashes and tabs.
fn script(size: usize) -> Vec<u8> {
    let lines = [
        "  echo \"building component $i of $total\" >&2\n",
        "  cmake --build build --target all -- -j\"$NIX_BUILD_CORES\" VERBOSE=1\n",
        "  substituteInPlace setup.py --replace-fail 'version=\"0\"' 'version=\"1\"'\n",
        "\tfor f in $out/lib/*.so; do patchelf --set-rpath \"$rpath\" $f; done\n",
        "  export NIX_CFLAGS_COMPILE=\"$NIX_CFLAGS_COMPILE -DNDEBUG -O2 -fPIC\"\n",
        "  sed -i -e 's/\\(foo\\)/\\1bar/' src/configure.ac  # a backslash or two\n",
        "  install -Dm644 LICENSE $out/share/licenses/torch/LICENSE\n",
        "  python -m pytest tests -k 'not slow and not gpu' -p no:cacheprovider\n",
    ];
    let mut s = Vec::with_capacity(size + 100);
    let mut i = 0;
    while s.len() < size {
        s.extend_from_slice(lines[i % lines.len()].as_bytes());
        i += 1;
    }
    s
}

/// The worst case: the differential test's big value, an escape every ~8 bytes.
fn escape_dense(size: usize) -> Vec<u8> {
    let mut s = Vec::with_capacity(size + 100);
    let mut i = 0;
    while s.len() < size {
        s.extend_from_slice(
            format!("line {i}: \"quoted\" back\\slash\ttab\r cr é ✓ 🎉\n").as_bytes(),
        );
        i += 1;
    }
    s
}

/// Runs `f` until at least `MIN_TIME` and `MIN_ITERATIONS` have passed; per-iteration times.
fn time_iterations(mut f: impl FnMut()) -> Vec<Duration> {
    for _ in 0..3 {
        f();
    }
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < MIN_ITERATIONS || start.elapsed() < MIN_TIME {
        let t = Instant::now();
        f();
        times.push(t.elapsed());
    }
    times.sort();
    times
}

fn median(sorted: &[Duration]) -> Duration {
    sorted[sorted.len() / 2]
}

/// What the hook reads of `drv`: the whole grammar, and the attributes it decides on.
fn hook_read(drv: &[u8]) -> DrvAttrs<'_> {
    DrvEnv::parse(drv).unwrap().attrs().unwrap()
}

fn throughput(label: &str, drv: &[u8]) {
    let parsed = Derivation::parse(drv).expect("the benchmark derivation parses");
    let largest = parsed.env.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
    drop(parsed);
    let mibs = |t: Duration| drv.len() as f64 / MIB / t.as_secs_f64();
    let hook = time_iterations(|| {
        black_box(hook_read(black_box(drv)));
    });
    let oracle = time_iterations(|| {
        let d = Derivation::parse(black_box(drv)).unwrap();
        black_box(&d);
    });
    for (reader, times) in [
        ("hook (DrvEnv + attrs)", hook),
        ("oracle (Derivation)", oracle),
    ] {
        println!(
            "{reader}: {:.1} MiB drv ({label}): median {:.0} MiB/s (best {:.0} MiB/s, {} \
             iterations; {} bytes, largest env value {} bytes, median {:.2} ms)",
            drv.len() as f64 / MIB,
            mibs(median(&times)),
            mibs(times[0]),
            times.len(),
            drv.len(),
            largest,
            median(&times).as_secs_f64() * 1e3,
        );
    }
}

/// Median time per call of `f`, timing batches of `batch` calls.
fn per_call(batch: usize, mut f: impl FnMut()) -> (Duration, usize) {
    let times = time_iterations(|| {
        for _ in 0..batch {
            f();
        }
    });
    (median(&times) / batch as u32, times.len() * batch)
}

fn micros(d: Duration) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6)
}

/// The corpus's real 5 MiB derivation, when Nix and root are there to instantiate it.
fn real_big_drv() -> Option<Vec<u8>> {
    let uid = std::fs::read_to_string("/proc/self/status").ok()?;
    let euid = uid
        .lines()
        .find(|l| l.starts_with("Uid:"))?
        .split_whitespace()
        .nth(2)?;
    if euid != "0" {
        return None;
    }
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/corpus.nix");
    let out = Command::new("nix-instantiate")
        .env(
            "NIX_CONFIG",
            "substituters =\nexperimental-features = nix-command ca-derivations impure-derivations\n",
        )
        .arg(corpus)
        .args(["-A", "big"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let path = String::from_utf8(out.stdout).ok()?;
    std::fs::read(path.trim()).ok()
}

fn main() {
    // Cargo passes `--bench`; a plain `cargo test --benches` run passes nothing and only wants to
    // know that this builds and runs.
    let quick = !std::env::args().any(|a| a == "--bench");
    if quick {
        println!("parse bench: run with `cargo bench -p cuda-sandbox-hook --bench parse`");
        return;
    }

    let five = 5 * 1024 * 1024;
    let realistic = derivation(vec![("postInstall".into(), script(five))]);
    throughput("realistic: build-script value", &realistic);
    let dense = derivation(vec![("big".into(), escape_dense(five))]);
    throughput("worst case: an escape every ~8 bytes", &dense);
    let no_escapes = derivation(vec![("blob".into(), vec![b'x'; five])]);
    throughput("no escapes", &no_escapes);
    match real_big_drv() {
        Some(real) => throughput("real: corpus item `big` from nix-instantiate", &real),
        None => println!("parse real 5 MiB drv: skipped (needs nix-instantiate and root)"),
    }

    // requiredSystemFeatures of a typical small derivation.
    let small = derivation(vec![(
        "requiredSystemFeatures".into(),
        b"big-parallel cuda".to_vec(),
    )]);
    assert!(hook_read(&small).features.contains(b"cuda"));
    let (hook, calls) = per_call(1_000, || {
        black_box(hook_read(black_box(&small)));
    });
    let small_drv = Derivation::parse(&small).unwrap();
    let (attrs, _) = per_call(10_000, || {
        black_box(black_box(&small_drv).attrs().unwrap());
    });
    let (both, _) = per_call(1_000, || {
        let d = Derivation::parse(black_box(&small)).unwrap();
        black_box(d.attrs().unwrap());
    });
    println!(
        "a typical {} byte drv: the hook's read (DrvEnv::parse + attrs) {} per call ({calls} \
         calls); the oracle's attrs() {}, Derivation::parse + attrs() {}",
        small.len(),
        micros(hook),
        micros(attrs),
        micros(both),
    );

    // A 5 MiB structured-attrs derivation: the features are in a JSON object in `__json`.
    let mut json =
        br#"{"builder":"/bin/sh","name":"torch","requiredSystemFeatures":["big-parallel","cuda"],"#
            .to_vec();
    json.extend_from_slice(br#""postInstall":"#);
    json.extend_from_slice(&serde_json::to_vec(&String::from_utf8(script(five)).unwrap()).unwrap());
    json.extend_from_slice(br#","system":"x86_64-linux"}"#);
    let structured = derivation(vec![("__json".into(), json)]);
    let structured_drv = Derivation::parse(&structured).unwrap();
    let features = structured_drv.attrs().unwrap().features;
    assert!(features.structured && features.contains(b"cuda"));
    let json_len = structured_drv.env_var(b"__json").unwrap().len();
    let env = DrvEnv::parse(&structured).unwrap();
    let hook = time_iterations(|| {
        black_box(black_box(&env).attrs().unwrap());
    });
    let oracle = time_iterations(|| {
        black_box(black_box(&structured_drv).attrs().unwrap());
    });
    for (reader, times) in [("hook (DrvEnv)", hook), ("oracle (Derivation)", oracle)] {
        println!(
            "{reader}: attrs() of a {:.1} MiB structured-attrs drv ({json_len} byte __json): \
             median {:.2} ms ({:.0} MiB/s of JSON, best {:.2} ms, {} iterations)",
            structured.len() as f64 / MIB,
            median(&times).as_secs_f64() * 1e3,
            json_len as f64 / MIB / median(&times).as_secs_f64(),
            times[0].as_secs_f64() * 1e3,
            times.len(),
        );
    }
    throughput("structured attrs", &structured);
}
