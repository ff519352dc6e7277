//! The built-in rule for AMD GPUs (`hook/amd-rule.toml`, `sysfs = "kfd"`): real Nix builds in
//! a real sandbox on a fake AMD host, made of real character devices (mknod) and a fake
//! `/sys`: `/dev/kfd`, two GPUs' DRM nodes, the KFD topology, the DRM nodes' `/sys/dev/char`
//! links to their PCI devices, and a driver link to a store path. The builder is a plain
//! script that reports what it sees. Needs root and `nix-build`; under `CI=true` these tests
//! fail rather than skip.

use cuda_sandbox_hook::config::AMD_RULE_TOML;
use cuda_sandbox_testkit::{mknod_char, nix_available, nonce, NixSandbox};
use nix::mount::{umount2, MntFlags};
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../common/mod.rs"]
mod common;

use common::{nix_file, HOOK};

/// A major number standing in for `/dev/kfd`'s, which the kernel allocates at boot.
const FAKE_KFD_MAJOR: u64 = 237;
/// The DRM major (`Documentation/admin-guide/devices.txt`: 226, Direct Rendering
/// Infrastructure).
const DRM_MAJOR: u64 = 226;
/// AMD's PCI vendor id.
const AMD_VENDOR: &str = "0x1002";
/// What the fake driver's `libcuda.so.1` holds (ZLUDA's, on a real host).
const DRIVER_TEXT: &str = "fake ZLUDA libcuda";

/// GPU `i`'s bus address, behind a bridge of its own on `pci0000:00`.
fn gpu_bdf(i: u32) -> String {
    format!("0000:{:02x}:00.0", i + 0x0c)
}

fn bridge_bdf(i: u32) -> String {
    format!("0000:00:{:02x}.0", i + 1)
}

/// A fake AMD host: `root/` and the hook's configuration (the AMD rule for that root). Every
/// mount under the temporary directory (the hook's trees) is undone when it is dropped.
struct Host {
    _unmount: Unmount,
    root: PathBuf,
    config: PathBuf,
    _dir: tempfile::TempDir,
}

/// Detaches every mount under its directory when dropped.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        for point in mounts_under(&self.0).into_iter().rev() {
            let _ = umount2(&point, MntFlags::MNT_DETACH);
        }
    }
}

impl Host {
    /// Two AMD GPUs (card0/renderD128 and card1/renderD129), `/dev/kfd`, a stray NVIDIA node
    /// and a non-DRM `/sys/dev/char` link the build must not get, and the driver link.
    fn new(top: &str) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let unmount = Unmount(dir.path().to_path_buf());
        let root = dir.path().join("root");
        let dev = root.join("dev");
        std::fs::create_dir_all(dev.join("dri/by-path")).unwrap();
        mknod_char(&dev.join("kfd"), FAKE_KFD_MAJOR, 0).expect("mknod (needs root)");
        mknod_char(&dev.join("nvidia0"), 195, 0).unwrap();
        mknod_char(&dev.join("null"), 1, 3).unwrap();
        let sys = root.join("sys");
        let chars = sys.join("dev/char");
        std::fs::create_dir_all(&chars).unwrap();
        let devices = sys.join("devices");
        let topology = devices.join("virtual/kfd/kfd/topology");
        std::fs::create_dir_all(devices.join("virtual/mem/null")).unwrap();
        link("../../devices/virtual/mem/null", &chars.join("1:3"));
        write(&topology.join("generation_id"), "1\n");
        write(&topology.join("system_properties"), "platform_oem 0\n");
        write(
            &topology.join("nodes/0/properties"),
            "cpu_cores_count 8\nsimd_count 0\ndrm_render_minor 0\n",
        );
        write(
            &devices.join("virtual/kfd/kfd/dev"),
            &format!("{FAKE_KFD_MAJOR}:0\n"),
        );
        for i in 0..2u32 {
            let (card, render) = (i, 128 + i);
            mknod_char(&dev.join(format!("dri/card{card}")), DRM_MAJOR, card.into()).unwrap();
            mknod_char(
                &dev.join(format!("dri/renderD{render}")),
                DRM_MAJOR,
                render.into(),
            )
            .unwrap();
            let (bridge, gpu) = (bridge_bdf(i), gpu_bdf(i));
            link(
                &format!("../renderD{render}"),
                &dev.join(format!("dri/by-path/pci-{gpu}-render")),
            );
            let at = format!("pci0000:00/{bridge}/{gpu}");
            let pci = devices.join(&at);
            write(
                &devices.join(format!("pci0000:00/{bridge}/class")),
                "0x060400\n",
            );
            write(&pci.join("vendor"), &format!("{AMD_VENDOR}\n"));
            write(&pci.join("device"), "0x74a1\n");
            for node in [format!("card{card}"), format!("renderD{render}")] {
                let dir = pci.join("drm").join(&node);
                std::fs::create_dir_all(&dir).unwrap();
                link(&format!("../../../{gpu}"), &dir.join("device"));
                let minor = node.trim_start_matches(|c: char| c.is_ascii_alphabetic());
                link(
                    &format!("../../devices/{at}/drm/{node}"),
                    &chars.join(format!("{DRM_MAJOR}:{minor}")),
                );
            }
            let node = topology.join(format!("nodes/{}", i + 1));
            write(&node.join("gpu_id"), &format!("{}\n", 4000 + i));
            write(
                &node.join("properties"),
                &format!("simd_count 240\ndrm_render_minor {render}\n"),
            );
        }
        let driver = dir.path().join("zluda");
        write(&driver.join("lib/libcuda.so.1"), DRIVER_TEXT);
        let added = Command::new("nix-store")
            .arg("--add")
            .arg(&driver)
            .env("NIX_CONFIG", NixSandbox::without_hook().nix_config())
            .output()
            .unwrap();
        assert!(
            added.status.success(),
            "{}",
            String::from_utf8_lossy(&added.stderr)
        );
        let store_path = String::from_utf8(added.stdout).unwrap();
        std::fs::create_dir_all(root.join("run")).unwrap();
        link(store_path.trim(), &root.join("run/opengl-driver"));
        let config = dir.path().join("config.toml");
        let text = format!(
            "{top}host_root = \"{}\"\nclosure_cache = \"{}\"\nruntime_dir = \"{}\"\n{AMD_RULE_TOML}",
            root.display(),
            dir.path().join("cache").display(),
            dir.path().join("run").display(),
        );
        std::fs::write(&config, text).unwrap();
        Host {
            _unmount: unmount,
            root,
            config,
            _dir: dir,
        }
    }

    /// Builds `attr` of amd-probe.nix: whether it built, its report (or the log).
    fn build(&self, attr: &str) -> (bool, String) {
        let sandbox = NixSandbox::with_hook(Path::new(HOOK), &self.config);
        let build = sandbox.build(
            &nix_file("amd-probe.nix"),
            &[("nonce", &nonce())],
            &["-A", attr],
        );
        if !build.ok() {
            return (false, build.log);
        }
        let report = build.out_paths[0].join("report");
        (true, std::fs::read_to_string(report).unwrap())
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn link(target: &str, at: &Path) {
    std::os::unix::fs::symlink(target, at).unwrap();
}

/// The mount points under `dir`, from this process's mountinfo.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// The value of the report's line starting with `prefix`.
fn line<'a>(report: &'a str, prefix: &str) -> &'a str {
    report
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{report}"))
}

// The tests, one module per tier (docs/testing.md).
mod sandbox;
