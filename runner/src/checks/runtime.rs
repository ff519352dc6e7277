//! The `runtime::*` checks: the CUDA runtimes (libcudart) this process loads
//! ([`crate::cuda::cudart`]) beside the driver, as CUDA's version rules decide them.
//!
//! - `runtime::compatibility` (needs no GPU): every runtime this process can load (or each
//!   `--cudart`) against the loaded driver. Same major and not newer: fine. Same major and
//!   newer: CUDA's minor-version compatibility, which works; the check passes and reports the
//!   driver functions whose ABI differs between the two versions. Newer major: every runtime
//!   call fails with cudaErrorInsufficientDriver (35); the check fails naming it and the fix.
//!   Runtimes that resolve entry points at different versions in one process are flagged.
//! - `runtime::entry_points` (needs a GPU): `cudaGetDriverEntryPoint` hands out exactly the
//!   pointers `cuGetProcAddress` gives at min(runtime version, driver version), which are the
//!   versioned exports for that version: the rule the version-mixing hazard follows.

use std::os::raw::c_int;
use std::path::PathBuf;

use cuda_sandbox_elfkit::fatbin::rules::{self, toolkit_on_driver, Toolkit, ToolkitFit};
use serde::{Deserialize, Serialize};

use crate::check::{facts_of, Outcome};
use crate::cuda::cudart::{
    error_name, Runtime, RuntimeVersion, CUDART_ERROR_INSUFFICIENT_DRIVER, CUDART_ERROR_NO_DEVICE,
    CUDART_NAMES,
};
use crate::cuda::driver::Driver;
use crate::cuda::loaded::LoadedFile;
use crate::cuda::symbols::{abi_differences, AbiDifference, CHECKED_SYMBOLS};
use crate::cuda::version::CudaVersion;
use crate::facts;
use crate::session::Session;

/// How a runtime stands with the loaded driver.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Standing {
    /// Not newer than the driver: entry points at the runtime's own version.
    Supported(CudaVersion),
    /// Same major, newer minor: minor-version compatibility; entry points at the driver's.
    MinorNewer(CudaVersion),
    /// Same major, minor unknown without a GPU (cudart 11.x before cuInit).
    SameMajor,
    /// An older major, minor unknown: entry points at that major's own (unknown) version.
    OlderMajor,
    /// A newer major: cudaErrorInsufficientDriver.
    NewerMajor,
}

impl Standing {
    /// Its stable name in the report (`minor-newer 12.9`), never Rust's Debug text.
    fn name(&self) -> String {
        match self {
            Standing::Supported(v) => format!("supported {v}"),
            Standing::MinorNewer(v) => format!("minor-newer {v}"),
            Standing::SameMajor => "same-major".into(),
            Standing::OlderMajor => "older-major".into(),
            Standing::NewerMajor => "newer-major".into(),
        }
    }
}

fn standing(runtime: &RuntimeVersion, driver: CudaVersion) -> Standing {
    // The rule `lint --target` and `package::gpu_code` apply to a file's runtime too.
    let major = Toolkit::Major(runtime.toolkit.major());
    if toolkit_on_driver(major, &rules::Driver::of(driver)) == ToolkitFit::NewerMajor {
        return Standing::NewerMajor;
    }
    match runtime.exact() {
        Some(r) if r > driver => Standing::MinorNewer(r),
        Some(r) => Standing::Supported(r),
        None if runtime.toolkit.major() < driver.major() => Standing::OlderMajor,
        None => Standing::SameMajor,
    }
}

fn describe_differences(diffs: &[AbiDifference], lower: &str, higher: &str) -> String {
    diffs
        .iter()
        .map(|d| {
            format!(
                "{} ({lower} gets {}, code built for {higher} expects {})",
                d.symbol,
                d.lower.as_deref().unwrap_or("nothing"),
                d.higher.as_deref().unwrap_or("nothing")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A runtime's file as the report names it: where it was loaded from and its real file, or,
/// for one found in a package and not loaded, its path alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudartFile {
    /// The path it was loaded or found at.
    pub path: PathBuf,
    /// That path with every symlink resolved, for a loaded runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub real_path: Option<PathBuf>,
}

/// How one runtime was judged, when its version is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judged {
    /// Its major version.
    pub(crate) runtime_major: i32,
    /// `cudaRuntimeGetVersion`'s error, when it refused to answer.
    pub(crate) runtime_version_error: Option<c_int>,
    /// The driver version a loaded runtime says it talks to.
    pub(crate) runtime_driver_version: Option<String>,
    /// How it stands with the driver: `supported 12.0`, `minor-newer 12.9`, `same-major`,
    /// `older-major` or `newer-major`.
    pub(crate) standing: String,
    /// The checked functions whose ABI differs between it and the driver, under
    /// minor-version compatibility.
    pub(crate) abi_differences: Vec<AbiDifference>,
}

/// One runtime in the facts of `runtime::compatibility` and `package::runtimes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgedRuntime {
    /// Its file.
    pub cudart: CudartFile,
    /// How it is present (`libcudart`, `static libcudart`).
    pub(crate) form: String,
    /// Its version, when known exactly.
    pub(crate) runtime_version: Option<String>,
    /// The judgement; `None` (and absent from the report) when its version is unknown.
    #[serde(flatten)]
    pub(crate) judged: Option<Judged>,
}

/// What `runtime::compatibility` and `package::runtimes` report once there are runtimes and a
/// driver version to judge them by (the report's `facts`), and, of [`RuntimeEntryPoints`],
/// what `runtime::entry_points` reports once the driver gives its version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimesFacts<Entry = JudgedRuntime> {
    /// The driver's CUDA version they were judged against.
    pub(crate) driver_version: String,
    /// Every runtime judged, in order (for `runtime::entry_points`: every one that answered,
    /// in the loader's order).
    pub cudarts: Vec<Entry>,
}

/// What `runtime::entry_points` reports (the report's `facts`).
pub type RuntimeEntryPointsFacts = RuntimesFacts<RuntimeEntryPoints>;

/// One function as `runtime::entry_points` compared it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeSymbol {
    /// The base name, e.g. `cuMemAlloc`.
    pub(crate) symbol: String,
    /// The export for it at min(runtime, driver), e.g. `cuMemAlloc_v2`.
    pub(crate) expected_export: String,
    /// `cudaGetDriverEntryPoint`'s `cudaError_t`.
    pub(crate) runtime_result: Option<c_int>,
    /// Its `cudaDriverEntryPointQueryResult`.
    pub(crate) runtime_status: Option<c_int>,
    /// Whether runtime, `cuGetProcAddress` and the export agree on the address.
    pub(crate) matches: bool,
}

/// One runtime as `runtime::entry_points` compared it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeEntryPoints {
    /// Its file.
    pub(crate) cudart: LoadedFile,
    /// min(runtime version, driver version), where it must resolve.
    pub compared_at: String,
    /// Every checked function that exists there.
    pub(crate) symbols: Vec<RuntimeSymbol>,
}

/// One CUDA runtime to judge against the driver: where it is, its version, and, for a loaded
/// one, what it says of the driver and the library itself (to confirm a newer major's 35).
pub(crate) struct Candidate<'r> {
    /// The file, as messages name it.
    pub file: String,
    /// The file for the report.
    pub cudart: CudartFile,
    /// How it is present (`libcudart`, `a static copy in`, …), for messages.
    pub form: &'static str,
    /// Its version, when known.
    pub version: Option<RuntimeVersion>,
    /// The loaded runtime, when it was loaded.
    pub loaded: Option<&'r Runtime>,
}

impl<'r> Candidate<'r> {
    /// A runtime this process loaded.
    pub(crate) fn loaded(runtime: &'r Runtime) -> Candidate<'r> {
        Candidate {
            file: runtime.file.real_path.display().to_string(),
            cudart: CudartFile {
                path: runtime.file.path.clone(),
                real_path: Some(runtime.file.real_path.clone()),
            },
            form: "libcudart",
            version: runtime.version(),
            loaded: Some(runtime),
        }
    }
}

/// Judges `candidates` against the driver of CUDA `driver` by CUDA's version rules (the
/// module doc), with the ABI-difference report for minor-version compatibility and for
/// runtimes of one process resolving at different versions. A candidate whose version is
/// unknown fails when it was loaded (it should answer), and is a note otherwise.
pub(crate) fn judge(candidates: &[Candidate], driver: CudaVersion) -> Outcome {
    let mut found = Findings::default();
    let per_runtime: Vec<JudgedRuntime> = candidates
        .iter()
        .map(|candidate| judge_candidate(candidate, driver, &mut found))
        .collect();
    // Two runtimes in one process resolving at different versions hand out different ABIs.
    let resolved_at = &mut found.resolved_at;
    resolved_at.sort();
    resolved_at.dedup_by_key(|(v, _, _)| *v);
    if let [(low, low_file, low_shown), .., (high, high_file, high_shown)] = resolved_at.as_slice()
    {
        let diffs = abi_differences(*low, *high);
        if !diffs.is_empty() {
            found.failures.push(format!(
                "mixed CUDA runtimes: {low_file} resolves driver entry points at {low_shown}, \
                 {high_file} at {high_shown}; one process loading both gets two ABIs of {}; \
                 build everything against one CUDA version",
                describe_differences(&diffs, low_shown, high_shown)
            ));
        }
    }
    let facts = facts_of(&RuntimesFacts {
        driver_version: driver.to_string(),
        cudarts: per_runtime,
    });
    Outcome::first_failure(&found.failures, &found.notes, facts)
}

/// Where a runtime resolves driver entry points: a version to compute differences with, the
/// file, how to print the version.
type ResolvedAt = (CudaVersion, String, String);

/// What judging the candidates found, in their order.
#[derive(Default)]
struct Findings {
    failures: Vec<String>,
    notes: Vec<String>,
    resolved_at: Vec<ResolvedAt>,
}

/// Judges one candidate against the driver of CUDA `driver`, adding to `found`; its entry in
/// the report.
fn judge_candidate(
    candidate: &Candidate,
    driver: CudaVersion,
    found: &mut Findings,
) -> JudgedRuntime {
    let (file, form) = (&candidate.file, candidate.form);
    let mut entry = JudgedRuntime {
        cudart: candidate.cudart.clone(),
        form: form.to_owned(),
        runtime_version: None,
        judged: None,
    };
    let Some(version) = candidate.version else {
        match candidate.loaded {
            Some(_) => found.failures.push(format!(
                "{file}: cudaRuntimeGetVersion fails and the file name gives no version"
            )),
            None => found.notes.push(format!(
                "{form} {file}: its version cannot be read (a stripped static copy keeps no \
                 version string), so it is not judged"
            )),
        }
        return entry;
    };
    // Judged by its standing against the driver (and the driver its loaded runtime talks
    // to): the checked functions whose ABI differs between them, under minor-version
    // compatibility.
    let says_driver = candidate.loaded.and_then(|r| r.driver_version().ok());
    let standing = standing(&version, driver);
    let mut diffs: Vec<AbiDifference> = Vec::new();
    match (&standing, says_driver) {
        (_, Some(d)) if d != driver => found.failures.push(format!(
            "{file}: cudaDriverGetVersion says CUDA {d} but the loaded libcuda.so.1 says \
             {driver}: the runtime talks to another driver; expose a single libcuda.so.1"
        )),
        (Standing::NewerMajor, _) => found
            .failures
            .push(newer_major(candidate, &version, driver)),
        (Standing::MinorNewer(r), _) => {
            diffs = abi_differences(driver, *r);
            found.notes.push(format!(
                "{form} {r} on driver {driver}: minor-version compatibility; \
                 cudaGetDriverEntryPoint resolves at {driver}{}",
                if diffs.is_empty() {
                    String::from(" (no checked function differs)")
                } else {
                    format!(
                        ", so these differ: {}",
                        describe_differences(&diffs, &driver.to_string(), &r.to_string())
                    )
                }
            ));
            found
                .resolved_at
                .push((driver, file.clone(), driver.to_string()));
        }
        (Standing::Supported(r), _) => {
            found.notes.push(format!(
                "{form} {} on driver {driver}: supported",
                version.toolkit
            ));
            let at = (*r).min(driver);
            found.resolved_at.push((at, file.clone(), at.to_string()));
        }
        (Standing::OlderMajor, _) => {
            found.notes.push(format!(
                "{form} {} on driver {driver}: supported (an older major)",
                version.toolkit
            ));
            // The minor is unknown: compare as the major's last minor, so only the
            // differences every minor of it has are claimed.
            let last = CudaVersion(version.toolkit.major() * 1000 + 990);
            found
                .resolved_at
                .push((last, file.clone(), version.toolkit.to_string()));
        }
        (Standing::SameMajor, _) => found.notes.push(match version.error {
            Some(code) => format!(
                "{form} {} on driver {driver}: same major (cudaRuntimeGetVersion answers \
                 {code} {} without a GPU, so the minor is unknown; minor-version \
                 compatibility covers it)",
                version.toolkit,
                error_name(code)
            ),
            None => format!(
                "{form} {} on driver {driver}: same major (the minor is unknown; \
                 minor-version compatibility covers it)",
                version.toolkit
            ),
        }),
    }
    entry.runtime_version = version.exact().map(|v| v.to_string());
    entry.judged = Some(Judged {
        runtime_major: version.toolkit.major(),
        runtime_version_error: version.error,
        runtime_driver_version: says_driver.map(|v| v.to_string()),
        standing: standing.name(),
        abi_differences: diffs,
    });
    entry
}

/// The failure of a runtime of a newer major than the driver's CUDA `driver`, with what a
/// loaded one really answers.
fn newer_major(candidate: &Candidate, version: &RuntimeVersion, driver: CudaVersion) -> String {
    let (file, form) = (&candidate.file, candidate.form);
    // Confirm what a loaded runtime really does: every call gives 35.
    let answer = candidate
        .loaded
        .and_then(|r| r.driver_entry_point("cuInit", driver.0))
        .map(|e| e.code);
    format!(
        "{form} {} ({file}) is a newer major than the driver's CUDA {driver}: every \
         runtime call fails with cudaErrorInsufficientDriver (35){}; install a driver \
         providing CUDA >= {}.0 on the host, or use cuda_compat >= {} on a data-centre GPU \
         or Jetson, or build against CUDA {}.x",
        version.toolkit,
        match answer {
            Some(CUDART_ERROR_INSUFFICIENT_DRIVER) => {
                " (cudaGetDriverEntryPoint answered 35 here)".to_owned()
            }
            Some(code) => format!(
                " (here cudaGetDriverEntryPoint answered {code} {})",
                error_name(code)
            ),
            None => String::new(),
        },
        version.toolkit.major(),
        version.toolkit,
        driver.major()
    )
}

/// The runtimes the `runtime::*` checks look at, the driver and its CUDA version; or the
/// outcome to give when there are no runtimes or no driver version.
fn runtimes_and_driver(session: &Session) -> Result<(&[Runtime], &Driver, CudaVersion), Outcome> {
    let runtimes = match session.runtimes() {
        Ok([]) => Err(Outcome::skipped(
            format!(
                "no CUDA runtime loadable ({} not found by the loader, no --cudart): nothing to \
                 compare",
                CUDART_NAMES.join(", ")
            ),
            facts! { "cudarts" => Vec::<String>::new() },
        )),
        Ok(runtimes) => Ok(runtimes),
        Err(why) => Err(Outcome::fail_without_facts(format!(
            "{why}: point --cudart at a libcudart.so, or drop the flag"
        ))),
    }?;
    let driver = session.driver().map_err(Outcome::fail_without_facts)?;
    let version = driver.version().map_err(Outcome::fail_without_facts)?;
    Ok((runtimes, driver, version))
}

/// Runs `runtime::compatibility`.
pub(crate) fn compatibility(session: &Session) -> Result<Outcome, Outcome> {
    let (runtimes, _, driver) = runtimes_and_driver(session)?;
    let candidates: Vec<Candidate> = runtimes.iter().map(Candidate::loaded).collect();
    Ok(judge(&candidates, driver))
}

/// Runs `runtime::entry_points`.
pub(crate) fn entry_points(session: &Session) -> Result<Outcome, Outcome> {
    let (runtimes, driver, driver_version) = runtimes_and_driver(session)?;
    let mut failures: Vec<String> = Vec::new();
    let mut passes: Vec<String> = Vec::new();
    let mut per_runtime: Vec<RuntimeEntryPoints> = Vec::new();
    for runtime in runtimes {
        let file = runtime.file.real_path.display().to_string();
        let Some(function) = runtime.entry_point_export() else {
            passes.push(format!(
                "{file} has no cudaGetDriverEntryPoint (older than 11.3)"
            ));
            continue;
        };
        // The first call initialises the runtime (afterwards even cudart 11.x knows its
        // version); a runtime it cannot be made on is passed over.
        let probe = runtime.driver_entry_point("cuInit", driver_version.0);
        let failure = match probe.map(|p| p.code) {
            Some(0) => None,
            None => continue,
            Some(CUDART_ERROR_NO_DEVICE) => Some(format!(
                "{function} failed with cudaErrorNoDevice (100): {}",
                session.access.explain_no_gpu()
            )),
            Some(CUDART_ERROR_INSUFFICIENT_DRIVER) => Some(format!(
                "{function} of {file} failed with cudaErrorInsufficientDriver (35): the runtime \
                 is newer than the driver's CUDA {driver_version} (see runtime::compatibility)"
            )),
            Some(code) => Some(format!(
                "{function} of {file} failed with {code} {}",
                error_name(code)
            )),
        };
        if let Some(failure) = failure {
            failures.push(failure);
            continue;
        }
        let Some(r) = runtime.version().and_then(|v| v.exact()) else {
            failures.push(format!("{file}: cudaRuntimeGetVersion gives no version"));
            continue;
        };
        let at = r.min(driver_version);
        // Each checked symbol as the runtime gives it beside what the driver gives at `at` and
        // the export of that version's variant: the same function, or not.
        let symbols: Vec<RuntimeSymbol> = CHECKED_SYMBOLS
            .iter()
            .filter_map(|entry| {
                let expected = entry.expected_export(at.0)?;
                let from_runtime = runtime.driver_entry_point(entry.symbol, r.0);
                let from_driver = driver.get_proc_address(entry.symbol, at.0);
                let export = driver.export_address(expected);
                let same = matches!(
                    (from_runtime, from_driver, export),
                    (Some(rt), Some(dr), Some(ex))
                        if rt.code == 0 && dr.code == 0
                            && rt.pointer == dr.pointer && rt.pointer == ex
                );
                Some(RuntimeSymbol {
                    symbol: entry.symbol.to_owned(),
                    expected_export: expected.to_owned(),
                    runtime_result: from_runtime.map(|e| e.code),
                    runtime_status: from_runtime.and_then(|e| e.symbol_status),
                    matches: same,
                })
            })
            .collect();
        let wrong: Vec<&str> = symbols
            .iter()
            .filter(|s| !s.matches)
            .map(|s| s.symbol.as_str())
            .collect();
        if wrong.is_empty() {
            passes.push(format!(
                "libcudart {r}: {function} gives the CUDA {at} variants (min(runtime {r}, driver \
                 {driver_version})) for {} functions",
                symbols.len()
            ));
        } else {
            failures.push(format!(
                "{function} of libcudart {r} does not give the CUDA {at} variants (min(runtime, \
                 driver)) for {}: two drivers are mixed in this process; expose one",
                wrong.join(", ")
            ));
        }
        per_runtime.push(RuntimeEntryPoints {
            cudart: runtime.file.clone(),
            compared_at: at.to_string(),
            symbols,
        });
    }
    let facts = facts_of(&RuntimesFacts {
        driver_version: driver_version.to_string(),
        cudarts: per_runtime,
    });
    Ok(Outcome::first_failure(&failures, &passes, facts))
}
