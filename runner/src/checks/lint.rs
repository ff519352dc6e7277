//! `lint::elf` (only with `--lint PATH`): the ELF lint of [`crate::lint`] as a check, with the
//! compat directory from `--compat-dir` or, when the hook chose compat, its manifest.

use cuda_sandbox_elfkit::fatbin::Capability;
use cuda_sandbox_manifest::DriverKind;
use serde_json::json;

use crate::check::Outcome;
use crate::cli::LintOptions;
use crate::expectations::ManifestState;
use crate::facts;
use crate::gpu_code::Target;
use crate::lint::{self, LintConfig};
use crate::session::Session;

/// `--target` without a driver CUDA version to judge PTX by (no `--driver-cuda`, no manifest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "--target sm_{} needs the CUDA version of the driver that will load the code: add \
     --driver-cuda X.Y (e.g. 12.2 for a 535 driver)",
    .device.sm()
)]
pub struct TargetNeedsDriver {
    /// The `--target` given.
    pub device: Capability,
}

/// The lint's settings from the flags: the compat directory falls back to the manifest's, and
/// so does the driver CUDA version of `--target`. A target without a driver version to judge
/// PTX by is an error saying which flag to give.
pub fn config(
    options: &LintOptions,
    manifest: &ManifestState,
) -> Result<LintConfig, TargetNeedsDriver> {
    let mut config = LintConfig::new(&options.driver_link);
    config.compat_dir = options.compat_dir.clone().or_else(|| {
        manifest
            .driver()
            .filter(|d| d.kind == DriverKind::Compat)
            .and_then(|d| d.compat_dir.as_ref().map(Into::into))
    });
    config.closure = options.closure;
    if let Some(device) = options.target {
        let driver = options
            .driver_cuda
            .or_else(|| manifest.driver().and_then(|d| d.cuda_version))
            .ok_or(TargetNeedsDriver { device })?;
        config.target = Some(Target { device, driver });
    }
    Ok(config)
}

/// Runs `lint::elf`.
pub fn elf(session: &Session) -> Outcome {
    let config = match config(&session.options.lint, &session.manifest) {
        Ok(config) => config,
        Err(why) => return Outcome::fail(why, facts! {}),
    };
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
