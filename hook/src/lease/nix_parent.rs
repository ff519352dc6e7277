//! Whether the hook's parent is the Nix that runs it, told by what Nix holds rather than by who
//! the parent is: Nix runs the pre-build hook with its standard output a pipe whose read end
//! Nix keeps and reads (`runProgram` in Nix's `processes.cc`, on 2.8, 2.26 and 2.34; the pipe is
//! made `O_CLOEXEC`, so no process the hook starts inherits that end). A wrapper that does not
//! `exec` the hook, or a person running it, holds the write end at most.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// Whether process `pid` holds, read-only, the read end of the pipe that is this process's
/// standard output.
pub(super) fn reads_our_stdout(pid: u32) -> bool {
    let Some(pipe) = own_stdout_pipe() else {
        return false;
    };
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == pipe.as_str())
            && read_only(&Path::new(&format!("/proc/{pid}/fdinfo")).join(fd.file_name()))
    })
}

/// `pipe:[<inode>]`, as `/proc/<pid>/fd` names this process's standard output, when it is a
/// pipe.
fn own_stdout_pipe() -> Option<String> {
    let target = std::fs::read_link("/proc/self/fd/1").ok()?;
    let is_fifo = std::fs::metadata("/proc/self/fd/1")
        .ok()?
        .file_type()
        .is_fifo();
    let name = target.to_str()?;
    (is_fifo && name.starts_with("pipe:[")).then(|| name.to_owned())
}

/// Whether the descriptor `fdinfo` describes (`/proc/<pid>/fdinfo/<fd>`, proc(5)) was opened
/// read-only: its `flags` (octal) have the access mode `O_RDONLY`.
fn read_only(fdinfo: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(fdinfo) else {
        return false;
    };
    text.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|flags| flags & nix::libc::O_ACCMODE as u32 == nix::libc::O_RDONLY as u32)
}
