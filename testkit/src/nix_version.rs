//! Which Nix the tests run under, and every way Nix versions differ where a test depends on it.
//!
//! The tests run under Debian bookworm's Nix 2.8 (the host's), and under trixie's 2.26 and
//! sid's 2.34 with `scripts/with-nix` (see docs/testing.md, "Nix versions"). A behaviour that
//! differs between them is one method of [`NixVersion`] here, named for the behaviour and saying
//! which versions were measured; tests ask it rather than compare version numbers. Versions between
//! the measured ones were not checked: each method gives the newer behaviour from the first
//! measured version that shows it.

use std::process::Command;
use std::sync::OnceLock;

/// A Nix release, as `nix-build --version` prints it (`nix-build (Nix) 2.34.8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct NixVersion {
    /// The major version (2).
    pub major: u32,
    /// The minor version (8, 26, 34).
    pub minor: u32,
    /// The patch level.
    pub patch: u32,
}

/// The first measured version past 2.8 (trixie's): where the behaviours below change.
const MEASURED_NEWER: NixVersion = NixVersion {
    major: 2,
    minor: 26,
    patch: 0,
};

/// The first measured version that quotes paths in messages with `"…"` (sid's).
const MEASURED_DOUBLE_QUOTES: NixVersion = NixVersion {
    major: 2,
    minor: 34,
    patch: 0,
};

impl NixVersion {
    /// Reads the version from a `--version` line such as `nix-build (Nix) 2.34.8`, or from a
    /// bare `2.26.3`; a suffix (`2.34.8+dfsg`, `2.26pre...`) is ignored.
    pub fn parse(text: &str) -> Option<NixVersion> {
        let word = text.split_whitespace().last()?;
        let mut parts = word.split('.').map(|p| {
            let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        });
        let major = parts.next()??;
        let minor = parts.next()??;
        let patch = parts.next().flatten().unwrap_or(0);
        Some(NixVersion {
            major,
            minor,
            patch,
        })
    }

    /// The Nix that `nix-build` on `PATH` is, asked once per test process; `None` when it
    /// cannot be run. When `CUDA_SANDBOX_NIX` (set by `scripts/with-nix`) names another
    /// version, this panics: a test must never believe it ran under a Nix it did not.
    pub fn current() -> Option<NixVersion> {
        static CURRENT: OnceLock<Option<NixVersion>> = OnceLock::new();
        *CURRENT.get_or_init(|| {
            let out = Command::new("nix-build").arg("--version").output().ok()?;
            let text = String::from_utf8_lossy(&out.stdout);
            let version = NixVersion::parse(text.lines().next().unwrap_or(""))?;
            if let Ok(wanted) = std::env::var("CUDA_SANDBOX_NIX") {
                assert!(
                    version.is(&wanted),
                    "CUDA_SANDBOX_NIX={wanted} but nix-build is {version}: run the tests with \
                     scripts/with-nix {wanted}"
                );
            }
            Some(version)
        })
    }

    /// Whether this is the release `wanted` names: `2.34` (any patch level) or `2.34.8`.
    pub fn is(self, wanted: &str) -> bool {
        match NixVersion::parse(wanted) {
            Some(w) if wanted.matches('.').count() >= 2 => w == self,
            Some(w) => (w.major, w.minor) == (self.major, self.minor),
            None => false,
        }
    }

    /// Chroot layout: the hook's second argument. Nix 2.8 passes the sandbox root
    /// `<store>/<hash>-<name>.drv.chroot` (or under the build directory); 2.26 and 2.34 pass
    /// `….chroot/root`, a `root` directory inside it (measured: the hook logs its arguments,
    /// `hook/tests/nix_versions/`).
    pub fn chroot_is_a_root_subdirectory(self) -> bool {
        self >= MEASURED_NEWER
    }

    /// Symlinks copied: a `sandbox-paths` (or hook) entry that is a symlink appears inside the
    /// sandbox as that symlink, so its target must be in the sandbox too (2.26, 2.34); Nix 2.8
    /// follows it and binds the target at the link's path. On Debian, `/lib` and `/lib64` are
    /// such links (`usr/lib`, `usr/lib64`).
    pub fn copies_sandbox_symlinks(self) -> bool {
        self >= MEASURED_NEWER
    }

    /// `$NIX_ATTRS_JSON_FILE` names `.attrs.json` inside the sandbox (`$NIX_BUILD_TOP/.attrs.json`):
    /// 2.26 and 2.34 (Nix 2.15 onwards, NixOS/nix#8053); 2.8 names the file by its path
    /// outside the sandbox, which a sandboxed builder cannot open (measured:
    /// `runner/tests/nix_sandbox/` prints it from the builder).
    pub fn names_attrs_json_inside_the_sandbox(self) -> bool {
        self >= MEASURED_NEWER
    }

    /// UTF-8 in structured attrs: 2.26 and 2.34 refuse a derivation whose `__structuredAttrs`
    /// hold a string that is not UTF-8, at instantiation (nlohmann-json's "invalid UTF-8 byte"
    /// or "incomplete UTF-8 string"); 2.8 writes it.
    pub fn refuses_non_utf8_structured_attrs(self) -> bool {
        self >= MEASURED_NEWER
    }

    /// The words of the `nix` command that prints derivations as JSON: `show-derivation` on
    /// 2.8, `derivation show` on newer Nix (whose JSON is another format).
    pub fn derivation_show(self) -> &'static [&'static str] {
        if self >= MEASURED_NEWER {
            &["derivation", "show"]
        } else {
            &["show-derivation"]
        }
    }

    /// Derivation show refuses non-UTF-8: `nix derivation show` on 2.26 and 2.34 fails on a
    /// derivation holding a string that is not UTF-8 anywhere (env, args; nlohmann-json's
    /// "invalid UTF-8 byte"), and one such path fails the whole command; 2.8's
    /// `show-derivation` copies the bytes into its (then invalid) JSON.
    pub fn derivation_show_refuses_non_utf8(self) -> bool {
        self >= MEASURED_NEWER
    }

    /// The words of the `nix` command that reads a derivation as JSON and writes its `.drv`:
    /// `derivation add` on 2.26 and 2.34 (it keeps the last of a repeated JSON member, as
    /// nlohmann-json does); 2.8 has none ("'derivation' is not a recognised command").
    pub fn derivation_add(self) -> Option<&'static [&'static str]> {
        (self >= MEASURED_NEWER).then_some(&["derivation", "add"][..])
    }

    /// Structured attrs rewritten at instantiation: 2.34 parses a `__json` attribute's string
    /// (nlohmann-json: a repeated member's last value) and writes it back compact, so the
    /// `.drv` it writes repeats no member, and it hashes a `.drv`'s outputs over that rewrite
    /// (a `.drv` added with `nix-store --add` must have those outputs); 2.8 and 2.26 write
    /// the string as given and hash it so.
    pub fn rewrites_structured_attrs(self) -> bool {
        self >= MEASURED_DOUBLE_QUOTES
    }

    /// Whether it reads a `DrvWithVersion("xp-dyn-drv",…)` derivation (with the
    /// `dynamic-derivations` experimental feature): 2.26 and 2.34 do (`parseDerivation` in
    /// `src/libstore/derivations.cc`), 2.8 knows only `Derive(…)`.
    pub fn reads_drv_with_version(self) -> bool {
        self >= MEASURED_NEWER
    }

    /// The shape of the derivation JSON that [`derivation_show`](Self::derivation_show) prints.
    pub fn derivation_json(self) -> DerivationJson {
        if self >= MEASURED_DOUBLE_QUOTES {
            DerivationJson::V4
        } else if self >= MEASURED_NEWER {
            DerivationJson::WithMethod
        } else {
            DerivationJson::Legacy
        }
    }

    /// How `nix-store --realise` names the features a derivation requires when no machine can
    /// build it: the text of the set (`a, b`), or `None` when `stderr` does not say. 2.8 and
    /// 2.26: "a 'SYSTEM' with features {a, b} is required to build '…'"; 2.34: "Cannot build
    /// '…'", "Reason: platform mismatch", then "Required features: {a, b}" on a line of its
    /// own, a line left out when the set is empty.
    pub fn required_features_reported(self, stderr: &[u8]) -> Option<Vec<u8>> {
        let find = |needle: &[u8], from: usize| {
            stderr[from..]
                .windows(needle.len())
                .position(|w| w == needle)
                .map(|p| p + from)
        };
        let between = |open: &[u8], close: &[u8]| {
            let start = find(open, 0)? + open.len();
            let end = find(close, start)?;
            Some(stderr[start..end].to_vec())
        };
        if self >= MEASURED_DOUBLE_QUOTES {
            find(b"Cannot build '", 0)?;
            between(b"Required features: {", b"}\n")
                .or_else(|| find(b"Reason: platform mismatch", 0).map(|_| Vec::new()))
        } else {
            between(b"' with features {", b"} is required to build '")
        }
    }

    /// Builder dies with its Nix: with no daemon, the builder (PID 1 of the build's PID
    /// namespace) is a child of `nix-build` itself under every measured version. When that
    /// `nix-build` is killed with SIGKILL (no cleanup can run), 2.34 takes the builder with it,
    /// and so every process of the build, even one that left its chroot in a user namespace of
    /// its own; 2.8 and 2.26 leave it running, reparented to init, as its build user.
    /// Measured with `hook/tests/nix/escape.nix` (no cgroup is used: `/proc/PID/cgroup` shows
    /// none of Nix's). It is a parent-death signal: every Nix starts the builder with
    /// `startProcess`, whose `dieWithParent` (on by default) sets `PR_SET_PDEATHSIG` to SIGKILL,
    /// and the kernel clears that when the builder's setuid/setgid change its credentials
    /// (prctl(2)). 2.34 sets it again after them (`preserveDeathSignal` in
    /// src/libstore/unix/build/derivation-builder.cc, Nix commit 34688ecf5f, first in 2.34.0);
    /// 2.26 does not. The parent is the nix-build thread that started the build, its main
    /// thread (`/proc/NIXPID/task/TID/children`), so the signal comes only when nix-build ends.
    pub fn builder_dies_with_a_killed_nix(self) -> bool {
        self >= MEASURED_DOUBLE_QUOTES
    }

    /// What a client that cannot build locally (`max-jobs = 0`) prints when no machine of
    /// `builders` supports a derivation's `features` on `system` (measured:
    /// `hook/tests/fleet_ssh_ng/`): every version first says "Failed to find a machine for
    /// remote build!" and the required features, which 2.8 lists bare and 2.26 and 2.34 in
    /// brackets; then 2.8's error is "unable to start any build; remote machines may not have
    /// all required system features.", 2.26's the same capitalised on lines of its own, and
    /// 2.34's "Cannot build …" with a reason per way to build ("local builds are disabled
    /// (max-jobs = 0)", "missing system features") and the required features in braces.
    pub fn no_machine_for_features(self, system: &str, features: &[&str]) -> Vec<String> {
        let mut lines = vec!["Failed to find a machine for remote build!".to_owned()];
        if self >= MEASURED_NEWER {
            lines.push(format!(
                "required (system, features): ({system}, [{}])",
                features.join(", ")
            ));
        } else {
            lines.push(format!(
                "required (system, features): ({system}, {})",
                features.join(", ")
            ));
        }
        if self >= MEASURED_DOUBLE_QUOTES {
            lines.extend([
                "Reason: local builds are disabled (max-jobs = 0)".to_owned(),
                "Reason: missing system features".to_owned(),
                format!("Required features: {{{}}}", features.join(", ")),
            ]);
        } else if self >= MEASURED_NEWER {
            lines.extend([
                "Unable to start any build;".to_owned(),
                "remote machines may not have all required system features.".to_owned(),
            ]);
        } else {
            lines.push(
                "error: unable to start any build; remote machines may not have all required \
                 system features."
                    .to_owned(),
            );
        }
        lines
    }

    /// How Nix reports a program that failed (the hook, for one): 2.8 and 2.26 quote the path
    /// with `'…'`, 2.34 with `"…"`.
    pub fn program_failed(self, program: &str, code: i32) -> String {
        if self >= MEASURED_DOUBLE_QUOTES {
            format!("program \"{program}\" failed with exit code {code}")
        } else {
            format!("program '{program}' failed with exit code {code}")
        }
    }
}

/// The derivation JSON of `nix show-derivation` / `nix derivation show`, as measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DerivationJson {
    /// 2.8: an object keyed by `.drv` path; `outputs.NAME` has `path`, `hashAlgo` (`r:sha256`
    /// for a recursive hash, as in the `.drv`), `hash` (hex), `impure`; `inputDrvs` maps a
    /// path to its output names; `inputSrcs`; `env` holds everything, `__json` included.
    Legacy,
    /// 2.26: keyed by path as 2.8, plus `name`; an output's hash mode is a separate `method`
    /// (`nar`, `flat`, `text`) and `hashAlgo` is the bare algorithm; an `inputDrvs` entry is
    /// `{"dynamicOutputs": {}, "outputs": [...]}`.
    WithMethod,
    /// 2.34: `{"derivations": {BASENAME: …}, "version": 4}`, keyed by base name, each with
    /// `version: 4` and `name`; output paths and `inputs.drvs`/`inputs.srcs` without the
    /// store directory; a fixed output's hash as SRI (`sha256-<base64>`) without `hashAlgo`;
    /// structured attrs as a JSON object `structuredAttrs`, not an env entry `__json`.
    V4,
}

impl std::fmt::Display for NixVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// `paths` and, for each one that is a symlink, every link and target on its way (relative
/// targets resolved against the link's directory), ending at a path that is not a link; each
/// path once, in order. What a Nix that copies symlinks into the sandbox
/// ([`NixVersion::copies_sandbox_symlinks`]) needs in `sandbox-paths` to show what a Nix that
/// follows them shows.
pub fn with_link_targets(paths: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let push = |p: String, out: &mut Vec<String>| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    for path in paths {
        let mut current = std::path::PathBuf::from(path);
        push(path.clone(), &mut out);
        // A bound on the chain, as the kernel has (40 links).
        for _ in 0..40 {
            let Ok(target) = std::fs::read_link(&current) else {
                break;
            };
            let next = match current.parent() {
                Some(dir) if target.is_relative() => dir.join(&target),
                _ => target,
            };
            current = normalize(&next);
            push(current.display().to_string(), &mut out);
        }
    }
    out
}

/// `path` with `.` and `..` components removed lexically.
fn normalize(path: &std::path::Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_from_what_nix_prints() {
        let v = NixVersion::parse("nix-build (Nix) 2.34.8").unwrap();
        assert_eq!((v.major, v.minor, v.patch), (2, 34, 8));
        assert_eq!(NixVersion::parse("2.26.3+dfsg-1").unwrap().minor, 26);
        assert!(v.is("2.34") && v.is("2.34.8") && !v.is("2.34.7") && !v.is("2.26"));
        assert!(NixVersion::parse("2.8.0").unwrap() < NixVersion::parse("2.26.3").unwrap());
    }

    #[test]
    fn required_features_are_read_as_each_nix_reports_them() {
        let v = |s: &str| NixVersion::parse(s).unwrap();
        let old = b"error: a 'cuda-sandbox-none' with features {cuda, gpu} is required to build \
            '/nix/store/x.drv', but I am a 'x86_64-linux' with features {ca-derivations}";
        let some = |s: &[u8]| Some(s.to_vec());
        assert_eq!(
            v("2.8.0").required_features_reported(old),
            some(b"cuda, gpu")
        );
        assert_eq!(
            v("2.26.3").required_features_reported(old),
            some(b"cuda, gpu")
        );
        let new = b"error: Cannot build '/nix/store/x.drv'.\n       Reason: platform mismatch\n\
            \x20      Required system: 'cuda-sandbox-none'\n       Current system: 'x86_64-linux'\n\
            \x20      Reason: missing system features\n       Required features: {cuda, gpu}\n\
            \x20      Available features: {ca-derivations}\n";
        assert_eq!(
            v("2.34.8").required_features_reported(new),
            some(b"cuda, gpu")
        );
        let none = b"error: Cannot build '/nix/store/x.drv'.\n       Reason: platform mismatch\n";
        assert_eq!(v("2.34.8").required_features_reported(none), some(b""));
        assert_eq!(
            v("2.34.8").required_features_reported(b"error: other"),
            None
        );
        assert_eq!(v("2.8.0").required_features_reported(new), None);
    }

    #[test]
    fn link_targets_follow_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("usr/lib")).unwrap();
        std::os::unix::fs::symlink("usr/lib", d.join("lib")).unwrap();
        std::os::unix::fs::symlink(d.join("lib"), d.join("lib2")).unwrap();
        let s = |p: &str| d.join(p).display().to_string();
        assert_eq!(
            with_link_targets(&[s("lib2"), s("usr/lib")]),
            [s("lib2"), s("lib"), s("usr/lib")]
        );
    }
}
