//! `sysfs = "topology"`: real Nix builds in a real sandbox, with Debian's hwloc
//! (`lstopo-no-graphics`) inside, on a fake host whose `/sys/devices/system/{cpu,node}` are
//! read-only binds of this machine's (so what hwloc finds can be held to what it finds here).
//! Needs root, `nix-build` and hwloc; under `CI=true` these tests fail rather than skip.

use cuda_sandbox_testkit::{hook_config, nix_available, nonce, FakeDevices, FakePci, NixSandbox};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use std::path::{Path, PathBuf};
use std::process::Command;

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

#[test]
fn hwloc_in_a_tagged_build_finds_the_hosts_cores_and_numa_nodes_read_only() {
    let test = "hwloc_in_a_tagged_build_finds_the_hosts_cores_and_numa_nodes_read_only";
    if !ready(test) {
        return;
    }
    let host = Host::new("", 1);
    let truth = host_topology();
    let tagged = host.build("tagged");
    let r = &tagged.report;
    assert!(r.contains("lstopo exit 0"), "{r}\n{}", tagged.stderr);
    assert!(
        !tagged.stderr.contains("failed to find sysfs cpu topology"),
        "hwloc found no sysfs topology:\n{}",
        tagged.stderr
    );
    for kind in ["NUMANode", "Package", "Core", "PU", "L2Cache"] {
        assert_eq!(
            objects(&tagged.xml, kind),
            objects(&truth, kind),
            "{kind} objects differ from the host's:\n{}",
            tagged.xml
        );
    }
    assert!(objects(&tagged.xml, "Core") > 0, "{}", tagged.xml);
    // Each NUMA node's memory comes from node<N>/meminfo: hwloc read the bound directory.
    let memory = |xml: &str| -> Vec<String> {
        xml.lines()
            .filter(|l| l.contains("type=\"NUMANode\""))
            .filter_map(|l| l.split("local_memory=\"").nth(1))
            .map(|v| v.split('"').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(memory(&tagged.xml).len(), memory(&truth).len());
    for dir in TOPOLOGY {
        assert!(r.contains(&format!("dir {dir}: ")), "{r}");
        let line = r
            .lines()
            .find(|l| l.starts_with(&format!("mount {dir} ")))
            .unwrap_or_else(|| panic!("{dir} is not a mount in the build:\n{r}"));
        let options = line.rsplit(' ').next().unwrap();
        assert!(
            options.split(',').any(|o| o == "ro"),
            "{dir} is not read-only: {line}"
        );
    }
    assert!(
        r.contains("sys present: bus class devices \n"),
        "the build sees more of /sys than the topology and the GPU's PCI device:\n{r}"
    );
    assert!(r.contains("write failed"), "{r}");
    assert!(r.contains("create failed"), "{r}");

    let untagged = host.build("untagged");
    assert!(
        untagged.report.contains("sys absent"),
        "{}",
        untagged.report
    );
    assert!(
        untagged
            .stderr
            .contains("failed to find sysfs cpu topology directory"),
        "hwloc without /sys no longer says so (the tagged check proves nothing):\n{}",
        untagged.stderr
    );
}

#[test]
fn the_tree_goes_with_the_lease_and_nothing_stays_mounted() {
    let test = "the_tree_goes_with_the_lease_and_nothing_stays_mounted";
    if !ready(test) {
        return;
    }
    let host = Host::new("gpus_per_build = 1\nlease_wait_seconds = 30\n", 2);
    let records = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(host.trees())
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    };
    host.build("tagged");
    let first = records();
    assert_eq!(first.len(), 2, "one tree and its record: {first:?}");
    // The hook mounts in the namespace of the Nix that ran it, which ended with nix-build.
    assert_eq!(mounts_under(&host.trees()), Vec::<PathBuf>::new());
    // The first build's lease is judged ended by the next hook, which removes its tree.
    host.build("tagged");
    let second = records();
    assert_eq!(second.len(), 2, "{second:?}");
    assert!(
        first.iter().all(|n| !second.contains(n)),
        "the ended build's tree stayed: {first:?} then {second:?}"
    );
    assert_eq!(mounts_under(&host.trees()), Vec::<PathBuf>::new());
    // The untagged build changes nothing; the host's own binds are untouched.
    host.build("untagged");
    assert_eq!(records(), second);
    assert_eq!(mounts_under(&host.root).len(), 2);
}

/// The value of the report's line starting with `prefix`.
fn line<'a>(report: &'a str, prefix: &str) -> &'a str {
    report
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{report}"))
}

#[test]
fn a_build_leased_one_of_two_gpus_sees_only_its_pci_device_read_only_and_hwloc_finds_it() {
    let test =
        "a_build_leased_one_of_two_gpus_sees_only_its_pci_device_read_only_and_hwloc_finds_it";
    if !ready(test) {
        return;
    }
    let host = Host::new("gpus_per_build = 1\nlease_wait_seconds = 30\n", 2);
    let probe = host.build("tagged");
    let r = &probe.report;
    let gpus = line(r, "gpus: ").trim();
    let leased: u32 = gpus
        .strip_prefix("nvidia")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("one GPU node, not {gpus:?}:\n{r}"));
    let (gpu, bridge) = (FakePci::gpu(leased), FakePci::bridge(leased));
    let other = FakePci::gpu(1 - leased);
    assert_eq!(line(r, "pci devices: ").trim(), gpu, "{r}");
    assert_eq!(
        line(r, "pci root: ").trim(),
        format!("{bridge} pci_bus"),
        "{r}"
    );
    assert_eq!(
        line(r, "pci buses: ").trim(),
        format!("0000:00 {}", &gpu[..7]),
        "{r}"
    );
    assert_eq!(line(r, &format!("vendor {gpu} ")), "0x10de", "{r}");
    assert_eq!(
        line(r, &format!("nccl path {gpu} ")),
        format!("/sys/devices/pci0000:00/{bridge}/{gpu}"),
        "{r}"
    );
    assert_eq!(line(r, &format!("bridge numa_node {gpu} ")), "0", "{r}");
    assert!(r.contains(&format!("pci write failed {gpu}")), "{r}");
    assert!(r.contains(&format!("bridge write failed {gpu}")), "{r}");
    assert!(!r.contains(&other), "the other GPU shows:\n{r}");
    assert!(!r.contains(cuda_sandbox_testkit::fake_pci::FAKE_NIC), "{r}");
    // hwloc's PCI object for the leased GPU, found through /sys/bus/pci/devices.
    let pci: Vec<&str> = probe
        .xml
        .lines()
        .filter(|l| l.contains("type=\"PCIDev\""))
        .collect();
    assert_eq!(
        pci.len(),
        1,
        "hwloc's PCI objects: {pci:?}\n{}",
        probe.stderr
    );
    assert!(
        pci[0].contains(&format!("pci_busid=\"{gpu}\"")),
        "{}",
        pci[0]
    );
    assert!(pci[0].contains("[10de:2330]"), "{}", pci[0]);
}
