//! Differential test of the `.drv` parser (`cuda_sandbox_hook::drv`) against real Nix.
//!
//! The corpus (`tests/corpus/corpus.nix` and its data files) is instantiated with Debian's Nix
//! 2.8 into the real `/nix/store`, then for every `.drv` the corpus pulls in, our parse is
//! compared on every field with `nix show-derivation`, and its required features (`attrs()`) with what Nix
//! itself makes of `requiredSystemFeatures`. Negative cases come from the same real files: every
//! truncation, and random single-byte corruptions checked against an independent, naive
//! reference parser of the grammar as Nix's `parseDerivation` reads it (commas between list
//! items optional, bytes after the derivation ignored), and hand-made `.drv` files that use
//! that freedom, added with `nix-store --add`.
//!
//! Oracles, and what Nix 2.8 does with bytes that are not UTF-8:
//! - `nix show-derivation` (JSON). Nix 2.8's own JSON writer escapes `"`, `\`, `\n`, `\r`, `\t`
//!   and other bytes below 0x20 (as `\u00XX`) and copies every other byte as is, so a latin-1
//!   value comes out as raw 0xE9 etc.: the output is then not UTF-8, hence not valid JSON, and a
//!   strict reader (`serde_json` into `String`, Python's `json`) rejects it. Nothing is replaced
//!   or lost, so we read it byte-exactly: every JSON string here goes through serde_json's
//!   `deserialize_bytes`, which does not check UTF-8 (type `B` below).
//! - Because that JSON is out of spec exactly where it matters, every environment entry that is
//!   not plain UTF-8 text (and every entry of the `strings` item, and the 5 MiB value) is also
//!   checked against `nix-store --query --binding NAME DRV`, which prints the raw value.
//! - Required system features: `nix-store --realise` on an item whose platform no machine has
//!   ("cuda-sandbox-none") fails before building anything with "a 'cuda-sandbox-none' with
//!   features {a, b} is required to build …": the set Nix parsed (sorted, without duplicates),
//!   or Nix's own error when it rejects the attribute. For every `.drv`, the features are also
//!   derived from the show-derivation JSON the way Nix's source reads them (the env value split on
//!   " \t\n\r"; with structured attrs, the `__json` list), in order and with duplicates.
//!
//! Under newer Nix (`scripts/with-nix 2.26|2.34`, see `testkit::NixVersion`) the same tests run
//! against that Nix's own output: the `.drv` files it writes, and its `nix derivation show`
//! rewritten into 2.8's shape field by field ([`shown_as_legacy`]; 2.26 adds `method`, 2.34 is
//! its `version: 4` format). What those versions refuse is expected, each case alone: the items
//! with non-UTF-8 structured attrs are refused at instantiation, and a `.drv` that is not UTF-8
//! is refused by `derivation show`, so its env is checked with `nix-store --query --binding`
//! only and its features with `nix-store --realise`.
//!
//! Needs Nix and root (no daemon: Nix writes the store directly). Without them the tests print
//! why and pass, unless `CI=true`, where they fail.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use cuda_sandbox_hook::drv::{
    DecidingKey, Derivation, DrvEnv, DrvError, JsonDerivation, RequiredFeatures,
};
use cuda_sandbox_testkit::{lossy, run_ok, DerivationJson, NixVersion};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

const CORPUS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus");

/// Settings for every Nix command: no binary cache, the experimental features the corpus uses,
/// and a machine with no features, no extra platforms and no remote builders, so that
/// `nix-store --realise` of a "cuda-sandbox-none" derivation can only fail, never build.
const NIX_CONFIG: &str = "substituters =\n\
     experimental-features = nix-command ca-derivations impure-derivations\n\
     system-features =\n\
     extra-platforms =\n\
     builders =\n";

/// The platform of the items whose features `nix-store --realise` reports.
const NO_PLATFORM: &[u8] = b"cuda-sandbox-none";

/// Contents of `corpus/latin1.bin`: latin-1 / cp1252 bytes that are not UTF-8, and control bytes.
const LATIN1: &[u8] =
    b"caf\xe9 na\xefve \x80 euro(cp1252) \x93quoted\x94 \xff\xfe\x01ctl\x1besc\x7fdel end";

const MIB: usize = 1024 * 1024;

/// What the required features (`attrs()`) must be for a corpus item.
#[derive(Debug, Clone, Copy)]
enum Features {
    /// Exactly these, in this order, duplicates kept.
    List(&'static [&'static [u8]]),
    /// An error (Nix rejects the attribute too).
    Err,
    /// Nix rejects the derivation's `__json` as a whole (it is not UTF-8); we may read it
    /// anyway, but then must give exactly these bytes.
    ErrOr(&'static [&'static [u8]]),
}

/// Every corpus item (attribute of corpus.nix; the derivation has the same name).
const CORPUS: &[(&str, Features)] = {
    use Features::*;
    &[
        ("big", List(&[])),
        ("ca-floating", List(&[])),
        ("deps", List(&[])),
        ("deps-deferred", List(&[])),
        ("features-duplicates", List(&[b"cuda", b"gpu", b"cuda"])),
        ("features-empty-list", List(&[])),
        ("features-empty-string", List(&[])),
        (
            "features-odd-whitespace",
            List(&[b"cuda", b"gpu", b"big-parallel"]),
        ),
        ("features-single", List(&[b"cuda"])),
        ("features-vtab", List(&[b"cuda\x0b\x0cgpu"])),
        ("fod-flat", List(&[])),
        ("fod-recursive", List(&[])),
        ("impure", List(&[])),
        (
            "latin1",
            List(&[
                b"cuda",
                b"caf\xe9",
                b"na\xefve",
                b"\x80",
                b"euro(cp1252)",
                b"\x93quoted\x94",
                b"\xff\xfe\x01ctl\x1besc\x7fdel",
                b"end",
            ]),
        ),
        ("latin1-key", List(&[])),
        ("many-env", List(&[])),
        ("multi-output", List(&[])),
        ("plain", List(&[])),
        ("strings", List(&[])),
        ("structured", List(&[b"cuda", b"big-parallel"])),
        (
            "structured-duplicates",
            List(&[b"gpu", b"cuda", b"gpu", b" spaced feature "]),
        ),
        ("structured-empty-features", List(&[])),
        ("structured-latin1", ErrOr(&[b"cuda"])),
        (
            "structured-latin1-feature",
            ErrOr(&[
                b"cuda",
                b"xcaf\xe9 na\xefve \x80 euro(cp1252) \x93quoted\x94 \xff\xfe\x01ctl\x1besc\x7fdel end",
            ]),
        ),
        ("structured-no-features", List(&[])),
        ("structured-not-a-list", Err),
        ("structured-null", Err),
    ]
};

// ---------------------------------------------------------------------------------------------
// Gate and corpus set-up
// ---------------------------------------------------------------------------------------------

fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

fn nix_ready() -> Result<(), String> {
    for tool in ["nix-instantiate", "nix-store", "nix"] {
        match Command::new(tool).arg("--version").output() {
            Ok(o) if o.status.success() => {}
            Ok(o) => return Err(format!("`{tool} --version` failed: {}", o.status)),
            Err(e) => return Err(format!("`{tool}` cannot be run: {e}")),
        }
    }
    match effective_uid() {
        Some(0) => Ok(()),
        Some(uid) => Err(format!(
            "not root (uid {uid}): with no daemon, only root can write /nix/store"
        )),
        None => Err("cannot read the effective uid from /proc/self/status".into()),
    }
}

struct Drv {
    path: String,
    bytes: Vec<u8>,
}

struct Corpus {
    /// Holds the GC roots of the instantiated derivations for as long as the tests run.
    _roots: tempfile::TempDir,
    /// The corpus items, in the order of `CORPUS`: (name, index into `drvs`); without the
    /// ones this Nix refuses to instantiate.
    items: Vec<(&'static str, usize)>,
    /// The corpus items this Nix refused to instantiate, as expected
    /// ([`NixVersion::refuses_non_utf8_structured_attrs`]).
    refused: Vec<&'static str>,
    /// Every `.drv` in the closure of the corpus, sorted by path.
    drvs: Vec<Drv>,
    /// `nix show-derivation` of every one of them, by path, in 2.8's shape (see
    /// [`shown_as_legacy`]); without the ones this Nix refuses to show.
    shown: BTreeMap<Vec<u8>, JsonDrv>,
    /// The `.drv` paths this Nix refused to show, as expected
    /// ([`NixVersion::derivation_show_refuses_non_utf8`]).
    not_shown: Vec<String>,
}

impl Corpus {
    fn item(&self, name: &str) -> &Drv {
        let (_, i) = self
            .items
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no corpus item {name}"));
        &self.drvs[*i]
    }
}

/// The corpus, instantiated once for all tests; `None` when Nix or root is missing (skip).
fn corpus() -> Option<&'static Corpus> {
    static CORPUS_ONCE: OnceLock<Option<Corpus>> = OnceLock::new();
    CORPUS_ONCE
        .get_or_init(|| match nix_ready() {
            Ok(()) => Some(instantiate()),
            Err(why) if std::env::var("CI").as_deref() == Ok("true") => panic!(
                "drv_differential needs Debian's nix-bin (nix-instantiate, nix-store, nix) and \
                 root, and CI=true makes their absence a failure: {why}"
            ),
            Err(why) => {
                eprintln!(
                    "SKIPPED drv_differential: {why}. Install Nix (Debian: nix-bin) and run as \
                     root to run it; with CI=true this is a failure."
                );
                None
            }
        })
        .as_ref()
}

/// The Nix in use.
fn nix_version() -> NixVersion {
    NixVersion::current().expect("nix-build --version")
}

/// A Nix command with [`NIX_CONFIG`], and `dynamic-derivations` where this Nix reads
/// `DrvWithVersion` derivations (it refuses them without).
fn nix_command(program: &str) -> Command {
    let mut command = Command::new(program);
    if nix_version().reads_drv_with_version() {
        let config = format!("{NIX_CONFIG}extra-experimental-features = dynamic-derivations\n");
        command.env("NIX_CONFIG", config);
    } else {
        command.env("NIX_CONFIG", NIX_CONFIG);
    }
    command
}

fn instantiate() -> Corpus {
    let corpus_nix = Path::new(CORPUS_DIR).join("corpus.nix");
    let latin1 = std::fs::read(Path::new(CORPUS_DIR).join("latin1.bin")).unwrap();
    assert_eq!(
        latin1, LATIN1,
        "corpus/latin1.bin was altered (line endings? re-encoding?)"
    );

    // The corpus defines exactly the items this test knows about.
    let dir = corpus_nix.to_str().unwrap();
    assert!(!dir.contains(['"', '\\', '$']), "odd characters in {dir}");
    let names = run_ok(nix_command("nix-instantiate").args([
        "--eval",
        "--json",
        "--strict",
        "--expr",
        &format!("builtins.attrNames (import (/. + \"{dir}\"))"),
    ]));
    let names: Vec<String> = serde_json::from_slice(&names.stdout).unwrap();
    let expected: Vec<&str> = CORPUS.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, expected, "corpus.nix and CORPUS disagree");

    // The items whose structured attrs hold non-UTF-8 strings: a Nix that refuses them at
    // instantiation must refuse each one, alone.
    let refused: Vec<&'static str> = if nix_version().refuses_non_utf8_structured_attrs() {
        CORPUS
            .iter()
            .filter(|(_, f)| matches!(f, Features::ErrOr(_)))
            .map(|(n, _)| *n)
            .collect()
    } else {
        Vec::new()
    };
    for name in &refused {
        let out = nix_command("nix-instantiate")
            .arg(&corpus_nix)
            .args(["-A", name])
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && log.contains("UTF-8"),
            "{name}: Nix {} should refuse non-UTF-8 structured attrs ({}):\n{log}",
            nix_version(),
            out.status
        );
    }
    let kept: Vec<&'static str> = expected
        .iter()
        .copied()
        .filter(|n| !refused.contains(n))
        .collect();

    // Instantiate everything in one go, with GC roots in a temporary directory.
    let roots = tempfile::tempdir().unwrap();
    let mut command = nix_command("nix-instantiate");
    command
        .arg(&corpus_nix)
        .arg("--add-root")
        .arg(roots.path().join("root"));
    for name in &kept {
        command.args(["-A", name]);
    }
    let out = run_ok(&mut command);
    let root_links: Vec<PathBuf> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(PathBuf::from)
        .collect();
    assert_eq!(root_links.len(), kept.len(), "one derivation per item");
    let item_paths: Vec<String> = root_links
        .iter()
        .zip(&kept)
        .map(|(link, name)| {
            let path = std::fs::read_link(link).unwrap();
            let path = path.to_str().unwrap().to_string();
            assert!(path.ends_with(&format!("-{name}.drv")), "{name}: {path}");
            path
        })
        .collect();

    // Every .drv the corpus pulls in.
    let out = run_ok(
        nix_command("nix-store")
            .args(["--query", "--requisites"])
            .args(&item_paths),
    );
    let mut paths: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|p| p.ends_with(".drv"))
        .map(str::to_string)
        .collect();
    paths.sort();
    paths.dedup();
    for p in &item_paths {
        assert!(paths.contains(p), "{p} missing from the closure");
    }
    let drvs: Vec<Drv> = paths
        .iter()
        .map(|path| Drv {
            path: path.clone(),
            bytes: std::fs::read(path).unwrap_or_else(|e| panic!("reading {path}: {e}")),
        })
        .collect();
    let items = kept
        .iter()
        .zip(&item_paths)
        .map(|(name, path)| (*name, paths.iter().position(|p| p == path).unwrap()))
        .collect();

    // The oracle, for all of them at once.
    let (shown, not_shown) = show_derivations(&paths);
    assert_eq!(
        shown.len() + not_shown.len(),
        drvs.len(),
        "show-derivation shows every .drv"
    );

    Corpus {
        _roots: roots,
        items,
        refused,
        drvs,
        shown,
        not_shown,
    }
}

/// This Nix's JSON of the derivations `paths` (`nix show-derivation`, `nix derivation show`),
/// in 2.8's shape, by path; and the paths it refused to show. A Nix that refuses derivations
/// holding non-UTF-8 strings ([`NixVersion::derivation_show_refuses_non_utf8`]) must refuse
/// exactly those whose `.drv` is not UTF-8, each one alone; the others are shown at once.
fn show_derivations(paths: &[String]) -> (BTreeMap<Vec<u8>, JsonDrv>, Vec<String>) {
    let version = nix_version();
    let show = || {
        let mut command = nix_command("nix");
        command
            .args(["--extra-experimental-features", "nix-command"])
            .args(version.derivation_show());
        command
    };
    let (showable, not_shown): (Vec<String>, Vec<String>) = if version
        .derivation_show_refuses_non_utf8()
    {
        paths.iter().cloned().partition(|p| {
            std::str::from_utf8(&std::fs::read(p).unwrap_or_else(|e| panic!("{p}: {e}"))).is_ok()
        })
    } else {
        (paths.to_vec(), Vec::new())
    };
    for path in &not_shown {
        let out = show().arg(path).output().unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && log.contains("UTF-8"),
            "{path} is not UTF-8: Nix {version} should refuse to show it ({}):\n{log}",
            out.status
        );
    }
    if showable.is_empty() {
        return (BTreeMap::new(), not_shown);
    }
    let out = run_ok(show().args(&showable));
    let shown = shown_as_legacy(version.derivation_json(), &out.stdout);
    let shown: BTreeMap<Vec<u8>, JsonDrv> = shown.0.into_iter().collect();
    for path in &showable {
        assert!(shown.contains_key(path.as_bytes()), "{path} not shown");
    }
    assert_eq!(
        shown.len(),
        showable.len(),
        "more derivations shown than asked"
    );
    (shown, not_shown)
}

/// `json` as Nix 2.8's show-derivation would have printed it, read byte-exactly. A newer
/// format ([`DerivationJson`]) is rewritten field by field, each field checked on the way:
/// store paths are given back their store directory, an output's `method` goes back into its
/// `hashAlgo` (`nar` is `r:`, `text` is `text:`), an SRI hash back to hex, `inputs` back to
/// `inputDrvs`/`inputSrcs`, `structuredAttrs` back to the env entry `__json` (compact, keys
/// sorted: what Nix writes in the `.drv`); `name` must be the env's `name` (or, with
/// structured attrs, theirs). Any other field is kept, so `JsonDrv` refuses it.
fn shown_as_legacy(format: DerivationJson, json: &[u8]) -> Pairs<JsonDrv> {
    use serde_json::{Map, Value};
    const STORE: &str = "/nix/store/";
    let understood = |json: &[u8]| -> Pairs<JsonDrv> {
        serde_json::from_slice(json)
            .unwrap_or_else(|e| panic!("show-derivation output not understood: {e}"))
    };
    if format == DerivationJson::Legacy {
        return understood(json);
    }
    let value: Value = serde_json::from_slice(json)
        .unwrap_or_else(|e| panic!("Nix {format:?} printed invalid JSON: {e}"));
    let v4 = format == DerivationJson::V4;
    let full = |p: &str| -> String {
        if v4 {
            assert!(
                !p.contains('/'),
                "{format:?}: a store path with a directory: {p}"
            );
            format!("{STORE}{p}")
        } else {
            assert!(
                p.starts_with(STORE),
                "{format:?}: a store path without one: {p}"
            );
            p.to_string()
        }
    };
    let top = if v4 {
        let mut top = value.as_object().cloned().expect("an object");
        assert_eq!(top.remove("version"), Some(Value::from(4)), "{format:?}");
        let drvs = top.remove("derivations").expect("derivations");
        assert!(
            top.is_empty(),
            "{format:?}: unknown top-level fields {top:?}"
        );
        drvs
    } else {
        value
    };
    let mut legacy = Map::new();
    for (key, drv) in top.as_object().expect("an object of derivations") {
        let mut drv = drv.as_object().cloned().expect("a derivation object");
        if v4 {
            assert_eq!(drv.remove("version"), Some(Value::from(4)), "{key}");
            let inputs = drv.remove("inputs").expect("inputs");
            let mut inputs = inputs.as_object().cloned().expect("inputs object");
            let drvs = inputs.remove("drvs").expect("inputs.drvs");
            let srcs = inputs.remove("srcs").expect("inputs.srcs");
            assert!(inputs.is_empty(), "{key}: unknown inputs {inputs:?}");
            let drvs: Map<String, Value> = drvs
                .as_object()
                .expect("inputs.drvs object")
                .iter()
                .map(|(p, v)| (full(p), v.clone()))
                .collect();
            let srcs: Vec<Value> = srcs
                .as_array()
                .expect("inputs.srcs array")
                .iter()
                .map(|p| Value::from(full(p.as_str().expect("a path"))))
                .collect();
            drv.insert("inputDrvs".into(), Value::Object(drvs));
            drv.insert("inputSrcs".into(), Value::Array(srcs));
            if let Some(attrs) = drv.remove("structuredAttrs") {
                let env = drv
                    .get_mut("env")
                    .and_then(Value::as_object_mut)
                    .expect("env");
                assert!(
                    !env.contains_key("__json"),
                    "{key}: __json and structuredAttrs"
                );
                let text = serde_json::to_string(&attrs).unwrap();
                env.insert("__json".into(), Value::from(text));
            }
        }
        // `name`: the derivation's name, which the `.drv` holds only in its env (or in the
        // structured attrs there).
        let name = drv.remove("name").expect("name");
        let env = &drv["env"];
        let env_name = match (env.get("name"), env.get("__json").and_then(Value::as_str)) {
            (Some(n), _) => n.clone(),
            (None, Some(attrs)) => serde_json::from_str::<Value>(attrs).unwrap()["name"].clone(),
            (None, None) => Value::Null,
        };
        assert_eq!(name, env_name, "{key}: name");
        // An input derivation: its outputs; nothing dynamic in this corpus.
        let inputs = drv
            .get_mut("inputDrvs")
            .and_then(Value::as_object_mut)
            .expect("inputDrvs");
        for (p, entry) in inputs.iter_mut() {
            let mut e = entry.as_object().cloned().expect("an input object");
            assert_eq!(
                e.remove("dynamicOutputs"),
                Some(Value::Object(Map::new())),
                "{key}: {p}"
            );
            let outputs = e.remove("outputs").expect("outputs");
            assert!(e.is_empty(), "{key}: {p}: unknown fields {e:?}");
            *entry = outputs;
        }
        let env = drv["env"].as_object().cloned().expect("env");
        let outputs = drv
            .get_mut("outputs")
            .and_then(Value::as_object_mut)
            .expect("outputs");
        for (name, output) in outputs.iter_mut() {
            let mut o = output.as_object().cloned().expect("an output object");
            let mut out = Map::new();
            // 2.34 leaves out a fixed output's path (it follows from the hash); the env entry
            // of the output names it, as in the `.drv`.
            if v4 && o.contains_key("hash") && !o.contains_key("path") {
                let path = env
                    .get(name)
                    .and_then(Value::as_str)
                    .expect("the output's env");
                o.insert(
                    "path".into(),
                    Value::from(path.strip_prefix(STORE).unwrap()),
                );
            }
            let prefix = match o.remove("method").as_ref().and_then(Value::as_str) {
                None | Some("flat") => "",
                Some("nar") => "r:",
                Some("text") => "text:",
                Some(m) => panic!("{key}: {name}: method {m}"),
            };
            if let Some(path) = o.remove("path") {
                out.insert("path".into(), Value::from(full(path.as_str().unwrap())));
            }
            let algo = o
                .remove("hashAlgo")
                .map(|a| a.as_str().unwrap().to_string());
            let hash = o.remove("hash").map(|h| h.as_str().unwrap().to_string());
            let (algo, hash) = match (algo, hash) {
                (algo, Some(h)) if h.contains('-') => {
                    let (a, b64) = h.split_once('-').unwrap();
                    assert!(algo.is_none() || algo.as_deref() == Some(a), "{key}: {h}");
                    (Some(a.to_string()), Some(hex(&base64(b64))))
                }
                other => other,
            };
            if let Some(a) = algo {
                out.insert("hashAlgo".into(), Value::from(format!("{prefix}{a}")));
            }
            if let Some(h) = hash {
                out.insert("hash".into(), Value::from(h));
            }
            if let Some(impure) = o.remove("impure") {
                out.insert("impure".into(), impure);
            }
            assert!(o.is_empty(), "{key}: {name}: unknown output fields {o:?}");
            *output = Value::Object(out);
        }
        legacy.insert(full(key), Value::Object(drv));
    }
    understood(&serde_json::to_vec(&Value::Object(legacy)).unwrap())
}

/// Standard base64 (with or without padding), as SRI hashes hold it.
fn base64(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {text}"),
        }
    };
    let digits: Vec<u32> = text.trim_end_matches('=').bytes().map(value).collect();
    let mut out = Vec::new();
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, d)| acc | d << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// ---------------------------------------------------------------------------------------------
// Reading Nix 2.8's JSON byte-exactly
// ---------------------------------------------------------------------------------------------

/// A JSON string as bytes, without requiring UTF-8 (serde_json's `deserialize_bytes` on a string
/// unescapes it and does not validate it).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
struct B(Vec<u8>);

impl<'de> Deserialize<'de> for B {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BytesVisitor;
        impl Visitor<'_> for BytesVisitor {
            type Value = B;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON string holding any bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<B, E> {
                Ok(B(v.to_vec()))
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<B, E> {
                Ok(B(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<B, E> {
                Ok(B(v.as_bytes().to_vec()))
            }
        }
        deserializer.deserialize_bytes(BytesVisitor)
    }
}

/// A JSON object as its entries in document order, keys as bytes.
#[derive(Debug)]
struct Pairs<V>(Vec<(Vec<u8>, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Pairs<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PairsVisitor<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for PairsVisitor<V> {
            type Value = Pairs<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pairs<V>, A::Error> {
                let mut entries = Vec::new();
                while let Some((key, value)) = map.next_entry::<B, V>()? {
                    entries.push((key.0, value));
                }
                Ok(Pairs(entries))
            }
        }
        deserializer.deserialize_map(PairsVisitor(std::marker::PhantomData))
    }
}

/// One output in Nix 2.8's show-derivation JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOutput {
    path: Option<B>,
    #[serde(rename = "hashAlgo")]
    hash_algo: Option<B>,
    hash: Option<B>,
    /// Impure derivations: the `.drv` has the hash `impure`, the JSON `"impure": true`.
    #[serde(default)]
    impure: bool,
}

/// One derivation in Nix 2.8's show-derivation JSON (unknown fields are an error, so that a
/// field we do not compare cannot go unnoticed).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDrv {
    outputs: Pairs<JsonOutput>,
    #[serde(rename = "inputSrcs")]
    input_srcs: Vec<B>,
    #[serde(rename = "inputDrvs")]
    input_drvs: Pairs<Vec<B>>,
    /// `system` in Nix 2.8 (some tools call it `platform`).
    #[serde(alias = "platform")]
    system: B,
    builder: B,
    args: Vec<B>,
    env: Pairs<B>,
}

// ---------------------------------------------------------------------------------------------
// A normal form both sides are compared in
// ---------------------------------------------------------------------------------------------

type Bytes = Vec<u8>;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Norm {
    /// (name, path, hashAlgo, hash)
    outputs: Vec<(Bytes, Bytes, Bytes, Bytes)>,
    input_drvs: Vec<(Bytes, Vec<Bytes>)>,
    input_srcs: Vec<Bytes>,
    system: Bytes,
    builder: Bytes,
    args: Vec<Bytes>,
    env: Vec<(Bytes, Bytes)>,
}

fn norm_ours(d: &Derivation<'_>) -> Norm {
    Norm {
        outputs: d
            .outputs
            .iter()
            .map(|o| {
                (
                    o.name.to_vec(),
                    o.path.to_vec(),
                    o.hash_algo.to_vec(),
                    o.hash.to_vec(),
                )
            })
            .collect(),
        input_drvs: d
            .input_drvs
            .iter()
            .map(|i| {
                (
                    i.path.to_vec(),
                    i.outputs.iter().map(|o| o.to_vec()).collect(),
                )
            })
            .collect(),
        input_srcs: d.input_srcs.iter().map(|s| s.to_vec()).collect(),
        system: d.system.to_vec(),
        builder: d.builder.to_vec(),
        args: d.args.iter().map(|s| s.to_vec()).collect(),
        env: d
            .env
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect(),
    }
}

fn norm_json(j: &JsonDrv) -> Norm {
    let bytes = |b: &Option<B>| b.as_ref().map(|b| b.0.clone()).unwrap_or_default();
    Norm {
        outputs: j
            .outputs
            .0
            .iter()
            .map(|(name, o)| {
                let hash = if o.impure {
                    assert!(o.hash.is_none(), "impure output with a hash");
                    b"impure".to_vec()
                } else {
                    bytes(&o.hash)
                };
                (name.clone(), bytes(&o.path), bytes(&o.hash_algo), hash)
            })
            .collect(),
        input_drvs: j
            .input_drvs
            .0
            .iter()
            .map(|(p, outs)| (p.clone(), outs.iter().map(|o| o.0.clone()).collect()))
            .collect(),
        input_srcs: j.input_srcs.iter().map(|s| s.0.clone()).collect(),
        system: j.system.0.clone(),
        builder: j.builder.0.clone(),
        args: j.args.iter().map(|s| s.0.clone()).collect(),
        env: j
            .env
            .0
            .iter()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect(),
    }
}

/// Bytes for a failure message: escaped, and cut short when long.
fn show(b: &[u8]) -> String {
    const MAX: usize = 160;
    let mut s: String = b
        .iter()
        .take(MAX)
        .flat_map(|&c| std::ascii::escape_default(c))
        .map(char::from)
        .collect();
    if b.len() > MAX {
        s.push_str(&format!("… ({} bytes)", b.len()));
    }
    format!("\"{s}\"")
}

/// Field-by-field comparison, naming the first difference (a whole `Norm` of the 5 MiB
/// derivation is too big for a failure message).
fn assert_same(what: &str, ours: &Norm, nix: &Norm) {
    fn list<T: PartialEq>(
        what: &str,
        field: &str,
        a: &[T],
        b: &[T],
        show_item: impl Fn(&T) -> String,
    ) {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                x == y,
                "{what}: {field}[{i}] differs: ours {} nix {}",
                show_item(x),
                show_item(y)
            );
        }
        assert_eq!(a.len(), b.len(), "{what}: {field} has a different length");
    }
    list(what, "outputs", &ours.outputs, &nix.outputs, |o| {
        format!(
            "({}, {}, {}, {})",
            show(&o.0),
            show(&o.1),
            show(&o.2),
            show(&o.3)
        )
    });
    list(what, "inputDrvs", &ours.input_drvs, &nix.input_drvs, |d| {
        let outs: Vec<String> = d.1.iter().map(|o| show(o)).collect();
        format!("({}, [{}])", show(&d.0), outs.join(","))
    });
    list(what, "inputSrcs", &ours.input_srcs, &nix.input_srcs, |s| {
        show(s)
    });
    assert!(
        ours.system == nix.system,
        "{what}: system {} vs {}",
        show(&ours.system),
        show(&nix.system)
    );
    assert!(
        ours.builder == nix.builder,
        "{what}: builder {} vs {}",
        show(&ours.builder),
        show(&nix.builder)
    );
    list(what, "args", &ours.args, &nix.args, |s| show(s));
    list(what, "env", &ours.env, &nix.env, |(k, v)| {
        format!("{} = {}", show(k), show(v))
    });
    assert!(ours == nix, "{what}: differs");
}

// ---------------------------------------------------------------------------------------------
// Field-by-field agreement with `nix show-derivation`
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// requiredSystemFeatures
// ---------------------------------------------------------------------------------------------

/// What Nix's source does with the env shown by show-derivation: `__json` wins; its
/// `requiredSystemFeatures` must be absent or a list of strings; without it the plain entry is
/// split on " \t\n\r". `Err(true)` when `__json` is not UTF-8 (Nix's JSON reader rejects it).
fn features_from_json_env(env: &Pairs<B>) -> Result<Vec<Bytes>, bool> {
    let get = |name: &[u8]| env.0.iter().find(|(k, _)| k == name).map(|(_, v)| &v.0);
    if let Some(json) = get(b"__json") {
        let value: serde_json::Value =
            serde_json::from_slice(json).map_err(|_| std::str::from_utf8(json).is_err())?;
        return match value.get("requiredSystemFeatures") {
            None => Ok(Vec::new()),
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .map(|i| i.as_str().map(|s| s.as_bytes().to_vec()).ok_or(false))
                .collect(),
            Some(_) => Err(false),
        };
    }
    Ok(get(b"requiredSystemFeatures")
        .map(|v| {
            v.split(|b| b" \t\n\r".contains(b))
                .filter(|t| !t.is_empty())
                .map(<[u8]>::to_vec)
                .collect()
        })
        .unwrap_or_default())
}

/// The features of a `__json` that is not UTF-8, read byte-exactly.
fn features_from_json_bytes(json: &[u8]) -> Vec<Bytes> {
    #[derive(Deserialize)]
    struct Attrs {
        #[serde(rename = "requiredSystemFeatures", default)]
        features: Vec<B>,
    }
    let attrs: Attrs = serde_json::from_slice(json).unwrap();
    attrs.features.into_iter().map(|b| b.0).collect()
}

/// Asks Nix which features it requires for `drv` (whose platform no machine has, so the realise
/// fails before anything is built): `Ok(set)` from the set Nix reports
/// ([`NixVersion::required_features_reported`]), or `Err(message)` when Nix rejects the
/// derivation's features.
fn features_from_nix_realise(drv: &str) -> Result<BTreeSet<Bytes>, String> {
    let out = nix_command("nix-store")
        .args(["--realise", drv])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{drv} was built?!");
    let stderr = out.stderr;
    if let Some(list) = nix_version().required_features_reported(&stderr) {
        return Ok(if list.is_empty() {
            BTreeSet::new()
        } else {
            split_bytes(&list, b", ").into_iter().collect()
        });
    }
    let text = String::from_utf8_lossy(&stderr).into_owned();
    let known = [
        "must be a list of strings",
        "cannot process __json attribute",
        // 2.34
        "while parsing attribute \"requiredSystemFeatures\"",
    ];
    assert!(
        known.iter().any(|k| text.contains(k)),
        "{drv}: unexpected answer from nix-store --realise:\n{text}"
    );
    Err(text)
}

/// Nix prints its messages through `filterANSIEscapes`, which drops escape sequences: ESC `[`
/// parameters, intermediates and a final byte; or ESC and one byte in 0x40..=0x5f. (It also
/// expands tabs and drops `\r`; no feature that goes through here holds those.) So the realise
/// message shows a feature with an ESC byte without it; the JSON oracle has the exact bytes.
fn as_nix_logs_it(feature: &[u8]) -> Bytes {
    assert!(!feature.contains(&b'\t') && !feature.contains(&b'\r'));
    let mut out = Vec::new();
    let mut i = 0;
    while i < feature.len() {
        if feature[i] != 0x1b {
            out.push(feature[i]);
            i += 1;
            continue;
        }
        i += 1;
        if feature.get(i) == Some(&b'[') {
            i += 1;
            while feature.get(i).is_some_and(|b| (0x30..=0x3f).contains(b)) {
                i += 1;
            }
            while feature.get(i).is_some_and(|b| (0x20..=0x2f).contains(b)) {
                i += 1;
            }
            if feature.get(i).is_some_and(|b| (0x40..=0x7e).contains(b)) {
                i += 1;
            }
        } else if feature.get(i).is_some_and(|b| (0x40..=0x5f).contains(b)) {
            i += 1;
        }
    }
    out
}

fn split_bytes(mut s: &[u8], sep: &[u8]) -> Vec<Bytes> {
    let mut parts = Vec::new();
    while let Some(p) = s.windows(sep.len()).position(|w| w == sep) {
        parts.push(s[..p].to_vec());
        s = &s[p + sep.len()..];
    }
    parts.push(s.to_vec());
    parts
}

// ---------------------------------------------------------------------------------------------
// The corpus really covers what it claims
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Negative cases from real files: truncations and corruptions
// ---------------------------------------------------------------------------------------------

/// A deliberately naive reference parser for the same grammar (one byte at a time, no memchr,
/// no borrowing), to tell whether a corrupted file is still a valid derivation and what it
/// holds. Strings follow Nix's reader: `\n` `\r` `\t` are control characters, a backslash before
/// any other byte stands for that byte.
mod reference {
    use super::{Bytes, Norm};

    struct R<'a> {
        b: &'a [u8],
        i: usize,
    }

    /// A `Derive(…)` derivation, bytes after it ignored, as Nix reads it.
    pub fn parse(b: &[u8]) -> Option<Norm> {
        R { b, i: 0 }.drv()
    }

    impl R<'_> {
        fn lit(&mut self, s: &[u8]) -> Option<()> {
            if self.b.get(self.i..self.i + s.len()) == Some(s) {
                self.i += s.len();
                Some(())
            } else {
                None
            }
        }

        fn byte(&mut self) -> Option<u8> {
            let c = *self.b.get(self.i)?;
            self.i += 1;
            Some(c)
        }

        fn str(&mut self) -> Option<Bytes> {
            self.lit(b"\"")?;
            let mut out = Vec::new();
            loop {
                match self.byte()? {
                    b'"' => return Some(out),
                    b'\\' => out.push(match self.byte()? {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        other => other,
                    }),
                    other => out.push(other),
                }
            }
        }

        /// Nix's `endOfList` loop: before each item a `,` is skipped, else `]` ends the list.
        fn list<T>(&mut self, item: impl Fn(&mut Self) -> Option<T>) -> Option<Vec<T>> {
            self.lit(b"[")?;
            let mut items = Vec::new();
            loop {
                if self.lit(b",").is_none() && self.lit(b"]").is_some() {
                    return Some(items);
                }
                items.push(item(self)?);
            }
        }

        fn tuple<const N: usize>(&mut self) -> Option<[Bytes; N]> {
            self.lit(b"(")?;
            let mut out: [Bytes; N] = std::array::from_fn(|_| Vec::new());
            for (i, slot) in out.iter_mut().enumerate() {
                if i > 0 {
                    self.lit(b",")?;
                }
                *slot = self.str()?;
            }
            self.lit(b")")?;
            Some(out)
        }

        fn drv(&mut self) -> Option<Norm> {
            self.lit(b"Derive(")?;
            let outputs = self.list(|r| r.tuple::<4>().map(|[a, b, c, d]| (a, b, c, d)))?;
            self.lit(b",")?;
            let input_drvs = self.list(|r| {
                r.lit(b"(")?;
                let path = r.str()?;
                r.lit(b",")?;
                let outs = r.list(R::str)?;
                r.lit(b")")?;
                Some((path, outs))
            })?;
            self.lit(b",")?;
            let input_srcs = self.list(R::str)?;
            self.lit(b",")?;
            let system = self.str()?;
            self.lit(b",")?;
            let builder = self.str()?;
            self.lit(b",")?;
            let args = self.list(R::str)?;
            self.lit(b",")?;
            let env = self.list(|r| r.tuple::<2>().map(|[k, v]| (k, v)))?;
            self.lit(b")")?;
            Some(Norm {
                outputs,
                input_drvs,
                input_srcs,
                system,
                builder,
                args,
                env,
            })
        }
    }
}

/// Parses `input` with our parser, turning a panic into a test failure that names the input.
/// Checks that an error's offset lies within the input, and that features of an accepted
/// derivation can be asked for without a panic.
fn parse_checked(input: &[u8], what: &dyn Fn() -> String) -> Option<Norm> {
    let result = catch_unwind(AssertUnwindSafe(|| match Derivation::parse(input) {
        Ok(d) => {
            let _ = d.attrs().map(|a| a.features);
            Ok(norm_ours(&d))
        }
        Err(e) => Err(e),
    }));
    match result {
        Err(_) => panic!("the parser panicked on {}", what()),
        Ok(Ok(norm)) => Some(norm),
        Ok(Err(e)) => {
            let offset = e.offset().expect("a parse error has an offset");
            assert!(
                offset <= input.len(),
                "{}: error offset {offset} beyond the input ({} bytes): {e}",
                what(),
                input.len()
            );
            None
        }
    }
}

/// splitmix64: a small deterministic generator, so that a failure can be reproduced.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn seed() -> u64 {
    std::env::var("DRV_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_cafe)
}

// ---------------------------------------------------------------------------------------------
// Property: generated derivations read the same by us and by Nix
// ---------------------------------------------------------------------------------------------

/// Bytes a generated value is drawn from: what makes escaping and splitting hard, plus
/// ordinary text. No NUL: Nix strings cannot hold one.
const HARD: &[&[u8]] = &[
    b"\"",
    b"\\",
    b"\n",
    b"\t",
    b"\r",
    b"${",
    b"$",
    b"{",
    b"}",
    b"=",
    b" ",
    b"cuda",
    b"gpu",
    b"a",
    b"Z",
    b"0",
    b"-",
    b"\xc3\xa9",
    b"\xe2\x82\xac",
    b"\xf0\x9f\x90\x8d",
    b"\x01",
    b"\x7f",
];
/// Non-UTF-8 bytes, only where structured attrs do not have to carry them.
const LATIN1_BYTES: &[&[u8]] = &[b"\xe9", b"\x80", b"\xff", b"\x93"];

fn generated_value(rng: &mut Rng, utf8_only: bool) -> Vec<u8> {
    let len = rng.below(24);
    let mut v = Vec::new();
    for _ in 0..len {
        if !utf8_only && rng.below(8) == 0 {
            v.extend_from_slice(LATIN1_BYTES[rng.below(LATIN1_BYTES.len())]);
        } else {
            v.extend_from_slice(HARD[rng.below(HARD.len())]);
        }
    }
    v
}

/// One generated derivation as a Nix expression; values live in files read with
/// `builtins.readFile` so that any byte reaches the `.drv` unchanged.
fn generated_case(rng: &mut Rng, i: usize, dir: &Path) -> String {
    let structured = rng.below(3) == 0;
    let mut file = 0;
    let mut value = |rng: &mut Rng| {
        let path = dir.join(format!("case{i}-{file}.bin"));
        file += 1;
        std::fs::write(&path, generated_value(rng, structured)).unwrap();
        format!("(builtins.readFile (/. + \"{}\"))", path.display())
    };
    let mut attrs = vec![
        format!("name = \"gen-{i}\";"),
        "system = \"cuda-sandbox-none\";".to_string(),
        "builder = \"/bin/sh\";".to_string(),
    ];
    let outputs = ["out", "dev", "lib"];
    let n_outputs = 1 + rng.below(3);
    let chosen: Vec<String> = outputs[..n_outputs]
        .iter()
        .map(|o| format!("\"{o}\""))
        .collect();
    attrs.push(format!("outputs = [ {} ];", chosen.join(" ")));
    let args: Vec<String> = (0..rng.below(4)).map(|_| value(rng)).collect();
    attrs.push(format!("args = [ {} ];", args.join(" ")));
    for k in 0..rng.below(6) {
        attrs.push(format!("\"v{k}-{}\" = {};", rng.below(1000), value(rng)));
    }
    match rng.below(4) {
        0 => {}
        1 => {
            let tokens = ["cuda", "gpu", "kvm", "big-parallel", "x=y"];
            let spaces = [" ", "  ", "\\t", "\\n", "\\r\\n", ""];
            let mut s = String::new();
            for _ in 0..rng.below(5) {
                s.push_str(spaces[rng.below(spaces.len())]);
                s.push_str(tokens[rng.below(tokens.len())]);
            }
            attrs.push(format!("requiredSystemFeatures = \"{s}\";"));
        }
        _ => {
            let list: Vec<String> = (0..rng.below(4))
                .map(|_| ["\"cuda\"", "\"gpu\"", "\"kvm\""][rng.below(3)].to_string())
                .collect();
            attrs.push(format!("requiredSystemFeatures = [ {} ];", list.join(" ")));
        }
    }
    if structured {
        attrs.push("__structuredAttrs = true;".to_string());
    }
    format!("  gen{i} = derivation {{ {} }};\n", attrs.join(" "))
}

// ---------------------------------------------------------------------------------------------
// Repeated keys: read as Nix reads them, and refused where the hook decides on them
// ---------------------------------------------------------------------------------------------

/// The bases of the repeated-key cases: derivations no machine can build (so that `nix-store
/// --realise` reports the features Nix requires), each the `.drv` a repeat is written into.
/// The `inner-*` ones set `__json` as a plain attribute, which Nix takes as structured attrs,
/// so that the repeat is inside its object.
const REPEATS_NIX: &str = r#"
let
  base = name: attrs: derivation ({ inherit name; system = "cuda-sandbox-none"; builder = "/bin/sh"; } // attrs);
in {
  plain = base "repeat-plain" { requiredSystemFeatures = "kvm"; cudaSandboxGpus = "1"; other = "last"; };
  structured = base "repeat-structured" { __structuredAttrs = true; requiredSystemFeatures = [ "kvm" ]; other = "last"; };
  inner-features = base "repeat-inner-features" { __json = INNER_FEATURES; };
  inner-gpus = base "repeat-inner-gpus" { __json = INNER_GPUS; };
  inner-other = base "repeat-inner-other" { __json = INNER_OTHER; };
}
"#;

/// The `__json` of the `inner-*` bases: a member repeated, the last value Nix's.
const INNER: &[(&str, &str)] = &[
    (
        "INNER_FEATURES",
        r#"{"requiredSystemFeatures":["cuda"],"requiredSystemFeatures":["kvm"]}"#,
    ),
    (
        "INNER_GPUS",
        r#"{"cudaSandboxGpus":2,"requiredSystemFeatures":["kvm"],"cudaSandboxGpus":1}"#,
    ),
    (
        "INNER_OTHER",
        r#"{"other":"first","requiredSystemFeatures":["kvm"],"other":"last"}"#,
    ),
];

/// One repeated-key case.
struct Repeat {
    /// The base (an attribute of [`REPEATS_NIX`]).
    base: &'static str,
    /// An env entry (key, value as the ATerm writes it) put before the base's own entry of
    /// that key; `None` for the `inner-*` bases, whose repeat is inside `__json`.
    first: Option<(&'static str, &'static str)>,
    /// The key the hook must refuse, or `None` when it reads the derivation as Nix does.
    refused: Option<&'static str>,
}

const REPEATS: &[Repeat] = &[
    Repeat {
        base: "plain",
        first: Some(("other", "first")),
        refused: None,
    },
    Repeat {
        base: "plain",
        first: Some(("requiredSystemFeatures", "cuda")),
        refused: Some("requiredSystemFeatures"),
    },
    Repeat {
        base: "plain",
        first: Some(("cudaSandboxGpus", "8")),
        refused: Some("cudaSandboxGpus"),
    },
    Repeat {
        base: "structured",
        first: Some(("__json", r#"{\"requiredSystemFeatures\":[\"cuda\"]}"#)),
        refused: Some("__json"),
    },
    Repeat {
        base: "inner-features",
        first: None,
        refused: Some("requiredSystemFeatures"),
    },
    Repeat {
        base: "inner-gpus",
        first: None,
        refused: Some("cudaSandboxGpus"),
    },
    Repeat {
        base: "inner-other",
        first: None,
        refused: None,
    },
];

/// The required features of a derivation given as JSON, as the hook reads them.
fn json_features(json: &[u8]) -> Result<RequiredFeatures<'static>, DrvError> {
    JsonDerivation::parse(json)
        .and_then(|d| d.attrs())
        .map(|a| a.features)
}

/// A string as Nix writes it into a `.drv`.
fn aterm_quoted(s: &[u8]) -> Vec<u8> {
    let mut out = vec![b'"'];
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
    out
}

/// `bytes` with `insertion` put at the one place `needle` occurs, before it or after it.
fn spliced(bytes: &[u8], needle: &[u8], insertion: &[u8], before: bool) -> Vec<u8> {
    let at: Vec<usize> = (0..bytes.len())
        .filter(|&i| bytes[i..].starts_with(needle))
        .collect();
    assert_eq!(at.len(), 1, "{} in {}", show(needle), show(bytes));
    let at = if before { at[0] } else { at[0] + needle.len() };
    [&bytes[..at], insertion, &bytes[at..]].concat()
}

/// Where the env entry that starts with `needle` (`("key",`, once in `bytes`) ends: just
/// after its `)`.
fn entry_end(bytes: &[u8], needle: &[u8]) -> usize {
    let start = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
        + needle.len();
    assert_eq!(bytes[start], b'"');
    let mut i = start + 1;
    while bytes[i] != b'"' {
        i += if bytes[i] == b'\\' { 2 } else { 1 };
    }
    assert_eq!(bytes[i + 1], b')');
    i + 2
}

/// Adds `bytes` to the store as the `.drv` `name` (`nix-store --add`): its path, or Nix's
/// error.
fn add_drv(dir: &Path, name: &str, bytes: &[u8]) -> Result<String, String> {
    let sub = tempfile::tempdir_in(dir).unwrap();
    let file = sub.path().join(name);
    std::fs::write(&file, bytes).unwrap();
    let out = nix_command("nix-store")
        .arg("--add")
        .arg(&file)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap().trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The one derivation of what this Nix's `show-derivation` / `derivation show` printed for
/// `path`, as the JSON object Nix writes for it (the form a hook may be given).
fn nix_json_of(path: &str) -> serde_json::Value {
    let out = run_ok(
        nix_command("nix")
            .args(["--extra-experimental-features", "nix-command"])
            .args(nix_version().derivation_show())
            .arg(path),
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let drvs = value.get("derivations").unwrap_or(&value);
    let drvs = drvs.as_object().expect("an object of derivations");
    assert_eq!(drvs.len(), 1, "{path}");
    drvs.values().next().unwrap().clone()
}

/// Our env, each key with its last value: how Nix reads it.
fn last_of_each(d: &Derivation<'_>) -> BTreeMap<Bytes, Bytes> {
    d.env
        .iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect()
}

/// Asserts that `result` (a reading of the features) is the hook refusing `key`.
fn assert_refuses<T: fmt::Debug>(result: Result<T, DrvError>, key: &str, what: &str) {
    let want = match key {
        "requiredSystemFeatures" => DecidingKey::Features,
        "__json" => DecidingKey::StructuredAttrs,
        "cudaSandboxGpus" => DecidingKey::Gpus,
        other => panic!("{what}: {other} is not a key the hook decides on"),
    };
    match result {
        Ok(v) => panic!("{what}: read {v:?}; it repeats {key}, which must be refused"),
        Err(e) => assert!(
            matches!(e, DrvError::Repeated { key, .. } if key == want),
            "{what}: {e}"
        ),
    }
}

// The tests, one module per tier (docs/testing.md).
mod nix_versions;
