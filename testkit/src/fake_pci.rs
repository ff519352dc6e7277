//! A fake host's PCI devices, of plain files and relative links as the kernel lays them out:
//! `/proc/driver/nvidia/gpus/<BDF>/information` for each GPU, and under `/sys` each GPU
//! behind a bridge of its own on the root bus `pci0000:00`, beside a network card on that bus,
//! with the links of `/sys/bus/pci/devices` and `/sys/class/pci_bus`.

use std::path::Path;

/// The NVIDIA vendor id, as `/sys/.../vendor` holds it.
pub const NVIDIA_VENDOR: &str = "0x10de";
/// The fake GPUs' device id (an H100 SXM's).
pub const FAKE_GPU_DEVICE: u16 = 0x2330;
/// The fake network card's bus address, on the root bus beside the GPUs' bridges.
pub const FAKE_NIC: &str = "0000:00:1f.6";

/// The fake PCI devices of `gpus` GPUs under a host root.
pub struct FakePci;

impl FakePci {
    /// GPU `i`'s bus address: `0000:0<i+1>:00.0`, behind the bridge [`FakePci::bridge`].
    pub fn gpu(i: u32) -> String {
        format!("0000:{:02x}:00.0", i + 1)
    }

    /// The bridge above GPU `i`: `0000:00:0<i+1>.0`.
    pub fn bridge(i: u32) -> String {
        format!("0000:00:{:02x}.0", i + 1)
    }

    /// Makes GPUs `0..gpus` (GPU `i` is `/dev/nvidia<i>`), their bridges and the network card.
    pub fn create(root: &Path, gpus: u32) -> std::io::Result<()> {
        let sys = root.join("sys");
        let top = sys.join("devices/pci0000:00");
        std::fs::create_dir_all(top.join("pci_bus/0000:00"))?;
        let class_bus = sys.join("class/pci_bus");
        let bus_devices = sys.join("bus/pci/devices");
        std::fs::create_dir_all(&class_bus)?;
        std::fs::create_dir_all(&bus_devices)?;
        link(
            "../../devices/pci0000:00/pci_bus/0000:00",
            &class_bus.join("0000:00"),
        )?;
        let nic = top.join(FAKE_NIC);
        device(&nic, "0x8086", 0x15b8, "0x020000")?;
        link(
            &format!("../../../devices/pci0000:00/{FAKE_NIC}"),
            &bus_devices.join(FAKE_NIC),
        )?;
        for i in 0..gpus {
            let (bridge, gpu) = (Self::bridge(i), Self::gpu(i));
            let bus = &gpu[..7];
            let bridge_dir = top.join(&bridge);
            device(&bridge_dir, "0x8086", 0x1901, "0x060400")?;
            std::fs::create_dir_all(bridge_dir.join("pci_bus").join(bus))?;
            device(
                &bridge_dir.join(&gpu),
                NVIDIA_VENDOR,
                FAKE_GPU_DEVICE,
                "0x030200",
            )?;
            for (name, at) in [(&bridge, &bridge), (&gpu, &format!("{bridge}/{gpu}"))] {
                let target = format!("../../../devices/pci0000:00/{at}");
                link(&target, &bus_devices.join(name))?;
            }
            let target = format!("../../devices/pci0000:00/{bridge}/pci_bus/{bus}");
            link(&target, &class_bus.join(bus))?;
            let info = root.join("proc/driver/nvidia/gpus").join(&gpu);
            std::fs::create_dir_all(&info)?;
            let text = format!(
                "Model: \t\t FAKE H100 (cuda-sandbox testkit)\nIRQ:   \t\t 0\n\
                 Bus Type: \t PCIe\nBus Location: \t {gpu}\nDevice Minor: \t {i}\n\
                 GPU Excluded:\t No\n"
            );
            std::fs::write(info.join("information"), text)?;
        }
        Ok(())
    }
}

impl FakePci {
    /// GPU `i`'s DRM nodes, as `nvidia-drm` makes them: `card<i+1>` and `renderD<128+i>`.
    pub fn drm_nodes(i: u32) -> [String; 2] {
        [format!("card{}", i + 1), format!("renderD{}", 128 + i)]
    }

    /// The DRM nodes of GPUs `0..gpus` made by [`FakePci::create`] ([`FakePci::drm_nodes`],
    /// real character devices 226:N in `/dev/dri`, each with its `/sys/class/drm/<node>` and
    /// `/sys/dev/char/226:<N>` links to its directory below the GPU's PCI device), and `card0`, a platform framebuffer's (as
    /// `simpledrm` makes it), which is no GPU's. Needs root (`mknod`).
    pub fn create_drm(root: &Path, gpus: u32) -> std::io::Result<()> {
        let dri = root.join("dev/dri");
        std::fs::create_dir_all(&dri)?;
        let class = root.join("sys/class/drm");
        std::fs::create_dir_all(&class)?;
        let chars = root.join("sys/dev/char");
        std::fs::create_dir_all(&chars)?;
        let node = |name: &str, minor: u64, device_dir: &str, device: &str| {
            crate::mknod_char(&dri.join(name), DRM_MAJOR, minor)?;
            let dir = root
                .join("sys/devices")
                .join(device_dir)
                .join("drm")
                .join(name);
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("dev"), format!("{DRM_MAJOR}:{minor}\n"))?;
            link(&format!("../../../{device}"), &dir.join("device"))?;
            let target = format!("../../devices/{device_dir}/drm/{name}");
            link(&target, &class.join(name))?;
            link(&target, &chars.join(format!("{DRM_MAJOR}:{minor}")))
        };
        node(
            "card0",
            0,
            "platform/simple-framebuffer.0",
            "simple-framebuffer.0",
        )?;
        for i in 0..gpus {
            let gpu = Self::gpu(i);
            let at = format!("pci0000:00/{}/{gpu}", Self::bridge(i));
            let [card, render] = Self::drm_nodes(i);
            node(&card, u64::from(i) + 1, &at, &gpu)?;
            node(&render, 128 + u64::from(i), &at, &gpu)?;
        }
        Ok(())
    }
}

/// The DRM major (`Documentation/admin-guide/devices.txt`: 226 char, Direct Rendering
/// Infrastructure).
pub const DRM_MAJOR: u64 = 226;

/// One device's directory: the attributes hwloc and NCCL read, and a 64-byte config space
/// (type 0 header, no capabilities) that agrees with them.
fn device(dir: &Path, vendor: &str, device: u16, class: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let vendor_id = u16::from_str_radix(vendor.trim_start_matches("0x"), 16).expect("hex");
    let class_code = u32::from_str_radix(class.trim_start_matches("0x"), 16).expect("hex");
    let attributes = [
        ("vendor", vendor.to_string()),
        ("device", format!("0x{device:04x}")),
        ("subsystem_vendor", vendor.to_string()),
        ("subsystem_device", "0x16c1".to_string()),
        ("class", class.to_string()),
        ("revision", "0xa1".to_string()),
        ("numa_node", "0".to_string()),
        ("local_cpus", "ff".to_string()),
        ("local_cpulist", "0-7".to_string()),
        ("max_link_speed", "32.0 GT/s PCIe".to_string()),
        ("max_link_width", "16".to_string()),
        ("current_link_speed", "32.0 GT/s PCIe".to_string()),
        ("current_link_width", "16".to_string()),
    ];
    for (name, value) in attributes {
        std::fs::write(dir.join(name), format!("{value}\n"))?;
    }
    let mut config = [0u8; 64];
    config[0..2].copy_from_slice(&vendor_id.to_le_bytes());
    config[2..4].copy_from_slice(&device.to_le_bytes());
    config[8] = 0xa1;
    config[9..12].copy_from_slice(&class_code.to_le_bytes()[..3]);
    config[0x0e] = if class_code >> 8 == 0x0604 { 1 } else { 0 };
    config[0x2c..0x2e].copy_from_slice(&vendor_id.to_le_bytes());
    config[0x2e..0x30].copy_from_slice(&0x16c1u16.to_le_bytes());
    std::fs::write(dir.join("config"), config)
}

fn link(target: &str, at: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, at)
}
