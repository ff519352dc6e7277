//! NVML's view of the GPUs ([`devices`]): each one's name, UUID and capability, and its MIG
//! mode, `/dev/nvidiaN` minor and MIG devices (one per compute instance, each with its own
//! `MIG-…` UUID, GPU instance ID and compute instance ID).
//!
//! `nvml-wrapper` 0.11 wraps `nvmlDeviceGetMigMode` and `nvmlDeviceGetMinorNumber` but not
//! the MIG device handles, so those calls (`nvmlDeviceGetMaxMigDeviceCount`,
//! `nvmlDeviceGetMigDeviceHandleByIndex`, `nvmlDeviceIsMigDeviceHandle`,
//! `nvmlDeviceGetDeviceHandleFromMigDeviceHandle`, `nvmlDeviceGetGpuInstanceId`,
//! `nvmlDeviceGetComputeInstanceId`, and `nvmlDeviceGetUUID`/`nvmlDeviceGetName` of a MIG
//! handle) are looked up here in the same `libnvidia-ml.so.1` (dlopen of the same name gives
//! the library `nvml-wrapper` already initialised), with the signatures of NVIDIA's NVML
//! reference.

use std::ffi::{c_char, c_uint, c_void, CStr, OsStr};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use serde::{Deserialize, Serialize};

use crate::facts::access::Access;

/// The name NVML is loaded by, so the loader's normal search applies as for libcuda.
pub(crate) const LIBNVIDIA_ML: &str = "libnvidia-ml.so.1";

/// `nvmlDevice_t`.
type Handle = *mut c_void;
/// NVML_SUCCESS
const SUCCESS: c_uint = 0;
/// NVML_ERROR_NOT_FOUND: no MIG device at this index (indices may have gaps).
const NOT_FOUND: c_uint = 6;
/// NVML_DEVICE_UUID_V2_BUFFER_SIZE, also enough for NVML_DEVICE_NAME_V2_BUFFER_SIZE.
const BUFFER: usize = 96;

/// One MIG device (a compute instance) as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NvmlMigDevice {
    /// `MIG-…`, what `cuDeviceGetUuid_v2` gives CUDA for this instance.
    pub(crate) uuid: String,
    /// Its name (e.g. `NVIDIA H200 MIG 1g.18gb`), when NVML gives it.
    pub(crate) name: Option<String>,
    /// `nvmlDeviceGetGpuInstanceId`, when NVML gives it.
    pub(crate) gpu_instance_id: Option<u32>,
    /// `nvmlDeviceGetComputeInstanceId`, when NVML gives it.
    pub(crate) compute_instance_id: Option<u32>,
    /// `nvmlDeviceIsMigDeviceHandle` said so, and
    /// `nvmlDeviceGetDeviceHandleFromMigDeviceHandle` gave back the parent's handle.
    pub(crate) handle_checked: bool,
}

/// What NVML says about MIG on one GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GpuMig {
    /// `nvmlDeviceGetMigMode`'s current mode; `None` when the GPU does not support MIG (or
    /// NVML does not say).
    pub(crate) mig_mode: Option<bool>,
    /// `nvmlDeviceGetMinorNumber`: N of `/dev/nvidiaN`, when NVML gives it.
    pub(crate) minor_number: Option<u32>,
    /// Its MIG devices, in NVML's index order (empty when not in MIG mode).
    pub(crate) mig_devices: Vec<NvmlMigDevice>,
    /// Why the MIG devices could not be listed, if they could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mig_devices_unavailable: Option<String>,
}

/// Why NVML's MIG devices could not be listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MigQueryError {
    /// `libnvidia-ml.so.1` lacks an export (a driver older than MIG, R450).
    #[error("{0} is not exported by libnvidia-ml.so.1 (a driver without MIG support)")]
    MissingExport(&'static str),
    /// A call (the NVML function) failed with its `nvmlReturn_t`.
    #[error("{0} failed with NVML error {1}")]
    Call(&'static str, u32),
}

type CountFn = unsafe extern "C" fn(Handle, *mut c_uint) -> c_uint;
type ByIndexFn = unsafe extern "C" fn(Handle, c_uint, *mut Handle) -> c_uint;
type ParentFn = unsafe extern "C" fn(Handle, *mut Handle) -> c_uint;
type StringFn = unsafe extern "C" fn(Handle, *mut c_char, c_uint) -> c_uint;

/// An NVML function and its name, for errors.
type Named<F> = (F, &'static str);

/// The NVML MIG calls, resolved once per query.
struct MigApi {
    _library: libloading::Library,
    max_count: Named<CountFn>,
    by_index: Named<ByIndexFn>,
    is_mig: Named<CountFn>,
    parent: Named<ParentFn>,
    gpu_instance_id: Named<CountFn>,
    compute_instance_id: Named<CountFn>,
    uuid: Named<StringFn>,
    name: Named<StringFn>,
}

impl MigApi {
    fn load() -> Result<MigApi, MigQueryError> {
        // SAFETY: loading NVML runs its ELF constructors, as nvml-wrapper already did when
        // it loaded the same library; this only adds a reference.
        let library = unsafe { libloading::Library::new(LIBNVIDIA_ML) }
            .map_err(|_| MigQueryError::MissingExport("libnvidia-ml.so.1"))?;
        /// Looks up `name` as a function of type `T`.
        fn get<T: Copy>(
            library: &libloading::Library,
            name: &'static str,
        ) -> Result<Named<T>, MigQueryError> {
            // SAFETY: each `T` below is the signature NVIDIA's nvml.h gives `name`.
            unsafe { library.get::<T>(name.as_bytes()) }
                .map(|symbol| (*symbol, name))
                .map_err(|_| MigQueryError::MissingExport(name))
        }
        Ok(MigApi {
            max_count: get(&library, "nvmlDeviceGetMaxMigDeviceCount")?,
            by_index: get(&library, "nvmlDeviceGetMigDeviceHandleByIndex")?,
            is_mig: get(&library, "nvmlDeviceIsMigDeviceHandle")?,
            parent: get(&library, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle")?,
            gpu_instance_id: get(&library, "nvmlDeviceGetGpuInstanceId")?,
            compute_instance_id: get(&library, "nvmlDeviceGetComputeInstanceId")?,
            uuid: get(&library, "nvmlDeviceGetUUID")?,
            name: get(&library, "nvmlDeviceGetName")?,
            _library: library,
        })
    }

    /// One `unsigned int` out-parameter.
    fn number(&self, (f, call): Named<CountFn>, handle: Handle) -> Result<u32, MigQueryError> {
        let mut value: c_uint = 0;
        // SAFETY: nvml.h: (device, unsigned int *) with a live local as the out-parameter.
        match unsafe { f(handle, &mut value) } {
            SUCCESS => Ok(value),
            code => Err(MigQueryError::Call(call, code)),
        }
    }

    /// A string into a buffer of [`BUFFER`] bytes.
    fn text(&self, (f, call): Named<StringFn>, handle: Handle) -> Result<String, MigQueryError> {
        let mut buffer = [0 as c_char; BUFFER];
        // SAFETY: nvml.h: (device, char *, length) with a live buffer of that length.
        let code = unsafe { f(handle, buffer.as_mut_ptr(), BUFFER as c_uint) };
        if code != SUCCESS {
            return Err(MigQueryError::Call(call, code));
        }
        // SAFETY: NVML wrote a NUL-terminated string into `buffer` (it returned success).
        Ok(unsafe { CStr::from_ptr(buffer.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    fn mig_devices(&self, parent: Handle) -> Result<Vec<NvmlMigDevice>, MigQueryError> {
        let max = self.number(self.max_count, parent)?;
        let mut devices = Vec::new();
        for index in 0..max {
            let mut handle: Handle = std::ptr::null_mut();
            let (by_index, call) = self.by_index;
            // SAFETY: nvml.h: (device, index, nvmlDevice_t *) with a live local.
            match unsafe { by_index(parent, index, &mut handle) } {
                SUCCESS => {}
                NOT_FOUND => continue,
                code => return Err(MigQueryError::Call(call, code)),
            }
            let mut back: Handle = std::ptr::null_mut();
            // SAFETY: nvml.h: (MIG device, nvmlDevice_t *) with a live local.
            let parent_code = unsafe { (self.parent.0)(handle, &mut back) };
            let is_mig = self.number(self.is_mig, handle);
            devices.push(NvmlMigDevice {
                uuid: self.text(self.uuid, handle)?,
                name: self.text(self.name, handle).ok(),
                gpu_instance_id: self.number(self.gpu_instance_id, handle).ok(),
                compute_instance_id: self.number(self.compute_instance_id, handle).ok(),
                handle_checked: is_mig == Ok(1) && parent_code == SUCCESS && back == parent,
            });
        }
        Ok(devices)
    }
}

/// One GPU as NVML sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NvmlDevice {
    /// Its product name.
    pub(crate) name: String,
    /// Its UUID (`GPU-…`), by which it is matched with CUDA's device.
    pub(crate) uuid: String,
    /// `major.minor`, when NVML gives it.
    pub(crate) compute_capability: Option<String>,
    /// Its MIG mode, `/dev/nvidiaN` minor and MIG devices.
    #[serde(default)]
    pub(crate) mig: GpuMig,
}

impl NvmlDevice {
    /// Whether NVML says the GPU is in MIG mode (CUDA then sees its MIG instances, not it).
    pub(crate) fn in_mig_mode(&self) -> bool {
        self.mig.mig_mode == Some(true)
    }
}

/// The MIG device whose UUID is `mig_uuid` (`MIG-…`), under any GPU in MIG mode, with that
/// parent GPU.
pub(crate) fn find_mig<'a>(
    devices: &'a [NvmlDevice],
    mig_uuid: &str,
) -> Option<(&'a NvmlDevice, &'a NvmlMigDevice)> {
    for parent in devices.iter().filter(|d| d.in_mig_mode()) {
        if let Some(mig) = parent.mig.mig_devices.iter().find(|m| m.uuid == mig_uuid) {
            return Some((parent, mig));
        }
    }
    None
}

/// Loads and initialises NVML by [`LIBNVIDIA_ML`], as the loader finds it.
pub(crate) fn load() -> Result<Nvml, NvmlError> {
    Nvml::builder().lib_path(OsStr::new(LIBNVIDIA_ML)).init()
}

/// One line for an NVML failure: cause and fix.
pub(crate) fn explain(error: &NvmlError, access: &Access) -> String {
    match error {
        NvmlError::DriverNotLoaded => format!(
            "NVML cannot reach the NVIDIA kernel driver ({error}): {}",
            access.explain_no_gpu()
        ),
        NvmlError::LibloadingError(_) | NvmlError::FailedToLoadSymbol(_) => format!(
            "{LIBNVIDIA_ML} is not usable ({error}): expose the driver's libnvidia-ml.so.1 next to \
             libcuda.so.1"
        ),
        other => format!("NVML failed: {other}"),
    }
}

/// Every GPU NVML lists, with what it says about MIG on each: its mode, minor number and MIG
/// devices.
pub(crate) fn devices(nvml: &Nvml) -> Result<Vec<NvmlDevice>, NvmlError> {
    let count = nvml.device_count()?;
    (0..count)
        .map(|index| {
            let device = nvml.device_by_index(index)?;
            // A GPU without MIG support answers NOT_SUPPORTED to `nvmlDeviceGetMigMode`:
            // `mig_mode` is then `None`.
            let mut gpu = NvmlDevice {
                name: device.name()?,
                uuid: device.uuid()?,
                compute_capability: device
                    .cuda_compute_capability()
                    .ok()
                    .map(|cc| format!("{}.{}", cc.major, cc.minor)),
                mig: GpuMig {
                    mig_mode: device.mig_mode().ok().map(|mode| mode.current == 1),
                    minor_number: device.minor_number().ok(),
                    ..GpuMig::default()
                },
            };
            if gpu.in_mig_mode() {
                // SAFETY: the raw handle is used only while `device` (and so NVML) is alive.
                let handle = unsafe { device.handle() } as Handle;
                match MigApi::load().and_then(|api| api.mig_devices(handle)) {
                    Ok(devices) => gpu.mig.mig_devices = devices,
                    Err(error) => gpu.mig.mig_devices_unavailable = Some(error.to_string()),
                }
            }
            Ok(gpu)
        })
        .collect()
}
