//! `cuda-sandbox-hook`: argv → hook mode or a subcommand. No logic lives here.
//!
//! Nix starts the hook afresh before every build, so its process start is on every build's
//! path. The binary has its own C `main` (`#![no_main]`) in place of the Rust runtime's
//! start-up: `start_up` does the two things of it that the hook relies on, and skips the
//! costly one. The runtime finds the main thread's stack with `pthread_getattr_np`, which glibc
//! answers by reading and parsing `/proc/self/maps`, only to print a message when the stack
//! overflows (19 system calls, about 70 µs of a 1 ms run on a 2-core virtual machine). Without
//! it an overflow still ends the process, on the kernel's stack guard gap, with `SIGSEGV`.
//! It stays because it buys more than 5% of the hook's run: with Rust's own start, the
//! untagged hook took 1.20x the empty-process floor against 1.05–1.06x (`hook_process` bench,
//! 300 pairs), and 1.14x the wall time of this start paired run for run (1.15x CPU).
// The test harness keeps its own `main` for this target's (empty) unit tests.
#![cfg_attr(not(test), no_main)]
#![cfg_attr(test, allow(dead_code))]

use clap::{Parser, Subcommand};
use cuda_sandbox_hook::request::Environment;
use cuda_sandbox_hook::{exec, explain, hook, log};
use std::io::Write;
use std::path::{Path, PathBuf};

const AFTER_HELP: &str = "\
SETUP (as root, in the Nix daemon's nix.conf):
  sandbox = true
  pre-build-hook = /path/to/cuda-sandbox-hook
  extra-system-features = cuda gpu nvidia-gpu opengl

Nix then runs `cuda-sandbox-hook <drv-path> <chroot-root>` before every sandboxed build. For a
derivation whose requiredSystemFeatures names a configured feature, the hook prints the
`extra-sandbox-paths` that give the build the GPU device nodes and the driver (with its store
closure); for every other build it prints nothing.

CONFIG: --config FILE, else $CUDA_SANDBOX_CONFIG, else /etc/cuda-sandbox/config.toml, else a
built-in NixOS default (features cuda, gpu, nvidia-gpu, opengl; /dev/nvidia*; /run/opengl-driver).

DEBUG: `cuda-sandbox-hook explain /nix/store/…-x.drv` shows what that build would get and why.";

/// Nix pre-build-hook exposing NVIDIA GPUs and the CUDA driver to tagged sandboxed builds.
#[derive(Parser)]
#[command(
    name = "cuda-sandbox-hook",
    version,
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Configuration file (default: $CUDA_SANDBOX_CONFIG, then /etc/cuda-sandbox/config.toml).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
    /// Hook mode: the derivation Nix is about to build.
    #[arg(value_name = "DRV")]
    drv: Option<PathBuf>,
    /// Hook mode: the sandbox root directory Nix prepared.
    #[arg(value_name = "CHROOT", requires = "drv")]
    chroot: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Show what a build would be given, and why (features, rules, paths, skips, verdict).
    Explain {
        /// The derivation to explain (a .drv path).
        drv: Option<PathBuf>,
        /// Also (or instead) explain a build requiring these features (comma-separated).
        #[arg(long, value_delimiter = ',')]
        features: Vec<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check the configuration and print where it was read from.
    CheckConfig {
        /// Check only what the file says, not who owns it. For checks inside a Nix build, where
        /// a store file shows up owned by `nobody`: the hook itself always checks ownership.
        #[arg(long)]
        content_only: bool,
    },
    /// Run a command in a private mount namespace holding a minimal root plus exactly what
    /// the hook would expose (and the command's own libraries): "what my build sees", without
    /// Nix. Needs root.
    Exec {
        /// Use this derivation's required features.
        #[arg(long, value_name = "DRV")]
        drv: Option<PathBuf>,
        /// Features (comma-separated; default `cuda` when no --drv). Features no rule answers
        /// give what an untagged build gets: the minimal root and nothing of the hook's.
        #[arg(long, value_delimiter = ',')]
        features: Vec<String>,
        /// Also bind this host path at the same place, read-write (repeatable). The command's
        /// user must be able to write it, and no symlink may be on it.
        #[arg(long = "bind", value_name = "PATH")]
        binds: Vec<PathBuf>,
        /// Run the command as this user (`UID` or `UID:GID`; default 65534:65534, nobody).
        #[arg(long, value_name = "UID[:GID]", value_parser = parse_user)]
        user: Option<(u32, u32)>,
        /// Set NAME to VALUE in the command's environment, or pass exec's own NAME (repeatable).
        /// The command starts from a minimal environment like a build's, not exec's.
        #[arg(long = "env", value_name = "NAME[=VALUE]")]
        env: Vec<std::ffi::OsString>,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<std::ffi::OsString>,
    },
}

/// The process entry point: the start-up of [`start_up`], then the command.
#[cfg(not(test))]
#[no_mangle]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    start_up();
    let status = run();
    // Without the Rust runtime's exit path nothing flushes stdout for us.
    let _ = std::io::stdout().flush();
    std::ffi::c_int::from(status)
}

/// What the Rust runtime's start-up does on Linux that the hook needs (see
/// `library/std/src/sys/pal/unix/mod.rs`, `init`): standard descriptors that are closed are
/// opened on `/dev/null`, so that no file the hook opens can become its stdout (Nix reads the
/// answer there) or stderr; and `SIGPIPE` is ignored, so that writing to a closed pipe is an
/// error the hook reports, not a signal that kills it. (Arguments and the environment come
/// from glibc before `main`, as under the runtime.)
fn start_up() {
    use nix::libc;
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: `fds` is a valid array of three `pollfd`s for the duration of the call; a zero
    // timeout returns at once.
    let polled = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) };
    if polled < 0 {
        std::process::abort();
    }
    for p in fds {
        if p.revents & libc::POLLNVAL != 0 {
            // The lowest free descriptor is the closed one.
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")
                .map(std::os::fd::IntoRawFd::into_raw_fd);
            if opened.ok() != Some(p.fd) {
                std::process::abort();
            }
        }
    }
    // SAFETY: ignoring a signal installs no handler, so no code runs on its delivery.
    if unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) } == libc::SIG_ERR {
        std::process::abort();
    }
}

/// argv → hook mode or a subcommand; the process's exit status.
fn run() -> u8 {
    // Fast path: Nix always calls `HOOK <drv> <chroot>` with absolute paths.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.len() == 3 && args[1].as_encoded_bytes().starts_with(b"/") {
        return run_hook(Path::new(&args[1]), Path::new(&args[2]), None);
    }
    let cli = Cli::parse();
    let config = cli.config.as_deref();
    let Some(command) = cli.command else {
        let why = match (cli.drv, cli.chroot) {
            (Some(drv), Some(chroot)) => return run_hook(&drv, &chroot, config),
            (Some(_), None) => "hook mode needs two arguments: <drv-path> <chroot-root>",
            (None, _) => {
                "expected `<drv-path> <chroot-root>` (as Nix calls it) or a subcommand; see --help"
            }
        };
        log::error(why);
        return 2;
    };
    match command {
        Command::Explain {
            drv,
            features,
            json,
        } => run_explain(drv.as_deref(), &features, json, config),
        Command::Exec {
            drv,
            features,
            binds,
            user,
            env,
            command,
        } => {
            let Err(e) = exec::exec(&exec::ExecRequest {
                drv,
                features,
                config: cli.config.clone(),
                extra_binds: binds,
                command,
                user: user.unwrap_or(exec::DEFAULT_USER),
                env,
                environment: Environment::of_process(),
                caller_env: std::env::vars_os().collect(),
            });
            log::error(e);
            2
        }
        Command::CheckConfig { content_only } => check_config(content_only, config),
    }
}

/// `explain`: the plan for a build of `drv` and/or `features`, as text or JSON.
fn run_explain(drv: Option<&Path>, features: &[String], json: bool, config: Option<&Path>) -> u8 {
    if drv.is_none() && features.is_empty() {
        log::error("explain needs a .drv path or --features");
        return 2;
    }
    let e = explain::explain(drv, features, config, &Environment::of_process());
    let text = if json {
        match serde_json::to_string_pretty(&e) {
            Ok(text) => text + "\n",
            Err(e) => {
                log::error(format_args!("cannot render the explanation as JSON: {e}"));
                return 2;
            }
        }
    } else {
        explain::render_text(&e)
    };
    print_quietly(&text)
}

/// Writes `text` to stdout: 0, or 2 with a log line when it cannot be written. A reader that
/// went away (a closed pipe) is no error: `println!` would panic there, as SIGPIPE is ignored.
fn print_quietly(text: &str) -> u8 {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            log::error(format_args!("cannot write to stdout: {e}"));
            2
        }
        _ => 0,
    }
}

/// `check-config`: loads the configuration (trusted first, unless `content_only`) and says
/// how many rules it has and what it notes.
fn check_config(content_only: bool, config: Option<&Path>) -> u8 {
    let env = Environment::of_process();
    let source = cuda_sandbox_hook::config::locate(config, env.config.as_deref());
    let loaded = if content_only {
        cuda_sandbox_hook::config::Config::load_content(&source)
    } else {
        cuda_sandbox_hook::config::Config::load(&source)
    };
    match loaded {
        Ok(c) => {
            let scope = if content_only {
                " (content only: ownership and mode not checked)"
            } else {
                ""
            };
            let mut text = format!("config {source}: ok, {} rule(s){scope}\n", c.rules.len());
            text.extend(c.notes().iter().map(|note| format!("note: {note}\n")));
            print_quietly(&text)
        }
        Err(e) => {
            log::error(e);
            2
        }
    }
}

/// `UID` or `UID:GID` (the group defaults to the uid's number).
fn parse_user(text: &str) -> Result<(u32, u32), String> {
    let number = |t: &str| {
        t.parse::<u32>()
            .map_err(|_| format!("{t:?} is not a numeric uid/gid: give e.g. --user 30001:30000"))
    };
    match text.split_once(':') {
        Some((u, g)) => Ok((number(u)?, number(g)?)),
        None => number(text).map(|u| (u, u)),
    }
}

fn run_hook(drv: &Path, chroot: &Path, config: Option<&Path>) -> u8 {
    match hook::pre_build(drv, chroot, config, &Environment::of_process()) {
        Ok(answer) => {
            let mut out = std::io::stdout().lock();
            if out.write_all(&answer).and_then(|()| out.flush()).is_err() {
                log::error("cannot write the answer to Nix on stdout");
                return 1;
            }
            0
        }
        Err(e) => {
            log::error(e);
            1
        }
    }
}
