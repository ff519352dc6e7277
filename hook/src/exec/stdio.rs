//! The command's standard streams and descriptors: no terminal of exec's, nothing above 2.

/// How the command's standard streams reach exec's: a terminal never does. stdin on a
/// terminal becomes `/dev/null` (a build reads no terminal); stdout and stderr on a terminal
/// become pipes that exec copies to it. Anything else (a file, a pipe) is passed as it is.
#[derive(Default)]
pub(super) struct Stdio {
    /// For each of 0, 1, 2: the descriptor the command gets instead, if not exec's own.
    pub(super) replace: [Option<std::os::fd::OwnedFd>; 3],
    /// For 1 and 2 when piped: the read end exec copies from.
    relay: [Option<std::os::fd::OwnedFd>; 2],
}

impl Stdio {
    pub(super) fn for_command() -> std::io::Result<Stdio> {
        use std::os::fd::OwnedFd;
        let is_tty = |fd| nix::unistd::isatty(fd).unwrap_or(false);
        let mut stdio = Stdio::default();
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
    pub(super) fn relay(self) {
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

/// Closes every descriptor from 3 up: whatever exec inherited (or opened) stays with exec.
pub(super) fn close_descriptors_above_stderr() {
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
