//! GPU leases: with `gpus_per_build > 0`, each tagged build gets GPUs that no other running
//! build holds, the least used first.
//!
//! One file per leased GPU, `<runtime_dir>/leases/nvidia<N>.lease` (JSON [`LeaseRecord`]),
//! written atomically (temporary file + rename). Every decision is taken under an exclusive
//! `flock` on `<runtime_dir>/leases/.lock`, so two hooks never pick the same GPU. A per-GPU
//! count of leases granted (`usage.json`) orders the free GPUs: least used first, then by
//! number.
//!
//! # When a lease ends
//!
//! The hook exits before the build starts, so nothing of it can hold the lease. A lease is
//! alive while its build can still use the GPU:
//!
//! 1. the chroot directory Nix passed still exists with the same inode (Nix deletes it when the
//!    build ends; a rebuild of the same derivation makes a new one), and
//! 2. some process has that directory as its root (`/proc/<pid>/root`): the builder and its
//!    children after Nix's `pivot_root`. Or, before the builder starts, the Nix process that
//!    ran the hook (recorded by pid and start time) is alive and the lease is younger than
//!    [`PENDING_GRACE`].
//!
//! Rule 2 is what makes a killed build give its GPU back. Nix 2.8 (checked on Debian's
//! nix-bin) leaves the chroot directory behind when `nix-build` or the daemon is killed with
//! SIGKILL, and the builder runs on, orphaned, in its own session: its GPU is still in use
//! until it ends, and the lease with it. Once no process is left in the sandbox and Nix is
//! gone, the lease is stale and the next hook removes it. A lease held by the very Nix
//! process now running this hook counts only by rule 2's processes: that process is blocked
//! in this hook, so its other builds have started already (Nix waits for the sandbox to be
//! set up before it moves on), and a finished one whose chroot Nix has not yet deleted must
//! not block this build forever.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The derivation attribute (plain env entry, or in `__json`) asking for a number of GPUs.
pub const GPUS_ATTR: &str = "cudaSandboxGpus";
/// How long a lease counts before its builder starts, while the Nix process that took it is
/// alive and is not the one running this hook.
pub const PENDING_GRACE: Duration = Duration::from_secs(30);
/// How often a waiting hook looks again.
const POLL: Duration = Duration::from_millis(100);
const LOCK_FILE: &str = ".lock";
const USAGE_FILE: &str = "usage.json";

/// One leased GPU: the file `nvidia<N>.lease`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The GPU (`/dev/nvidia<gpu>`).
    pub gpu: u32,
    /// The derivation being built, for messages.
    pub derivation: String,
    /// The build's sandbox root (the chroot directory Nix passed the hook).
    pub chroot: PathBuf,
    /// Device and inode of `chroot` when the lease was taken.
    pub chroot_id: (u64, u64),
    /// The process that ran the hook (Nix), which starts the builder.
    pub holder_pid: u32,
    /// Its start time (`/proc/<pid>/stat` field 22), so a reused pid does not count.
    pub holder_start: u64,
    /// When the lease was taken (seconds since the epoch).
    pub since: u64,
}

/// Why no GPUs could be leased; one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseError {
    /// Not enough free GPUs within the wait.
    Exhausted {
        /// GPUs on the host.
        total: usize,
        /// GPUs this build needs.
        wanted: usize,
        /// Who holds the others: (GPU, derivation, seconds held).
        held: Vec<(u32, String, u64)>,
        /// How long the hook waited.
        waited: Duration,
    },
    /// The lease directory or the chroot could not be used.
    Io(String),
}

impl std::fmt::Display for LeaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeaseError::Exhausted {
                total,
                wanted,
                held,
                waited,
            } => {
                let holders: Vec<String> = held
                    .iter()
                    .map(|(gpu, drv, secs)| format!("nvidia{gpu}: {drv} for {secs} s"))
                    .collect();
                let what = if held.len() >= *total {
                    format!("all {total} GPUs are leased by other builds")
                } else {
                    format!(
                        "it needs {wanted} GPU(s) but only {} of {total} are free",
                        total - held.len()
                    )
                };
                write!(
                    f,
                    "{what} ({}); waited {} s: raise lease_wait_seconds or lower gpus_per_build \
                     (or the derivation's {GPUS_ATTR})",
                    holders.join(", "),
                    waited.as_secs()
                )
            }
            LeaseError::Io(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for LeaseError {}

/// The process that will start the build and so keeps a pending lease alive: pid and start
/// time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    /// Its pid.
    pub pid: u32,
    /// Its start time, from `/proc/<pid>/stat`.
    pub start: u64,
}

impl Holder {
    /// The process that ran this hook: Nix (the daemon's worker, or an in-process
    /// `nix-build`). A wrapper script around the hook must `exec` it.
    pub fn parent() -> Option<Holder> {
        Holder::of(std::os::unix::process::parent_id())
    }

    /// The process `pid`, if it runs.
    pub fn of(pid: u32) -> Option<Holder> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) may hold spaces and parentheses; fields after it don't.
        let after_name = &stat[stat.rfind(')')? + 1..];
        let start = after_name.split_whitespace().nth(19)?.parse().ok()?;
        Some(Holder { pid, start })
    }

    fn alive(self) -> bool {
        Holder::of(self.pid) == Some(self)
    }
}

/// What one build asks for.
#[derive(Debug, Clone)]
pub struct LeaseRequest<'a> {
    /// The GPUs the host has (`/dev/nvidia<N>` numbers).
    pub gpus: &'a [u32],
    /// How many this build needs.
    pub count: usize,
    /// The build's sandbox root.
    pub chroot: &'a Path,
    /// The derivation, for the lease file and other builds' messages.
    pub derivation: &'a str,
    /// How long to wait for enough free GPUs.
    pub wait: Duration,
}

/// The lease directory, `<runtime_dir>/leases`.
#[derive(Debug, Clone)]
pub struct Leases {
    /// The directory holding the lease files, the lock and the usage counts.
    pub dir: PathBuf,
}

impl Leases {
    /// The leases kept under `runtime_dir`.
    pub fn new(runtime_dir: &Path) -> Leases {
        Leases {
            dir: runtime_dir.join("leases"),
        }
    }

    /// Leases `req.count` free GPUs to the build in `req.chroot`, least used first, waiting
    /// up to `req.wait` for other builds to end. `holder` is the Nix process that starts the
    /// build ([`Holder::parent`] in hook mode).
    pub fn acquire(&self, req: &LeaseRequest, holder: Holder) -> Result<Vec<u32>, LeaseError> {
        let io = |what: &Path, e: std::io::Error| {
            LeaseError::Io(format!("cannot use GPU lease {}: {e}", what.display()))
        };
        std::fs::create_dir_all(&self.dir).map_err(|e| io(&self.dir, e))?;
        let chroot_id = std::fs::metadata(req.chroot)
            .map(|m| (m.dev(), m.ino()))
            .map_err(|e| io(req.chroot, e))?;
        let started = std::time::Instant::now();
        loop {
            let held = {
                let _lock = self.lock()?;
                let held = self.held(req.gpus, Some((req.chroot, chroot_id)), Some(holder));
                let free: Vec<u32> = req
                    .gpus
                    .iter()
                    .copied()
                    .filter(|g| !held.iter().any(|h| h.gpu == *g))
                    .collect();
                if free.len() >= req.count {
                    let mut usage = self.usage();
                    let picked = least_used(&free, &usage, req.count);
                    for gpu in &picked {
                        let record = LeaseRecord {
                            gpu: *gpu,
                            derivation: req.derivation.to_string(),
                            chroot: req.chroot.to_path_buf(),
                            chroot_id,
                            holder_pid: holder.pid,
                            holder_start: holder.start,
                            since: now_secs(),
                        };
                        let path = self.file(*gpu);
                        write_atomically(&self.dir, &path, &serde_json::to_vec(&record).unwrap())
                            .map_err(|e| io(&path, e))?;
                        *usage.entry(*gpu).or_default() += 1;
                    }
                    let path = self.dir.join(USAGE_FILE);
                    write_atomically(&self.dir, &path, &serde_json::to_vec(&usage).unwrap())
                        .map_err(|e| io(&path, e))?;
                    return Ok(picked);
                }
                held
            };
            let waited = started.elapsed();
            if waited >= req.wait {
                return Err(LeaseError::Exhausted {
                    total: req.gpus.len(),
                    wanted: req.count,
                    held: held
                        .into_iter()
                        .map(|r| (r.gpu, r.derivation, now_secs().saturating_sub(r.since)))
                        .collect(),
                    waited,
                });
            }
            std::thread::sleep(POLL.min(req.wait - waited));
        }
    }

    /// The GPUs a build asking for `count` would get now, without taking them or waiting
    /// (for `explain` and `exec`). Reads without the lock: lease files are written atomically.
    pub fn preview(&self, gpus: &[u32], count: usize) -> Result<Vec<u32>, LeaseError> {
        let held = self.held(gpus, None, None);
        let free: Vec<u32> = gpus
            .iter()
            .copied()
            .filter(|g| !held.iter().any(|h| h.gpu == *g))
            .collect();
        if free.len() < count {
            return Err(LeaseError::Exhausted {
                total: gpus.len(),
                wanted: count,
                held: held
                    .into_iter()
                    .map(|r| (r.gpu, r.derivation, now_secs().saturating_sub(r.since)))
                    .collect(),
                waited: Duration::ZERO,
            });
        }
        Ok(least_used(&free, &self.usage(), count))
    }

    /// The live leases on `gpus`. With `mine` (under the lock), stale lease files and the
    /// build's own earlier ones are removed; without it nothing is changed.
    fn held(
        &self,
        gpus: &[u32],
        mine: Option<(&Path, (u64, u64))>,
        me: Option<Holder>,
    ) -> Vec<LeaseRecord> {
        let mut roots: Option<HashSet<(u64, u64)>> = None;
        let mut held = Vec::new();
        for gpu in gpus {
            let path = self.file(*gpu);
            let record = match std::fs::read(&path) {
                Ok(bytes) => serde_json::from_slice::<LeaseRecord>(&bytes).ok(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(_) => None,
            };
            let live = record.as_ref().is_some_and(|r| {
                let own = mine.is_some_and(|(c, id)| c == r.chroot && id == r.chroot_id);
                !own && r.is_live(me, roots.get_or_insert_with(process_roots))
            });
            match record {
                Some(r) if live => held.push(r),
                _ if mine.is_some() => {
                    let _ = std::fs::remove_file(&path);
                }
                _ => {}
            }
        }
        held
    }

    fn lock(&self) -> Result<nix::fcntl::Flock<std::fs::File>, LeaseError> {
        let path = self.dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| LeaseError::Io(format!("cannot open {}: {e}", path.display())))?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| LeaseError::Io(format!("cannot lock {}: {e}", path.display())))
    }

    fn usage(&self) -> BTreeMap<u32, u64> {
        std::fs::read(self.dir.join(USAGE_FILE))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// The lease file of `gpu`.
    pub fn file(&self, gpu: u32) -> PathBuf {
        self.dir.join(format!("nvidia{gpu}.lease"))
    }

    /// Reads the lease file of `gpu`, if any (whether or not its build still runs).
    pub fn record(&self, gpu: u32) -> Option<LeaseRecord> {
        let bytes = std::fs::read(self.file(gpu)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

impl LeaseRecord {
    /// Whether its build can still use the GPU (see the module documentation). `me` is the
    /// Nix process running the asking hook; `roots` the (device, inode) of every process's
    /// root directory.
    fn is_live(&self, me: Option<Holder>, roots: &HashSet<(u64, u64)>) -> bool {
        let same_dir =
            std::fs::metadata(&self.chroot).is_ok_and(|m| (m.dev(), m.ino()) == self.chroot_id);
        if !same_dir {
            return false;
        }
        if roots.contains(&self.chroot_id) {
            return true;
        }
        let holder = Holder {
            pid: self.holder_pid,
            start: self.holder_start,
        };
        let pending = now_secs().saturating_sub(self.since) < PENDING_GRACE.as_secs();
        me != Some(holder) && pending && holder.alive()
    }
}

/// `count` GPUs of `free`, the least leased first, then by number.
fn least_used(free: &[u32], usage: &BTreeMap<u32, u64>, count: usize) -> Vec<u32> {
    let mut order = free.to_vec();
    order.sort_by_key(|g| (usage.get(g).copied().unwrap_or(0), *g));
    order.truncate(count);
    order.sort_unstable();
    order
}

/// (device, inode) of the root directory of every process we may inspect.
fn process_roots() -> HashSet<(u64, u64)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return HashSet::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .as_encoded_bytes()
                .iter()
                .all(u8::is_ascii_digit)
        })
        .filter_map(|e| std::fs::metadata(e.path().join("root")).ok())
        .map(|m| (m.dev(), m.ino()))
        .collect()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(bytes)?;
    file.write_all(b"\n")?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The derivation's [`GPUS_ATTR`] as text: the plain env entry, or with structured attrs the
/// `__json` member (a string or a number). `None` when unset or unreadable.
pub fn requested_gpus(drv: &crate::drv::Derivation) -> Option<String> {
    if let Some(json) = drv.env_var(b"__json") {
        let attrs: serde_json::Value = serde_json::from_slice(json).ok()?;
        return match attrs.get(GPUS_ATTR)? {
            serde_json::Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        };
    }
    drv.env_var(GPUS_ATTR.as_bytes())
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// [`GPUS_ATTR`] of a derivation given as JSON (`NIX_DERIVATION_V4`): from `structuredAttrs`,
/// `env.__json` or `env`, like the features (see [`crate::drv::features_from_json`]).
pub fn requested_gpus_json(json: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(json).ok()?;
    let object = value.as_object()?;
    let drv = if object.contains_key("env") || object.contains_key("structuredAttrs") {
        object
    } else {
        object.values().next()?.as_object()?
    };
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Some(attrs) = drv.get("structuredAttrs").and_then(|a| a.as_object()) {
        return attrs.get(GPUS_ATTR).map(text);
    }
    let env = drv.get("env")?.as_object()?;
    if let Some(json) = env.get("__json").and_then(|j| j.as_str()) {
        let attrs: serde_json::Value = serde_json::from_str(json).ok()?;
        return attrs.get(GPUS_ATTR).map(text);
    }
    env.get(GPUS_ATTR).map(text)
}

/// [`requested_gpus`] of the `.drv` file at `path` (`None` when it cannot be read: remote
/// builds then get `gpus_per_build`).
pub fn requested_gpus_of(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    requested_gpus(&crate::drv::Derivation::parse(&bytes).ok()?)
}

/// The number of GPUs a build needs: the derivation's [`GPUS_ATTR`] when set (`value`),
/// else `gpus_per_build`. Errors say what is wrong with the value.
pub fn wanted(value: Option<&str>, gpus_per_build: u32, available: usize) -> Result<usize, String> {
    let Some(text) = value else {
        let n = gpus_per_build as usize;
        return if n <= available {
            Ok(n)
        } else {
            Err(format!(
                "gpus_per_build = {n} but this host has only {available} GPU(s): lower \
                 gpus_per_build in the config"
            ))
        };
    };
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 && n <= available => Ok(n),
        _ => Err(format!(
            "{GPUS_ATTR} = {text:?} is not a whole number from 1 to {available} (the GPUs on \
             this host): fix the derivation's {GPUS_ATTR}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};

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
            let req = LeaseRequest {
                gpus,
                count,
                chroot,
                derivation: "/nix/store/x-test.drv",
                wait,
            };
            self.leases.acquire(&req, holder)
        }
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
        let usage = f.leases.usage();
        assert_eq!(usage.values().sum::<u64>(), 5, "{usage:?}");
        assert!(f.leases.preview(&gpus, 1).is_err());
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
    fn pending_lease_holds_until_the_grace_ends_but_not_against_its_own_nix() {
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
        // Past the grace, with no process in the sandbox: stale.
        let mut old = f.leases.record(0).unwrap();
        old.since -= PENDING_GRACE.as_secs() + 1;
        std::fs::write(f.leases.file(0), serde_json::to_vec(&old).unwrap()).unwrap();
        let c = f.chroot("c");
        assert_eq!(f.take(&c, &[0], 1), [0]);
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
                    gpus: &gpus,
                    count: 1,
                    chroot: Path::new("/"),
                    derivation: "/nix/store/x-busy.drv",
                    wait: Duration::ZERO,
                },
                nix,
            )
            .unwrap();
        assert_eq!(busy, [0]);
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
        assert_eq!(f.leases.preview(&[0, 1], 1).unwrap(), [0]);
        assert!(!f.leases.dir.exists());
        let a = f.chroot("a");
        f.take(&a, &[0, 1], 2);
        let e = f.leases.preview(&[0, 1], 1).unwrap_err().to_string();
        assert!(e.starts_with("all 2 GPUs are leased"), "{e}");
    }

    #[test]
    fn the_gpus_attribute_is_read_plain_and_structured() {
        let plain = br#"Derive([("out","/nix/store/a-x","","")],[],[],"x86_64-linux","/bin/sh",[],[("cudaSandboxGpus","2"),("out","/nix/store/a-x")])"#;
        let drv = crate::drv::Derivation::parse(plain).unwrap();
        assert_eq!(requested_gpus(&drv).as_deref(), Some("2"));
        let structured = br#"Derive([("out","/nix/store/a-x","","")],[],[],"x86_64-linux","/bin/sh",[],[("__json","{\"cudaSandboxGpus\":3,\"requiredSystemFeatures\":[\"cuda\"]}"),("out","/nix/store/a-x")])"#;
        assert_eq!(
            requested_gpus_json(br#"{"env":{"cudaSandboxGpus":"2"}}"#).as_deref(),
            Some("2")
        );
        assert_eq!(
            requested_gpus_json(
                br#"{"/nix/store/x.drv":{"structuredAttrs":{"cudaSandboxGpus":3}}}"#
            )
            .as_deref(),
            Some("3")
        );
        assert_eq!(requested_gpus_json(br#"{"env":{}}"#), None);
        let drv = crate::drv::Derivation::parse(structured).unwrap();
        assert_eq!(requested_gpus(&drv).as_deref(), Some("3"));
        let none = br#"Derive([("out","/nix/store/a-x","","")],[],[],"x86_64-linux","/bin/sh",[],[("out","/nix/store/a-x")])"#;
        let drv = crate::drv::Derivation::parse(none).unwrap();
        assert_eq!(requested_gpus(&drv), None);
    }

    #[test]
    fn the_gpus_attribute_is_validated() {
        assert_eq!(wanted(None, 1, 4), Ok(1));
        assert_eq!(wanted(Some("2"), 1, 4), Ok(2));
        assert_eq!(wanted(Some(" 4 "), 1, 4), Ok(4));
        for bad in ["0", "5", "-1", "two", "", "1.5"] {
            let e = wanted(Some(bad), 1, 4).unwrap_err();
            assert!(
                e.starts_with(&format!(
                    "{GPUS_ATTR} = {bad:?} is not a whole number from 1 to 4"
                )),
                "{e}"
            );
        }
        assert!(wanted(None, 3, 2)
            .unwrap_err()
            .contains("lower gpus_per_build"));
    }
}
