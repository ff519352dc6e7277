//! The shared libraries a program needs, resolved on the host the way the dynamic loader would:
//! its interpreter, then each `DT_NEEDED` through `DT_RUNPATH`/`DT_RPATH` (with `$ORIGIN`), the
//! loader cache and the default directories, recursively. `exec` binds them so that a command
//! runs in a root holding nothing else.
//!
//! What a file asks for is read as the kernel and `ld.so` read it, from its program headers
//! ([`cuda_sandbox_elfkit::dynamic_info_of_file`]): a crafted file's section headers can say
//! anything. Since the command chooses the names, a name is only a request: a library is taken
//! only when it is a regular ELF file in the store or one of the loader's directories (its
//! path and the file it leads to both) that everyone on the host may read, or when the command
//! sees it anyway (under an exposed or `--bind` path). Everything else is refused with its
//! reason, and the loader inside looks further, as it would for a file it cannot open. FIFOs
//! and devices are never opened; files are opened non-blocking and read a few bytes at a time.

use crate::discover::ldcache::{self, CacheEntry};
use std::collections::{BTreeSet, VecDeque};
use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub use cuda_sandbox_elfkit::{dynamic_info, DynamicInfo};

/// glibc's built-in search directories (after `DT_RUNPATH` and the cache).
const DEFAULT_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// Where libraries may come from.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Directories whose files may be bound: the store and the loader's directories (its
    /// defaults and those of `/etc/ld.so.cache`), all root's.
    pub trusted: Vec<PathBuf>,
    /// Host paths the command sees anyway (exposed, `--bind`): a file under one is taken
    /// wherever it is.
    pub visible: Vec<PathBuf>,
}

impl Sources {
    /// The store `store_dir`, the loader's default directories and those of the loader cache,
    /// with `visible` seen anyway.
    pub fn of_host(store_dir: &Path, visible: Vec<PathBuf>) -> Sources {
        let mut trusted: Vec<PathBuf> = DEFAULT_DIRS.iter().map(PathBuf::from).collect();
        trusted.push(store_dir.to_path_buf());
        for e in loader_cache() {
            if let Some(dir) = e.path.parent() {
                if !trusted.iter().any(|t| t == dir) {
                    trusted.push(dir.to_path_buf());
                }
            }
        }
        Sources { trusted, visible }
    }
}

/// Why a file a program names is not bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not a regular file (a FIFO, a device, a directory, a socket): never opened.
    NotRegular(&'static str),
    /// Outside the store and the loader's directories (the path, or where its links lead).
    Untrusted,
    /// Not readable by everyone on the host: binding it would show the command what its user
    /// could not read.
    Private,
    /// Not an ELF file, or one that cannot be read.
    NotElf(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NotRegular(kind) => write!(f, "it is {kind}, not a regular file"),
            Refusal::Untrusted => write!(
                f,
                "it is outside the store and the loader's directories (give it with --bind if \
                 the command may see it)"
            ),
            Refusal::Private => write!(f, "not everyone on the host may read it"),
            Refusal::NotElf(why) => write!(f, "{why}"),
        }
    }
}

/// A file a program named that was not bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The path the loader would open.
    pub path: PathBuf,
    /// The file naming it.
    pub needed_by: PathBuf,
    /// Why it is not bound.
    pub why: Refusal,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (named by {}): {}",
            self.path.display(),
            self.needed_by.display(),
            self.why
        )
    }
}

/// What the programs and libraries of a closure need.
#[derive(Debug, Clone, Default)]
pub struct Closure {
    /// Every file needed at run time (the roots excluded), as the path the loader opens.
    pub libraries: BTreeSet<PathBuf>,
    /// Names found nowhere (with the file needing them).
    pub missing: Vec<String>,
    /// Files named but not taken, and why.
    pub refused: Vec<Refused>,
}

/// Every file the programs or libraries in `roots` need at run time, taken only from
/// `sources`. A root that is not a regular ELF file has no dependencies (and is not read).
pub fn library_closure(roots: &[PathBuf], sources: &Sources) -> Closure {
    let cache = loader_cache();
    let native = ldcache::native_flags();
    let mut closure = Closure::default();
    let mut queue: VecDeque<(PathBuf, File)> = roots
        .iter()
        .filter_map(|r| open_regular(r).ok().map(|f| (r.clone(), f)))
        .collect();
    let mut seen: BTreeSet<PathBuf> = roots.iter().cloned().collect();
    while let Some((file, opened)) = queue.pop_front() {
        let Ok(Some(info)) = cuda_sandbox_elfkit::dynamic_info_of_file(&opened) else {
            continue;
        };
        drop(opened);
        let origin = std::fs::canonicalize(&file)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        let mut next = Vec::new();
        let mut refused = Vec::new();
        let mut refuse = |path: PathBuf, why: Refusal| {
            refused.push(Refused {
                path,
                needed_by: file.clone(),
                why,
            })
        };
        if let Some(interp) = &info.interpreter {
            // The kernel opens the interpreter as named: absolute, or nothing.
            match accept(interp, sources) {
                Ok(f) => next.push((interp.clone(), f)),
                Err(why) => refuse(interp.clone(), why),
            }
        }
        for name in &info.needed {
            let candidates = candidates(name, info.search_path().0, &origin, &cache, native);
            let mut found = None;
            for c in candidates {
                match accept(&c, sources) {
                    Ok(f) => {
                        found = Some((c, f));
                        break;
                    }
                    Err(Refusal::NotRegular("missing")) => {}
                    Err(why) => refuse(c, why),
                }
            }
            match found {
                Some(f) => next.push(f),
                None => closure
                    .missing
                    .push(format!("{name} (needed by {})", file.display())),
            }
        }
        closure.refused.extend(refused);
        for (p, f) in next {
            if seen.insert(p.clone()) {
                closure.libraries.insert(p.clone());
                queue.push_back((p, f));
            }
        }
    }
    closure.refused.dedup();
    closure
}

fn loader_cache() -> Vec<CacheEntry> {
    // The cache is root's and small; read with a cap all the same.
    use std::io::Read;
    let mut bytes = Vec::new();
    let read = open_regular(Path::new("/etc/ld.so.cache")).and_then(|f| {
        f.take(64 << 20)
            .read_to_end(&mut bytes)
            .map_err(|_| Refusal::Untrusted)
    });
    match read {
        Ok(_) => ldcache::parse(&bytes).unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

/// The paths the loader would try for `name`, in its order: the name itself when it holds a
/// `/` (absolute only: a relative one depends on the working directory), else each
/// `DT_RUNPATH`/`DT_RPATH` entry (with `$ORIGIN`), the cache's entry, the default directories.
fn candidates(
    name: &str,
    runpath: &[String],
    origin: &Path,
    cache: &[CacheEntry],
    native: Option<i32>,
) -> Vec<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name))
            .filter(|p| p.is_absolute())
            .into_iter()
            .collect();
    }
    let origin = origin.to_string_lossy();
    let mut out: Vec<PathBuf> = runpath
        .iter()
        .map(|dir| {
            let dir = dir
                .replace("${ORIGIN}", &origin)
                .replace("$ORIGIN", &origin);
            Path::new(&dir).join(name)
        })
        .collect();
    out.extend(
        cache
            .iter()
            .filter(|e| e.soname == name.as_bytes() && native.is_none_or(|f| e.flags == f))
            .map(|e| e.path.clone())
            .take(1),
    );
    out.extend(DEFAULT_DIRS.iter().map(|d| Path::new(d).join(name)));
    out
}

/// `path`, opened, when it may be bound: see [`Refusal`]. A path that does not exist is
/// `NotRegular("missing")`, which the caller treats as "look further".
fn accept(path: &Path, sources: &Sources) -> Result<File, Refusal> {
    let meta = std::fs::metadata(path).map_err(|_| Refusal::NotRegular("missing"))?;
    if !meta.is_file() {
        return Err(Refusal::NotRegular(kind(&meta)));
    }
    let normal = cuda_sandbox_elfkit::normalize(path);
    let real = std::fs::canonicalize(path).map_err(|_| Refusal::NotRegular("missing"))?;
    let under = |dirs: &[PathBuf], p: &Path| dirs.iter().any(|d| p.starts_with(d));
    let visible = under(&sources.visible, &normal) || under(&sources.visible, &real);
    if !visible {
        if !under(&sources.trusted, &normal) || !under(&sources.trusted, &real) {
            return Err(Refusal::Untrusted);
        }
        if !readable_by_all(&real, &meta) {
            return Err(Refusal::Private);
        }
    }
    let file = open_regular(path)?;
    match cuda_sandbox_elfkit::dynamic_info_of_file(&file) {
        Ok(Some(_)) => Ok(file),
        Ok(None) => Err(Refusal::NotElf("not an ELF file".into())),
        Err(e) => Err(Refusal::NotElf(e)),
    }
}

/// Opens `path` for reading only if it is a regular file: checked before (so a FIFO or a
/// device is never opened) and after, on the descriptor (so one swapped in between is not
/// read); non-blocking and without taking a controlling terminal, whatever it turns out to be.
fn open_regular(path: &Path) -> Result<File, Refusal> {
    let meta = std::fs::metadata(path).map_err(|_| Refusal::NotRegular("missing"))?;
    if !meta.is_file() {
        return Err(Refusal::NotRegular(kind(&meta)));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
        .map_err(|_| Refusal::NotRegular("missing"))?;
    let meta = file
        .metadata()
        .map_err(|_| Refusal::NotRegular("missing"))?;
    if !meta.is_file() {
        return Err(Refusal::NotRegular(kind(&meta)));
    }
    Ok(file)
}

fn kind(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a file"
    }
}

/// Whether everyone may read `real` (a canonical path, `meta` its metadata): the file readable
/// by others and every directory above it searchable by others.
fn readable_by_all(real: &Path, meta: &std::fs::Metadata) -> bool {
    meta.mode() & 0o004 != 0
        && real
            .ancestors()
            .skip(1)
            .all(|d| std::fs::metadata(d).is_ok_and(|m| m.mode() & 0o001 != 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn host() -> Sources {
        Sources::of_host(Path::new("/nix/store"), Vec::new())
    }

    #[test]
    fn a_real_program_needs_libc_and_its_interpreter() {
        // What the file asks for is elfkit's to read (and test); here, that it is found.
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        let closure = library_closure(&[sh], &host());
        assert!(closure.missing.is_empty(), "{:?}", closure.missing);
        assert!(closure.refused.is_empty(), "{:?}", closure.refused);
        assert!(closure
            .libraries
            .iter()
            .any(|p| p.to_string_lossy().contains("libc.so")));
    }

    fn program_with_origin_library(d: &Path) -> PathBuf {
        cuda_sandbox_testkit::shared_library(&d.join("libdep.so"), Some("libdep.so")).unwrap();
        let src = d.join("main.c");
        std::fs::write(
            &src,
            "int cuInit(unsigned); int main(void) { return cuInit(0); }\n",
        )
        .unwrap();
        let ok = std::process::Command::new("cc")
            .arg("-o")
            .arg(d.join("main"))
            .arg(&src)
            .arg(format!("-L{}", d.display()))
            .arg("-ldep")
            .arg("-Wl,-rpath,$ORIGIN")
            .status()
            .unwrap()
            .success();
        assert!(ok);
        d.join("main")
    }

    #[test]
    fn runpath_with_origin_is_followed_where_the_command_sees_it() {
        let t = tempfile::tempdir().unwrap();
        let d = std::fs::canonicalize(t.path()).unwrap();
        let main = program_with_origin_library(&d);
        let info = dynamic_info(&std::fs::read(&main).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(info.search_path().0, ["$ORIGIN"]);
        // Outside the store and the loader's directories: refused ...
        let closure = library_closure(std::slice::from_ref(&main), &host());
        let dep = d.join("libdep.so");
        assert!(!closure.libraries.contains(&dep), "{closure:?}");
        assert_eq!(closure.refused.len(), 1, "{closure:?}");
        assert_eq!(closure.refused[0].path, dep);
        assert_eq!(closure.refused[0].why, Refusal::Untrusted);
        // ... unless the command sees its directory anyway.
        let sources = Sources::of_host(Path::new("/nix/store"), vec![d.clone()]);
        let closure = library_closure(&[main], &sources);
        assert!(closure.missing.is_empty(), "{:?}", closure.missing);
        assert!(closure.libraries.contains(&dep), "{closure:?}");
    }

    #[test]
    fn private_and_non_elf_files_in_trusted_places_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let d = std::fs::canonicalize(t.path()).unwrap();
        let lib = d.join("lib");
        std::fs::create_dir(&lib).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let text = lib.join("notes.txt");
        std::fs::write(&text, "not a library\n").unwrap();
        let so = lib.join("libx.so");
        cuda_sandbox_testkit::shared_library(&so, Some("libx.so")).unwrap();
        let sources = Sources {
            trusted: vec![lib.clone()],
            visible: Vec::new(),
        };
        assert!(accept(&so, &sources).is_ok());
        assert!(matches!(accept(&text, &sources), Err(Refusal::NotElf(_))));
        std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(accept(&so, &sources).unwrap_err(), Refusal::Private);
        assert_eq!(
            accept(Path::new("/dev/zero"), &sources).unwrap_err(),
            Refusal::NotRegular("a device")
        );
    }
}
