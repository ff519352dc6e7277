//! `mig::instance`: when the hook leased this build one MIG instance (the manifest's `mig`),
//! CUDA sees exactly one device and it is that instance.
//!
//! The facts it rests on: a CUDA process enumerates one MIG instance, however many it could
//! reach (the MIG user guide, CUDA Device Enumeration); `cuDeviceGetUuid_v2` returns a MIG
//! device's MIG UUID (the CUDA driver API reference; the older `cuDeviceGetUuid` makes no such
//! promise); NVML's MIG device handles carry that UUID, the GPU instance and compute instance
//! IDs, and lead back to the parent GPU and its `/dev/nvidiaN` minor (the NVML reference for
//! `nvmlDeviceIsMigDeviceHandle`, `nvmlDeviceGetMigMode`,
//! `nvmlDeviceGetDeviceHandleFromMigDeviceHandle`). The hook cannot read the UUID (it reads
//! no NVML); then the instance is identified through NVML, and the message says what was and
//! was not verified.

use cuda_sandbox_manifest::MigInstance;
use serde::{Deserialize, Serialize};

use crate::check::{facts_of, Outcome};
use crate::cuda::devices::CudaDevice;
use crate::facts::nvml::{self, find_mig, NvmlDevice};
use crate::session::Session;

/// What `mig::instance` reports (the report's `facts`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigFacts {
    /// The instance the hook leased, as the manifest names it.
    pub(crate) manifest_mig: Option<MigInstance>,
    /// The devices CUDA sees, when it can list them.
    pub(crate) cuda_devices: Option<Vec<CudaDevice>>,
    /// Whether the driver has `cuDeviceGetUuid_v2` (CUDA 11.4+), which gives a MIG UUID.
    pub cuda_has_uuid_v2: Option<bool>,
    /// CUDA's one device's UUID in `MIG-…` spelling.
    pub(crate) cuda_mig_uuid: Option<String>,
    /// The GPUs NVML sees, when it loads.
    pub(crate) nvml_devices: Option<Vec<NvmlDevice>>,
    /// Why NVML could not be asked.
    pub(crate) nvml_unavailable: Option<String>,
    /// What the check verified.
    pub(crate) verified: Vec<String>,
    /// What it could not verify.
    pub not_verified: Vec<String>,
}

/// Runs `mig::instance`.
pub(crate) fn instance(session: &Session) -> Result<Outcome, Outcome> {
    let manifest = session.manifest.manifest();
    let Some(leased) = manifest.and_then(|m| m.mig.clone()) else {
        let why = match manifest {
            None => format!("no MIG instance to check: {}", session.manifest.fact()),
            Some(_) => {
                "the hook's manifest names no MIG instance (the build was not leased one)".into()
            }
        };
        return Ok(Outcome::skipped(why, facts_of(&MigFacts::default())));
    };
    // The instance in words: `gpuN/giG/ciC`.
    let lease = format!("gpu{}/gi{}/ci{}", leased.gpu, leased.gi, leased.ci);
    let mut facts = MigFacts {
        manifest_mig: Some(leased.clone()),
        ..MigFacts::default()
    };
    let device = cuda_device(session, &leased, &lease, &mut facts)?;
    let nvml_devices = nvml::load()
        .and_then(|n| nvml::devices(&n))
        .map_err(|e| nvml::explain(&e, &session.access));
    match nvml_devices {
        Ok(devices) => Ok(judge_by_nvml(device, &leased, &lease, &devices, facts)),
        Err(why) => {
            facts.nvml_unavailable = Some(why.clone());
            facts.not_verified.push(format!(
                "that it is a MIG device, and its GPU, GPU instance and compute instance \
                 (NVML: {why})"
            ));
            Ok(verdict(device, &lease, facts))
        }
    }
}

/// CUDA's one device, which must be the instance the hook leased (`leased`, `lease` in
/// words): exactly one device, a libcuda that can give its MIG UUID, and the manifest's UUID
/// when it names one. What it verified goes into `facts`; `Err` is the failed outcome.
fn cuda_device<'s>(
    session: &'s Session,
    leased: &MigInstance,
    lease: &str,
    facts: &mut MigFacts,
) -> Result<&'s CudaDevice, Outcome> {
    let cuda = session.devices().map_err(|why| {
        Outcome::fail(
            format!("the hook leased MIG instance {lease} but CUDA lists no device: {why}"),
            facts_of(facts),
        )
    })?;
    facts.cuda_devices = Some(cuda.to_vec());
    facts.cuda_has_uuid_v2 = session
        .driver()
        .ok()
        .map(|d| d.api.device_get_uuid_v2.f.is_some());
    let [device] = cuda else {
        let seen: Vec<String> = cuda
            .iter()
            .map(|d| format!("{} {}", d.name, d.uuid))
            .collect();
        return Err(Outcome::fail(
            format!(
                "the hook leased MIG instance {lease} but CUDA sees {} device(s) [{}]: a CUDA \
                 process enumerates one MIG instance, so the others are whole GPUs (or \
                 none is usable); expose only /dev/nvidia{} and the instance's capability \
                 nodes (see `cuda-sandbox-hook explain` on the builder)",
                cuda.len(),
                seen.join(", "),
                leased.gpu
            ),
            facts_of(facts),
        ));
    };
    facts.verified.push("CUDA sees exactly one device".into());
    if facts.cuda_has_uuid_v2 == Some(false) {
        return Err(Outcome::fail(
            format!(
                "the hook leased MIG instance {lease} but this libcuda has no cuDeviceGetUuid_v2 \
                 (CUDA 11.4+), the call that gives a MIG instance's UUID, so which device CUDA \
                 uses cannot be told; use a driver providing CUDA 11.4 or newer"
            ),
            facts_of(facts),
        ));
    }
    let mig_uuid = device.mig_uuid();
    facts.cuda_mig_uuid = Some(mig_uuid.clone());
    if let Some(want) = &leased.uuid {
        if *want != mig_uuid {
            return Err(Outcome::fail(
                format!(
                    "CUDA's device is {} ({mig_uuid} in MIG spelling) but the hook leased MIG \
                     instance {lease} {want}: the build reaches another instance than its lease",
                    device.name
                ),
                facts_of(facts),
            ));
        }
        facts
            .verified
            .push(format!("its UUID is the manifest's {want}"));
    }

    Ok(device)
}

/// CUDA's `device` (MIG UUID `mig_uuid`) as NVML's `nvml_devices` list it: a MIG device of
/// the leased GPU, GPU instance and compute instance, not a whole GPU.
fn judge_by_nvml(
    device: &CudaDevice,
    leased: &MigInstance,
    lease: &str,
    nvml_devices: &[NvmlDevice],
    mut facts: MigFacts,
) -> Outcome {
    let mig_uuid = device.mig_uuid();
    facts.nvml_devices = Some(nvml_devices.to_vec());
    if let Some((parent, mig)) = find_mig(nvml_devices, &mig_uuid) {
        facts.verified.push(format!(
            "NVML lists it as MIG device {} of {} {}",
            mig.uuid, parent.name, parent.uuid
        ));
        if !mig.handle_checked {
            facts.not_verified.push(
                "that NVML's handle for it is a MIG device handle of that GPU \
                 (nvmlDeviceIsMigDeviceHandle, nvmlDeviceGetDeviceHandleFromMigDeviceHandle)"
                    .into(),
            );
        }
        let mut mismatches = Vec::new();
        let mut compare = |what: &str, nvml: Option<u32>, want: u32| match nvml {
            Some(got) if got == want => facts.verified.push(format!("{what} {got}")),
            Some(got) => mismatches.push(format!("{what} {got}, not {want}")),
            None => facts
                .not_verified
                .push(format!("{what} (NVML does not say)")),
        };
        compare(
            "parent /dev/nvidiaN minor",
            parent.mig.minor_number,
            leased.gpu,
        );
        compare("GPU instance", mig.gpu_instance_id, leased.gi);
        compare("compute instance", mig.compute_instance_id, leased.ci);
        if !mismatches.is_empty() {
            return Outcome::fail(
                format!(
                    "the hook leased MIG instance {lease} but CUDA's device {} ({mig_uuid}) is \
                     NVML's {}: the build reaches another instance than its lease",
                    device.name,
                    mismatches.join(", ")
                ),
                facts_of(&facts),
            );
        }
        return verdict(device, lease, facts);
    }
    if let Some(whole) = nvml_devices.iter().find(|n| n.uuid == device.uuid) {
        return Outcome::fail(
            format!(
                "the hook leased MIG instance {lease} but CUDA's only device is the whole GPU \
                 {} {} (NVML: MIG mode {}), not a MIG instance: the GPU left MIG mode after the \
                 hook scanned it, or the build sees a GPU other than its lease's parent",
                whole.name,
                whole.uuid,
                match whole.mig.mig_mode {
                    Some(true) => "enabled",
                    Some(false) => "disabled",
                    None => "unsupported",
                }
            ),
            facts_of(&facts),
        );
    }
    facts.not_verified.push(format!(
        "that it is a MIG device: NVML lists neither a GPU {} nor a MIG device {mig_uuid}",
        device.uuid
    ));
    verdict(device, lease, facts)
}

/// The passing outcome, saying what was and was not verified.
fn verdict(device: &CudaDevice, lease: &str, facts: MigFacts) -> Outcome {
    let not = if facts.not_verified.is_empty() {
        String::new()
    } else {
        format!("; not verified: {}", facts.not_verified.join("; "))
    };
    Outcome::pass(
        format!(
            "MIG instance {lease}: {} ({}); verified: {}{not}",
            device.name,
            device.mig_uuid(),
            facts.verified.join(", ")
        ),
        facts_of(&facts),
    )
}
