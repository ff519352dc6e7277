//! The sandbox tier of these tests (docs/testing.md).

use super::*;

#[test]
fn a_build_requiring_cuda_sm_90a_is_leased_the_9_0_and_waits_for_it() {
    let Some(_serial) = ready("a_build_requiring_cuda_sm_90a_is_leased_the_9_0_and_waits_for_it")
    else {
        return;
    };
    let host = Host::new("gpus_per_build = 1\nlease_wait_seconds = 120\n");
    // nvidia0 is free and the least used, so it is what the build would get without its
    // features.
    let (ok, log, reports) = host.build("cuda cuda-sm-90a", 1, "0");
    assert!(ok, "{log}");
    assert_eq!(reports[0].gpus, ["nvidia1"], "{log}");
    // Two at once: the second waits for the 9.0 while the 8.9 stays free.
    let (ok, log, reports) = host.build("cuda cuda-sm-90a", 2, "2");
    assert!(ok, "{log}");
    for r in &reports {
        assert_eq!(r.gpus, ["nvidia1"], "{log}");
    }
    let (a, b) = (&reports[0], &reports[1]);
    assert!(
        a.end <= b.start || b.end <= a.start,
        "the two builds shared the 9.0: {reports:?}"
    );
    // A build with no cuda-sm-* feature still gets the least used GPU.
    let (ok, log, reports) = host.build("cuda", 1, "0");
    assert!(ok, "{log}");
    assert_eq!(reports[0].gpus, ["nvidia0"], "{log}");
}

/// While another build holds the 9.0, a `cuda-sm-90a` build waits its `lease_wait_seconds`
/// for it, never taking the free 8.9, then fails saying so.
#[test]
fn a_build_waiting_for_a_held_9_0_fails_after_its_wait_never_taking_the_8_9() {
    let Some(_serial) =
        ready("a_build_waiting_for_a_held_9_0_fails_after_its_wait_never_taking_the_8_9")
    else {
        return;
    };
    let host = Host::new("gpus_per_build = 1\nlease_wait_seconds = 2\n");
    let (ok, log, _) = host.build_with("cuda cuda-sm-90a", 2, "8", &["--keep-going"]);
    assert!(!ok, "both builds ran:\n{log}");
    // nix-build prints no output path when a build failed: the holder is named instead.
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("cuda-sandbox-hook: error:"))
        .collect();
    assert_eq!(failures.len(), 1, "{log}");
    assert!(
        log.contains("1 of 2 GPUs are free but none of them satisfies cuda-sm-90a (nvidia1: ")
            && log.contains("waited 2 s: raise lease_wait_seconds"),
        "{log}"
    );
}

#[test]
fn a_build_neither_gpu_satisfies_fails_at_once_naming_the_features_and_the_gpus() {
    let Some(_serial) =
        ready("a_build_neither_gpu_satisfies_fails_at_once_naming_the_features_and_the_gpus")
    else {
        return;
    };
    let line = "requires feature 'cuda' (rule 'nvidia') but no GPU here satisfies cuda-sm-100a \
                (this host has nvidia0 8.9 at 0000:01:00.0, nvidia1 9.0 at 0000:02:00.0): build \
                it on a builder whose GPUs do";
    for top in ["gpus_per_build = 1\nlease_wait_seconds = 600\n", ""] {
        let host = Host::new(top);
        let started = Instant::now();
        let (ok, log, _) = host.build("cuda cuda-sm-100a", 1, "0");
        assert!(!ok, "{top}: the build ran:\n{log}");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{top}: the build waited"
        );
        let hook_line = log
            .lines()
            .find(|l| l.contains(line))
            .unwrap_or_else(|| panic!("{top}: no one-line failure in:\n{log}"));
        assert!(hook_line.contains("-fleet-0.drv"), "{hook_line}");
        assert!(
            !host.run_dir().join("leases/nvidia0.lease").exists()
                && !host.run_dir().join("leases/nvidia1.lease").exists(),
            "{top}: a GPU was leased to a build that cannot run"
        );
    }
}

#[test]
fn an_inventory_entry_that_no_longer_matches_is_no_inventory() {
    let Some(_serial) = ready("an_inventory_entry_that_no_longer_matches_is_no_inventory") else {
        return;
    };
    let host = Host::new("gpus_per_build = 1\nlease_wait_seconds = 120\n");
    // GPU 1 swapped for another model since the inventory was written.
    let device = host
        .root
        .join("sys/bus/pci/devices")
        .join(FakePci::gpu(1))
        .join("device");
    std::fs::write(&device, "0x2331\n").unwrap();
    let why = "cuda-sm-90a select no GPU: no GPU inventory (";
    let stale = "no longer matches the host: the GPU at 0000:02:00.0 is nvidia1 with device id \
                 0x2331, not nvidia1 with 0x2330";
    let (ok, log, reports) = host.build("cuda cuda-sm-90a", 1, "0");
    assert!(ok, "{log}");
    assert!(log.contains(why) && log.contains(stale), "{log}");
    // The features select nothing: the least used GPU, as for a build without them.
    assert_eq!(reports[0].gpus, ["nvidia0"], "{log}");
    let out = Command::new(HOOK)
        .args(["explain", "--config"])
        .arg(&host.config)
        .args(["--features", "cuda,cuda-sm-90a"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(why) && text.contains(stale), "{text}");
    // Written again, it selects again.
    host.write_inventory(&["8.9", "9.0"]);
    std::fs::write(&device, "0x2330\n").unwrap();
    let (ok, log, reports) = host.build("cuda cuda-sm-90a", 1, "0");
    assert!(ok && !log.contains(why), "{log}");
    assert_eq!(reports[0].gpus, ["nvidia1"], "{log}");
}
