//! Process liveness: whether a lease's build can still use its GPU, read from `/proc` (see
//! "When a lease ends" in the [`super`] module documentation).

use super::record::LeaseRecord;
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::UNIX_EPOCH;

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

    /// Whether this very process (same pid, same start time) still runs.
    pub fn alive(self) -> bool {
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

/// The birth time of `path`, when its filesystem records one.
pub fn born(path: &Path) -> Option<u128> {
    let t = std::fs::metadata(path).ok()?.created().ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_nanos())
}

/// A lease record being checked, and whether the check saw new PID namespaces of its build.
pub struct Checked {
    /// The record, with the namespaces the check saw added.
    pub record: LeaseRecord,
    /// Whether the check added namespaces (the record should be written back).
    pub grew: bool,
}

impl Checked {
    /// Whether its build can still use the GPU (see the module documentation). `me` is the
    /// Nix process running the asking hook.
    pub fn is_live(&mut self, me: Option<Holder>, procs: &Processes) -> bool {
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
                self.grew = true;
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
pub struct Processes {
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
    /// Reads every process's root and PID namespace from `/proc`.
    pub fn scan() -> Processes {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::Duration;

    #[test]
    fn a_zombie_nix_holds_no_lease() {
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
        let me = Holder::of(std::process::id()).unwrap();
        assert!(me.alive());
        child.wait().unwrap();
    }
}
