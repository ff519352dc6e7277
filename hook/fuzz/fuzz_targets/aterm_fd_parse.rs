//! Fuzzes what the hook reads from `DRV_ATERM_FD` (NixOS/nix#16413): the bytes, handed over in
//! a memfd (as an anonymous temporary file) or a pipe, must come back whole when under the
//! cap, be refused above it, and never block; then the ATerm or JSON reader takes them as the
//! hook does (JSON when they start with `{`), never panicking.
#![no_main]

use cuda_sandbox_hook::drv::{DrvEnv, JsonDerivation};
use cuda_sandbox_hook::request::{read_aterm_fd, FdLimits};
use libfuzzer_sys::fuzz_target;
use std::io::{Seek, Write};
use std::os::fd::AsRawFd;
use std::time::Duration;

const LIMITS: FdLimits = FdLimits {
    max_bytes: 4096,
    pipe_wait: Duration::from_millis(100),
};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the carrier: even a memfd, odd a pipe (written whole, then closed).
    let (pipe, data) = match data.split_first() {
        Some((first, rest)) => (first % 2 == 1 && rest.len() < 60_000, rest),
        None => (false, data),
    };
    let read = if pipe {
        let (r, w) = nix::unistd::pipe().unwrap();
        let mut w = std::fs::File::from(w);
        w.write_all(data).unwrap();
        drop(w);
        read_aterm_fd(&r.as_raw_fd().to_string(), &LIMITS)
    } else {
        let fd = nix::sys::memfd::memfd_create(c"drv", nix::sys::memfd::MemFdCreateFlag::empty())
            .unwrap();
        let mut f = std::fs::File::from(fd);
        f.write_all(data).unwrap();
        f.rewind().unwrap();
        read_aterm_fd(&f.as_raw_fd().to_string(), &LIMITS)
    };
    match read {
        Ok(bytes) => {
            assert_eq!(bytes, data);
            if bytes.trim_ascii_start().starts_with(b"{") {
                if let Ok(d) = JsonDerivation::parse(&bytes) {
                    let _ = d.attrs();
                }
            } else if let Ok(env) = DrvEnv::parse(&bytes) {
                let _ = env.attrs();
            }
        }
        Err(e) => assert!(
            data.len() as u64 > LIMITS.max_bytes,
            "{e} for {} bytes",
            data.len()
        ),
    }
});
