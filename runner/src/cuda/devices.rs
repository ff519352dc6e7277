//! The GPUs the driver reports after `cuInit`.

use std::ffi::{c_char, c_int, CStr};

use cuda_sandbox_cuda_facts::Capability;
use serde::{Deserialize, Serialize};

use super::driver::{Driver, DriverError, Export};

/// CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR
const ATTRIBUTE_CC: [c_int; 2] = [75, 76];

/// One GPU as CUDA sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaDevice {
    /// CUDA ordinal.
    pub(crate) ordinal: i32,
    /// `cuDeviceGetName`.
    pub(crate) name: String,
    /// `cuDeviceGetUuid_v2` (`cuDeviceGetUuid` on drivers before 11.4) in NVML's
    /// `GPU-xxxxxxxx-…` spelling, to match NVML by UUID; a MIG instance's is
    /// [`CudaDevice::mig_uuid`].
    pub uuid: String,
    /// Its compute capability.
    pub(crate) compute_capability: Capability,
    /// `cuDeviceTotalMem_v2`, bytes.
    pub(crate) total_memory_bytes: u64,
}

impl CudaDevice {
    /// The same 16 bytes in NVML's `MIG-…` spelling. CUDA does not say whether a device is a
    /// MIG instance; when it is, `cuDeviceGetUuid_v2` gives the instance's MIG UUID (the
    /// CUDA driver API reference), which NVML spells `MIG-…` for the MIG device handle.
    pub(crate) fn mig_uuid(&self) -> String {
        self.uuid.replacen("GPU-", "MIG-", 1)
    }
}

/// Spells 16 UUID bytes as NVML does: `GPU-8-4-4-4-12` lowercase hex.
pub(crate) fn nvml_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Every device, in CUDA order. Needs a successful `cuInit`.
pub(crate) fn list(driver: &Driver) -> Result<Vec<CudaDevice>, DriverError> {
    let api = &driver.api;
    let count_fn = driver.need(api.device_get_count)?;
    let get = driver.need(api.device_get)?;
    let get_name = driver.need(api.device_get_name)?;
    // Reported as cuDeviceGetUuid, whichever export answers.
    let get_uuid = driver.need(Export {
        f: api.device_get_uuid_v2.f.or(api.device_get_uuid.f),
        ..api.device_get_uuid
    })?;
    let get_attribute = driver.need(api.device_get_attribute)?;
    let total_mem = driver.need(api.device_total_mem)?;

    let mut count = 0;
    // SAFETY: cuda.h signatures, out-pointers to live locals of the right size (whole block).
    unsafe {
        count_fn.call(|f| f(&mut count))?;
        let mut devices = Vec::new();
        for ordinal in 0..count {
            let mut device = 0;
            get.call(|f| f(&mut device, ordinal))?;
            let mut name = [0 as c_char; 256];
            get_name.call(|f| f(name.as_mut_ptr(), name.len() as c_int, device))?;
            let mut uuid = [0u8; 16];
            get_uuid.call(|f| f(&mut uuid, device))?;
            let mut cc = [0; 2];
            for (value, attribute) in cc.iter_mut().zip(ATTRIBUTE_CC) {
                get_attribute.call(|f| f(value, attribute, device))?;
            }
            // Never negative (cuda.h); a capability of 0.0 would be one no table knows.
            let [major, minor] = cc.map(|v| u32::try_from(v).unwrap_or(0));
            let mut bytes = 0usize;
            total_mem.call(|f| f(&mut bytes, device))?;
            devices.push(CudaDevice {
                ordinal,
                name: CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned(),
                uuid: nvml_uuid(&uuid),
                compute_capability: Capability { major, minor },
                total_memory_bytes: bytes as u64,
            });
        }
        Ok(devices)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mig_spelling_keeps_the_bytes() {
        let device = super::CudaDevice {
            ordinal: 0,
            name: "NVIDIA H200 MIG 1g.18gb".into(),
            uuid: "GPU-fa000000-0000-0000-0000-000000000001".into(),
            compute_capability: cuda_sandbox_cuda_facts::Capability::from_sm(90),
            total_memory_bytes: 0,
        };
        assert_eq!(
            device.mig_uuid(),
            "MIG-fa000000-0000-0000-0000-000000000001"
        );
    }

    #[test]
    fn uuids_are_spelled_like_nvml() {
        let mut bytes = [0u8; 16];
        bytes[0] = 0xfa;
        bytes[15] = 0x01;
        assert_eq!(
            super::nvml_uuid(&bytes),
            "GPU-fa000000-0000-0000-0000-000000000001"
        );
    }
}
