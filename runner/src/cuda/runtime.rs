//! A CUDA runtime (`libcudart`), when one is loadable: its versions and
//! `cudaGetDriverEntryPoint`, to compare with the driver's own answers.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::path::Path;

use libloading::Library;

use super::loaded::LoadedFile;

/// Names tried, newest first, when no `--cudart` is given.
pub const CUDART_NAMES: &[&str] = &[
    "libcudart.so",
    "libcudart.so.13",
    "libcudart.so.12",
    "libcudart.so.11.0",
];

type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type GetEntryPoint =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, u64, *mut c_int) -> c_int;
type GetEntryPointByVersion =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_uint, u64, *mut c_int) -> c_int;

/// A loaded CUDA runtime. Never unloaded.
pub struct Runtime {
    /// Which file the loader picked.
    pub file: LoadedFile,
    runtime_get_version: GetVersion,
    driver_get_version: GetVersion,
    get_entry_point: Option<GetEntryPoint>,
    get_entry_point_by_version: Option<GetEntryPointByVersion>,
    _library: Library,
}

/// What `cudaGetDriverEntryPoint` answered for one symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryPoint {
    /// The `cudaError_t`.
    pub code: c_int,
    /// The pointer (null on failure).
    pub pointer: usize,
    /// `cudaDriverEntryPointQueryResult` (0 success, 1 symbol not found, 2 version not sufficient).
    pub status: c_int,
}

impl Runtime {
    /// Loads `explicit` (from `--cudart`), or else the first of [`CUDART_NAMES`] the loader
    /// finds. `Ok(None)` when none is found and none was asked for.
    pub fn load(explicit: Option<&Path>) -> Result<Option<Runtime>, String> {
        if let Some(path) = explicit {
            // SAFETY: loading a library runs its initialisers; that is the point.
            let library = unsafe { Library::new(path) }
                .map_err(|e| format!("--cudart {}: {e}", path.display()))?;
            return Runtime::from_library(library).map(Some);
        }
        for name in CUDART_NAMES {
            // SAFETY: as above.
            if let Ok(library) = unsafe { Library::new(name) } {
                return Runtime::from_library(library).map(Some);
            }
        }
        Ok(None)
    }

    fn from_library(library: Library) -> Result<Runtime, String> {
        // SAFETY: the signatures are cuda_runtime_api.h's.
        unsafe {
            let runtime_get_version: GetVersion = *library
                .get(b"cudaRuntimeGetVersion\0")
                .map_err(|e| format!("not a CUDA runtime: {e}"))?;
            let driver_get_version: GetVersion = *library
                .get(b"cudaDriverGetVersion\0")
                .map_err(|e| format!("not a CUDA runtime: {e}"))?;
            let get_entry_point = library.get(b"cudaGetDriverEntryPoint\0").ok().map(|s| *s);
            let get_entry_point_by_version = library
                .get(b"cudaGetDriverEntryPointByVersion\0")
                .ok()
                .map(|s| *s);
            let file = LoadedFile::containing(runtime_get_version as usize)
                .ok_or("the loader cannot say which file the CUDA runtime is")?;
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

    /// `cudaRuntimeGetVersion` (`Err` holds the cudaError_t).
    pub fn runtime_version(&self) -> Result<i32, c_int> {
        let mut version = 0;
        // SAFETY: valid out-pointer.
        match unsafe { (self.runtime_get_version)(&mut version) } {
            0 => Ok(version),
            code => Err(code),
        }
    }

    /// `cudaDriverGetVersion` (`Err` holds the cudaError_t).
    pub fn driver_version(&self) -> Result<i32, c_int> {
        let mut version = 0;
        // SAFETY: valid out-pointer.
        match unsafe { (self.driver_get_version)(&mut version) } {
            0 => Ok(version),
            code => Err(code),
        }
    }

    /// `cudaGetDriverEntryPoint(symbol, flags 0)`, which resolves at the runtime's own
    /// version; through `…ByVersion` at `runtime_version` when only that is exported.
    pub fn driver_entry_point(&self, symbol: &str, runtime_version: i32) -> Option<EntryPoint> {
        let name = CString::new(symbol).ok()?;
        let mut pointer: *mut c_void = std::ptr::null_mut();
        let mut status: c_int = -1;
        // SAFETY: cuda_runtime_api.h signatures, out-pointers to live locals. The 11.x ABI
        // has no status parameter; passing one more argument is harmless in the C ABI.
        let code = unsafe {
            if let Some(f) = self.get_entry_point {
                f(name.as_ptr(), &mut pointer, 0, &mut status)
            } else {
                let f = self.get_entry_point_by_version?;
                f(
                    name.as_ptr(),
                    &mut pointer,
                    runtime_version as c_uint,
                    0,
                    &mut status,
                )
            }
        };
        Some(EntryPoint {
            code,
            pointer: pointer as usize,
            status,
        })
    }

    /// The entry-point export this runtime offers, if any.
    pub fn entry_point_export(&self) -> Option<&'static str> {
        if self.get_entry_point.is_some() {
            Some("cudaGetDriverEntryPoint")
        } else if self.get_entry_point_by_version.is_some() {
            Some("cudaGetDriverEntryPointByVersion")
        } else {
            None
        }
    }
}
