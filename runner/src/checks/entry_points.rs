//! `driver::entry_points`: `cuGetProcAddress` returns, at API version V, exactly the
//! versioned export `dlsym` gives (e.g. `cuMemAlloc` → `cuMemAlloc_v2`), and refuses a
//! version above the driver's.

use serde_json::{json, Value};

use crate::checks::Outcome;
use crate::cuda::driver::Driver;
use crate::cuda::symbols::{CHECKED_SYMBOLS, REFUSAL_PROBE};
use crate::cuda::version::CudaVersion;
use crate::facts;
use crate::session::Session;

/// Compares `cuGetProcAddress(symbol, version)` with `dlsym(expected export)` for every
/// checked symbol; returns the per-symbol facts and the first mismatch, if any.
pub fn compare_with_exports(driver: &Driver, version: CudaVersion) -> (Vec<Value>, Vec<String>) {
    let mut facts = Vec::new();
    let mut mismatches = Vec::new();
    for entry in CHECKED_SYMBOLS {
        let Some(expected) = entry.expected_export(version.0) else {
            continue;
        };
        let exported = driver.export_address(expected);
        let answer = driver.get_proc_address(entry.symbol, version.0);
        let ok = matches!(
            (answer, exported),
            (Some(a), Some(e)) if a.code == 0 && a.pointer == e
        );
        if !ok {
            mismatches.push(match (answer, exported) {
                (_, None) => format!("{expected} is not exported"),
                (Some(a), _) if a.code != 0 => format!(
                    "{} at {version}: CUresult {} (symbolStatus {:?}) instead of {expected}",
                    entry.symbol, a.code, a.symbol_status
                ),
                _ => format!("{} at {version} is not {expected}", entry.symbol),
            });
        }
        facts.push(json!({
            "symbol": entry.symbol,
            "expected_export": expected,
            "result": answer.map(|a| a.code),
            "symbol_status": answer.and_then(|a| a.symbol_status),
            "pointer": answer.map(|a| format!("{:#x}", a.pointer)),
            "export_pointer": exported.map(|p| format!("{p:#x}")),
            "matches": ok,
        }));
    }
    (facts, mismatches)
}

/// Runs `driver::entry_points`.
pub fn driver_entry_points(session: &Session) -> Outcome {
    let driver = match session.driver() {
        Ok(driver) => driver,
        Err(why) => return Outcome::fail(why, facts! {}),
    };
    let Some(export) = driver.get_proc_address_export() else {
        return Outcome::fail(
            "the driver exports no cuGetProcAddress: it is older than CUDA 11.3; expose a newer driver",
            facts! {},
        );
    };
    let driver_version = match driver.version() {
        Ok(v) => CudaVersion(v),
        Err(why) => return Outcome::fail(why, facts! { "get_proc_address" => export }),
    };
    let runtime_version = match session.runtime() {
        Ok(Some(runtime)) => runtime.runtime_version().ok().map(CudaVersion),
        _ => None,
    };
    let version = session
        .options
        .api_version
        .unwrap_or_else(|| match runtime_version {
            Some(r) => r.min(driver_version),
            None => driver_version,
        });
    let (symbols, mismatches) = compare_with_exports(driver, version);

    let above = driver_version.next_minor();
    let refusal = driver.get_proc_address(REFUSAL_PROBE, above.0);
    let refused = !matches!(refusal, Some(r) if r.code == 0 && r.pointer != 0);
    let facts = facts! {
        "get_proc_address" => export,
        "api_version" => version.to_string(),
        "driver_version" => driver_version.to_string(),
        "runtime_version" => runtime_version.map(|r| r.to_string()),
        "symbols" => symbols,
        "above_driver_version" => above.to_string(),
        "above_driver_result" => refusal.map(|r| r.code),
        "above_driver_refused" => refused,
    };
    if version > driver_version {
        return Outcome::fail(
            format!(
                "--api-version {version} is above the driver's CUDA {driver_version}: the driver \
                 cannot provide those entry points; lower --api-version or expose a newer driver"
            ),
            facts,
        );
    }
    if let Some(first) = mismatches.first() {
        return Outcome::fail(
            format!(
                "{export} disagrees with the driver's exports ({first}): this libcuda.so.1 is \
                 inconsistent (mixed driver files?); expose one complete driver"
            ),
            facts,
        )
        .with_detail(mismatches.join("\n"));
    }
    if !refused {
        return Outcome::fail(
            format!(
                "{export}({REFUSAL_PROBE}) at {above}, above the driver's CUDA {driver_version}, \
                 was answered instead of refused: the driver would hand out entry points it does \
                 not implement"
            ),
            facts,
        );
    }
    Outcome::pass(
        format!(
            "{export} at {version}: {} symbols match their versioned exports; {above} refused (CUresult {})",
            facts["symbols"].as_array().map_or(0, Vec::len),
            refusal.map_or(-1, |r| r.code)
        ),
        facts,
    )
}
