//! The root tier of these tests (docs/testing.md).

use super::*;

#[test]
fn a_lease_lives_while_its_builds_pid_namespace_does() {
    // A builder that left its chroot cannot leave its PID namespace: the next hook finds it
    // among its Nix's children and records it, and it keeps the lease after its Nix is gone.
    if !cuda_sandbox_testkit::root_available("a_lease_lives_while_its_builds_pid_namespace_does") {
        return;
    }
    let f = fixture();
    let (nix, builder) = nix_with_builder(&f);
    let a = f.chroot("a");
    f.try_take(&a, &[0], 1, nix, Duration::ZERO).unwrap();
    set_up(&a);
    let b = f.chroot("b");
    assert!(f.try_take(&b, &[0], 1, f.nix(), Duration::ZERO).is_err());
    let recorded = f.leases.record(0).unwrap().builders;
    assert_eq!(
        recorded.iter().map(|b| b.pid).collect::<Vec<_>>(),
        [builder],
        "{recorded:?}"
    );
    // Nix is gone and nothing is rooted in the chroot, but the build's namespace lives.
    f.kill(nix);
    assert!(f.try_take(&b, &[0], 1, f.nix(), Duration::ZERO).is_err());
    kill_and_wait(builder);
    assert_eq!(f.take(&b, &[0], 1), [0]);
}

#[test]
fn a_namespace_the_build_made_inside_its_own_does_not_stand_for_the_build() {
    // A red-team finding: the init of the PID namespace of whatever was rooted in the chroot
    // was recorded as the build's builder. A build left its chroot, kept a nested namespace's
    // init there until a hook recorded it, killed it, and was judged ended while it still
    // held /dev/nvidia0.
    if !cuda_sandbox_testkit::root_available(
        "a_namespace_the_build_made_inside_its_own_does_not_stand_for_the_build",
    ) {
        return;
    }
    let f = fixture();
    let a = f.chroot("a");
    // The builder, in its chroot, starts a nested PID namespace whose init stays there.
    let (nix, builder) = nix_with_builder_running(
        &f,
        Some(&a),
        "unshare --pid --fork sleep 601 & exec sleep 600",
    );
    let nested = wait_until("the nested namespace's init", || {
        let unshare = children(builder).into_iter().next()?;
        let init = children(unshare).into_iter().next()?;
        is_namespace_init(init).then_some(init)
    });
    f.try_take(&a, &[0], 1, nix, Duration::ZERO).unwrap();
    set_up(&a);
    let b = f.chroot("b");
    assert!(f.try_take(&b, &[0], 1, f.nix(), Duration::ZERO).is_err());
    let recorded = recorded(&f);
    assert_eq!(recorded, [builder], "the nested init {nested} was recorded");
    // The build ends the nested namespace and goes on: the lease holds.
    kill_and_wait(nested);
    let e = f.try_take(&b, &[0], 1, f.nix(), Duration::ZERO);
    assert!(e.is_err(), "the build's GPU went to another build: {e:?}");
    kill_and_wait(builder);
    assert_eq!(f.take(&b, &[0], 1), [0]);
}

#[test]
fn a_builder_not_yet_in_its_sandbox_keeps_no_ended_build_alive() {
    // Nix starts each builder as its own child, rooted where Nix is until its `pivot_root`.
    // A set-up build with no builder recorded took such a child (its Nix's next build
    // starting) for its own escaped builder, recorded it, and held the GPU for that whole
    // next build.
    if !cuda_sandbox_testkit::root_available(
        "a_builder_not_yet_in_its_sandbox_keeps_no_ended_build_alive",
    ) {
        return;
    }
    let f = fixture();
    let (nix, _starting) = nix_with_builder_running(&f, None, "exec sleep 600");
    let a = f.chroot("a");
    f.try_take(&a, &[0], 1, nix, Duration::ZERO).unwrap();
    set_up(&a);
    let b = f.chroot("b");
    assert_eq!(
        f.try_take(&b, &[0], 1, f.nix(), Duration::ZERO).unwrap(),
        [0]
    );
    assert!(f.leases.record(0).unwrap().builders.is_empty());
}

#[test]
fn a_builder_setting_up_its_sandbox_keeps_its_lease() {
    // Between the sandbox's `/proc` mount point and its `pivot_root`, Nix's builder is still
    // rooted where Nix is, with the chroot bound onto itself in its own mount namespace.
    if !cuda_sandbox_testkit::root_available("a_builder_setting_up_its_sandbox_keeps_its_lease") {
        return;
    }
    let f = fixture();
    let a = f.chroot("a");
    let script = format!("mount --bind {0} {0} && exec sleep 600", a.display());
    let (nix, builder) = nix_with_builder_running(&f, None, &script);
    wait_until("the builder's bind of its chroot", || {
        let mounts = std::fs::read_to_string(format!("/proc/{builder}/mountinfo")).ok()?;
        mounts.contains(&format!(" {} ", a.display())).then_some(())
    });
    f.try_take(&a, &[0], 1, nix, Duration::ZERO).unwrap();
    set_up(&a);
    let b = f.chroot("b");
    let e = f.try_take(&b, &[0], 1, f.nix(), Duration::ZERO);
    assert!(
        e.is_err(),
        "the GPU of a build setting up went to another: {e:?}"
    );
    let recorded = recorded(&f);
    assert_eq!(recorded, [builder]);
    kill_and_wait(builder);
    assert_eq!(f.take(&b, &[0], 1), [0]);
}

#[test]
fn a_build_whose_recorded_builders_have_all_ended_has_ended() {
    // The builders recorded are the build's outermost inits: with all of them gone the build
    // has ended, even while the holder (its Nix) goes on and some child of it still runs.
    if !cuda_sandbox_testkit::root_available(
        "a_build_whose_recorded_builders_have_all_ended_has_ended",
    ) {
        return;
    }
    let f = fixture();
    let (nix, builder) = nix_with_builder(&f);
    let a = f.chroot("a");
    f.try_take(&a, &[0], 1, nix, Duration::ZERO).unwrap();
    set_up(&a);
    let mut ended = Command::new("true").spawn().unwrap();
    let gone = Holder::of(ended.id());
    ended.wait().unwrap();
    let dead = Builder {
        pid: ended.id(),
        start: gone.map_or(1, |h| h.start),
        pid_namespace: 1,
        uid: 0,
    };
    let b = f.chroot("b");
    let mut record = f.leases.record(0).unwrap();
    record.builders = vec![dead];
    std::fs::write(f.leases.file(0), serde_json::to_vec(&record).unwrap()).unwrap();
    assert_eq!(
        f.try_take(&b, &[0], 1, f.nix(), Duration::ZERO).unwrap(),
        [0]
    );
    kill_and_wait(builder);
}

#[test]
fn a_lease_lives_while_its_build_user_runs_anything() {
    // a builder that leaves its chroot before any hook has seen it
    // there, and whose Nix is then killed, is neither rooted in the chroot nor in a
    // recorded namespace. It still runs as its build user, which it cannot change.
    if !cuda_sandbox_testkit::root_available("a_lease_lives_while_its_build_user_runs_anything") {
        return;
    }
    let f = fixture();
    // A uid no account on any host uses, so that only this test's process runs as it.
    let uid = 3_000_000_000 + std::process::id();
    let pool = f.base.join("var/nix/userpool");
    std::fs::create_dir_all(&pool).unwrap();
    let lock = pool.join(uid.to_string());
    std::fs::write(&lock, "").unwrap();
    // The stand-in Nix holds the build user's pool file open, as Nix's worker does.
    let child = Command::new("sleep")
        .arg("600")
        .stdin(std::fs::File::open(&lock).unwrap())
        .spawn()
        .unwrap();
    let nix = Holder::of(child.id()).unwrap();
    f.nixes.borrow_mut().push(child);
    assert_eq!(nix.build_users(), [uid]);
    assert!(f.nix().build_users().is_empty());
    let mut builder = Command::new("setpriv")
        .args(["--reuid", &uid.to_string(), "--regid", &uid.to_string()])
        .args(["--clear-groups", "sleep", "600"])
        .spawn()
        .unwrap();
    // setpriv runs as root until it switches: wait until the builder runs as the user.
    let switched = (0..500).any(|_| {
        let status = std::fs::read_to_string(format!("/proc/{}/status", builder.id())).unwrap();
        let runs_as_user = status.lines().any(|l| {
            l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some(&*uid.to_string())
        });
        if !runs_as_user {
            std::thread::sleep(Duration::from_millis(10));
        }
        runs_as_user
    });
    assert!(switched, "setpriv did not switch to uid {uid}");
    let a = f.chroot("a");
    f.try_take(&a, &[0], 1, nix, Duration::ZERO).unwrap();
    assert_eq!(f.leases.record(0).unwrap().build_users, [uid]);
    f.kill(nix);
    // Nix is gone, nothing is rooted in the chroot, no namespace was recorded: the build
    // user's process keeps the GPU.
    let b = f.chroot("b");
    let e = f.try_take(&b, &[0], 1, f.nix(), Duration::ZERO);
    assert!(e.is_err(), "{e:?}");
    builder.kill().unwrap();
    builder.wait().unwrap();
    assert_eq!(f.take(&b, &[0], 1), [0]);
}
