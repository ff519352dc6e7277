//! Which file the dynamic loader actually loaded: `dladdr` on one of its symbols, then
//! `realpath`.

use std::ffi::{c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A loaded shared library's file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LoadedFile {
    /// The path the loader opened (e.g. `/run/opengl-driver/lib/libcuda.so.1`).
    pub(crate) path: PathBuf,
    /// That path with every symlink resolved (e.g. a `/nix/store/…` file).
    pub(crate) real_path: PathBuf,
}

impl LoadedFile {
    /// The file containing `address` (only looked up, never dereferenced), or `None` if the loader knows no such object.
    pub(crate) fn containing(address: usize) -> Option<LoadedFile> {
        // SAFETY: `Dl_info` is plain old data; all zeroes is a valid value.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads the loader's tables and writes `info`.
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
    pub(crate) fn is_under(&self, prefix: &std::path::Path) -> bool {
        self.path.starts_with(prefix) || self.real_path.starts_with(prefix)
    }
}

/// `Dl_serpath` of `<dlfcn.h>`: one directory of the loader's search path.
#[repr(C)]
struct SearchPath {
    name: *mut libc::c_char,
    flags: libc::c_uint,
}

/// `Dl_serinfo` of `<dlfcn.h>` (glibc), with room for `count` entries after it.
#[repr(C)]
struct SearchInfo {
    size: libc::size_t,
    count: libc::c_uint,
    first: SearchPath,
}

const RTLD_DI_SERINFO: libc::c_int = 4;
const RTLD_DI_SERINFOSIZE: libc::c_int = 5;

/// The directories the dynamic loader searches, in its order, for a library this program
/// loads by name (LD_LIBRARY_PATH, the program's RUNPATH, the system directories; the
/// `ld.so.cache` is consulted between the last two and is not a directory). Asked of the loader
/// itself with `dlinfo(RTLD_DI_SERINFO)`; empty if it cannot say.
pub(crate) fn loader_search_path() -> Vec<PathBuf> {
    // SAFETY: dlopen(NULL) returns the main program's handle; dlinfo with SERINFOSIZE fills a
    // Dl_serinfo header (plain old data: all zeroes, a null name, is a valid value), then
    // SERINFO fills a buffer of that size (8-byte aligned here, as the struct needs), whose
    // string pointers point into the same buffer.
    unsafe {
        let handle = libc::dlopen(std::ptr::null(), libc::RTLD_LAZY);
        if handle.is_null() {
            return Vec::new();
        }
        let mut header: SearchInfo = std::mem::zeroed();
        if libc::dlinfo(
            handle,
            RTLD_DI_SERINFOSIZE,
            (&mut header as *mut SearchInfo).cast(),
        ) != 0
        {
            return Vec::new();
        }
        let words = header
            .size
            .div_ceil(8)
            .max(std::mem::size_of::<SearchInfo>() / 8);
        let mut buffer = vec![0u64; words];
        let info = buffer.as_mut_ptr().cast::<SearchInfo>();
        (*info).size = header.size;
        (*info).count = header.count;
        if libc::dlinfo(handle, RTLD_DI_SERINFO, info.cast()) != 0 {
            return Vec::new();
        }
        let first = std::ptr::addr_of!((*info).first);
        (0..(*info).count as usize)
            .filter_map(|i| {
                let entry = &*first.add(i);
                (!entry.name.is_null()).then(|| {
                    PathBuf::from(OsStr::from_bytes(CStr::from_ptr(entry.name).to_bytes()))
                })
            })
            .collect()
    }
}

/// Whether the dynamic loader can load `name` into this process (it stays loaded; nothing in
/// it is called, but its initialisers run).
pub(crate) fn library_loads(name: &str) -> bool {
    // SAFETY: loading runs the library's initialisers, which is what this asks about; no
    // symbol of it is used.
    unsafe { libloading::Library::new(name) }.is_ok()
}
