//! Process liveness: whether a lease's build can still use its GPU, read from `/proc` (see
//! "When a lease ends" in the [`super`] module documentation).

use super::ids::IdRange;
use super::record::{Builder, LeaseRecord};
use std::cell::OnceCell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Read;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
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
    /// The Nix that ran this hook (the daemon's worker, or an in-process `nix-build`): the
    /// parent, only when it reads the hook's standard output as Nix does (see
    /// [`super::nix_parent`]). None for anything else (a wrapper that does not `exec` the hook,
    /// a shell), whose end would end the lease while the build runs.
    pub(crate) fn parent() -> Option<Holder> {
        let pid = std::os::unix::process::parent_id();
        super::nix_parent::reads_our_stdout(pid)
            .then(|| Holder::of(pid))
            .flatten()
    }

    /// The process `pid`, if it runs (a zombie, which no one has reaped yet, does not).
    pub fn of(pid: u32) -> Option<Holder> {
        let (_, start) = parent_and_start(pid)?;
        Some(Holder { pid, start })
    }

    /// Whether this very process (same pid, same start time) still runs.
    pub(crate) fn alive(self) -> bool {
        Holder::of(self.pid) == Some(self)
    }

    /// The build users this Nix process holds: Nix keeps `<state dir>/userpool/<uid>` open
    /// and locked for as long as a build runs as `<uid>` (checked on Nix 2.8). A Nix running
    /// several builds at once holds one per build, and nothing at hook time says which is
    /// this build's, so all are returned (a lease kept by them can only last longer). Empty
    /// without build users, or with `auto-allocate-uids`, whose `userpool2/slot-<n>` files do
    /// not name the uid ([`Holder::allocated_ids`]).
    pub fn build_users(self) -> Vec<u32> {
        let mut users: Vec<u32> = self
            .pool_locks("userpool")
            .filter_map(|name| name.parse::<u32>().ok())
            .filter(|uid| *uid != 0)
            .collect();
        users.sort_unstable();
        users.dedup();
        users
    }

    /// The host ids the build in `chroot` runs as when this Nix allocates them
    /// (`auto-allocate-uids`): it then holds `<state dir>/userpool2/slot-<n>` open and locked
    /// for each build, whose ids are `start-id + n × 65536` on (Nix's `AutoUserLock`, 2.12 to
    /// 2.34). `start-id` is a setting of that Nix process, so the slot alone does not give the
    /// uid; the chroot does, for this very build: before the hook runs, Nix makes its top
    /// `0:<uid>` mode 0750, or, for a `uid-range` build, `<uid>:<uid>` mode 0755, whose 65536
    /// ids from `<uid>` the build's user namespace maps (seen on Nix 2.26 and 2.34). None when
    /// this Nix holds no slot.
    pub fn allocated_ids(self, chroot: &Path) -> Option<IdRange> {
        self.pool_locks("userpool2")
            .any(|name| name.starts_with("slot-"))
            .then(|| IdRange::of_chroot(chroot))
            .flatten()
    }

    /// The names of the files in `<state dir>/<pool>/` this process holds open: Nix's build
    /// user locks.
    fn pool_locks(self, pool: &'static str) -> impl Iterator<Item = String> {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .into_iter()
            .flatten()
            .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
            .filter(move |target| {
                target
                    .parent()
                    .is_some_and(|d| d.file_name() == Some(pool.as_ref()))
            })
            .filter_map(|target| Some(target.file_name()?.to_str()?.to_string()))
    }
}

impl Builder {
    /// Whether this builder still runs: then its PID namespace, and every process of the
    /// build, lives (when a namespace's init ends, the kernel kills the rest, pid_namespaces(7)).
    pub(crate) fn alive(&self) -> bool {
        Holder::of(self.pid).is_some_and(|h| h.start == self.start)
    }
}

/// The birth time of `path`, when its filesystem records one.
pub(crate) fn born(path: &Path) -> Option<u128> {
    let t = std::fs::metadata(path).ok()?.created().ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_nanos())
}

/// Whether Nix has set up the sandbox of the build in `chroot`: the mount point of the
/// sandbox's `/proc` exists. Nix creates it in the builder's process, after the hook and before
/// the builder runs (seen on Nix 2.8, 2.26 and 2.34). Nothing else can make it first: the
/// chroot's top is root's, except in a `uid-range` build, whose top belongs to the build's
/// first id; but the directory above it, `<drv>.chroot`, is root's with mode 0700 (Nix 2.26
/// and 2.34), so no process of that id reaches the top before the builder is in it.
pub(super) fn sandbox_set_up(chroot: &Path) -> bool {
    std::fs::symlink_metadata(chroot.join("proc")).is_ok_and(|m| m.is_dir())
}

/// A lease record being checked, and whether the check learnt something to keep.
pub(super) struct Checked {
    /// The record, with the builders the check found added.
    pub record: LeaseRecord,
    /// Whether the check added builders (the record should be written back).
    pub grew: bool,
}

impl Checked {
    /// Whether its build can still use the GPU (see "When a lease ends" in the module
    /// documentation). `me` is the Nix process running the asking hook; `leased` holds the
    /// chroots (device, inode) of every lease record.
    pub(super) fn is_live(
        &mut self,
        me: Option<Holder>,
        procs: &Processes,
        leased: &HashSet<(u64, u64)>,
    ) -> bool {
        let r = &self.record;
        let same_dir = std::fs::metadata(&r.chroot).is_ok_and(|m| {
            (m.dev(), m.ino()) == r.chroot_id
                && (r.chroot_born.is_none() || r.chroot_born == born(&r.chroot))
        });
        if !same_dir {
            return false;
        }
        if r.builders.iter().any(Builder::alive) {
            return true;
        }
        let rooted = procs.rooted_at(r.chroot_id);
        if !rooted.is_empty() {
            // Only the build's outermost init is recorded: a namespace the build made inside
            // its own has an init the build can kill while it goes on.
            let outermost: HashSet<Builder> = rooted
                .iter()
                .filter_map(|pid| procs.outermost_init(*pid))
                .collect();
            for init in outermost {
                self.add(init);
            }
            return true;
        }
        // The builders recorded are the build's outermost inits: every process of the build
        // descends from one of them, so with all of them gone the build has ended. The
        // holder's children are not looked at again: its next build's builder is one of them
        // for a moment, and the lease would latch onto it.
        if !r.builders.is_empty() {
            return false;
        }
        let holder = Holder {
            pid: r.holder_pid,
            start: r.holder_start,
        };
        if holder.alive() {
            // The holder that runs the asking hook has moved on from this build, so its sandbox
            // is set up (Nix waits for that), even if this check cannot see it.
            if me != Some(holder) && !sandbox_set_up(&r.chroot) {
                return true;
            }
            // Set up, and no hook saw the builder in its chroot. While it runs, the builder is
            // the holder's child, the init of a PID namespace of its own. A child still rooted
            // where its Nix is has not entered its sandbox yet: it is this build's builder
            // setting up when it has mounts in this chroot (Nix binds the chroot onto itself
            // before it makes anything in it), and otherwise another build starting, never this
            // one after it left its chroot (a build cannot reach the host's root again). A
            // child rooted in the chroot of another build is that build's. Any other child may
            // be this build's builder, which left its chroot before a hook saw it. Either keeps
            // the lease, and is recorded.
            let store = chroot_store_dir(&r.chroot);
            let unknown: Vec<Builder> = procs
                .sandbox_children(holder)
                .into_iter()
                .filter(|(b, entered)| match entered {
                    Entered::NotYet => procs.mounts_under(b.pid, &r.chroot),
                    Entered::Left => !procs.in_other_build(b.pid, r.chroot_id, leased, store),
                })
                .map(|(b, _)| b)
                .collect();
            let live = !unknown.is_empty();
            for b in unknown {
                self.add(b);
            }
            return live;
        }
        // The holder is gone, and with it the way to find a builder no hook saw: one that
        // left its chroot still runs as its build user, or as one of its ids.
        r.build_users
            .iter()
            .any(|uid| procs.ids_in_use(*uid, r.ids_per_build_user))
    }

    /// Records `b`, an outermost init of the build (the only kind this hook records).
    fn add(&mut self, b: Builder) {
        if !self.record.builders.contains(&b) {
            self.record.builders.push(b);
            self.grew = true;
        }
    }
}

/// The store directory a Nix chroot `chroot` lies in: `<store>/<drv>.chroot` (Nix 2.8) or
/// `<store>/<drv>.chroot/root` (current Nix).
fn chroot_store_dir(chroot: &Path) -> Option<&Path> {
    let dir = if chroot.file_name() == Some("root".as_ref()) {
        chroot.parent()?
    } else {
        chroot
    };
    let is_chroot = dir.file_name()?.to_str()?.ends_with(".drv.chroot");
    is_chroot.then(|| dir.parent()).flatten()
}

/// Whether a builder has left its Nix's root for its sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entered {
    /// Still rooted where its Nix is: setting up its sandbox.
    NotYet,
    /// Rooted elsewhere: in its sandbox, or somewhere it went from there.
    Left,
}

/// One process as far as leases care.
struct Proc {
    pid: u32,
    ppid: u32,
    start: u64,
    /// Its root directory (device, inode).
    root: Option<(u64, u64)>,
    /// Its PID namespace's inode.
    pid_ns: Option<u64>,
}

/// What the processes on the host are, as far as leases care: each one's parent, start time,
/// root directory and PID namespace.
pub(super) struct Processes {
    all: Vec<Proc>,
    /// Where each pid is in `all`.
    index: HashMap<u32, usize>,
    /// This hook's own PID namespace (never recorded as a build's).
    own_namespace: Option<u64>,
    /// The uids (real, effective, saved, filesystem) of every process, read when first asked.
    uids: OnceCell<BTreeSet<u32>>,
    /// This process's mounts, read when first asked.
    own_mounts: OnceCell<Vec<Mount>>,
}

impl Processes {
    /// Reads every process's parent, start time, root and PID namespace from `/proc`.
    pub(super) fn scan() -> Processes {
        let ns_of = |dir: &Path| std::fs::metadata(dir.join("ns/pid")).ok().map(|m| m.ino());
        let mut all = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let path = e.path();
            let Some((ppid, start)) = parent_and_start(pid) else {
                continue;
            };
            all.push(Proc {
                pid,
                ppid,
                start,
                root: std::fs::metadata(path.join("root"))
                    .ok()
                    .map(|m| (m.dev(), m.ino())),
                pid_ns: ns_of(&path),
            });
        }
        let index = all.iter().enumerate().map(|(i, p)| (p.pid, i)).collect();
        Processes {
            all,
            index,
            own_namespace: ns_of(Path::new("/proc/self")),
            uids: OnceCell::new(),
            own_mounts: OnceCell::new(),
        }
    }

    /// The processes rooted at `root`.
    fn rooted_at(&self, root: (u64, u64)) -> Vec<u32> {
        self.all
            .iter()
            .filter(|p| p.root == Some(root))
            .map(|p| p.pid)
            .collect()
    }

    fn get(&self, pid: u32) -> Option<&Proc> {
        self.all.get(*self.index.get(&pid)?)
    }

    /// The outermost init of the PID namespaces `pid` is in: the ancestor whose parent is in
    /// this hook's PID namespace (Nix's: a sandboxed builder is Nix's own child), when it is
    /// the init of its namespace. None for a process of this hook's namespace.
    ///
    /// The walk up the parents is reliable: an orphan is re-parented only within its PID
    /// namespace, the kernel refuses `CLONE_PARENT` to a namespace's init, and no build can
    /// join an outer namespace, so every process of a build descends from its builder.
    fn outermost_init(&self, pid: u32) -> Option<Builder> {
        let mut p = self.get(pid)?;
        // Each step goes to a parent: no chain is longer than the process table.
        for _ in 0..self.all.len() {
            if p.pid_ns.is_none() || p.pid_ns == self.own_namespace {
                return None;
            }
            match self.get(p.ppid) {
                Some(parent) if parent.pid_ns.is_some() && parent.pid_ns != self.own_namespace => {
                    p = parent
                }
                _ => return self.as_init(p),
            }
        }
        None
    }

    /// `p` as a builder, if it is the init of its PID namespace: its parent is in another one
    /// and it is PID 1 in its own (`NSpid` in `/proc/<pid>/status`).
    fn as_init(&self, p: &Proc) -> Option<Builder> {
        let parent_ns = self.get(p.ppid).and_then(|q| q.pid_ns);
        if p.pid_ns.is_none() || parent_ns == p.pid_ns {
            return None;
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", p.pid)).ok()?;
        let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
        if field("NSpid:")?.split_whitespace().last()? != "1" {
            return None;
        }
        Some(Builder {
            pid: p.pid,
            start: p.start,
            pid_namespace: p.pid_ns?,
            uid: field("Uid:")?.split_whitespace().next()?.parse().ok()?,
        })
    }

    /// The children of `holder` that are the init of a PID namespace of their own: its
    /// sandboxed builders, each with whether it has left the holder's root (Nix moves a
    /// builder into its sandbox with `pivot_root`; until then it is rooted where Nix is).
    fn sandbox_children(&self, holder: Holder) -> Vec<(Builder, Entered)> {
        let holder_root = self.get(holder.pid).and_then(|h| h.root);
        self.all
            .iter()
            .filter(|p| p.ppid == holder.pid)
            .filter_map(|p| {
                let entered = if holder_root.is_some() && p.root == holder_root {
                    Entered::NotYet
                } else {
                    Entered::Left
                };
                Some((self.as_init(p)?, entered))
            })
            .collect()
    }

    /// Whether process `pid`, rooted where this hook is, has a mount at or below `dir` (in its
    /// mount table, paths are relative to its root).
    fn mounts_under(&self, pid: u32, dir: &Path) -> bool {
        read_mounts(&format!("/proc/{pid}/mountinfo"))
            .is_some_and(|mounts| mounts.iter().any(|m| m.mount_point.starts_with(dir)))
    }

    /// Whether process `pid`, a builder that left its Nix's root, runs in the chroot of
    /// another build than the one whose chroot is `own`: its root is, by device and inode, the
    /// chroot of another lease record (`leased`), or a Nix chroot in `store` (an untagged
    /// build's, which has no record). Anything else, and a name alone, counts as this build's
    /// (fail closed: the lease lasts longer).
    fn in_other_build(
        &self,
        pid: u32,
        own: (u64, u64),
        leased: &HashSet<(u64, u64)>,
        store: Option<&Path>,
    ) -> bool {
        let Some(root) = self.get(pid).and_then(|p| p.root) else {
            return false;
        };
        (root != own && leased.contains(&root))
            || store.is_some_and(|s| self.in_nix_chroot(pid, root, s))
    }

    /// Whether process `pid`, rooted at `root` (device, inode), runs in the chroot of a Nix
    /// build in `store`: its root is a mount of `<store>/<name>.drv.chroot` (or `…/root`), is
    /// that very directory, and is no store path's (see [`like_a_store_path`]): a build's input
    /// may be named like a chroot, and a builder can `chroot` into it. Its mount table (`/proc/<pid>/mountinfo`, proc(5))
    /// names the directory relative to its filesystem; this process's own mount table maps
    /// that back to a path here.
    fn in_nix_chroot(&self, pid: u32, root: (u64, u64), store: &Path) -> bool {
        let Some(theirs) = read_mounts(&format!("/proc/{pid}/mountinfo")) else {
            return false;
        };
        let Some(top) = theirs.iter().find(|m| m.mount_point == Path::new("/")) else {
            return false;
        };
        let own = self
            .own_mounts
            .get_or_init(|| read_mounts("/proc/self/mountinfo").unwrap_or_default());
        own.iter()
            .filter(|m| m.device == top.device)
            .filter_map(|m| {
                let rest = top.root.strip_prefix(&m.root).ok()?;
                Some(m.mount_point.join(rest))
            })
            .any(|here| {
                chroot_store_dir(&here) == Some(store)
                    && std::fs::symlink_metadata(&here).is_ok_and(|md| {
                        md.is_dir() && (md.dev(), md.ino()) == root && !like_a_store_path(&md)
                    })
            })
    }

    /// Whether some live process runs as one of the `count` uids from `first` (any of its four
    /// uids, from `/proc/<pid>/status`): a `uid-range` build's processes may take any id its
    /// user namespace maps. Zombies do not count: they hold no files, and an orphaned one
    /// stays until its new parent reaps it, which a container's init may never do.
    fn ids_in_use(&self, first: u32, count: u32) -> bool {
        let last = first.saturating_add(count.max(1) - 1);
        self.uids
            .get_or_init(|| {
                let mut uids = BTreeSet::new();
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
            .range(first..=last)
            .next()
            .is_some()
    }
}

/// Whether a directory has a store path's canonical metadata, which Nix gives every path it
/// registers (`canonicalisePathMetaData`): no write permission (mode 0555), or the
/// modification time 1 s. Every input of a build has it; a chroot Nix makes never does (it is
/// 0700, 0750 or 0755, and Nix writes into it while setting it up).
fn like_a_store_path(md: &std::fs::Metadata) -> bool {
    md.mode() & 0o222 == 0 || md.mtime() == 1
}

/// The parent pid and start time of `pid`, unless it is a zombie or gone.
fn parent_and_start(pid: u32) -> Option<(u32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses; fields after it don't.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if matches!(fields.next(), Some("Z" | "X")) {
        return None;
    }
    let ppid = fields.next()?.parse().ok()?;
    let start = fields.nth(17)?.parse().ok()?;
    Some((ppid, start))
}

/// One line of a mount table (`/proc/<pid>/mountinfo`, see proc(5)).
#[derive(Debug, PartialEq, Eq)]
struct Mount {
    /// `major:minor` of the filesystem.
    device: String,
    /// The directory of the filesystem mounted here.
    root: PathBuf,
    /// Where it is mounted, relative to the process's root.
    mount_point: PathBuf,
}

/// The most a mount table is read: a sandbox has a few dozen mounts, a host some hundreds.
const MOUNTINFO_LIMIT: u64 = 4 << 20;

/// Reads a mount table, at most [`MOUNTINFO_LIMIT`] bytes of it.
fn read_mounts(path: &str) -> Option<Vec<Mount>> {
    let mut text = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(MOUNTINFO_LIMIT)
        .read_to_end(&mut text)
        .ok()?;
    Some(parse_mounts(&text))
}

/// The mounts in mount table text; lines that do not parse are left out.
fn parse_mounts(text: &[u8]) -> Vec<Mount> {
    text.split(|b| *b == b'\n')
        .filter_map(|line| {
            let mut f = line.split(|b| *b == b' ');
            Some(Mount {
                device: std::str::from_utf8(f.nth(2)?).ok()?.to_string(),
                root: unescape(f.next()?),
                mount_point: unescape(f.next()?),
            })
        })
        .collect()
}

/// A mount table path: space, tab, newline and backslash are written as `\ooo` octal.
fn unescape(field: &[u8]) -> PathBuf {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (field[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::Duration;

    #[test]
    fn a_mount_table_is_read_with_its_escapes() {
        let table = b"152 131 254:0 /nix/store/x-a.drv.chroot / rw - ext4 /dev/vda rw\n\
            168 152 0:42 / /proc rw - proc none rw\n\
            170 152 0:44 /a\\040b /dev/my\\134dir rw - tmpfs none rw\n\
            garbage\n";
        assert_eq!(
            parse_mounts(table),
            [
                Mount {
                    device: "254:0".into(),
                    root: "/nix/store/x-a.drv.chroot".into(),
                    mount_point: "/".into(),
                },
                Mount {
                    device: "0:42".into(),
                    root: "/".into(),
                    mount_point: "/proc".into(),
                },
                Mount {
                    device: "0:44".into(),
                    root: "/a b".into(),
                    mount_point: "/dev/my\\dir".into(),
                },
            ]
        );
    }

    #[test]
    fn a_chroot_names_its_store_in_either_layout() {
        let store = Some(Path::new("/nix/store"));
        assert_eq!(
            chroot_store_dir(Path::new("/nix/store/x-a.drv.chroot")),
            store
        );
        assert_eq!(
            chroot_store_dir(Path::new("/nix/store/x-a.drv.chroot/root")),
            store
        );
        assert_eq!(chroot_store_dir(Path::new("/build/x")), None);
        assert_eq!(chroot_store_dir(Path::new("/tmp/root")), None);
    }

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
