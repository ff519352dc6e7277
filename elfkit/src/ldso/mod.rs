//! glibc's dynamic loader, modelled once: which file each name gets, and what one process
//! loads. The hook's `exec` (which libraries a command needs bound) and the runner's
//! `package::driver` (which `libcuda.so.1` an object would get) both ask it, so they cannot
//! disagree; a caller's own policy (the hook's trusted directories) sits on top, in its
//! [`Fs`].
//!
//! The rules, from glibc's `elf/dl-load.c` (`_dl_map_new_object`, `open_path`,
//! `open_verify`, `fillin_rpath`, `_dl_dst_substitute`), `elf/dl-cache.c`, `elf/dl-open.c`,
//! `elf/dl-deps.c` and `elf/dl-hwcaps.c` (bminor/glibc), and ld.so(8):
//!
//! - A name already loaded (a name an object was loaded by, its path, or its soname) is that
//!   object, searched for nowhere (`_dl_lookup_map`); so is a file already loaded under
//!   another name (same device and inode).
//! - A name with `/` is opened as it is, its DSTs replaced. Any other is searched:
//!   1. unless the loading object has `DT_RUNPATH`: its `DT_RPATH`, then that of the object
//!      that caused it to be loaded, and on up (`l_loader`), then the executable's if not
//!      among them. An object with `DT_RUNPATH` has no `DT_RPATH` of its own;
//!   2. `LD_LIBRARY_PATH` (split at `:` and `;`), its `$ORIGIN` the executable's;
//!   3. the loading object's `DT_RUNPATH` (never inherited);
//!   4. the loader's cache ([`cache`]);
//!   5. the loader's default directories.
//! - The loading object is the one whose `DT_NEEDED` it is, or for `dlopen` the caller's
//!   object: a `libcudart.so`, or an ELF file with a static cudart inside, searches its own
//!   `DT_RUNPATH`. What `dlopen` loads has no `l_loader` (`__RTLD_CALLMAP`): its own
//!   dependencies inherit no `DT_RPATH` of the caller's chain (the executable's still
//!   applies).
//! - `DT_NEEDED` are loaded breadth first (`_dl_map_object_deps`).
//! - In `DT_RPATH`, `DT_RUNPATH` and `LD_LIBRARY_PATH` entries `$ORIGIN`, `$LIB` and
//!   `$PLATFORM` (also `${…}`) are replaced; an entry with one that cannot be replaced is
//!   dropped; an empty entry is the current directory; trailing slashes are dropped and a
//!   directory already in the same list is not repeated. A library's `$ORIGIN` is the
//!   directory of the path it was loaded by (symlinks not followed); the executable's, of
//!   its real path when the kernel started it.
//! - Each directory is tried with each glibc-hwcaps subdirectory the loader searches
//!   (`glibc-hwcaps/x86-64-v3`…), then (glibc 2.33 to 2.36) the legacy ones, then on its own.
//! - A file found must be an ELF file the loader can use: one of the other ELF class or for
//!   another machine is passed over; anything else that is not usable ends the search with
//!   an error ("invalid ELF header"). A file missing, unreadable or under a non-directory is
//!   passed over; another open error ends that list.
//!
//! Which loader is a parameter ([`Loader`]): Debian's and Nixpkgs' glibc differ in the cache
//! they read and their default directories ([`Loader::nixpkgs`]).
//!
//! Not modelled: `LD_PRELOAD` and the preload file, audit modules, `--inhibit-rpath`,
//! `DF_1_NODEFLIB`, secure-execution mode (setuid: `$ORIGIN` rules, the cache and
//! `LD_LIBRARY_PATH` for `__RTLD_SECURE`), namespaces (`dlmopen`), `DT_FILTER`/`DT_AUXILIARY`,
//! the x86 ISA-level marker check (`elf_machine_reject_phdr_p`), legacy hwcaps entries of
//! the cache, `_dl_cache_libcmp`'s numeric name comparison (names are compared as bytes), and
//! what happens after a file is chosen (symbols, versions, a PIE opened with `dlopen`).
//!
//! ```no_run
//! use cuda_sandbox_elfkit::ldso::{Environment, Loader, Process, RealFs, Start};
//! # use std::path::Path;
//! let loader = Loader::ask(Path::new("/lib64/ld-linux-x86-64.so.2")).unwrap();
//! let mut process = Process::new(&loader, &RealFs, Environment::default());
//! let main = process.start(Path::new("/usr/bin/nvidia-smi"), Start::Kernel).unwrap();
//! let libcuda = process.dlopen("libcuda.so.1", main);
//! for (_, object) in process.objects() {
//!     println!("{}", object.path.display());
//! }
//! # let _ = libcuda;
//! ```

pub mod cache;
mod cpu;
mod fs;
mod loader;
mod process;
mod search;

pub use cpu::{glibc_hwcaps, platform};
pub use fs::{kind, read_opened, FileId, Fs, Opened, RealFs, HEAD_LEN};
pub use loader::{AskError, ElfHost, Loader, NoSystemSearchPath};
pub use process::{Dlopen, Environment, Missing, Object, Process, Start, StartError};
pub use search::{expand_dsts, verify_header, Attempt, Outcome, Search, SearchList, Source, Tried};

#[cfg(test)]
mod tests;
