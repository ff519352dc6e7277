//! `cuda-sandbox-hook exec`: the plan rendered as bind mounts in a private mount namespace.
//!
//! Reproduces "what my CUDA build sees" without Nix: a minimal root like Nix's sandbox (`/dev`
//! with the usual pseudo-devices, `/proc`, `/tmp`, `/build`, a tiny `/etc`), plus exactly the
//! paths the hook would expose for the given features (none for features no rule answers: the
//! view an untagged build gets, [`resolve`]), plus the `--bind` paths (no symlink on them,
//! writable by the command's user: [`UserBind`]), plus the shared libraries the command
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
//! closed. Its libraries are those glibc's loader would load for it in that root
//! (`cuda_sandbox_elfkit::ldso`), taken only from the store and the loader's directories
//! ([`crate::elfdeps`]).

mod child;
mod environment;
mod error;
mod root;
mod stdio;
mod user_bind;

pub use environment::{environment, BASE_ENVIRONMENT};
pub use error::ExecError;
pub use root::Bind;
pub use user_bind::UserBind;

use crate::elfdeps;
use crate::pipeline::{self, Mode};
use crate::plan::{Exposure, Reason};
use crate::request::{self, Environment, Input, Request, Tagged, Verdict};
use child::{forward_signals_to, run_child};
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use root::{bind, minimal_root, staging_root};
use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use stdio::Stdio;

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

/// The user `exec` runs a command as unless told otherwise: `nobody`.
pub const DEFAULT_USER: (u32, u32) = (65534, 65534);

/// Resolves `req` as the hook would (the derivation's features, else `--features`, else
/// `cuda`), loading the configuration even when no rule answers the features: an untagged
/// request is run too, in the view an untagged build gets (the minimal root and nothing of
/// the hook's, as `explain` shows it), so that what such a build must not see can be checked
/// (`cuda-sandbox-check --expect-no-gpu`); exec needs the configuration for its runtime
/// directory either way.
pub fn resolve(req: &ExecRequest) -> Request {
    request::resolve(&Input {
        drv: req.drv.as_deref(),
        extra_features: &req.features,
        default_features: &["cuda"],
        config: req.config.as_deref(),
        always_load_config: true,
        ..Input::new(&req.environment)
    })
}

/// Plans the root for `req` (resolved as `resolved`, with the private root as its chroot):
/// the hook's exposures (none for an untagged request, as for an untagged build), the
/// `--bind` paths (`user_binds`, checked), then the libraries the command and the exposed
/// driver libraries need. The pipeline writes the manifest the plan names (the command may be
/// the runner, which reads it).
/// `env` is the command's environment (its `LD_LIBRARY_PATH` is searched).
pub fn prepare(
    req: &ExecRequest,
    resolved: &Request,
    user_binds: &[UserBind],
    env: &[(OsString, OsString)],
) -> Result<Prepared, ExecError> {
    let pipeline::Outcome {
        granted: plan,
        answer,
    } = pipeline::run(resolved, Mode::Exec);
    if let Some(p) = plan.decision.problems.first() {
        return Err(ExecError::Problem(Box::new(p.clone())));
    }
    answer.map_err(ExecError::Hook)?;
    let mut binds: Vec<Bind> = plan
        .decision
        .exposures
        .iter()
        .map(|e| {
            let device =
                std::fs::metadata(&e.outside).is_ok_and(|m| m.file_type().is_char_device());
            Bind::new(e.inside.clone(), e.outside.clone(), device)
        })
        .collect();

    let program = req.command.first().ok_or(ExecError::NoCommand)?;
    // The program as found (the inside path it is bound at), and its real path, which must be
    // a regular file.
    let program_inside = find_program(program, req.environment.path.as_deref())?;
    let program_real = std::fs::canonicalize(&program_inside)
        .map_err(|e| ExecError::Program(format!("{}: {e}", program_inside.display())))?;
    if !std::fs::metadata(&program_real).is_ok_and(|m| m.is_file()) {
        return Err(ExecError::Program(format!(
            "{} is not a regular file: exec runs programs only",
            program_inside.display()
        )));
    }
    binds.extend(user_binds.iter().map(|b| b.bind(req.user)));
    binds.push(Bind::new(
        program_inside.clone(),
        program_real.clone(),
        false,
    ));
    // What the command sees anyway; everything else its process loads must be the loader's.
    let visible: Vec<(PathBuf, PathBuf)> = binds
        .iter()
        .map(|b| (b.inside.clone(), b.outside.clone()))
        .collect();
    let dlopened = driver_libraries(&plan.decision.exposures);
    let store_dir = resolved
        .verdict
        .config()
        .map_or_else(|| PathBuf::from("/nix/store"), |c| c.store_dir.clone());
    let Some(loader) = elfdeps::loader_of(&program_real, &store_dir) else {
        // A static program: nothing to load.
        return Ok(finish(binds, program_inside, elfdeps::Closure::default()));
    };
    let ld_library_path = env
        .iter()
        .find(|(n, _)| n == "LD_LIBRARY_PATH")
        .map(|(_, v)| v.to_string_lossy().into_owned());
    let sources = elfdeps::Sources::of_host(&store_dir, &loader, visible);
    let closure = elfdeps::library_closure(
        &program_inside,
        &dlopened,
        ld_library_path.as_deref(),
        &loader,
        &sources,
    );
    bind_libraries(&mut binds, &closure);
    Ok(finish(binds, program_inside, closure))
}

/// Binds each library of `closure` that no bind already covers, read-only at its path (from
/// its real path); warns of the libraries missing on this host and of those refused.
fn bind_libraries(binds: &mut Vec<Bind>, closure: &elfdeps::Closure) {
    for m in &closure.missing {
        crate::log::warn(format_args!(
            "exec: a needed library is not on this host: {m}"
        ));
    }
    for r in &closure.refused {
        crate::log::warn(format_args!("exec: not binding {r}"));
    }
    for (_, lib) in &closure.named {
        let covered = binds.iter().any(|b| lib.starts_with(&b.inside));
        if !covered {
            let outside = std::fs::canonicalize(lib).unwrap_or_else(|_| lib.clone());
            binds.push(Bind::new(lib.clone(), outside, false));
        }
    }
}

/// The exposed driver libraries, by their inside paths: the command needs its libraries, and
/// exposed host driver libraries need theirs (libc and friends), which a Nix build would get
/// from its own closure, so the command's process is planned as if it dlopened each of them
/// (each file, and the shared objects in a driver directory and its `lib`).
fn driver_libraries(exposures: &[Exposure]) -> Vec<PathBuf> {
    let mut dlopened = Vec::new();
    for e in exposures {
        let driver_lib = matches!(
            e.reason,
            Reason::Driver { .. } | Reason::SymlinkTarget { .. }
        );
        if driver_lib && e.outside.is_file() {
            dlopened.push(e.inside.clone());
        } else if matches!(e.reason, Reason::Driver { .. }) && e.outside.is_dir() {
            // The shared objects (`*.so*`) directly in the directory and in its `lib`.
            for sub in ["", "lib"] {
                let inside = e.inside.join(sub);
                let entries = std::fs::read_dir(e.outside.join(sub)).into_iter().flatten();
                dlopened.extend(
                    entries
                        .filter_map(Result::ok)
                        .map(|d| d.path())
                        .filter(|p| p.is_file())
                        .filter_map(|p| {
                            let name = p.file_name()?;
                            name.to_string_lossy()
                                .contains(".so")
                                .then(|| inside.join(name))
                        }),
                );
            }
        }
    }
    dlopened
}

/// What [`prepare`] plans.
#[derive(Debug)]
pub struct Prepared {
    /// The binds, in order, one per inside path.
    pub binds: Vec<Bind>,
    /// The command's path inside.
    pub(crate) program: PathBuf,
    /// What the command's process loads there (its libraries, by their paths inside).
    pub closure: elfdeps::Closure,
}

fn finish(mut binds: Vec<Bind>, program: PathBuf, closure: elfdeps::Closure) -> Prepared {
    binds.sort_by(|a, b| a.inside.cmp(&b.inside));
    binds.dedup_by(|a, b| a.inside == b.inside);
    Prepared {
        binds,
        program,
        closure,
    }
}

/// Runs `req`: never returns on success (the command replaces this process).
pub fn exec(req: &ExecRequest) -> Result<std::convert::Infallible, ExecError> {
    if !nix::unistd::geteuid().is_root() {
        return Err(ExecError::NotRoot);
    }
    // What exec creates (mount points, /etc files) gets the modes written here, not the
    // caller's umask: 0755 directories the command can cross, 0644 files.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    // Descriptors 0, 1 and 2 are open (on `/dev/null` where they were not): the process start
    // saw to that (`main`'s `start_up`, as Rust's runtime does), so nothing opened here lands
    // on one and reaches the command as a standard stream.
    let mut resolved = resolve(req);
    let (runtime_dir, store_dir) = match &resolved.verdict {
        Verdict::Fail(why) => return Err(ExecError::Refused(why.clone())),
        Verdict::Untagged(why, None) => return Err(ExecError::NoConfig(why.clone())),
        Verdict::Tagged(Tagged { config, .. }) | Verdict::Untagged(_, Some(config)) => {
            (config.runtime_dir.clone(), config.store_dir.clone())
        }
    };
    // Checked before anything is planned, for a clear error; each is checked again when it
    // is bound, and bound through the descriptor of that walk.
    let user_binds = req
        .extra_binds
        .iter()
        .map(|b| UserBind::open(b, req.user))
        .collect::<Result<Vec<_>, _>>()?;
    let caller = |name: &std::ffi::OsStr| {
        req.caller_env
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let env = environment(&req.env, &store_dir, caller)?;
    let root = staging_root(&runtime_dir)?;
    resolved.chroot = Some(root.clone());
    let Prepared { binds, program, .. } = prepare(req, &resolved, &user_binds, &env)?;
    build_root(&root, req.user, &binds)?;
    run_command(&root, req.user, &program, &req.command, &env)
}

/// Makes `root` the command's root in a new mount namespace (and a new PID namespace for the
/// child forked next): a private tmpfs with the minimal root and `binds`; nothing mounted
/// propagates back to the host.
fn build_root(root: &Path, user: (u32, u32), binds: &[Bind]) -> Result<(), ExecError> {
    let sys = ExecError::sys;
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
        root,
        Some("tmpfs"),
        MsFlags::empty(),
        Some("mode=0755"),
    )
    .map_err(|e| sys("tmpfs on the new root", e))?;
    minimal_root(root, user)?;
    for b in binds {
        bind(root, b)?;
    }
    Ok(())
}

/// Forks the command (it chroots, drops to `user` and execs `program` with `command`'s
/// arguments and `env`), relays its standard descriptors and signals, and exits with its
/// status.
fn run_command(
    root: &Path,
    user: (u32, u32),
    program: &Path,
    command: &[OsString],
    env: &[(OsString, OsString)],
) -> Result<std::convert::Infallible, ExecError> {
    // What `execve` gets: the program's path, the arguments (the program's path inside, then
    // the command's), and the environment as `NAME=VALUE`; a NUL in any of them is an error.
    let args: Vec<CString> = std::iter::once(program.as_os_str().to_owned())
        .chain(command.iter().skip(1).cloned())
        .map(|a| CString::new(a.as_bytes()).map_err(|_| ExecError::Nul("an argument")))
        .collect::<Result<_, _>>()?;
    let path = CString::new(program.as_os_str().as_bytes())
        .map_err(|_| ExecError::Nul("the program path"))?;
    let env: Vec<CString> = env
        .iter()
        .map(|(n, v)| {
            let mut pair = n.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(v.as_bytes());
            CString::new(pair).map_err(|_| ExecError::Nul("an --env value"))
        })
        .collect::<Result<_, _>>()?;
    let sys = ExecError::sys;
    let stdio = Stdio::for_command().map_err(ExecError::Stdio)?;
    // SAFETY: the hook is single-threaded here; the child only makes system calls and execs.
    match unsafe { nix::unistd::fork() }.map_err(|e| sys("fork", e))? {
        nix::unistd::ForkResult::Child => {
            let Err(e) = run_child(root, user, &stdio, &path, &args, &env);
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

/// The absolute path of `program`: as given when it holds a `/`, else found in `path` (the
/// caller's `PATH`).
fn find_program(program: &OsString, path: Option<&OsStr>) -> Result<PathBuf, ExecError> {
    let p = Path::new(program);
    if p.as_os_str().as_bytes().contains(&b'/') {
        return std::path::absolute(p)
            .map_err(|e| ExecError::Program(format!("{}: {e}", p.display())));
    }
    std::env::split_paths(path.unwrap_or_default())
        .map(|d| d.join(p))
        .find(|c| c.is_file())
        .ok_or_else(|| ExecError::Program(format!("{} not found in PATH", p.display())))
}
