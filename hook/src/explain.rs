//! `cuda-sandbox-hook explain`: the plan rendered for a person (or as JSON).
//!
//! Answers "why can't my build see the GPU": the features found, the rules matched, every path
//! exposed and why, what was skipped and why, and what Nix would be told. The request is
//! resolved by the same function as the hook's ([`crate::request::resolve`], `missing_drv` and
//! `NIX_DERIVATION_V4` included) and the answer computed by the same pipeline
//! ([`crate::pipeline::run`]), without a lease and without writing a manifest.

use crate::act::Granted;
use crate::build_users::{self, AccessCheck};
use crate::pipeline::{self, Mode};
use crate::plan::Reason;
use crate::request::{self, Environment, Input, RuleMatch, Verdict};
use crate::slot::Slot;
use cuda_sandbox_manifest::DriverManifest;
use serde::Serialize;
use std::path::Path;

/// Everything `explain` reports.
#[derive(Debug, Serialize)]
pub struct Explanation {
    /// The derivation explained, if one was given.
    pub(crate) derivation: Option<String>,
    /// Its required system features (plus any given with `--features`).
    pub(crate) features: Vec<String>,
    /// Whether the features came from structured attrs.
    pub(crate) structured_attrs: bool,
    /// Where the configuration came from.
    pub(crate) config: String,
    /// Rules that matched.
    pub(crate) rules: Vec<RuleMatch>,
    /// What the build would be granted (empty when nothing matched).
    pub(crate) plan: Granted,
    /// One sentence: what happens to the build.
    pub(crate) verdict: String,
    /// Exactly what the hook prints for Nix (empty when it prints nothing).
    pub(crate) nix_answer: String,
    /// What the hook would warn about on stderr.
    pub(crate) warnings: Vec<String>,
    /// Whether Nix's build users can open the device nodes exposed (tagged builds only).
    pub(crate) build_users: Option<AccessCheck>,
}

/// Explains what a build of `drv` (and/or one requiring `extra_features`) would get.
pub fn explain(
    drv: Option<&Path>,
    extra_features: &[String],
    config_arg: Option<&Path>,
    env: &Environment,
) -> Explanation {
    let req = request::resolve(&Input {
        drv,
        extra_features,
        config: config_arg,
        always_load_config: true,
        ..Input::new(env)
    });
    let pipeline::Outcome {
        granted: plan,
        answer,
    } = pipeline::run(&req, Mode::Explain);
    let build_users = req
        .tagged()
        .filter(|_| plan.decision.exposures.iter().any(|e| e.reason.is_device()))
        .map(|tagged| build_users::check(&plan.decision.exposures, &tagged.config.host_root));
    let problems = &plan.decision.problems;
    let verdict = match (&answer, &req.verdict, problems.first()) {
        (Ok(_), Verdict::Untagged(why, _), _) => why.clone(),
        (Ok(_), ..) => format!("tagged: {} paths exposed", plan.decision.exposures.len()),
        (Err(_), _, Some(first)) => format!(
            "FAILS: the hook would refuse this build ({} problem(s), first: {})",
            problems.len(),
            first.kind
        ),
        (Err(e), ..) => format!("FAILS: {e}"),
    };
    Explanation {
        derivation: drv.map(|d| d.display().to_string()),
        features: req.features_lossy(),
        structured_attrs: req.structured,
        config: req.config_source.to_string(),
        rules: req.matched,
        plan,
        verdict,
        nix_answer: answer.map_or(String::new(), |a| String::from_utf8_lossy(&a).into_owned()),
        warnings: req.warnings,
        build_users,
    }
}

/// Renders an explanation for a terminal. Every line goes through [`Lines::line`], which
/// escapes control characters ([`crate::log::one_line`]): features, paths and names come from
/// the derivation and the host, and a newline or an escape sequence in one must not forge a
/// line (`verdict: …`) or drive the terminal.
pub fn render_text(e: &Explanation) -> String {
    let mut s = Lines(String::new());
    render_request(&mut s, e);
    render_lists(&mut s, &e.plan);
    if e.plan.closures.cached + e.plan.closures.computed > 0 {
        s.section(format!(
            "closures:    {} from cache, {} computed",
            e.plan.closures.cached, e.plan.closures.computed
        ));
    }
    render_gpus(&mut s, &e.plan);
    if let Some(d) = &e.plan.decision.driver {
        render_driver(&mut s, d);
    }
    if !e.plan.decision.problems.is_empty() {
        s.section("problems:".to_string());
        for p in &e.plan.decision.problems {
            s.line(format!("  {} (rule {})", p.kind, p.rule));
            s.line(format!("    fix: {}", p.kind.fix()));
        }
    }
    if let Some(check) = &e.build_users {
        s.section(format!("build users: {}", check.builders.describe()));
    }
    let access = e.build_users.as_ref().map(AccessCheck::warnings);
    for w in e
        .warnings
        .iter()
        .chain(&e.plan.decision.warnings)
        .chain(access.iter().flatten())
    {
        s.section(format!("warning:     {w}"));
    }
    s.section(format!("verdict:     {}", e.verdict));
    s.0
}

/// What was asked: the derivation, its features, the configuration and the rules matched.
fn render_request(s: &mut Lines, e: &Explanation) {
    if let Some(d) = &e.derivation {
        s.line(format!("derivation:  {d}"));
    }
    let from = if e.structured_attrs {
        " (structured attrs)"
    } else {
        ""
    };
    let features = if e.features.is_empty() {
        "(none)".to_string()
    } else {
        e.features.join(", ")
    };
    s.line(format!("features:    {features}{from}"));
    s.line(format!("config:      {}", e.config));
    for m in &e.rules {
        s.line(format!(
            "rule:        {} (matched feature '{}')",
            m.rule, m.feature
        ));
    }
}

/// What was exposed (with why), skipped (with why) and not carried out, each list under its
/// count when it is not empty.
fn render_lists(s: &mut Lines, plan: &Granted) {
    let d = &plan.decision;
    s.list(
        "exposed",
        d.exposures.iter().map(|x| {
            let place = if x.inside == x.outside {
                x.inside.display().to_string()
            } else {
                format!("{} <- {}", x.inside.display(), x.outside.display())
            };
            format!("{place:<60} {}", reason_words(&x.reason))
        }),
    );
    s.list(
        "skipped",
        d.skipped
            .iter()
            .map(|k| format!("{:<60} {}", k.path, k.why)),
    );
    s.list(
        "not carried out",
        d.not_carried_out.iter().map(|n| {
            let what = format!("CDI {}: {}", n.device, n.edit);
            format!("{what:<60} {}", n.why)
        }),
    );
}

/// Why a path is exposed, in words.
fn reason_words(reason: &Reason) -> String {
    match reason {
        Reason::Device { rule, glob } => format!("device {glob} (rule {rule})"),
        Reason::HostPath { rule } => format!("host path (rule {rule})"),
        Reason::Mount { rule } => format!("mount (rule {rule})"),
        Reason::SymlinkTarget { link } => format!("symlink target of {}", link.display()),
        Reason::ClosureMember { of } => format!("closure of {}", of.display()),
        Reason::Driver { rule, source } => format!("driver: {source} (rule {rule})"),
        Reason::Cdi {
            rule,
            device,
            spec,
            item,
            ..
        } => format!("CDI {device}: {item} from {} (rule {rule})", spec.display()),
        Reason::Mig { rule, capability } => format!("MIG: {capability} (rule {rule})"),
        Reason::Sysfs { rule } => format!("read-only part of /sys (rule {rule})"),
        Reason::Manifest => "manifest for the runner".to_string(),
    }
}

/// The GPUs (or MIG instances) the build is leased, or would be.
fn render_gpus(s: &mut Lines, plan: &Granted) {
    if plan.slots.is_empty() {
        return;
    }
    let gpus: Vec<String> = plan
        .slots
        .iter()
        .map(|slot| match slot {
            Slot::Gpu(g) => format!("nvidia{g}"),
            Slot::Mig(i) => format!(
                "nvidia{} MIG instance gi{} ci{} (one MIG instance per build)",
                i.gpu, i.gi, i.ci
            ),
        })
        .collect();
    s.section(format!(
        "gpus:        {} ({})",
        gpus.join(", "),
        if plan.lease.is_some() {
            "leased to this build"
        } else {
            "would be leased now; explain takes no lease"
        }
    ));
}

/// The driver the build gets: its kind and CUDA version, the kernel module, why, and the
/// libcuda paths it may load.
fn render_driver(s: &mut Lines, d: &DriverManifest) {
    s.section(format!(
        "driver:      {} (CUDA {})",
        d.kind,
        d.cuda_version
            .map_or_else(|| "unknown".to_string(), |v| v.to_string())
    ));
    if let Some(k) = &d.kernel_driver {
        s.line(format!("kernel:      NVIDIA kernel module {k}"));
    }
    s.line(format!("why:         {}", d.reason));
    if !d.libcuda.is_empty() {
        s.line(format!("libcuda:     {}", d.libcuda.join(" | ")));
    }
}

/// The text output, one escaped line at a time.
struct Lines(String);

impl Lines {
    /// Appends `text` as one line, its control characters escaped.
    fn line(&mut self, text: String) {
        self.0.push_str(&crate::log::one_line(&text));
        self.0.push('\n');
    }

    /// Appends a blank line, then `text` as one [`line`](Lines::line): the first line of a
    /// section.
    fn section(&mut self, text: String) {
        self.0.push('\n');
        self.line(text);
    }

    /// A list under its title and length, unless it is empty.
    fn list(&mut self, title: &str, items: impl ExactSizeIterator<Item = String>) {
        if items.len() > 0 {
            self.section(format!("{title} ({}):", items.len()));
            for item in items {
                self.line(format!("  {item}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Structured-attrs features were once printed raw, so a newline in one
    /// forged a `verdict:` line and an escape sequence reached the terminal.
    #[test]
    fn hostile_features_cannot_forge_a_line_or_reach_the_terminal() {
        let e = Explanation {
            derivation: Some("/nix/store/x-\u{1b}]0;pwned\u{7}.drv".into()),
            features: vec![
                "kvm\nverdict:     tagged: 9 paths exposed".into(),
                "\u{1b}[2J\u{202e}x".into(),
            ],
            structured_attrs: true,
            config: "built-in default".into(),
            rules: Vec::new(),
            plan: Granted::default(),
            verdict: "untagged".into(),
            nix_answer: String::new(),
            warnings: vec!["w\r\nverdict: forged".into()],
            build_users: None,
        };
        let text = render_text(&e);
        let verdicts: Vec<&str> = text.lines().filter(|l| l.contains("verdict:")).collect();
        assert_eq!(verdicts.len(), 3, "{text}");
        assert_eq!(
            text.lines().filter(|l| l.starts_with("verdict:")).count(),
            1,
            "{text}"
        );
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(!text.contains('\u{202e}'), "{text:?}");
        assert!(text.contains("kvm\\nverdict:"), "{text}");
    }
}
