//! The lease a hook run took for its build, ended when the run gives up on the build.

use super::{Holder, LeaseError, LeaseRequest, Leases};
use crate::fit::Fit;
use crate::slot::Slot;
use std::path::PathBuf;

/// The slots [`Leases::acquire_guarded`] leased to one build. Dropped uncommitted (the hook
/// failed after taking it, so Nix never starts the build, and nothing else would end the lease
/// before that Nix ends), it removes its lease files; once [`LeaseGuard::commit`]ted (the
/// answer for Nix was rendered and the manifest written), the lease stays, for the next hook
/// to judge. A lease that cannot be ended on drop stays too (the next hook judges it as usual).
#[derive(Debug)]
#[must_use = "dropping the guard ends the lease"]
pub(crate) struct LeaseGuard {
    leases: Leases,
    slots: Vec<Slot>,
    chroot: PathBuf,
    holder: Holder,
    committed: bool,
}

impl Leases {
    /// [`Leases::acquire`], the lease held by a guard: ended when the guard is dropped
    /// uncommitted (the hook failed after taking it), kept once it is committed.
    pub(crate) fn acquire_guarded(
        &self,
        req: &LeaseRequest,
        fit: Option<&Fit>,
        holder: Holder,
    ) -> Result<LeaseGuard, LeaseError> {
        Ok(LeaseGuard {
            slots: self.acquire_fitting(req, fit, holder)?,
            leases: self.clone(),
            chroot: req.chroot.to_path_buf(),
            holder,
            committed: false,
        })
    }
}

impl LeaseGuard {
    /// The slots leased.
    pub(crate) fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// Keeps the lease for the build: it is no longer ended on drop.
    pub(crate) fn commit(&mut self) {
        self.committed = true;
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if !self.committed {
            let _ = self.leases.release(&self.slots, &self.chroot, self.holder);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::lease::{Holder, LeaseRequest, Leases};
    use crate::slot::Slot;
    use std::time::Duration;

    /// Takes one of two GPUs for a build in `chroot` under `runtime`.
    fn take(leases: &Leases, chroot: &std::path::Path) -> super::LeaseGuard {
        let req = LeaseRequest {
            slots: &[Slot::Gpu(0), Slot::Gpu(1)],
            count: 1,
            chroot,
            derivation: "/nix/store/x-a.drv",
            wait: Duration::ZERO,
        };
        let me = Holder::of(std::process::id()).expect("this process runs");
        leases.acquire_guarded(&req, None, me).expect("a free GPU")
    }

    #[test]
    fn a_dropped_guard_ends_its_lease_unless_committed() {
        let t = tempfile::tempdir().unwrap();
        let leases = Leases::new(&t.path().join("run"));
        let chroot = t.path().join("chroot");
        std::fs::create_dir(&chroot).unwrap();

        let guard = take(&leases, &chroot);
        let slot = guard.slots()[0];
        assert!(leases.record(slot).is_some(), "the lease was written");
        drop(guard);
        assert!(
            leases.record(slot).is_none(),
            "an uncommitted guard ends it"
        );

        let mut guard = take(&leases, &chroot);
        let slot = guard.slots()[0];
        guard.commit();
        drop(guard);
        let kept = leases.record(slot).expect("a committed guard keeps it");
        assert_eq!(kept.chroot, chroot);
    }
}
