//! `cuda-sandbox-check inventory [--output PATH] [--root DIR]`: writes the GPU inventory the
//! hook reads to choose GPUs for a build's `cuda-sm-*` features
//! ([`cuda_sandbox_manifest::inventory`]): each GPU's compute capability, keyed by its PCI
//! bus address, PCI device id and "Device Minor".
//!
//! The capabilities come from NVML (`nvmlDeviceGetCudaComputeCapability`), through the driver
//! this process loads, by each GPU's `/dev/nvidiaN` minor (`nvmlDeviceGetMinorNumber`): NVML
//! lists every GPU, a GPU in MIG mode too, where CUDA enumerates one MIG instance per process
//! in place of its GPU and gives no minor. Each minor is then found in
//! `/proc/driver/nvidia/gpus/<bdf>/information`, and the GPU's device id in
//! `/sys/bus/pci/devices/<bdf>/device`, both under `--root` (`/`; another root for tests).
//! The file is written atomically (a temporary file beside it, then a rename), mode 0644,
//! and must be written as root: the hook trusts no other owner.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use cuda_sandbox_cuda_facts::features::parse_gpu;
use cuda_sandbox_manifest::inventory::{
    self, Bdf, Inventory, InventoryGpu, INVENTORY_MAX_GPUS, INVENTORY_PATH,
};

use crate::facts::nvml;
use crate::output;

/// `cuda-sandbox-check inventory`.
#[derive(Debug, Parser)]
#[command(
    name = "cuda-sandbox-check inventory",
    about = "Writes the GPU inventory cuda-sandbox-hook reads to give a build GPUs that \
             satisfy its cuda-sm-* features: each GPU's compute capability (from NVML) keyed \
             by its PCI bus address, PCI device id and /dev/nvidiaN minor.",
    after_help = "Run it as root once the driver is up (the NixOS module runs it from \
                  cuda-sandbox-inventory.service). The hook re-checks every entry against \
                  /proc/driver/nvidia/gpus and /sys/bus/pci/devices on each build and ignores \
                  an inventory that no longer matches.\n\
                  Exit status: 0 written, 2 no driver, no GPU, a GPU not found under \
                  /proc/driver/nvidia/gpus, or the file could not be written."
)]
pub struct InventoryCli {
    /// Where to write it.
    #[arg(long, value_name = "PATH", default_value = INVENTORY_PATH)]
    pub output: PathBuf,

    /// The root under which /proc/driver/nvidia/gpus and /sys/bus/pci/devices are read.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
}

/// Why no inventory was written. One line.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// NVML could not be loaded or asked.
    #[error("NVML cannot list the GPUs: {0}")]
    Nvml(String),
    /// NVML lists no GPU.
    #[error("NVML lists no GPU")]
    NoGpu,
    /// More GPUs than an inventory may hold.
    #[error("NVML lists {0} GPUs, more than an inventory holds ({INVENTORY_MAX_GPUS})")]
    TooMany(usize),
    /// A GPU NVML lists without what the inventory needs: NVML's index, its name, and what is
    /// missing.
    #[error("GPU {0} ({1}): {2}")]
    Gpu(usize, String, String),
    /// `/proc/driver/nvidia/gpus` (the directory) could not be read, and why.
    #[error("cannot list {path}: {1}", path = .0.display())]
    Proc(PathBuf, #[source] std::io::Error),
    /// The file could not be written, and why.
    #[error("cannot write {path}: {1}", path = .0.display())]
    Write(PathBuf, #[source] std::io::Error),
}

/// The GPUs `/proc/driver/nvidia/gpus` under `root` lists, by "Device Minor": bus address.
fn bus_addresses(root: &Path) -> Result<BTreeMap<u32, Bdf>, InventoryError> {
    let dir = root.join("proc/driver/nvidia/gpus");
    let proc_error = |source| InventoryError::Proc(dir.clone(), source);
    let mut found = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).map_err(proc_error)? {
        let entry = entry.map_err(proc_error)?;
        let Some(bdf) = entry.file_name().to_str().and_then(Bdf::parse) else {
            continue;
        };
        let text = std::fs::read_to_string(entry.path().join("information")).unwrap_or_default();
        if let Some(minor) = inventory::device_minor(&text) {
            found.insert(minor, bdf);
        }
    }
    Ok(found)
}

/// The inventory of the GPUs NVML lists, with their bus addresses and device ids under
/// `root`.
pub fn take(root: &Path) -> Result<Inventory, InventoryError> {
    let devices = nvml::load()
        .and_then(|nvml| nvml::devices(&nvml))
        .map_err(|e| InventoryError::Nvml(e.to_string()))?;
    if devices.is_empty() {
        return Err(InventoryError::NoGpu);
    }
    if devices.len() > INVENTORY_MAX_GPUS {
        return Err(InventoryError::TooMany(devices.len()));
    }
    let addresses = bus_addresses(root)?;
    let gpus = devices
        .iter()
        .enumerate()
        .map(|(index, device)| {
            let fail = |why: String| InventoryError::Gpu(index, device.name.clone(), why);
            let minor = device
                .mig
                .minor_number
                .ok_or_else(|| fail("NVML gives no /dev/nvidiaN minor".into()))?;
            let capability = device
                .compute_capability
                .as_deref()
                .ok_or_else(|| fail("NVML gives no compute capability".into()))
                .and_then(|text| parse_gpu(text).map_err(|e| fail(e.to_string())))?;
            let bdf = *addresses.get(&minor).ok_or_else(|| {
                fail(format!(
                    "no /proc/driver/nvidia/gpus/*/information names Device Minor {minor}"
                ))
            })?;
            let device_file = root
                .join("sys/bus/pci/devices")
                .join(bdf.as_str())
                .join("device");
            let pci_device = std::fs::read_to_string(&device_file)
                .ok()
                .and_then(|t| inventory::pci_id(&t))
                .ok_or_else(|| fail(format!("{} holds no PCI id", device_file.display())))?;
            Ok(InventoryGpu {
                bdf,
                pci_device,
                minor,
                capability,
            })
        })
        .collect::<Result<Vec<_>, InventoryError>>()?;
    Ok(Inventory::new(gpus))
}

/// Writes `inventory` to `path` atomically, mode 0644: a temporary file in the same
/// directory (created 0700 when missing, as the hook creates its runtime directory), synced,
/// then renamed over `path`.
pub fn write(inventory: &Inventory, path: &Path) -> Result<(), InventoryError> {
    let write_error = |source| InventoryError::Write(path.to_path_buf(), source);
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(write_error)?;
    path.file_name()
        .ok_or_else(|| write_error(std::io::Error::other("the path names no file")))?;
    // Written to a temporary file beside it (removed if anything fails), renamed over it.
    let mut file = tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(0o644))
        .tempfile_in(dir)
        .map_err(write_error)?;
    file.write_all(inventory.to_json().as_bytes())
        .map_err(write_error)?;
    file.as_file().sync_all().map_err(write_error)?;
    file.persist(path).map_err(|e| write_error(e.error))?;
    Ok(())
}

/// Runs `inventory`: writes the file and prints one line per GPU; 0, or the reason (main says
/// it on stderr, exit status 2).
pub fn run(cli: &InventoryCli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let inventory = take(&cli.root)?;
    write(&inventory, &cli.output)?;
    output::to_stdout(|out| {
        for gpu in &inventory.gpus {
            writeln!(
                out,
                "nvidia{} {} (0x{:04x}): {}",
                gpu.minor, gpu.bdf, gpu.pci_device, gpu.capability
            )?;
        }
        writeln!(out, "wrote {}", cli.output.display())
    })?;
    Ok(ExitCode::SUCCESS)
}
