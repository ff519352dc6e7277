//! GPU leases: with `gpus_per_build > 0`, each tagged build gets GPUs, or one MIG instance
//! of a GPU, that no other running build holds, the least used first.
//!
//! What a lease holds is a [`Slot`]: a whole GPU, or one MIG compute instance (`slot`). One
//! file per leased slot, `<runtime_dir>/leases/nvidia<N>.lease` or
//! `nvidia<N>-gi<G>-ci<C>.lease` (JSON [`LeaseRecord`]), written atomically in a verified
//! [`StateDir`] (root-owned, not a symlink, checked on every run) by `record`. Every decision
//! is taken under an exclusive `flock` of `<runtime_dir>/leases/.lock` (`lock`), so two hooks
//! never pick the same slot (nor a whole GPU and a slice of it); the wait for that lock is
//! bounded by the lease wait, like the wait for a free slot. `choice` picks the free slots,
//! least used first by a per-slot count of leases granted (`usage.json`), then in order;
//! `sweep` finds the live leases and removes stale ones; `liveness` says which are live. A
//! slice's lease lives and ends by exactly the rules of a GPU's.
//!
//! # When a lease ends
//!
//! The hook exits before the build starts, so nothing of it can hold the lease; the next hook
//! that needs a GPU judges it. A lease is alive while its build can still use the GPU:
//!
//! 1. the chroot directory Nix passed still exists with the same inode and birth time (Nix
//!    deletes it when the build ends; a rebuild of the same derivation makes a new one), and
//! 2. one of:
//!    - a builder recorded in the lease runs ([`LeaseRecord::builders`]: the init of the
//!      build's outermost PID namespace, the process Nix started, by pid and start time, never
//!      reused together). A process cannot leave its PID namespace, and when the init ends the
//!      kernel kills the rest (pid_namespaces(7)), so the build runs exactly as long as its
//!      init. Once every recorded builder has ended, the build has ended: nothing else is
//!      looked at. A namespace the build makes inside its own (`unshare -pf`) has an init of
//!      its own, which the build can kill while it goes on: it is never recorded;
//!    - some process has the chroot as its root (`/proc/<pid>/root`): the builder and its
//!      children after Nix's `pivot_root`. From it the parents are followed up to the process
//!      whose parent is in this hook's PID namespace (Nix's), the build's outermost init, which
//!      is recorded. An orphan is re-parented only within its PID namespace and the kernel
//!      refuses `CLONE_PARENT` to a namespace's init, so no process of a build can make a
//!      parent outside it;
//!    - no builder was recorded, the Nix process that ran the hook (recorded by pid and start
//!      time) runs, and either it has not set up the sandbox yet (no `/proc` mount point in the
//!      chroot: the build is pending; a hook of that same Nix knows it has moved on), or one of
//!      its children is the init of a PID namespace that has left Nix's root and is not rooted
//!      in another build's chroot: by device and inode the chroot of another lease record, or
//!      a `<store>/<drv>.chroot` (or `…/root`) directory that lacks a store path's canonical
//!      metadata (mode 0555, modification time 1; an untagged build's chroot, which no record
//!      names). A name alone never counts: a build's input may be named `x.drv.chroot`, and a
//!      builder can `chroot` into it. Nix starts each sandboxed builder as its own direct
//!      child, the init of a new PID namespace (seen on Nix 2.8, 2.26 and 2.34), which stays
//!      rooted where Nix is until its `pivot_root`. Such a child is this build's builder
//!      setting up when it has mounts in this chroot (Nix binds the chroot onto itself first),
//!      and otherwise another build starting: a build that left its chroot cannot reach the
//!      host's root again. A child that left Nix's root, and is not in another build's chroot,
//!      may be this build's builder after it left its chroot. Either is recorded, and keeps
//!      the lease. A set-up build with no such child has ended, even while its Nix goes on (a
//!      failed build under `--keep-going`), and builds of one Nix are told apart without
//!      build users;
//!    - the Nix process is gone, no builder was recorded, and a live process runs as one of
//!      the build users that Nix held when the hook ran ([`LeaseRecord::build_users`], from
//!      its `userpool/<uid>` locks), or, when Nix allocates the ids (`auto-allocate-uids`),
//!      as one of the build's own ids: its first, read from the chroot Nix made for it, and
//!      for a `uid-range` build the 65536 from there that its user namespace maps
//!      ([`Holder::allocated_ids`]). An unprivileged builder cannot change its host uid beyond
//!      those, so this holds a builder that left its chroot before any hook saw it, after its
//!      Nix was killed. Nix kills every process of a build user (or of the build's cgroup,
//!      when it uses one) before it hands the ids to another build, so this can only make an
//!      ended lease last longer, never a live one end.
//!
//! Nix 2.8 (checked on Debian's nix-bin) leaves the chroot behind when `nix-build` or the
//! daemon is killed with SIGKILL, and the builder runs on, orphaned: its GPU is still in use
//! until it ends, and the lease with it. Where these rules cannot tell, the lease stays: a
//! wrong guess only makes a build wait (up to `lease_wait_seconds`) and fail naming the holder.

mod choice;
mod guard;
mod ids;
mod liveness;
mod lock;
mod nix_parent;
mod record;
mod sweep;

pub use crate::slot::Slot;
pub(crate) use guard::LeaseGuard;
pub use ids::IdRange;
pub(crate) use liveness::born;
pub use liveness::Holder;
pub use lock::LockError;
pub use record::{Builder, LeaseRecord};

/// The derivation attribute (plain env entry, or in `__json`) asking for a number of GPUs.
pub(crate) use crate::drv::GPUS_ATTR;

use crate::fit::Fit;
use crate::statedir::StateDir;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The device and inode of the build's `chroot`, which its lease records.
fn chroot_id(chroot: &Path) -> Result<(u64, u64), LeaseError> {
    let meta = std::fs::metadata(chroot).map_err(|e| LeaseError::Io(chroot.to_path_buf(), e))?;
    Ok((meta.dev(), meta.ino()))
}

/// How often a waiting hook looks again.
const POLL: Duration = Duration::from_millis(100);

/// Why no GPUs could be leased; one line.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Not enough free slots within the wait.
    #[error("{}", exhausted(*total, *wanted, features, held, *waited))]
    Exhausted {
        /// Slots (GPUs, MIG instances) the build could have had.
        total: usize,
        /// Slots this build needs.
        wanted: usize,
        /// The `cuda-sm-*` features the slots must satisfy (empty: any slots do).
        features: Vec<String>,
        /// Who holds the others: (slot, derivation, seconds held).
        held: Vec<(Slot, String, u64)>,
        /// How long the hook waited.
        waited: Duration,
    },
    /// The lease directory failed its check or could not be opened.
    #[error(transparent)]
    StateDir(#[from] crate::statedir::StateDirError),
    /// The build's chroot (the path Nix passed) could not be looked at, or a lease file
    /// written or removed: the path, and why.
    #[error("cannot use GPU lease {path}: {1}", path = .0.display())]
    Io(PathBuf, #[source] std::io::Error),
    /// The lease directory's lock could not be taken.
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// The one-line text of [`LeaseError::Exhausted`].
fn exhausted(
    total: usize,
    wanted: usize,
    features: &[String],
    held: &[(Slot, String, u64)],
    waited: Duration,
) -> String {
    let holders: Vec<String> = held
        .iter()
        .map(|(slot, drv, secs)| format!("{slot}: {drv} for {secs} s"))
        .collect();
    let slices = held
        .iter()
        .filter(|(s, _, _)| matches!(s, Slot::Mig(_)))
        .count();
    let noun = match slices {
        0 => "GPUs",
        n if n == held.len() => "MIG instances",
        _ => "GPUs and MIG instances",
    };
    let what = if !features.is_empty() && held.len() < total {
        let none = if wanted == 1 {
            "none of them satisfies".to_string()
        } else {
            format!("no {wanted} of them together satisfy")
        };
        format!(
            "{} of {total} {noun} are free but {none} {}",
            total - held.len(),
            features.join(", ")
        )
    } else if held.len() >= total {
        format!("all {total} {noun} are leased by other builds")
    } else {
        format!(
            "it needs {wanted} GPU(s) but only {} of {total} are free",
            total - held.len()
        )
    };
    format!(
        "{what} ({}); waited {} s: raise lease_wait_seconds or lower gpus_per_build \
         (or the derivation's {GPUS_ATTR})",
        holders.join(", "),
        waited.as_secs()
    )
}

impl LeaseError {
    /// The error for a build asking `wanted` of `slots.len()` slots while the leases `held`
    /// hold too many, after waiting `waited`.
    fn exhausted(
        slots: &[Slot],
        wanted: usize,
        fit: Option<&Fit>,
        held: Vec<LeaseRecord>,
        waited: Duration,
    ) -> Self {
        LeaseError::Exhausted {
            total: slots.len(),
            wanted,
            features: fit.map_or_else(Vec::new, |f| f.required.unmet_by(&[])),
            held: held
                .into_iter()
                .map(|r| (r.slot(), r.derivation, now_secs().saturating_sub(r.since)))
                .collect(),
            waited,
        }
    }
}

/// What one build asks for.
#[derive(Debug, Clone)]
pub struct LeaseRequest<'a> {
    /// The slots the build may be given: whole GPUs, MIG instances.
    pub slots: &'a [Slot],
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

    /// Leases `req.count` free slots to the build in `req.chroot`, least used first, waiting
    /// up to `req.wait` for other builds to end. `holder` is the Nix process that starts the
    /// build ([`Holder::parent`] in hook mode). The lease stays until a hook judges it
    /// ended; [`Leases::acquire_guarded`] ends it when the hook gives up on the build.
    pub fn acquire(&self, req: &LeaseRequest, holder: Holder) -> Result<Vec<Slot>, LeaseError> {
        self.acquire_fitting(req, None, holder)
    }

    /// [`Leases::acquire`], only a set of slots that satisfies `fit` (a build's `cuda-sm-*`
    /// features), waiting while only held sets do.
    pub(crate) fn acquire_fitting(
        &self,
        req: &LeaseRequest,
        fit: Option<&Fit>,
        holder: Holder,
    ) -> Result<Vec<Slot>, LeaseError> {
        let dir = StateDir::open(&self.dir)?;
        let chroot_id = chroot_id(req.chroot)?;
        let asker = sweep::Asker {
            chroot: req.chroot,
            chroot_id,
            holder,
        };
        let (build_users, ids_per_build_user) = match holder.allocated_ids(req.chroot) {
            Some(ids) => (vec![ids.first], ids.count),
            None => (holder.build_users(), 1),
        };
        let started = Instant::now();
        loop {
            let holders = {
                let _lock = lock::lock(&dir, req.wait.saturating_sub(started.elapsed()))?;
                let held = sweep::held(&dir, req.slots, Some(asker));
                let mut usage = record::usage(&dir);
                match choice::choose(req.slots, held, &usage, req.count, fit) {
                    Ok(picked) => {
                        let leases: Vec<LeaseRecord> = picked
                            .iter()
                            .map(|slot| LeaseRecord {
                                gpu: slot.gpu(),
                                mig: slot.mig(),
                                derivation: req.derivation.to_string(),
                                chroot: req.chroot.to_path_buf(),
                                chroot_id,
                                chroot_born: liveness::born(req.chroot),
                                holder_pid: holder.pid,
                                holder_start: holder.start,
                                since: now_secs(),
                                builders: Vec::new(),
                                build_users: build_users.clone(),
                                ids_per_build_user,
                            })
                            .collect();
                        self.write_all(&dir, &leases)?;
                        // The counts only order free slots: a failed write (a full disk) costs
                        // that order, not the build.
                        for slot in &picked {
                            *usage.entry(slot.key()).or_default() += 1;
                        }
                        let _ = record::write_usage(&dir, &usage);
                        return Ok(picked);
                    }
                    Err(holders) => holders,
                }
            };
            let waited = started.elapsed();
            if waited >= req.wait {
                return Err(LeaseError::exhausted(
                    req.slots, req.count, fit, holders, waited,
                ));
            }
            std::thread::sleep(POLL.min(req.wait - waited));
        }
    }

    /// Writes `leases`, all or none: when one cannot be written (a full runtime filesystem),
    /// those written are removed again, so no lease is left behind by a build that fails.
    fn write_all(&self, dir: &StateDir, leases: &[LeaseRecord]) -> Result<(), LeaseError> {
        for (i, lease) in leases.iter().enumerate() {
            if let Err(source) = record::write(dir, lease) {
                for written in &leases[..i] {
                    let _ = record::remove(dir, written.slot());
                }
                return Err(LeaseError::Io(self.file(lease.slot()), source));
            }
        }
        Ok(())
    }

    /// Ends the leases of the build in `chroot`, taken by this hook run, when the hook fails
    /// after [`Leases::acquire`] ([`LeaseGuard`]'s drop): Nix then never starts the build.
    /// Removes only lease files of `slots` that name this chroot (by path, device and inode)
    /// and `holder`.
    fn release(&self, slots: &[Slot], chroot: &Path, holder: Holder) -> Result<(), LeaseError> {
        let dir = StateDir::open(&self.dir)?;
        let chroot_id = chroot_id(chroot)?;
        let _lock = lock::lock(&dir, Duration::ZERO)?;
        for slot in slots {
            if let record::Read::Lease(r) = record::read(&dir, *slot) {
                if r.chroot == chroot
                    && r.chroot_id == chroot_id
                    && (r.holder_pid, r.holder_start) == (holder.pid, holder.start)
                {
                    record::remove(&dir, *slot)
                        .map_err(|source| LeaseError::Io(self.file(*slot), source))?;
                }
            }
        }
        Ok(())
    }

    /// The slots a build asking for `count` of `slots` would get now, without taking them or
    /// waiting (for `explain` and `exec`). Reads without the lock: lease files are written
    /// atomically.
    pub fn preview(&self, slots: &[Slot], count: usize) -> Result<Vec<Slot>, LeaseError> {
        self.preview_fitting(slots, count, None)
    }

    /// [`Leases::preview`], only a set that satisfies `fit`.
    pub(crate) fn preview_fitting(
        &self,
        slots: &[Slot],
        count: usize,
        fit: Option<&Fit>,
    ) -> Result<Vec<Slot>, LeaseError> {
        let dir = StateDir::open_existing(&self.dir)?;
        let (held, usage) = match &dir {
            Some(d) => (sweep::held(d, slots, None), record::usage(d)),
            None => (Vec::new(), record::Usage::new()),
        };
        choice::choose(slots, held, &usage, count, fit)
            .map_err(|held| LeaseError::exhausted(slots, count, fit, held, Duration::ZERO))
    }

    /// Whether a lease file (live or not yet judged ended) names the build in `chroot`, with
    /// device and inode `chroot_id`: what the build's other per-lease state lives by.
    pub fn names_chroot(&self, chroot: &Path, chroot_id: (u64, u64)) -> bool {
        let Ok(Some(dir)) = StateDir::open_existing(&self.dir) else {
            return false;
        };
        record::slots(&dir).into_iter().any(|slot| {
            matches!(record::read(&dir, slot),
                record::Read::Lease(r) if r.chroot == chroot && r.chroot_id == chroot_id)
        })
    }

    /// The lease file of `slot` (a GPU number is its whole GPU).
    pub fn file(&self, slot: impl Into<Slot>) -> PathBuf {
        self.dir.join(record::file_name(slot.into()))
    }

    /// Reads the lease file of `slot` (a GPU number is its whole GPU), if any (whether or not
    /// its build still runs).
    pub fn record(&self, slot: impl Into<Slot>) -> Option<LeaseRecord> {
        let dir = StateDir::open_existing(&self.dir).ok()??;
        match record::read(&dir, slot.into()) {
            record::Read::Lease(r) => Some(r),
            _ => None,
        }
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhaustion_is_one_line_naming_the_holders_and_the_fix() {
        let e = LeaseError::Exhausted {
            total: 2,
            wanted: 2,
            features: Vec::new(),
            held: vec![(Slot::Gpu(0), "/nix/store/x-a.drv".into(), 312)],
            waited: Duration::from_secs(600),
        }
        .to_string();
        assert_eq!(
            e,
            "it needs 2 GPU(s) but only 1 of 2 are free (nvidia0: /nix/store/x-a.drv for 312 s); \
             waited 600 s: raise lease_wait_seconds or lower gpus_per_build (or the \
             derivation's cudaSandboxGpus)"
        );
        let all = LeaseError::Exhausted {
            total: 1,
            wanted: 1,
            features: Vec::new(),
            held: vec![(Slot::Gpu(0), "/nix/store/x-test.drv".into(), 0)],
            waited: Duration::ZERO,
        };
        assert_eq!(
            all.to_string(),
            "all 1 GPUs are leased by other builds (nvidia0: /nix/store/x-test.drv for 0 s); \
             waited 0 s: raise lease_wait_seconds or lower gpus_per_build (or the \
             derivation's cudaSandboxGpus)"
        );
        let held = LeaseError::Lock(LockError::StayedHeld(
            "/run/cuda-sandbox/leases/.lock".into(),
            Duration::from_secs(2),
        ));
        assert_eq!(
            held.to_string(),
            "the GPU lease lock /run/cuda-sandbox/leases/.lock stayed held for 2 s: find the \
             process holding it (`fuser /run/cuda-sandbox/leases/.lock`)"
        );
    }

    /// With `cuda-sm-*` features, a shortage names them: free GPUs there are, none that fit.
    #[test]
    fn a_shortage_of_fitting_gpus_names_the_features() {
        let e = LeaseError::Exhausted {
            total: 2,
            wanted: 1,
            features: vec!["cuda-sm-90a".into()],
            held: vec![(Slot::Gpu(1), "/nix/store/x-a.drv".into(), 7)],
            waited: Duration::from_secs(120),
        }
        .to_string();
        assert!(
            e.starts_with(
                "1 of 2 GPUs are free but none of them satisfies cuda-sm-90a (nvidia1: \
                 /nix/store/x-a.drv for 7 s); waited 120 s: raise lease_wait_seconds"
            ),
            "{e}"
        );
    }
}
