//! `runtime::entry_points`: a loadable CUDA runtime (libcudart) must not be newer than the
//! driver, and its `cudaGetDriverEntryPoint` must give the pointers `cuGetProcAddress`
//! gives at min(runtime, driver).

use serde_json::json;

use crate::checks::Outcome;
use crate::cuda::runtime::CUDART_NAMES;
use crate::cuda::symbols::CHECKED_SYMBOLS;
use crate::cuda::version::CudaVersion;
use crate::facts;
use crate::session::Session;

/// Runs `runtime::entry_points`.
pub fn runtime_entry_points(session: &Session) -> Outcome {
    let runtime = match session.runtime() {
        Ok(Some(runtime)) => runtime,
        Ok(None) => {
            return Outcome::skipped(
                format!(
                    "no CUDA runtime loadable ({} not found by the loader, no --cudart): \
                     nothing to compare",
                    CUDART_NAMES.join(", ")
                ),
                facts! { "cudart" => Option::<String>::None },
            )
        }
        Err(why) => {
            return Outcome::fail(
                format!("{why}: point --cudart at a libcudart.so, or drop the flag"),
                facts! {},
            )
        }
    };
    let driver = match session.driver() {
        Ok(driver) => driver,
        Err(why) => return Outcome::fail(why, facts! { "cudart" => &runtime.file }),
    };
    let runtime_version = runtime.runtime_version().map(CudaVersion);
    let runtime_driver_version = runtime.driver_version().map(CudaVersion);
    let driver_version = driver.version().map(CudaVersion);
    let mut facts = facts! {
        "cudart" => &runtime.file,
        "entry_point_function" => runtime.entry_point_export(),
        "runtime_version" => runtime_version.ok().map(|v| v.to_string()),
        "runtime_driver_version" => runtime_driver_version.ok().map(|v| v.to_string()),
        "driver_version" => driver_version.as_ref().ok().map(ToString::to_string),
    };
    let (r, d) = match (runtime_version, runtime_driver_version, driver_version) {
        (Ok(r), Ok(d), Ok(own)) if d == own => (r, d),
        (Ok(_), Ok(d), Ok(own)) => {
            return Outcome::fail(
                format!(
                "cudaDriverGetVersion says CUDA {d} but the loaded libcuda.so.1 says {own}: the \
                     runtime talks to a different driver; expose a single libcuda.so.1"
            ),
                facts,
            )
        }
        (Err(code), _, _) => {
            return Outcome::fail(
                format!("cudaRuntimeGetVersion failed with cudaError {code}"),
                facts,
            )
        }
        (_, Err(code), _) => {
            return Outcome::fail(
                format!("cudaDriverGetVersion failed with cudaError {code}"),
                facts,
            )
        }
        (_, _, Err(why)) => return Outcome::fail(why, facts),
    };
    let Some(entry_point_function) = runtime.entry_point_export() else {
        return Outcome::skipped(
            format!("libcudart {r} has no cudaGetDriverEntryPoint (older than 11.3): nothing to compare"),
            facts,
        );
    };
    let at = r.min(d);
    let mut symbols = Vec::new();
    let mut mismatches = Vec::new();
    for entry in CHECKED_SYMBOLS {
        let from_runtime = runtime.driver_entry_point(entry.symbol, r.0);
        let from_driver = driver.get_proc_address(entry.symbol, at.0);
        let same = matches!(
            (from_runtime, from_driver),
            (Some(rt), Some(dr)) if rt.code == 0 && dr.code == 0 && rt.pointer == dr.pointer
        );
        if !same {
            mismatches.push(entry.symbol);
        }
        symbols.push(json!({
            "symbol": entry.symbol,
            "runtime_result": from_runtime.map(|e| e.code),
            "runtime_status": from_runtime.map(|e| e.status),
            "runtime_pointer": from_runtime.map(|e| format!("{:#x}", e.pointer)),
            "driver_pointer": from_driver.map(|p| format!("{:#x}", p.pointer)),
            "matches": same,
        }));
    }
    facts.insert("compared_at".into(), json!(at.to_string()));
    facts.insert("symbols".into(), json!(symbols));
    if r > d {
        let outcome = Outcome::fail(
            format!(
                "libcudart {} is CUDA {r}, newer than the driver's CUDA {d}: cudaGetDriverEntryPoint \
                 asks the driver for CUDA {r} entry points it does not have (mixed CUDA versions); \
                 use a CUDA runtime <= {d}, or expose a newer driver (cuda_compat >= {r} on a \
                 data-center GPU or Jetson)",
                runtime.file.real_path.display()
            ),
            facts,
        );
        if mismatches.is_empty() {
            return outcome;
        }
        return outcome.with_detail(format!(
            "entry points that differ: {}",
            mismatches.join(", ")
        ));
    }
    if !mismatches.is_empty() {
        return Outcome::fail(
            format!(
                "{entry_point_function} and cuGetProcAddress at {at} disagree on {}: two drivers or \
                 two runtimes are mixed in this process; expose one of each",
                mismatches.join(", ")
            ),
            facts,
        );
    }
    Outcome::pass(
        format!(
            "libcudart {r} on driver {d}: {entry_point_function} matches cuGetProcAddress at {at} for {} symbols",
            symbols.len()
        ),
        facts,
    )
}
