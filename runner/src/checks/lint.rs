//! `lint::elf` (only with `--lint PATH`): the ELF lint of [`crate::lint`] as a check, with the
//! compat directory from `--compat-dir` or, when the hook chose compat, its manifest.

use cuda_sandbox_manifest::DriverKind;
use serde_json::json;

use crate::checks::Outcome;
use crate::cli::LintOptions;
use crate::expectations::ManifestState;
use crate::facts;
use crate::lint::{self, LintConfig};
use crate::session::Session;

/// The lint's settings from the flags, the compat directory falling back to the manifest's.
pub fn config(options: &LintOptions, manifest: &ManifestState) -> LintConfig {
    let mut config = LintConfig::new(&options.driver_link);
    config.compat_dir = options.compat_dir.clone().or_else(|| {
        manifest
            .driver()
            .filter(|d| d.kind == DriverKind::Compat)
            .and_then(|d| d.compat_dir.as_ref().map(Into::into))
    });
    config.closure = options.closure;
    config
}

/// Runs `lint::elf`.
pub fn elf(session: &Session) -> Outcome {
    let config = config(&session.options.lint, &session.manifest);
    let report = lint::lint(&session.options.lint_paths, &config);
    let mut facts = facts! {
        "paths" => &session.options.lint_paths,
        "driver_link" => &config.driver_link,
        "compat_dir" => &config.compat_dir,
        "summary" => report.summary(),
    };
    facts.insert("lint".into(), json!(report));
    match report.findings.split_first() {
        None => Outcome::pass(
            format!(
                "{}: driver link in DT_RUNPATH{}, no stubs directory, no static CUDA archive",
                report.summary(),
                if config.compat_dir.is_some() {
                    ", compat directory first"
                } else {
                    ""
                }
            ),
            facts,
        ),
        Some((first, rest)) => {
            let outcome = Outcome::fail(
                format!("{} finding(s); first: {first}", report.findings.len()),
                facts,
            );
            if rest.is_empty() {
                outcome
            } else {
                let lines: Vec<String> = rest.iter().map(ToString::to_string).collect();
                outcome.with_detail(lines.join("\n"))
            }
        }
    }
}
