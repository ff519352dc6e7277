//! The forked child that becomes the command, and the signals exec passes on to it.

use super::stdio::{close_descriptors_above_stderr, Stdio};
use super::ExecError;
use nix::mount::{mount, MsFlags};
use std::ffi::CString;
use std::path::Path;

/// The command exec waits for, for the signal handler.
static COMMAND_PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// How many of SIGINT, SIGTERM, SIGHUP, SIGQUIT exec has been sent.
static SIGNALS_SEEN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The command has its own session, so the terminal's Ctrl-C no longer reaches it, and as PID
/// 1 of its namespace it ignores signals it has no handler for: exec passes on the first
/// SIGINT, SIGTERM, SIGHUP or SIGQUIT it gets, and ends the command (SIGKILL) at the second.
pub(super) fn forward_signals_to(child: nix::unistd::Pid) {
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
pub(super) fn run_child(
    root: &Path,
    user: (u32, u32),
    stdio: &Stdio,
    path: &CString,
    args: &[CString],
    env: &[CString],
) -> Result<std::convert::Infallible, ExecError> {
    use std::os::fd::AsRawFd;
    let sys = |what: &'static str| move |e| ExecError::sys(what, e);
    // No controlling terminal from here on: TIOCSTI, /dev/tty and job control signals need
    // one.
    nix::unistd::setsid().map_err(sys("setsid"))?;
    for (fd, with) in stdio.replace.iter().enumerate() {
        if let Some(with) = with {
            nix::unistd::dup2(with.as_raw_fd(), fd as i32).map_err(sys("standard streams"))?;
        }
    }
    // Mounted from inside the namespace, so it shows this namespace's processes only.
    mount(
        Some("proc"),
        &root.join("proc"),
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(sys("mounting /proc"))?;
    nix::unistd::chroot(root).map_err(sys("chroot"))?;
    std::env::set_current_dir("/build").map_err(|e| ExecError::io("/build", e))?;
    nix::unistd::setgroups(&[]).map_err(sys("dropping supplementary groups"))?;
    nix::unistd::setgid(nix::unistd::Gid::from_raw(user.1)).map_err(sys("setgid"))?;
    nix::unistd::setuid(nix::unistd::Uid::from_raw(user.0)).map_err(sys("setuid"))?;
    // SAFETY: prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) only sets a flag of this process.
    if unsafe { nix::libc::prctl(nix::libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(ExecError::sys("no_new_privs", nix::Error::last()));
    }
    close_descriptors_above_stderr();
    nix::unistd::execve(path, args, env)
        .map_err(|e| ExecError::sys(format!("running {}", path.to_string_lossy()), e))
}
