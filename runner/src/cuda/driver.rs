//! The CUDA driver, dlopen'd by plain name (`libcuda.so.1`) so the loader's normal search
//! (LD_LIBRARY_PATH, RUNPATH, ld.so.cache) decides which one, as it would for any program.
//! Only the `_v2` exports that `cuda.h` maps the plain names to (`#define cuMemAlloc
//! cuMemAlloc_v2`) are resolved by name; never the legacy ones with 32-bit sizes.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::path::PathBuf;

use libloading::Library;

use super::loaded::LoadedFile;
use super::result::{self, CuError};
use super::version::CudaVersion;

/// The name the driver is loaded by.
pub(crate) const LIBCUDA: &str = "libcuda.so.1";

/// `CUdevice`.
pub(crate) type CuDevice = c_int;
/// `CUdeviceptr`.
pub(crate) type CuDevicePtr = u64;
/// Opaque driver handles (`CUcontext`, `CUmodule`, `CUfunction`, `CUevent`, `CUstream`).
pub(crate) type Handle = *mut c_void;

macro_rules! driver_api {
    ($( $field:ident = $symbol:literal : fn($($arg:ty),*) ; )*) => {
        /// The driver functions the runner calls, each with `f` `None` when this libcuda lacks it.
        #[allow(non_snake_case, missing_docs)]
        #[derive(Clone, Copy)]
        pub(crate) struct DriverFunctions {
            $( pub $field: Export<Option<unsafe extern "C" fn($($arg),*) -> c_int>>, )*
        }

        impl DriverFunctions {
            fn resolve(library: &Library) -> DriverFunctions {
                DriverFunctions {
                    $( $field: Export {
                        name: $symbol,
                        // SAFETY: each symbol has this signature in cuda.h.
                        f: unsafe { library.get(concat!($symbol, "\0").as_bytes()).ok().map(|s| *s) },
                    }, )*
                }
            }
        }
    };
}

driver_api! {
    init = "cuInit": fn(c_uint);
    driver_get_version = "cuDriverGetVersion": fn(*mut c_int);
    device_get_count = "cuDeviceGetCount": fn(*mut c_int);
    device_get = "cuDeviceGet": fn(*mut CuDevice, c_int);
    device_get_name = "cuDeviceGetName": fn(*mut c_char, c_int, CuDevice);
    device_get_uuid = "cuDeviceGetUuid": fn(*mut [u8; 16], CuDevice);
    device_get_uuid_v2 = "cuDeviceGetUuid_v2": fn(*mut [u8; 16], CuDevice);
    device_get_attribute = "cuDeviceGetAttribute": fn(*mut c_int, c_int, CuDevice);
    device_total_mem = "cuDeviceTotalMem_v2": fn(*mut usize, CuDevice);
    primary_ctx_retain = "cuDevicePrimaryCtxRetain": fn(*mut Handle, CuDevice);
    primary_ctx_release_v2 = "cuDevicePrimaryCtxRelease_v2": fn(CuDevice);
    primary_ctx_release = "cuDevicePrimaryCtxRelease": fn(CuDevice);
    ctx_set_current = "cuCtxSetCurrent": fn(Handle);
    ctx_synchronize = "cuCtxSynchronize": fn();
    mem_alloc = "cuMemAlloc_v2": fn(*mut CuDevicePtr, usize);
    mem_free = "cuMemFree_v2": fn(CuDevicePtr);
    memcpy_htod = "cuMemcpyHtoD_v2": fn(CuDevicePtr, *const c_void, usize);
    memcpy_dtoh = "cuMemcpyDtoH_v2": fn(*mut c_void, CuDevicePtr, usize);
    module_load_data_ex = "cuModuleLoadDataEx": fn(*mut Handle, *const c_void, c_uint, *mut c_int, *mut *mut c_void);
    module_load_data = "cuModuleLoadData": fn(*mut Handle, *const c_void);
    module_get_function = "cuModuleGetFunction": fn(*mut Handle, Handle, *const c_char);
    module_unload = "cuModuleUnload": fn(Handle);
    launch_kernel = "cuLaunchKernel": fn(Handle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Handle, *mut *mut c_void, *mut *mut c_void);
    event_create = "cuEventCreate": fn(*mut Handle, c_uint);
    event_record = "cuEventRecord": fn(Handle, Handle);
    event_synchronize = "cuEventSynchronize": fn(Handle);
    event_elapsed_time = "cuEventElapsedTime": fn(*mut f32, Handle, Handle);
    event_destroy = "cuEventDestroy_v2": fn(Handle);
    get_proc_address = "cuGetProcAddress": fn(*const c_char, *mut *mut c_void, c_int, u64);
    get_proc_address_v2 = "cuGetProcAddress_v2": fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int);
}

/// A driver export: its C name, and `f`: in [`DriverFunctions`] `Option` of the function
/// (`None` when this libcuda does not export it); once [`Driver::need`] found it, the function.
#[derive(Clone, Copy)]
pub(crate) struct Export<F> {
    /// The C name, e.g. `cuInit`: what a missing export or a failed call is reported as.
    pub name: &'static str,
    /// The function; in [`DriverFunctions`], `Option` of it.
    pub f: F,
}

impl<F: Copy> Export<F> {
    /// What `call` returns when given the function, as [`CuError::check`] of this name.
    pub(crate) fn call(&self, call: impl FnOnce(F) -> c_int) -> Result<(), CuError> {
        CuError::check(self.name, call(self.f))
    }
}

/// The loaded driver: its file and its functions. Never unloaded.
pub(crate) struct Driver {
    /// Which file the loader picked.
    pub file: LoadedFile,
    /// The resolved functions.
    pub api: DriverFunctions,
    library: Library,
}

/// What one lookup of a driver function answered: `cuGetProcAddress`, or the runtime's
/// `cudaGetDriverEntryPoint` ([`crate::cuda::cudart::Runtime::driver_entry_point`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcAddress {
    /// The CUresult (the runtime's: its `cudaError_t`).
    pub code: c_int,
    /// The pointer (null on failure).
    pub pointer: usize,
    /// `symbolStatus` (0 found, 1 not found, 2 version not sufficient); `None` from
    /// `cuGetProcAddress`'s 11.3 ABI.
    pub symbol_status: Option<c_int>,
}

/// Why `libcuda.so.1` could not be loaded as a CUDA driver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LoadError {
    /// `dlopen` failed; the loader's own message.
    #[error("{0}")]
    NotLoadable(String),
    /// A library of that name, but not a driver.
    #[error("{LIBCUDA} was loaded but exports no cuInit: not a CUDA driver")]
    NoCuInit,
    /// `dladdr` could not name the file the loader picked.
    #[error("the loader cannot say which file {LIBCUDA} is")]
    FileUnknown,
}

/// A driver function that is missing or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DriverError {
    /// This libcuda (its real file) does not export a function the runner calls (this one).
    #[error("{} does not export {}: this driver is too old for the runner", .0.display(), .1)]
    MissingExport(PathBuf, &'static str),
    /// The call returned an error CUresult.
    #[error(transparent)]
    Call(#[from] CuError),
}

impl Driver {
    /// dlopen's `libcuda.so.1` through the loader's normal search.
    pub(crate) fn load() -> Result<Driver, LoadError> {
        // SAFETY: loading the driver runs its initialisers, which is what using it means.
        let library =
            unsafe { Library::new(LIBCUDA) }.map_err(|e| LoadError::NotLoadable(e.to_string()))?;
        let api = DriverFunctions::resolve(&library);
        let anchor = Driver::symbol_in(&library, api.init.name).ok_or(LoadError::NoCuInit)?;
        let file = LoadedFile::containing(anchor).ok_or(LoadError::FileUnknown)?;
        Ok(Driver { file, api, library })
    }

    fn symbol_in(library: &Library, name: &str) -> Option<usize> {
        let name = CString::new(name).ok()?;
        // SAFETY: only the address is read, never called through.
        let symbol = unsafe { library.get::<*mut c_void>(name.as_bytes_with_nul()) }.ok()?;
        let address = *symbol as usize;
        (address != 0).then_some(address)
    }

    /// The address `dlsym` gives for export `name`, or `None` when not exported.
    pub(crate) fn export_address(&self, name: &str) -> Option<usize> {
        Driver::symbol_in(&self.library, name)
    }

    /// `f` if this libcuda exports it, else an error naming the missing export.
    pub(crate) fn need<F>(&self, export: Export<Option<F>>) -> Result<Export<F>, DriverError> {
        let Export { name, f } = export;
        f.map(|f| Export { name, f })
            .ok_or_else(|| DriverError::MissingExport(self.file.real_path.clone(), name))
    }

    /// The name of the `cuGetProcAddress` export the runner uses: `_v2` when present.
    pub(crate) fn get_proc_address_export(&self) -> Option<&'static str> {
        let (v2, v1) = (self.api.get_proc_address_v2, self.api.get_proc_address);
        v2.f.map(|_| v2.name).or(v1.f.map(|_| v1.name))
    }

    /// `cuGetProcAddress(symbol, version, flags 0)` through the `_v2` export when present.
    pub(crate) fn get_proc_address(&self, symbol: &str, version: i32) -> Option<ProcAddress> {
        let name = CString::new(symbol).ok()?;
        let mut pointer: *mut c_void = std::ptr::null_mut();
        let mut status: c_int = -1;
        let v2 = self.api.get_proc_address_v2.f;
        // SAFETY: cuda.h signatures; all out-pointers point at live locals.
        let code = unsafe {
            match (v2, self.api.get_proc_address.f) {
                (Some(f), _) => f(name.as_ptr(), &mut pointer, version, 0, &mut status),
                (None, Some(f)) => f(name.as_ptr(), &mut pointer, version, 0),
                (None, None) => return None,
            }
        };
        Some(ProcAddress {
            code,
            pointer: pointer as usize,
            symbol_status: v2.map(|_| status),
        })
    }

    /// `cuDriverGetVersion`.
    pub(crate) fn version(&self) -> Result<CudaVersion, DriverError> {
        let get = self.need(self.api.driver_get_version)?;
        let mut version = 0;
        // SAFETY: cuda.h signature, valid out-pointer.
        get.call(|f| unsafe { f(&mut version) })?;
        Ok(CudaVersion(version))
    }

    /// `cuInit(0)`.
    pub(crate) fn init(&self) -> Result<(), CuError> {
        let init = self.api.init;
        // Driver::load refuses a libcuda without cuInit; kept total all the same.
        // SAFETY: cuda.h signature.
        let code = init
            .f
            .map_or(result::CUDA_ERROR_NOT_FOUND, |f| unsafe { f(0) });
        CuError::check(init.name, code)
    }
}
