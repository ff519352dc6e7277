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

#[path = "../common/mod.rs"]
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

// The tests, one module per tier (docs/testing.md).
mod pure;
mod root;
