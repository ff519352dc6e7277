//! One process as glibc's loader builds it: the executable (or the object `ld.so` is given),
//! the loader itself, every `DT_NEEDED` breadth first, and what `dlopen` adds, each object
//! once (by name, soname or file), each search from the object glibc searches from.

use super::cache::{Cache, MAX_CACHE_BYTES};
use super::fs::{FileId, Fs, Opened};
use super::search::{
    self, expand_dsts, expand_list, trim_dir, Outcome, Search, SearchList, Source,
};
use super::Loader;
use crate::DynamicInfo;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// What the process's environment gives the loader.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// `LD_LIBRARY_PATH`, as set (`None`: unset; pass none in secure-execution mode, where the
    /// loader ignores it).
    pub ld_library_path: Option<String>,
}

/// How the first object is started, which decides its `$ORIGIN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// `execve` by the kernel: `$ORIGIN` is the directory of its real path (`/proc/self/exe`).
    Kernel,
    /// Named to the loader (`ld.so PROG`, `ld.so --list PROG`): `$ORIGIN` is the directory of
    /// the path as given before glibc 2.42, of its real path since (BZ 25263,
    /// [`Loader::explicit_origin_is_real`]).
    Loader,
    /// A library judged on its own, as loaded by the path given: `$ORIGIN` is that path's
    /// directory, symlinks not followed, as for every library.
    Library,
}

/// One loaded object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// The path it was opened by (`l_name`).
    pub path: PathBuf,
    /// Its real path, when it can be had.
    pub real_path: Option<PathBuf>,
    /// The names it answers to (`l_libname`: the names it was asked for, its soname once
    /// matched).
    pub names: Vec<String>,
    /// What it asks of the loader.
    pub info: DynamicInfo,
    /// The object that caused it to be loaded (`l_loader`), whose `DT_RPATH` chain its own
    /// searches inherit; `None` for the first object, the loader and what `dlopen` loaded
    /// (glibc drops the caller then: `__RTLD_CALLMAP`).
    pub loaded_by: Option<usize>,
    /// The search that found it ([`Process::searches`]), when there was one.
    pub search: Option<usize>,
    id: FileId,
    origin: Option<String>,
}

impl Object {
    /// The object opened by `path`, with `$ORIGIN` its directory, known by no name yet, loaded
    /// by nothing and found by no search.
    fn new(path: PathBuf, opened: Opened) -> Object {
        Object {
            origin: path_origin(&path),
            path,
            real_path: opened.real_path,
            names: Vec::new(),
            info: opened.dynamic.ok().flatten().unwrap_or_default(),
            loaded_by: None,
            search: None,
            id: opened.id,
        }
    }
}

/// A name that could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The name.
    pub name: String,
    /// The object that needed it or called `dlopen`.
    pub by: usize,
    /// The search ([`Process::searches`]), and how it ended (never `Found`).
    pub search: usize,
}

/// What one `dlopen` gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dlopen {
    /// What the name itself resolves to: the file (searched now, or already loaded), or why
    /// there is none.
    pub outcome: Outcome,
    /// The search that found it or failed ([`Process::searches`]); for an object already
    /// loaded, the search that loaded it.
    pub search: Option<usize>,
    /// The object, when it is loaded (with every dependency; else the `dlopen` fails, what it
    /// loaded is unloaded again, and the dependencies not found are [`Process::missing`]).
    pub object: Option<usize>,
}

/// Why the first object cannot be started: the file, and why not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// It cannot be opened.
    #[error("{path}: {1}", path = .0.display())]
    Open(PathBuf, String),
    /// It is not an ELF file the loader takes (glibc's words where it has them).
    #[error("{path}: {1}", path = .0.display())]
    Unusable(PathBuf, String),
    /// A process was already started.
    #[error("the process has started already")]
    Started,
}

/// A process: what one loader, on one file system, with one environment, loads.
pub struct Process<'a, F: Fs> {
    loader: &'a Loader,
    fs: &'a F,
    env: Environment,
    cache: Option<Cache>,
    objects: Vec<Object>,
    order: Vec<usize>,
    searches: Vec<Search>,
    missing: Vec<Missing>,
    main: Option<usize>,
    rtld: Option<usize>,
}

impl<'a, F: Fs> Process<'a, F> {
    /// A process run by `loader` on `fs` with `env`, nothing loaded yet. The loader's cache
    /// is read now; a missing one is none, a damaged one is none too (as glibc ignores it).
    pub fn new(loader: &'a Loader, fs: &'a F, env: Environment) -> Process<'a, F> {
        let read = |path| Cache::parse(&fs.read(path, MAX_CACHE_BYTES).ok()?).ok();
        let cache = loader.cache.as_deref().and_then(read);
        Process {
            loader,
            fs,
            env,
            cache,
            objects: Vec::new(),
            order: Vec::new(),
            searches: Vec::new(),
            missing: Vec::new(),
            main: None,
            rtld: None,
        }
    }

    /// Starts the process with `path` (an absolute path) as its first object, the loader
    /// beside it, and loads every `DT_NEEDED`, breadth first as `_dl_map_object_deps` does.
    /// A name that is not found is recorded ([`Process::missing`]) and the rest loads, as
    /// `ld.so --list` shows it (a real start would stop there).
    pub fn start(&mut self, path: &Path, how: Start) -> Result<usize, StartError> {
        if self.main.is_some() {
            return Err(StartError::Started);
        }
        let (attempt, opened) = search::try_file(path, self.loader.elf, self.fs);
        let unusable = |reason: String| StartError::Unusable(path.to_path_buf(), reason);
        let open = |error: String| StartError::Open(path.to_path_buf(), error);
        let opened = match (attempt, opened) {
            (search::Attempt::Loadable, Some(o)) => o,
            (search::Attempt::Unusable(reason), _) => return Err(unusable(reason)),
            (search::Attempt::OtherClass, _) => return Err(unusable("wrong ELF class".into())),
            (search::Attempt::OtherMachine, _) => return Err(unusable("wrong machine".into())),
            (search::Attempt::ListEnded(error), _) => return Err(open(error)),
            _ => return Err(open("not found".into())),
        };
        let real =
            how == Start::Kernel || (how == Start::Loader && self.loader.explicit_origin_is_real());
        let origin = match real {
            true => (self.fs.canonicalize(path).ok()).and_then(|r| path_origin(&r)),
            false => path_origin(path),
        };
        let main = self.add(Object {
            origin,
            ..Object::new(path.to_path_buf(), opened)
        });
        self.main = Some(main);
        // The loader itself, under its path and its soname; listed once something needs it.
        let path = self.loader.interpreter.clone();
        if let Ok(opened) = self.fs.open(&path) {
            let name = path.to_string_lossy().into_owned();
            let mut object = Object::new(path, opened);
            object.names = vec![name];
            object.names.extend(object.info.soname.clone());
            self.objects.push(object);
            self.rtld = Some(self.objects.len() - 1);
        }
        let missing = self.load_needed(main);
        self.missing.extend(missing);
        Ok(main)
    }

    /// `dlopen(name)` called from the object `caller`: the object already loaded under that
    /// name, else the one a search from `caller` finds (its `DT_RPATH` chain, `LD_LIBRARY_PATH`,
    /// its `DT_RUNPATH`, the cache, the default directories), with its dependencies.
    pub fn dlopen(&mut self, name: &str, caller: usize) -> Dlopen {
        let (objects, order) = (self.objects.len(), self.order.len());
        match self.map(caller, name) {
            Err(m) => Dlopen {
                outcome: self.searches[m.search].outcome.clone(),
                search: Some(m.search),
                object: None,
            },
            Ok((id, created)) => {
                let object = &self.objects[id];
                let search = object.search;
                let outcome = match search.map(|s| &self.searches[s].outcome) {
                    Some(o @ Outcome::Found { .. }) if created => o.clone(),
                    _ => Outcome::Found {
                        path: object.path.clone(),
                        real_path: object.real_path.clone(),
                        source: Source::Loaded,
                    },
                };
                let mut missing = Vec::new();
                if created {
                    self.objects[id].loaded_by = None;
                    missing = self.load_needed(id);
                }
                let object = if missing.is_empty() {
                    Some(id)
                } else {
                    self.objects.truncate(objects);
                    self.order.truncate(order);
                    self.missing.extend(missing);
                    None
                };
                Dlopen {
                    outcome,
                    search,
                    object,
                }
            }
        }
    }

    /// The object that answers to `name` (a name it was loaded by, its path, or its
    /// soname), as `_dl_lookup_map` finds it.
    pub fn lookup(&self, name: &str) -> Option<usize> {
        self.loaded().find(|&i| {
            let o = &self.objects[i];
            o.names.iter().any(|n| n == name)
                || o.path.as_os_str() == name
                || o.info.soname.as_deref() == Some(name)
        })
    }

    /// The objects loaded, in the order of the process's link map (the loader where it is
    /// first needed, as `rtld` inserts it).
    pub fn objects(&self) -> impl Iterator<Item = (usize, &Object)> {
        self.order.iter().map(|&i| (i, &self.objects[i]))
    }

    /// One object.
    pub fn object(&self, id: usize) -> &Object {
        &self.objects[id]
    }

    /// The loader's own object, when its file could be opened (listed among
    /// [`Process::objects`] only once something needs it; the kernel maps it regardless).
    pub fn interpreter(&self) -> Option<usize> {
        self.rtld
    }

    /// Every search made, in order.
    pub fn searches(&self) -> &[Search] {
        &self.searches
    }

    /// Every name that could not be loaded (at start, and by `dlopen`s that failed).
    pub fn missing(&self) -> &[Missing] {
        &self.missing
    }

    /// The objects loaded, in load order, and then the dynamic loader (loaded or not).
    fn loaded(&self) -> impl Iterator<Item = usize> + '_ {
        self.order.iter().copied().chain(self.rtld)
    }

    fn add(&mut self, object: Object) -> usize {
        self.objects.push(object);
        let id = self.objects.len() - 1;
        self.order.push(id);
        id
    }

    /// Loads the `DT_NEEDED` of `root` and of everything it brings, breadth first.
    fn load_needed(&mut self, root: usize) -> Vec<Missing> {
        let mut missing = Vec::new();
        let mut queue = VecDeque::from([root]);
        while let Some(object) = queue.pop_front() {
            for name in self.objects[object].info.needed.clone() {
                match self.map(object, &name) {
                    Ok((dep, true)) => queue.push_back(dep),
                    Ok((dep, false)) => {
                        if Some(dep) == self.rtld && !self.order.contains(&dep) {
                            self.order.push(dep);
                        }
                    }
                    Err(m) => missing.push(m),
                }
            }
        }
        missing
    }

    /// `_dl_map_object`: the object answering to `name`, else a new one found from `by`.
    /// `Ok((id, created))`.
    fn map(&mut self, by: usize, name: &str) -> Result<(usize, bool), Missing> {
        if let Some(id) = self.lookup(name) {
            let o = &mut self.objects[id];
            if !o.names.iter().any(|n| n == name) {
                o.names.push(name.to_string());
            }
            return Ok((id, false));
        }
        let requester = self.objects[by].path.clone();
        let (lists, direct) = if name.contains('/') {
            let origin = self.objects[by].origin.as_deref();
            let list = SearchList {
                source: Source::Direct,
                dirs: Vec::new(),
            };
            let path = expand_dsts(name, origin, self.loader).map(PathBuf::from);
            (vec![list], path)
        } else {
            (self.lists(by), None)
        };
        let files = (self.cache.as_ref(), direct.as_deref());
        let (found, hit) = search::run(name, &requester, lists, self.loader, files, self.fs);
        self.searches.push(found);
        let search = self.searches.len() - 1;
        let (Some(opened), Some(path)) = (hit, self.searches[search].found()) else {
            return Err(Missing {
                name: name.to_string(),
                by,
                search,
            });
        };
        let path = path.to_path_buf();
        // The same file under another name is the object already loaded.
        let same = self.loaded().find(|&i| self.objects[i].id == opened.id);
        if let Some(id) = same {
            self.objects[id].names.push(name.to_string());
            if Some(id) == self.rtld && !self.order.contains(&id) {
                self.order.push(id);
            }
            return Ok((id, false));
        }
        let object = Object {
            names: vec![name.to_string()],
            loaded_by: Some(by),
            search: Some(search),
            ..Object::new(path, opened)
        };
        Ok((self.add(object), true))
    }

    /// The lists searched for a name without `/` loaded from `by`, in `_dl_map_new_object`'s
    /// order.
    fn lists(&self, by: usize) -> Vec<SearchList> {
        let loader = self.loader;
        let list = |source, entries: &[String], i: usize| SearchList {
            source,
            dirs: expand_list(entries, self.objects[i].origin.as_deref(), loader),
        };
        let mut lists = Vec::new();
        if self.objects[by].info.runpath.is_none() {
            // The DT_RPATH of the loading object, of the one that caused it to be loaded, and
            // on up; then the executable's, if not among them.
            let up = || std::iter::successors(Some(by), |&i| self.objects[i].loaded_by);
            let main = self.main.filter(|&m| !up().any(|i| i == m));
            for i in up().chain(main) {
                // An object with DT_RUNPATH has its DT_RPATH ignored (get-dynamic-info.h).
                let info = &self.objects[i].info;
                if let (Some(r), None) = (&info.rpath, &info.runpath) {
                    lists.push(list(Source::Rpath(self.objects[i].path.clone()), r, i));
                }
            }
        }
        // LD_LIBRARY_PATH as glibc splits it (`_dl_init_paths`): at `:` and `;`, empty entries
        // kept (the current directory); an unset or empty value is no list at all.
        let v = self.env.ld_library_path.as_deref().unwrap_or_default();
        if !v.is_empty() {
            let llp: Vec<String> = v.split([':', ';']).map(String::from).collect();
            let origin = self.main.and_then(|m| self.objects[m].origin.clone());
            lists.push(SearchList {
                source: Source::LdLibraryPath,
                dirs: expand_list(&llp, origin.as_deref(), loader),
            });
        }
        if let Some(r) = &self.objects[by].info.runpath {
            lists.push(list(Source::Runpath(self.objects[by].path.clone()), r, by));
        }
        if let Some(cache) = loader.cache.as_ref().filter(|_| self.cache.is_some()) {
            lists.push(SearchList {
                source: Source::Cache(cache.clone()),
                dirs: Vec::new(),
            });
        }
        lists.push(SearchList {
            source: Source::Default,
            dirs: loader
                .system_dirs
                .iter()
                .map(|d| trim_dir(&d.to_string_lossy()))
                .collect(),
        });
        lists
    }
}

/// The `$ORIGIN` of an object loaded by `path`: its directory, made absolute against the
/// current directory, symlinks not followed (`_dl_new_object`).
fn path_origin(path: &Path) -> Option<String> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(path)
    };
    Some(abs.parent()?.to_string_lossy().into_owned())
}
