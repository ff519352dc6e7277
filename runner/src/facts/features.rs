//! `cuda-sandbox-check features [--json] [--capability X.Y]...`: the Nix system features a
//! GPU builder advertises, `cuda` and the `cuda-sm-*` features of its GPUs in Nixpkgs'
//! convention ([`cuda_sandbox_cuda_facts::features`]), ready for nix.conf's
//! `extra-system-features`, `nix.buildMachines.*.supportedFeatures` or a Hydra machines file.
//!
//! The GPUs are those the driver reports to this process (`cuDeviceGetAttribute`'s compute
//! capability; a MIG instance reports its GPU's), or the capabilities given with
//! `--capability`, for a machine being configured without its driver. A capability the
//! convention does not know is named on stderr and adds nothing (exit status 3).

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use cuda_sandbox_cuda_facts::features::{self, GpuCapabilityError};
use cuda_sandbox_cuda_facts::gpus::{nixpkgs_pin, NixpkgsPin};
use cuda_sandbox_cuda_facts::Capability;
use serde::{Deserialize, Serialize};

use crate::cuda::devices::{self, CudaDevice};
use crate::cuda::driver::Driver;
use crate::output;

/// `cuda-sandbox-check features`.
#[derive(Debug, Parser)]
#[command(
    name = "cuda-sandbox-check features",
    about = "Prints the Nix system features of this builder's GPUs: cuda, and the cuda-sm-* \
             features of Nixpkgs' convention (_cuda.lib.getCudaSystemFeatures), for every GPU \
             the driver reports (a MIG instance counts as its GPU) or every --capability given.",
    after_help = "Use the line as nix.conf's extra-system-features (system-features would drop \
                  Nix's defaults), in nix.buildMachines.*.supportedFeatures, or in a Hydra \
                  machines file. The table follows one Nixpkgs commit (--json names it): a \
                  capability it does not know is named on stderr and advertises nothing.\n\
                  Exit status: 0 every GPU known, 3 some GPU's capability unknown to the table \
                  (the line lacks its features), 2 no GPU, no driver or bad usage."
)]
pub struct FeaturesCli {
    /// A GPU's compute capability (8.9, 89 or sm_89; repeatable): compute the features for
    /// these instead of asking the driver. A variant (9.0a) names code, not a GPU, and is
    /// refused.
    #[arg(long = "capability", value_name = "X.Y")]
    pub(crate) capabilities: Vec<String>,

    /// Print one JSON document: the features, the GPUs, the unknown capabilities and the
    /// Nixpkgs commit the table follows.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Why no features could be computed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FeaturesError {
    /// A `--capability` that is not a GPU's.
    #[error("--capability {0}")]
    Capability(#[from] GpuCapabilityError),
    /// The driver could not be loaded or asked.
    #[error("the driver cannot say which GPUs this is: {0} (give --capability X.Y instead)")]
    Driver(String),
    /// The driver reports no GPU.
    #[error("the driver reports no GPU (give --capability X.Y for a machine being configured)")]
    NoGpu,
}

/// One GPU the features were computed for (`devices::features`, `features`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureGpu {
    /// Its CUDA ordinal; `None` for a `features --capability`.
    pub(crate) ordinal: Option<i32>,
    /// `cuDeviceGetName` (a MIG instance's own name); `None` for a `features --capability`.
    pub(crate) name: Option<String>,
    /// Its compute capability (a MIG instance reports its GPU's).
    pub capability: Capability,
}

impl From<&CudaDevice> for FeatureGpu {
    fn from(device: &CudaDevice) -> FeatureGpu {
        FeatureGpu {
            ordinal: Some(device.ordinal),
            name: Some(device.name.clone()),
            capability: device.compute_capability,
        }
    }
}

/// A capability that adds no feature, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct UnknownCapability {
    /// The capability.
    pub capability: Capability,
    /// Why, in words.
    pub why: &'static str,
}

/// What `features --json` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct FeaturesReport {
    /// `cuda`, then the `cuda-sm-*` features in Nixpkgs' order.
    pub features: Vec<String>,
    /// `driver` or `capability` (given with `--capability`).
    pub source: &'static str,
    /// The GPUs, in CUDA order (or as given).
    pub gpus: Vec<FeatureGpu>,
    /// The capabilities that add nothing.
    pub unknown: Vec<UnknownCapability>,
    /// The Nixpkgs revision the table's convention follows.
    pub nixpkgs: &'static NixpkgsPin,
}

/// Runs `features`: the line (or the JSON) on stdout, the unknown capabilities on stderr; 0,
/// 3 with an unknown capability, or the error without GPUs or with bad input (main says
/// it on stderr, exit status 2).
pub fn run(cli: &FeaturesCli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // The report: from `--capability`, else from the driver.
    let (source, gpus) = if cli.capabilities.is_empty() {
        // The GPUs the driver reports to this process.
        let failed = |e: &dyn std::fmt::Display| FeaturesError::Driver(e.to_string());
        let driver = Driver::load().map_err(|e| failed(&e))?;
        driver.init().map_err(|e| failed(&e))?;
        let listed = devices::list(&driver).map_err(|e| failed(&e))?;
        if listed.is_empty() {
            return Err(FeaturesError::NoGpu.into());
        }
        ("driver", listed.iter().map(FeatureGpu::from).collect())
    } else {
        let gpus = cli
            .capabilities
            .iter()
            .map(|text| {
                Ok(FeatureGpu {
                    ordinal: None,
                    name: None,
                    capability: features::parse_gpu(text)?,
                })
            })
            .collect::<Result<Vec<_>, FeaturesError>>()?;
        ("capability", gpus)
    };
    let capabilities: Vec<Capability> = gpus.iter().map(|gpu| gpu.capability).collect();
    let advertised = features::advertised(&capabilities);
    let report = FeaturesReport {
        features: std::iter::once(features::CUDA.to_owned())
            .chain(advertised.features)
            .collect(),
        source,
        gpus,
        unknown: advertised
            .unknown
            .into_iter()
            .map(|(capability, why)| UnknownCapability {
                capability,
                why: why.describe(),
            })
            .collect(),
        nixpkgs: nixpkgs_pin(),
    };
    if cli.json {
        output::json(&report)?;
    } else {
        output::to_stdout(|out| writeln!(out, "{}", report.features.join(" ")))?;
    }
    for unknown in &report.unknown {
        output::error_line(format_args!(
            "cuda-sandbox-check features: compute capability {} is {}: it adds no cuda-sm-* \
             feature (the table follows {} {})",
            unknown.capability, unknown.why, report.nixpkgs.repository, report.nixpkgs.commit
        ));
    }
    let code = if report.unknown.is_empty() { 0 } else { 3 };
    Ok(ExitCode::from(code))
}
