//! The sandbox tier of these tests (docs/testing.md).

use super::*;

#[test]
fn sixteen_concurrent_tagged_builds_pass_and_leave_whole_cache_and_manifests() {
    if !nix_available("sixteen_concurrent_tagged_builds_pass_and_leave_whole_cache_and_manifests") {
        return;
    }
    let _serial = serial();
    let host = Host::new(2, 0, 0, true);
    let closure = host.install_store_driver();
    assert!(closure.len() >= 3, "{closure:?}");
    let read: Vec<String> = closure.iter().map(|p| p.display().to_string()).collect();
    let read = read.join(" ");
    // Two nix-build processes at once, 16 builds each: their hooks race on the closure cache
    // and the manifest directory; within one process, 16 builders run at once.
    let started = Instant::now();
    let (first, second) = std::thread::scope(|s| {
        let other = s.spawn(|| build_many(&host, 16, &[("readPaths", &read), ("prefix", "other")]));
        let first = build_many(&host, 16, &[("readPaths", &read)]);
        (first, other.join().unwrap())
    });
    eprintln!(
        "32 tagged builds in two nix-build processes: {:?}",
        started.elapsed()
    );
    for (ok, log, reports) in [&first, &second] {
        assert!(ok, "nix-build failed:\n{log}");
        assert_eq!(reports.len(), 16, "{log}");
        for (name, r) in reports {
            for node in [
                "/dev/nvidia0",
                "/dev/nvidia1",
                "/dev/nvidiactl",
                "/dev/nvidia-uvm",
            ] {
                assert!(
                    r.nodes.iter().any(|n| n == node),
                    "{name} lacks {node}: {r:?}"
                );
            }
            assert!(
                r.manifest.derivation.ends_with(&format!("-{name}.drv")),
                "{r:?}"
            );
            assert!(r.manifest.leased_gpus.is_empty(), "{r:?}");
            for member in &closure {
                let line = format!("read {}", member.display());
                assert!(r.lines.contains(&line), "{name} cannot read {line}: {r:?}");
            }
        }
    }
    // Every cache entry reads back as a valid entry (a torn one would be recomputed, and
    // there is no nix-store here to recompute it with).
    let cache_dir = host.dir.path().join("cache");
    let cache = ClosureCache {
        dir: cache_dir.clone(),
        store_dir: PathBuf::from("/nix/store"),
        nix_store: PathBuf::from("/nonexistent/nix-store"),
        search_path: None,
    };
    let mut entries = 0;
    for entry in std::fs::read_dir(&cache_dir).unwrap() {
        let name = entry.unwrap().file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let closure = cache
            .closure(&Path::new("/nix/store").join(&name), true)
            .unwrap();
        assert!(closure.from_cache, "{name:?}");
        entries += 1;
    }
    assert_eq!(entries, 1, "one store path, one cache entry");
    let manifests = host.run_dir().join("manifests");
    for entry in std::fs::read_dir(&manifests).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            Manifest::read(&path).unwrap();
        }
    }
    for dir in [&cache_dir, &manifests] {
        assert_eq!(
            temp_files(dir),
            Vec::<PathBuf>::new(),
            "leftover temporary files"
        );
    }
}

#[test]
fn each_concurrent_build_gets_its_own_gpu_and_all_gpus_are_used() {
    if !nix_available("each_concurrent_build_gets_its_own_gpu_and_all_gpus_are_used") {
        return;
    }
    let _serial = serial();
    let host = Host::new(4, 1, 60, false);
    let started = Instant::now();
    let (ok, log, reports) = build_many(&host, 8, &[("sleep", "1")]);
    eprintln!(
        "8 builds, 1 s each, on 4 leased GPUs: {:?}",
        started.elapsed()
    );
    assert!(ok, "nix-build failed:\n{log}");
    assert_eq!(reports.len(), 8, "{log}");
    let mut on_gpu: BTreeMap<String, Vec<(f64, f64, &str)>> = BTreeMap::new();
    for (name, r) in &reports {
        let gpus: Vec<&String> = r
            .nodes
            .iter()
            .filter(|n| n.trim_start_matches("/dev/nvidia").parse::<u32>().is_ok())
            .collect();
        assert_eq!(gpus.len(), 1, "{name} sees other than one GPU: {r:?}");
        for control in ["/dev/nvidiactl", "/dev/nvidia-uvm"] {
            assert!(
                r.nodes.iter().any(|n| n == control),
                "{name} lacks {control}"
            );
        }
        let n: u32 = gpus[0].trim_start_matches("/dev/nvidia").parse().unwrap();
        assert_eq!(r.manifest.leased_gpus, [n], "{name}: {r:?}");
        assert_eq!(
            r.manifest
                .devices
                .iter()
                .filter(|d| d.trim_start_matches("/dev/nvidia").parse::<u32>().is_ok())
                .collect::<Vec<_>>(),
            [gpus[0]]
        );
        on_gpu
            .entry(gpus[0].clone())
            .or_default()
            .push((r.start, r.end, name));
    }
    assert_eq!(on_gpu.len(), 4, "not every GPU was used: {on_gpu:?}");
    for (gpu, runs) in &mut on_gpu {
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        for pair in runs.windows(2) {
            assert!(
                pair[0].1 <= pair[1].0,
                "{} and {} overlapped on {gpu}: {pair:?}",
                pair[0].2,
                pair[1].2
            );
        }
    }
}

/// Two builds leased one GPU each, at once, each see only their own GPU's DRM nodes
/// (`nvidia-drm`'s `card<N>` and `renderD<N>`, found through their `/sys/dev/char/226:<N>`
/// links and the driver's `information` files), never the other's, nor a platform framebuffer's
/// `card0`, whose GPU cannot be told; `explain` says why each was left out.
#[test]
fn two_concurrent_leased_builds_each_see_only_their_gpus_drm_nodes() {
    if !nix_available("two_concurrent_leased_builds_each_see_only_their_gpus_drm_nodes") {
        return;
    }
    let _serial = serial();
    let host = Host::new(2, 1, 60, false);
    FakePci::create(&host.root, 2).unwrap();
    FakePci::create_drm(&host.root, 2).unwrap();
    // nvidia1's render node again, outside /dev/dri: known by its number (226:129), not its path.
    cuda_sandbox_testkit::mknod_char(
        &host.root.join("dev/render-alias"),
        cuda_sandbox_testkit::fake_pci::DRM_MAJOR,
        129,
    )
    .unwrap();
    let mut config = std::fs::read_to_string(&host.config).unwrap();
    config.push_str(
        "[[rule.device]]\nglob = \"/dev/dri/card*\"\n[[rule.device]]\nglob = \"/dev/dri/renderD*\"\n\
         [[rule.device]]\nglob = \"/dev/render-alias\"\n",
    );
    std::fs::write(&host.config, config).unwrap();
    let (ok, log, reports) = build_many(&host, 2, &[("sleep", "3")]);
    assert!(ok, "nix-build failed:\n{log}");
    assert_eq!(reports.len(), 2, "{log}");
    let mut leased = Vec::new();
    for (name, r) in &reports {
        let gpu = r.manifest.leased_gpus.clone();
        assert_eq!(gpu.len(), 1, "{name}: {r:?}");
        let drm: Vec<&String> = r
            .nodes
            .iter()
            .filter(|n| n.starts_with("/dev/dri/"))
            .collect();
        let want: Vec<String> = FakePci::drm_nodes(gpu[0])
            .iter()
            .map(|n| format!("/dev/dri/{n}"))
            .collect();
        assert_eq!(
            drm,
            want.iter().collect::<Vec<_>>(),
            "{name} on nvidia{}: {r:?}",
            gpu[0]
        );
        for node in &want {
            assert!(r.manifest.devices.contains(node), "{name}: {r:?}");
        }
        let alias = r.nodes.iter().any(|n| n == "/dev/render-alias");
        assert_eq!(alias, gpu[0] == 1, "{name} on nvidia{}: {r:?}", gpu[0]);
        leased.push((gpu[0], r.start, r.end));
    }
    leased.sort_by_key(|l| l.0);
    assert_eq!(leased.iter().map(|l| l.0).collect::<Vec<_>>(), [0, 1]);
    assert!(
        leased[0].1 < leased[1].2 && leased[1].1 < leased[0].2,
        "the two builds did not run at once: {leased:?}"
    );
    let text = explain(&host);
    assert!(
        text.lines().any(|l| l.contains("/dev/dri/card0")
            && l.contains("whose GPU cannot be told")
            && l.contains("platform/simple-framebuffer.0")),
        "{text}"
    );
}

#[test]
fn a_killed_build_gives_its_gpu_back() {
    if !nix_available("a_killed_build_gives_its_gpu_back") {
        return;
    }
    let _serial = serial();
    let host = Host::new(1, 1, 0, false);
    let long_nonce = nonce();
    let mut long = host.spawn_build(
        "concurrent.nix",
        &[
            ("count", "1"),
            ("sleep", "600"),
            ("prefix", "long"),
            ("nonce", &long_nonce),
        ],
    );
    let leases = Leases::new(&host.run_dir());
    let marker = format!("builder {long_nonce}");
    wait_for("the long build to run", Duration::from_secs(60), || {
        leases.record(0).is_some() && !processes_with(&marker).is_empty()
    });
    let lease = leases.record(0).unwrap();
    assert!(lease.derivation.ends_with("-long-0.drv"), "{lease:?}");

    // Kill nix-build and everything in its process group, as a crash would.
    assert!(kill_group(long.id() as i32));
    long.wait().unwrap();
    // Nix 2.8 leaves the chroot behind, and the builder (in its own session) runs on.
    assert!(
        lease.chroot.exists(),
        "Nix deleted the chroot of a killed build"
    );
    // The orphaned builder still uses the GPU, so the lease holds (shown by `explain`, which
    // takes no lease). Nix itself ends the orphan when it hands its build user to a new build
    // (see the README), which a Nix outside this test may do at any time: check only while
    // the orphan is known to have run throughout.
    let orphans = processes_with(&marker);
    let held = explain(&host);
    if !orphans.is_empty() && processes_with(&marker) == orphans {
        assert!(
            held.contains("all 1 GPUs are leased by other builds (nvidia0: ")
                && held.contains("-long-0.drv"),
            "{held}"
        );
    } else if NixVersion::current().is_some_and(NixVersion::builder_dies_with_a_killed_nix) {
        // This Nix takes the builder with it (its processes end within moments): the rest
        // checks the GPU is free.
        wait_for(
            "the builder to end with its killed Nix",
            Duration::from_secs(10),
            || processes_with(&marker).is_empty(),
        );
    } else {
        eprintln!("note: another Nix build ended the orphaned builder early");
    }

    // Once the builder is gone too, the GPU is free although the chroot is still there.
    // Nix starts the builder in a session of its own: its pid is its process group.
    for pid in orphans {
        kill_group(pid);
    }
    wait_for(
        "the orphaned builder to end",
        Duration::from_secs(10),
        || processes_with(&marker).is_empty(),
    );
    assert!(explain(&host).contains("nvidia0 (would be leased now"));
    assert!(lease.chroot.exists());
    let (ok, log, reports) = build_many(&host, 1, &[]);
    assert!(ok, "the killed build kept its GPU:\n{log}");
    let r = reports.values().next().unwrap();
    assert_eq!(r.manifest.leased_gpus, [0], "{r:?}");
    assert!(r.nodes.iter().any(|n| n == "/dev/nvidia0"), "{r:?}");
    let _ = std::fs::remove_dir_all(&lease.chroot);
}

#[test]
fn a_builder_that_leaves_its_chroot_keeps_its_gpu_while_nix_runs_it_and_after() {
    // A red-team finding: a lease lived while a process had the build's chroot as its root
    // (or 30 s after it was taken). A builder that chroots elsewhere kept /dev/nvidia0 while
    // the hook handed the same GPU to the next build.
    if !nix_available("a_builder_that_leaves_its_chroot_keeps_its_gpu_while_nix_runs_it_and_after")
    {
        return;
    }
    let _serial = serial();
    let host = Host::new(1, 1, 0, false);
    let n = nonce();
    let mut escaping = host.spawn_build("escape.nix", &[("nonce", &n)]);
    let marker = format!("escaped-{n}");
    let leases = Leases::new(&host.run_dir());
    wait_for("the lease", Duration::from_secs(60), || {
        leases.record(0).is_some()
    });
    let lease = leases.record(0).unwrap();
    assert!(lease.derivation.ends_with("-escape.drv"), "{lease:?}");
    // The marker is in the builder's script too: wait until every process holding it has a
    // root other than the chroot.
    wait_for(
        "the builder to leave its chroot",
        Duration::from_secs(60),
        || {
            let pids = processes_with(&marker);
            !pids.is_empty()
                && pids
                    .iter()
                    .all(|p| root_of(*p as u32) != Some(lease.chroot_id))
        },
    );
    // Past the 30 s the old rule gave a lease without a process in its chroot.
    std::thread::sleep(Duration::from_secs(31));
    assert!(
        !processes_with(&marker).is_empty(),
        "the escaped builder ended early"
    );
    assert_gpu_held(&host, "the escaped builder");
    // Nix killed, the escaped builder runs on as its build user, which it cannot change: the
    // lease holds (no hook ever saw the builder in its chroot, so no namespace was recorded).
    let [user] = lease.build_users[..] else {
        panic!("Nix ran the one build as a build user, and the hook recorded it: {lease:?}");
    };
    assert!(kill_group(escaping.id() as i32));
    escaping.wait().unwrap();
    if NixVersion::current().is_some_and(NixVersion::builder_dies_with_a_killed_nix) {
        // This Nix takes its builder with it, escaped or not: nothing of the build is left,
        // so its GPU is free at once.
        wait_for(
            "the escaped builder to end with its Nix",
            Duration::from_secs(10),
            || processes_with(&marker).is_empty(),
        );
        assert_gpu_free(&host);
        let _ = std::fs::remove_dir_all(&lease.chroot);
        return;
    }
    assert!(
        !processes_with(&marker).is_empty(),
        "the escaped builder ended with its Nix"
    );
    // The other Nix's hook found the escaped builder among its Nix's children (it is the init
    // of the build's PID namespace) and recorded it; that alone keeps the lease now. Forget it,
    // as if no hook had looked, to check that the build user keeps the lease too.
    let mut record = leases.record(0).unwrap();
    assert!(
        record
            .builders
            .iter()
            .any(|b| processes_with(&marker).contains(&(b.pid as i32))),
        "the escaped builder was not recorded: {record:?}"
    );
    record.builders.clear();
    std::fs::write(leases.file(0), serde_json::to_vec(&record).unwrap()).unwrap();
    // Nix kills a build user's processes when it hands that user to a new build; hold the
    // user's pool lock so the next builds get another user and the escapee lives on.
    let pool = std::fs::File::open(format!("/nix/var/nix/userpool/{user}")).unwrap();
    let held = nix::fcntl::Flock::lock(pool, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .expect("no Nix holds the killed build's user");
    assert_gpu_held(&host, "the escaped builder of a killed Nix");
    drop(held);
    // When the build is gone too, the GPU is free. The builder is its PID namespace's init:
    // killing it ends every process of the build.
    end_processes_with(&marker);
    assert_gpu_free(&host);
    let _ = std::fs::remove_dir_all(&lease.chroot);
}

#[test]
fn a_builder_in_an_input_named_like_a_chroot_keeps_its_gpu() {
    // A red-team finding: a builder that left its chroot, with no builder recorded yet, was
    // taken for another build's when its root was named `<store>/*.drv.chroot`. A build
    // chrooted into an input of that name, kept /dev/nvidia0, and its GPU went to the next
    // build at once.
    if !nix_available("a_builder_in_an_input_named_like_a_chroot_keeps_its_gpu") {
        return;
    }
    let _serial = serial();
    let host = Host::new(1, 1, 0, false);
    let decoy = host.dir.path().join("decoy");
    for d in ["bin", "dev", "lib", "lib64", "sbin", "usr"] {
        std::fs::create_dir_all(decoy.join(d)).unwrap();
    }
    let n = nonce();
    let mut run = host.spawn_build(
        "decoy-chroot.nix",
        &[("nonce", &n), ("decoy", decoy.to_str().unwrap())],
    );
    let marker = format!("escaped-{n}");
    let _cleanup = KillOnDrop {
        group: run.id() as i32,
        marker: marker.clone(),
    };
    let leases = Leases::new(&host.run_dir());
    wait_for("the lease", Duration::from_secs(60), || {
        leases.record(0).is_some()
    });
    let lease = leases.record(0).unwrap();
    assert!(lease.derivation.ends_with("-decoy-chroot.drv"), "{lease:?}");
    // Every process holding the marker runs in the input, named like a chroot.
    wait_for(
        "the builder to chroot into its input",
        Duration::from_secs(60),
        || {
            let pids = processes_with(&marker);
            !pids.is_empty()
                && pids.iter().all(|p| {
                    let root = std::fs::read_link(format!("/proc/{p}/root")).unwrap_or_default();
                    root.to_string_lossy().ends_with("-x.drv.chroot")
                })
        },
    );
    assert_gpu_held(&host, "the builder in its input named like a chroot");
    end_processes_with(&marker);
    assert_gpu_free(&host);
    // The builder's end fails the build.
    assert!(!run.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&lease.chroot);
}

#[test]
fn a_failed_builds_gpu_is_free_while_its_nix_goes_on() {
    // Nix 2.8 can keep a failed build's chroot while `nix-build --keep-going` goes on with
    // other builds (keep-going.nix has that shape); its lease held the GPU as long as that Nix
    // ran.
    if !nix_available("a_failed_builds_gpu_is_free_while_its_nix_goes_on") {
        return;
    }
    let _serial = serial();
    let host = Host::new(1, 1, 0, false);
    let n = nonce();
    let mut run = host.spawn_build_with(
        host.sandbox(2),
        "keep-going.nix",
        &[("nonce", &n)],
        &["--keep-going"],
    );
    let marker = format!("long-{n}");
    let _cleanup = KillOnDrop {
        group: run.id() as i32,
        marker: marker.clone(),
    };
    let leases = Leases::new(&host.run_dir());
    wait_for(
        "the failing build's lease and the long build",
        Duration::from_secs(120),
        || leases.record(0).is_some() && !processes_with(&marker).is_empty(),
    );
    let lease = leases.record(0).unwrap();
    assert!(lease.derivation.ends_with("-failing.drv"), "{lease:?}");
    // The failing builder exits at once; its Nix runs on with the long build.
    wait_for(
        "the failed build's GPU to be free",
        Duration::from_secs(30),
        || !explain(&host).contains("are leased by other builds"),
    );
    eprintln!(
        "the failed build's chroot {} while its Nix runs",
        if lease.chroot.exists() {
            "is kept"
        } else {
            "is gone"
        }
    );
    assert!(
        run.try_wait().unwrap().is_none() && !processes_with(&marker).is_empty(),
        "the keep-going run ended early"
    );
    let (ok, log, reports) = build_many(&host, 1, &[]);
    assert!(
        ok,
        "the failed build kept its GPU while its Nix ran:\n{log}\nexplain now: {}\nlease: {:?}",
        explain(&host),
        leases.record(0)
    );
    assert_eq!(reports.values().next().unwrap().manifest.leased_gpus, [0]);
    assert!(kill_group(run.id() as i32));
    run.wait().unwrap();
}

#[test]
fn a_build_that_kills_a_namespace_of_its_own_keeps_its_gpu() {
    // A red-team finding: the init of the nested namespace was recorded as the build's
    // builder, so killing it ended the lease while the build held /dev/nvidia0.
    if !nix_available("a_build_that_kills_a_namespace_of_its_own_keeps_its_gpu") {
        return;
    }
    let _serial = serial();
    let host = Host::new(1, 1, 0, false);
    a_build_cannot_end_its_own_lease_early(&host, Slot::Gpu(0));
}

#[test]
fn a_build_that_kills_a_namespace_of_its_own_keeps_its_mig_instance() {
    if !nix_available("a_build_that_kills_a_namespace_of_its_own_keeps_its_mig_instance") {
        return;
    }
    let _serial = serial();
    let host = Host::mig(&[7], 0);
    let slot = Slot::Mig(InstanceId {
        gpu: 0,
        gi: 7,
        ci: 0,
    });
    a_build_cannot_end_its_own_lease_early(&host, slot);
}

#[test]
fn builds_of_one_nix_without_build_users_do_not_share_a_gpu() {
    // Root Nix without `build-users-group`: every build runs as root, so no build user tells
    // them apart, and the second build's hook runs in the Nix that runs the first. It judged
    // the first build's lease stale once its builder had left the chroot, and gave the GPU
    // the escaped builder still held to the second build.
    if !nix_available("builds_of_one_nix_without_build_users_do_not_share_a_gpu") {
        return;
    }
    let _serial = serial();
    let host = Host::new(1, 1, 0, false);
    let handshake = host.dir.path().join("handshake");
    std::fs::create_dir(&handshake).unwrap();
    let mut sandbox = host.sandbox(3);
    sandbox.extra_settings.push("build-users-group =".into());
    sandbox
        .sandbox_paths
        .push(handshake.to_string_lossy().into_owned());
    let n = nonce();
    let escaped = format!("escaped-{n}");
    let _cleanup = KillOnDrop {
        group: 0,
        marker: escaped.clone(),
    };
    let run = {
        let (n, handshake) = (n.clone(), handshake.clone());
        std::thread::spawn(move || {
            sandbox.build(
                &nix_file("same-nix.nix"),
                &[("nonce", &n), ("handshake", handshake.to_str().unwrap())],
                &["--keep-going"],
            )
        })
    };
    // The second build starts once the first builder has left its chroot.
    let leases = Leases::new(&host.run_dir());
    wait_for(
        "the first builder to leave its chroot",
        Duration::from_secs(60),
        || {
            let Some(lease) = leases.record(0) else {
                return false;
            };
            let pids = processes_with(&escaped);
            !pids.is_empty()
                && pids
                    .iter()
                    .all(|p| root_of(*p as u32) != Some(lease.chroot_id))
        },
    );
    std::fs::write(handshake.join("go"), "").unwrap();
    // The second build's hook found the escaped builder among its Nix's children and recorded
    // it; then the first build may end.
    wait_for("the second build's hook", Duration::from_secs(60), || {
        leases.record(0).is_some_and(|l| !l.builders.is_empty())
    });
    let lease = leases.record(0);
    end_processes_with(&escaped);
    let build = run.join().unwrap();
    assert!(
        !build.ok()
            && build.log.contains("-second.drv")
            && build
                .log
                .contains("all 1 GPUs are leased by other builds (nvidia0: ")
            && build.log.contains("-escape.drv"),
        "the second build got the GPU the escaped builder of the same Nix holds:\n{}",
        build.log
    );
    assert!(
        lease.as_ref().is_some_and(|l| l.build_users.is_empty()),
        "{lease:?}"
    );
}

#[test]
fn a_full_runtime_filesystem_fails_the_build_and_strands_no_lease() {
    // With the runtime directory full, the hook wrote one lease, failed on the next file, and
    // left that lease behind.
    if !nix_available("a_full_runtime_filesystem_fails_the_build_and_strands_no_lease") {
        return;
    }
    let _serial = serial();
    let host = Host::new(2, 1, 0, false);
    let run = host.run_dir();
    std::fs::create_dir_all(&run).unwrap();
    let mounted = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=256k,mode=0755",
            "cuda-sandbox-full",
        ])
        .arg(&run)
        .status()
        .unwrap();
    assert!(
        mounted.success(),
        "cannot mount a tmpfs on {}",
        run.display()
    );
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(run.clone());
    // The hook makes its directories first; then fill the filesystem but for one page, room
    // for one lease file and not two.
    std::fs::create_dir_all(run.join("leases")).unwrap();
    std::fs::create_dir_all(run.join("manifests")).unwrap();
    // Never fill anything but the small tmpfs: check it is one, and write at most 1 MiB.
    let fs = nix::sys::statfs::statfs(&run).unwrap();
    assert!(
        fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC && fs.blocks() <= 64,
        "{} is not the small tmpfs",
        run.display()
    );
    let filler = run.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        for _ in 0..256 {
            if f.write_all(&[0u8; 4096]).is_err() {
                break;
            }
        }
        let _ = f.flush();
    }
    let size = std::fs::metadata(&filler).unwrap().len();
    let page = 4096;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .unwrap();
    file.set_len(size / page * page - page).unwrap();
    file.sync_all().unwrap();
    drop(file);
    let (ok, log, _) = build_many(&host, 1, &[("gpus", "2")]);
    assert!(!ok, "the build passed on a full runtime filesystem:\n{log}");
    assert!(
        log.contains("No space left on device"),
        "the build failed for another reason:\n{log}"
    );
    let left: Vec<String> = std::fs::read_dir(run.join("leases"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".lease") || n.starts_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}\n{log}");
    // With room again, the GPUs are free.
    std::fs::remove_file(&filler).unwrap();
    let (ok, log, reports) = build_many(&host, 1, &[("gpus", "2")]);
    assert!(ok, "{log}");
    assert_eq!(
        reports.values().next().unwrap().manifest.leased_gpus,
        [0, 1]
    );
}

#[test]
fn a_reused_pid_namespace_inode_keeps_no_gpu() {
    // A lease recorded its build's PID namespace by inode, which the kernel hands out again:
    // an unprivileged `unshare -Upf` got a dead build's inode and kept its GPU leased.
    if !nix_available("a_reused_pid_namespace_inode_keeps_no_gpu") {
        return;
    }
    let _serial = serial();
    let host = Host::new(1, 1, 0, false);
    let n = nonce();
    // The builder orphaned by its killed Nix must be reaped for its namespace, and the inode,
    // to be freed; the init of a container may never reap it. Adopt it instead.
    struct Subreaper;
    impl Drop for Subreaper {
        fn drop(&mut self) {
            let _ = nix::sys::prctl::set_child_subreaper(false);
        }
    }
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let subreaper = Subreaper;
    let mut long = host.spawn_build(
        "concurrent.nix",
        &[
            ("count", "1"),
            ("sleep", "600"),
            ("prefix", "long"),
            ("nonce", &n),
        ],
    );
    let marker = format!("builder {n}");
    let _cleanup = KillOnDrop {
        group: long.id() as i32,
        marker: marker.clone(),
    };
    let leases = Leases::new(&host.run_dir());
    wait_for("the long build to run", Duration::from_secs(60), || {
        leases.record(0).is_some() && !processes_with(&marker).is_empty()
    });
    // The builder is the init of the build's PID namespace: the oldest process with the marker.
    let namespace = processes_with(&marker)
        .iter()
        .filter_map(|pid| std::fs::metadata(format!("/proc/{pid}/ns/pid")).ok())
        .map(|m| m.ino())
        .next()
        .expect("the builder's PID namespace");
    // Another build's hook sees the builder in its chroot and records it.
    let (ok, log, _) = build_many(&host, 1, &[]);
    assert!(!ok && log.contains("all 1 GPUs are leased"), "{log}");
    let lease = leases.record(0).unwrap();
    // The build ends: its Nix killed, then its builder (Nix 2.8 leaves the chroot behind).
    assert!(kill_group(long.id() as i32));
    long.wait().unwrap();
    end_processes_with(&marker);
    let reap = Instant::now();
    while reap.elapsed() < Duration::from_secs(2) {
        use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(20)),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    drop(subreaper);
    // An unprivileged user makes PID namespaces, keeping each, until one gets the build's
    // inode: the kernel hands out the lowest free one. In a user namespace of its own, each
    // `unshare -pf` takes one inode.
    let mut maker = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .args(["unshare", "-Ur", "sh", "-c"])
        .arg("for i in $(seq 64); do unshare -pf sleep 120 & done; wait")
        .process_group(0)
        .spawn()
        .unwrap();
    let in_target = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| {
                std::fs::metadata(e.path().join("ns/pid")).is_ok_and(|m| m.ino() == namespace)
                    && std::fs::metadata(e.path()).is_ok_and(|m| m.uid() == 65534)
            })
    };
    let started = Instant::now();
    while !in_target() && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let reused = in_target();
    eprintln!(
        "the build's PID namespace inode {namespace} reused by another user's namespace: \
         {reused}"
    );
    let (ok, log, reports) = build_many(&host, 1, &[]);
    kill_group(maker.id() as i32);
    let _ = maker.wait();
    assert!(ok, "an ended build kept its GPU:\n{log}");
    assert_eq!(reports.values().next().unwrap().manifest.leased_gpus, [0]);
    assert!(
        lease.builders.iter().any(|b| b.pid_namespace == namespace),
        "the builder was not recorded by pid and start time: {lease:?}"
    );
    let _ = std::fs::remove_dir_all(&lease.chroot);
}

#[test]
fn an_escaped_builder_with_an_auto_allocated_uid_keeps_its_gpu() {
    // With `auto-allocate-uids` the pool files (`userpool2/slot-<n>`) name no uid, so no build
    // user was recorded: a builder that left its chroot before any hook saw it there kept its
    // GPU only while its Nix ran, and lost it (still running) once that Nix was killed.
    if !nix_available("an_escaped_builder_with_an_auto_allocated_uid_keeps_its_gpu") {
        return;
    }
    let Some(version) = NixVersion::current().filter(|v| *v >= AUTO_ALLOCATE_UIDS_SINCE) else {
        eprintln!("note: this Nix has no auto-allocate-uids");
        return;
    };
    let _serial = serial();
    let host = Host::new(1, 1, 0, false);
    let mut sandbox = host.sandbox(1);
    // Each version's own uid range: a Nix kills what runs as a build uid when it takes it
    // (nix_versions.rs, no_two_nix_installations_here_share_a_build_uid), and every version
    // starts at the same default `start-id`, 872415232, with `id-count` 8388608 (the Nix
    // manual's settings).
    let start_id = 872_415_232 + u64::from(version.minor) * 8_388_608;
    sandbox.extra_settings.extend([
        "experimental-features = auto-allocate-uids".to_string(),
        "auto-allocate-uids = true".to_string(),
        format!("start-id = {start_id}"),
    ]);
    let n = nonce();
    let mut escaping = host.spawn_build_with(sandbox, "escape.nix", &[("nonce", &n)], &[]);
    let marker = format!("escaped-{n}");
    let _cleanup = KillOnDrop {
        group: escaping.id() as i32,
        marker: marker.clone(),
    };
    let leases = Leases::new(&host.run_dir());
    wait_for("the lease", Duration::from_secs(60), || {
        leases.record(0).is_some()
    });
    let lease = leases.record(0).unwrap();
    wait_for(
        "the builder to leave its chroot",
        Duration::from_secs(60),
        || {
            let pids = processes_with(&marker);
            !pids.is_empty()
                && pids
                    .iter()
                    .all(|p| root_of(*p as u32) != Some(lease.chroot_id))
        },
    );
    // The build's own id, read from its chroot (Holder::allocated_ids).
    let builder_uid = uids_of(processes_with(&marker)[0])[0];
    assert_eq!(lease.build_users, [builder_uid], "{lease:?}");
    assert_eq!(lease.ids_per_build_user, 1, "{lease:?}");
    assert_gpu_held(&host, "the escaped builder");
    let recorded = leases.record(0).unwrap().builders;
    let escaped = processes_with(&marker);
    // Nix killed: the recorded builder keeps the lease while it runs.
    assert!(kill_group(escaping.id() as i32));
    escaping.wait().unwrap();
    if !version.builder_dies_with_a_killed_nix() {
        assert!(
            !processes_with(&marker).is_empty(),
            "the escaped builder ended with its Nix"
        );
        assert_gpu_held(&host, "the escaped builder of a killed Nix");
        end_processes_with(&marker);
    }
    wait_for(
        "the escaped builder to end",
        Duration::from_secs(10),
        || processes_with(&marker).is_empty(),
    );
    assert_gpu_free(&host);
    // The other Nix's hook recorded the escaped builder, with its allocated uid.
    assert!(
        recorded
            .iter()
            .any(|b| escaped.contains(&(b.pid as i32)) && b.uid >= 872_415_232),
        "the escaped builder was not recorded: {recorded:?}"
    );
    let _ = std::fs::remove_dir_all(&lease.chroot);
}

/// What one build of open-nodes.nix reported: its uid map (inside, host, count) and each node
/// with whether it could open it.
fn open_nodes_report(out: &Path) -> ((u32, u32, u32), BTreeMap<String, bool>) {
    let text = std::fs::read_to_string(out).unwrap();
    let map: Vec<u32> = text
        .lines()
        .find_map(|l| l.strip_prefix("uid-map "))
        .unwrap_or_else(|| panic!("no uid-map line in:\n{text}"))
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    let nodes = text
        .lines()
        .filter_map(|l| l.strip_prefix("node "))
        .map(|l| {
            let (node, verdict) = l.rsplit_once(' ').unwrap();
            (node.to_string(), verdict == "allowed")
        })
        .collect();
    ((map[0], map[1], map[2]), nodes)
}

/// Where the host's cgroup2 hierarchy is mounted (`/sys/fs/cgroup/unified` on this
/// machine's hybrid layout, `/sys/fs/cgroup` on a unified one): what Nix uses.
fn cgroup2_mount() -> PathBuf {
    std::fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
        })
        .expect("a cgroup2 mount")
}

#[test]
fn builds_with_allocated_ids_see_their_gpu_hold_their_lease_and_give_it_back() {
    if !nix_available("builds_with_allocated_ids_see_their_gpu_hold_their_lease_and_give_it_back") {
        return;
    }
    let Some(version) = NixVersion::current().filter(|v| *v >= AUTO_ALLOCATE_UIDS_SINCE) else {
        eprintln!("note: this Nix has no auto-allocate-uids");
        return;
    };
    let _serial = serial();
    let start = start_id(version);
    // (the case, its features beside cuda, extra settings, ids per build, whether in a cgroup)
    let cases: [(&str, &str, &[&str], u32, bool); 3] = [
        ("allocated ids", "", &[], 1, false),
        ("a uid-range build", "uid-range", &[], 65536, true),
        ("use-cgroups", "", &["use-cgroups = true"], 1, true),
    ];
    for (case, features, extra, count, cgroup) in cases {
        let host = Host::new(1, 1, 0, false).allocating_ids(start, extra);
        // mknod's mode passes through the umask: make every node 0666, as a GPU host's are.
        for node in ["nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"] {
            let mode = std::fs::Permissions::from_mode(0o666);
            std::fs::set_permissions(host.root.join("dev").join(node), mode).unwrap();
        }
        let build = |features: &str, sleep: &str| {
            let b = host.sandbox(1).build(
                &nix_file("open-nodes.nix"),
                &[
                    ("nonce", &nonce()),
                    ("features", features),
                    ("sleep", sleep),
                ],
                &[],
            );
            assert!(b.ok(), "{case}: the build failed:\n{}", b.log);
            open_nodes_report(&b.out_paths[0])
        };
        // Exposure: tagged sees the GPU's nodes and may open them (mode 0666), untagged sees
        // none. The build runs as its own allocated ids.
        let ((inside, first, ids), nodes) = build(&format!("cuda {features}"), "0");
        assert_eq!(
            (inside, ids),
            (if count == 1 { 1000 } else { 0 }, count),
            "{case}"
        );
        let slot = u64::from(first) - start;
        assert!(
            u64::from(first) >= start && slot % 65536 == 0 && slot < 8_388_608,
            "{case}: uid {first} is not an allocated one from {start}"
        );
        let all: Vec<&str> = nodes.keys().map(String::as_str).collect();
        assert_eq!(
            all,
            ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"],
            "{case}"
        );
        assert!(nodes.values().all(|open| *open), "{case}: {nodes:?}");
        let (_, untagged) = build(features, "0");
        assert!(untagged.is_empty(), "{case}: untagged saw {untagged:?}");

        // The build-user check of `explain`, with the same nix.conf, against what the build met:
        // a node with mode 0660 root:root is refused to the allocated ids, as it predicts.
        std::fs::create_dir_all(host.root.join("etc/nix")).unwrap();
        std::fs::write(host.root.join("etc/nix/nix.conf"), host.settings.join("\n")).unwrap();
        let e = common::explain_json(&host.config, "cuda");
        assert_eq!(
            e["build_users"]["builders"]["kind"], "auto-allocated",
            "{e:#}"
        );
        assert_eq!(e["build_users"]["builders"]["start_id"], start, "{e:#}");
        assert_eq!(
            e["build_users"]["unopenable"],
            serde_json::json!([]),
            "{e:#}"
        );
        let node = host.root.join("dev/nvidia0");
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o660)).unwrap();
        let e = common::explain_json(&host.config, "cuda");
        let unopenable: Vec<&str> = e["build_users"]["unopenable"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u["node"].as_str().unwrap())
            .collect();
        assert_eq!(unopenable, ["/dev/nvidia0"], "{case}: {e:#}");
        let (_, nodes) = build(&format!("cuda {features}"), "0");
        assert_eq!(nodes.get("/dev/nvidia0"), Some(&false), "{case}: {nodes:?}");
        assert_eq!(
            nodes.get("/dev/nvidiactl"),
            Some(&true),
            "{case}: {nodes:?}"
        );
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o666)).unwrap();

        // The lease: a running build holds the GPU, recorded with its own ids.
        let n = nonce();
        let mut running = host.spawn_build_with(
            host.sandbox(1),
            "open-nodes.nix",
            &[
                ("nonce", &n),
                ("features", &format!("cuda {features}")),
                ("sleep", "600"),
            ],
            &[],
        );
        let marker = format!("builder-{n}");
        let _cleanup = KillOnDrop {
            group: running.id() as i32,
            marker: marker.clone(),
        };
        let leases = Leases::new(&host.run_dir());
        // The builder: the process with the marker in the chroot of the lease.
        let in_chroot = || {
            let lease = leases.record(0)?;
            let pid = processes_with(&marker)
                .into_iter()
                .find(|p| root_of(*p as u32) == Some(lease.chroot_id))?;
            Some((lease, pid))
        };
        wait_for("the lease and the builder", Duration::from_secs(60), || {
            in_chroot().is_some()
        });
        let (lease, builder) = in_chroot().unwrap();
        let uid = uids_of(builder)[0];
        assert_eq!(lease.build_users, [uid], "{case}: {lease:?}");
        assert_eq!(lease.ids_per_build_user, count, "{case}: {lease:?}");
        // Nix's cgroup for the build: <its own cgroup>/nix-build-uid-<uid>, holding the builder.
        let procs = std::fs::read_to_string(
            cgroup2_mount().join(format!("nix-build-uid-{uid}/cgroup.procs")),
        );
        assert_eq!(
            procs
                .as_ref()
                .is_ok_and(|p| p.lines().any(|l| l == builder.to_string())),
            cgroup,
            "{case}: the cgroup's processes: {procs:?}"
        );
        // The chroot's top: a uid-range build's own, but below root's 0700 directory, which no
        // process of the build's ids can pass (sandbox_set_up relies on it).
        let top = std::fs::metadata(&lease.chroot).unwrap();
        let above = std::fs::metadata(lease.chroot.parent().unwrap()).unwrap();
        let owner = if count == 1 { 0 } else { uid };
        assert_eq!(
            (top.uid(), top.gid(), top.mode() & 0o7777),
            (owner, uid, if count == 1 { 0o750 } else { 0o755 }),
            "{case}: {}",
            lease.chroot.display()
        );
        assert_eq!((above.uid(), above.mode() & 0o7777), (0, 0o700), "{case}");
        let made = Command::new("setpriv")
            .args(["--reuid", &uid.to_string(), "--regid", &uid.to_string()])
            .args(["--clear-groups", "mkdir"])
            .arg(lease.chroot.join("proc-made-by-the-build-uid"))
            .output()
            .unwrap();
        assert!(
            !made.status.success()
                && String::from_utf8_lossy(&made.stderr).contains("Permission denied"),
            "{case}: the build's uid wrote the chroot's top: {made:?}"
        );
        assert_gpu_held(&host, case);
        // The build ends: its lease with it.
        end_processes_with(&marker);
        assert!(!running.wait().unwrap().success());
        assert_gpu_free(&host);
    }
}

#[test]
fn a_uid_range_builder_that_left_its_chroot_as_another_of_its_ids_keeps_its_gpu() {
    // A uid-range build maps 65536 host ids: its builder may take any of them, leave its
    // chroot before any hook sees it there, and outlive its killed Nix. Then only the ids
    // still in use tell that it runs.
    if !nix_available(
        "a_uid_range_builder_that_left_its_chroot_as_another_of_its_ids_keeps_its_gpu",
    ) {
        return;
    }
    let Some(version) = NixVersion::current().filter(|v| *v >= AUTO_ALLOCATE_UIDS_SINCE) else {
        eprintln!("note: this Nix has no auto-allocate-uids");
        return;
    };
    let _serial = serial();
    let host = Host::new(1, 1, 0, false).allocating_ids(start_id(version), &[]);
    let n = nonce();
    let mut escaping = host.spawn_build_with(
        host.sandbox(1),
        "open-nodes.nix",
        &[
            ("nonce", &n),
            ("features", "cuda uid-range"),
            ("sleep", "600"),
            ("escape", "1"),
        ],
        &[],
    );
    let marker = format!("builder-{n}");
    let _cleanup = KillOnDrop {
        group: escaping.id() as i32,
        marker: marker.clone(),
    };
    let leases = Leases::new(&host.run_dir());
    wait_for("the lease", Duration::from_secs(60), || {
        leases.record(0).is_some()
    });
    let lease = leases.record(0).unwrap();
    let [first] = lease.build_users[..] else {
        panic!("not one build user: {lease:?}");
    };
    assert_eq!(lease.ids_per_build_user, 65536, "{lease:?}");
    // No other hook runs until Nix is killed: nothing records the builder.
    wait_for(
        "the builder to leave its chroot as id 1000 of the build",
        Duration::from_secs(60),
        || {
            let pids = processes_with(&marker);
            !pids.is_empty()
                && pids.iter().all(|p| {
                    root_of(*p as u32) != Some(lease.chroot_id) && uids_of(*p)[0] == first + 1000
                })
        },
    );
    assert!(kill_group(escaping.id() as i32));
    escaping.wait().unwrap();
    // The builder changed its uid, which clears the parent-death signal 2.34 sets.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !processes_with(&marker).is_empty(),
        "the escaped builder ended with its Nix"
    );
    assert!(leases.record(0).unwrap().builders.is_empty());
    // It is still in the build's cgroup, which it cannot leave either.
    let procs = std::fs::read_to_string(
        cgroup2_mount().join(format!("nix-build-uid-{first}/cgroup.procs")),
    )
    .unwrap();
    for pid in processes_with(&marker) {
        assert!(
            procs.lines().any(|l| l == pid.to_string()),
            "{pid} left the build's cgroup: {procs}"
        );
    }
    assert_gpu_held(&host, "the escaped uid-range builder of a killed Nix");
    end_processes_with(&marker);
    assert_gpu_free(&host);
    let _ = std::fs::remove_dir_all(lease.chroot.parent().unwrap());
}

#[test]
fn a_build_with_allocated_ids_a_uid_range_or_a_cgroup_cannot_end_its_own_lease_early() {
    if !nix_available("a_build_with_allocated_ids_or_a_uid_range_cannot_end_its_own_lease_early") {
        return;
    }
    let Some(version) = NixVersion::current().filter(|v| *v >= AUTO_ALLOCATE_UIDS_SINCE) else {
        eprintln!("note: this Nix has no auto-allocate-uids");
        return;
    };
    let _serial = serial();
    let host = Host::new(1, 1, 0, false).allocating_ids(start_id(version), &[]);
    a_build_cannot_end_its_own_lease_early(&host, Slot::Gpu(0));
    let host = Host::new(1, 1, 0, false)
        .allocating_ids(start_id(version), &[])
        .in_uid_range();
    a_build_cannot_end_its_own_lease_early(&host, Slot::Gpu(0));
    let host = Host::new(1, 1, 0, false).allocating_ids(start_id(version), &["use-cgroups = true"]);
    a_build_cannot_end_its_own_lease_early(&host, Slot::Gpu(0));
}

#[test]
fn seven_builds_on_a_seven_slice_gpu_each_get_their_own_instance_and_an_eighth_waits() {
    if !nix_available(
        "seven_builds_on_a_seven_slice_gpu_each_get_their_own_instance_and_an_eighth_waits",
    ) {
        return;
    }
    let _serial = serial();
    let host = Host::mig(&SEVEN_GIS, 60);
    let started = Instant::now();
    let (ok, log, reports) = build_many(&host, 8, &[("sleep", "3")]);
    eprintln!(
        "8 builds, 3 s each, on 7 MIG instances: {:?}",
        started.elapsed()
    );
    assert!(ok, "nix-build failed:\n{log}");
    assert_eq!(reports.len(), 8, "{log}");
    let mut on_instance: BTreeMap<u32, Vec<(f64, f64, &str)>> = BTreeMap::new();
    for (name, r) in &reports {
        let mig = r
            .manifest
            .mig
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: no MIG instance in {r:?}"));
        assert_eq!((mig.gpu, mig.ci), (0, 0), "{name}: {r:?}");
        assert!(SEVEN_GIS.contains(&mig.gi), "{name}: {r:?}");
        let mut expected = mig_nodes(mig.gi);
        expected.sort();
        assert_eq!(caps_seen(r), expected, "{name} sees other capability nodes");
        assert_eq!(r.manifest.leased_gpus, [0], "{name}: {r:?}");
        for node in ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"] {
            assert!(r.nodes.iter().any(|n| n == node), "{name} lacks {node}");
        }
        on_instance
            .entry(mig.gi)
            .or_default()
            .push((r.start, r.end, name));
    }
    assert_eq!(
        on_instance.len(),
        7,
        "not every instance was used: {on_instance:?}"
    );
    for (gi, runs) in &mut on_instance {
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        for pair in runs.windows(2) {
            assert!(
                pair[0].1 <= pair[1].0,
                "{} and {} overlapped on gi{gi}: {pair:?}",
                pair[0].2,
                pair[1].2
            );
        }
    }
}

#[test]
fn an_eighth_build_on_seven_slices_fails_in_bounded_time() {
    if !nix_available("an_eighth_build_on_seven_slices_fails_in_bounded_time") {
        return;
    }
    let _serial = serial();
    let host = Host::mig(&SEVEN_GIS, 0);
    let started = Instant::now();
    let n = nonce();
    let build = host.sandbox(8).build(
        &nix_file("concurrent.nix"),
        &[("nonce", &n), ("count", "8"), ("sleep", "10")],
        &[],
    );
    let elapsed = started.elapsed();
    assert!(!build.ok(), "eight builds got seven slices:\n{}", build.log);
    assert!(
        build
            .log
            .contains("all 7 MIG instances are leased by other builds")
            && build.log.contains("waited 0 s"),
        "{}",
        build.log
    );
    assert!(elapsed < Duration::from_secs(120), "{elapsed:?}");
}

#[test]
fn a_killed_build_gives_its_mig_instance_back() {
    if !nix_available("a_killed_build_gives_its_mig_instance_back") {
        return;
    }
    let _serial = serial();
    let host = Host::mig(&[7], 0);
    let slot = Slot::Mig(InstanceId {
        gpu: 0,
        gi: 7,
        ci: 0,
    });
    let long_nonce = nonce();
    let mut long = host.spawn_build(
        "concurrent.nix",
        &[
            ("count", "1"),
            ("sleep", "600"),
            ("prefix", "long"),
            ("nonce", &long_nonce),
        ],
    );
    let leases = Leases::new(&host.run_dir());
    let marker = format!("builder {long_nonce}");
    wait_for("the long build to run", Duration::from_secs(60), || {
        leases.record(slot).is_some() && !processes_with(&marker).is_empty()
    });
    assert!(host.run_dir().join("leases/nvidia0-gi7-ci0.lease").exists());
    assert!(explain(&host).contains("all 1 MIG instances are leased by other builds"));
    // Kill nix-build as a crash would, then the builder it left running.
    assert!(kill_group(long.id() as i32));
    long.wait().unwrap();
    end_processes_with(&marker);
    let (ok, log, reports) = build_many(&host, 1, &[]);
    assert!(ok, "the killed build kept its MIG instance:\n{log}");
    let r = reports.values().next().unwrap();
    assert_eq!(r.manifest.mig.as_ref().map(|m| m.gi), Some(7), "{r:?}");
    assert_eq!(caps_seen(r), {
        let mut n = mig_nodes(7);
        n.sort();
        n
    });
}

/// Runs unsandboxed-gpu.nix of `kind` on a host whose one GPU node a build user can open
/// (a char device 1:3 standing for it), with a host process ready to connect to the build's
/// abstract socket: the build must be refused, in one line, and no descriptor reach the host.
fn an_unsandboxed_build_cannot_hand_its_gpu_to_the_host(kind: &str, settings: &[&str]) {
    let _serial = serial();
    let host = Host::new(1, 1, 0, false);
    let node = host.root.join("dev/nvidia0");
    std::fs::remove_file(&node).unwrap();
    nix::sys::stat::mknod(
        &node,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 3),
    )
    .unwrap();
    std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o666)).unwrap();
    let rdev = std::fs::metadata(&node).unwrap().rdev();
    let send_fd = host.dir.path().join("send-fd");
    let source = host.dir.path().join("send-fd.c");
    std::fs::write(&source, SEND_FD_C).unwrap();
    cuda_sandbox_testkit::cc(&["-o", send_fd.to_str().unwrap(), source.to_str().unwrap()]);
    let n = nonce();
    let socket = format!("cuda-sandbox-test-{n}");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let receiver = receive_descriptors(&socket, stop.clone());
    let mut sandbox = host.sandbox(1);
    sandbox
        .sandbox_paths
        .push(send_fd.to_string_lossy().into_owned());
    sandbox
        .extra_settings
        .extend(settings.iter().map(|s| s.to_string()));
    let build = sandbox.build(
        &nix_file("unsandboxed-gpu.nix"),
        &[
            ("nonce", &n),
            ("kind", kind),
            ("sendFd", send_fd.to_str().unwrap()),
            ("socket", &socket),
        ],
        &[],
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let got = receiver.join().unwrap();
    assert!(
        !got.contains(&rdev),
        "the {kind} build handed the GPU to a host process:\n{}",
        build.log
    );
    let refusal = build
        .log
        .lines()
        .find(|l| l.contains("is a fixed-output or impure derivation"));
    assert!(
        !build.ok() && refusal.is_some(),
        "the {kind} build was not refused:\n{}",
        build.log
    );
    assert!(
        Leases::new(&host.run_dir()).record(0).is_none(),
        "a lease was taken"
    );
}

#[test]
fn a_tagged_fixed_output_build_is_refused_and_hands_no_gpu_to_the_host() {
    // A red-team finding: Nix builds a fixed-output derivation in the host's network
    // namespace, so its builder reached a host listener's abstract socket and handed it the
    // leased GPU's descriptor; its lease then ended with the build, while the host process
    // still held the GPU.
    if !nix_available("a_tagged_fixed_output_build_is_refused_and_hands_no_gpu_to_the_host") {
        return;
    }
    an_unsandboxed_build_cannot_hand_its_gpu_to_the_host("fixed", &[]);
}

#[test]
fn a_tagged_fixed_output_build_with_structured_attrs_is_refused_and_hands_no_gpu_to_the_host() {
    if !nix_available(
        "a_tagged_fixed_output_build_with_structured_attrs_is_refused_and_hands_no_gpu_to_the_host",
    ) {
        return;
    }
    an_unsandboxed_build_cannot_hand_its_gpu_to_the_host("structured", &[]);
}

#[test]
fn a_tagged_impure_build_is_refused_and_hands_no_gpu_to_the_host() {
    if !nix_available("a_tagged_impure_build_is_refused_and_hands_no_gpu_to_the_host") {
        return;
    }
    an_unsandboxed_build_cannot_hand_its_gpu_to_the_host(
        "impure",
        &["experimental-features = impure-derivations ca-derivations"],
    );
}
