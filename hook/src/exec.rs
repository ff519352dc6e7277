//! `cuda-sandbox-hook exec`: the plan rendered as bind mounts in a private mount namespace.
//!
//! Reproduces "what my CUDA build sees" without Nix: a minimal root like Nix's sandbox (`/dev`
//! with the usual pseudo-devices, `/proc`, `/tmp`, `/build`, a tiny `/etc`), plus exactly the
//! paths the hook would expose for the given features, plus the shared libraries the command
//! (and the exposed driver libraries) need, resolved as the loader would. Then the command runs
//! there, isolated like a build: in its own PID namespace with its own `/proc` (so
//! `/proc/<pid>/root` of host processes is out of reach), as an unprivileged user (`nobody`
//! unless `--user` says otherwise) with no supplementary groups and `no_new_privs` (setuid
//! programs gain nothing), and with every exposed path bound read-only except device nodes and
//! `--bind` paths. Needs root (namespaces); the namespaces, and every mount in them, end with
//! the command.

use crate::act::Mode;
use crate::elfdeps;
use crate::hook;
use crate::plan::Reason;
use crate::request::{self, Input, Request, Verdict};
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What to run, and for which build.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// A derivation whose features to use.
    pub drv: Option<PathBuf>,
    /// Features to use (added to the derivation's).
    pub features: Vec<String>,
    /// The configuration file, if not the default.
    pub config: Option<PathBuf>,
    /// Extra host paths bound at the same place (e.g. a directory for the command's output).
    pub extra_binds: Vec<PathBuf>,
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// The user (and group) the command runs as.
    pub user: (u32, u32),
}

/// The user `exec` runs a command as unless told otherwise: `nobody`.
pub const DEFAULT_USER: (u32, u32) = (65534, 65534);

/// One bind mount of the rendered plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// Path inside the new root.
    pub inside: PathBuf,
    /// Host path.
    pub outside: PathBuf,
    /// Writable (device nodes and `--bind` paths); everything else is bound read-only.
    pub writable: bool,
}

/// Resolves `req` as the hook would (the derivation's features, else `--features`, else
/// `cuda`).
pub fn resolve(req: &ExecRequest) -> Request {
    request::resolve(&Input {
        drv: req.drv.as_deref(),
        extra_features: &req.features,
        default_features: &["cuda"],
        config: req.config.as_deref(),
        ..Input::default()
    })
}

/// Plans the root for `req` (resolved as `resolved`, with the private root as its chroot):
/// the hook's exposures, then the libraries the command and the exposed driver libraries need.
/// Also writes the manifest the plan names (the command may be the runner, which reads it).
/// Returns the binds and the command's path inside.
pub fn prepare(req: &ExecRequest, resolved: &Request) -> Result<(Vec<Bind>, PathBuf), String> {
    if let Verdict::Nothing(_) = resolved.verdict {
        return Err(format!(
            "no rule answers to the features [{}]: a build with them would get nothing",
            resolved.features_lossy().join(", ")
        ));
    }
    let (plan, answer) = hook::answer(resolved, Mode::Exec);
    if let Some(p) = plan.problems.first() {
        return Err(format!("the hook would refuse this build: {p}"));
    }
    answer.map_err(|e| format!("the hook would refuse this build: {e}"))?;
    if let Some(config) = resolved.tagged() {
        crate::act::write_manifest(&plan, config)?;
    }
    let mut binds: Vec<Bind> = plan
        .exposures
        .iter()
        .map(|e| Bind {
            inside: e.inside.clone(),
            outside: e.outside.clone(),
            writable: is_char_device(&e.outside),
        })
        .collect();

    for extra in &req.extra_binds {
        let abs =
            std::path::absolute(extra).map_err(|e| format!("--bind {}: {e}", extra.display()))?;
        if !abs.exists() {
            return Err(format!(
                "--bind {}: no such file or directory",
                abs.display()
            ));
        }
        binds.push(Bind {
            inside: abs.clone(),
            outside: abs,
            writable: true,
        });
    }
    let program = req.command.first().ok_or("exec needs a command after --")?;
    let program_inside = find_program(program)?;
    let program_real = std::fs::canonicalize(&program_inside)
        .map_err(|e| format!("{}: {e}", program_inside.display()))?;
    binds.push(Bind {
        inside: program_inside.clone(),
        outside: program_real.clone(),
        writable: false,
    });
    // The command needs its libraries; exposed host driver libraries need theirs (libc and
    // friends), which a Nix build would get from its own closure.
    let mut elf_roots = vec![program_real];
    for e in &plan.exposures {
        let driver_lib = matches!(
            e.reason,
            Reason::Driver { .. } | Reason::SymlinkTarget { .. }
        );
        if driver_lib && e.outside.is_file() {
            elf_roots.push(e.outside.clone());
        } else if matches!(e.reason, Reason::Driver { .. }) && e.outside.is_dir() {
            elf_roots.extend(shared_objects_in(&e.outside));
            elf_roots.extend(shared_objects_in(&e.outside.join("lib")));
        }
    }
    let (libraries, missing) = elfdeps::library_closure(&elf_roots);
    if let Some(m) = missing.first() {
        crate::log::warn(format_args!(
            "exec: a needed library is not on this host: {m}"
        ));
    }
    for lib in libraries {
        let covered = binds.iter().any(|b| lib.starts_with(&b.inside));
        if !covered {
            let outside = std::fs::canonicalize(&lib).unwrap_or_else(|_| lib.clone());
            binds.push(Bind {
                inside: lib,
                outside,
                writable: false,
            });
        }
    }
    binds.sort_by(|a, b| a.inside.cmp(&b.inside));
    binds.dedup_by(|a, b| a.inside == b.inside);
    Ok((binds, program_inside))
}

/// Runs `req`: never returns on success (the command replaces this process).
pub fn exec(req: &ExecRequest) -> Result<std::convert::Infallible, String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("exec needs root for its mount namespace: run it with sudo".into());
    }
    let mut resolved = resolve(req);
    let runtime_dir = match (&resolved.verdict, &resolved.config) {
        (Verdict::Fail(m), _) => return Err(m.clone()),
        (_, Some(c)) => c.runtime_dir.clone(),
        (_, None) => return Err("no usable configuration".into()),
    };
    let root = runtime_dir.join("exec-root");
    std::fs::create_dir_all(&root).map_err(|e| format!("cannot create {}: {e}", root.display()))?;
    resolved.chroot = Some(root.clone());
    let (binds, program) = prepare(req, &resolved)?;

    let sys = |what: &str, e: nix::Error| format!("exec: {what}: {e}");
    // A new mount namespace now; a new PID namespace for the child forked below.
    unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID)
        .map_err(|e| sys("unshare(CLONE_NEWNS | CLONE_NEWPID)", e))?;
    // Nothing mounted from here on may propagate back to the host.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| sys("making / private", e))?;
    mount(
        Some("tmpfs"),
        &root,
        Some("tmpfs"),
        MsFlags::empty(),
        Some("mode=0755"),
    )
    .map_err(|e| sys("tmpfs on the new root", e))?;
    minimal_root(&root, req.user)?;
    for b in &binds {
        bind(&root, b)?;
    }
    let args: Vec<CString> = std::iter::once(program.as_os_str().to_owned())
        .chain(req.command.iter().skip(1).cloned())
        .map(|a| {
            CString::new(a.as_bytes()).map_err(|_| "exec: an argument holds a NUL byte".to_string())
        })
        .collect::<Result<_, _>>()?;
    let path = CString::new(program.as_os_str().as_bytes())
        .map_err(|_| "exec: NUL in the program path")?;
    // SAFETY: the hook is single-threaded here; the child only makes system calls and execs.
    match unsafe { nix::unistd::fork() }.map_err(|e| sys("fork", e))? {
        nix::unistd::ForkResult::Child => {
            let e = run_child(&root, req.user, &path, &args);
            crate::log::error(e);
            // SAFETY: _exit in the forked child, without running the parent's destructors.
            unsafe { nix::libc::_exit(127) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            use nix::sys::wait::{waitpid, WaitStatus};
            let code = loop {
                match waitpid(child, None) {
                    Ok(WaitStatus::Exited(_, code)) => break code,
                    Ok(WaitStatus::Signaled(_, signal, _)) => break 128 + signal as i32,
                    Ok(_) | Err(nix::Error::EINTR) => continue,
                    Err(e) => return Err(sys("waiting for the command", e)),
                }
            };
            std::process::exit(code)
        }
    }
}

/// In the forked child, PID 1 of the new PID namespace: its own `/proc`, the new root, the
/// unprivileged user, `no_new_privs`, then the command. Returns only on failure.
fn run_child(root: &Path, user: (u32, u32), path: &CString, args: &[CString]) -> String {
    let sys = |what: &str, e: nix::Error| format!("exec: {what}: {e}");
    // Mounted from inside the namespace, so it shows this namespace's processes only.
    if let Err(e) = mount(
        Some("proc"),
        &root.join("proc"),
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    ) {
        return sys("mounting /proc", e);
    }
    if let Err(e) = nix::unistd::chroot(root) {
        return sys("chroot", e);
    }
    if let Err(e) = std::env::set_current_dir("/build") {
        return format!("exec: chdir /build: {e}");
    }
    let (uid, gid) = (
        nix::unistd::Uid::from_raw(user.0),
        nix::unistd::Gid::from_raw(user.1),
    );
    if let Err(e) = nix::unistd::setgroups(&[]) {
        return sys("dropping supplementary groups", e);
    }
    if let Err(e) = nix::unistd::setgid(gid) {
        return sys("setgid", e);
    }
    if let Err(e) = nix::unistd::setuid(uid) {
        return sys("setuid", e);
    }
    // SAFETY: prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) only sets a flag of this process.
    if unsafe { nix::libc::prctl(nix::libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return format!("exec: no_new_privs: {}", std::io::Error::last_os_error());
    }
    match nix::unistd::execv(path, args) {
        Err(e) => sys(&format!("running {}", path.to_string_lossy()), e),
        Ok(never) => match never {},
    }
}

/// `/dev` (pseudo-devices bound from the host, `shm`, the fd links), `/proc`, `/tmp`,
/// `/build`, and an `/etc` with only `passwd`, `group` and `hosts`, as in Nix's sandbox.
fn minimal_root(root: &Path, user: (u32, u32)) -> Result<(), String> {
    let io = |what: &Path, e: std::io::Error| format!("exec: {}: {e}", what.display());
    for dir in ["dev", "dev/shm", "proc", "tmp", "build", "etc"] {
        let p = root.join(dir);
        std::fs::create_dir_all(&p).map_err(|e| io(&p, e))?;
    }
    for dev in ["null", "zero", "full", "random", "urandom", "tty"] {
        bind(
            root,
            &Bind {
                inside: Path::new("/dev").join(dev),
                outside: Path::new("/dev").join(dev),
                writable: true,
            },
        )?;
    }
    for (link, target) in [
        ("dev/fd", "/proc/self/fd"),
        ("dev/stdin", "/proc/self/fd/0"),
        ("dev/stdout", "/proc/self/fd/1"),
        ("dev/stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, root.join(link)).map_err(|e| io(&root.join(link), e))?;
    }
    let sys = |what: &str, e: nix::Error| format!("exec: mounting {what}: {e}");
    mount(
        Some("tmpfs"),
        &root.join("dev/shm"),
        Some("tmpfs"),
        MsFlags::empty(),
        Some("mode=1777"),
    )
    .map_err(|e| sys("/dev/shm", e))?;
    mount(
        Some("tmpfs"),
        &root.join("tmp"),
        Some("tmpfs"),
        MsFlags::empty(),
        Some("mode=1777"),
    )
    .map_err(|e| sys("/tmp", e))?;
    // /build belongs to the command's user, as a build's directory to its build user.
    nix::unistd::chown(
        &root.join("build"),
        Some(nix::unistd::Uid::from_raw(user.0)),
        Some(nix::unistd::Gid::from_raw(user.1)),
    )
    .map_err(|e| sys("/build", e))?;
    for (file, text) in [
        (
            "etc/passwd",
            "root:x:0:0:root:/build:/noshell\nnobody:x:65534:65534:nobody:/:/noshell\n",
        ),
        ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
        ("etc/hosts", "127.0.0.1 localhost\n::1 localhost\n"),
    ] {
        std::fs::write(root.join(file), text).map_err(|e| io(&root.join(file), e))?;
    }
    Ok(())
}

/// Bind-mounts `b.outside` at `b.inside` under `root`, making the mount point (a directory or
/// an empty file, like the source) first. Symlinks in the source are followed, as Nix 2.8 does.
fn bind(root: &Path, b: &Bind) -> Result<(), String> {
    let target = root.join(b.inside.strip_prefix("/").unwrap_or(&b.inside));
    let meta =
        std::fs::metadata(&b.outside).map_err(|e| format!("exec: {}: {e}", b.outside.display()))?;
    let io = |e: std::io::Error| format!("exec: mount point {}: {e}", target.display());
    if meta.is_dir() {
        std::fs::create_dir_all(&target).map_err(io)?;
    } else {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        if !target.exists() {
            std::fs::File::create(&target).map_err(io)?;
        }
    }
    mount(
        Some(&b.outside),
        &target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| {
        format!(
            "exec: binding {} at {}: {e}",
            b.outside.display(),
            b.inside.display()
        )
    })?;
    if !b.writable {
        mount(
            None::<&str>,
            &target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID,
            None::<&str>,
        )
        .map_err(|e| format!("exec: making {} read-only: {e}", b.inside.display()))?;
    }
    Ok(())
}

fn is_char_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

/// The absolute path of `program`: as given when it holds a `/`, else found in `PATH`.
fn find_program(program: &OsString) -> Result<PathBuf, String> {
    let p = Path::new(program);
    if p.as_os_str().as_bytes().contains(&b'/') {
        return std::path::absolute(p).map_err(|e| format!("{}: {e}", p.display()));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| c.is_file())
        .ok_or_else(|| format!("{} not found in PATH", p.display()))
}

/// The shared objects (`*.so*`) directly in `dir`.
fn shared_objects_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().contains(".so"))
        })
        .collect()
}
