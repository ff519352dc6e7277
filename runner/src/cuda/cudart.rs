//! The binding to the CUDA runtime API (`libcudart`), dlopen'd: every runtime this process can
//! load, in the loader's order, with `cudaRuntimeGetVersion`, `cudaDriverGetVersion` and
//! `cudaGetDriverEntryPoint`, to compare with the driver's own answers. Finding runtimes inside
//! a package's files, without loading them, is [`crate::facts::runtime_scan`]; the `runtime::*` checks
//! are [`crate::checks::runtime`].
//!
//! Measured on the real runtimes (11.8, 12.9, 13.0) with the real drivers (535, 470) and no
//! GPU: `cudaDriverGetVersion` always answers; `cudaRuntimeGetVersion` answers, except that
//! 11.8 returns cudaErrorNoDevice (100) without a GPU; `cudaGetDriverEntryPoint` needs a GPU
//! (100 without one) and returns cudaErrorInsufficientDriver (35) for every symbol when the
//! runtime's major is newer than the driver's.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::path::{Path, PathBuf};

use cuda_sandbox_elfkit::fatbin::rules::Toolkit;
use libloading::Library;

use super::driver::ProcAddress;
use super::loaded::{loader_search_path, LoadedFile};
use super::version::CudaVersion;

/// The SONAMEs of the CUDA runtimes, newest first: what a program built against CUDA 13, 12
/// or 11 asks the loader for.
pub(crate) const CUDART_NAMES: &[&str] =
    &["libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"];

/// The runtime API's (`cudaError_t`) cudaErrorInsufficientDriver: the runtime needs a newer
/// driver.
pub(crate) const CUDART_ERROR_INSUFFICIENT_DRIVER: c_int = 35;
/// The runtime API's (`cudaError_t`) cudaErrorNoDevice; the driver API's CUDA_ERROR_NO_DEVICE
/// has the same number in another enum ([`crate::cuda::result::CUDA_ERROR_NO_DEVICE`]).
pub(crate) const CUDART_ERROR_NO_DEVICE: c_int = 100;

type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type GetEntryPoint =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, u64, *mut c_int) -> c_int;
type GetEntryPointByVersion =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_uint, u64, *mut c_int) -> c_int;

/// A loaded CUDA runtime. Never unloaded.
pub(crate) struct Runtime {
    /// Which file the loader picked.
    pub file: LoadedFile,
    runtime_get_version: GetVersion,
    driver_get_version: GetVersion,
    get_entry_point: Option<GetEntryPoint>,
    get_entry_point_by_version: Option<GetEntryPointByVersion>,
    _library: Library,
}

/// A runtime's CUDA version, and how it was learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RuntimeVersion {
    /// The whole version (`cudaRuntimeGetVersion`'s, or the file name's), or only the major
    /// (`libcudart.so.12`).
    pub toolkit: Toolkit,
    /// `cudaRuntimeGetVersion`'s error, when it refused to answer.
    pub error: Option<c_int>,
}

impl RuntimeVersion {
    /// The whole version, when known.
    pub(crate) fn exact(&self) -> Option<CudaVersion> {
        match self.toolkit {
            Toolkit::Exact(v) => Some(v),
            Toolkit::Major(_) => None,
        }
    }
}

/// The version in a runtime's file name: `libcudart.so.12.9.79` → 12.9, `libcudart.so.12` →
/// major 12 only. `libcudart.so.11.0` is the SONAME of every 11.x runtime, not version 11.0.
pub(crate) fn version_from_file_name(path: &Path) -> Option<Toolkit> {
    let rest = path.file_name()?.to_str()?.strip_prefix("libcudart.so.")?;
    let mut parts = rest.split('.');
    let major: i32 = parts.next()?.parse().ok()?;
    let minor: Option<i32> = parts.next().and_then(|m| m.parse().ok());
    Some(match (rest, minor) {
        ("11.0", _) | (_, None) => Toolkit::Major(major),
        (_, Some(minor)) => Toolkit::Exact(CudaVersion(major * 1000 + minor * 10)),
    })
}

/// A `--cudart` file (as given) that cannot be used as a CUDA runtime, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--cudart {}: {}", .0.display(), .1)]
pub(crate) struct CudartError(PathBuf, NotARuntime);

/// Why a library is not a usable CUDA runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NotARuntime {
    /// `dlopen` failed; the loader's own message.
    #[error("{0}")]
    NotLoadable(String),
    /// It lacks `cudaRuntimeGetVersion` or `cudaDriverGetVersion`; the loader's message.
    #[error("not a CUDA runtime: {0}")]
    MissingExport(String),
    /// `dladdr` could not name the file the loader picked.
    #[error("the loader cannot say which file the CUDA runtime is")]
    FileUnknown,
}

impl Runtime {
    /// Loads each of `explicit` (from `--cudart`), or else every CUDA runtime this process can
    /// load by name: the `libcudart.so*` files in the loader's search directories, in its
    /// order, then any the loader finds only through `ld.so.cache`.
    pub(crate) fn load_all(explicit: &[PathBuf]) -> Result<Vec<Runtime>, CudartError> {
        if !explicit.is_empty() {
            return explicit
                .iter()
                .map(|path| {
                    let refused = |why| CudartError(path.clone(), why);
                    // SAFETY: loading a library runs its initialisers; that is the point.
                    let library = unsafe { Library::new(path) }
                        .map_err(|e| refused(NotARuntime::NotLoadable(e.to_string())))?;
                    Runtime::from_library(library).map_err(refused)
                })
                .collect();
        }
        let mut runtimes: Vec<Runtime> = Vec::new();
        let in_search_path = loader_search_path().into_iter().flat_map(|dir| {
            let mut here: Vec<PathBuf> = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("libcudart.so."))
                })
                .collect();
            here.sort();
            here
        });
        for candidate in in_search_path.chain(CUDART_NAMES.iter().map(PathBuf::from)) {
            // Each file once: by its real path, before loading it and as the loader names it.
            let loaded = |real: &Path| runtimes.iter().any(|r| r.file.real_path == real);
            if std::fs::canonicalize(&candidate).is_ok_and(|real| loaded(&real)) {
                continue;
            }
            // SAFETY: as above. A bare name goes through the loader's search (ld.so.cache).
            let library = unsafe { Library::new(&candidate) };
            let Some(runtime) = library.ok().and_then(|l| Runtime::from_library(l).ok()) else {
                continue;
            };
            if loaded(&runtime.file.real_path) {
                continue;
            }
            runtimes.push(runtime);
        }
        Ok(runtimes)
    }

    fn from_library(library: Library) -> Result<Runtime, NotARuntime> {
        // SAFETY: the signatures are cuda_runtime_api.h's.
        unsafe {
            let runtime_get_version: GetVersion = *library
                .get(b"cudaRuntimeGetVersion\0")
                .map_err(|e| NotARuntime::MissingExport(e.to_string()))?;
            let driver_get_version: GetVersion = *library
                .get(b"cudaDriverGetVersion\0")
                .map_err(|e| NotARuntime::MissingExport(e.to_string()))?;
            let get_entry_point = library.get(b"cudaGetDriverEntryPoint\0").ok().map(|s| *s);
            let get_entry_point_by_version = library
                .get(b"cudaGetDriverEntryPointByVersion\0")
                .ok()
                .map(|s| *s);
            let file = LoadedFile::containing(runtime_get_version as usize)
                .ok_or(NotARuntime::FileUnknown)?;
            Ok(Runtime {
                file,
                runtime_get_version,
                driver_get_version,
                get_entry_point,
                get_entry_point_by_version,
                _library: library,
            })
        }
    }

    /// The runtime's version: `cudaRuntimeGetVersion`, else what the file names say (the
    /// loaded path, then the real file), else `None`.
    pub(crate) fn version(&self) -> Option<RuntimeVersion> {
        let (toolkit, error) = match get_version(self.runtime_get_version) {
            Ok(v) => (Toolkit::Exact(v), None),
            Err(code) => (
                [&self.file.real_path, &self.file.path]
                    .into_iter()
                    .filter_map(|p| version_from_file_name(p))
                    .max_by_key(|t| matches!(t, Toolkit::Exact(_)))?,
                Some(code),
            ),
        };
        Some(RuntimeVersion { toolkit, error })
    }

    /// `cudaDriverGetVersion` (`Err` holds the cudaError_t).
    pub(crate) fn driver_version(&self) -> Result<CudaVersion, c_int> {
        get_version(self.driver_get_version)
    }

    /// `cudaGetDriverEntryPoint(symbol, flags 0)`, which resolves at min(the runtime's own
    /// version, the driver's); through `…ByVersion` at `version` when only that is exported.
    /// Its `code` is a `cudaError_t`, its status a `cudaDriverEntryPointQueryResult` (always
    /// given).
    pub(crate) fn driver_entry_point(&self, symbol: &str, version: i32) -> Option<ProcAddress> {
        let name = CString::new(symbol).ok()?;
        let mut pointer: *mut c_void = std::ptr::null_mut();
        let mut status: c_int = -1;
        // SAFETY: cuda_runtime_api.h signatures, out-pointers to live locals. The 11.x ABI
        // has no status parameter; passing one more argument is harmless in the C ABI.
        let code = unsafe {
            match (self.get_entry_point, self.get_entry_point_by_version) {
                (Some(f), _) => f(name.as_ptr(), &mut pointer, 0, &mut status),
                (None, Some(f)) => f(
                    name.as_ptr(),
                    &mut pointer,
                    version as c_uint,
                    0,
                    &mut status,
                ),
                (None, None) => return None,
            }
        };
        Some(ProcAddress {
            code,
            pointer: pointer as usize,
            symbol_status: Some(status),
        })
    }

    /// The entry-point export this runtime offers, if any.
    pub(crate) fn entry_point_export(&self) -> Option<&'static str> {
        self.get_entry_point
            .map(|_| "cudaGetDriverEntryPoint")
            .or(self
                .get_entry_point_by_version
                .map(|_| "cudaGetDriverEntryPointByVersion"))
    }
}

/// Calls `cudaRuntimeGetVersion` or `cudaDriverGetVersion` (`Err` holds the cudaError_t).
fn get_version(f: GetVersion) -> Result<CudaVersion, c_int> {
    let mut version = 0;
    // SAFETY: cuda_runtime_api.h signature; valid out-pointer.
    match unsafe { f(&mut version) } {
        0 => Ok(CudaVersion(version)),
        code => Err(code),
    }
}

/// The name of a cudaError_t that the runtime checks meet.
pub(crate) fn error_name(code: c_int) -> &'static str {
    match code {
        0 => "cudaSuccess",
        1 => "cudaErrorInvalidValue",
        3 => "cudaErrorInitializationError",
        34 => "cudaErrorStubLibrary",
        CUDART_ERROR_INSUFFICIENT_DRIVER => "cudaErrorInsufficientDriver",
        CUDART_ERROR_NO_DEVICE => "cudaErrorNoDevice",
        500 => "cudaErrorSymbolNotFound",
        803 => "cudaErrorSystemDriverMismatch",
        804 => "cudaErrorCompatNotSupportedOnDevice",
        _ => "cudaError (unlisted)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_give_what_they_can() {
        let v = |n: &str| version_from_file_name(Path::new(n));
        assert_eq!(
            v("libcudart.so.12.9.79"),
            Some(Toolkit::Exact(CudaVersion(12090)))
        );
        assert_eq!(v("libcudart.so.12"), Some(Toolkit::Major(12)));
        assert_eq!(v("libcudart.so.11.0"), Some(Toolkit::Major(11)));
        assert_eq!(
            v("libcudart.so.11.8.89"),
            Some(Toolkit::Exact(CudaVersion(11080)))
        );
        assert_eq!(v("libcuda.so.1"), None);
    }
}
