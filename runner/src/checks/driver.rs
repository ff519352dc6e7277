//! `driver::library` (which libcuda.so.1 the loader picked, and whether it is the one the
//! hook's manifest chose) and `driver::version` (`cuInit`, `cuDriverGetVersion`,
//! `--min-cuda-version`, the manifest's CUDA version).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::check::{facts_of, Outcome};
use crate::cuda::version::CudaVersion;
use crate::facts;
use crate::facts::expectations;
use crate::facts::zluda::Zluda;
use crate::options::ExpectDriver;
use crate::session::{GpuUnavailable, Session};
use cuda_sandbox_manifest::DriverKind;

/// What `driver::library` reports once `libcuda.so.1` is loaded (the report's `facts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LibraryFacts {
    /// The path the loader opened.
    pub path: PathBuf,
    /// Its real file.
    pub real_path: PathBuf,
    /// `LD_LIBRARY_PATH` as this process has it.
    pub(crate) ld_library_path: Option<String>,
    /// `--expect-driver`, spelled as given.
    pub(crate) expect_driver: Option<String>,
    /// The manifest in brief (`path`, `kind`, `cuda_version`, `kernel_driver`), or a string
    /// saying why there is none ([`crate::facts::expectations::ManifestState::fact`]).
    pub manifest: Value,
    /// The manifest's right `libcuda.so.1` paths, when there is a manifest.
    pub(crate) manifest_libcuda: Option<Vec<String>>,
    /// ZLUDA's marks, when the loaded libcuda is ZLUDA (the CUDA driver API on AMD's HIP).
    pub zluda: Option<Zluda>,
}

/// Runs `driver::library`.
pub(crate) fn library(session: &Session) -> Result<Outcome, Outcome> {
    let search_path = std::env::var("LD_LIBRARY_PATH").ok();
    let expect = session.options.expect_driver.as_ref();
    let chosen = session.manifest.driver();
    let driver = session.driver().map_err(|why| {
        let why = match chosen {
            Some(m) if !m.libcuda.is_empty() => format!(
                "{why} (the hook chose {} {})",
                m.kind,
                expectations::chosen_path(m)
            ),
            _ => why.to_string(),
        };
        Outcome::fail(
            why,
            facts! {
                "ld_library_path" => search_path,
                "expect_driver" => expect.map(ExpectDriver::describe),
                "manifest" => session.manifest.fact(),
            },
        )
    })?;
    let file = &driver.file;
    let facts = facts_of(&LibraryFacts {
        path: file.path.clone(),
        real_path: file.real_path.clone(),
        ld_library_path: search_path,
        expect_driver: expect.map(ExpectDriver::describe),
        manifest: session.manifest.fact(),
        manifest_libcuda: chosen.map(|m| m.libcuda.clone()),
        zluda: session.zluda().cloned(),
    });
    let loaded = format!(
        "loaded {} (real file {}){}",
        file.path.display(),
        file.real_path.display(),
        session
            .zluda()
            .map_or(String::new(), |z| format!(": {}", z.describe()))
    );
    if let Some(why) = session.manifest.broken() {
        return Ok(Outcome::fail(format!("{loaded}, but {why}"), facts));
    }
    let loaded = match chosen.filter(|m| !m.libcuda.is_empty()) {
        Some(m) if !expectations::is_chosen(file, m) => {
            let why = expectations::library_mismatch(file, driver.version().ok(), m);
            return Ok(Outcome::fail(why, facts));
        }
        Some(m) => format!("{loaded}, the {} driver the hook chose", m.kind),
        None => loaded,
    };
    Ok(match expect {
        Some(ExpectDriver::PathPrefix(prefix)) if !file.is_under(prefix) => Outcome::fail(
            format!(
                "{loaded}, not under the expected {}: the loader found another driver first; \
                 check LD_LIBRARY_PATH/RUNPATH order and what the hook exposed",
                prefix.display()
            ),
            facts,
        ),
        Some(ExpectDriver::Host | ExpectDriver::Compat) => Outcome::pass(
            format!("{loaded}; host/compat is decided by nvml::consistency (it needs the kernel driver)"),
            facts,
        ),
        _ => Outcome::pass(loaded, facts),
    })
}

/// Runs `driver::version`.
pub(crate) fn version(session: &Session) -> Result<Outcome, Outcome> {
    let driver = session.driver().map_err(Outcome::fail_without_facts)?;
    let version = driver.version();
    let init = session.initialized().map(drop);
    let facts = facts! {
        "cuda_version" => version.as_ref().ok().map(ToString::to_string),
        "cuda_version_number" => version.as_ref().ok().map(|v| v.0),
        "cuInit" => if init.is_ok() { "ok" } else { "failed" },
        "min_cuda_version" => session.options.min_cuda_version.map(|v| v.to_string()),
        "manifest" => session.manifest.fact(),
    };
    let version = version.map_err(|why| Outcome::fail(why, facts.clone()))?;
    if let Some(why) = differs_from_hooks_choice(session, version) {
        return Ok(Outcome::fail(why, facts));
    }
    // "No device" is a matter of GPU access (nodes, kernel module, GPU), which the checks
    // that need a GPU report with its cause; any other cuInit failure is the driver's own.
    let init_note = match (&init, session.access.no_gpu_cause()) {
        (Ok(()), _) => "; cuInit ok".to_owned(),
        (Err(why), _) if !matches!(why, GpuUnavailable::NoDevice(..)) => {
            return Ok(Outcome::fail(why.clone(), facts))
        }
        (Err(_), _) if session.zluda().is_some() => {
            "; cuInit finds no GPU (on AMD: see devices::nodes)".to_owned()
        }
        (Err(_), cause) => format!(
            "; cuInit finds no GPU ({}), see the GPU checks",
            match cause {
                crate::facts::access::NoGpuCause::NodesNotExposed => "device nodes not exposed",
                crate::facts::access::NoGpuCause::KernelModuleNotLoaded =>
                    "kernel module not loaded",
                crate::facts::access::NoGpuCause::NoUsableGpu => "no usable GPU",
            }
        ),
    };
    if let Some(min) = session.options.min_cuda_version {
        if version < min {
            return Ok(Outcome::fail(
                format!(
                    "the loaded driver provides CUDA {version}, below the required {min}: expose a \
                     newer driver, or a cuda_compat driver >= {min} on a data-center GPU or Jetson"
                ),
                facts,
            ));
        }
    }
    Ok(Outcome::pass(
        format!(
            "{} provides CUDA {version} ({}){init_note}",
            session.zluda().map_or("driver".to_owned(), Zluda::describe),
            version.0
        ),
        facts,
    ))
}

/// Why the loaded driver, of CUDA `version`, is not the one the hook chose (the manifest's),
/// with the fix; `None` when it is, or when there is no choice to hold it to.
fn differs_from_hooks_choice(session: &Session, version: CudaVersion) -> Option<String> {
    let m = session.manifest.driver()?;
    let chosen = m.cuda_version.filter(|c| *c != version)?;
    let fix = match m.kind {
        DriverKind::Compat if version < chosen => {
            "the host's libcuda was loaded instead of the compat one: put the compat directory \
             before the driver link in DT_RUNPATH or LD_LIBRARY_PATH (see driver::library)"
        }
        DriverKind::Host if version > chosen => {
            "a compat libcuda was loaded though the hook chose the host driver for this kernel \
             driver: remove the compat directory from DT_RUNPATH and LD_LIBRARY_PATH (see \
             driver::library)"
        }
        _ => "another libcuda.so.1 was loaded than the one the hook chose (see driver::library)",
    };
    Some(format!(
        "the loaded driver provides CUDA {version} but the hook chose the {} driver providing \
         CUDA {chosen}: {fix}",
        m.kind
    ))
}
