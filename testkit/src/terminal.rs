//! A real terminal for tests: a fresh pseudo-terminal that is the controlling tty of the
//! command run on it, with everything the command printed and everything that was typed
//! into the terminal's input (by TIOCSTI, say) read back afterwards.
//!
//! The harness holds the terminal's slave side itself, so input typed into it stays queued
//! after the command ends and is read directly from the line discipline: nothing depends on
//! a shell reading it in time or on a wrapper such as `script` passing the last lines on.

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::pty::{openpty, OpenptyResult};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a command run on a fresh terminal left behind.
#[derive(Debug)]
pub struct TerminalRun {
    /// Everything written to the terminal (the command's output and the terminal's echo).
    pub output: String,
    /// The complete lines waiting in the terminal's input once the command ended: what a shell
    /// reading this terminal next would have run.
    pub typed: String,
    /// How the command ended; `None` when it was killed at the time limit.
    pub status: Option<ExitStatus>,
}

/// Runs `command` as the leader of a new session whose controlling terminal is a fresh pty
/// (standard input, output and error all on it), for at most `limit`.
pub fn run_on_a_fresh_terminal(command: &mut Command, limit: Duration) -> TerminalRun {
    let OpenptyResult { master, slave } = openpty(None, None).expect("openpty");
    set_nonblocking(&master);
    let stdio = |fd: &OwnedFd| Stdio::from(fd.try_clone().expect("dup the pty's slave side"));
    command
        .stdin(stdio(&slave))
        .stdout(stdio(&slave))
        .stderr(stdio(&slave));
    // SAFETY: the closure runs in the child between fork and exec and calls only setsid(2)
    // and ioctl(2), both async-signal-safe; it touches no memory shared with the parent.
    unsafe {
        command.pre_exec(|| {
            if nix::libc::setsid() < 0 || nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("spawn the command on the pty");
    let mut master = std::fs::File::from(master);
    let mut output = Vec::new();
    let deadline = Instant::now() + limit;
    let status = loop {
        drain(&mut master, &mut output);
        if let Some(status) = child.try_wait().expect("wait for the command") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    drain(&mut master, &mut output);
    set_nonblocking(&slave);
    let mut typed = Vec::new();
    drain(&mut std::fs::File::from(slave), &mut typed);
    TerminalRun {
        output: String::from_utf8_lossy(&output).into_owned(),
        typed: String::from_utf8_lossy(&typed).into_owned(),
        status,
    }
}

fn set_nonblocking(fd: &impl AsFd) {
    let raw = fd.as_fd().as_raw_fd();
    let flags = OFlag::from_bits_truncate(fcntl(raw, FcntlArg::F_GETFL).expect("F_GETFL"));
    fcntl(raw, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)).expect("F_SETFL O_NONBLOCK");
}

/// Reads what a non-blocking terminal side holds now, until it would block or has no writer.
fn drain(side: &mut std::fs::File, into: &mut Vec<u8>) {
    let mut buf = [0u8; 4096];
    loop {
        match side.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => into.extend_from_slice(&buf[..n]),
            // EAGAIN: nothing more now; EIO: the other side has no open descriptor left.
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_runs_on_its_own_terminal_and_its_output_comes_back() {
        // The typed-input side is exercised where it matters, by exec's terminal test (its
        // control run types a line with TIOCSTI); here: a pty, the controlling one, output.
        let run = run_on_a_fresh_terminal(
            Command::new("sh").args(["-c", "tty; tty < /dev/tty; echo out-of-the-command"]),
            Duration::from_secs(20),
        );
        assert!(run.status.is_some_and(|s| s.success()), "{run:?}");
        let lines: Vec<&str> = run.output.lines().map(str::trim_end).collect();
        assert!(lines[0].starts_with("/dev/pts/"), "not on a pty: {run:?}");
        // `tty < /dev/tty` names /dev/tty only when the command has a controlling terminal.
        assert_eq!(lines[1], "/dev/tty", "no controlling terminal: {run:?}");
        assert!(run.output.contains("out-of-the-command"), "{run:?}");
        assert_eq!(run.typed, "", "{run:?}");
    }
}
