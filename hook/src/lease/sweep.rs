//! Staleness clean-up: the live leases on a set of slots (and on what overlaps them); under
//! the lock, stale lease files (and the asking build's own earlier ones) are removed.

use super::liveness::{Checked, Holder, Processes};
use super::record::{self, LeaseRecord, Read};
use crate::slot::Slot;
use crate::statedir::StateDir;
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The build asking, under the lock: its chroot (path, device and inode) and its Nix.
#[derive(Debug, Clone, Copy)]
pub(super) struct Asker<'a> {
    /// The build's chroot.
    pub chroot: &'a Path,
    /// Its device and inode.
    pub chroot_id: (u64, u64),
    /// The Nix process running the asking hook.
    pub holder: Holder,
}

/// The live leases on `slots` and on the slots overlapping them (a whole GPU and its MIG
/// instances). With `asker` (under the lock), stale lease files and the asker's own earlier
/// ones are removed, and namespaces newly seen are written back; without it nothing is
/// changed.
pub(super) fn held(dir: &StateDir, slots: &[Slot], asker: Option<Asker>) -> Vec<LeaseRecord> {
    let mut procs: Option<Processes> = None;
    let mut held = Vec::new();
    let files = record::slots(dir);
    // Where the leased builds run, so that no build's builder is taken for another's: each
    // record's chroot, while its path still names that directory (an inode freed with the
    // chroot may be given to any directory later, an input among them).
    let leased: HashSet<(u64, u64)> = files
        .iter()
        .filter_map(|slot| match record::read(dir, *slot) {
            Read::Lease(r) => std::fs::metadata(&r.chroot)
                .is_ok_and(|m| (m.dev(), m.ino()) == r.chroot_id)
                .then_some(r.chroot_id),
            _ => None,
        })
        .collect();
    for slot in files.iter().filter(|f| slots.iter().any(|s| s.overlaps(f))) {
        let mut checked = match record::read(dir, *slot) {
            Read::Absent => continue,
            Read::Junk => None,
            Read::Lease(record) => Some(Checked {
                record,
                grew: false,
            }),
        };
        let live = checked.as_mut().is_some_and(|c| {
            let own = asker
                .is_some_and(|a| a.chroot == c.record.chroot && a.chroot_id == c.record.chroot_id);
            !own && c.is_live(
                asker.map(|a| a.holder),
                procs.get_or_insert_with(Processes::scan),
                &leased,
            )
        });
        match checked {
            Some(c) if live => {
                // Keep the namespaces seen, for when the builder leaves its chroot (a failed
                // write only loses that memory).
                if asker.is_some() && c.grew {
                    let _ = record::write(dir, &c.record);
                }
                held.push(c.record)
            }
            _ if asker.is_some() => {
                let _ = record::remove(dir, *slot);
            }
            _ => {}
        }
    }
    held
}
