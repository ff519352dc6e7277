//! Which process would load two CUDA runtimes of different versions: the version-mixing
//! hazard exists only inside one process (one dependency graph), not between two programs of a
//! package that each carry their own runtime.
//!
//! Each executable of the package is a process ([`Process::start`] as the kernel starts it),
//! and each shared library a root of its own (what `dlopen` of it would load, as
//! [`Start::Library`]): glibc's search, modelled once in [`cuda_sandbox_elfkit::ldso`] (the
//! loader chosen by [`Loader::known`], never run), gives every object the graph loads. The
//! runtimes in it are those the lint found in the package, and, for objects outside it, what
//! [`runtime_in_dependency`] finds in them (each file read once, in bounded memory).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use cuda_sandbox_elfkit::ldso::{ElfHost, Environment, Loader, Process, RealFs, Start};

use crate::facts::lint_report::{Finding, FindingKind};
use crate::facts::runtime_scan::{mixed_versions, runtime_in_dependency, FoundRuntime};

/// An ELF file of the package that starts a dependency graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Root {
    /// The file.
    pub path: PathBuf,
    /// Its `PT_INTERP`, for an executable; `None` for a shared library.
    pub interpreter: Option<PathBuf>,
}

/// The real path of `path`, or `path` when it has none.
fn real(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The runtime in each of `objects` (one process's, in load order), from `cache` or read (and
/// then kept there). Mixing takes two runtimes of exact versions, so when every other object is
/// known to hold none, the one left is not read: its runtime, whatever it is, mixes with
/// nothing, and it counts as holding none here (it stays out of `cache`). The one left is the
/// largest file: a library that holds a runtime, such as cuFFTW's `libcufft.so.11` (291 MB,
/// 24,454 fat binaries), is read only where another object could mix with it.
fn runtimes_of(
    objects: &[PathBuf],
    cache: &mut HashMap<PathBuf, Option<FoundRuntime>>,
) -> Vec<Option<FoundRuntime>> {
    let mut unread: Vec<(u64, &PathBuf)> = objects
        .iter()
        .filter(|path| !cache.contains_key(*path))
        .map(|path| (std::fs::metadata(path).map_or(0, |m| m.len()), path))
        .collect();
    unread.sort();
    unread.dedup_by(|a, b| a.1 == b.1);
    let largest = unread.pop();
    for (_, path) in unread {
        cache.insert(path.clone(), runtime_in_dependency(path));
    }
    let can_mix = objects.iter().any(|path| {
        cache
            .get(path)
            .and_then(Option::as_ref)
            .and_then(FoundRuntime::mixing_version)
            .is_some()
    });
    if let Some((_, path)) = largest.filter(|_| can_mix) {
        cache.insert(path.clone(), runtime_in_dependency(path));
    }
    objects
        .iter()
        .map(|path| cache.get(path).cloned().flatten())
        .collect()
}

/// Every root whose dependency graph holds runtimes of two versions, as a
/// `mixed-cuda-runtimes` finding about it (the executable, or, for a library, the library whose
/// `dlopen` loads them) that says which process loads which runtimes (in load order), and why
/// that is a hazard; `known` are the runtimes found in the package (by file; a root not among
/// them holds none, and is not read again). Executables first, then libraries whose runtimes
/// are not already those of an executable reported.
pub(crate) fn mixed_processes(
    roots: &[Root],
    known: &[FoundRuntime],
    store_dir: &Path,
) -> Vec<Finding> {
    // The package's own files are classified already: each root holds `known`'s runtime or none.
    let mut runtimes: HashMap<PathBuf, Option<FoundRuntime>> =
        roots.iter().map(|r| (real(&r.path), None)).collect();
    runtimes.extend(known.iter().map(|r| (real(&r.file), Some(r.clone()))));
    let default_interpreter = ElfHost::native()
        .standard_interpreter()
        .map(Path::to_path_buf);
    let mut out: Vec<Finding> = Vec::new();
    let mut reported: Vec<BTreeSet<PathBuf>> = Vec::new();
    let mut ordered: Vec<&Root> = roots.iter().filter(|r| r.interpreter.is_some()).collect();
    ordered.extend(roots.iter().filter(|r| r.interpreter.is_none()));
    for root in ordered {
        let Some(interpreter) = root
            .interpreter
            .clone()
            .or_else(|| default_interpreter.clone())
        else {
            continue;
        };
        let loader = Loader::known(&interpreter, store_dir);
        let mut process = Process::new(&loader, &RealFs, Environment::default());
        let how = match root.interpreter {
            Some(_) => Start::Kernel,
            None => Start::Library,
        };
        if process.start(&root.path, how).is_err() {
            continue;
        }
        let objects: Vec<PathBuf> = process
            .objects()
            .map(|(_, object)| real(object.real_path.as_deref().unwrap_or(&object.path)))
            .collect();
        // The files holding a runtime, and their runtimes in load order, each file once.
        let mut files: BTreeSet<PathBuf> = BTreeSet::new();
        let mut in_order = Vec::new();
        for (path, found) in objects.iter().zip(runtimes_of(&objects, &mut runtimes)) {
            if let Some(found) = found {
                if files.insert(path.clone()) {
                    in_order.push(found);
                }
            }
        }
        let Some(versions) = mixed_versions(&in_order) else {
            continue;
        };
        if root.interpreter.is_none() && reported.iter().any(|r| files.is_subset(r)) {
            continue;
        }
        reported.push(files);
        let files: Vec<String> = in_order
            .iter()
            .map(|r| format!("{} ({})", r.file.display(), r.version_text()))
            .collect();
        let process = match root.interpreter {
            Some(_) => format!("the process of {}", root.path.display()),
            None => format!("a process that loads {}", root.path.display()),
        };
        out.push(Finding {
            file: root.path.clone(),
            kind: FindingKind::MixedCudaRuntimes,
            message: format!(
                "{process} would load CUDA runtimes of versions {} ({}): each resolves driver \
                 entry points through cudaGetDriverEntryPoint at min(its own version, the \
                 driver's), so one process gets two ABIs of the same driver functions; build \
                 everything it loads against one CUDA version",
                versions.join(" and "),
                files.join(", ")
            ),
        });
    }
    out
}
