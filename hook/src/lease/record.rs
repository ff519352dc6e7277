//! The record store: one JSON file per leased slot ([`LeaseRecord`]): `nvidia<N>.lease` for a
//! whole GPU, `nvidia<N>-gi<G>-ci<C>.lease` for a MIG instance; and the per-slot count of
//! leases granted, `usage.json`, all in the verified lease directory and each written
//! atomically (temporary file + rename).

use crate::slot::{MigSlice, Slot};
use crate::statedir::StateDir;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The per-slot count of leases granted (by [`Slot::key`]), which orders the free slots.
pub(super) type Usage = BTreeMap<String, u64>;

const USAGE_FILE: &str = "usage.json";

/// One leased slot: the file `<slot key>.lease`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The GPU (`/dev/nvidia<gpu>`).
    pub(crate) gpu: u32,
    /// The MIG instance of it, when the lease is one slice (absent: the whole GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mig: Option<MigSlice>,
    /// The derivation being built, for messages.
    pub derivation: String,
    /// The build's sandbox root (the chroot directory Nix passed the hook).
    pub chroot: PathBuf,
    /// Device and inode of `chroot` when the lease was taken.
    pub chroot_id: (u64, u64),
    /// Birth time of `chroot` (nanoseconds since the epoch), where the filesystem keeps one:
    /// a directory made anew can get the inode of a deleted one (ext4 reuses them).
    pub(crate) chroot_born: Option<u128>,
    /// The process that ran the hook (Nix), which starts the builder.
    pub(crate) holder_pid: u32,
    /// Its start time (`/proc/<pid>/stat` field 22), so a reused pid does not count.
    pub(crate) holder_start: u64,
    /// When the lease was taken (seconds since the epoch).
    pub since: u64,
    /// The build's builders as hooks saw them: the outermost init of the PID namespaces of the
    /// processes seen rooted in the chroot, or a child of the holder that may be this build's
    /// after it left its chroot. The build lives while one runs; recorded by pid and start
    /// time, which are never reused together (a bare namespace inode is).
    #[serde(default)]
    pub builders: Vec<Builder>,
    /// The build users (host uids) of the Nix process that ran the hook, from the
    /// `userpool/<uid>` locks it holds ([`super::Holder::build_users`]), or the build's own
    /// first id when Nix allocates them ([`super::Holder::allocated_ids`]): the build runs as
    /// one of them, and a builder cannot change its host uid (beyond the ids its user
    /// namespace maps). Empty without build users.
    #[serde(default)]
    pub build_users: Vec<u32>,
    /// How many host ids each of `build_users` stands for, from it on: 65536 for a
    /// `uid-range` build ([`super::Holder::allocated_ids`]), else 1.
    pub ids_per_build_user: u32,
}

#[cfg(test)]
impl LeaseRecord {
    /// A record with made-up values, for unit tests.
    pub(crate) fn test_record() -> LeaseRecord {
        LeaseRecord {
            gpu: 0,
            mig: None,
            derivation: "/nix/store/x-test.drv".into(),
            chroot: "/nonexistent".into(),
            chroot_id: (0, 0),
            chroot_born: None,
            holder_pid: 0,
            holder_start: 0,
            since: 0,
            builders: Vec::new(),
            build_users: Vec::new(),
            ids_per_build_user: 1,
        }
    }
}

/// A builder: the init (PID 1) of a build's PID namespace, which no process of the build can
/// leave.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Builder {
    /// Its pid (on the host).
    pub pid: u32,
    /// Its start time (`/proc/<pid>/stat` field 22).
    pub start: u64,
    /// Its PID namespace's inode, for messages and tests.
    pub pid_namespace: u64,
    /// Its real uid on the host.
    pub uid: u32,
}

impl LeaseRecord {
    /// The slot the record leases.
    pub(crate) fn slot(&self) -> Slot {
        Slot::of(self.gpu, self.mig)
    }
}

const SUFFIX: &str = ".lease";

/// The name of `slot`'s lease file in the lease directory.
pub(super) fn file_name(slot: Slot) -> String {
    format!("{}{SUFFIX}", slot.key())
}

/// The slots of the lease files in the lease directory.
pub(super) fn slots(dir: &StateDir) -> Vec<Slot> {
    let mut slots: Vec<Slot> = dir
        .names()
        .iter()
        .filter_map(|n| Slot::from_key(n.strip_suffix(SUFFIX)?))
        .collect();
    slots.sort_unstable();
    slots
}

/// What reading a lease file found.
pub(super) enum Read {
    /// No lease file: the GPU is free.
    Absent,
    /// A lease file that cannot be read or parsed: holds no GPU.
    Junk,
    /// A lease.
    Lease(LeaseRecord),
}

/// Reads `slot`'s lease file; one naming another slot is junk.
pub(super) fn read(dir: &StateDir, slot: Slot) -> Read {
    match dir.read_bytes(&file_name(slot)) {
        Ok(bytes) => serde_json::from_slice::<LeaseRecord>(&bytes)
            .ok()
            .filter(|r| r.slot() == slot)
            .map_or(Read::Junk, Read::Lease),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Read::Absent,
        Err(_) => Read::Junk,
    }
}

/// Writes `record` as its slot's lease file.
pub(super) fn write(dir: &StateDir, record: &LeaseRecord) -> std::io::Result<()> {
    write_json(dir, &file_name(record.slot()), record)
}

/// Removes `slot`'s lease file.
pub(super) fn remove(dir: &StateDir, slot: Slot) -> std::io::Result<()> {
    dir.remove(&file_name(slot))
}

/// The per-slot lease counts; none when the file is missing or unreadable (it only orders).
pub(super) fn usage(dir: &StateDir) -> Usage {
    dir.read_bytes(USAGE_FILE)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Writes the per-slot lease counts.
pub(super) fn write_usage(dir: &StateDir, usage: &Usage) -> std::io::Result<()> {
    write_json(dir, USAGE_FILE, usage)
}

/// Writes `value` as one line of JSON to `name`, atomically, mode 0644 (leases describe
/// running builds: they need not survive a reboot, so the write is not synced).
fn write_json(dir: &StateDir, name: &str, value: &impl Serialize) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    dir.write_atomic(name, &bytes, 0o644, false)
}
