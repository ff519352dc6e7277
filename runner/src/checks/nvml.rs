//! `nvml::consistency`: NVML (through `nvml-wrapper`) agrees with CUDA on the GPUs, and the
//! kernel driver version tells whether the loaded libcuda is a cuda_compat one; both must
//! match the hook's manifest when there is one.

use nvml_wrapper::error::NvmlError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::check::{facts_of, Outcome};
use crate::cuda::devices::CudaDevice;
use crate::cuda::version::CudaVersion;
use crate::facts;
use crate::facts::expectations::cuda_label;
use crate::facts::nvml::{devices, explain, find_mig, load, NvmlDevice, LIBNVIDIA_ML};
use crate::options::ExpectDriver;
use crate::session::Session;
use cuda_sandbox_manifest::{versions::cuda_for_driver, DriverKind};

/// What `nvml::consistency` reports once NVML answers with the kernel driver's version (the
/// report's `facts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsistencyFacts {
    /// The kernel driver's version, as NVML gives it (e.g. `535.104.05`).
    pub(crate) kernel_driver: String,
    /// The CUDA version that kernel driver's branch provides, when the branch is known.
    pub(crate) kernel_driver_cuda_version: Option<String>,
    /// The CUDA version NVML says the driver provides.
    pub(crate) nvml_cuda_driver_version: Option<String>,
    /// The CUDA version the loaded `libcuda.so.1` provides, when it loads.
    pub(crate) loaded_libcuda_cuda_version: Option<String>,
    /// Whether the loaded libcuda is a cuda_compat one (newer than the kernel driver's CUDA);
    /// `None` when either version is unknown.
    pub compat_active: Option<bool>,
    /// `--expect-driver`, spelled as given.
    pub(crate) expect_driver: Option<String>,
    /// The manifest in brief, or a string saying why there is none
    /// ([`crate::facts::expectations::ManifestState::fact`]).
    pub(crate) manifest: Value,
    /// The GPUs NVML sees, when it can list them.
    pub(crate) nvml_devices: Option<Vec<NvmlDevice>>,
    /// The GPUs CUDA sees, when it can list them.
    pub cuda_devices: Option<Vec<CudaDevice>>,
    /// `name uuid` of each GPU NVML and CUDA agree on: only when the check passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<String>>,
}

/// Runs `nvml::consistency`.
pub(crate) fn consistency(session: &Session) -> Result<Outcome, Outcome> {
    let expect = session.options.expect_driver.as_ref();
    let expects_kind = matches!(expect, Some(ExpectDriver::Host | ExpectDriver::Compat));
    let nvml = match load() {
        Ok(nvml) => nvml,
        Err(error @ NvmlError::LibloadingError(_)) if !expects_kind => {
            return Ok(Outcome::skipped(
                format!(
                    "{} (normal on Jetson, which has no NVML); nothing to compare",
                    explain(&error, &session.access)
                ),
                facts! {},
            ))
        }
        Err(error) => return Ok(Outcome::fail(explain(&error, &session.access), facts! {})),
    };
    let kernel_driver = nvml
        .sys_driver_version()
        .map_err(|error| Outcome::fail(explain(&error, &session.access), facts! {}))?;
    let nvml_cuda = nvml
        .sys_cuda_driver_version()
        .ok()
        .map(|v| CudaVersion(v).to_string());
    let kernel_cuda = cuda_for_driver(&kernel_driver);
    let loaded_cuda = session.driver().ok().and_then(|d| d.version().ok());
    let compat_active = loaded_cuda
        .zip(kernel_cuda)
        .map(|(loaded, kernel)| loaded > kernel);
    let nvml_devices = devices(&nvml);
    let cuda_devices = session.devices();
    let mut facts = ConsistencyFacts {
        kernel_driver: kernel_driver.clone(),
        kernel_driver_cuda_version: kernel_cuda.map(|v| v.to_string()),
        nvml_cuda_driver_version: nvml_cuda,
        loaded_libcuda_cuda_version: loaded_cuda.map(|v| v.to_string()),
        compat_active,
        expect_driver: expect.map(ExpectDriver::describe),
        manifest: session.manifest.fact(),
        nvml_devices: nvml_devices.as_ref().ok().cloned(),
        cuda_devices: cuda_devices.as_ref().ok().map(|d| d.to_vec()),
        gpus: None,
    };
    // Which driver is loaded, in words: compat (libcuda's CUDA above the kernel driver's),
    // the host's, or unknown.
    let which = match compat_active {
        Some(true) => format!(
            "compat active: libcuda provides CUDA {} above kernel driver {kernel_driver} (CUDA {})",
            loaded_cuda.map(|v| v.to_string()).unwrap_or_default(),
            kernel_cuda.map(|v| v.to_string()).unwrap_or_default()
        ),
        Some(false) => format!("host driver: kernel driver {kernel_driver}"),
        None => format!("kernel driver {kernel_driver} (compat unknown: branch not in the table or libcuda unavailable)"),
    };
    // The driver kind, then the GPUs NVML and CUDA agree on; or the first failure.
    let agreed = judge_driver_kind(session, &kernel_driver, compat_active, &which)
        .and_then(|()| nvml_devices.map_err(|error| explain(&error, &session.access)))
        .and_then(|nvml| {
            let cuda = cuda_devices.map_err(|why| format!("cannot compare with CUDA: {why}"))?;
            match_devices(&nvml, cuda)?;
            Ok(agreed_gpus(&nvml, cuda))
        });
    Ok(match agreed {
        Ok(gpus) => {
            let message = format!("{which}; NVML and CUDA agree on {} GPU(s)", gpus.len());
            facts.gpus = Some(gpus);
            Outcome::pass(message, facts_of(&facts))
        }
        Err(why) => Outcome::fail(why, facts_of(&facts)),
    })
}

/// `name uuid` of each of CUDA's devices, NVML's MIG device and its GPU too for a MIG instance.
fn agreed_gpus(nvml_devices: &[NvmlDevice], cuda_devices: &[CudaDevice]) -> Vec<String> {
    cuda_devices
        .iter()
        .map(|d| match find_mig(nvml_devices, &d.mig_uuid()) {
            Some((parent, mig)) => format!(
                "{} {} (MIG device of {} {})",
                d.name, mig.uuid, parent.name, parent.uuid
            ),
            None => format!("{} {}", d.name, d.uuid),
        })
        .collect()
}

/// The loaded driver (`which`, compat when `compat_active`) against the hook's choice (the
/// manifest's driver and the kernel driver it read) and `--expect-driver`; `Err` is the
/// failure's one line.
fn judge_driver_kind(
    session: &Session,
    kernel_driver: &str,
    compat_active: Option<bool>,
    which: &str,
) -> Result<(), String> {
    let expect = session.options.expect_driver.as_ref();
    if let Some(m) = session.manifest.driver() {
        if let Some(read) = m.kernel_driver.as_deref().filter(|k| *k != kernel_driver) {
            return Err(format!(
                "NVML reports kernel driver {kernel_driver} but the hook read {read} from \
                 /proc/driver/nvidia/version: {LIBNVIDIA_ML} belongs to another driver than \
                 the kernel module; expose the host driver's own libnvidia-ml (the hook's \
                 driver link) and nothing else"
            ));
        }
        match (m.kind, compat_active) {
            (DriverKind::Compat, Some(false)) => {
                return Err(format!(
                    "the hook chose the compat driver ({}) but the loaded libcuda is the \
                     host's ({which}): put the compat directory before the driver link in \
                     DT_RUNPATH or LD_LIBRARY_PATH",
                    cuda_label(m.cuda_version)
                ));
            }
            (DriverKind::Host, Some(true)) => {
                return Err(format!(
                    "the hook chose the host driver (its reason: {}) but {which}: remove \
                     the compat directory from DT_RUNPATH and LD_LIBRARY_PATH",
                    m.reason.trim_end_matches('.')
                ));
            }
            _ => {}
        }
    }

    match (expect, compat_active) {
        (Some(ExpectDriver::Host), Some(true)) => Err(format!(
            "expected the host driver but {which}: the hook chose cuda_compat; check its compat \
             policy"
        )),
        (Some(ExpectDriver::Compat), Some(false)) => Err(format!(
            "expected a cuda_compat driver but the loaded libcuda is the host's ({which}): \
             the compat libcuda is not exposed ahead of the host one"
        )),
        (Some(ExpectDriver::Host | ExpectDriver::Compat), None) => {
            Err(format!("cannot tell host from compat: {which}"))
        }
        _ => Ok(()),
    }
}

/// Matches CUDA's devices with NVML's GPUs; the error is the failure's one line. NVML and CUDA
/// may order GPUs differently: matched by UUID. A GPU in MIG mode is not a CUDA device: CUDA
/// enumerates one of its MIG instances instead (one per process, the MIG user guide's CUDA
/// Device Enumeration), whose `cuDeviceGetUuid_v2` is the `MIG-…` UUID of one of the GPU's
/// MIG device handles in NVML (the NVML reference for `nvmlDeviceGetUUID`). MIG devices are
/// matched by UUID alone: what the real driver names a MIG instance in CUDA and in NVML has
/// not been compared here.
fn match_devices(nvml: &[NvmlDevice], cuda: &[CudaDevice]) -> Result<(), String> {
    let whole: Vec<&NvmlDevice> = nvml.iter().filter(|d| !d.in_mig_mode()).collect();
    let in_mig_mode = nvml.len() - whole.len();
    let cuda_mig: Vec<&CudaDevice> = cuda
        .iter()
        .filter(|d| find_mig(nvml, &d.mig_uuid()).is_some())
        .collect();
    let cuda_whole = cuda.len() - cuda_mig.len();
    if in_mig_mode == 0 && nvml.len() != cuda.len() {
        return Err(format!(
            "NVML sees {} GPUs but CUDA sees {}: a GPU's device node is missing from the \
             sandbox, or CUDA_VISIBLE_DEVICES hides some",
            nvml.len(),
            cuda.len()
        ));
    }
    if in_mig_mode > 0 && whole.len() != cuda_whole {
        return Err(format!(
            "NVML sees {} GPU(s) not in MIG mode (and {in_mig_mode} in MIG mode) but CUDA sees \
             {cuda_whole} whole GPU(s) (and {} MIG instance(s)): a GPU's device node is missing \
             from the sandbox, or CUDA_VISIBLE_DEVICES hides some",
            whole.len(),
            cuda_mig.len()
        ));
    }
    if cuda_mig.len() > 1 {
        return Err(format!(
            "CUDA sees {} MIG instances, but a CUDA process enumerates only one: libcuda and \
             libnvidia-ml come from different drivers",
            cuda_mig.len()
        ));
    }
    for device in cuda {
        if cuda_mig.iter().any(|m| m.ordinal == device.ordinal) {
            continue;
        }
        let Some(n) = whole.iter().find(|n| n.uuid == device.uuid) else {
            return Err(format!(
                "CUDA device {} ({}) has UUID {} which NVML does not know{}: libcuda and \
                 libnvidia-ml come from different drivers",
                device.ordinal,
                device.name,
                device.uuid,
                if in_mig_mode > 0 {
                    format!(
                        ", neither as a GPU nor as {} of a MIG device",
                        device.mig_uuid()
                    )
                } else {
                    String::new()
                }
            ));
        };
        if n.name != device.name {
            return Err(format!(
                "GPU {} is {:?} to CUDA but {:?} to NVML: libcuda and libnvidia-ml come from \
                 different drivers",
                device.uuid, device.name, n.name
            ));
        }
    }
    Ok(())
}
