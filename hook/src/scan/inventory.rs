//! The GPU inventory ([`cuda_sandbox_manifest::inventory`]), read only for a build that
//! requires `cuda-sm-*` features: each GPU's compute capability, written by
//! `cuda-sandbox-check inventory` to `<runtime_dir>/inventory.json`, so that the hook need
//! not load the driver.
//!
//! The file is opened once trusted ([`crate::trust::open_file`]: root's, not writable by group or
//! others, a regular file opened without following a link or blocking), read to at most
//! [`INVENTORY_MAX_BYTES`] and parsed in linear time. Then every entry is checked against the
//! host as it is now, under `host_root`: the GPUs `/proc/driver/nvidia/gpus` lists must be
//! exactly the inventory's, each with the inventory's "Device Minor" and the PCI device id of
//! `/sys/bus/pci/devices/<bdf>/device`. Anything else (no file, an untrusted or malformed
//! one, a GPU added, removed, moved or swapped since it was written) is "no inventory", with
//! the reason. A Jetson has no `/proc/driver/nvidia/gpus`: there `tegra_capability` gives its
//! GPU's capability.

use crate::config::Config;
use crate::sysfs;
use cuda_sandbox_cuda_facts::Capability;
use cuda_sandbox_manifest::inventory::{Bdf, Inventory, INVENTORY_FILE, INVENTORY_MAX_BYTES};
use std::path::Path;

/// What is known of the GPUs' capabilities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InventoryView {
    /// The inventory, every entry matching the host.
    Gpus(Vec<KnownGpu>),
    /// A Jetson's one GPU, from `tegra_capability`.
    Tegra(Capability),
    /// No usable inventory, and why (one line).
    Missing(String),
}

/// One GPU of a checked inventory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KnownGpu {
    /// Its `/dev/nvidiaN` number.
    pub minor: u32,
    /// Its PCI bus address.
    pub bdf: Bdf,
    /// Its compute capability.
    pub capability: Capability,
}

/// Reads and checks the inventory for `config`'s host.
pub(crate) fn scan(config: &Config) -> InventoryView {
    let listed = sysfs::listed_gpus(&config.host_root);
    let host = match (listed, config.tegra_capability) {
        (Ok((_, host)), _) => host,
        (Err(_), Some(capability)) => return InventoryView::Tegra(capability),
        (Err(e), None) => {
            return InventoryView::Missing(format!(
                "the host's GPUs cannot be listed ({e}); on a Jetson, set tegra_capability"
            ))
        }
    };
    let path = config.runtime_dir.join(INVENTORY_FILE);
    // The inventory, trusted, bounded (a longer one is caught by the parser) and parsed.
    let read = super::read_trusted(&path, INVENTORY_MAX_BYTES)
        .and_then(|bytes| Inventory::parse(&bytes).map_err(|e| e.to_string()));
    match read.map(|inventory| check(&inventory, &host, &config.host_root)) {
        Ok(Ok(gpus)) => InventoryView::Gpus(gpus),
        Ok(Err(why)) => InventoryView::Missing(format!(
            "{} no longer matches the host: {why}; run `cuda-sandbox-check inventory` again",
            path.display()
        )),
        Err(why) => InventoryView::Missing(format!(
            "{}: {why}; run `cuda-sandbox-check inventory` as root",
            path.display()
        )),
    }
}

/// The inventory's GPUs when they are exactly the `host`'s (bus addresses under
/// `/proc/driver/nvidia/gpus`, sorted), each with its minor and device id as the host has
/// them now.
fn check(
    inventory: &Inventory,
    host: &[String],
    host_root: &Path,
) -> Result<Vec<KnownGpu>, String> {
    if let Some(extra) = host.iter().find(|bdf| {
        !inventory
            .gpus
            .iter()
            .any(|g| g.bdf.as_str() == bdf.as_str())
    }) {
        return Err(format!("it does not list the GPU at {extra}"));
    }
    inventory
        .gpus
        .iter()
        .map(|gpu| {
            let bdf = gpu.bdf.as_str();
            if host.binary_search_by(|h| h.as_str().cmp(bdf)).is_err() {
                return Err(format!("the host has no GPU at {bdf}"));
            }
            let (minor, device) = sysfs::identity(host_root, bdf).map_err(|e| e.to_string())?;
            if (minor, device) != (gpu.minor, gpu.pci_device) {
                return Err(format!(
                    "the GPU at {bdf} is nvidia{minor} with device id 0x{device:04x}, not \
                     nvidia{} with 0x{:04x}",
                    gpu.minor, gpu.pci_device
                ));
            }
            Ok(KnownGpu {
                minor,
                bdf: gpu.bdf,
                capability: gpu.capability,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuda_sandbox_manifest::inventory::InventoryGpu;

    /// A fake host of two GPUs (`/proc` and `/sys` as [`sysfs::identity`] reads them) and
    /// its config.
    fn host(dir: &Path) -> Config {
        for (i, bdf) in ["0000:01:00.0", "0000:02:00.0"].iter().enumerate() {
            let info = dir.join("root/proc/driver/nvidia/gpus").join(bdf);
            std::fs::create_dir_all(&info).unwrap();
            std::fs::write(
                info.join("information"),
                format!("Model: \t\t FAKE\nBus Location: \t {bdf}\nDevice Minor: \t {i}\n"),
            )
            .unwrap();
            let device = dir.join("root/sys/bus/pci/devices").join(bdf);
            std::fs::create_dir_all(&device).unwrap();
            std::fs::write(device.join("device"), "0x2330\n").unwrap();
        }
        let text = format!(
            "host_root = \"{}\"\nruntime_dir = \"{}\"\n",
            dir.join("root").display(),
            dir.join("run").display()
        );
        Config::parse(&text, "test").unwrap()
    }

    fn write(config: &Config, gpus: &[(&str, u32, &str)]) {
        let inventory = Inventory::new(
            gpus.iter()
                .map(|(bdf, minor, cc)| InventoryGpu {
                    bdf: Bdf::parse(bdf).unwrap(),
                    pci_device: 0x2330,
                    minor: *minor,
                    capability: Capability::parse(cc).unwrap(),
                })
                .collect(),
        );
        std::fs::create_dir_all(&config.runtime_dir).unwrap();
        std::fs::write(config.runtime_dir.join(INVENTORY_FILE), inventory.to_json()).unwrap();
    }

    fn missing(view: InventoryView) -> String {
        match view {
            InventoryView::Missing(why) => why,
            other => panic!("an inventory was taken: {other:?}"),
        }
    }

    #[test]
    fn a_matching_inventory_gives_each_gpu_s_capability() {
        let dir = tempfile::tempdir().unwrap();
        let config = host(dir.path());
        let why = missing(scan(&config));
        assert!(
            why.contains("inventory.json") && why.contains("run `cuda-sandbox-check inventory`"),
            "{why}"
        );
        write(
            &config,
            &[("0000:01:00.0", 0, "8.9"), ("0000:02:00.0", 1, "9.0")],
        );
        let InventoryView::Gpus(gpus) = scan(&config) else {
            panic!("no inventory")
        };
        let got: Vec<(u32, String)> = gpus
            .iter()
            .map(|g| (g.minor, g.capability.to_string()))
            .collect();
        assert_eq!(got, [(0, "8.9".into()), (1, "9.0".into())]);
    }

    #[test]
    fn an_entry_that_no_longer_matches_is_no_inventory() {
        let dir = tempfile::tempdir().unwrap();
        let config = host(dir.path());
        write(
            &config,
            &[("0000:01:00.0", 1, "8.9"), ("0000:02:00.0", 0, "9.0")],
        );
        assert!(missing(scan(&config)).contains(
            "no longer matches the host: the GPU at 0000:01:00.0 is nvidia0 with device id \
             0x2330, not nvidia1 with 0x2330"
        ));
        write(&config, &[("0000:01:00.0", 0, "8.9")]);
        assert!(missing(scan(&config)).contains("it does not list the GPU at 0000:02:00.0"));
        write(
            &config,
            &[
                ("0000:01:00.0", 0, "8.9"),
                ("0000:02:00.0", 1, "9.0"),
                ("0000:03:00.0", 2, "9.0"),
            ],
        );
        assert!(missing(scan(&config)).contains("the host has no GPU at 0000:03:00.0"));
        let device = dir
            .path()
            .join("root/sys/bus/pci/devices/0000:02:00.0/device");
        write(
            &config,
            &[("0000:01:00.0", 0, "8.9"), ("0000:02:00.0", 1, "9.0")],
        );
        std::fs::write(&device, "0x2335\n").unwrap();
        assert!(missing(scan(&config)).contains("is nvidia1 with device id 0x2335"));
    }

    #[test]
    fn an_untrusted_or_malformed_inventory_is_no_inventory() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let config = host(dir.path());
        write(
            &config,
            &[("0000:01:00.0", 0, "8.9"), ("0000:02:00.0", 1, "9.0")],
        );
        let file = config.runtime_dir.join(INVENTORY_FILE);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(missing(scan(&config)).contains("writable by group or others"));
        std::fs::write(&file, "{\"version\":1,\"gpus\":[{}]}").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(missing(scan(&config)).contains("not an inventory"));
        std::fs::write(&file, vec![b' '; INVENTORY_MAX_BYTES as usize + 1]).unwrap();
        assert!(missing(scan(&config)).contains("longer than"));
    }

    #[test]
    fn a_jetson_s_gpu_comes_from_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "host_root = \"{}\"\nruntime_dir = \"{}\"\ntegra_capability = \"8.7\"\n",
            dir.path().display(),
            dir.path().join("run").display()
        );
        let config = Config::parse(&text, "test").unwrap();
        assert_eq!(
            scan(&config),
            InventoryView::Tegra(Capability::parse("8.7").unwrap())
        );
        let bad = Config::parse("tegra_capability = \"8.7a\"\n", "test").unwrap_err();
        assert!(bad.to_string().contains("feature set"), "{bad}");
    }
}
