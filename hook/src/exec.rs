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
//!
//! The command is no way back to the host that started it: it runs in a session of
//! its own, with no controlling terminal, and never holds a descriptor of exec's terminal (a
//! terminal on stdin becomes `/dev/null`, on stdout or stderr a pipe that exec copies to it),
//! so it cannot type into that terminal (`TIOCSTI`) or signal its jobs. Its environment is
//! [`BASE_ENVIRONMENT`] plus what `--env` gives, never exec's own; descriptors above 2 are
//! closed. Its libraries are read as the loader reads them and taken only from the store and
//! the loader's directories ([`crate::elfdeps`]).

use crate::elfdeps;
use crate::pipeline::{self, Mode};
use crate::plan::Reason;
use crate::request::{self, Environment, Input, Request, Verdict};
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
    /// `--env` arguments: `NAME=VALUE` sets a variable, `NAME` passes exec's own value (when
    /// it has one).
    pub env: Vec<OsString>,
    /// The variables the hook itself reads ([`Environment`]), read once by the caller.
    pub environment: Environment,
    /// Exec's own environment, read once by the caller: the values `--env NAME` passes on.
    pub caller_env: Vec<(OsString, OsString)>,
}

/// The environment every command starts with, as in Nix's sandbox: a build's temporary
/// directory, a home and a `PATH` that lead nowhere, and the store (`NIX_STORE`, from the
/// configuration's `store_dir`, is added). Nothing of exec's own environment is passed unless
/// `--env` names it.
pub const BASE_ENVIRONMENT: &[(&str, &str)] = &[
    ("HOME", "/homeless-shelter"),
    ("NIX_BUILD_TOP", "/build"),
    ("PATH", "/path-not-set"),
    ("PWD", "/build"),
    ("TEMP", "/build"),
    ("TEMPDIR", "/build"),
    ("TERM", "xterm-256color"),
    ("TMP", "/build"),
    ("TMPDIR", "/build"),
];

/// The command's environment: [`BASE_ENVIRONMENT`], `NIX_STORE=store_dir`, then each `--env`
/// in order (`NAME=VALUE` sets, replacing what was there; `NAME` passes `host(NAME)` when it
/// is set and is skipped otherwise, as `docker run -e NAME` does).
pub fn environment(
    settings: &[OsString],
    store_dir: &Path,
    host: impl Fn(&std::ffi::OsStr) -> Option<OsString>,
) -> Result<Vec<(OsString, OsString)>, String> {
    let mut env: Vec<(OsString, OsString)> = BASE_ENVIRONMENT
        .iter()
        .map(|(n, v)| (OsString::from(n), OsString::from(v)))
        .collect();
    env.push(("NIX_STORE".into(), store_dir.as_os_str().to_owned()));
    for setting in settings {
        let bytes = setting.as_bytes();
        let (name, value) = match bytes.iter().position(|b| *b == b'=') {
            Some(at) => (
                std::ffi::OsStr::from_bytes(&bytes[..at]).to_owned(),
                Some(std::ffi::OsStr::from_bytes(&bytes[at + 1..]).to_owned()),
            ),
            None => (setting.clone(), None),
        };
        if name.is_empty() || bytes.contains(&0) {
            return Err(format!(
                "--env {}: give NAME=VALUE or NAME",
                setting.to_string_lossy()
            ));
        }
        let Some(value) = value.or_else(|| host(&name)) else {
            continue;
        };
        env.retain(|(n, _)| *n != name);
        env.push((name, value));
    }
    env.sort();
    Ok(env)
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
        ..Input::new(&req.environment)
    })
}

/// Plans the root for `req` (resolved as `resolved`, with the private root as its chroot):
/// the hook's exposures, then the libraries the command and the exposed driver libraries need.
/// The pipeline writes the manifest the plan names (the command may be the runner, which
/// reads it).
/// Returns the binds and the command's path inside.
pub fn prepare(req: &ExecRequest, resolved: &Request) -> Result<(Vec<Bind>, PathBuf), String> {
    if let Verdict::Nothing(_) = resolved.verdict {
        return Err(format!(
            "no rule answers to the features [{}]: a build with them would get nothing",
            resolved.features_lossy().join(", ")
        ));
    }
    let pipeline::Outcome { plan, answer } = pipeline::run(resolved, Mode::Exec);
    if let Some(p) = plan.problems.first() {
        return Err(format!("the hook would refuse this build: {p}"));
    }
    answer.map_err(|e| format!("the hook would refuse this build: {e}"))?;
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
    let program_inside = find_program(program, req.environment.path.as_deref())?;
    let program_real = std::fs::canonicalize(&program_inside)
        .map_err(|e| format!("{}: {e}", program_inside.display()))?;
    if !std::fs::metadata(&program_real).is_ok_and(|m| m.is_file()) {
        return Err(format!(
            "{} is not a regular file: exec runs programs only",
            program_inside.display()
        ));
    }
    // What the command sees anyway; everything else it names must be the loader's.
    let visible: Vec<PathBuf> = binds.iter().map(|b| b.outside.clone()).collect();
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
    let store_dir = resolved
        .config
        .as_ref()
        .map_or_else(|| PathBuf::from("/nix/store"), |c| c.store_dir.clone());
    let sources = elfdeps::Sources::of_host(&store_dir, visible);
    let closure = elfdeps::library_closure(&elf_roots, &sources);
    for m in &closure.missing {
        crate::log::warn(format_args!(
            "exec: a needed library is not on this host: {m}"
        ));
    }
    for r in &closure.refused {
        crate::log::warn(format_args!("exec: not binding {r}"));
    }
    for lib in closure.libraries {
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
    // What exec creates (mount points, /etc files) gets the modes written here, not the
    // caller's umask: 0755 directories the command can cross, 0644 files.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    standard_descriptors_open();
    let mut resolved = resolve(req);
    let (runtime_dir, store_dir) = match (&resolved.verdict, &resolved.config) {
        (Verdict::Fail(m), _) => return Err(m.clone()),
        (_, Some(c)) => (c.runtime_dir.clone(), c.store_dir.clone()),
        (_, None) => return Err("no usable configuration".into()),
    };
    let caller = |name: &std::ffi::OsStr| {
        req.caller_env
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let env = environment(&req.env, &store_dir, caller)?;
    let root = staging_root(&runtime_dir)?;
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
    let env: Vec<CString> = env
        .iter()
        .map(|(n, v)| {
            let mut pair = n.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(v.as_bytes());
            CString::new(pair).map_err(|_| "exec: an --env value holds a NUL byte".to_string())
        })
        .collect::<Result<_, _>>()?;
    let stdio = Stdio::for_command().map_err(|e| format!("exec: standard streams: {e}"))?;
    // SAFETY: the hook is single-threaded here; the child only makes system calls and execs.
    match unsafe { nix::unistd::fork() }.map_err(|e| sys("fork", e))? {
        nix::unistd::ForkResult::Child => {
            let e = run_child(&root, req.user, &stdio, &path, &args, &env);
            crate::log::error(e);
            // SAFETY: _exit in the forked child, without running the parent's destructors.
            unsafe { nix::libc::_exit(127) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            use nix::sys::wait::{waitpid, WaitStatus};
            forward_signals_to(child);
            stdio.relay();
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

/// Makes sure descriptors 0, 1 and 2 are open (on `/dev/null` where they were not), so that
/// nothing exec opens later lands on one of them and reaches the command as a standard stream.
fn standard_descriptors_open() {
    for fd in 0..=2 {
        if nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD) == Err(nix::Error::EBADF) {
            // Opening takes the lowest free descriptor: this one. Kept open for the run.
            if let Ok(null) = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")
            {
                std::mem::forget(null);
            }
        }
    }
}

/// The host directory the private root is mounted on, `<runtime_dir>/exec-root`: a state
/// directory of root's (checked from `/` without following links), mode 0700. Only exec
/// itself uses the path: the command's root is a tmpfs mounted over it inside exec's own mount
/// namespace, so the directory is never reached through by the command, and no one else on
/// the host needs to see into it.
fn staging_root(runtime_dir: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let root = runtime_dir.join("exec-root");
    crate::statedir::StateDir::open(&root).map_err(|e| e.to_string())?;
    // One made by an older exec was 0755.
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("exec: {}: {e}", root.display()))?;
    Ok(root)
}

/// How the command's standard streams reach exec's: a terminal never does. stdin on a
/// terminal becomes `/dev/null` (a build reads no terminal); stdout and stderr on a terminal
/// become pipes that exec copies to it. Anything else (a file, a pipe) is passed as it is.
struct Stdio {
    /// For each of 0, 1, 2: the descriptor the command gets instead, if not exec's own.
    replace: [Option<std::os::fd::OwnedFd>; 3],
    /// For 1 and 2 when piped: the read end exec copies from.
    relay: [Option<std::os::fd::OwnedFd>; 2],
}

impl Stdio {
    fn for_command() -> std::io::Result<Stdio> {
        use std::os::fd::OwnedFd;
        let is_tty = |fd| nix::unistd::isatty(fd).unwrap_or(false);
        let mut stdio = Stdio {
            replace: [None, None, None],
            relay: [None, None],
        };
        if is_tty(0) {
            stdio.replace[0] = Some(OwnedFd::from(std::fs::File::open("/dev/null")?));
        }
        for fd in [1, 2] {
            if is_tty(fd) {
                let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
                stdio.replace[fd as usize] = Some(write);
                stdio.relay[fd as usize - 1] = Some(read);
            }
        }
        Ok(stdio)
    }

    /// In exec, after the fork: drops the write ends and copies each pipe to exec's own
    /// stream until the command's side closes (the command's namespace ends with it, so that
    /// is when it exits at the latest). One thread with poll(2): after unshare(CLONE_NEWPID)
    /// this process can start no thread.
    fn relay(self) {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        drop(self.replace);
        let mut streams: Vec<(std::fs::File, Option<std::fs::File>)> = Vec::new();
        for (i, read) in self.relay.into_iter().enumerate() {
            if let Some(read) = read {
                let to = nix::unistd::dup(i as i32 + 1).ok().map(|fd| {
                    // SAFETY: `fd` was just returned by dup(2) and is owned by nobody else.
                    unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) }
                });
                streams.push((std::fs::File::from(read), to));
            }
        }
        let mut buffer = vec![0u8; 64 << 10];
        while !streams.is_empty() {
            let mut polled: Vec<nix::libc::pollfd> = streams
                .iter()
                .map(|(from, _)| nix::libc::pollfd {
                    fd: from.as_raw_fd(),
                    events: nix::libc::POLLIN,
                    revents: 0,
                })
                .collect();
            // SAFETY: `polled` is a live array of `polled.len()` pollfd structures.
            let ready = unsafe { nix::libc::poll(polled.as_mut_ptr(), polled.len() as _, -1) };
            if ready < 0 {
                continue; // EINTR: a signal passed on to the command
            }
            let mut ended = Vec::new();
            for (i, p) in polled.iter().enumerate() {
                if p.revents == 0 {
                    continue;
                }
                let (from, to) = &mut streams[i];
                match from.read(&mut buffer) {
                    Ok(0) => ended.push(i),
                    Ok(n) => {
                        // A terminal gone away: keep reading, so the command never blocks.
                        if to
                            .as_mut()
                            .is_some_and(|t| t.write_all(&buffer[..n]).is_err())
                        {
                            *to = None;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => ended.push(i),
                }
            }
            for i in ended.into_iter().rev() {
                streams.remove(i);
            }
        }
    }
}

/// The command exec waits for, for the signal handler.
static COMMAND_PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// How many of SIGINT, SIGTERM, SIGHUP, SIGQUIT exec has been sent.
static SIGNALS_SEEN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The command has its own session, so the terminal's Ctrl-C no longer reaches it, and as PID
/// 1 of its namespace it ignores signals it has no handler for: exec passes on the first
/// SIGINT, SIGTERM, SIGHUP or SIGQUIT it gets, and ends the command (SIGKILL) at the second.
fn forward_signals_to(child: nix::unistd::Pid) {
    use std::sync::atomic::Ordering;
    extern "C" fn on_signal(signal: nix::libc::c_int) {
        let pid = COMMAND_PID.load(Ordering::SeqCst);
        let seen = SIGNALS_SEEN.fetch_add(1, Ordering::SeqCst);
        let signal = if seen == 0 {
            signal
        } else {
            nix::libc::SIGKILL
        };
        if pid > 0 {
            // SAFETY: kill(2) is async-signal-safe and takes plain integers.
            unsafe { nix::libc::kill(pid, signal) };
        }
    }
    COMMAND_PID.store(child.as_raw(), Ordering::SeqCst);
    for signal in [
        nix::libc::SIGINT,
        nix::libc::SIGTERM,
        nix::libc::SIGHUP,
        nix::libc::SIGQUIT,
    ] {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the handler only
        // touches atomics and calls kill(2), both async-signal-safe.
        unsafe {
            let mut action: nix::libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            action.sa_flags = nix::libc::SA_RESTART;
            nix::libc::sigemptyset(&mut action.sa_mask);
            nix::libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// In the forked child, PID 1 of the new PID namespace: a session of its own, its standard
/// streams, its own `/proc`, the new root, the unprivileged user, `no_new_privs`, no other
/// descriptor, then the command with `env`. Returns only on failure.
fn run_child(
    root: &Path,
    user: (u32, u32),
    stdio: &Stdio,
    path: &CString,
    args: &[CString],
    env: &[CString],
) -> String {
    use std::os::fd::AsRawFd;
    let sys = |what: &str, e: nix::Error| format!("exec: {what}: {e}");
    // No controlling terminal from here on: TIOCSTI, /dev/tty and job control signals need one.
    if let Err(e) = nix::unistd::setsid() {
        return sys("setsid", e);
    }
    for (fd, with) in stdio.replace.iter().enumerate() {
        if let Some(with) = with {
            if let Err(e) = nix::unistd::dup2(with.as_raw_fd(), fd as i32) {
                return sys("standard streams", e);
            }
        }
    }
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
    close_descriptors_above_stderr();
    match nix::unistd::execve(path, args, env) {
        Err(e) => sys(&format!("running {}", path.to_string_lossy()), e),
        Ok(never) => match never {},
    }
}

/// Closes every descriptor from 3 up: whatever exec inherited (or opened) stays with exec.
fn close_descriptors_above_stderr() {
    // SAFETY: close_range(2) takes plain integers and only closes descriptors of this process,
    // which is about to exec and holds no Rust object owning them that is used again.
    let closed = unsafe { nix::libc::syscall(nix::libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if closed != 0 {
        // Before Linux 5.9: one by one, up to the descriptor limit.
        let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1 << 16, |(soft, _)| soft.min(1 << 20));
        for fd in 3..limit as i32 {
            let _ = nix::unistd::close(fd);
        }
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

/// The absolute path of `program`: as given when it holds a `/`, else found in `path` (the
/// caller's `PATH`).
fn find_program(program: &OsString, path: Option<&std::ffi::OsStr>) -> Result<PathBuf, String> {
    let p = Path::new(program);
    if p.as_os_str().as_bytes().contains(&b'/') {
        return std::path::absolute(p).map_err(|e| format!("{}: {e}", p.display()));
    }
    std::env::split_paths(path.unwrap_or_default())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_is_the_documented_base_plus_what_env_gives() {
        let host = |n: &std::ffi::OsStr| (n == "FROM_HOST").then(|| OsString::from("h"));
        let args = ["FROM_HOST", "UNSET", "PATH=/bin", "EMPTY=", "A=b=c"].map(OsString::from);
        let env = environment(&args, Path::new("/nix/store"), host).unwrap();
        let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        assert_eq!(get("FROM_HOST"), Some("h".into()));
        assert_eq!(get("UNSET"), None);
        assert_eq!(get("PATH"), Some("/bin".into()), "--env replaces the base");
        assert_eq!(get("EMPTY"), Some("".into()));
        assert_eq!(get("A"), Some("b=c".into()));
        assert_eq!(get("NIX_STORE"), Some("/nix/store".into()));
        assert_eq!(get("HOME"), Some("/homeless-shelter".into()));
        assert_eq!(env.len(), BASE_ENVIRONMENT.len() + 4, "{env:?}"); // NIX_STORE, 3 new
        assert!(environment(&["=x".into()], Path::new("/nix/store"), host).is_err());
    }
}
