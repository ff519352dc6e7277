//! `package::driver` (only with `--package`): for each object of the closure that opens libcuda
//! (a `libcudart.so`, an ELF file with a static libcudart inside, an ELF file with
//! `libcuda.so.1` in DT_NEEDED), the `libcuda.so.1` glibc's loader would give it in this
//! process ([`cuda_sandbox_elfkit::ldso`]: its DT_RPATH, `LD_LIBRARY_PATH`, its DT_RUNPATH, the
//! loader's cache and default directories), compared with the driver the hook chose (the
//! manifest), else with the one this runner loaded. One that would get NVIDIA's stub libcuda
//! (recognised by what it is: [`crate::facts::stub_libcuda`]) fails naming it.

use std::path::{Path, PathBuf};

use cuda_sandbox_elfkit::ldso::{Environment, Loader, Outcome as Search, Process, RealFs, Start};
use cuda_sandbox_manifest::DriverManifest;
use serde::{Deserialize, Serialize};

use crate::check::{facts_of, Outcome};
use crate::cuda::{driver::LIBCUDA, loaded::LoadedFile};
use crate::facts;
use crate::facts::expectations::{is_chosen, library_mismatch};
use crate::facts::package_under_test::ScannedFile;
use crate::facts::runtime_scan::RuntimeForm;
use crate::facts::stub_libcuda::stub_at;
use crate::session::Session;

/// What the loader would give one object of the package that opens libcuda.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectDriver {
    /// The object's file.
    pub(crate) object: PathBuf,
    /// Why it opens libcuda (DT_NEEDED, a runtime, a static runtime inside).
    pub(crate) opens: String,
    /// What its search finds.
    #[serde(flatten)]
    pub found: ObjectSearch,
}

/// What one object's search for `libcuda.so.1` finds, as the report spells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ObjectSearch {
    /// A `libcuda.so.1` (`gets`: the path found), and whether it is the right one.
    Found {
        /// The path the loader would open.
        gets: PathBuf,
        /// Whether it is the driver the hook chose, else the one this runner loaded.
        right: bool,
    },
    /// A file the loader would stop at, and why it cannot load it.
    Error {
        /// Why the loader refuses it.
        error: String,
    },
    /// Nothing (`gets` is null).
    NotFound {
        /// Always `None`.
        gets: Option<PathBuf>,
    },
}

/// What `package::driver` reports once it has objects to judge and a driver to judge them
/// against (the report's `facts`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverFacts {
    /// What each object must get: the hook's choice, else the runner's own libcuda.
    pub(crate) against: String,
    /// `LD_LIBRARY_PATH` as this process has it (every object's search includes it).
    pub(crate) ld_library_path: Option<String>,
    /// Every object that opens libcuda, in the package's order.
    pub objects: Vec<ObjectDriver>,
}

/// Why an object of the package opens libcuda, or `None` when it does not.
fn opens_libcuda(file: &ScannedFile) -> Option<&'static str> {
    let name = file.path.file_name()?.to_string_lossy();
    let info = file.dynamic.as_ref()?;
    if info
        .needed
        .iter()
        .any(|n| n == LIBCUDA || n == "libcuda.so")
    {
        Some("needs libcuda.so.1 (DT_NEEDED)")
    } else if name.starts_with("libcudart.so") {
        Some("a CUDA runtime: it dlopens libcuda.so.1")
    } else if file
        .runtime
        .as_ref()
        .is_some_and(|r| r.form == RuntimeForm::StaticCopy)
    {
        Some("holds a static CUDA runtime: its dlopen searches its own DT_RUNPATH")
    } else {
        None
    }
}

/// Runs `package::driver`.
pub(crate) fn driver(session: &Session) -> Result<Outcome, Outcome> {
    let package = session.package().map_err(Outcome::fail_without_facts)?;
    // Each object that opens libcuda, with its dynamic section (which says why it does).
    let objects: Vec<_> = package
        .scanned
        .iter()
        .filter_map(|f| Some((f, f.dynamic.as_ref()?, opens_libcuda(f)?)))
        .collect();
    if objects.is_empty() {
        return Ok(Outcome::pass(
            "no object of the package opens libcuda.so.1 (no libcudart, no static runtime, \
             no DT_NEEDED on it)",
            facts! { "closure_from" => &package.closure_from },
        ));
    }
    // What each object must get: the hook's choice (the manifest's driver), else the
    // libcuda.so.1 this runner loaded.
    let chosen = session.manifest.driver().filter(|d| !d.libcuda.is_empty());
    let loaded = session.driver().ok().map(|d| d.file.clone());
    if chosen.is_none() && loaded.is_none() {
        return Ok(Outcome::skipped(
            format!(
                "{} object(s) of the package open libcuda.so.1, but there is no manifest and no \
                 libcuda.so.1 loads here to compare with",
                objects.len()
            ),
            facts! {},
        ));
    }
    let ld_library_path = std::env::var("LD_LIBRARY_PATH").ok();
    // Model and judge each object's search for libcuda.so.1, as this process's
    // LD_LIBRARY_PATH would make it.
    // The interpreter of this process: a library of the package is judged as loaded by it.
    let runner_interpreter = std::fs::read("/proc/self/exe")
        .ok()
        .and_then(|exe| cuda_sandbox_elfkit::dynamic_info(&exe).ok()??.interpreter);
    let mut failures = Vec::new();
    let mut passes = Vec::new();
    let mut per_object = Vec::new();
    for (file, info, why) in &objects {
        // A program starts under its own interpreter; a library is loaded by this process's.
        let (start, interpreter) = match info.interpreter.as_deref() {
            Some(own) => (Start::Kernel, Some(own)),
            None => (Start::Library, runner_interpreter.as_deref()),
        };
        let (outcome, searched) =
            match libcuda_search(&file.path, start, interpreter, &ld_library_path) {
                Ok(search) => search,
                Err(why_not) => {
                    failures.push(why_not);
                    continue;
                }
            };
        let (found, verdict) = judge_search(&file.path, why, &outcome, &searched, chosen, &loaded);
        match verdict {
            Ok(line) => passes.push(line),
            Err(line) => failures.push(line),
        }
        per_object.push(ObjectDriver {
            object: file.path.clone(),
            opens: (*why).to_owned(),
            found,
        });
    }
    // What the objects were held to, for the message and the report.
    let against = match chosen {
        Some(d) => format!(
            "the hook's choice ({} {})",
            d.kind,
            crate::facts::expectations::chosen_path(d)
        ),
        None if session.manifest.manifest().is_some() => {
            "the libcuda.so.1 this runner loaded (the manifest names no driver)".to_string()
        }
        None => "the libcuda.so.1 this runner loaded (no manifest)".to_string(),
    };
    let facts = facts_of(&DriverFacts {
        against: against.clone(),
        ld_library_path,
        objects: per_object,
    });
    Ok(match failures.split_first() {
        None => Outcome::pass(
            format!(
                "{} object(s) opening libcuda.so.1 get {against}",
                passes.len()
            ),
            facts,
        )
        .with_detail(passes.join("\n")),
        Some((first, rest)) => Outcome::fail(
            format!("{} of {} object(s): {first}", failures.len(), objects.len()),
            facts,
        )
        .with_detail_lines(rest),
    })
}

/// What glibc's loader `interpreter` would give the object at `path` for libcuda.so.1 in this
/// process (its own process, a library loaded by its path; then its DT_NEEDED, else what a
/// dlopen from it gets), and the search it made, described; `Err` says why that cannot be
/// modelled.
fn libcuda_search(
    path: &Path,
    start: Start,
    interpreter: Option<&Path>,
    ld_library_path: &Option<String>,
) -> Result<(Search, String), String> {
    let Some(interpreter) = interpreter else {
        return Err(format!(
            "{}: no dynamic loader to model its search with",
            path.display()
        ));
    };
    let loader = Loader::ask(interpreter).map_err(|e| {
        format!(
            "{}: its loader {} cannot be asked for its search path: {e}",
            path.display(),
            interpreter.display()
        )
    })?;
    let env = Environment {
        ld_library_path: ld_library_path.clone(),
    };
    let mut process = Process::new(&loader, &RealFs, env);
    let main = process
        .start(path, start)
        .map_err(|e| format!("{}: cannot be loaded: {e}", path.display()))?;
    let resolution = process.dlopen(LIBCUDA, main);
    let searched = resolution
        .search
        .map(|s| process.searches()[s].describe())
        .unwrap_or_default();
    Ok((resolution.outcome, searched))
}

/// Judges what the object at `path` (which opens libcuda because `why`) would get, `outcome`
/// after the search `searched`, against the hook's choice (`chosen`), else the libcuda.so.1 this
/// runner `loaded`: its report entry, and its line for the detail (`Ok`) or its failure (`Err`).
fn judge_search(
    path: &Path,
    why: &str,
    outcome: &Search,
    searched: &str,
    chosen: Option<&DriverManifest>,
    loaded: &Option<LoadedFile>,
) -> (ObjectSearch, Result<String, String>) {
    let shown = path.display();
    match outcome {
        Search::Found {
            path: got_path,
            real_path,
            ..
        } => {
            let got = LoadedFile {
                path: got_path.clone(),
                real_path: real_path.clone().unwrap_or_else(|| got_path.clone()),
            };
            // Its CUDA version, where the file's name gives the driver branch
            // (`libcuda.so.535.104.05`); the runner's own driver says nothing about it.
            let version = got
                .real_path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("libcuda.so."))
                .and_then(cuda_sandbox_manifest::versions::cuda_for_driver);
            // Why it is not the driver wanted, when it is not.
            let why_wrong = match (chosen, loaded) {
                (Some(driver), _) => {
                    (!is_chosen(&got, driver)).then(|| library_mismatch(&got, version, driver))
                }
                (None, Some(file)) => (file.real_path != got.real_path).then(|| {
                    format!(
                        "loaded {} but this runner loaded {}",
                        got_path.display(),
                        file.path.display()
                    )
                }),
                (None, None) => Some(String::new()),
            };
            let verdict = match (stub_at(&got.real_path), why_wrong) {
                (Some(stub), _) => Err(format!(
                    "{shown} ({why}) would load {}, {stub}: every driver call fails; it \
                     searches {searched}; remove the directory holding it from its search \
                     path (it is for linking only)",
                    got_path.display()
                )),
                (None, None) => Ok(format!("{shown} gets {}", got_path.display())),
                (None, Some(why_wrong)) => Err(format!(
                    "{shown} ({why}) would load {}: {why_wrong}; it searches {searched}",
                    got_path.display()
                )),
            };
            let found = ObjectSearch::Found {
                gets: got_path.clone(),
                right: verdict.is_ok(),
            };
            (found, verdict)
        }
        Search::Error {
            path: stopped_at,
            reason,
        } => (
            ObjectSearch::Error {
                error: reason.clone(),
            },
            Err(format!(
                "{shown} ({why}) would fail to load libcuda.so.1: {} is {reason}; it \
                 searches {searched}",
                stopped_at.display()
            )),
        ),
        Search::NotFound { .. } => (
            ObjectSearch::NotFound { gets: None },
            Err(format!(
                "{shown} ({why}) finds no libcuda.so.1: it searches {searched}; add the \
                 driver link to its DT_RUNPATH (Nixpkgs: autoAddDriverRunpath)"
            )),
        ),
    }
}

#[cfg(test)]
mod tests {
    //! Each search result has the report's shape and reads back as itself.

    use super::*;
    use serde_json::json;

    fn object(found: ObjectSearch) -> ObjectDriver {
        ObjectDriver {
            object: "/nix/store/x/lib/libcudart.so.12".into(),
            opens: "a CUDA runtime: it dlopens libcuda.so.1".into(),
            found,
        }
    }

    #[test]
    fn each_search_result_has_its_report_shape_and_reads_back() {
        let shapes = [
            (
                ObjectSearch::Found {
                    gets: "/run/opengl-driver/lib/libcuda.so.1".into(),
                    right: true,
                },
                json!({ "gets": "/run/opengl-driver/lib/libcuda.so.1", "right": true }),
            ),
            (
                ObjectSearch::Error {
                    error: "file too short".into(),
                },
                json!({ "error": "file too short" }),
            ),
            (
                ObjectSearch::NotFound { gets: None },
                json!({ "gets": null }),
            ),
        ];
        for (found, extra) in shapes {
            let entry = object(found);
            let mut want = json!({
                "object": "/nix/store/x/lib/libcudart.so.12",
                "opens": "a CUDA runtime: it dlopens libcuda.so.1",
            });
            want.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let value = serde_json::to_value(&entry).unwrap();
            assert_eq!(value, want);
            assert_eq!(
                serde_json::from_value::<ObjectDriver>(value).unwrap(),
                entry
            );
        }
    }
}
