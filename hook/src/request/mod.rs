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
use cuda_sandbox_cuda_facts::features::{self, Required};
use std::borrow::Cow;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

mod failure;

use failure::prefixed;
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
#[derive(Debug, Clone)]
pub(crate) enum Verdict {
    /// Nothing: no configured feature (or a policy said so). Why nothing is exposed, and the
    /// configuration when it was loaded and is usable (`explain` and `exec` load it for any
    /// request).
    Untagged(String, Option<Config>),
    /// Plan for the matching rules, with the configuration they belong to.
    Tagged(Tagged),
    /// The build must fail, for this reason (one line).
    Fail(RequestFailure),
}

impl Verdict {
    /// The configuration, when it was loaded and is usable (never for a failure).
    pub(crate) fn config(&self) -> Option<&Config> {
        match self {
            Verdict::Tagged(t) => Some(&t.config),
            Verdict::Untagged(_, config) => config.as_ref(),
            Verdict::Fail(_) => None,
        }
    }
}

/// A tagged request: what the pipeline plans for. It exists only with its configuration.
#[derive(Debug, Clone)]
pub(crate) struct Tagged {
    /// The configuration the rules belong to.
    pub config: Config,
    /// The matching rules of `config`.
    pub rules: Vec<RuleId>,
    /// The derivation's `cudaSandboxGpus`, parsed.
    pub gpus: Option<GpusWanted>,
}

impl Tagged {
    /// The matching rules.
    pub(crate) fn matched_rules(&self) -> Vec<&Rule> {
        self.rules.iter().map(|id| id.of(&self.config)).collect()
    }
}

/// A rule that matched, and through which feature (what `explain` lists).
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct RuleMatch {
    /// The rule's name.
    pub rule: String,
    /// The derivation's feature it answered to.
    pub feature: String,
}

impl RuleMatch {
    /// Each of `rules` of `config`, with the first of `features` it answers.
    fn all(config: &Config, rules: &[RuleId], features: &[Vec<u8>]) -> Vec<RuleMatch> {
        rules
            .iter()
            .map(|id| RuleMatch {
                rule: id.of(config).name.clone(),
                feature: (id.of(config).first_match(features))
                    .map(|f| String::from_utf8_lossy(f).into_owned())
                    .unwrap_or_default(),
            })
            .collect()
    }
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
    /// The rules that matched the features, also when the request then fails.
    pub(crate) matched: Vec<RuleMatch>,
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

    /// The feature the first matching rule answered to, for messages (empty when none did).
    pub(crate) fn first_match(&self) -> String {
        self.matched
            .first()
            .map(|m| m.feature.clone())
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
        features::required(self.features_lossy().iter().map(String::as_str))
    }

    /// The tagged request, when the verdict is [`Verdict::Tagged`].
    pub(crate) fn tagged(&self) -> Option<&Tagged> {
        match &self.verdict {
            Verdict::Tagged(t) => Some(t),
            _ => None,
        }
    }
}

/// Resolves `input`: derivation → features → configuration → rules → verdict. The
/// configuration's text is read only once, by the step of the verdict that needs it.
pub(crate) fn resolve(input: &Input<'_>) -> Request {
    let name = input.drv.map_or(String::new(), |d| d.display().to_string());
    let mut req = Request {
        derivation: input.drv.map(Path::to_path_buf),
        chroot: input.chroot.map(Path::to_path_buf),
        features: Vec::new(),
        structured: false,
        config_source: config::locate(input.config, input.env.config.as_deref()),
        matched: Vec::new(),
        search_path: input.env.path.clone(),
        verdict: Verdict::Fail(RequestFailure::Unresolved(name.clone())),
        warnings: Vec::new(),
    };
    // The derivation: the `.drv` file, else what Nix passed instead.
    req.verdict = match input.drv.map(std::fs::read) {
        None => req.by_attrs(input, DrvAttrs::default()),
        Some(Ok(bytes)) => match DrvEnv::parse(&bytes).and_then(|d| d.attrs()) {
            Ok(attrs) => req.by_attrs(input, attrs),
            Err(e) => req.unusable(&bytes, &name, None, &e),
        },
        Some(Err(e)) => match &input.env.derivation_json {
            Some(json) => {
                let json = json.as_encoded_bytes();
                match drv::JsonDerivation::parse(json).and_then(|d| d.attrs()) {
                    Ok(attrs) => req.by_attrs(input, attrs),
                    Err(e) => req.unusable(json, &name, Some(DERIVATION_ENV), &e),
                }
            }
            None => req.missing_drv(&name, &e.to_string()),
        },
    };
    req
}

impl Request {
    /// The verdict for the derivation's attributes `attrs` (none when no derivation was
    /// named), by its features and the caller's (else the defaults): untagged for none, or
    /// none the configuration's text can answer; then by a configuration that cannot be
    /// loaded, or by the rules that answer them.
    fn by_attrs(&mut self, input: &Input<'_>, attrs: DrvAttrs<'_>) -> Verdict {
        let features = attrs.features.features.into_iter().map(Cow::into_owned);
        let mut features: Vec<Vec<u8>> = features.collect();
        features.extend(input.extra_features.iter().map(|f| f.as_bytes().to_vec()));
        if features.is_empty() {
            features.extend(input.default_features.iter().map(|f| f.as_bytes().to_vec()));
        }
        self.features = features;
        self.structured = attrs.features.structured;
        if self.features.is_empty() && !input.always_load_config {
            // The fast path: no feature, no configuration read.
            return Verdict::Untagged("the derivation requires no system feature".into(), None);
        }
        let text = config::read_text(&self.config_source);
        let builtin = self.features.iter().find(|f| {
            DEFAULT_FEATURES
                .iter()
                .any(|d| d.as_bytes() == f.as_slice())
        });
        // The next fastest path: features, but none a GPU feature and none anywhere in the
        // configuration's text, so no rule can answer them and the hook parses nothing (nor
        // warns about a broken configuration: tagged builds and `check-config` report that).
        // A text that cannot be trusted or read is loaded (and so reported) like any other.
        let unanswerable = builtin.is_none()
            && text
                .as_ref()
                .is_ok_and(|t| !Config::text_may_answer(t.as_bytes(), &self.features));
        let nothing = "untagged: no required feature appears in the configuration, so the hook \
                       exposes nothing";
        if unanswerable && !input.always_load_config {
            return Verdict::Untagged(nothing.into(), None);
        }
        match text.and_then(|t| Config::from_text(&self.config_source, &t)) {
            Ok(config) => self.match_rules(config, attrs.gpus, attrs.unsandboxed),
            // `explain`: what the hook does (nothing, silently), and what is wrong.
            Err(e) if unanswerable => Verdict::Untagged(
                format!(
                    "{nothing} (and does not read it further; note that it is broken, which \
                     fails tagged builds: {e})"
                ),
                None,
            ),
            Err(e) => match builtin {
                Some(f) => Verdict::Fail(RequestFailure::BrokenConfig(
                    self.derivation_name(),
                    String::from_utf8_lossy(f).into_owned(),
                    e.to_string(),
                )),
                None => {
                    self.warnings
                        .push(format!("{e} (ignored: this build asks for no GPU feature)"));
                    Verdict::Untagged(format!("the configuration is broken: {e}"), None)
                }
            },
        }
    }

    /// A derivation (`bytes`, from `from` when not the `.drv` file) that cannot be used: a
    /// repeated attribute the hook decides on fails the build; anything else is unreadable.
    fn unusable(&mut self, bytes: &[u8], name: &str, from: Option<&str>, e: &DrvError) -> Verdict {
        match e {
            DrvError::Repeated { .. } => Verdict::Fail(RequestFailure::Repeated(
                name.to_owned(),
                from.map(str::to_owned),
                e.clone(),
            )),
            _ => self.unreadable(bytes, name, &prefixed(from, e)),
        }
    }

    /// Matches the rules of `config` that answer the features: tagged (with the GPU count the
    /// derivation asks, `gpus`) when one does and the derivation is sandboxed, else untagged,
    /// naming the features configured.
    fn match_rules(
        &mut self,
        config: Config,
        gpus: Option<String>,
        unsandboxed: Option<drv::Unsandboxed>,
    ) -> Verdict {
        let rules: Vec<RuleId> = RuleId::all(&config)
            .filter(|id| id.of(&config).first_match(&self.features).is_some())
            .collect();
        if rules.is_empty() {
            let configured: Vec<&str> = config.features().collect();
            let why = format!(
                "untagged: no required feature is one of [{}], so the hook exposes nothing; \
                 tag the derivation with requiredSystemFeatures = [ \"cuda\" ] to get the GPU",
                configured.join(", ")
            );
            return Verdict::Untagged(why, Some(config));
        }
        self.matched = RuleMatch::all(&config, &rules, &self.features);
        match unsandboxed {
            Some(why) => Verdict::Fail(RequestFailure::Unsandboxed(
                self.derivation_name(),
                self.first_match(),
                why,
            )),
            None => Verdict::Tagged(Tagged {
                config,
                rules,
                gpus: gpus.as_deref().map(GpusWanted::parse),
            }),
        }
    }

    /// The `.drv` is not on disk and Nix passed no JSON (remote builders, NixOS/nix#9272):
    /// follow the configured `missing_drv` policy.
    fn missing_drv(&mut self, name: &str, error: &str) -> Verdict {
        let config = match Config::load(&self.config_source) {
            Ok(c) => c,
            Err(e) => {
                let why =
                    format!("cannot read derivation {name} ({error}) and {e}; exposing nothing");
                self.warnings.push(why.clone());
                return Verdict::Untagged(why, None);
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
                Verdict::Untagged(why, Some(config))
            }
            MissingDrv::Fail => Verdict::Fail(RequestFailure::MissingDrv(
                name.to_owned(),
                error.to_owned(),
            )),
            MissingDrv::Expose => {
                self.features = config.features().map(|f| f.as_bytes().to_vec()).collect();
                if config.rules.is_empty() {
                    return Verdict::Untagged("the configuration has no rule".into(), Some(config));
                }
                self.warnings.push(format!(
                    "derivation {name} is not on disk; exposing every rule (missing_drv = \
                     \"expose\"); its cuda-sm-* features cannot be known, so they select no GPU"
                ));
                let rules: Vec<RuleId> = RuleId::all(&config).collect();
                self.matched = RuleMatch::all(&config, &rules, &self.features);
                Verdict::Tagged(Tagged {
                    config,
                    rules,
                    gpus: None,
                })
            }
        }
    }

    /// A derivation we cannot read: fail only when it could be a tagged build, i.e. when the
    /// bytes name a feature some rule answers to (with a broken config: a built-in feature).
    fn unreadable(&mut self, bytes: &[u8], name: &str, error: &str) -> Verdict {
        let loaded = Config::load(&self.config_source);
        let names: Vec<&str> = match &loaded {
            Ok(c) => c.features().collect(),
            Err(_) => DEFAULT_FEATURES.to_vec(),
        };
        let may_be_tagged = names
            .iter()
            .any(|n| memchr::memmem::find(bytes, n.as_bytes()).is_some());
        if may_be_tagged {
            return Verdict::Fail(RequestFailure::Unreadable(
                name.to_owned(),
                error.to_owned(),
            ));
        }
        let why = format!(
            "cannot read derivation {name} ({error}); it names no GPU feature, so exposing nothing"
        );
        self.warnings.push(why.clone());
        Verdict::Untagged(why, loaded.ok())
    }
}
