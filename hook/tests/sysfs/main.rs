//! `sysfs = "topology"`: real Nix builds in a real sandbox, with Debian's hwloc
//! (`lstopo-no-graphics`) inside, on a fake host whose `/sys/devices/system/{cpu,node}` are
//! read-only binds of this machine's (so what hwloc finds can be held to what it finds here).
//! Needs root, `nix-build` and hwloc; under `CI=true` these tests fail rather than skip.

use cuda_sandbox_hook::lease::Leases;
use cuda_sandbox_testkit::{hook_config, nix_available, nonce, FakeDevices, FakePci, NixSandbox};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../common/mod.rs"]
mod common;

use common::{nix_file, HOOK};

const LSTOPO: &str = "/usr/bin/lstopo-no-graphics";
const TOPOLOGY: [&str; 2] = ["/sys/devices/system/cpu", "/sys/devices/system/node"];

/// A fake host with this machine's CPU and NUMA topology: `root/sys/devices/system/{cpu,node}`
/// are read-only binds of the real ones; its GPUs have fake PCI devices ([`FakePci`]). Every mount under the temporary directory (the
/// host's and the hook's trees) is undone when it is dropped, before the directory goes.
struct Host {
    unmount: Unmount,
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
    fn new(top: &str, gpus: u32) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let unmount = Unmount(dir.path().to_path_buf());
        let root = dir.path().join("root");
        FakeDevices::create(&root, gpus.into(), true).expect("mknod the fake devices (needs root)");
        FakePci::create(&root, gpus).unwrap();
        for real in TOPOLOGY {
            let fake = root.join(real.trim_start_matches('/'));
            std::fs::create_dir_all(&fake).unwrap();
            mount(
                Some(real),
                &fake,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .unwrap();
            let ro = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
            mount(None::<&str>, &fake, None::<&str>, ro, None::<&str>).unwrap();
        }
        let config = dir.path().join("config.toml");
        let text = hook_config(&root, dir.path(), top, &["cuda"], "").replacen(
            "[[rule.device]]",
            "sysfs = \"topology\"\n[[rule.device]]",
            1,
        );
        std::fs::write(&config, text).unwrap();
        Host {
            unmount,
            root,
            config,
            _dir: dir,
        }
    }

    fn trees(&self) -> PathBuf {
        self.unmount.0.join("run/sysfs")
    }

    /// Builds `attr` of sysfs-probe.nix; its report, its topology XML and lstopo's stderr.
    fn build(&self, attr: &str) -> Probe {
        let mut sandbox = NixSandbox::with_hook(Path::new(HOOK), &self.config);
        sandbox.system_features = "cuda".to_string();
        let build = sandbox.build(
            &nix_file("sysfs-probe.nix"),
            &[("nonce", &nonce())],
            &["-A", attr],
        );
        assert!(build.ok(), "nix-build -A {attr} failed:\n{}", build.log);
        let out = &build.out_paths[0];
        let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
        Probe {
            report: read("report"),
            xml: read("topology.xml"),
            stderr: read("lstopo.err"),
        }
    }
}

struct Probe {
    report: String,
    xml: String,
    stderr: String,
}

/// The mount points under `dir`, from this process's mountinfo (octal escapes kept: the
/// tests' paths have none).
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// How many objects of `kind` hwloc's XML holds.
fn objects(xml: &str, kind: &str) -> usize {
    xml.matches(&format!("<object type=\"{kind}\"")).count()
}

/// What hwloc finds on this machine, outside any sandbox: the ground truth.
fn host_topology() -> String {
    let out = Command::new(LSTOPO).args(["--of", "xml"]).output().unwrap();
    assert!(out.status.success(), "{LSTOPO} failed on the host");
    String::from_utf8(out.stdout).unwrap()
}

fn ready(test: &str) -> bool {
    if !nix_available(test) {
        return false;
    }
    if !Path::new(LSTOPO).exists() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{test} needs {LSTOPO} (Debian's hwloc-nox; scripts/setup installs it)");
        }
        eprintln!("SKIPPED {test}: {LSTOPO} missing (apt-get install hwloc-nox)");
        return false;
    }
    true
}

/// The pids of the processes rooted at `dir` (device, inode).
fn rooted_at(dir: (u64, u64)) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}/root")).is_ok_and(|m| (m.dev(), m.ino()) == dir)
        })
        .collect()
}

/// Waits up to 60 s for `done`.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
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
