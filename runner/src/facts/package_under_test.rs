//! The package under test (`--package PATH`): its runtime closure and what each file in it
//! carries that decides whether it runs here (its GPU code, its CUDA runtimes, what it asks
//! of the loader). Read once, shared by the `package::*` checks.
//!
//! Inside a Nix build there is no store database to ask for a closure, so the derivation
//! hands it over: `mkGpuCheck` sets `exportReferencesGraph`, and `--package-closure FILE`
//! reads that file (or Nixpkgs' `closureInfo` `store-paths`). Elsewhere the closure comes from
//! `nix-store --query --requisites`, as `lint --closure` does; a path outside the store is its
//! own closure.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cuda_sandbox_elfkit::fatbin::{read_gpu_code, GpuCode};
use cuda_sandbox_elfkit::{dynamic_info, normalize, requisites, store_path_of, DynamicInfo};

use crate::facts::elf_lint::{map_file, Contents};
use crate::facts::runtime_scan::{gpu_code_and_runtime, runtime_in, FoundRuntime, RuntimeForm};
use crate::facts::walk::{resolve, walk, PathError};
use crate::options::Options;

/// The store directory package paths live in.
pub(crate) const STORE_DIR: &str = "/nix/store";

/// One file of the closure that matters to the checks.
#[derive(Debug, Clone)]
pub(crate) struct ScannedFile {
    /// Where it is.
    pub path: PathBuf,
    /// What it asks of the loader, for an ELF file.
    pub dynamic: Option<DynamicInfo>,
    /// Its fat binaries (empty when it has none).
    pub gpu_code: GpuCode,
    /// The CUDA runtime it is or holds, if any.
    pub runtime: Option<FoundRuntime>,
}

/// The package under test, read.
#[derive(Debug, Clone)]
pub(crate) struct PackageUnderTest {
    /// The paths given with `--package`.
    pub roots: Vec<PathBuf>,
    /// Their runtime closure: every path walked.
    pub closure: Vec<PathBuf>,
    /// Where the closure came from, for messages.
    pub closure_from: String,
    /// Regular files walked.
    pub files: usize,
    /// Files that could not be read, with why.
    pub unreadable: Vec<String>,
    /// The files that carry GPU code, a CUDA runtime, or an ELF dynamic section.
    pub scanned: Vec<ScannedFile>,
}

/// The store paths listed in a closure file: `exportReferencesGraph`'s (each path, its
/// deriver, a count, its references) or `closureInfo`'s `store-paths` (one a line). Every line
/// that is a store path and not a `.drv` is a member.
pub(crate) fn parse_closure_file(text: &str, store_dir: &Path) -> Vec<PathBuf> {
    let members: BTreeSet<PathBuf> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.ends_with(".drv") && Path::new(line).is_absolute())
        .filter_map(|line| store_path_of(Path::new(line), store_dir))
        .collect();
    members.into_iter().collect()
}

/// Why the package's closure cannot be known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PackageError {
    /// `--package-closure` cannot be read: the file given, and the I/O error.
    #[error("--package-closure {file}: {1}", file = .0.display())]
    ClosureFileUnreadable(PathBuf, String),
    /// `--package-closure` (the file given) does not list a store path given with
    /// `--package` (the package it lacks).
    #[error(
        "--package-closure {} does not list {}: give the closure of the package \
         (exportReferencesGraph = [ \"closure\" package ])",
        .0.display(),
        .1.display()
    )]
    ClosureFileLacksRoot(PathBuf, PathBuf),
    /// A path given with `--package` does not exist.
    #[error("--package {0}")]
    Missing(PathError),
    /// The package (the paths given) holds no file: nothing judged is not a pass.
    #[error(
        "--package {}: no file in it or its closure to judge (nothing judged is not a pass)",
        .0.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    Empty(Vec<PathBuf>),
    /// `nix-store --query --requisites` did not answer: the store path asked about, and why.
    #[error(
        "the runtime closure of {path} is unknown ({1}); inside a Nix build give \
         --package-closure FILE (mkGpuCheck does)",
        path = .0.display()
    )]
    ClosureUnknown(PathBuf, String),
}

impl PackageUnderTest {
    /// Reads the closure of the `--package` paths (from `--package-closure`, else `nix-store`)
    /// and scans its files.
    pub(crate) fn read(options: &Options) -> Result<PackageUnderTest, PackageError> {
        let store = Path::new(STORE_DIR);
        // The paths given, absolute (against the working directory); one that is a link into
        // the store (`./result`) stands for its store path, whose closure is asked.
        let roots = &options
            .packages
            .iter()
            .map(|root| {
                let absolute = resolve(root).map_err(PackageError::Missing)?;
                Ok(match std::fs::canonicalize(&absolute) {
                    Ok(real) if real.starts_with(store) => real,
                    _ => absolute,
                })
            })
            .collect::<Result<Vec<_>, PackageError>>()?;
        let mut closure = BTreeSet::new();
        let closure_from = match options.package_closure.as_deref() {
            Some(file) => {
                let text = std::fs::read_to_string(file).map_err(|e| {
                    PackageError::ClosureFileUnreadable(file.to_path_buf(), e.to_string())
                })?;
                let members = parse_closure_file(&text, store);
                for root in roots {
                    if store_path_of(root, store).is_some_and(|r| !members.contains(&r)) {
                        let (file, root) = (file.to_path_buf(), root.clone());
                        return Err(PackageError::ClosureFileLacksRoot(file, root));
                    }
                }
                closure.extend(members);
                closure.extend(
                    roots
                        .iter()
                        .filter(|r| store_path_of(r, store).is_none())
                        .cloned(),
                );
                format!("the closure file {}", file.display())
            }
            None => {
                let mut asked = false;
                for root in roots {
                    match store_path_of(root, store) {
                        Some(path) => {
                            asked = true;
                            let members =
                                requisites(Path::new("nix-store"), &path).map_err(|e| {
                                    PackageError::ClosureUnknown(path.clone(), e.to_string())
                                })?;
                            closure.extend(members);
                        }
                        None => {
                            closure.insert(normalize(root));
                        }
                    }
                }
                let from = if asked {
                    "nix-store --query --requisites"
                } else {
                    "the paths given (not in the store: each is its own closure)"
                };
                from.to_owned()
            }
        };
        let closure: Vec<PathBuf> = closure.into_iter().collect();
        let walked = walk(&closure, store);
        if walked.files.is_empty() {
            return Err(PackageError::Empty(roots.to_vec()));
        }
        let mut unreadable: Vec<String> = walked.errors.iter().map(ToString::to_string).collect();
        let mut scanned = Vec::new();
        for path in &walked.files {
            match scan_file(path) {
                Ok(Some(file)) => scanned.push(file),
                Ok(None) => {}
                Err(why) => unreadable.push(format!("{}: {why}", path.display())),
            }
        }
        Ok(PackageUnderTest {
            roots: roots.to_vec(),
            closure,
            closure_from,
            files: walked.files.len(),
            unreadable,
            scanned,
        })
    }

    /// The scanned files the GPU code judgment looks at: those that carry GPU code, and those
    /// without that carry a CUDA runtime (shared, a static copy, or `libcudart.so.N` needed),
    /// which it judges by the runtime alone.
    pub(crate) fn to_judge(&self) -> impl Iterator<Item = &ScannedFile> {
        self.scanned.iter().filter(|f| {
            !f.gpu_code.containers.is_empty()
                || f.runtime
                    .as_ref()
                    .is_some_and(|r| r.form != RuntimeForm::Archive)
                || f.dynamic
                    .as_ref()
                    .is_some_and(|d| d.needed.iter().any(|n| n.starts_with("libcudart.so.")))
        })
    }

    /// The scanned files that are or hold a CUDA runtime.
    pub(crate) fn runtimes(&self) -> impl Iterator<Item = (&ScannedFile, &FoundRuntime)> {
        self.scanned
            .iter()
            .filter_map(|f| f.runtime.as_ref().map(|r| (f, r)))
    }
}

/// One file, mapped: `None` when it is neither ELF, nor a fat binary, nor an ar archive.
fn scan_file(path: &Path) -> Result<Option<ScannedFile>, String> {
    let Some((map, contents)) = map_file(path).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let data = map.bytes();
    let (gpu_code, runtime, dynamic) = match contents {
        Contents::Elf => {
            let (code, runtime) = gpu_code_and_runtime(path, data);
            (code, runtime, dynamic_info(data))
        }
        Contents::Archive => (read_gpu_code(data), runtime_in(path, None, &[]), Ok(None)),
        Contents::Fatbin => (read_gpu_code(data), None, Ok(None)),
        Contents::Zip | Contents::Other => return Ok(None),
    };
    let gpu_code = gpu_code.map_err(|e| format!("its GPU code: {e}"))?;
    let dynamic = dynamic.map_err(|e| e.to_string())?;
    if gpu_code.containers.is_empty() && dynamic.is_none() && runtime.is_none() {
        return Ok(None);
    }
    Ok(Some(ScannedFile {
        path: path.to_path_buf(),
        dynamic,
        gpu_code,
        runtime,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closure_files_of_both_formats_list_their_store_paths() {
        let store = Path::new("/nix/store");
        // exportReferencesGraph: path, deriver, count, references.
        let graph = "/nix/store/aaa-app\n/nix/store/ddd-app.drv\n2\n/nix/store/aaa-app\n\
                     /nix/store/bbb-glibc\n/nix/store/bbb-glibc\n\n0\n";
        assert_eq!(
            parse_closure_file(graph, store),
            [
                PathBuf::from("/nix/store/aaa-app"),
                PathBuf::from("/nix/store/bbb-glibc")
            ]
        );
        // closureInfo's store-paths.
        let paths = "/nix/store/bbb-glibc\n/nix/store/aaa-app\n";
        assert_eq!(parse_closure_file(paths, store).len(), 2);
        // Lines that are not store paths are not members.
        assert!(parse_closure_file("2\n/etc/passwd\nrelative\n", store).is_empty());
    }
}
