//! The GPU inventory: each GPU's compute capability, written by `cuda-sandbox-check
//! inventory` (as root, with the driver loaded) and read by the hook, which must not load the
//! driver, to choose GPUs that satisfy a build's `cuda-sm-*` features.
//!
//! One JSON file, [`INVENTORY_PATH`] by default (`<runtime_dir>/`[`INVENTORY_FILE`] for the
//! hook):
//!
//! ```json
//! {"version":1,"gpus":[{"bdf":"0000:01:00.0","pci_device":"0x2330","minor":0,"capability":"9.0"}]}
//! ```
//!
//! Each GPU is keyed by what the hook can re-check cheaply, without the driver: its PCI bus
//! address (`bdf`, the directory name under `/proc/driver/nvidia/gpus`), its PCI device id
//! (`/sys/bus/pci/devices/<bdf>/device`) and its "Device Minor" (the `N` of `/dev/nvidiaN`,
//! from `/proc/driver/nvidia/gpus/<bdf>/information`). The parsers of those two files are
//! here too ([`device_minor`], [`pci_id`]), so the writer and the reader read them alike.
//! [`Inventory::parse`] is linear in the input and refuses more than [`INVENTORY_MAX_BYTES`].

use cuda_sandbox_cuda_facts::Capability;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Where `cuda-sandbox-check inventory` writes by default: [`INVENTORY_FILE`] in the hook's
/// default `runtime_dir` (`/run`, so it is written again after every boot).
pub const INVENTORY_PATH: &str = "/run/cuda-sandbox/inventory.json";
/// The inventory's name in the hook's `runtime_dir`.
pub const INVENTORY_FILE: &str = "inventory.json";
/// The schema version written in [`Inventory::version`].
pub const INVENTORY_VERSION: u32 = 1;
/// The most bytes an inventory may hold (an entry is about 90 bytes).
pub const INVENTORY_MAX_BYTES: u64 = 64 * 1024;
/// The most GPUs an inventory may list.
pub const INVENTORY_MAX_GPUS: usize = 256;

/// The inventory file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// [`INVENTORY_VERSION`].
    pub version: u32,
    /// The GPUs, by bus address.
    pub gpus: Vec<InventoryGpu>,
}

/// One GPU of the inventory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InventoryGpu {
    /// Its PCI bus address, `dddd:bb:dd.f` in lowercase hex.
    pub bdf: Bdf,
    /// Its PCI device id, written `"0x2330"` as sysfs writes it.
    #[serde(serialize_with = "hex_id", deserialize_with = "from_hex_id")]
    pub pci_device: u16,
    /// Its "Device Minor": the `N` of `/dev/nvidiaN`.
    pub minor: u32,
    /// Its compute capability, written `"9.0"` (a variant such as `9.0a` is refused).
    pub capability: Capability,
}

/// A PCI bus address, `dddd:bb:dd.f` in lowercase hex (checked when made).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bdf([u8; 12]);

impl Bdf {
    /// `name` when it is a bus address, `dddd:bb:dd.f` in lowercase hex.
    pub fn parse(name: &str) -> Option<Bdf> {
        is_bdf(name).then(|| Bdf(name.as_bytes().try_into().expect("12 bytes")))
    }

    /// The address as text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("checked ASCII")
    }
}

impl std::fmt::Display for Bdf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

cuda_sandbox_cuda_facts::serialize_as_display!(Bdf);

impl<'de> Deserialize<'de> for Bdf {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Bdf, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Bdf::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{text:?} is not a PCI bus address dddd:bb:dd.f in lowercase hex"
            ))
        })
    }
}

/// Whether `name` is a PCI bus address, `dddd:bb:dd.f` in lowercase hex (the names of
/// `/proc/driver/nvidia/gpus` and `/sys/bus/pci/devices`).
pub fn is_bdf(name: &str) -> bool {
    // One byte against the template's: `h` a lowercase hex digit, `n` a function number 0 to
    // 7, else that byte.
    let fits = |(c, t): (u8, &u8)| match t {
        b'h' => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        b'n' => (b'0'..=b'7').contains(&c),
        _ => c == *t,
    };
    name.len() == 12 && name.bytes().zip(b"hhhh:hh:hh.n").all(fits)
}

/// The "Device Minor" of a `/proc/driver/nvidia/gpus/<bdf>/information` file's text (a line
/// `Device Minor: \t 0`).
pub fn device_minor(information: &str) -> Option<u32> {
    information
        .lines()
        .find_map(|l| l.strip_prefix("Device Minor:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The id in a sysfs `vendor` or `device` attribute's text (`0x2330` and a newline).
pub fn pci_id(text: &str) -> Option<u16> {
    let digits = text.trim().strip_prefix("0x")?;
    if digits.is_empty() || digits.len() > 4 {
        return None;
    }
    u16::from_str_radix(digits, 16).ok()
}

fn hex_id<S: Serializer>(id: &u16, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("0x{id:04x}"))
}

fn from_hex_id<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
    pci_id(&text)
        .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a PCI id 0xNNNN")))
}

/// Why an inventory cannot be used. One line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InventoryError {
    /// Longer than [`INVENTORY_MAX_BYTES`].
    #[error("longer than {max} bytes", max = INVENTORY_MAX_BYTES)]
    TooLong,
    /// Not the schema (serde_json's message quotes the input, an unknown key say: it is kept
    /// on one line).
    #[error("not an inventory: {}", crate::text::one_line(.0))]
    Malformed(String),
    /// Another schema version.
    #[error(
        "schema version {0}, not {v}: write it again with this cuda-sandbox's \
         `cuda-sandbox-check inventory`",
        v = INVENTORY_VERSION
    )]
    Version(u32),
    /// More than [`INVENTORY_MAX_GPUS`] GPUs.
    #[error("lists {0} GPUs, more than {max}", max = INVENTORY_MAX_GPUS)]
    TooManyGpus(usize),
    /// Two entries share a bus address or a minor.
    #[error("lists {0} twice")]
    Repeated(String),
}

impl Inventory {
    /// An inventory of `gpus`, sorted by bus address.
    pub fn new(mut gpus: Vec<InventoryGpu>) -> Inventory {
        gpus.sort_by_key(|g| g.bdf);
        Inventory {
            version: INVENTORY_VERSION,
            gpus,
        }
    }

    /// Reads an inventory from `bytes`: at most [`INVENTORY_MAX_BYTES`], the schema (unknown
    /// keys refused), [`INVENTORY_VERSION`], at most [`INVENTORY_MAX_GPUS`] GPUs, no bus
    /// address or minor twice. Linear in the input.
    pub fn parse(bytes: &[u8]) -> Result<Inventory, InventoryError> {
        if bytes.len() as u64 > INVENTORY_MAX_BYTES {
            return Err(InventoryError::TooLong);
        }
        #[derive(Deserialize)]
        struct Versioned {
            version: u32,
        }
        let malformed = |e: serde_json::Error| InventoryError::Malformed(e.to_string());
        let version: Versioned = serde_json::from_slice(bytes).map_err(malformed)?;
        if version.version != INVENTORY_VERSION {
            return Err(InventoryError::Version(version.version));
        }
        let inventory: Inventory = serde_json::from_slice(bytes).map_err(malformed)?;
        if inventory.gpus.len() > INVENTORY_MAX_GPUS {
            return Err(InventoryError::TooManyGpus(inventory.gpus.len()));
        }
        let mut bdfs: Vec<Bdf> = inventory.gpus.iter().map(|g| g.bdf).collect();
        let mut minors: Vec<u32> = inventory.gpus.iter().map(|g| g.minor).collect();
        bdfs.sort_unstable();
        minors.sort_unstable();
        if let Some(w) = bdfs.windows(2).find(|w| w[0] == w[1]) {
            return Err(InventoryError::Repeated(format!("bus address {}", w[0])));
        }
        if let Some(w) = minors.windows(2).find(|w| w[0] == w[1]) {
            return Err(InventoryError::Repeated(format!("device minor {}", w[0])));
        }
        Ok(inventory)
    }

    /// The inventory as JSON, one line and a newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("plain data") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(bdf: &str, minor: u32, cc: &str) -> InventoryGpu {
        InventoryGpu {
            bdf: Bdf::parse(bdf).unwrap(),
            pci_device: 0x2330,
            minor,
            capability: Capability::parse(cc).unwrap(),
        }
    }

    #[test]
    fn an_inventory_reads_back_as_written() {
        let inventory = Inventory::new(vec![
            gpu("0000:02:00.0", 1, "8.9"),
            gpu("0000:01:00.0", 0, "9.0"),
        ]);
        let text = inventory.to_json();
        assert_eq!(
            text,
            "{\"version\":1,\"gpus\":[{\"bdf\":\"0000:01:00.0\",\"pci_device\":\"0x2330\",\
             \"minor\":0,\"capability\":\"9.0\"},{\"bdf\":\"0000:02:00.0\",\"pci_device\":\
             \"0x2330\",\"minor\":1,\"capability\":\"8.9\"}]}\n"
        );
        assert_eq!(Inventory::parse(text.as_bytes()), Ok(inventory.clone()));
        assert_eq!(
            inventory
                .gpus
                .iter()
                .find(|g| g.minor == 1)
                .map(|g| g.capability.to_string()),
            Some("8.9".into())
        );
    }

    /// Each error's one line, as it read when `Display` was written by hand.
    #[test]
    fn each_error_reads_as_it_did() {
        for (e, text) in [
            (InventoryError::TooLong, "longer than 65536 bytes"),
            (
                InventoryError::Malformed("a\nb".into()),
                "not an inventory: a\\nb",
            ),
            (
                InventoryError::Version(2),
                "schema version 2, not 1: write it again with this cuda-sandbox's \
                 `cuda-sandbox-check inventory`",
            ),
            (
                InventoryError::TooManyGpus(300),
                "lists 300 GPUs, more than 256",
            ),
            (
                InventoryError::Repeated("device minor 0".into()),
                "lists device minor 0 twice",
            ),
        ] {
            assert_eq!(e.to_string(), text);
        }
    }

    #[test]
    fn a_bad_inventory_is_refused_in_one_line() {
        let one = |entry: &str| format!("{{\"version\":1,\"gpus\":[{entry}]}}");
        let good = "{\"bdf\":\"0000:01:00.0\",\"pci_device\":\"0x2330\",\"minor\":0,\
                    \"capability\":\"9.0\"}";
        assert!(Inventory::parse(one(good).as_bytes()).is_ok());
        for (bad, says) in [
            (good.replace("9.0", "9.0a"), "feature set"),
            (
                good.replace("0000:01:00.0", "0000:01:00.0/.."),
                "bus address",
            ),
            (good.replace("0000:01:00.0", "0000:0A:00.0"), "bus address"),
            (good.replace("0x2330", "0x12345"), "PCI id"),
            (good.replace("\"minor\":0", "\"minor\":-1"), "invalid value"),
            (good.replace("}", ",\"uuid\":\"x\"}"), "unknown field"),
            // A key holding an escaped newline: serde_json's message quotes it (found by the
            // inventory_parse fuzz target, 2026-12-02).
            (
                good.replace("\"minor\"", "\"m\\nor\""),
                "unknown field `m\\nor`",
            ),
            (format!("{good},{good}"), "bus address 0000:01:00.0 twice"),
        ] {
            let e = Inventory::parse(one(&bad).as_bytes())
                .unwrap_err()
                .to_string();
            assert!(e.contains(says) && !e.contains('\n'), "{bad}: {e}");
        }
        let e = Inventory::parse(b"{\"version\":2,\"gpus\":[]}").unwrap_err();
        assert_eq!(e, InventoryError::Version(2));
        let long = vec![b' '; INVENTORY_MAX_BYTES as usize + 1];
        assert_eq!(Inventory::parse(&long), Err(InventoryError::TooLong));
        let minors = format!("{good},{}", good.replace("0000:01", "0000:02"));
        assert!(Inventory::parse(one(&minors).as_bytes())
            .unwrap_err()
            .to_string()
            .contains("device minor 0 twice"));
    }

    /// The real `information` file's layout (a 535 driver's, tabs and all) and sysfs ids.
    #[test]
    fn the_driver_s_files_are_read_as_the_driver_writes_them() {
        let information = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 221\nGPU UUID: \t \
                           GPU-5f5e1e4a-0000-0000-0000-000000000000\nVideo BIOS: \t \
                           96.00.74.00.0d\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \
                           \t 0xfffffffffffff\nBus Location: \t 0000:19:00.0\nDevice Minor: \t \
                           3\nGPU Firmware: \t 535.104.05\nGPU Excluded:\t No\n";
        assert_eq!(device_minor(information), Some(3));
        assert_eq!(device_minor("Model: x\n"), None);
        assert_eq!(pci_id("0x2330\n"), Some(0x2330));
        for bad in ["2330", "0x", "0x123456", "0xzz"] {
            assert_eq!(pci_id(bad), None, "{bad}");
        }
        assert!(is_bdf("0001:a1:1f.7") && !is_bdf("0000:01:00.8"));
    }
}
