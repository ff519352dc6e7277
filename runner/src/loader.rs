//! Which `libcuda.so.1` would *this* object get? The search glibc's dynamic loader makes for a
//! name without `/`, modelled as data so it can be explained in messages and checked in tests.
//!
//! Three kinds of objects open the driver: a `libcudart.so` (it `dlopen`s `libcuda.so.1`), an
//! ELF file with a static libcudart inside (its `dlopen` comes from that object, so that
//! object's own `DT_RUNPATH` applies), and an ELF file with `libcuda.so.1` in `DT_NEEDED`. In
//! each case the object doing the loading is the `object` given to [`resolve`].
//!
//! The order is glibc's `_dl_map_new_object` (elf/dl-load.c, bminor/glibc), also described in
//! ld.so(8):
//!
//! 1. when the loading object has no `DT_RUNPATH`: its `DT_RPATH`, then the executable's
//!    `DT_RPATH` (glibc walks the chain of objects that caused the loading one to be loaded;
//!    here that chain is the object and then the executable);
//! 2. `LD_LIBRARY_PATH` (separators `:` and `;`; ignored in secure-execution mode, where it is
//!    removed from the environment: pass none then);
//! 3. `DT_RUNPATH` of the loading object only (not the executable's, not inherited);
//! 4. the `ld.so.cache` of the loader (unless built not to read `/etc/ld.so.cache`: Nixpkgs'
//!    glibc, patched by `dont-use-system-ld-so-cache.patch`, reads `$out/etc/ld.so.cache` of
//!    its own store path, which does not exist). **The cache is not modelled**: with
//!    [`SearchContext::use_ld_so_cache`] set the search notes the step and goes on to
//! 5. the default directories, the interpreter's "system search path" ([`default_dirs_of`]).
//!
//! Each directory is tried with each supported `glibc-hwcaps` subdirectory first
//! ([`SearchContext::hwcaps_subdirs`]), then on its own. In `DT_RPATH`, `DT_RUNPATH` and
//! `LD_LIBRARY_PATH` entries `$ORIGIN`, `$LIB` and `$PLATFORM` (also `${…}`) are replaced; an
//! entry with one that cannot be replaced is dropped; an empty entry is the current directory;
//! trailing slashes are dropped and a directory already in the same list is not repeated. The
//! `$ORIGIN` of a library is the directory of the path it was loaded by (a symlink is *not*
//! followed: measured with the Debian loader); that of the executable is the directory of its
//! real path (glibc reads `/proc/self/exe`).
//!
//! A file found must be an ELF file the loader can use: one of the other ELF class or for
//! another machine is skipped and the search goes on; anything else that is not a usable ELF
//! file (not ELF at all, too short, a directory, another byte order, `ET_REL`) ends the whole
//! search with an error, as glibc's `open_verify` does ("invalid ELF header"). A file that
//! cannot be opened because it is missing, not readable or under a non-directory is passed
//! over; any other open error ends that one list.
//!
//! Not modelled: a `libcuda.so.1` already loaded in the process (same name or soname: glibc's
//! `_dl_lookup_map` returns it and searches nothing; we model a fresh process), `ld.so.cache`
//! contents, `DF_1_NODEFLIB` (which skips the cache and the default directories), legacy hwcaps
//! subdirectories (`tls/`, `x86_64/`: glibc ≤ 2.36 only), `LD_PRELOAD`, audit modules,
//! `--inhibit-rpath`, the secure-execution rules for `$ORIGIN`, objects between the loading one
//! and the executable in the loader chain, and failures after the file is chosen (missing
//! dependencies, symbol versions, a PIE opened with `dlopen`).

use cuda_sandbox_elfkit::DynamicInfo;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What the search needs beside the object itself: the process's environment, its executable
/// and its dynamic loader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchContext {
    /// `LD_LIBRARY_PATH`, split at `:` and `;`, empty entries kept (the current directory).
    /// Empty when it is unset, empty, or the process runs in secure-execution mode.
    pub ld_library_path: Vec<String>,
    /// The executable's `DT_RPATH` when it has one and no `DT_RUNPATH`; searched after the
    /// loading object's own `DT_RPATH`, and only when that object has no `DT_RUNPATH`.
    pub executable_rpath: Option<Vec<String>>,
    /// The executable's path, for `$ORIGIN` in its `DT_RPATH` and in `LD_LIBRARY_PATH`. An
    /// entry naming `$ORIGIN` is dropped when it is not known.
    pub executable: Option<PathBuf>,
    /// The interpreter's default directories ("system search path"), in order.
    pub default_dirs: Vec<PathBuf>,
    /// Whether the loader reads an `ld.so.cache` between `DT_RUNPATH` and the default
    /// directories (false for Nixpkgs' glibc). The cache itself is not modelled: the search
    /// records the step and goes on to the default directories.
    pub use_ld_so_cache: bool,
    /// The subdirectories tried in each directory before the directory itself, in order
    /// (`glibc-hwcaps/x86-64-v3`, …); see [`InterpreterInfo::hwcaps_subdirs`].
    pub hwcaps_subdirs: Vec<String>,
    /// What `$LIB` stands for: `lib` for upstream and Nixpkgs glibc (the last component of its
    /// `slibdir`), `lib/x86_64-linux-gnu` for Debian's (measured).
    pub dst_lib: String,
    /// What `$PLATFORM` stands for (`AT_PLATFORM`, `x86_64` on x86-64); entries naming it are
    /// dropped when `None`.
    pub dst_platform: Option<String>,
    /// The ELF class and machine the loader accepts (the process's own).
    pub host: ElfHost,
}

impl SearchContext {
    /// A context with these default directories and nothing else: no `LD_LIBRARY_PATH`, no
    /// executable, no cache, no hwcaps subdirectories, `$LIB` = `lib`, `$PLATFORM` as this
    /// process's `AT_PLATFORM`, this process's ELF class and machine.
    pub fn new(default_dirs: Vec<PathBuf>) -> SearchContext {
        SearchContext {
            ld_library_path: Vec::new(),
            executable_rpath: None,
            executable: None,
            default_dirs,
            use_ld_so_cache: false,
            hwcaps_subdirs: Vec::new(),
            dst_lib: "lib".to_string(),
            dst_platform: at_platform(),
            host: ElfHost::native(),
        }
    }

    /// A context as the loader `interpreter` ([`interpreter_info`]) sets it up for
    /// `executable`, with `LD_LIBRARY_PATH` as given (pass the environment's). `$LIB` is left
    /// as `lib` (upstream and Nixpkgs); set [`SearchContext::dst_lib`] for other loaders.
    pub fn for_process(
        interpreter: &Path,
        executable: Option<&Path>,
        ld_library_path: Option<&str>,
    ) -> Result<SearchContext, ContextError> {
        let interp = interpreter_info(interpreter)?;
        let mut ctx = SearchContext::new(interp.default_dirs.clone());
        ctx.use_ld_so_cache = interp.reads_ld_so_cache();
        ctx.hwcaps_subdirs = interp.hwcaps_subdirs;
        ctx.ld_library_path = ld_library_path
            .map(split_ld_library_path)
            .unwrap_or_default();
        if let Some(exe) = executable {
            ctx.executable = Some(exe.to_path_buf());
            let unreadable = |error: String| ContextError::Executable {
                path: exe.to_path_buf(),
                error,
            };
            let bytes = std::fs::read(exe).map_err(|e| unreadable(e.to_string()))?;
            let info =
                cuda_sandbox_elfkit::dynamic_info(&bytes).map_err(|e| unreadable(e.to_string()))?;
            // An executable with DT_RUNPATH has its DT_RPATH ignored (get-dynamic-info.h).
            ctx.executable_rpath =
                info.and_then(|i| if i.runpath.is_some() { None } else { i.rpath });
        }
        Ok(ctx)
    }
}

/// `LD_LIBRARY_PATH` as glibc splits it (`_dl_init_paths`): at `:` and `;`, empty entries
/// kept; an empty value is no path at all.
pub fn split_ld_library_path(value: &str) -> Vec<String> {
    if value.is_empty() {
        return Vec::new();
    }
    value.split([':', ';']).map(String::from).collect()
}

/// This process's `AT_PLATFORM` (what `$PLATFORM` expands to), when the kernel gave one.
pub fn at_platform() -> Option<String> {
    // SAFETY: getauxval has no preconditions; AT_PLATFORM, when present, points at a
    // NUL-terminated string the kernel put on the initial stack, alive for the whole process.
    let p = unsafe { libc::getauxval(libc::AT_PLATFORM) } as *const libc::c_char;
    if p.is_null() {
        return None;
    }
    // SAFETY: as above, a valid NUL-terminated string that is never freed.
    let s = unsafe { std::ffi::CStr::from_ptr(p) };
    Some(s.to_string_lossy().into_owned())
}

/// The ELF class and machine a loader accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfHost {
    /// `ELFCLASS64` (else 32).
    pub class64: bool,
    /// Little-endian (`ELFDATA2LSB`).
    pub little_endian: bool,
    /// `e_machine` (`EM_X86_64` = 62, `EM_AARCH64` = 183).
    pub machine: u16,
}

impl ElfHost {
    /// This process's own class, byte order and machine.
    pub fn native() -> ElfHost {
        let machine = match std::env::consts::ARCH {
            "x86_64" => 62,
            "x86" => 3,
            "aarch64" => 183,
            "arm" => 40,
            "powerpc64" | "powerpc" => 21,
            "riscv64" => 243,
            _ => 0,
        };
        ElfHost {
            class64: cfg!(target_pointer_width = "64"),
            little_endian: cfg!(target_endian = "little"),
            machine,
        }
    }
}

/// What the loader `INTERP --help` (glibc ≥ 2.33) says about its search.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterpreterInfo {
    /// The "(system search path)" directories, in order.
    pub default_dirs: Vec<PathBuf>,
    /// The cache it reads ("(libraries located via PATH)"): `/etc/ld.so.cache` on Debian, a
    /// path inside its own store path for Nixpkgs' glibc.
    pub ld_so_cache: Option<PathBuf>,
    /// `glibc-hwcaps/NAME` for each subdirectory marked "searched", in priority order.
    pub hwcaps_subdirs: Vec<String>,
}

impl InterpreterInfo {
    /// Whether it reads a cache that exists. Nixpkgs' glibc names
    /// `/nix/store/…-glibc-…/etc/ld.so.cache`, which its output does not contain.
    pub fn reads_ld_so_cache(&self) -> bool {
        self.ld_so_cache.as_deref().is_some_and(Path::is_file)
    }
}

/// Parses the output of `INTERP --help`: the lines under "Shared library search path:" and
/// "Subdirectories of glibc-hwcaps directories, in priority order:". An output without
/// system search path lines is an error.
pub fn parse_interpreter_help(text: &str) -> Result<InterpreterInfo, NoSystemSearchPath> {
    let mut info = InterpreterInfo::default();
    let mut section = "";
    for line in text.lines() {
        if !line.starts_with(' ') && !line.starts_with('\t') {
            section = line.trim();
            continue;
        }
        let line = line.trim();
        if section.starts_with("Shared library search path") {
            if let Some(dir) = line.strip_suffix("(system search path)") {
                info.default_dirs.push(PathBuf::from(dir.trim_end()));
            } else if let Some(cache) = line
                .strip_prefix("(libraries located via ")
                .and_then(|r| r.strip_suffix(')'))
            {
                info.ld_so_cache = Some(PathBuf::from(cache));
            }
        } else if section.starts_with("Subdirectories of glibc-hwcaps directories") {
            if let Some((name, marks)) = line.split_once(" (") {
                if marks.contains("searched") {
                    info.hwcaps_subdirs.push(format!("glibc-hwcaps/{name}"));
                }
            }
        }
    }
    if info.default_dirs.is_empty() {
        return Err(NoSystemSearchPath);
    }
    Ok(info)
}

/// Runs `INTERP --help` and parses it ([`parse_interpreter_help`]).
pub fn interpreter_info(interpreter: &Path) -> Result<InterpreterInfo, InterpreterError> {
    let path = || interpreter.to_path_buf();
    let out = Command::new(interpreter)
        .arg("--help")
        .output()
        .map_err(|e| InterpreterError::CannotRun {
            interpreter: path(),
            error: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(InterpreterError::HelpFailed {
            interpreter: path(),
            status: out.status.to_string(),
        });
    }
    parse_interpreter_help(&String::from_utf8_lossy(&out.stdout)).map_err(|why| {
        InterpreterError::NoSearchPath {
            interpreter: path(),
            why,
        }
    })
}

/// `INTERP --help` without the "(system search path)" lines of glibc 2.33 and later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("its --help lists no \"(system search path)\" directories")]
pub struct NoSystemSearchPath;

/// Why a dynamic loader cannot say how it searches.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InterpreterError {
    /// It cannot be run.
    #[error("cannot run {} --help: {error}", .interpreter.display())]
    CannotRun {
        /// The loader.
        interpreter: PathBuf,
        /// Why `exec` failed.
        error: String,
    },
    /// `--help` exits with an error.
    #[error(
        "{} --help failed ({status}): it is not glibc's ld.so, or older than glibc 2.33",
        .interpreter.display()
    )]
    HelpFailed {
        /// The loader.
        interpreter: PathBuf,
        /// Its exit status.
        status: String,
    },
    /// `--help` lists no system search path.
    #[error("{}: {why}", .interpreter.display())]
    NoSearchPath {
        /// The loader.
        interpreter: PathBuf,
        /// What its output lacks.
        why: NoSystemSearchPath,
    },
}

/// Why [`SearchContext::for_process`] cannot set up a process's search.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// The loader cannot say how it searches.
    #[error(transparent)]
    Interpreter(#[from] InterpreterError),
    /// The executable cannot be read as ELF.
    #[error("{}: {error}", .path.display())]
    Executable {
        /// The executable.
        path: PathBuf,
        /// Why it cannot be read.
        error: String,
    },
}

/// The default directories of the dynamic loader `interpreter`, as its `--help` prints them
/// (glibc ≥ 2.33). Where that fails (an older glibc, another libc) there is no reliable
/// answer: [`fallback_default_dirs`] is a guess that holds for Nixpkgs' glibc.
pub fn default_dirs_of(interpreter: &Path) -> Result<Vec<PathBuf>, InterpreterError> {
    interpreter_info(interpreter).map(|i| i.default_dirs)
}

/// A guess at the default directories when `--help` cannot say: the interpreter's own
/// directory. Right for Nixpkgs' glibc (`/nix/store/…-glibc-…/lib`, where its `ld-linux`
/// lives, is its one system search path); wrong for distributions whose loader sits in
/// `/lib64` but searches `/lib/x86_64-linux-gnu` and friends (Debian, Ubuntu).
pub fn fallback_default_dirs(interpreter: &Path) -> Vec<PathBuf> {
    interpreter
        .parent()
        .map(Path::to_path_buf)
        .into_iter()
        .collect()
}

/// Why the loader opened a file that cannot be used, or how it failed to open one.
#[derive(Debug)]
pub enum HeadError {
    /// `open` failed.
    Open(io::Error),
    /// `open` worked but reading failed (a directory: `EISDIR`).
    Read(io::Error),
}

/// The file system as the loader sees it; faked in tests.
pub trait Fs {
    /// Opens `path` read-only and reads up to `len` bytes from its start.
    fn read_head(&self, path: &Path, len: usize) -> Result<Vec<u8>, HeadError>;
    /// Whether `path` is a directory (following symlinks).
    fn is_dir(&self, path: &Path) -> bool;
    /// The real path of `path`.
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf>;
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

impl Fs for RealFs {
    fn read_head(&self, path: &Path, len: usize) -> Result<Vec<u8>, HeadError> {
        use std::io::Read;
        let file = std::fs::File::open(path).map_err(HeadError::Open)?;
        let mut buf = Vec::with_capacity(len);
        file.take(len as u64)
            .read_to_end(&mut buf)
            .map_err(HeadError::Read)?;
        Ok(buf)
    }
    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }
}

/// Where a directory of the search came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `DT_RPATH` of this file (the loading object or the executable).
    Rpath(PathBuf),
    /// `LD_LIBRARY_PATH`.
    LdLibraryPath,
    /// `DT_RUNPATH` of the loading object.
    Runpath(PathBuf),
    /// The interpreter's default directories.
    Default,
    /// A name with a `/`: no search, the path itself.
    Direct,
}

impl Source {
    /// The label glibc's `LD_DEBUG=libs` prints after a search path, without the file:
    /// `RPATH`, `RUNPATH`, `LD_LIBRARY_PATH`, `system search path`.
    pub fn ld_debug_kind(&self) -> &'static str {
        match self {
            Source::Rpath(_) => "RPATH",
            Source::LdLibraryPath => "LD_LIBRARY_PATH",
            Source::Runpath(_) => "RUNPATH",
            Source::Default => "system search path",
            Source::Direct => "path",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Rpath(p) => write!(f, "DT_RPATH of {}", p.display()),
            Source::LdLibraryPath => f.write_str("LD_LIBRARY_PATH"),
            Source::Runpath(p) => write!(f, "DT_RUNPATH of {}", p.display()),
            Source::Default => f.write_str("the default directories"),
            Source::Direct => f.write_str("the path itself"),
        }
    }
}

/// One list of directories, from one source, after `$ORIGIN`/`$LIB`/`$PLATFORM` expansion,
/// dropped entries and repeats removed. `""` is the current directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchList {
    /// Where it came from.
    pub source: Source,
    /// The directories, without trailing slashes (except `/`).
    pub dirs: Vec<String>,
}

/// What trying one file gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// Not there, not readable, or a path component is not a directory: the search goes on.
    Missing,
    /// An ELF file of the other class: skipped ("wrong ELF class" if nothing else is found).
    OtherClass,
    /// An ELF file for another machine: skipped.
    OtherMachine,
    /// Opening failed otherwise (`ELOOP`, `ENAMETOOLONG`, …): the rest of this list is
    /// skipped, the search goes on with the next source.
    ListEnded(String),
    /// Not a usable ELF file: the search ends with this error.
    Unusable(String),
    /// A file the loader takes.
    Loadable,
}

/// One file the loader tries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tried {
    /// The list it belongs to.
    pub source: Source,
    /// The directory tried, hwcaps subdirectory included (`""`: the current directory).
    pub dir: String,
    /// The file tried, as the loader names it (`LD_DEBUG`'s "trying file=").
    pub file: PathBuf,
    /// Whether `dir` exists. glibc remembers directories it found missing and does not try
    /// them again; compare with `LD_DEBUG` on existing directories only.
    pub dir_exists: bool,
    /// What trying it gave.
    pub attempt: Attempt,
}

/// How the search ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// This file is loaded.
    Found {
        /// The path the loader opened (the loaded object's `l_name`).
        path: PathBuf,
        /// Its real path (symlinks resolved), when it can be had.
        real_path: Option<PathBuf>,
        /// The list it was found through.
        source: Source,
    },
    /// The search stopped at a file that is not a usable ELF file: `dlopen` fails.
    Error {
        /// The file.
        path: PathBuf,
        /// glibc's message (`invalid ELF header`, …).
        reason: String,
    },
    /// Nothing found.
    NotFound {
        /// Some candidate was of the other ELF class (glibc then says "wrong ELF class").
        other_class: bool,
    },
}

/// The whole search for one name from one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// The name looked for.
    pub name: String,
    /// The object doing the loading, as given.
    pub object: PathBuf,
    /// The lists, in search order (lists the search did not reach included).
    pub lists: Vec<SearchList>,
    /// Whether the loader would consult its `ld.so.cache` before the default directories
    /// (not modelled: such a search may end there in reality).
    pub ld_so_cache_skipped: bool,
    /// Every file tried, in order.
    pub tried: Vec<Tried>,
    /// How it ended.
    pub outcome: Outcome,
}

impl Resolution {
    /// The file loaded, when one is.
    pub fn found(&self) -> Option<&Path> {
        match &self.outcome {
            Outcome::Found { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The search path in one line, for messages: `DT_RUNPATH [/a:/b], then the default
    /// directories [/c]`. Empty lists are left out; the cache is named where it is read.
    pub fn describe(&self) -> String {
        describe(&self.lists, &self.object, self.ld_so_cache_skipped)
    }
}

/// The one-line description of `lists` searched for `object` ([`Resolution::describe`]):
/// the object's own lists are named by their tag alone, the executable's as "the
/// executable's DT_RPATH (PATH)"; `ld_so_cache` names the (unmodelled) cache step.
pub fn describe(lists: &[SearchList], object: &Path, ld_so_cache: bool) -> String {
    let mut parts = Vec::new();
    for list in lists {
        if list.dirs.is_empty() && list.source != Source::Default {
            continue;
        }
        let dirs = list
            .dirs
            .iter()
            .map(|d| if d.is_empty() { "." } else { d.as_str() })
            .collect::<Vec<_>>()
            .join(":");
        let what = match &list.source {
            Source::Rpath(p) if p == object => "DT_RPATH".to_string(),
            Source::Rpath(p) => format!("the executable's DT_RPATH ({})", p.display()),
            Source::Runpath(_) => "DT_RUNPATH".to_string(),
            Source::Default if ld_so_cache => {
                "ld.so.cache (not modelled), then the default directories".to_string()
            }
            other => other.to_string(),
        };
        parts.push(format!("{what} [{dirs}]"));
    }
    parts.join(", then ")
}

/// The lists the loader searches for a name without `/` loaded by `object` (whose dynamic
/// information is `info`), in order. `object` is the path it was loaded by; an object with
/// `PT_INTERP` is taken to be the executable.
pub fn search_lists(
    object: &Path,
    info: &DynamicInfo,
    ctx: &SearchContext,
    fs: &impl Fs,
) -> Vec<SearchList> {
    let is_executable = info.interpreter.is_some();
    let own_origin = if is_executable {
        executable_origin(object, fs)
    } else {
        library_origin(object)
    };
    let exe_origin = if is_executable {
        own_origin.clone()
    } else {
        ctx.executable
            .as_deref()
            .and_then(|e| executable_origin(e, fs))
    };
    let expand = |entries: &[String], origin: Option<&str>| -> Vec<String> {
        let mut dirs: Vec<String> = Vec::new();
        for e in entries {
            if let Some(d) = expand_entry(e, origin, ctx) {
                if !dirs.contains(&d) {
                    dirs.push(d);
                }
            }
        }
        dirs
    };
    let mut lists = Vec::new();
    if info.runpath.is_none() {
        if let Some(rpath) = &info.rpath {
            lists.push(SearchList {
                source: Source::Rpath(object.to_path_buf()),
                dirs: expand(rpath, own_origin.as_deref()),
            });
        }
        if !is_executable {
            if let Some(rpath) = &ctx.executable_rpath {
                let exe = ctx
                    .executable
                    .clone()
                    .unwrap_or_else(|| "the executable".into());
                lists.push(SearchList {
                    source: Source::Rpath(exe),
                    dirs: expand(rpath, exe_origin.as_deref()),
                });
            }
        }
    }
    if !ctx.ld_library_path.is_empty() {
        lists.push(SearchList {
            source: Source::LdLibraryPath,
            dirs: expand(&ctx.ld_library_path, exe_origin.as_deref()),
        });
    }
    if let Some(runpath) = &info.runpath {
        lists.push(SearchList {
            source: Source::Runpath(object.to_path_buf()),
            dirs: expand(runpath, own_origin.as_deref()),
        });
    }
    let defaults = ctx
        .default_dirs
        .iter()
        .map(|d| trim_dir(&d.to_string_lossy()))
        .collect();
    lists.push(SearchList {
        source: Source::Default,
        dirs: defaults,
    });
    lists
}

/// Which file the loader picks for `name` loaded by `object` (see the module documentation).
/// A name with `/` is opened as it is (with `$ORIGIN` and friends replaced).
pub fn resolve(
    name: &str,
    object: &Path,
    info: &DynamicInfo,
    ctx: &SearchContext,
    fs: &impl Fs,
) -> Resolution {
    let mut tried = Vec::new();
    if name.contains('/') {
        let origin = if info.interpreter.is_some() {
            executable_origin(object, fs)
        } else {
            library_origin(object)
        };
        let lists = vec![SearchList {
            source: Source::Direct,
            dirs: Vec::new(),
        }];
        let outcome = match expand_dsts(name, origin.as_deref(), ctx) {
            None => Outcome::NotFound { other_class: false },
            Some(path) => {
                let path = PathBuf::from(path);
                let attempt = try_file(&path, ctx.host, fs);
                let dir = path
                    .parent()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                tried.push(Tried {
                    source: Source::Direct,
                    dir_exists: fs.is_dir(Path::new(if dir.is_empty() { "." } else { &dir })),
                    dir,
                    file: path.clone(),
                    attempt: attempt.clone(),
                });
                finish(&attempt, &path, Source::Direct, fs).unwrap_or(Outcome::NotFound {
                    other_class: attempt == Attempt::OtherClass,
                })
            }
        };
        return Resolution {
            name: name.to_string(),
            object: object.to_path_buf(),
            lists,
            ld_so_cache_skipped: false,
            tried,
            outcome,
        };
    }
    let lists = search_lists(object, info, ctx, fs);
    let mut other_class = false;
    let mut outcome = None;
    'lists: for list in &lists {
        for dir in &list.dirs {
            let subdirs = ctx.hwcaps_subdirs.iter().map(String::as_str).chain([""]);
            for sub in subdirs {
                let dir = join(dir, sub);
                let file = PathBuf::from(join(&dir, name));
                let attempt = try_file(&file, ctx.host, fs);
                let dir_exists = fs.is_dir(Path::new(if dir.is_empty() { "." } else { &dir }));
                other_class |= attempt == Attempt::OtherClass;
                tried.push(Tried {
                    source: list.source.clone(),
                    dir,
                    file: file.clone(),
                    dir_exists,
                    attempt: attempt.clone(),
                });
                if let Some(o) = finish(&attempt, &file, list.source.clone(), fs) {
                    outcome = Some(o);
                    break 'lists;
                }
                if matches!(attempt, Attempt::ListEnded(_)) {
                    continue 'lists;
                }
            }
        }
    }
    Resolution {
        name: name.to_string(),
        object: object.to_path_buf(),
        lists,
        ld_so_cache_skipped: ctx.use_ld_so_cache,
        tried,
        outcome: outcome.unwrap_or(Outcome::NotFound { other_class }),
    }
}

fn finish(attempt: &Attempt, file: &Path, source: Source, fs: &impl Fs) -> Option<Outcome> {
    match attempt {
        Attempt::Loadable => Some(Outcome::Found {
            path: file.to_path_buf(),
            real_path: fs.canonicalize(file).ok(),
            source,
        }),
        Attempt::Unusable(reason) => Some(Outcome::Error {
            path: file.to_path_buf(),
            reason: reason.clone(),
        }),
        _ => None,
    }
}

/// `dir` + `/` + `rest`, as glibc builds names: `""` (the current directory) adds nothing.
fn join(dir: &str, rest: &str) -> String {
    match (dir, rest) {
        (d, "") => d.to_string(),
        ("", r) => r.to_string(),
        ("/", r) => format!("/{r}"),
        (d, r) => format!("{d}/{r}"),
    }
}

/// Removes trailing slashes, keeping `/`.
fn trim_dir(d: &str) -> String {
    let t = d.trim_end_matches('/');
    if t.is_empty() && !d.is_empty() {
        "/".into()
    } else {
        t.to_string()
    }
}

/// One search path entry as `fillin_rpath` makes it: an empty entry stays (the current
/// directory); an entry whose DSTs cannot all be replaced, or that is empty after replacing,
/// is dropped (`None`).
fn expand_entry(entry: &str, origin: Option<&str>, ctx: &SearchContext) -> Option<String> {
    if entry.is_empty() {
        return Some(String::new());
    }
    let expanded = expand_dsts(entry, origin, ctx)?;
    if expanded.is_empty() {
        return None;
    }
    Some(trim_dir(&expanded))
}

/// Replaces `$ORIGIN`, `$LIB`, `$PLATFORM` (and `${…}`) as `_dl_dst_substitute` does: a name
/// followed by an identifier character is no DST and stays, as does an unknown `$NAME`; a
/// known DST without a value makes the whole string unusable (`None`).
pub fn expand_dsts(input: &str, origin: Option<&str>, ctx: &SearchContext) -> Option<String> {
    let mut out = String::new();
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let mut matched = None;
        for (dst, value) in [
            ("ORIGIN", origin),
            ("PLATFORM", ctx.dst_platform.as_deref()),
            ("LIB", Some(ctx.dst_lib.as_str())),
        ] {
            if let Some(len) = dst_len(after, dst) {
                matched = Some((len, value));
                break;
            }
        }
        match matched {
            Some((len, Some(value))) => {
                out.push_str(value);
                rest = &after[len..];
            }
            Some((_, None)) => return None,
            None => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Some(out)
}

/// glibc's `is_dst`: the length of DST `name` at the start of `input` (after the `$`),
/// braces included, or `None`.
fn dst_len(input: &str, name: &str) -> Option<usize> {
    let (curly, body) = match input.strip_prefix('{') {
        Some(b) => (true, b),
        None => (false, input),
    };
    let tail = body.strip_prefix(name)?;
    let next = tail.bytes().next();
    if curly {
        (next == Some(b'}')).then_some(name.len() + 2)
    } else if next.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
        None
    } else {
        Some(name.len())
    }
}

/// The `$ORIGIN` of a library: the directory of the path it was loaded by, made absolute
/// against the current directory, symlinks not followed (`_dl_new_object`).
fn library_origin(object: &Path) -> Option<String> {
    let abs = if object.is_absolute() {
        object.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(object)
    };
    let parent = abs.parent()?;
    Some(parent.to_string_lossy().into_owned())
}

/// The `$ORIGIN` of the executable: the directory of its real path (`/proc/self/exe`).
fn executable_origin(exe: &Path, fs: &impl Fs) -> Option<String> {
    let real = fs.canonicalize(exe).ok()?;
    Some(real.parent()?.to_string_lossy().into_owned())
}

/// What glibc's `open_verify` makes of the file at `path`.
fn try_file(path: &Path, host: ElfHost, fs: &impl Fs) -> Attempt {
    let ehdr_len = if host.class64 { 64 } else { 52 };
    let head = match fs.read_head(path, ehdr_len) {
        Err(HeadError::Open(e)) => {
            return match e.kind() {
                io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied => Attempt::Missing,
                _ if e.raw_os_error() == Some(libc::ENOTDIR) => Attempt::Missing,
                _ => Attempt::ListEnded(e.to_string()),
            }
        }
        Err(HeadError::Read(_)) => return Attempt::Unusable("cannot read file data".into()),
        Ok(h) => h,
    };
    verify_header(&head, host)
}

/// The checks of glibc's `open_verify` on the first bytes of a file.
pub fn verify_header(head: &[u8], host: ElfHost) -> Attempt {
    let ehdr_len = if host.class64 { 64 } else { 52 };
    let bad = |s: &str| Attempt::Unusable(s.to_string());
    if head.len() < ehdr_len {
        return bad("file too short");
    }
    if head[..4] != *b"\x7fELF" {
        return bad("invalid ELF header");
    }
    let class = if host.class64 { 2 } else { 1 };
    if head[4] != class {
        return Attempt::OtherClass;
    }
    let data = if host.little_endian { 1 } else { 2 };
    if head[5] != data {
        return bad(if host.little_endian {
            "ELF file data encoding not little-endian"
        } else {
            "ELF file data encoding not big-endian"
        });
    }
    if head[6] != 1 {
        return bad("ELF file version ident does not match current one");
    }
    // Linux accepts ELFOSABI_SYSV (ABI version 0) and ELFOSABI_GNU.
    match head[7] {
        0 if head[8] != 0 => return bad("ELF file ABI version invalid"),
        0 | 3 => {}
        _ => return bad("ELF file OS ABI invalid"),
    }
    if head[9..16].iter().any(|b| *b != 0) {
        return bad("nonzero padding in e_ident");
    }
    let u16_at = |at: usize| {
        let b = [head[at], head[at + 1]];
        if host.little_endian {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        }
    };
    let e_version = {
        let b = [head[20], head[21], head[22], head[23]];
        if host.little_endian {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    if e_version != 1 {
        return bad("ELF file version does not match current one");
    }
    if u16_at(18) != host.machine {
        return Attempt::OtherMachine;
    }
    let e_type = u16_at(16);
    if e_type != 2 && e_type != 3 {
        return bad("only ET_DYN and ET_EXEC can be loaded");
    }
    let (phentsize_at, phentsize) = if host.class64 { (54, 56) } else { (42, 32) };
    if u16_at(phentsize_at) != phentsize {
        return bad("ELF file's phentsize not the expected size");
    }
    Attempt::Loadable
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Files by path (their first bytes), directories by path, symlinks resolved by a map.
    #[derive(Default)]
    struct FakeFs {
        files: HashMap<PathBuf, Vec<u8>>,
        dirs: Vec<PathBuf>,
        real: HashMap<PathBuf, PathBuf>,
    }

    impl Fs for FakeFs {
        fn read_head(&self, path: &Path, len: usize) -> Result<Vec<u8>, HeadError> {
            match self.files.get(path) {
                Some(b) => Ok(b[..b.len().min(len)].to_vec()),
                None if self.dirs.iter().any(|d| d == path) => {
                    Err(HeadError::Read(io::Error::from_raw_os_error(libc::EISDIR)))
                }
                None => Err(HeadError::Open(io::ErrorKind::NotFound.into())),
            }
        }
        fn is_dir(&self, path: &Path) -> bool {
            self.dirs.iter().any(|d| d == path)
        }
        fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
            Ok(self.real.get(path).cloned().unwrap_or_else(|| path.into()))
        }
    }

    fn elf(class: u8, machine: u16) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = class;
        h[5] = 1;
        h[6] = 1;
        h[16..18].copy_from_slice(&3u16.to_le_bytes());
        h[18..20].copy_from_slice(&machine.to_le_bytes());
        h[20..24].copy_from_slice(&1u32.to_le_bytes());
        h[54..56].copy_from_slice(&56u16.to_le_bytes());
        h
    }

    fn host() -> ElfHost {
        ElfHost {
            class64: true,
            little_endian: true,
            machine: 62,
        }
    }

    fn ctx() -> SearchContext {
        let mut c = SearchContext::new(vec!["/glibc/lib".into()]);
        c.host = host();
        c.dst_platform = Some("x86_64".into());
        c
    }

    fn lib(runpath: Option<&[&str]>, rpath: Option<&[&str]>) -> DynamicInfo {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        DynamicInfo {
            runpath: runpath.map(v),
            rpath: rpath.map(v),
            ..DynamicInfo::default()
        }
    }

    #[test]
    fn headers_are_judged_as_open_verify_does() {
        assert_eq!(verify_header(&elf(2, 62), host()), Attempt::Loadable);
        assert_eq!(verify_header(&elf(1, 3), host()), Attempt::OtherClass);
        assert_eq!(verify_header(&elf(2, 183), host()), Attempt::OtherMachine);
        assert_eq!(
            verify_header(&[b'x'; 100], host()),
            Attempt::Unusable("invalid ELF header".into())
        );
        assert_eq!(
            verify_header(b"\x7fELF", host()),
            Attempt::Unusable("file too short".into())
        );
        let mut rel = elf(2, 62);
        rel[16] = 1;
        assert_eq!(
            verify_header(&rel, host()),
            Attempt::Unusable("only ET_DYN and ET_EXEC can be loaded".into())
        );
    }

    #[test]
    fn dsts_follow_the_gabi_rules() {
        let c = ctx();
        let o = Some("/o");
        assert_eq!(expand_dsts("$ORIGIN/../lib", o, &c).unwrap(), "/o/../lib");
        assert_eq!(expand_dsts("${ORIGIN}x", o, &c).unwrap(), "/ox");
        assert_eq!(expand_dsts("$ORIGINx", o, &c).unwrap(), "$ORIGINx");
        assert_eq!(
            expand_dsts("/a/$LIB/$PLATFORM", o, &c).unwrap(),
            "/a/lib/x86_64"
        );
        assert_eq!(expand_dsts("/a/$FOO", o, &c).unwrap(), "/a/$FOO");
        assert_eq!(expand_dsts("$ORIGIN", None, &c), None);
        assert_eq!(expand_entry("/a//", o, &c).unwrap(), "/a");
        assert_eq!(expand_entry("/", o, &c).unwrap(), "/");
        assert_eq!(expand_entry("", o, &c).unwrap(), "");
    }

    #[test]
    fn runpath_comes_after_ld_library_path_and_hides_rpaths() {
        let mut c = ctx();
        c.ld_library_path = vec!["/llp".into()];
        c.executable_rpath = Some(vec!["/exe-rpath".into()]);
        c.executable = Some("/bin/exe".into());
        let fs = FakeFs::default();
        let obj = Path::new("/cudart/lib/libcudart.so.12");
        let r = resolve("libcuda.so.1", obj, &lib(Some(&["/rp"]), None), &c, &fs);
        let dirs: Vec<_> = r.tried.iter().map(|t| t.dir.as_str()).collect();
        assert_eq!(dirs, ["/llp", "/rp", "/glibc/lib"]);
        assert_eq!(r.outcome, Outcome::NotFound { other_class: false });
        assert_eq!(
            r.describe(),
            "LD_LIBRARY_PATH [/llp], then DT_RUNPATH [/rp], then the default directories [/glibc/lib]"
        );
        // Without DT_RUNPATH: its DT_RPATH, then the executable's, before LD_LIBRARY_PATH.
        let r = resolve("libcuda.so.1", obj, &lib(None, Some(&["/own"])), &c, &fs);
        let dirs: Vec<_> = r.tried.iter().map(|t| t.dir.as_str()).collect();
        assert_eq!(dirs, ["/own", "/exe-rpath", "/llp", "/glibc/lib"]);
        assert_eq!(
            r.describe(),
            "DT_RPATH [/own], then the executable's DT_RPATH (/bin/exe) [/exe-rpath], then \
             LD_LIBRARY_PATH [/llp], then the default directories [/glibc/lib]"
        );
    }

    #[test]
    fn wrong_class_is_skipped_and_junk_ends_the_search() {
        let mut fs = FakeFs::default();
        fs.files.insert("/a/libcuda.so.1".into(), elf(1, 3));
        fs.files.insert("/b/libcuda.so.1".into(), elf(2, 62));
        fs.real
            .insert("/b/libcuda.so.1".into(), "/b/libcuda.so.575".into());
        let c = ctx();
        let info = lib(Some(&["/a", "/b"]), None);
        let r = resolve("libcuda.so.1", Path::new("/x/libcudart.so"), &info, &c, &fs);
        assert_eq!(r.tried[0].attempt, Attempt::OtherClass);
        assert_eq!(
            r.outcome,
            Outcome::Found {
                path: "/b/libcuda.so.1".into(),
                real_path: Some("/b/libcuda.so.575".into()),
                source: Source::Runpath("/x/libcudart.so".into()),
            }
        );
        fs.files
            .insert("/a/libcuda.so.1".into(), b"INPUT(libcuda.so.575)".to_vec());
        let r = resolve("libcuda.so.1", Path::new("/x/libcudart.so"), &info, &c, &fs);
        assert_eq!(
            r.outcome,
            Outcome::Error {
                path: "/a/libcuda.so.1".into(),
                reason: "file too short".into()
            }
        );
        fs.files.remove(Path::new("/b/libcuda.so.1"));
        fs.files.insert("/a/libcuda.so.1".into(), elf(1, 3));
        let r = resolve("libcuda.so.1", Path::new("/x/libcudart.so"), &info, &c, &fs);
        assert_eq!(r.outcome, Outcome::NotFound { other_class: true });
    }

    #[test]
    fn origins_hwcaps_and_repeats() {
        let mut fs = FakeFs::default();
        fs.real.insert("/run/exe".into(), "/real/bin/exe".into());
        let mut c = ctx();
        c.hwcaps_subdirs = vec!["glibc-hwcaps/x86-64-v3".into()];
        let exe = DynamicInfo {
            interpreter: Some("/glibc/lib/ld-linux-x86-64.so.2".into()),
            ..lib(Some(&["$ORIGIN/../lib", "$ORIGIN/../lib/", "", "/d"]), None)
        };
        let r = resolve("libcuda.so.1", Path::new("/run/exe"), &exe, &c, &fs);
        assert_eq!(r.lists[0].dirs, ["/real/bin/../lib", "", "/d"]);
        let files: Vec<_> = r.tried.iter().map(|t| t.file.to_str().unwrap()).collect();
        assert_eq!(
            files[..4],
            [
                "/real/bin/../lib/glibc-hwcaps/x86-64-v3/libcuda.so.1",
                "/real/bin/../lib/libcuda.so.1",
                "glibc-hwcaps/x86-64-v3/libcuda.so.1",
                "libcuda.so.1",
            ]
        );
        // A library's origin is the path it was loaded by.
        let l = lib(Some(&["$ORIGIN"]), None);
        let r = resolve("libcuda.so.1", Path::new("/run/libx.so"), &l, &c, &fs);
        assert_eq!(r.lists[0].dirs, ["/run"]);
        // A name with a slash is not searched.
        let r = resolve(
            "$ORIGIN/libcuda.so.1",
            Path::new("/run/libx.so"),
            &l,
            &c,
            &fs,
        );
        assert_eq!(r.tried.len(), 1);
        assert_eq!(r.tried[0].file, Path::new("/run/libcuda.so.1"));
    }

    #[test]
    fn help_output_is_parsed() {
        let debian = "\
Shared library search path:
  (libraries located via /etc/ld.so.cache)
  /lib/x86_64-linux-gnu (system search path)
  /usr/lib/x86_64-linux-gnu (system search path)

Subdirectories of glibc-hwcaps directories, in priority order:
  x86-64-v4
  x86-64-v3 (supported, searched)
  x86-64-v2 (supported, searched)

Legacy HWCAP subdirectories under library search path directories:
  tls (supported, searched)
";
        let i = parse_interpreter_help(debian).unwrap();
        assert_eq!(
            i.default_dirs,
            [
                PathBuf::from("/lib/x86_64-linux-gnu"),
                "/usr/lib/x86_64-linux-gnu".into()
            ]
        );
        assert_eq!(
            i.ld_so_cache.as_deref(),
            Some(Path::new("/etc/ld.so.cache"))
        );
        assert_eq!(
            i.hwcaps_subdirs,
            ["glibc-hwcaps/x86-64-v3", "glibc-hwcaps/x86-64-v2"]
        );
        assert!(parse_interpreter_help("Usage: ld.so\n").is_err());
        assert_eq!(split_ld_library_path("/a;/b::"), ["/a", "/b", "", ""]);
        assert!(split_ld_library_path("").is_empty());
    }
}
