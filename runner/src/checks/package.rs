//! The `package::*` checks (only with `--package`): will the package under test run here?
//!
//! - `package::gpu_code`: every module of every file in the package's closure, judged for every
//!   GPU the driver reports and the loaded driver's CUDA version, with the file policy of
//!   `cuda_sandbox_elfkit::fatbin::verdict`. SASS for each GPU passes; JIT only passes with a
//!   note (the first launch compiles, and where the JIT cache is); 209 or 222 fails naming the
//!   file, the module, what it carries, what the GPU needs and the fix. Without a GPU it judges
//!   `--target`/`--driver-cuda` when given, else it is skipped: it never passes without one.
//! - `package::runtimes`: every CUDA runtime in the closure, shared (loaded, to ask its
//!   version) or linked statically into another ELF file (found in stripped files too, by
//!   what the runtime's own code and data contain), judged against the driver in use by the
//!   rules and ABI-difference report of `runtime::compatibility`: minor-version compatible
//!   passes with the report, a newer major fails naming 35, runtimes of different versions in
//!   one closure are flagged as version mixing.
//! - `package::driver`: for each object of the closure that opens libcuda (a `libcudart.so`, an
//!   ELF file with a static libcudart inside, an ELF file with `libcuda.so.1` in DT_NEEDED), the
//!   `libcuda.so.1` glibc's loader would give it in this process ([`cuda_sandbox_elfkit::ldso`]:
//!   its DT_RPATH, `LD_LIBRARY_PATH`, its DT_RUNPATH, the loader's cache and default
//!   directories), compared with the driver the hook chose (the manifest), else with the one
//!   this runner loaded. One that would get NVIDIA's stub libcuda (recognised by what it is:
//!   [`crate::facts::stub_libcuda`]) fails naming it.

use std::path::{Path, PathBuf};

use cuda_sandbox_elfkit::fatbin::rules::Driver;
use cuda_sandbox_elfkit::fatbin::verdict::FileVerdict;
use cuda_sandbox_elfkit::fatbin::Capability;
use cuda_sandbox_elfkit::map::Mapped;
use cuda_sandbox_manifest::versions::{cuda_for_driver, kernel_module_version};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::check::{facts_of, Outcome};
use crate::checks::lint::{manifest_driver, target_driver};
use crate::checks::runtime::{judge as judge_runtimes, Candidate, CudartFile};
use crate::cuda::cudart::{Runtime, RuntimeVersion};
use crate::cuda::loaded::LoadedFile;
use crate::cuda::version::CudaVersion;
use crate::facts;
use crate::facts::expectations::{is_chosen, library_mismatch};
use crate::facts::gpu_code::{judge_all, runtime_uses, Target};
use crate::facts::package_under_test::STORE_DIR;
use crate::facts::provenance::Provenance;
use crate::facts::runtime_scan::RuntimeForm;
use crate::facts::stub_libcuda::stub_at;
use crate::session::Session;
use cuda_sandbox_elfkit::ldso::{Environment, Loader, Outcome as Search, Process, RealFs, Start};

/// The driver this process loaded, as the rules judge it: libcuda's CUDA version, and the
/// kernel module's from the hook's manifest, else `/proc/driver/nvidia/version` (the same as
/// libcuda's when neither says).
fn loaded_driver(session: &Session) -> Option<Driver> {
    let cuda = session.driver().ok()?.version().ok()?;
    let from_manifest = manifest_driver(&session.manifest).filter(|d| d.cuda == cuda);
    let kernel = from_manifest.map(|d| d.kernel).or_else(|| {
        session
            .access
            .kernel_module
            .as_deref()
            .and_then(kernel_module_version)
            .and_then(|v| cuda_for_driver(&v))
            .map(|v| v.0)
    });
    Some(Driver {
        cuda,
        kernel: kernel.unwrap_or(cuda),
        version: from_manifest.and_then(|d| d.version),
    })
}

/// The GPUs and driver to judge GPU code for: every GPU the driver reports with the loaded
/// driver; else each `--target` with `--driver-cuda` (or the manifest's, or the loaded
/// driver); else why there is none.
fn targets(session: &Session) -> Result<(Vec<Target>, String), String> {
    let loaded = loaded_driver(session);
    let devices = session.devices();
    if let Ok(devices) = devices {
        if let Some(driver) = loaded.filter(|_| !devices.is_empty()) {
            let mut targets = Vec::new();
            for d in devices {
                let device = Capability::parse(&d.compute_capability)
                    .map_err(|e| format!("GPU {} reports compute capability {e}", d.ordinal))?;
                let target = Target { device, driver };
                if !targets.contains(&target) {
                    targets.push(target);
                }
            }
            return Ok((targets, "every GPU the driver reports".into()));
        }
    }
    let lint = &session.options.lint;
    let Some(&first) = lint.target.first() else {
        return Err(format!(
            "no GPU to judge the package's GPU code for ({}) and no --target sm_XY: not judged",
            devices
                .err()
                .map_or_else(|| "the driver reports none".into(), |e| e.to_string())
        ));
    };
    let driver = target_driver(lint, &session.manifest)
        .or(loaded)
        .ok_or_else(|| {
            format!(
                "--target sm_{} needs the CUDA version of the driver: add --driver-cuda X.Y",
                first.sm()
            )
        })?;
    let targets = lint
        .target
        .iter()
        .map(|&device| Target { device, driver })
        .collect();
    Ok((targets, "--target".into()))
}

/// Where the driver keeps JIT-compiled PTX, and whether it can write there.
fn jit_cache() -> String {
    let dir = match std::env::var_os("CUDA_CACHE_PATH") {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".nv/ComputeCache"),
            None => return "no JIT cache ($HOME and $CUDA_CACHE_PATH unset)".into(),
        },
    };
    if std::env::var("CUDA_CACHE_DISABLE").as_deref() == Ok("1") {
        return "the JIT cache is disabled (CUDA_CACHE_DISABLE=1): every run compiles again".into();
    }
    let writable = dir
        .ancestors()
        .find(|a| a.exists())
        .and_then(|a| a.metadata().ok())
        .is_some_and(|m| !m.permissions().readonly());
    if writable {
        format!("the JIT cache is {}", dir.display())
    } else {
        format!(
            "the JIT cache {} cannot be written here (in a Nix build $HOME is \
             /homeless-shelter): every run compiles again",
            dir.display()
        )
    }
}

/// Runs `package::gpu_code`.
pub fn gpu_code(session: &Session) -> Outcome {
    let package = match session.package() {
        Ok(p) => p,
        Err(why) => return Outcome::fail(why, facts! {}),
    };
    let (targets, from) = match targets(session) {
        Ok(t) => t,
        Err(why) => return Outcome::skipped(why, facts! { "closure" => &package.closure }),
    };
    let mut failures: Vec<String> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut jit: Vec<String> = Vec::new();
    let mut judged: Vec<Value> = Vec::new();
    let mut unreadable = package.unreadable.clone();
    let mut files = 0;
    for file in package.with_gpu_code() {
        files += 1;
        // The scan kept what the file carries; payloads are read again, mapped, only where a
        // rule needs one.
        let map = match std::fs::File::open(&file.path).and_then(|f| Mapped::of(&f)) {
            Ok(map) => map,
            Err(e) => {
                unreadable.push(format!("{}: {e}", file.path.display()));
                continue;
            }
        };
        let uses = runtime_uses(file.dynamic.as_ref(), file.runtime.as_ref());
        let shown = file.path.display();
        let soname = file.dynamic.as_ref().and_then(|d| d.soname.as_deref());
        let provenance = Provenance::of(&file.path, soname, Path::new(STORE_DIR));
        for v in &judge_all(&file.gpu_code, map.bytes(), &uses, provenance, &targets) {
            let line = format!("{shown}: {}", v.reason);
            match v.verdict {
                FileVerdict::Fails => failures.push(line),
                FileVerdict::Unknown => unknown.push(line),
                FileVerdict::RunsByJit => jit.push(line),
                FileVerdict::RunsBySass | FileVerdict::NoGpuCode => {}
            }
            judged.push(json!({
                "file": &file.path,
                "target": v.target,
                "verdict": v.verdict,
                "rule": v.rule,
                "reason": &v.reason,
                "modules": v.judgement.modules,
                "not_judged": v.judgement.not_judged,
            }));
        }
    }
    let on: Vec<String> = targets.iter().map(Target::describe).collect();
    let facts = facts! {
        "targets" => &targets,
        "targets_from" => from,
        "closure_from" => &package.closure_from,
        "files" => package.files,
        "files_with_gpu_code" => files,
        "unreadable" => &unreadable,
        "judged" => judged,
    };
    let on = on.join(", ");
    if let Some(first) = failures.first() {
        let rest: Vec<String> = failures[1..].iter().chain(&unknown).cloned().collect();
        let outcome = Outcome::fail(
            format!(
                "{} file/target pair(s) cannot run; first: {first}",
                failures.len()
            ),
            facts,
        );
        return if rest.is_empty() {
            outcome
        } else {
            outcome.with_detail(rest.join("\n"))
        };
    }
    if !unknown.is_empty() {
        return Outcome::undecided(
            format!(
                "the rules cannot judge {} file/target pair(s) on {on} (not a pass); first: {}",
                unknown.len(),
                unknown[0]
            ),
            facts,
        );
    }
    if files == 0 {
        return Outcome::pass(
            format!(
                "the package's closure ({} files) carries no GPU code: nothing for the driver \
                 to load",
                package.files
            ),
            facts,
        );
    }
    if jit.is_empty() {
        Outcome::pass(
            format!("every file with GPU code ({files}) runs on {on} by SASS"),
            facts,
        )
    } else {
        Outcome::pass(
            format!(
                "every file with GPU code ({files}) runs on {on}; {} by JIT: their first launch \
                 compiles PTX, and {}",
                jit.len(),
                jit_cache()
            ),
            facts,
        )
        .with_detail(jit.join("\n"))
    }
}

/// A runtime's version as the package scan gives it: `12.9`, `12.x`, or unknown.
fn scanned_version(text: Option<&str>) -> Option<RuntimeVersion> {
    let text = text?;
    if let Some(major) = text.strip_suffix(".x") {
        return Some(RuntimeVersion {
            major: major.parse().ok()?,
            exact: None,
            error: None,
        });
    }
    let version = CudaVersion::parse(text).ok()?;
    Some(RuntimeVersion {
        major: version.major(),
        exact: Some(version),
        error: None,
    })
}

/// Runs `package::runtimes`.
pub fn runtimes(session: &Session) -> Outcome {
    let package = match session.package() {
        Ok(p) => p,
        Err(why) => return Outcome::fail(why, facts! {}),
    };
    // Archives are for linking only (the lint reports them); what runs is shared or linked in.
    let found: Vec<_> = package
        .runtimes()
        .filter(|(_, r)| r.form != RuntimeForm::Archive)
        .collect();
    if found.is_empty() {
        return Outcome::pass(
            format!(
                "the package's closure ({} files) carries no CUDA runtime, shared or static",
                package.files
            ),
            facts! { "closure_from" => &package.closure_from },
        );
    }
    let driver = session
        .driver()
        .ok()
        .and_then(|d| d.version().ok().map(CudaVersion))
        .or(session
            .options
            .lint
            .given_driver()
            .map(|d| CudaVersion(d.cuda)))
        .or_else(|| session.manifest.driver().and_then(|d| d.cuda_version));
    let Some(driver) = driver else {
        return Outcome::skipped(
            format!(
                "{} CUDA runtime(s) in the package, but no driver to judge them against (none \
                 loads, no --driver-cuda)",
                found.len()
            ),
            facts! { "runtimes" => found.iter().map(|(_, r)| r).collect::<Vec<_>>() },
        );
    };
    // Shared runtimes are loaded to ask their versions, as runtime::compatibility does.
    let mut loaded: Vec<(usize, Runtime)> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for (i, (file, runtime)) in found.iter().enumerate() {
        if runtime.form == RuntimeForm::Shared {
            match Runtime::load_all(std::slice::from_ref(&file.path)) {
                Ok(mut one) if one.len() == 1 => loaded.push((i, one.remove(0))),
                Ok(_) => {}
                Err(why) => failures.push(why.to_string()),
            }
        }
    }
    let candidates: Vec<Candidate> = found
        .iter()
        .enumerate()
        .map(
            |(i, (file, runtime))| match loaded.iter().find(|(j, _)| *j == i) {
                Some((_, r)) => Candidate::loaded(r),
                None => Candidate {
                    file: file.path.display().to_string(),
                    cudart: CudartFile {
                        path: file.path.clone(),
                        real_path: None,
                    },
                    form: match runtime.form {
                        RuntimeForm::StaticCopy => "static libcudart",
                        _ => "libcudart",
                    },
                    version: scanned_version(runtime.version.as_deref()),
                    loaded: None,
                },
            },
        )
        .collect();
    let outcome = judge_runtimes(&candidates, driver);
    if let Some(first) = failures.first() {
        let detail = failures[1..]
            .iter()
            .cloned()
            .chain(std::iter::once(outcome.message.clone()))
            .collect::<Vec<_>>()
            .join("\n");
        return Outcome::fail(
            format!("a CUDA runtime of the package cannot be loaded: {first}"),
            outcome.facts,
        )
        .with_detail(detail);
    }
    outcome
}

/// What the loader would give one object of the package that opens libcuda.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectDriver {
    /// The object's file.
    pub object: PathBuf,
    /// Why it opens libcuda (DT_NEEDED, a runtime, a static runtime inside).
    pub opens: String,
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
    pub against: String,
    /// `LD_LIBRARY_PATH` as this process has it (every object's search includes it).
    pub ld_library_path: Option<String>,
    /// Every object that opens libcuda, in the package's order.
    pub objects: Vec<ObjectDriver>,
}

/// The driver library name every object asks the loader for.
const LIBCUDA: &str = "libcuda.so.1";

/// Why an object of the package opens libcuda, or `None` when it does not.
fn opens_libcuda(file: &crate::facts::package_under_test::ScannedFile) -> Option<&'static str> {
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

/// The interpreter of this process: a library of the package is judged as loaded by it.
fn own_interpreter() -> Option<PathBuf> {
    let exe = std::fs::read("/proc/self/exe").ok()?;
    cuda_sandbox_elfkit::dynamic_info(&exe).ok()??.interpreter
}

/// Runs `package::driver`.
pub fn driver(session: &Session) -> Outcome {
    let package = match session.package() {
        Ok(p) => p,
        Err(why) => return Outcome::fail(why, facts! {}),
    };
    let objects: Vec<_> = package
        .scanned
        .iter()
        .filter_map(|f| opens_libcuda(f).map(|why| (f, why)))
        .collect();
    if objects.is_empty() {
        return Outcome::pass(
            "no object of the package opens libcuda.so.1 (no libcudart, no static runtime, \
             no DT_NEEDED on it)",
            facts! { "closure_from" => &package.closure_from },
        );
    }
    // What each object must get: the hook's choice, else what this runner loaded.
    let chosen = session.manifest.driver().filter(|d| !d.libcuda.is_empty());
    let loaded = session
        .driver()
        .ok()
        .map(|d| (d.file.clone(), d.version().ok().map(CudaVersion)));
    if chosen.is_none() && loaded.is_none() {
        return Outcome::skipped(
            format!(
                "{} object(s) of the package open libcuda.so.1, but there is no manifest and no \
                 libcuda.so.1 loads here to compare with",
                objects.len()
            ),
            facts! {},
        );
    }
    let ld_library_path = std::env::var("LD_LIBRARY_PATH").ok();
    let runner_interpreter = own_interpreter();
    let mut failures = Vec::new();
    let mut passes = Vec::new();
    let mut per_object = Vec::new();
    for (file, why) in &objects {
        let Some(info) = file.dynamic.as_ref() else {
            continue;
        };
        let executable = info.interpreter.is_some();
        let Some(interpreter) = info
            .interpreter
            .clone()
            .or_else(|| runner_interpreter.clone())
        else {
            failures.push(format!(
                "{}: no dynamic loader to model its search with",
                file.path.display()
            ));
            continue;
        };
        let loader = match Loader::ask(&interpreter) {
            Ok(l) => l,
            Err(e) => {
                failures.push(format!(
                    "{}: its loader {} cannot be asked for its search path: {e}",
                    file.path.display(),
                    interpreter.display()
                ));
                continue;
            }
        };
        // The object's own process (a library: loaded by its path), then its libcuda.so.1:
        // its DT_NEEDED, else what a dlopen from it gets.
        let env = Environment {
            ld_library_path: ld_library_path.clone(),
        };
        let mut process = Process::new(&loader, &RealFs, env);
        let start = if executable {
            Start::Kernel
        } else {
            Start::Library
        };
        let main = match process.start(&file.path, start) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{}: cannot be loaded: {e}", file.path.display()));
                continue;
            }
        };
        let resolution = process.dlopen(LIBCUDA, main);
        let shown = file.path.display();
        let searched = resolution
            .search
            .map(|s| process.searches()[s].describe())
            .unwrap_or_default();
        let found = match &resolution.outcome {
            Search::Found {
                path, real_path, ..
            } => {
                let got = LoadedFile {
                    path: path.clone(),
                    real_path: real_path.clone().unwrap_or_else(|| path.clone()),
                };
                // Its CUDA version, where the file's name gives the driver branch
                // (`libcuda.so.535.104.05`); the runner's own driver says nothing about it.
                let version = got
                    .real_path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_prefix("libcuda.so."))
                    .and_then(crate::cuda::version::cuda_version_of_kernel_driver);
                let stub = stub_at(&got.real_path);
                let right = stub.is_none()
                    && match (chosen, &loaded) {
                        (Some(driver), _) => is_chosen(&got, driver),
                        (None, Some((file, _))) => file.real_path == got.real_path,
                        (None, None) => false,
                    };
                if let Some(stub) = stub {
                    failures.push(format!(
                        "{shown} ({why}) would load {}, {stub}: every driver call fails; it \
                         searches {searched}; remove the directory holding it from its search \
                         path (it is for linking only)",
                        path.display()
                    ));
                } else if right {
                    passes.push(format!("{shown} gets {}", path.display()));
                } else {
                    let why_wrong = match (chosen, &loaded) {
                        (Some(driver), _) => library_mismatch(&got, version, driver),
                        (None, Some((file, _))) => format!(
                            "loaded {} but this runner loaded {}",
                            path.display(),
                            file.path.display()
                        ),
                        (None, None) => String::new(),
                    };
                    failures.push(format!(
                        "{shown} ({why}) would load {}: {why_wrong}; it searches {searched}",
                        path.display()
                    ));
                }
                ObjectSearch::Found {
                    gets: path.clone(),
                    right,
                }
            }
            Search::Error { path, reason } => {
                failures.push(format!(
                    "{shown} ({why}) would fail to load libcuda.so.1: {} is {reason}; it \
                     searches {searched}",
                    path.display()
                ));
                ObjectSearch::Error {
                    error: reason.clone(),
                }
            }
            Search::NotFound { .. } => {
                failures.push(format!(
                    "{shown} ({why}) finds no libcuda.so.1: it searches {searched}; add the \
                     driver link to its DT_RUNPATH (Nixpkgs: autoAddDriverRunpath)"
                ));
                ObjectSearch::NotFound { gets: None }
            }
        };
        per_object.push(ObjectDriver {
            object: file.path.clone(),
            opens: (*why).to_owned(),
            found,
        });
    }
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
    match failures.split_first() {
        None => Outcome::pass(
            format!(
                "{} object(s) opening libcuda.so.1 get {against}",
                passes.len()
            ),
            facts,
        )
        .with_detail(passes.join("\n")),
        Some((first, rest)) => {
            let outcome = Outcome::fail(
                format!("{} of {} object(s): {first}", failures.len(), objects.len()),
                facts,
            );
            if rest.is_empty() {
                outcome
            } else {
                outcome.with_detail(rest.join("\n"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Each search result has the report's shape and reads back as itself.

    use super::*;

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
