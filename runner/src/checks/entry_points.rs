//! `driver::entry_points`: `cuGetProcAddress` returns, at each API version that matters, exactly
//! the versioned export `dlsym` gives (e.g. `cuMemAlloc` at 3.2+ → `cuMemAlloc_v2`). The
//! versions probed: every version at which a checked function changed ABI (up to the
//! driver's), the driver's own, min(runtime, driver) for each loadable CUDA runtime, and
//! `--api-version`. Needs no GPU: the real drivers answer before and without `cuInit`.
//!
//! Above its own version the real driver does not refuse: it answers CUDA_SUCCESS with its
//! newest variant (measured on 535 and 470). The check confirms and reports that, because it
//! is how code built against newer headers silently gets an older ABI.
//!
//! ZLUDA as Nixpkgs builds it (v4) exports `cuGetProcAddress` but answers it 801, like every
//! function it does not implement; the check is then skipped, saying so (ZLUDA v6 implements
//! it, and is checked as any driver).

use std::os::raw::c_int;

use serde::{Deserialize, Serialize};

use crate::check::{facts_of, Outcome};
use crate::cuda::driver::Driver;
use crate::cuda::result::CUDA_ERROR_NOT_SUPPORTED;
use crate::cuda::symbols::{abi_boundaries, CHECKED_SYMBOLS};
use crate::cuda::version::CudaVersion;
use crate::facts;
use crate::session::Session;

/// What `cuGetProcAddress` answered for one checked function, beside its versioned export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SymbolAnswer {
    /// The base name, e.g. `cuMemAlloc`.
    pub symbol: String,
    /// The export `dlsym` gives for it at the version compared with, e.g. `cuMemAlloc_v2`.
    pub expected_export: String,
    /// The CUresult, when the driver could be asked.
    pub(crate) result: Option<c_int>,
    /// `symbolStatus` (0 found, 1 not found, 2 version not sufficient); `None` from the 11.3
    /// ABI.
    pub(crate) symbol_status: Option<c_int>,
    /// Whether the answer is CUDA_SUCCESS with exactly that export's address.
    pub(crate) matches: bool,
}

/// The answers at one API version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionAnswers {
    /// The version asked at, e.g. `12.0`.
    pub(crate) api_version: String,
    /// Every checked function that exists there.
    pub(crate) symbols: Vec<SymbolAnswer>,
}

/// What `driver::entry_points` reports once it has probed the driver (the report's `facts`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryPointsFacts {
    /// The export used: `cuGetProcAddress_v2` or `cuGetProcAddress`.
    pub(crate) get_proc_address: String,
    /// The driver's CUDA version.
    pub(crate) driver_version: String,
    /// The version the process would ask at (`--api-version`, else min(runtime, driver), else
    /// the driver's).
    pub(crate) api_version: String,
    /// The answers there.
    pub symbols: Vec<SymbolAnswer>,
    /// Every version probed.
    pub(crate) api_versions: Vec<String>,
    /// The answers at each of them.
    pub(crate) per_version: Vec<VersionAnswers>,
    /// The next major above the driver's version, e.g. `13.0` for a 12.2 driver.
    pub(crate) above_driver_version: String,
    /// The answers there, compared with the driver's own variants.
    pub(crate) above_driver_symbols: Vec<SymbolAnswer>,
    /// Whether above its version the driver answers with its newest variants.
    pub(crate) above_driver_answers_with_newest: bool,
}

/// Compares `cuGetProcAddress(symbol, version)` with `dlsym(expected export at
/// expected_at)` for every checked symbol that exists at `expected_at`; returns the
/// per-symbol answers and the mismatches.
pub(crate) fn compare_with_exports(
    driver: &Driver,
    version: CudaVersion,
    expected_at: CudaVersion,
) -> (Vec<SymbolAnswer>, Vec<String>) {
    let mut facts = Vec::new();
    let mut mismatches = Vec::new();
    for entry in CHECKED_SYMBOLS {
        let Some(expected) = entry.expected_export(expected_at.0) else {
            continue;
        };
        let exported = driver.export_address(expected);
        let answer = driver.get_proc_address(entry.symbol, version.0);
        // CUDA_SUCCESS with exactly the export's address, or what differs.
        let wrong = match (answer, exported) {
            (_, None) => Some(format!("{expected} is not exported")),
            (Some(a), _) if a.code != 0 => Some(format!(
                "{} at {version}: CUresult {} (symbolStatus {:?}) instead of {expected}",
                entry.symbol, a.code, a.symbol_status
            )),
            (Some(a), Some(e)) if a.pointer == e => None,
            _ => Some(format!("{} at {version} is not {expected}", entry.symbol)),
        };
        facts.push(SymbolAnswer {
            symbol: entry.symbol.to_owned(),
            expected_export: expected.to_owned(),
            result: answer.map(|a| a.code),
            symbol_status: answer.and_then(|a| a.symbol_status),
            matches: wrong.is_none(),
        });
        mismatches.extend(wrong);
    }
    (facts, mismatches)
}

/// Runs `driver::entry_points`.
pub(crate) fn probe(session: &Session) -> Result<Outcome, Outcome> {
    let driver = session.driver().map_err(Outcome::fail_without_facts)?;
    let Some(export) = driver.get_proc_address_export() else {
        return Ok(Outcome::fail_without_facts(
            "the driver exports no cuGetProcAddress: it is older than CUDA 11.3; expose a newer driver",
        ));
    };
    let driver_version = driver
        .version()
        .map_err(|why| Outcome::fail(why, facts! { "get_proc_address" => export }))?;
    if let Some(asked) = session.options.api_version.filter(|v| *v > driver_version) {
        return Ok(Outcome::fail(
            format!(
                "--api-version {asked} is above the driver's CUDA {driver_version}: the driver \
                 answers there with its CUDA {driver_version} variants, not the {asked} ones; \
                 lower --api-version or expose a newer driver"
            ),
            facts! { "get_proc_address" => export, "driver_version" => driver_version.to_string() },
        ));
    }
    if let Some(zluda) = session.zluda() {
        let answer = driver.get_proc_address("cuInit", driver_version.0);
        if answer.is_some_and(|a| a.code == CUDA_ERROR_NOT_SUPPORTED) {
            return Ok(Outcome::skipped(
                format!(
                    "{} does not implement {export} (801 CUDA_ERROR_NOT_SUPPORTED, as ZLUDA v4, \
                     the one Nixpkgs builds, answers every function it lacks): only programs \
                     that call the driver API by name run on it, not a CUDA runtime's lookups; \
                     nothing to compare",
                    zluda.describe()
                ),
                facts! {
                    "get_proc_address" => export,
                    "driver_version" => driver_version.to_string(),
                    "zluda" => zluda,
                },
            ));
        }
    }
    // The API versions to probe: the ABI boundaries up to the driver's, min(runtime, driver)
    // for each loadable runtime, and `--api-version`.
    let runtimes = session.runtimes().unwrap_or_default();
    let mut versions = abi_boundaries(driver_version);
    versions.extend(
        runtimes
            .iter()
            .filter_map(|r| r.version()?.exact())
            .map(|r| r.min(driver_version)),
    );
    versions.extend(session.options.api_version);
    versions.sort();
    versions.dedup();
    // The API version the process would ask at: `--api-version`, else min(runtime, driver) for
    // the first loadable runtime (the loader's choice), else the driver's own.
    let primary = session.options.api_version.unwrap_or_else(|| {
        let exact = runtimes.first().and_then(|r| r.version()?.exact());
        exact.map_or(driver_version, |r| r.min(driver_version))
    });
    let (primary_symbols, _) = compare_with_exports(driver, primary, primary);
    // At each version, the answers compared with the versioned exports, and every mismatch.
    let mut mismatches = Vec::new();
    let mut per_version = Vec::new();
    for version in &versions {
        let (symbols, wrong) = compare_with_exports(driver, *version, *version);
        per_version.push(VersionAnswers {
            api_version: version.to_string(),
            symbols,
        });
        mismatches.extend(wrong);
    }
    let compared: usize = per_version.iter().map(|v| v.symbols.len()).sum();

    // Above the driver's version: the real driver answers with its newest variants.
    let above = CudaVersion((driver_version.0 / 1000 + 1) * 1000);
    let (above_symbols, above_wrong) = compare_with_exports(driver, above, driver_version);
    let facts = EntryPointsFacts {
        get_proc_address: export.to_owned(),
        driver_version: driver_version.to_string(),
        api_version: primary.to_string(),
        symbols: primary_symbols,
        api_versions: versions.iter().map(ToString::to_string).collect(),
        per_version,
        above_driver_version: above.to_string(),
        above_driver_symbols: above_symbols,
        above_driver_answers_with_newest: above_wrong.is_empty(),
    };
    if let Some(first) = mismatches.first() {
        return Ok(Outcome::fail(
            format!(
                "{export} disagrees with the driver's exports ({first}): this libcuda.so.1 is \
                 inconsistent (mixed driver files?); expose one complete driver"
            ),
            facts_of(&facts),
        )
        .with_detail(mismatches.join("\n")));
    }
    // What the driver answers above its own version, in words.
    let above_note = match above_wrong.first() {
        None => format!(
            "at {above}, above the driver, it answers CUDA_SUCCESS with its {driver_version} \
             variants (code built for newer headers gets the older ABI without an error)"
        ),
        Some(first) => format!(
            "at {above}, above the driver, it does not answer with its newest variants ({first})"
        ),
    };
    let others: Vec<String> = versions
        .iter()
        .filter(|v| **v != primary)
        .map(ToString::to_string)
        .collect();
    Ok(Outcome::pass(
        format!(
            "{export} at {primary}: {} symbols match their versioned exports, and so at every \
             other ABI boundary ({}; {compared} lookups in all); {above_note}",
            facts.symbols.len(),
            others.join(", "),
        ),
        facts_of(&facts),
    ))
}
