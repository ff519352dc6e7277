//! GPU leases: with `gpus_per_build > 0`, each tagged build gets GPUs that no other running
//! build holds, the least used first.
//!
//! One file per leased GPU, `<runtime_dir>/leases/nvidia<N>.lease` (JSON [`LeaseRecord`]),
//! written atomically (temporary file + rename) in a verified [`StateDir`] (root-owned, not a
//! symlink, checked on every run). Every decision is taken under an exclusive `flock` on
//! `<runtime_dir>/leases/.lock`, so two hooks never pick the same GPU; the wait for that lock
//! is bounded by the lease wait, like the wait for a free GPU. A per-GPU
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
//! 2. one of:
//!    - the Nix process that ran the hook (recorded by pid and start time) is alive: Nix
//!      tracks the build until it ends, whatever the builder does (no time limit, so a
//!      builder that leaves its chroot — `unshare -rm`, a bind of `/dev`, `chroot`
//!      elsewhere — keeps its lease while Nix runs it);
//!    - some process has that directory as its root (`/proc/<pid>/root`): the builder and
//!      its children after Nix's `pivot_root`. Each hook that sees one records the build's
//!      PID namespace in the lease ([`LeaseRecord::pid_namespaces`]);
//!    - some process is still in a recorded PID namespace: a process cannot leave its PID
//!      namespace, and the namespace's init (the builder) outlives every process in it and
//!      in namespaces nested in it;
//!    - some live process runs as the build's build user ([`LeaseRecord::build_users`], read
//!      from the `userpool/<uid>` lock files the Nix process running the hook holds). An
//!      unprivileged builder cannot change its host uid, so this holds a builder that left its
//!      chroot before any hook saw it there, after its Nix was killed. Nix kills every process
//!      of a build user before it hands the user to another build, so a later build's
//!      processes can make an ended lease look alive only until a tagged build's hook (which
//!      runs after that clean-up) or the end of that build: never the other way round.
//!
//! Rule 2 is what makes a killed build give its GPU back. Nix 2.8 (checked on Debian's
//! nix-bin) leaves the chroot directory behind when `nix-build` or the daemon is killed with
//! SIGKILL, and the builder runs on, orphaned, in its own session: its GPU is still in use
//! until it ends, and the lease with it. Once no process is left in the sandbox and Nix is
//! gone, the lease is stale and the next hook removes it. A lease held by the very Nix
//! process now running this hook counts only by rule 2's processes and namespaces (that
//! Nix being alive proves nothing): that process is blocked
//! in this hook, so its other builds have started already (Nix waits for the sandbox to be
//! set up before it moves on), and a finished one whose chroot Nix has not yet deleted must
//! not block this build forever.

use crate::statedir::StateDir;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The derivation attribute (plain env entry, or in `__json`) asking for a number of GPUs.
pub use crate::drv::GPUS_ATTR;
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
    /// Birth time of `chroot` (nanoseconds since the epoch), where the filesystem keeps one:
    /// a directory made anew can get the inode of a deleted one (ext4 reuses them).
    #[serde(default)]
    pub chroot_born: Option<u128>,
    /// The process that ran the hook (Nix), which starts the builder.
    pub holder_pid: u32,
    /// Its start time (`/proc/<pid>/stat` field 22), so a reused pid does not count.
    pub holder_start: u64,
    /// When the lease was taken (seconds since the epoch).
    pub since: u64,
    /// The PID namespaces (`/proc/<pid>/ns/pid` inodes) of processes seen rooted in the
    /// chroot: the build's, which its processes cannot leave.
    #[serde(default)]
    pub pid_namespaces: Vec<u64>,
    /// The build users (host uids) of the Nix process that ran the hook, from the
    /// `userpool/<uid>` locks it holds ([`Holder::build_users`]): the build runs as one of
    /// them, and a builder cannot change its host uid. Empty without build users.
    #[serde(default)]
    pub build_users: Vec<u32>,
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

    /// The process `pid`, if it runs (a zombie, which no one has reaped yet, does not).
    pub fn of(pid: u32) -> Option<Holder> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) may hold spaces and parentheses; fields after it don't.
        let after_name = &stat[stat.rfind(')')? + 1..];
        let mut fields = after_name.split_whitespace();
        if matches!(fields.next(), Some("Z" | "X")) {
            return None;
        }
        let start = fields.nth(18)?.parse().ok()?;
        Some(Holder { pid, start })
    }

    fn alive(self) -> bool {
        Holder::of(self.pid) == Some(self)
    }

    /// The build users this Nix process holds: Nix keeps `<state dir>/userpool/<uid>` open
    /// and locked for as long as a build runs as `<uid>` (checked on Nix 2.8). A Nix running
    /// several builds at once holds one per build, and nothing at hook time says which is
    /// this build's, so all are returned (a lease kept by them can only last longer). Empty
    /// without build users, or with `auto-allocate-uids`, whose `userpool2/slot-<n>` files do
    /// not name the uid.
    pub fn build_users(self) -> Vec<u32> {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{}/fd", self.pid)) else {
            return Vec::new();
        };
        let mut users: Vec<u32> = fds
            .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
            .filter(|target| {
                target
                    .parent()
                    .is_some_and(|d| d.file_name() == Some("userpool".as_ref()))
            })
            .filter_map(|target| target.file_name()?.to_str()?.parse::<u32>().ok())
            .filter(|uid| *uid != 0)
            .collect();
        users.sort_unstable();
        users.dedup();
        users
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
        let dir = StateDir::open(&self.dir).map_err(|e| LeaseError::Io(e.to_string()))?;
        let chroot_id = std::fs::metadata(req.chroot)
            .map(|m| (m.dev(), m.ino()))
            .map_err(|e| io(req.chroot, e))?;
        let build_users = holder.build_users();
        let started = std::time::Instant::now();
        loop {
            let held = {
                let left = req.wait.saturating_sub(started.elapsed());
                let _lock = lock(&dir, left)?;
                let held = held(&dir, req.gpus, Some((req.chroot, chroot_id)), Some(holder));
                let free: Vec<u32> = req
                    .gpus
                    .iter()
                    .copied()
                    .filter(|g| !held.iter().any(|h| h.gpu == *g))
                    .collect();
                if free.len() >= req.count {
                    let mut usage = usage(&dir);
                    let picked = least_used(&free, &usage, req.count);
                    for gpu in &picked {
                        let record = LeaseRecord {
                            gpu: *gpu,
                            derivation: req.derivation.to_string(),
                            chroot: req.chroot.to_path_buf(),
                            chroot_id,
                            chroot_born: born(req.chroot),
                            holder_pid: holder.pid,
                            holder_start: holder.start,
                            since: now_secs(),
                            pid_namespaces: Vec::new(),
                            build_users: build_users.clone(),
                        };
                        let path = self.file(*gpu);
                        let mut bytes = serde_json::to_vec(&record).expect("plain data");
                        bytes.push(b'\n');
                        dir.write_atomic(&file_name(*gpu), &bytes, 0o644, false)
                            .map_err(|e| io(&path, e))?;
                        *usage.entry(*gpu).or_default() += 1;
                    }
                    let path = self.dir.join(USAGE_FILE);
                    let mut bytes = serde_json::to_vec(&usage).expect("plain data");
                    bytes.push(b'\n');
                    dir.write_atomic(USAGE_FILE, &bytes, 0o644, false)
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
        let dir = StateDir::open_existing(&self.dir).map_err(|e| LeaseError::Io(e.to_string()))?;
        let (held, usage) = match &dir {
            Some(d) => (held(d, gpus, None, None), usage(d)),
            None => (Vec::new(), BTreeMap::new()),
        };
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
        Ok(least_used(&free, &usage, count))
    }

    /// The lease file of `gpu`.
    pub fn file(&self, gpu: u32) -> PathBuf {
        self.dir.join(format!("nvidia{gpu}.lease"))
    }

    /// Reads the lease file of `gpu`, if any (whether or not its build still runs).
    pub fn record(&self, gpu: u32) -> Option<LeaseRecord> {
        let dir = StateDir::open_existing(&self.dir).ok()??;
        serde_json::from_slice(&dir.read_bytes(&file_name(gpu)).ok()?).ok()
    }
}

fn file_name(gpu: u32) -> String {
    format!("nvidia{gpu}.lease")
}

/// The live leases on `gpus`. With `mine` (under the lock), stale lease files and the build's
/// own earlier ones are removed; without it nothing is changed.
fn held(
    dir: &StateDir,
    gpus: &[u32],
    mine: Option<(&Path, (u64, u64))>,
    me: Option<Holder>,
) -> Vec<LeaseRecord> {
    let mut procs: Option<Processes> = None;
    let mut held = Vec::new();
    for gpu in gpus {
        let name = file_name(*gpu);
        let mut record = match dir.read_bytes(&name) {
            Ok(bytes) => serde_json::from_slice::<LeaseRecord>(&bytes)
                .ok()
                .map(|record| Checked {
                    record,
                    pid_namespaces_grew: false,
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => None,
        };
        let live = record.as_mut().is_some_and(|r| {
            let own = mine.is_some_and(|(c, id)| c == r.record.chroot && id == r.record.chroot_id);
            !own && r.is_live(me, procs.get_or_insert_with(Processes::scan))
        });
        match record {
            Some(r) if live => {
                // Under the lock: keep the namespaces seen, for when the builder leaves its
                // chroot (a failed write only loses that memory).
                if mine.is_some() && r.pid_namespaces_grew {
                    let mut bytes = serde_json::to_vec(&r.record).expect("plain data");
                    bytes.push(b'\n');
                    let _ = dir.write_atomic(&name, &bytes, 0o644, false);
                }
                held.push(r.record)
            }
            _ if mine.is_some() => {
                let _ = dir.remove(&name);
            }
            _ => {}
        }
    }
    held
}

/// Takes the exclusive lock of the lease directory, waiting at most `wait` (another hook holds
/// it only for a moment; a lock held longer is a stuck or hostile process, and the build fails
/// rather than hang).
fn lock(dir: &StateDir, wait: Duration) -> Result<nix::fcntl::Flock<std::fs::File>, LeaseError> {
    let path = dir.path.join(LOCK_FILE);
    let started = std::time::Instant::now();
    let mut file = dir
        .open_lock(LOCK_FILE)
        .map_err(|e| LeaseError::Io(format!("cannot open {}: {e}", path.display())))?;
    loop {
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((f, nix::Error::EWOULDBLOCK)) => {
                // At least a second, so that a lease wait of 0 still rides out a peer's
                // moment under the lock.
                if started.elapsed() >= wait.max(Duration::from_secs(1)) {
                    return Err(LeaseError::Io(format!(
                        "the GPU lease lock {} stayed held for {} s: find the process holding it (`fuser {}`)",
                        path.display(),
                        started.elapsed().as_secs(),
                        path.display()
                    )));
                }
                file = f;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err((_, e)) => {
                return Err(LeaseError::Io(format!(
                    "cannot lock {}: {e}",
                    path.display()
                )))
            }
        }
    }
}

fn usage(dir: &StateDir) -> BTreeMap<u32, u64> {
    dir.read_bytes(USAGE_FILE)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// A lease record being checked, and whether the check saw new PID namespaces of its build.
struct Checked {
    record: LeaseRecord,
    pid_namespaces_grew: bool,
}

impl Checked {
    /// Whether its build can still use the GPU (see the module documentation). `me` is the
    /// Nix process running the asking hook.
    fn is_live(&mut self, me: Option<Holder>, procs: &Processes) -> bool {
        let r = &mut self.record;
        let same_dir = std::fs::metadata(&r.chroot).is_ok_and(|m| {
            (m.dev(), m.ino()) == r.chroot_id
                && (r.chroot_born.is_none() || r.chroot_born == born(&r.chroot))
        });
        if !same_dir {
            return false;
        }
        let mut live = false;
        for ns in procs.namespaces_rooted_at(r.chroot_id) {
            live = true;
            if Some(ns) != procs.own_namespace && !r.pid_namespaces.contains(&ns) {
                r.pid_namespaces.push(ns);
                self.pid_namespaces_grew = true;
            }
        }
        if live
            || r.pid_namespaces
                .iter()
                .any(|ns| procs.namespaces.contains(ns))
        {
            return true;
        }
        let holder = Holder {
            pid: r.holder_pid,
            start: r.holder_start,
        };
        (me != Some(holder) && holder.alive())
            || r.build_users.iter().any(|uid| procs.uid_in_use(*uid))
    }
}

/// What the processes on the host are, as far as leases care: each one's root directory and
/// PID namespace.
struct Processes {
    /// (root directory (device, inode), PID namespace inode) of every process we may inspect.
    all: Vec<((u64, u64), Option<u64>)>,
    /// The PID namespaces with at least one process.
    namespaces: HashSet<u64>,
    /// This hook's own PID namespace (never recorded as a build's).
    own_namespace: Option<u64>,
    /// The uids (real, effective, saved, filesystem) of every process, read when first asked.
    uids: std::cell::OnceCell<HashSet<u32>>,
}

impl Processes {
    fn scan() -> Processes {
        let ns_of = |dir: &Path| std::fs::metadata(dir.join("ns/pid")).ok().map(|m| m.ino());
        let mut all = Vec::new();
        if let Ok(entries) = std::fs::read_dir("/proc") {
            for e in entries.filter_map(Result::ok) {
                if !e
                    .file_name()
                    .as_encoded_bytes()
                    .iter()
                    .all(u8::is_ascii_digit)
                {
                    continue;
                }
                let path = e.path();
                if let Ok(m) = std::fs::metadata(path.join("root")) {
                    all.push(((m.dev(), m.ino()), ns_of(&path)));
                }
            }
        }
        let namespaces = all.iter().filter_map(|(_, ns)| *ns).collect();
        Processes {
            all,
            namespaces,
            own_namespace: ns_of(Path::new("/proc/self")),
            uids: std::cell::OnceCell::new(),
        }
    }

    /// Whether some live process runs as `uid` (any of its four uids, from
    /// `/proc/<pid>/status`). Zombies do not count: they hold no files, and an orphaned one
    /// stays until its new parent reaps it, which a container's init may never do.
    fn uid_in_use(&self, uid: u32) -> bool {
        self.uids
            .get_or_init(|| {
                let mut uids = HashSet::new();
                for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                    let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
                        continue;
                    };
                    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
                    let dead = field("State:").is_some_and(|s| {
                        matches!(s.trim_start().as_bytes().first(), Some(b'Z' | b'X'))
                    });
                    if let (false, Some(line)) = (dead, field("Uid:")) {
                        uids.extend(
                            line.split_whitespace()
                                .filter_map(|u| u.parse::<u32>().ok()),
                        );
                    }
                }
                uids
            })
            .contains(&uid)
    }

    /// The PID namespaces of the processes rooted at `root` (one entry per process).
    fn namespaces_rooted_at(&self, root: (u64, u64)) -> Vec<u64> {
        self.all
            .iter()
            .filter(|(r, _)| *r == root)
            .map(|(_, ns)| ns.unwrap_or(0))
            .collect()
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

/// The birth time of `path`, when its filesystem records one.
fn born(path: &Path) -> Option<u128> {
    let t = std::fs::metadata(path).ok()?.created().ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_nanos())
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The number of GPUs a build needs: the derivation's [`GPUS_ATTR`] when set (`value`),
/// else `gpus_per_build`; never more than `max` (`max_gpus_per_build`, 0: no cap) or the GPUs
/// `available`. Errors say what is wrong with the value.
pub fn wanted(
    value: Option<&str>,
    gpus_per_build: u32,
    max: u32,
    available: usize,
) -> Result<usize, String> {
    let available = if max > 0 {
        available.min(max as usize)
    } else {
        available
    };
    let Some(text) = value else {
        let n = gpus_per_build as usize;
        return if n <= available {
            Ok(n)
        } else {
            Err(format!(
                "gpus_per_build = {n} but a build may have only {available} GPU(s) here: lower \
                 gpus_per_build in the config"
            ))
        };
    };
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 && n <= available => Ok(n),
        _ => Err(format!(
            "{GPUS_ATTR} = {text:?} is not a whole number from 1 to {available} (the GPUs a \
             build may have on this host{}): fix the derivation's {GPUS_ATTR}",
            if max > 0 {
                format!(", max_gpus_per_build = {max}")
            } else {
                String::new()
            }
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
        let usage = usage(&StateDir::open(&f.leases.dir).unwrap());
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
        // Issue 12, finding 2: no grace window. An hour old, with no process in the sandbox
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
    fn a_lease_lives_while_its_builds_pid_namespace_does() {
        // Issue 12, finding 2: a builder that left its chroot cannot leave its PID namespace.
        if !cuda_sandbox_testkit::root_available(
            "a_lease_lives_while_its_builds_pid_namespace_does",
        ) {
            return;
        }
        let f = fixture();
        let mut build = Command::new("unshare")
            .args(["--pid", "--fork", "sleep", "600"])
            .spawn()
            .unwrap();
        let inner = (0..200)
            .find_map(|_| {
                let children =
                    std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", build.id()))
                        .ok()?;
                let pid = children.split_whitespace().next().map(str::to_string);
                if pid.is_none() {
                    std::thread::sleep(Duration::from_millis(10));
                }
                pid
            })
            .unwrap();
        let ns = std::fs::metadata(format!("/proc/{inner}/ns/pid"))
            .unwrap()
            .ino();
        let a = f.chroot("a");
        let nix = f.nix();
        f.try_take(&a, &[0], 1, nix, Duration::ZERO).unwrap();
        f.kill(nix);
        let mut record = f.leases.record(0).unwrap();
        record.pid_namespaces = vec![ns];
        std::fs::write(f.leases.file(0), serde_json::to_vec(&record).unwrap()).unwrap();
        // Nix is gone and nothing is rooted in the chroot, but the build's namespace lives.
        let b = f.chroot("b");
        assert!(f.try_take(&b, &[0], 1, f.nix(), Duration::ZERO).is_err());
        let _ = Command::new("kill")
            .args(["-KILL", inner.as_str()])
            .status();
        build.wait().unwrap();
        assert_eq!(f.take(&b, &[0], 1), [0]);
    }

    #[test]
    fn a_zombie_nix_holds_no_lease() {
        let f = fixture();
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped yet: a zombie until `wait`.
        let zombie = (0..500).find_map(|_| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let state = stat[stat.rfind(')')? + 1..].split_whitespace().next()? == "Z";
            if !state {
                std::thread::sleep(Duration::from_millis(10));
            }
            state.then_some(())
        });
        assert!(zombie.is_some(), "`true` did not end");
        assert_eq!(Holder::of(pid), None);
        let live = f.nix();
        assert_eq!(Holder::of(live.pid), Some(live));
        child.wait().unwrap();
    }

    #[test]
    fn a_lease_lives_while_its_build_user_runs_anything() {
        // Issue 12, finding 2: a builder that leaves its chroot before any hook has seen it
        // there, and whose Nix is then killed, is neither rooted in the chroot nor in a
        // recorded namespace. It still runs as its build user, which it cannot change.
        if !cuda_sandbox_testkit::root_available("a_lease_lives_while_its_build_user_runs_anything")
        {
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
    fn the_gpus_attribute_is_validated() {
        assert_eq!(wanted(None, 1, 0, 4), Ok(1));
        assert_eq!(wanted(Some("2"), 1, 0, 4), Ok(2));
        assert_eq!(wanted(Some(" 4 "), 1, 0, 4), Ok(4));
        for bad in ["0", "5", "-1", "two", "", "1.5"] {
            let e = wanted(Some(bad), 1, 0, 4).unwrap_err();
            assert!(
                e.starts_with(&format!(
                    "{GPUS_ATTR} = {bad:?} is not a whole number from 1 to 4"
                )),
                "{e}"
            );
        }
        assert!(wanted(None, 3, 0, 2)
            .unwrap_err()
            .contains("lower gpus_per_build"));
    }

    #[test]
    fn max_gpus_per_build_caps_what_a_derivation_may_ask() {
        // Issue 12, finding 7: without the cap a derivation could take every GPU.
        assert_eq!(wanted(Some("4"), 1, 0, 4), Ok(4));
        let e = wanted(Some("4"), 1, 2, 4).unwrap_err();
        assert!(
            e.contains("from 1 to 2") && e.contains("max_gpus_per_build = 2"),
            "{e}"
        );
        assert_eq!(wanted(Some("2"), 1, 2, 4), Ok(2));
        assert!(wanted(None, 3, 2, 4).is_err());
    }

    #[test]
    fn a_held_lock_makes_the_lease_fail_in_bounded_time() {
        // Issue 12, finding 7: a process holding the lock forever must not hang every build.
        let f = fixture();
        let dir = StateDir::open(&f.leases.dir).unwrap();
        let holder = dir.open_lock(LOCK_FILE).unwrap();
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
}
