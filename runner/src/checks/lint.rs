//! `lint::elf` (only with `--lint PATH`): the ELF lint of [`crate::facts::elf_lint`] as a check, with the
//! compat directory from `--compat-dir` or, when the hook chose compat, its manifest.

use cuda_sandbox_cuda_facts::Capability;
use cuda_sandbox_elfkit::fatbin::rules::{Driver, DriverVersion};
use cuda_sandbox_manifest::versions::cuda_for_driver;
use cuda_sandbox_manifest::DriverKind;

use crate::check::Outcome;
use crate::facts;
use crate::facts::elf_lint::{self, LintConfig};
use crate::facts::expectations::ManifestState;
use crate::facts::gpu_code::Target;
use crate::facts::lint_report::FindingKind;
use crate::facts::zluda_code;
use crate::options::LintOptions;
use crate::session::Session;

/// `--target` without a driver CUDA version to judge PTX by (no `--driver-cuda`, no manifest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "--target sm_{} needs the CUDA version of the driver that will load the code: add \
     --driver-cuda X.Y (e.g. 12.2 for a 535 driver) or --driver VERSION",
    .0.sm()
)]
pub struct TargetNeedsDriver(Capability);

/// The driver the hook chose, as the rules judge it: libcuda's CUDA version, the kernel
/// module's (from its version, else the host's CUDA version: they differ under compat), and,
/// for the host's own driver, libcuda's version (that of the kernel module).
pub(crate) fn manifest_driver(manifest: &ManifestState) -> Option<Driver> {
    let d = manifest.driver()?;
    let cuda = d.cuda_version?;
    let kernel = d
        .kernel_driver
        .as_deref()
        .and_then(cuda_for_driver)
        .or(d.host_cuda_version)
        .unwrap_or(cuda);
    // The kernel driver's version is libcuda's only when the hook chose the host's driver.
    let version = d
        .kernel_driver
        .as_deref()
        .filter(|_| d.kind == DriverKind::Host)
        .and_then(|v| DriverVersion::parse(v).ok());
    Some(Driver {
        cuda,
        kernel,
        version,
    })
}

/// The driver `--target` is judged with: `--driver-cuda` or `--driver` (libcuda and kernel
/// module of that release), else the hook's manifest's.
pub(crate) fn target_driver(options: &LintOptions, manifest: &ManifestState) -> Option<Driver> {
    options.given_driver().or_else(|| manifest_driver(manifest))
}

/// The lint's settings from the flags: the compat directory falls back to the manifest's, and
/// so does the driver of `--target`. Targets without a driver version to judge PTX by are an
/// error saying which flag to give.
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
    if options.zluda {
        let devices = match options.target.as_slice() {
            [] => vec![zluda_code::REPORTED_CAPABILITY],
            given => given.iter().map(|arch| arch.capability).collect(),
        };
        let driver = Driver::of(zluda_code::REPORTED_CUDA);
        config.targets = devices
            .into_iter()
            .map(|device| Target::new(device, driver, true))
            .collect();
    } else if let Some(first) = options.target.first() {
        let driver = target_driver(options, manifest).ok_or(TargetNeedsDriver(first.capability))?;
        config.targets = options
            .target
            .iter()
            .map(|arch| Target::new(arch.capability, driver, false))
            .collect();
    }
    config.targets_given = options.target.iter().map(|a| a.sm_name()).collect();
    Ok(config)
}

/// Runs `lint::elf`.
pub(crate) fn elf(session: &Session) -> Result<Outcome, Outcome> {
    let mut config =
        config(&session.options.lint, &session.manifest).map_err(Outcome::fail_without_facts)?;
    // The paths of `--lint` are the package under test: no driver link is a finding anywhere.
    config.under_test = true;
    let report = elf_lint::lint(&session.options.lint_paths, &config);
    let facts = facts! {
        "paths" => &session.options.lint_paths,
        "driver_link" => &config.driver_link,
        "compat_dir" => &config.compat_dir,
        "summary" => report.summary(),
        "lint" => &report,
    };
    let Some((first, rest)) = report.findings.split_first() else {
        return Ok(Outcome::pass(
            format!(
                "{}: driver link in DT_RUNPATH{}, no stub libcuda in its search path, no static CUDA \
                 archive",
                report.summary(),
                if config.compat_dir.is_some() {
                    ", compat directory first"
                } else {
                    ""
                }
            ),
            facts,
        ));
    };
    let n = report.findings.len();
    let rest: Vec<String> = rest.iter().map(ToString::to_string).collect();
    if report
        .findings
        .iter()
        .all(|f| f.kind == FindingKind::GpuCodeUnknown)
    {
        // Only pairs the rules could not judge: the lint's own status, not a failure.
        return Ok(Outcome::undecided(
            format!("the rules cannot judge {n} file/target pair(s) (not a pass); first: {first}"),
            facts,
        )
        .with_detail(rest.join("\n")));
    }
    Ok(Outcome::fail(format!("{n} finding(s); first: {first}"), facts).with_detail_lines(&rest))
}
