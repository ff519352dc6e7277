//! `driver::library` (which libcuda.so.1 the loader picked) and `driver::version`
//! (`cuInit`, `cuDriverGetVersion`, `--min-cuda-version`).

use crate::checks::Outcome;
use crate::cli::ExpectDriver;
use crate::cuda::version::CudaVersion;
use crate::facts;
use crate::session::Session;

/// Runs `driver::library`.
pub fn library(session: &Session) -> Outcome {
    let search_path = std::env::var("LD_LIBRARY_PATH").ok();
    let expect = session.options.expect_driver.as_ref();
    let driver = match session.driver() {
        Ok(driver) => driver,
        Err(why) => {
            return Outcome::fail(
                why,
                facts! { "ld_library_path" => search_path, "expect_driver" => expect.map(ExpectDriver::describe) },
            )
        }
    };
    let file = &driver.file;
    let facts = facts! {
        "path" => &file.path,
        "real_path" => &file.real_path,
        "ld_library_path" => search_path,
        "expect_driver" => expect.map(ExpectDriver::describe),
    };
    let loaded = format!(
        "loaded {} (real file {})",
        file.path.display(),
        file.real_path.display()
    );
    match expect {
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
    }
}

/// Runs `driver::version`.
pub fn version(session: &Session) -> Outcome {
    let driver = match session.driver() {
        Ok(driver) => driver,
        Err(why) => return Outcome::fail(why, facts! {}),
    };
    let version = driver.version().map(CudaVersion);
    let init = session.initialized().map(drop);
    let facts = facts! {
        "cuda_version" => version.as_ref().ok().map(ToString::to_string),
        "cuda_version_number" => version.as_ref().ok().map(|v| v.0),
        "cuInit" => if init.is_ok() { "ok" } else { "failed" },
        "min_cuda_version" => session.options.min_cuda_version.map(|v| v.to_string()),
    };
    let version = match version {
        Ok(version) => version,
        Err(why) => return Outcome::fail(why, facts),
    };
    if let Err(why) = init {
        return Outcome::fail(why, facts);
    }
    if let Some(min) = session.options.min_cuda_version {
        if version < min {
            return Outcome::fail(
                format!(
                    "the loaded driver provides CUDA {version}, below the required {min}: expose a \
                     newer driver, or a cuda_compat driver >= {min} on a data-center GPU or Jetson"
                ),
                facts,
            );
        }
    }
    Outcome::pass(
        format!("cuInit ok, driver provides CUDA {version} ({})", version.0),
        facts,
    )
}
