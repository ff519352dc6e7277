//! The pure tier of these tests (docs/testing.md).

use super::*;

#[test]
fn least_used_free_gpu_first_and_never_twice() {
    let f = fixture();
    let gpus = [0, 1, 2, 3];
    let a = f.chroot("a");
    assert_eq!(f.take(&a, &gpus, 1), [0]);
    let b = f.chroot("b");
    assert_eq!(f.take(&b, &gpus, 2), [1, 2]);
    // a ends: Nix deletes its chroot. GPUs 0 and 3 are free; 3 was never used.
    std::fs::remove_dir(&a).unwrap();
    let c = f.chroot("c");
    assert_eq!(f.take(&c, &gpus, 1), [3]);
    let d = f.chroot("d");
    assert_eq!(f.take(&d, &gpus, 1), [0]);
    assert_eq!(f.leases.record(0).unwrap().chroot, d);
    assert_eq!(f.leases.record(1).unwrap().chroot, b);
    let usage: BTreeMap<String, u64> =
        serde_json::from_slice(&std::fs::read(f.leases.dir.join("usage.json")).unwrap()).unwrap();
    assert_eq!(usage.values().sum::<u64>(), 5, "{usage:?}");
    assert!(f.leases.preview(&whole(&gpus), 1).is_err());
}

#[test]
fn stale_leases_are_reclaimed() {
    let f = fixture();
    let gpus = [0];
    // Chroot gone: stale.
    let a = f.chroot("a");
    f.take(&a, &gpus, 1);
    std::fs::remove_dir(&a).unwrap();
    let b = f.chroot("b");
    assert_eq!(f.take(&b, &gpus, 1), [0]);
    // Chroot left behind by a killed Nix, no process in it: stale at once.
    std::fs::remove_dir(&b).unwrap();
    let c = f.chroot("c");
    let nix = f.nix();
    f.try_take(&c, &gpus, 1, nix, Duration::ZERO).unwrap();
    let d = f.chroot("d");
    assert!(f.try_take(&d, &gpus, 1, f.nix(), Duration::ZERO).is_err());
    f.kill(nix);
    assert_eq!(f.take(&d, &gpus, 1), [0]);
    assert_eq!(f.leases.record(0).unwrap().chroot, d);
    // A chroot made anew at the same path (a rebuild) is another build.
    std::fs::remove_dir(&d).unwrap();
    std::fs::create_dir(&d).unwrap();
    let e = f.chroot("e");
    assert_eq!(f.take(&e, &gpus, 1), [0]);
    // Junk in a lease file does not hold a GPU.
    std::fs::write(f.leases.file(0), "{").unwrap();
    assert_eq!(f.take(&f.chroot("g"), &gpus, 1), [0]);
}

#[test]
fn a_lease_holds_while_its_nix_runs_however_old_but_not_against_its_own_nix() {
    let f = fixture();
    let a = f.chroot("a");
    let nix = f.nix();
    f.try_take(&a, &[0], 1, nix, Duration::ZERO).unwrap();
    let b = f.chroot("b");
    // Another Nix: a's builder may not have started yet.
    let e = f.try_take(&b, &[0], 1, f.nix(), Duration::ZERO);
    assert!(
        matches!(
            &e,
            Err(LeaseError::Exhausted { total: 1, wanted: 1, features, held, waited })
                if features.is_empty() && held[..] == [(Slot::Gpu(0), "/nix/store/x-test.drv".to_owned(), 0)]
                    && waited.as_secs() == 0
        ),
        "{e:?}"
    );
    // The same Nix is blocked in this hook, so a's build is not pending but finished.
    assert_eq!(f.try_take(&b, &[0], 1, nix, Duration::ZERO).unwrap(), [0]);
    // no grace window. An hour old, with no process in the sandbox
    // (a builder that left its chroot), the lease holds while its Nix runs the build...
    let mut old = f.leases.record(0).unwrap();
    old.since -= 3600;
    std::fs::write(f.leases.file(0), serde_json::to_vec(&old).unwrap()).unwrap();
    let c = f.chroot("c");
    assert!(f.try_take(&c, &[0], 1, f.nix(), Duration::ZERO).is_err());
    // ...and ends with it.
    f.kill(nix);
    assert_eq!(f.take(&c, &[0], 1), [0]);
}

#[test]
fn a_set_up_build_whose_builder_ended_frees_its_gpu_while_its_nix_runs() {
    // Nix (2.8, 2.26) keeps a failed build's chroot while it goes on with other builds: once
    // the sandbox was set up and no builder of that Nix may be the build's, the lease ends.
    let f = fixture();
    let nix = f.nix();
    let a = f.chroot("a");
    f.try_take(&a, &[0], 1, nix, Duration::ZERO).unwrap();
    let b = f.chroot("b");
    // Not set up yet: the build is pending while its Nix runs.
    assert!(f.try_take(&b, &[0], 1, f.nix(), Duration::ZERO).is_err());
    set_up(&a);
    assert_eq!(
        f.try_take(&b, &[0], 1, f.nix(), Duration::ZERO).unwrap(),
        [0]
    );
}

#[test]
fn a_reused_namespace_inode_keeps_no_lease() {
    // An unprivileged `unshare -Upf` can get a dead build's PID namespace inode: the builder is
    // recorded by pid and start time, and a live namespace with its inode keeps nothing.
    let f = fixture();
    let a = f.chroot("a");
    let nix = f.nix();
    f.try_take(&a, &[0], 1, nix, Duration::ZERO).unwrap();
    f.kill(nix);
    let mut ended = Command::new("true").spawn().unwrap();
    let pid = ended.id();
    ended.wait().unwrap();
    let mut record = f.leases.record(0).unwrap();
    record.builders = vec![Builder {
        pid,
        start: 1,
        // This test's own namespace: alive, and so a namespace with this inode exists.
        pid_namespace: std::fs::metadata("/proc/self/ns/pid").unwrap().ino(),
        uid: 0,
    }];
    std::fs::write(f.leases.file(0), serde_json::to_vec(&record).unwrap()).unwrap();
    assert_eq!(f.take(&f.chroot("b"), &[0], 1), [0]);
}

#[test]
fn a_lease_lives_while_a_process_is_rooted_in_its_chroot() {
    // "/" stands for a sandbox with a running builder: this process is rooted there.
    let f = fixture();
    let gpus = [0, 1];
    let nix = f.nix();
    let busy = f
        .leases
        .acquire(
            &LeaseRequest {
                slots: &whole(&gpus),
                count: 1,
                chroot: Path::new("/"),
                derivation: "/nix/store/x-busy.drv",
                wait: Duration::ZERO,
            },
            nix,
        )
        .unwrap();
    assert_eq!(busy, [Slot::Gpu(0)]);
    f.kill(nix);
    let b = f.chroot("b");
    assert_eq!(f.take(&b, &gpus, 1), [1]);
    let c = f.chroot("c");
    let e = f.try_take(&c, &gpus, 1, nix, Duration::ZERO);
    assert!(
        matches!(
            &e,
            Err(LeaseError::Exhausted { held, .. })
                if held.iter().any(|(s, d, _)| *s == Slot::Gpu(0) && d == "/nix/store/x-busy.drv")
        ),
        "{e:?}"
    );
    assert!(f.leases.file(0).exists());
}

#[test]
fn exhaustion_waits_then_fails_in_one_line() {
    let f = fixture();
    let gpus = [0, 1];
    let a = f.chroot("a");
    f.take(&a, &gpus, 1);
    let b = f.chroot("b");
    let started = std::time::Instant::now();
    let e = f.try_take(&b, &gpus, 2, f.nix(), Duration::from_millis(300));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(
        matches!(
            &e,
            Err(LeaseError::Exhausted { total: 2, wanted: 2, features, held, waited })
                if features.is_empty() && held.len() == 1 && held[0].0 == Slot::Gpu(0)
                    && *waited >= Duration::from_millis(300)
        ),
        "{e:?}"
    );
    // Its text (pinned in the lease module's unit test) is one line.
    assert_eq!(e.unwrap_err().to_string().lines().count(), 1);
    // The wait ends as soon as the other build does.
    let remover = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        std::fs::remove_dir(&a).unwrap();
    });
    let got = f.try_take(&b, &gpus, 2, f.nix(), Duration::from_secs(10));
    remover.join().unwrap();
    assert_eq!(got.unwrap(), [0, 1]);
}

#[test]
fn preview_takes_nothing() {
    let f = fixture();
    assert_eq!(
        f.leases.preview(&whole(&[0, 1]), 1).unwrap(),
        [Slot::Gpu(0)]
    );
    assert!(!f.leases.dir.exists());
    let a = f.chroot("a");
    f.take(&a, &[0, 1], 2);
    let e = f.leases.preview(&whole(&[0, 1]), 1);
    assert!(
        matches!(
            &e,
            Err(LeaseError::Exhausted { total: 2, wanted: 1, held, .. }) if held.len() == 2
        ),
        "{e:?}"
    );
}

#[test]
fn a_held_lock_makes_the_lease_fail_in_bounded_time() {
    // a process holding the lock forever must not hang every build.
    let f = fixture();
    let dir = StateDir::open(&f.leases.dir).unwrap();
    let holder = dir.open_lock(".lock").unwrap();
    let _held = nix::fcntl::Flock::lock(holder, nix::fcntl::FlockArg::LockExclusive).unwrap();
    let a = f.chroot("a");
    let started = std::time::Instant::now();
    let e = f.try_take(&a, &[0], 1, f.nix(), Duration::from_millis(1500));
    assert!(started.elapsed() < Duration::from_secs(5), "{e:?}");
    assert!(
        matches!(
            &e,
            Err(LeaseError::Lock(LockError::StayedHeld(path, _))) if path.ends_with(".lock")
        ),
        "{e:?}"
    );
}
