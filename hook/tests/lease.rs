//! GPU leases against real processes: stand-in Nix processes (`sleep`), builds in a PID
//! namespace of their own (`unshare`) and build users (`setpriv`). The namespace and build-user
//! tests need root; under `CI=true` they fail rather than skip without it.
use cuda_sandbox_hook::lease::{
    Builder, Holder, LeaseError, LeaseRequest, Leases, LockError, Slot,
};
use cuda_sandbox_hook::statedir::StateDir;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

mod common;

use common::{is_namespace_init, root_of};

/// A lease directory, sandbox directories, and stand-ins for Nix processes.
struct Fixture {
    _dir: tempfile::TempDir,
    leases: Leases,
    base: PathBuf,
    nixes: std::cell::RefCell<Vec<Child>>,
    /// Stand-in builders, which outlive their stand-in Nix (killed with the fixture).
    builders: std::cell::RefCell<Vec<u32>>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for child in self.nixes.get_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for builder in self.builders.get_mut() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*builder as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_path_buf();
    Fixture {
        leases: Leases::new(&base.join("run")),
        base,
        _dir: dir,
        nixes: Default::default(),
        builders: Default::default(),
    }
}

impl Fixture {
    fn chroot(&self, name: &str) -> PathBuf {
        let p = self.base.join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// A running process standing for a Nix that ran a hook (killed with the fixture).
    fn nix(&self) -> Holder {
        let child = Command::new("sleep").arg("600").spawn().unwrap();
        let holder = Holder::of(child.id()).unwrap();
        self.nixes.borrow_mut().push(child);
        holder
    }

    /// Kills the stand-in Nix `holder` (SIGKILL, as in a crash).
    fn kill(&self, holder: Holder) {
        let mut nixes = self.nixes.borrow_mut();
        let child = nixes.iter_mut().find(|c| c.id() == holder.pid).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Leases for a build in `chroot`, run by a fresh Nix.
    fn take(&self, chroot: &Path, gpus: &[u32], count: usize) -> Vec<u32> {
        self.try_take(chroot, gpus, count, self.nix(), Duration::ZERO)
            .unwrap()
    }

    fn try_take(
        &self,
        chroot: &Path,
        gpus: &[u32],
        count: usize,
        holder: Holder,
        wait: Duration,
    ) -> Result<Vec<u32>, LeaseError> {
        let slots = whole(gpus);
        let req = LeaseRequest {
            slots: &slots,
            count,
            chroot,
            derivation: "/nix/store/x-test.drv",
            wait,
        };
        self.leases
            .acquire(&req, holder)
            .map(|picked| picked.iter().map(Slot::gpu).collect())
    }
}

/// The slots of whole GPUs `gpus`.
fn whole(gpus: &[u32]) -> Vec<Slot> {
    gpus.iter().map(|g| Slot::Gpu(*g)).collect()
}

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
            Err(LeaseError::Exhausted { total: 1, wanted: 1, held, waited })
                if held[..] == [(Slot::Gpu(0), "/nix/store/x-test.drv".to_owned(), 0)]
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

/// The shell words that make `dir` a root a process can run the host's programs in (binds of
/// `/usr`, `/dev` and the other program directories, or their links), for a builder that entered its
/// sandbox. Run in a mount namespace of its own.
fn rootable(dir: &Path) -> String {
    format!(
        "for d in usr bin lib lib64 sbin dev; do \
           if [ -L /$d ]; then ln -sfn \"$(readlink /$d)\" {dir}/$d; \
           elif [ -d /$d ]; then mkdir -p {dir}/$d && mount --rbind /$d {dir}/$d; fi; \
         done",
        dir = dir.display()
    )
}

/// A stand-in Nix with a sandboxed builder: `unshare --pid --fork`, whose child is PID 1 of a
/// PID namespace of its own, as Nix's builder is. The builder runs `script` (sh) with `root`
/// as its root directory, in a mount namespace of its own, or where the stand-in runs without
/// `root` (a builder that has not entered its sandbox yet). Returns the stand-in (the holder)
/// and the builder's pid once the builder runs `script`.
fn nix_with_builder_running(f: &Fixture, root: Option<&Path>, script: &str) -> (Holder, u32) {
    let inner = match root {
        Some(dir) => format!(
            "{}; exec chroot {} /bin/sh -c '{script}'",
            rootable(dir),
            dir.display()
        ),
        None => format!("exec /bin/sh -c '{script}'"),
    };
    let child = Command::new("unshare")
        .args(["--pid", "--fork", "--mount", "--propagation", "private"])
        .args(["/bin/sh", "-c", &inner])
        .spawn()
        .unwrap();
    let pid = child.id();
    f.nixes.borrow_mut().push(child);
    let root_id = root.map(|dir| {
        let m = std::fs::metadata(dir).unwrap();
        (m.dev(), m.ino())
    });
    // unshare forks, then the child sets up and execs: wait (up to 60 s on a loaded machine)
    // for the child to be PID 1 of its namespace, in its root.
    let in_its_namespace = || {
        let builder = children(pid).into_iter().next()?;
        let rooted = root_id.is_none_or(|id| root_of(builder) == Some(id));
        (is_namespace_init(builder) && rooted).then_some(builder)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let builder = loop {
        if let Some(builder) = in_its_namespace() {
            break builder;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "unshare started no builder in 60 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    f.builders.borrow_mut().push(builder);
    (Holder::of(pid).unwrap(), builder)
}

/// A stand-in Nix whose builder left its chroot: PID 1 of its PID namespace, rooted in a
/// directory of its own (neither the chroot nor the stand-in's root).
fn nix_with_builder(f: &Fixture) -> (Holder, u32) {
    let elsewhere = f.chroot("elsewhere");
    nix_with_builder_running(f, Some(&elsewhere), "exec sleep 600")
}

/// The children of `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect()
}

/// The pids of the builders the lease on GPU 0 records.
fn recorded(f: &Fixture) -> Vec<u32> {
    f.leases
        .record(0)
        .unwrap()
        .builders
        .iter()
        .map(|b| b.pid)
        .collect()
}

/// Waits up to 60 s for `what`, and returns what it found.
fn wait_until<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(t) = found() {
            return t;
        }
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGKILL to `pid`, and waits until it is gone.
fn kill_and_wait(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    wait_until("the process to end", || {
        Holder::of(pid).is_none().then_some(())
    });
}

/// A chroot Nix has set up the sandbox in (the sandbox's `/proc` mount point exists).
fn set_up(chroot: &Path) {
    std::fs::create_dir(chroot.join("proc")).unwrap();
}

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
fn a_previous_hooks_record_is_judged_by_its_builders_and_then_by_the_build() {
    // Records without a `version` were written by a hook that could record a nested
    // namespace's init as the builder: while a recorded builder runs the lease holds, and
    // when all have ended the build itself is looked for, rather than judged ended.
    if !cuda_sandbox_testkit::root_available(
        "a_previous_hooks_record_is_judged_by_its_builders_and_then_by_the_build",
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
    let write_old = |builders: Vec<Builder>| {
        let mut record = f.leases.record(0).unwrap();
        record.builders = builders;
        let mut json = serde_json::to_value(&record).unwrap();
        json.as_object_mut().unwrap().remove("version");
        std::fs::write(f.leases.file(0), serde_json::to_vec(&json).unwrap()).unwrap();
    };
    // The old record's only builder has ended, but the build's own builder runs (it left its
    // chroot): the lease holds, and the builder found is recorded with this version.
    write_old(vec![dead.clone()]);
    let b = f.chroot("b");
    assert!(f.try_take(&b, &[0], 1, f.nix(), Duration::ZERO).is_err());
    let record = f.leases.record(0).unwrap();
    assert_eq!(record.version, cuda_sandbox_hook::lease::OUTERMOST_BUILDERS);
    assert!(
        record.builders.iter().any(|b| b.pid == builder),
        "{record:?}"
    );
    // The same ended builder in a record of this version: the build has ended.
    let mut current = f.leases.record(0).unwrap();
    current.builders = vec![dead];
    std::fs::write(f.leases.file(0), serde_json::to_vec(&current).unwrap()).unwrap();
    assert_eq!(
        f.try_take(&b, &[0], 1, f.nix(), Duration::ZERO).unwrap(),
        [0]
    );
    kill_and_wait(builder);
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
            Err(LeaseError::Exhausted { total: 2, wanted: 2, held, waited })
                if held.len() == 1 && held[0].0 == Slot::Gpu(0)
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
            Err(LeaseError::Lock(LockError::StayedHeld { path, .. })) if path.ends_with(".lock")
        ),
        "{e:?}"
    );
}
