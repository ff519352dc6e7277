//! The hook's configuration: which features get which devices and paths.
//!
//! Read from TOML (`/etc/cuda-sandbox/config.toml` unless `--config` or `CUDA_SANDBOX_CONFIG`
//! name another file). With neither the file nor its directory `/etc/cuda-sandbox`,
//! [`Config::builtin`] serves NixOS: the default rule of `hook/default-config.toml`, embedded.
//! A directory without its file is a broken configuration (a deleted config must not turn into
//! the built-in one silently). Unknown keys are errors naming the key with its line and column,
//! so a typo never silently drops a device from every GPU build. A file is used only when
//! it is trusted like sudo's `sudoers` ([`crate::trust`]).
//!
//! - `schema`: the tables and keys, with their defaults;
//! - `locate`: which file, and its text, read once trusted;
//! - `validate`: what the values must hold beyond their types;
//! - `error`: why a configuration cannot be used, as one line.

mod error;
mod locate;
mod schema;
mod validate;

pub use error::ConfigError;
pub(crate) use error::Problem;
pub(crate) use locate::read_text;
pub use locate::{locate, ConfigSource};
pub use schema::{Config, DeviceGlob, DriverConfig, Platform, Rule};
pub(crate) use schema::{HostPath, MigConfig, MissingDrv, Mount, Sysfs};
pub use validate::Note;

/// Default location of the configuration file.
pub(crate) const DEFAULT_CONFIG_PATH: &str = "/etc/cuda-sandbox/config.toml";
/// Environment variable naming the configuration file (below `--config`, above the default).
pub(crate) const CONFIG_ENV: &str = "CUDA_SANDBOX_CONFIG";
/// The built-in configuration's text (one file in the repository, `hook/default-config.toml`).
pub const BUILTIN_TOML: &str = include_str!("../../default-config.toml");

/// The built-in rule for AMD GPUs (`hook/amd-rule.toml`), which the NixOS module adds with
/// `presets.zluda.enable`; never part of the default configuration.
pub const AMD_RULE_TOML: &str = include_str!("../../amd-rule.toml");
/// The features the built-in configuration answers to.
pub(crate) const DEFAULT_FEATURES: [&str; 4] = ["cuda", "gpu", "nvidia-gpu", "opengl"];

/// The most bytes a configuration file may hold: far more than any real one (the built-in is
/// 3 KiB), little enough to read whole.
pub(crate) const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// At most this many features are looked for in the configuration's text
/// ([`Config::text_may_answer`]); Nix builds a derivation only when the builder has every
/// feature it requires, so real ones list a few.
pub(crate) const PRECHECK_FEATURES: usize = 64;

impl Config {
    /// Its host paths: under its host root, its store as it is. (Here, not in `symlinks`, which
    /// `trust` reads and so must not read the configuration.)
    pub(crate) fn space(&self) -> crate::symlinks::Space<'_> {
        crate::symlinks::Space::Rooted {
            root: &self.host_root,
            store_dir: &self.store_dir,
        }
    }

    /// Whether the configuration at `source` may have a rule answering one of `features`,
    /// judged from its text alone, without parsing it: `false` only when the text holds no
    /// escape (`\`, so every string in it is written literally) and none of the features
    /// occurs in it. An untagged build asking for other features (`big-parallel`, `kvm`) then
    /// skips the parse. The text is read as [`Config::load`] reads it, trusted first
    /// ([`read_text`]): nothing untrusted is opened. A file that cannot be trusted or read gives
    /// `true`, and the full load reports the problem.
    #[cfg(test)]
    fn may_answer(source: &ConfigSource, features: &[Vec<u8>]) -> bool {
        read_text(source).map_or(true, |text| {
            Config::text_may_answer(text.as_bytes(), features)
        })
    }

    /// Whether a configuration whose text is `text` may have a rule answering one of
    /// `features`, judged without parsing it: `false` only when `text` holds no `\` and none of
    /// `features` (an empty feature is in every text). Linear in the text for each
    /// feature (a substring search, not a window scan); more than [`PRECHECK_FEATURES`]
    /// features give `true` (parse instead), so a derivation listing millions of features
    /// cannot make this cost their number times the text.
    ///
    /// It stays because it buys more than 5% of such a build's hook run: parsing instead took
    /// 1.06–1.10x the wall time (1.09–1.13x CPU) of a derivation requiring `big-parallel`,
    /// paired run for run, and 1.17x the empty-process floor against 1.05–1.12x.
    pub fn text_may_answer(text: &[u8], features: &[Vec<u8>]) -> bool {
        crate::bytes::find(b'\\', text).is_some()
            || features.len() > PRECHECK_FEATURES
            || features
                .iter()
                .any(|f| f.is_empty() || memchr::memmem::find(text, f).is_some())
    }

    /// Every rule's features, in file order (a feature of several rules once for each).
    pub(crate) fn features(&self) -> impl Iterator<Item = &str> {
        (self.rules.iter()).flat_map(|r| r.features.iter().map(String::as_str))
    }

    /// Builds the configuration of `source` from its text (as [`read_text`] gave it).
    pub(crate) fn from_text(source: &ConfigSource, text: &str) -> Result<Config, ConfigError> {
        match source {
            ConfigSource::Builtin => Ok(Config::builtin()),
            ConfigSource::File(path) => Config::parse(text, &path.display().to_string()),
        }
    }

    /// Loads the configuration from `source`: its text, trusted first ([`read_text`]), parsed
    /// and validated.
    pub fn load(source: &ConfigSource) -> Result<Config, ConfigError> {
        Config::from_text(source, &read_text(source)?)
    }

    /// Loads the configuration from `source` without the ownership and mode check of
    /// [`Config::load`]: what `check-config --content-only` validates inside a Nix build, where
    /// a store file is owned by an unmapped uid. The hook never uses this.
    pub fn load_content(source: &ConfigSource) -> Result<Config, ConfigError> {
        match source {
            ConfigSource::Builtin => Ok(Config::builtin()),
            ConfigSource::File(path) => Config::from_text(source, &locate::read_untrusted(path)?),
        }
    }

    /// Parses and validates TOML text; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<Config, ConfigError> {
        let fail = |problem| ConfigError {
            file: source.to_string(),
            problem,
        };
        let config: Config =
            toml::from_str(text).map_err(|e| fail(Problem::Syntax(error::syntax(&e, text))))?;
        config.validate().map_err(|e| fail(Problem::Invalid(e)))?;
        Ok(config)
    }

    /// The configuration used when no file exists: NixOS, with the driver at
    /// `/run/opengl-driver` and the NVIDIA device nodes of discrete and Jetson hosts, from the
    /// embedded `hook/default-config.toml`.
    pub(crate) fn builtin() -> Config {
        // A unit test parses the embedded file, so this cannot fail in a built hook.
        Config::parse(BUILTIN_TOML, "built-in").expect("hook/default-config.toml is valid")
    }

    /// The rules that answer to any of `features`, in file order.
    #[cfg(test)]
    fn matching_rules<'c>(&'c self, features: &[&[u8]]) -> Vec<&'c Rule> {
        self.rules
            .iter()
            .filter(|r| r.first_match(features).is_some())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn only_a_config_without_the_features_or_escapes_cannot_answer() {
        let text = BUILTIN_TOML.as_bytes();
        let f = |names: &[&str]| -> Vec<Vec<u8>> {
            names.iter().map(|n| n.as_bytes().to_vec()).collect()
        };
        assert!(!Config::text_may_answer(text, &f(&["big-parallel", "kvm"])));
        assert!(Config::text_may_answer(text, &f(&["kvm", "cuda"])));
        assert!(Config::text_may_answer(text, &f(&[""])));
        let escaped = "[[rule]]\nname = \"r\"\nfeatures = [\"\\u006bvm\"]\n[rule.mig]\n";
        let parsed = Config::parse(escaped, "t").unwrap();
        assert_eq!(parsed.rules[0].features, ["kvm"]);
        assert!(Config::text_may_answer(escaped.as_bytes(), &f(&["kvm"])));
        // Every rule of a parsed config answers its own features.
        for rule in &Config::builtin().rules {
            for feature in &rule.features {
                assert!(Config::text_may_answer(text, &f(&[feature])), "{feature}");
            }
        }
    }

    /// The AMD rule joins the built-in one as the NixOS module joins them, and is refused,
    /// by name and with the fix, under GPU leases; so is any rule that exposes `/dev/kfd`.
    #[test]
    fn the_amd_rule_is_valid_beside_nvidia_and_refused_under_leases() {
        let both = format!("{BUILTIN_TOML}\n{AMD_RULE_TOML}");
        let c = Config::parse(&both, "t").unwrap();
        let amd = c.rules.iter().find(|r| r.name == "amd").unwrap();
        assert_eq!(amd.features, ["amd-gpu", "cuda", "gpu", "opengl"]);
        assert_eq!(amd.sysfs, Some(Sysfs::Kfd));
        assert_eq!(c.matching_rules(&[b"cuda"]).len(), 2);
        assert_eq!(c.matching_rules(&[b"amd-gpu"]).len(), 1);
        let leased = format!("gpus_per_build = 1\n{both}");
        let e = Config::parse(&leased, "t").unwrap_err().to_string();
        assert!(e.contains("rule 'amd' exposes AMD GPUs (/dev/kfd)"), "{e}");
        assert!(e.contains("set gpus_per_build = 0"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        for body in [
            "[[rule.device]]\nglob = \"/dev/k*\"\n",
            "[[rule.path]]\npath = \"/dev/kfd\"\n",
            "[[rule.mount]]\ninside = \"/k\"\noutside = \"/dev/kfd\"\n",
            "sysfs = \"kfd\"\n",
        ] {
            let text =
                format!("gpus_per_build = 1\n[[rule]]\nname = \"r\"\nfeatures = [\"x\"]\n{body}");
            let e = Config::parse(&text, "t").unwrap_err().to_string();
            assert!(e.contains("rule 'r' exposes AMD GPUs"), "{body}: {e}");
        }
        // Without leases, and for NVIDIA's rule with leases, nothing is refused.
        Config::parse(&format!("gpus_per_build = 1\n{BUILTIN_TOML}"), "t").unwrap();
    }

    /// Found by the `config_parse` fuzz target: a `\n` escape inside a quoted value was echoed
    /// into the error, which then spanned two lines.
    #[test]
    fn errors_stay_on_one_line_whatever_the_values_hold() {
        for text in [
            "closure_cache = \"arv/cc/ahe/cuda-s\\nd vmap\"",
            "nix_store = \"bin/\\nnix-store\"",
            "symlink_roots = [\"x\\ny\"]",
            "[[rule]]\nname = \"a\\nb\"\nfeatures = []",
            "[[rule]]\nname = \"a\\u001bb\"\nfeatures = [\"cuda\"]\n[[rule]]\nname = \"a\\u001bb\"\nfeatures = [\"cuda\"]",
        ] {
            let e = Config::parse(text, "t\nest").expect_err(text).to_string();
            assert!(!e.contains('\n') && !e.contains('\u{1b}'), "{text:?} gave {e:?}");
            assert!(e.starts_with("config t\\nest: "), "{e}");
        }
    }

    #[test]
    fn builtin_serves_nixos() {
        let c = Config::builtin();
        c.validate().unwrap();
        let rules = c.matching_rules(&[b"big-parallel", b"gpu"]);
        assert_eq!(rules.len(), 1);
        assert!(rules[0]
            .devices
            .iter()
            .any(|d| d.glob == "/dev/nvidia-uvm" && d.required));
        let driver = rules[0].driver.as_ref().unwrap();
        assert_eq!(driver.link, Path::new("/run/opengl-driver"));
        assert!(driver.required && driver.host_libraries);
        assert!(c.matching_rules(&[b"kvm"]).is_empty());
    }

    #[test]
    fn full_file_parses() {
        let text = r#"
host_root = "/tmp/root"
closure_cache = "/tmp/cache"
[[rule]]
name = "nvidia"
features = ["cuda"]
[[rule.device]]
glob = "/dev/nvidia[0-9]*"
required = true
hint = "load the driver"
[[rule.path]]
path = "/run/opengl-driver"
[[rule.mount]]
inside = "/run/opengl-driver/lib"
outside = "/opt/driver"
required = true
"#;
        let c = Config::parse(text, "t").unwrap();
        assert_eq!(c.host_root, Path::new("/tmp/root"));
        assert_eq!(c.store_dir, Path::new("/nix/store"));
        let r = &c.rules[0];
        assert_eq!(r.devices[0].hint.as_deref(), Some("load the driver"));
        assert!(!r.paths[0].required);
        assert!(r.mounts[0].required);
    }

    #[test]
    fn unknown_key_is_named_with_line_and_column() {
        let text = "[[rule]]\nname = \"x\"\nfeatures = [\"cuda\"]\n[[rule.device]]\nglob = \"/dev/x\"\nrequird = true\n";
        let e = Config::parse(text, "f.toml").unwrap_err();
        let s = e.to_string();
        assert!(s.contains("requird"), "{s}");
        assert!(s.contains("line 6, column 1"), "{s}");
        assert!(s.starts_with("config f.toml:"), "{s}");
        assert!(matches!(e.problem, Problem::Syntax(_)), "{e:?}");
    }
}
