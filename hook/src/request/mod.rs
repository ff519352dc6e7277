//! Resolve: what is asked for. One function for the hook, `explain` and `exec`.
//!
//! Reads the derivation (the `.drv` file, else the JSON some Nix variants pass in
//! `NIX_DERIVATION_V4`), applies the `missing_drv` policy when neither is there, loads the
//! configuration (with its trust check) only when a feature was found, and yields the
//! features, the matching rules and the verdict. The derivation's attributes are read in
//! [`crate::drv`], the GPU count with the features, and parsed only once a rule has matched; a
//! derivation that repeats one of them is refused. Writes nothing.

use crate::config::{self, Config, ConfigSource, MissingDrv, Rule, DEFAULT_FEATURES};
use crate::drv::{self, DrvAttrs, DrvEnv, DrvError};
use cuda_sandbox_elfkit::fatbin::features::{self, Required};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

mod failure;

use failure::Prefixed;
pub use failure::RequestFailure;

/// Environment variable in which some Nix variants pass the derivation as JSON.
pub(crate) const DERIVATION_ENV: &str = "NIX_DERIVATION_V4";

/// The process environment the hook reads, read once by the caller (`main`) and passed in:
/// no other code reads an environment variable.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// [`DERIVATION_ENV`]: the derivation as JSON.
    pub(crate) derivation_json: Option<OsString>,
    /// [`config::CONFIG_ENV`]: the configuration file to use.
    pub config: Option<OsString>,
    /// `PATH`, where `exec` finds its command.
    pub(crate) path: Option<OsString>,
}

impl Environment {
    /// Reads the variables above from this process's environment.
    pub fn of_process() -> Environment {
        Environment {
            derivation_json: std::env::var_os(DERIVATION_ENV),
            config: std::env::var_os(config::CONFIG_ENV),
            path: std::env::var_os("PATH"),
        }
    }
}

/// The derivation's GPU count ([`crate::drv::GPUS_ATTR`]), as written and as a number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GpusWanted {
    /// The value as the derivation wrote it (for messages).
    pub text: String,
    /// The whole number it holds (surrounding whitespace allowed); `None` when it is not one.
    pub count: Option<usize>,
}

impl GpusWanted {
    /// Parses the attribute's value.
    pub(crate) fn parse(text: &str) -> GpusWanted {
        GpusWanted {
            text: text.to_string(),
            count: text.trim().parse().ok(),
        }
    }
}

/// A rule of the configuration, by its place in `Config::rules`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct RuleId(usize);

impl RuleId {
    /// The rule in `config` (the configuration the id was made for).
    pub(crate) fn of(self, config: &Config) -> &Rule {
        &config.rules[self.0]
    }

    /// The ids of every rule of `config`, in order.
    pub(crate) fn all(config: &Config) -> impl Iterator<Item = RuleId> {
        (0..config.rules.len()).map(RuleId)
    }
}

/// What the build is to get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing: no configured feature (or a policy said so). The text says why.
    Nothing(String),
    /// Plan for the matching rules.
    Tagged,
    /// The build must fail, for this reason (one line).
    Fail(RequestFailure),
}

/// Where the request comes from: the derivation and the caller's additions.
#[derive(Debug, Clone)]
pub(crate) struct Input<'a> {
    /// The `.drv` path (as Nix passes it, or as given to `explain`/`exec`).
    pub drv: Option<&'a Path>,
    /// The environment: the derivation as JSON when the `.drv` is absent, and the
    /// configuration file.
    pub env: &'a Environment,
    /// Features added by the caller (`--features`).
    pub extra_features: &'a [String],
    /// Features to use when the derivation and the caller name none (`exec`: `cuda`).
    pub default_features: &'a [&'a str],
    /// `--config`.
    pub config: Option<&'a Path>,
    /// The sandbox root (the hook's second argument; `exec`'s private root).
    pub chroot: Option<&'a Path>,
    /// Load the configuration even for an untagged request (`explain` shows it).
    pub always_load_config: bool,
}

impl<'a> Input<'a> {
    /// An input with nothing but the environment: no derivation, no additions.
    pub(crate) fn new(env: &'a Environment) -> Input<'a> {
        Input {
            drv: None,
            env,
            extra_features: &[],
            default_features: &[],
            config: None,
            chroot: None,
            always_load_config: false,
        }
    }
}

/// The resolved request.
#[derive(Debug, Clone)]
pub struct Request {
    /// The derivation path, when one was named.
    pub(crate) derivation: Option<PathBuf>,
    /// The sandbox root.
    pub chroot: Option<PathBuf>,
    /// The required features (bytes, as in the derivation), plus the caller's.
    pub(crate) features: Vec<Vec<u8>>,
    /// Whether the features came from structured attrs.
    pub(crate) structured: bool,
    /// Where the configuration comes from.
    pub(crate) config_source: ConfigSource,
    /// The configuration, when it was loaded and is usable.
    pub(crate) config: Option<Config>,
    /// The matching rules of `config`.
    pub(crate) rules: Vec<RuleId>,
    /// The derivation's `cudaSandboxGpus`, read and parsed only when a rule matched.
    pub(crate) gpus_wanted: Option<GpusWanted>,
    /// What makes the derivation fixed-output or impure, if anything: a tagged one is refused.
    pub(crate) unsandboxed: Option<drv::Unsandboxed>,
    /// What the build gets. It is [`Verdict::Fail`] until the request is resolved, so a path
    /// through the resolver that forgets to decide fails the build rather than exposing.
    pub(crate) verdict: Verdict,
    /// The caller's `PATH` ([`Environment::path`]), where act finds `nix-store` when the
    /// configuration names it bare.
    pub(crate) search_path: Option<OsString>,
    /// Things worth a warning on stderr (ignored broken config, missing `.drv`, …).
    pub(crate) warnings: Vec<String>,
}

impl Request {
    /// The derivation's name for messages and the manifest.
    pub(crate) fn derivation_name(&self) -> String {
        self.derivation
            .as_ref()
            .map(|d| d.display().to_string())
            .unwrap_or_default()
    }

    /// The features as text (bytes that are not UTF-8 shown as U+FFFD).
    pub(crate) fn features_lossy(&self) -> Vec<String> {
        self.features
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect()
    }

    /// The `cuda-sm-*` features among the required ones, by the rule the runner shares
    /// ([`features::required`]); a name that is not UTF-8 is malformed, so never met.
    pub(crate) fn required_gpu_features(&self) -> Required {
        let names = self.features_lossy();
        features::required(names.iter().map(String::as_str))
    }

    /// The configuration and the matching rules, when the verdict is [`Verdict::Tagged`].
    pub(crate) fn tagged(&self) -> Option<&Config> {
        match (&self.verdict, &self.config) {
            (Verdict::Tagged, Some(c)) => Some(c),
            _ => None,
        }
    }

    /// The matching rules of `config` (the request's own configuration), with their ids.
    pub(crate) fn matched_rules<'c>(&self, config: &'c Config) -> Vec<(RuleId, &'c Rule)> {
        self.rules.iter().map(|id| (*id, id.of(config))).collect()
    }

    /// The first feature of the first matching rule, for messages.
    pub(crate) fn first_match(&self) -> String {
        let Some(config) = &self.config else {
            return String::new();
        };
        let features: Vec<&[u8]> = self.features.iter().map(Vec::as_slice).collect();
        self.rules
            .first()
            .and_then(|id| id.of(config).first_match(&features))
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .unwrap_or_default()
    }
}

/// Resolves `input`: derivation → features → configuration → rules → verdict.
pub(crate) fn resolve(input: &Input<'_>) -> Request {
    let mut req = Request {
        derivation: input.drv.map(Path::to_path_buf),
        chroot: input.chroot.map(Path::to_path_buf),
        features: Vec::new(),
        structured: false,
        config_source: config::locate(input.config, input.env.config.as_deref()),
        config: None,
        rules: Vec::new(),
        gpus_wanted: None,
        unsandboxed: None,
        search_path: input.env.path.clone(),
        verdict: Verdict::Fail(RequestFailure::Unresolved {
            derivation: input
                .drv
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
        }),
        warnings: Vec::new(),
    };
    let name = req.derivation_name();
    let Some(drv_path) = input.drv else {
        req.with_features(Vec::new(), false, input, None);
        return req;
    };
    // The file first; on a remote builder, where it is absent, what Nix passed instead.
    match std::fs::read(drv_path) {
        Ok(bytes) => match DrvEnv::parse(&bytes).and_then(|d| d.attrs()) {
            Ok(attrs) => req.with_attrs(attrs, input),
            Err(e) => req.unusable(&bytes, &name, None, &e),
        },
        Err(e) => match &input.env.derivation_json {
            Some(json) => {
                req.with_json_derivation(json.as_encoded_bytes(), DERIVATION_ENV, &name, input)
            }
            None => req.missing_drv(&name, &e.to_string()),
        },
    }
    req
}

impl Request {
    /// The derivation as JSON (from `source`, named in errors): its attributes, then as
    /// [`Request::with_attrs`].
    fn with_json_derivation(&mut self, json: &[u8], source: &str, name: &str, input: &Input<'_>) {
        match drv::JsonDerivation::parse(json).and_then(|d| d.attrs()) {
            Ok(attrs) => self.with_attrs(attrs, input),
            Err(e) => self.unusable(json, name, Some(source), &e),
        }
    }

    /// The derivation's attributes are read: as [`Request::with_features`].
    fn with_attrs(&mut self, attrs: DrvAttrs<'_>, input: &Input<'_>) {
        let features = attrs
            .features
            .features
            .into_iter()
            .map(|f| f.into_owned())
            .collect();
        self.unsandboxed = attrs.unsandboxed;
        self.with_features(features, attrs.features.structured, input, attrs.gpus);
    }

    /// The derivation (`bytes`, from `from` when not the `.drv` file) cannot be used: a
    /// repeated attribute the hook decides on fails the build; anything else is
    /// [`Request::unreadable`].
    fn unusable(&mut self, bytes: &[u8], name: &str, from: Option<&str>, error: &DrvError) {
        match error {
            DrvError::Repeated { .. } => {
                self.verdict = Verdict::Fail(RequestFailure::Repeated {
                    name: name.to_owned(),
                    from: from.map(str::to_owned),
                    error: error.clone(),
                });
            }
            _ => self.unreadable(bytes, name, &Prefixed(from, error).to_string()),
        }
    }

    /// The derivation's features are known: add the caller's, load the configuration, match
    /// the rules, and parse the GPU count when one matched.
    fn with_features(
        &mut self,
        mut features: Vec<Vec<u8>>,
        structured: bool,
        input: &Input<'_>,
        gpus: Option<String>,
    ) {
        features.extend(input.extra_features.iter().map(|f| f.as_bytes().to_vec()));
        if features.is_empty() {
            features.extend(input.default_features.iter().map(|f| f.as_bytes().to_vec()));
        }
        self.features = features;
        self.structured = structured;
        if let Some(config) = self.config_for_features(input) {
            self.match_rules(config, gpus);
        }
    }

    /// The configuration the features need, or `None` with the verdict decided without it:
    /// no feature at all, no feature the configuration's text can answer, or a configuration
    /// that cannot be loaded.
    fn config_for_features(&mut self, input: &Input<'_>) -> Option<Config> {
        if self.features.is_empty() && !input.always_load_config {
            // The fast path: no feature, no configuration read.
            self.verdict = Verdict::Nothing("the derivation requires no system feature".into());
            return None;
        }
        let builtin = self.features.iter().find(|f| {
            DEFAULT_FEATURES
                .iter()
                .any(|d| d.as_bytes() == f.as_slice())
        });
        // The next fastest path: features, but none a GPU feature and none anywhere in the
        // configuration's text, so no rule can answer them and the hook parses nothing (nor
        // warns about a broken configuration: tagged builds and `check-config` report that).
        // The text is read once, trusted first; one that cannot be trusted or read is loaded
        // (and so reported) like any other.
        let text = config::read_text(&self.config_source);
        let unanswerable = builtin.is_none()
            && text
                .as_ref()
                .is_ok_and(|t| !Config::text_may_answer(t.as_bytes(), &self.features));
        if unanswerable && !input.always_load_config {
            self.verdict = Verdict::Nothing(
                "untagged: no required feature appears in the configuration, so the hook \
                 exposes nothing"
                    .into(),
            );
            return None;
        }
        match text.and_then(|t| Config::from_text(&self.config_source, &t)) {
            Ok(c) => Some(c),
            Err(e) if unanswerable => {
                // `explain`: what the hook does (nothing, silently), and what is wrong.
                self.verdict = Verdict::Nothing(format!(
                    "untagged: no required feature appears in the configuration, so the hook \
                     exposes nothing (and does not read it further; note that it is broken, \
                     which fails tagged builds: {e})"
                ));
                None
            }
            Err(e) => {
                let name = self.derivation_name();
                self.verdict = match builtin {
                    Some(f) => Verdict::Fail(RequestFailure::BrokenConfig {
                        name,
                        feature: String::from_utf8_lossy(f).into_owned(),
                        error: e.to_string(),
                    }),
                    None => {
                        self.warnings
                            .push(format!("{e} (ignored: this build asks for no GPU feature)"));
                        Verdict::Nothing(format!("the configuration is broken: {e}"))
                    }
                };
                None
            }
        }
    }

    /// Matches the rules of `config` that answer the features: tagged (with the GPU count the
    /// derivation asks, `gpus`) when one does, else untagged, naming the features configured.
    fn match_rules(&mut self, config: Config, gpus: Option<String>) {
        let features: Vec<&[u8]> = self.features.iter().map(Vec::as_slice).collect();
        self.rules = RuleId::all(&config)
            .filter(|id| id.of(&config).answers_any(&features))
            .collect();
        if self.rules.is_empty() {
            let configured: Vec<&str> = config
                .rules
                .iter()
                .flat_map(|r| r.features.iter().map(String::as_str))
                .collect();
            self.verdict = Verdict::Nothing(format!(
                "untagged: no required feature is one of [{}], so the hook exposes nothing; \
                 tag the derivation with requiredSystemFeatures = [ \"cuda\" ] to get the GPU",
                configured.join(", ")
            ));
        } else if let Some(why) = self.unsandboxed.clone() {
            self.config = Some(config);
            self.verdict = Verdict::Fail(RequestFailure::Unsandboxed {
                name: self.derivation_name(),
                feature: self.first_match(),
                why,
            });
            return;
        } else {
            self.gpus_wanted = gpus.as_deref().map(GpusWanted::parse);
            self.verdict = Verdict::Tagged;
        }
        self.config = Some(config);
    }

    /// The `.drv` is not on disk and Nix passed no JSON (remote builders, NixOS/nix#9272):
    /// follow the configured `missing_drv` policy.
    fn missing_drv(&mut self, name: &str, error: &str) {
        let config = match Config::load(&self.config_source) {
            Ok(c) => c,
            Err(e) => {
                let why =
                    format!("cannot read derivation {name} ({error}) and {e}; exposing nothing");
                self.warnings.push(why.clone());
                self.verdict = Verdict::Nothing(why);
                return;
            }
        };
        match config.missing_drv {
            MissingDrv::Skip => {
                let why = format!(
                    "cannot read derivation {name} ({error}); exposing nothing (missing_drv = \
                     \"skip\"; on a remote GPU builder that only receives GPU builds, set \
                     missing_drv = \"expose\")"
                );
                self.warnings.push(why.clone());
                self.verdict = Verdict::Nothing(why);
            }
            MissingDrv::Fail => {
                self.verdict = Verdict::Fail(RequestFailure::MissingDrv {
                    name: name.to_owned(),
                    error: error.to_owned(),
                })
            }
            MissingDrv::Expose => {
                self.rules = RuleId::all(&config).collect();
                self.features = config
                    .rules
                    .iter()
                    .flat_map(|r| r.features.iter().map(|f| f.as_bytes().to_vec()))
                    .collect();
                if self.rules.is_empty() {
                    self.verdict = Verdict::Nothing("the configuration has no rule".into());
                } else {
                    self.warnings.push(format!(
                        "derivation {name} is not on disk; exposing every rule (missing_drv = \
                         \"expose\"); its cuda-sm-* features cannot be known, so they select \
                         no GPU"
                    ));
                    self.verdict = Verdict::Tagged;
                }
            }
        }
        self.config = Some(config);
    }

    /// A derivation we cannot read: fail only when it could be a tagged build, i.e. when the
    /// bytes name a feature some rule answers to (with a broken config: a built-in feature).
    fn unreadable(&mut self, bytes: &[u8], name: &str, error: &str) {
        let loaded = Config::load(&self.config_source);
        let names: Vec<String> = match &loaded {
            Ok(c) => c.rules.iter().flat_map(|r| r.features.clone()).collect(),
            Err(_) => DEFAULT_FEATURES.iter().map(|s| s.to_string()).collect(),
        };
        let may_be_tagged = names
            .iter()
            .any(|n| memchr::memmem::find(bytes, n.as_bytes()).is_some());
        self.verdict = if may_be_tagged {
            Verdict::Fail(RequestFailure::Unreadable {
                name: name.to_owned(),
                error: error.to_owned(),
            })
        } else {
            let why = format!(
                "cannot read derivation {name} ({error}); it names no GPU feature, so exposing \
                 nothing"
            );
            self.warnings.push(why.clone());
            Verdict::Nothing(why)
        };
        self.config = loaded.ok();
    }
}
