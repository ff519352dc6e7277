//! The shared libraries a command needs bound into `exec`'s root: the process glibc's loader
//! would build for it there ([`cuda_sandbox_elfkit::ldso`], the one model of the search),
//! seen through this module's policy.
//!
//! The model runs on [`PolicyFs`], the root as the command will see it: a path under a bind
//! is the bound host file; any other path is the host's file at that path, which `exec` will
//! bind, but only when it is a regular ELF file in the store or one of the loader's
//! directories (its path and the file it leads to both) that everyone on the host may read.
//! Since the command chooses the names, a name is only a request: everything else is refused
//! with its reason and is absent from the root, so the model, like the loader inside, looks
//! further. The root has no `/etc/ld.so.cache` (a Nix sandbox has none), so neither has the
//! model. FIFOs and devices are never opened; files are opened non-blocking and read a few
//! bytes at a time ([`cuda_sandbox_elfkit::dynamic_info_of_file`], which reads what the
//! kernel and `ld.so` read: a crafted file's section headers can say anything).

use cuda_sandbox_elfkit::ldso::{self, Environment, Fs, Loader, Opened, Process, RealFs, Start};
use cuda_sandbox_elfkit::ElfError;
use std::cell::RefCell;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where libraries may come from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sources {
    /// Directories whose files may be bound: the store and the loader's directories, all
    /// root's.
    pub trusted: Vec<PathBuf>,
    /// What the command sees anyway, `(inside, outside)`: the exposed paths and `--bind`
    /// paths. A file under one is taken wherever it is.
    pub visible: Vec<(PathBuf, PathBuf)>,
}

impl Sources {
    /// The store `store_dir`, the default directories of `loader` and of the host's loader
    /// ([`Loader::debian`]) and the host loader's own directory (`/lib64`), and the
    /// directories `/etc/ld.so.cache` names, with `visible` seen anyway. (Never the directory
    /// of the interpreter a program names: the program chooses it.)
    pub(crate) fn of_host(
        store_dir: &Path,
        loader: &Loader,
        visible: Vec<(PathBuf, PathBuf)>,
    ) -> Sources {
        let host = Loader::debian(PathBuf::new());
        let host_interpreter_dir = host.elf.standard_interpreter().and_then(Path::parent);
        let mut trusted: Vec<PathBuf> = vec![store_dir.to_path_buf()];
        let cache = RealFs
            .read(Path::new("/etc/ld.so.cache"), ldso::cache::MAX_CACHE_BYTES)
            .ok()
            .and_then(|b| ldso::cache::Cache::parse(&b).ok())
            .unwrap_or_default();
        let cache_dirs = cache.entries.iter().filter_map(|e| e.path.parent());
        for dir in loader
            .system_dirs
            .iter()
            .chain(&host.system_dirs)
            .map(PathBuf::as_path)
            .chain(host_interpreter_dir)
            .chain(cache_dirs)
        {
            if !trusted.iter().any(|t| t == dir) {
                trusted.push(dir.to_path_buf());
            }
        }
        Sources { trusted, visible }
    }

    /// The host path behind `inside` and whether the command sees it anyway.
    fn outside(&self, inside: &Path) -> (PathBuf, bool) {
        let inside = cuda_sandbox_elfkit::normalize(inside);
        let bind = self
            .visible
            .iter()
            .filter(|(i, _)| inside.starts_with(i))
            .max_by_key(|(i, _)| i.as_os_str().len());
        match bind {
            Some((i, o)) => {
                let rest = inside.strip_prefix(i).unwrap_or(Path::new(""));
                let outside = if rest.as_os_str().is_empty() {
                    o.clone()
                } else {
                    o.join(rest)
                };
                (outside, true)
            }
            None => (inside, false),
        }
    }
}

/// Why a file a program names is not bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// Not a regular file (a FIFO, a device, a directory, a socket): never opened.
    #[error("it is {0}, not a regular file")]
    NotRegular(&'static str),
    /// Outside the store and the loader's directories (the path, or where its links lead).
    #[error(
        "it is outside the store and the loader's directories (give it with --bind if the \
         command may see it)"
    )]
    Untrusted,
    /// Not readable by everyone on the host: binding it would show the command what its user
    /// could not read.
    #[error("not everyone on the host may read it")]
    Private,
    /// Not an ELF file.
    #[error("not an ELF file")]
    NotElf,
    /// An ELF file that cannot be read as the loader reads it.
    #[error(transparent)]
    UnreadableElf(ElfError),
}

/// A file a program named that was not bound: the path the loader would open, the file
/// naming it, and why it is not bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} (named by {by}): {2}", path = .0.display(), by = .1.display())]
pub(crate) struct Refused(pub PathBuf, pub PathBuf, pub Refusal);

/// What a command's process needs.
#[derive(Debug, Clone, Default)]
pub struct Closure {
    /// Every file its process loads (the program excluded, the interpreter included), as the
    /// path the loader opens inside, with the name it was first asked for (`libcuda.so.1`),
    /// in load order, each once.
    pub named: Vec<(String, PathBuf)>,
    /// Names found nowhere (with the file needing them).
    pub(crate) missing: Vec<String>,
    /// Files named but not taken, and why.
    pub(crate) refused: Vec<Refused>,
}

/// [`ldso::Fs`] for `exec`'s root: [`Sources`] decide what is there.
pub(crate) struct PolicyFs<'s> {
    sources: &'s Sources,
    /// Every path refused so far, in order, with why.
    refused: RefCell<Vec<(PathBuf, Refusal)>>,
}

impl PolicyFs<'_> {
    fn refuse(&self, path: &Path, why: Refusal) -> io::Error {
        self.refused.borrow_mut().push((path.to_path_buf(), why));
        io::ErrorKind::NotFound.into()
    }
}

impl Fs for PolicyFs<'_> {
    fn open(&self, path: &Path) -> io::Result<Opened> {
        let (outside, visible) = self.sources.outside(path);
        let file = match RealFs::open_regular(&outside)? {
            Ok(f) => f,
            Err(kind) => return Err(self.refuse(path, Refusal::NotRegular(kind))),
        };
        if !visible {
            let normal = cuda_sandbox_elfkit::normalize(path);
            let real = std::fs::canonicalize(path)?;
            let under = |p: &Path| self.sources.trusted.iter().any(|d| p.starts_with(d));
            if !under(&normal) || !under(&real) {
                return Err(self.refuse(path, Refusal::Untrusted));
            }
            // Everyone must be able to read it: the file readable by others and every
            // directory above it searchable by others.
            if file.metadata()?.mode() & 0o004 == 0
                || !real
                    .ancestors()
                    .skip(1)
                    .all(|d| std::fs::metadata(d).is_ok_and(|m| m.mode() & 0o001 != 0))
            {
                return Err(self.refuse(path, Refusal::Private));
            }
        }
        let opened = ldso::read_opened(&file, &outside)?;
        match &opened.dynamic {
            Ok(Some(_)) => Ok(opened),
            Ok(None) => Err(self.refuse(path, Refusal::NotElf)),
            Err(e) => Err(self.refuse(path, Refusal::UnreadableElf(*e))),
        }
    }

    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        let (outside, visible) = self.sources.outside(path);
        let real = std::fs::canonicalize(&outside)?;
        if !visible {
            return Ok(real);
        }
        // Inside, a bound path resolves within its bind.
        let bind = self.sources.visible.iter().find(|(i, o)| {
            cuda_sandbox_elfkit::normalize(path).starts_with(i) && outside.starts_with(o)
        });
        let inside = bind.and_then(|(i, o)| Some(i.join(real.strip_prefix(o).ok()?)));
        Ok(inside.map_or(real, |inside| cuda_sandbox_elfkit::normalize(&inside)))
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.sources.outside(path).0.is_dir()
    }

    fn read(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>> {
        // Only what is bound is there to read: the root has no cache of its own.
        match self.sources.outside(path) {
            (outside, true) => RealFs.read(&outside, limit),
            (_, false) => Err(io::ErrorKind::NotFound.into()),
        }
    }
}

/// The loader that runs `program` (its `PT_INTERP`), as far as it can be known without
/// running anything: [`Loader::known`]. `None` for a program without one (static).
pub(crate) fn loader_of(program: &Path, store_dir: &Path) -> Option<Loader> {
    let file = RealFs::open_regular(program).ok()?.ok()?;
    let info = cuda_sandbox_elfkit::dynamic_info_of_file(&file).ok()??;
    Some(Loader::known(&info.interpreter?, store_dir))
}

/// What the process of `program` (its path inside) needs: its interpreter, its `DT_NEEDED`
/// breadth first, and each of `dlopened` (paths inside, as the command would `dlopen` them)
/// with theirs, searched by `loader` with the command's `LD_LIBRARY_PATH`, taken only from
/// `sources`.
pub(crate) fn library_closure(
    program: &Path,
    dlopened: &[PathBuf],
    ld_library_path: Option<&str>,
    loader: &Loader,
    sources: &Sources,
) -> Closure {
    let fs = PolicyFs {
        sources,
        refused: RefCell::default(),
    };
    let env = Environment {
        ld_library_path: ld_library_path.map(String::from),
    };
    let mut process = Process::new(loader, &fs, env);
    let mut closure = Closure::default();
    let Ok(main) = process.start(program, Start::Kernel) else {
        return closure;
    };
    for lib in dlopened {
        process.dlopen(&lib.to_string_lossy(), main);
    }
    let interpreter = process.interpreter();
    let listed = process.objects().skip(1).map(|(_, o)| o);
    for object in listed.chain(interpreter.map(|i| process.object(i))) {
        if !closure.named.iter().any(|(_, p)| *p == object.path) {
            let name = object.names.first().cloned().unwrap_or_default();
            closure.named.push((name, object.path.clone()));
        }
    }
    for m in process.missing() {
        let by = process.object(m.by).path.display();
        closure.missing.push(format!("{} (needed by {by})", m.name));
    }
    for (path, why) in fs.refused.take() {
        let needed_by = process
            .searches()
            .iter()
            .find(|s| s.tried.iter().any(|t| t.file == path))
            .map_or_else(|| program.to_path_buf(), |s| s.requester.clone());
        let refused = Refused(path, needed_by, why);
        if !closure.refused.contains(&refused) {
            closure.refused.push(refused);
        }
    }
    closure
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn host_loader() -> Loader {
        Loader::debian("/lib64/ld-linux-x86-64.so.2".into())
    }

    fn host(visible: Vec<(PathBuf, PathBuf)>) -> Sources {
        Sources::of_host(Path::new("/nix/store"), &host_loader(), visible)
    }

    fn closure_of(program: &Path, sources: &Sources) -> Closure {
        let loader = loader_of(program, Path::new("/nix/store")).unwrap();
        library_closure(program, &[], None, &loader, sources)
    }

    /// Whether `closure` has the process load `path`.
    fn loads(closure: &Closure, path: &Path) -> bool {
        closure.named.iter().any(|(_, p)| p == path)
    }

    #[test]
    fn a_real_program_needs_libc_and_its_interpreter() {
        // What the file asks for is elfkit's to read (and test); here, that it is found.
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        let sources = host(vec![(sh.clone(), sh.clone())]);
        let closure = closure_of(&sh, &sources);
        assert!(closure.missing.is_empty(), "{:?}", closure.missing);
        assert!(closure.refused.is_empty(), "{:?}", closure.refused);
        assert!(closure
            .named
            .iter()
            .any(|(_, p)| p.to_string_lossy().contains("libc.so")));
        let interp = cuda_sandbox_elfkit::dynamic_info(&std::fs::read(&sh).unwrap())
            .unwrap()
            .unwrap()
            .interpreter;
        assert!(loads(&closure, &interp.unwrap()), "{closure:?}");
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
        let info = cuda_sandbox_elfkit::dynamic_info(&std::fs::read(&main).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(info.search_path().0, ["$ORIGIN"]);
        // The program is bound, its directory is not: its library is refused ...
        let closure = closure_of(&main, &host(vec![(main.clone(), main.clone())]));
        let dep = d.join("libdep.so");
        assert!(!loads(&closure, &dep), "{closure:?}");
        assert_eq!(closure.refused.len(), 1, "{closure:?}");
        assert_eq!(closure.refused[0].0, dep);
        assert_eq!(closure.refused[0].1, main);
        assert_eq!(closure.refused[0].2, Refusal::Untrusted);
        assert_eq!(
            closure.missing,
            [format!("libdep.so (needed by {})", main.display())]
        );
        // ... unless the command sees its directory anyway.
        let closure = closure_of(&main, &host(vec![(d.clone(), d.clone())]));
        assert!(closure.missing.is_empty(), "{:?}", closure.missing);
        assert!(loads(&closure, &dep), "{closure:?}");
    }

    #[test]
    fn a_bound_directory_is_searched_at_its_inside_path() {
        // The driver's directory is bound at /run/opengl-driver/lib from elsewhere: the
        // command's LD_LIBRARY_PATH names the inside path, the file is the outside one.
        let t = tempfile::tempdir().unwrap();
        let d = std::fs::canonicalize(t.path()).unwrap();
        let main = program_with_origin_library(&d);
        let outside = d.join("driver");
        std::fs::create_dir(&outside).unwrap();
        std::fs::rename(d.join("libdep.so"), outside.join("libdep.so")).unwrap();
        let inside = PathBuf::from("/run/opengl-driver/lib");
        let sources = host(vec![
            (main.clone(), main.clone()),
            (inside.clone(), outside),
        ]);
        let loader = loader_of(&main, Path::new("/nix/store")).unwrap();
        let llp = Some("/run/opengl-driver/lib");
        let closure = library_closure(&main, &[], llp, &loader, &sources);
        assert!(closure.missing.is_empty(), "{closure:?}");
        assert!(loads(&closure, &inside.join("libdep.so")), "{closure:?}");
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
        let fs = PolicyFs {
            sources: &sources,
            refused: RefCell::default(),
        };
        assert!(fs.open(&so).is_ok());
        assert!(fs.open(&text).is_err());
        std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(fs.open(&so).is_err());
        assert!(fs.open(Path::new("/dev/zero")).is_err());
        let refused: Vec<Refusal> = fs.refused.take().into_iter().map(|(_, w)| w).collect();
        assert_eq!(
            refused,
            [
                Refusal::NotElf,
                Refusal::Private,
                Refusal::NotRegular("a device")
            ]
        );
        // The root has no loader cache: only what is bound can be read.
        assert!(fs.read(Path::new("/etc/ld.so.cache"), 1 << 20).is_err());
    }
}
