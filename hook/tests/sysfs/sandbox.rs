//! The sandbox tier of these tests (docs/testing.md).

use super::*;

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

#[test]
fn a_killed_builds_tree_goes_when_the_next_hook_sweeps() {
    // Killed, a build's Nix never ends its lease or removes its tree: the next hook that judges
    // the lease ended removes the tree, PCI parts included, and nothing of it stays mounted.
    let test = "a_killed_builds_tree_goes_when_the_next_hook_sweeps";
    if !ready(test) {
        return;
    }
    let host = Host::new("gpus_per_build = 1\nlease_wait_seconds = 30\n", 2);
    let sandbox = NixSandbox::with_hook(Path::new(HOOK), &host.config);
    let mut killed = Command::new("nix-build")
        .arg(nix_file("sysfs-probe.nix"))
        .args(["--no-out-link", "-A", "tagged"])
        .args(["--argstr", "nonce", &nonce(), "--argstr", "sleep", "600"])
        .env("NIX_CONFIG", sandbox.nix_config())
        .env("CUDA_SANDBOX_CONFIG", &host.config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let leases = Leases::new(&host.unmount.0.join("run"));
    wait_for("the build's lease", || leases.record(0).is_some());
    let lease = leases.record(0).unwrap();
    wait_for("the builder in its sandbox", || {
        !rooted_at(lease.chroot_id).is_empty()
    });
    let trees = std::fs::read_dir(host.trees()).unwrap().count();
    assert_eq!(trees, 2, "one tree and its record");
    // Kill nix-build and everything in its process group, as a crash would, then the builder
    // (in a session of its own), which Nix 2.8 leaves running.
    let group = nix::unistd::Pid::from_raw(-(killed.id() as i32));
    nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL).unwrap();
    killed.wait().unwrap();
    for pid in rooted_at(lease.chroot_id) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    wait_for("the builder to end", || {
        rooted_at(lease.chroot_id).is_empty()
    });
    let before: Vec<_> = std::fs::read_dir(host.trees())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    // The next build's hook judges the killed build's lease ended and sweeps its tree. With no
    // builder recorded and its Nix gone, the lease lasts while any process runs as the build
    // user the killed Nix held; another build on this machine may be running as that user now
    // (the other tests' builds, in parallel), so build until that is over (bounded).
    let names = || -> Vec<std::ffi::OsString> {
        std::fs::read_dir(host.trees())
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect()
    };
    let started = std::time::Instant::now();
    loop {
        let probe = host.build("tagged");
        assert!(
            probe.report.contains("pci devices: 0000:"),
            "{}",
            probe.report
        );
        let after = names();
        if before.iter().all(|n| !after.contains(n)) {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the killed build's tree stayed: {before:?} then {after:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(mounts_under(&host.trees()), Vec::<PathBuf>::new());
    let _ = std::fs::remove_dir_all(&lease.chroot);
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
