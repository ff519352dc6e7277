//! GPU leases against real processes: stand-in Nix processes (`sleep`), builds in a PID
//! namespace of their own (`unshare`) and build users (`setpriv`). The namespace and build-user
//! tests need root; under `CI=true` they fail rather than skip without it.
use cuda_sandbox_hook::lease::{Builder, Holder, LeaseError, LeaseRequest, Leases, Slot};
use cuda_sandbox_hook::statedir::StateDir;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

/// A lease directory, sandbox directories, and stand-ins for Nix processes.
struct Fixture {
    _dir: tempfile::TempDir,
    leases: Leases,
    base: PathBuf,
    nixes: std::cell::RefCell<Vec<Child>>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for child in self.nixes.get_mut() {
            let _ = child.kill();
            let _ = child.wait();
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
    let e = f
        .try_take(&b, &[0], 1, f.nix(), Duration::ZERO)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(
            "all 1 GPUs are leased by other builds (nvidia0: /nix/store/x-test.drv for 0 s)"
        ),
        "{e}"
    );
    assert!(e.contains("raise lease_wait_seconds"), "{e}");
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

/// A stand-in Nix with a sandboxed builder: `unshare --pid --fork sleep 600`, whose child is
/// PID 1 of a PID namespace of its own, as Nix's builder is. Returns the stand-in (the holder)
/// and the builder's pid.
fn nix_with_builder(f: &Fixture) -> (Holder, u32) {
    let child = Command::new("unshare")
        .args(["--pid", "--fork", "sleep", "600"])
        .spawn()
        .unwrap();
    let pid = child.id();
    f.nixes.borrow_mut().push(child);
    // unshare forks, then the child execs sleep: wait (up to 60 s on a loaded machine) for
    // the child to exist and be PID 1 of its namespace.
    let in_its_namespace = || {
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        let builder = children.split_whitespace().next()?.parse::<u32>().ok()?;
        let status = std::fs::read_to_string(format!("/proc/{builder}/status")).ok()?;
        status
            .lines()
            .any(|l| l.starts_with("NSpid:") && l.ends_with("\t1"))
            .then_some(builder)
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
    (Holder::of(pid).unwrap(), builder)
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
    let _ = Command::new("kill")
        .args(["-KILL", &builder.to_string()])
        .status();
    let gone = (0..500).any(|_| {
        let alive = Holder::of(builder).is_some();
        if alive {
            std::thread::sleep(Duration::from_millis(10));
        }
        !alive
    });
    assert!(gone, "the builder did not end");
    assert_eq!(f.take(&b, &[0], 1), [0]);
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
    let e = e.unwrap_err().to_string();
    assert!(e.contains("nvidia0: /nix/store/x-busy.drv"), "{e}");
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
    let e = f
        .try_take(&b, &gpus, 2, f.nix(), Duration::from_millis(300))
        .unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(300));
    let e = e.to_string();
    assert!(
        e.starts_with("it needs 2 GPU(s) but only 1 of 2 are free (nvidia0: "),
        "{e}"
    );
    assert!(e.contains("waited 0 s") && !e.contains('\n'), "{e}");
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
    let e = f
        .leases
        .preview(&whole(&[0, 1]), 1)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("all 2 GPUs are leased"), "{e}");
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
    let e = f
        .try_take(&a, &[0], 1, f.nix(), Duration::from_millis(1500))
        .unwrap_err()
        .to_string();
    assert!(started.elapsed() < Duration::from_secs(5), "{e}");
    assert!(e.contains("stayed held") && e.contains("fuser"), "{e}");
}
