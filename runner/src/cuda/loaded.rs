//! Which file the dynamic loader actually loaded: `dladdr` on one of its symbols, then
//! `realpath`.

use std::ffi::{c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use serde::Serialize;

/// A loaded shared library's file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadedFile {
    /// The path the loader opened (e.g. `/run/opengl-driver/lib/libcuda.so.1`).
    pub path: PathBuf,
    /// That path with every symlink resolved (e.g. a `/nix/store/…` file).
    pub real_path: PathBuf,
}

impl LoadedFile {
    /// The file containing `address` (only looked up, never dereferenced), or `None` if the loader knows no such object.
    pub fn containing(address: usize) -> Option<LoadedFile> {
        // SAFETY: dladdr only reads the loader's tables; `info` is plain old data.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        if unsafe { libc::dladdr(address as *const c_void, &mut info) } == 0
            || info.dli_fname.is_null()
        {
            return None;
        }
        // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
        let name = unsafe { CStr::from_ptr(info.dli_fname) };
        let path = PathBuf::from(OsStr::from_bytes(name.to_bytes()));
        let real_path = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        Some(LoadedFile { path, real_path })
    }

    /// Whether either the loader's path or the real path lies under `prefix`.
    pub fn is_under(&self, prefix: &std::path::Path) -> bool {
        self.path.starts_with(prefix) || self.real_path.starts_with(prefix)
    }
}
