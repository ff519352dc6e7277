//! The `package::*` checks (only with `--package`): will the package under test run here?
//!
//! - `package::gpu_code`: every module of every file in the package's closure, judged for every
//!   GPU the driver reports and the loaded driver's CUDA version, with the file policy of
//!   `cuda_sandbox_elfkit::fatbin::verdict`. SASS for each GPU passes; JIT only passes with a
//!   note (the first launch compiles, and where the JIT cache is); a file that runs partly
//!   (some modules with kernels have no code for the GPU) passes with the modules and kernels
//!   named, unless `--strict-modules` asks otherwise for the package's own files (kernels
//!   `--expect-missing` lists excepted); a file that cannot run fails naming the file, the
//!   module, what it carries, what the GPU needs and the fix. Without a GPU it judges
//!   `--target`/`--driver-cuda` when given, else it is skipped: it never passes without one.
//! - `package::runtimes`: every CUDA runtime in the closure, shared (loaded, to ask its
//!   version) or linked statically into another ELF file (found in stripped files too, by
//!   what the runtime's own code and data contain), judged against the driver in use by the
//!   rules and ABI-difference report of `runtime::compatibility`: minor-version compatible
//!   passes with the report, a newer major fails naming 35, runtimes of different versions in
//!   one closure are flagged as version mixing.
//! - `package::driver`: in [`super::package_driver`].

use std::path::{Path, PathBuf};

use cuda_sandbox_elfkit::fatbin::rules::Driver;
use cuda_sandbox_elfkit::fatbin::verdict::FileVerdict;
use cuda_sandbox_elfkit::map::Mapped;
use cuda_sandbox_manifest::versions::{cuda_for_driver, kernel_module_version};
use serde_json::{json, Value};

use crate::check::Outcome;
use crate::checks::lint::{manifest_driver, target_driver};
use crate::checks::runtime::{judge as judge_runtimes, Candidate, CudartFile};
use crate::cuda::cudart::{Runtime, RuntimeVersion};
use crate::facts;
use crate::facts::gpu_code::{judge_all, runtime_uses, Target, TargetVerdict};
use crate::facts::gpu_words::missing_kernels;
use crate::facts::package_under_test::{ScannedFile, STORE_DIR};
use crate::facts::provenance::Provenance;
use crate::facts::runtime_scan::{FoundRuntime, RuntimeForm};
use crate::session::Session;

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
    if let (Ok(devices @ [_, ..]), Some(driver)) = (&devices, loaded) {
        let mut targets = Vec::new();
        for d in devices.iter() {
            let target = Target::new(d.compute_capability, driver, session.zluda().is_some());
            if !targets.contains(&target) {
                targets.push(target);
            }
        }
        return Ok((targets, "every GPU the driver reports".into()));
    }
    let lint = &session.options.lint;
    let Some(first) = lint.target.first() else {
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
                first.capability.sm()
            )
        })?;
    let targets = lint
        .target
        .iter()
        .map(|arch| Target::new(arch.capability, driver, false))
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
pub(crate) fn gpu_code(session: &Session) -> Result<Outcome, Outcome> {
    let package = session.package().map_err(Outcome::fail_without_facts)?;
    let (targets, from) = targets(session)
        .map_err(|why| Outcome::skipped(why, facts! { "closure" => &package.closure }))?;
    let options = &session.options;
    // With --strict-modules, the kernels of `v`'s missing modules that no --expect-missing
    // glob names, when `file` is the package's own (under a --package path).
    let unexpected = |file: &Path, v: &TargetVerdict| -> Vec<String> {
        let own = package.roots.iter().any(|root| file.starts_with(root));
        if !options.strict_modules || v.verdict != FileVerdict::RunsPartly || !own {
            return Vec::new();
        }
        missing_kernels(&v.judgement)
            .filter(|k| !options.expect_missing.iter().any(|g| g.matches(k)))
            .cloned()
            .collect()
    };
    // Each file carrying GPU code on each target; with --strict-modules, the package's own
    // files that run partly fail but for the kernels it expects.
    let mut failures: Vec<String> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut jit: Vec<String> = Vec::new();
    let mut partly: Vec<String> = Vec::new();
    let mut judged: Vec<Value> = Vec::new();
    let mut unreadable = package.unreadable.clone();
    let mut files = 0;
    // A file without GPU code is judged by its runtime alone, and shown only when that fails
    // or cannot be judged, as `lint` does.
    for file in package.to_judge() {
        let has_code = !file.gpu_code.containers.is_empty();
        files += usize::from(has_code);
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
            if !(has_code || v.fails() || v.unknown()) {
                continue;
            }
            let line = format!("{shown}: {}", v.reason);
            let unexpected = unexpected(&file.path, v);
            match v.verdict {
                FileVerdict::Fails => failures.push(line),
                FileVerdict::Unknown => unknown.push(line),
                FileVerdict::RunsPartly if !unexpected.is_empty() => failures.push(format!(
                    "{shown}: --strict-modules: {} kernel(s) of the package's own have no code \
                     for {} and no --expect-missing glob names them: {}; build them for it, or \
                     list them in expectMissing if that is on purpose ({})",
                    unexpected.len(),
                    v.target.describe(),
                    unexpected
                        .iter()
                        .take(5)
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    v.reason
                )),
                FileVerdict::RunsPartly => partly.push(line),
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
    let on = on.join(", ");
    let facts = facts! {
        "targets" => &targets,
        "targets_from" => from,
        "closure_from" => &package.closure_from,
        "files" => package.files,
        "files_with_gpu_code" => files,
        "unreadable" => &unreadable,
        "judged" => judged,
    };
    if let Some(first) = failures.first() {
        return Ok(Outcome::fail(
            format!(
                "{} file/target pair(s) cannot run; first: {first}",
                failures.len()
            ),
            facts,
        )
        .with_detail_lines(failures[1..].iter().chain(&unknown)));
    }
    if !unknown.is_empty() {
        return Ok(Outcome::undecided(
            format!(
                "the rules cannot judge {} file/target pair(s) on {on} (not a pass); first: {}",
                unknown.len(),
                unknown[0]
            ),
            facts,
        ));
    }
    if files == 0 {
        return Ok(Outcome::pass(
            format!(
                "the package's closure ({} files) carries no GPU code: nothing for the driver \
                 to load",
                package.files
            ),
            facts,
        ));
    }
    let mut notes = Vec::new();
    if !partly.is_empty() {
        notes.push(format!(
            "{} file/target pair(s) run partly: some of their modules have no code for the \
             GPU, and launching those kernels fails (209/222); libraries that choose kernels by \
             the GPU at run time are built so",
            partly.len()
        ));
    }
    if !jit.is_empty() {
        notes.push(format!(
            "{} by JIT: their first launch compiles PTX, and {}",
            jit.len(),
            jit_cache()
        ));
    }
    // Without notes, nothing ran partly or by JIT: no detail.
    let how = match notes.is_empty() {
        true => " by SASS".to_owned(),
        false => format!("; {}", notes.join("; ")),
    };
    Ok(Outcome::pass(
        format!("every file with GPU code ({files}) runs on {on}{how}"),
        facts,
    )
    .with_detail_lines(partly.iter().chain(&jit)))
}

/// The runtimes `found` in the package as candidates to judge: a loaded one (`loaded`, by its
/// index in `found`) as it answers, the others as the scan read them.
fn candidates<'r>(
    found: &[(&ScannedFile, &FoundRuntime)],
    loaded: &'r [(usize, Runtime)],
) -> Vec<Candidate<'r>> {
    found
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
                    version: runtime.version.map(|toolkit| RuntimeVersion {
                        toolkit,
                        error: None,
                    }),
                    loaded: None,
                },
            },
        )
        .collect()
}

/// Runs `package::runtimes`.
pub(crate) fn runtimes(session: &Session) -> Result<Outcome, Outcome> {
    let package = session.package().map_err(Outcome::fail_without_facts)?;
    // Archives are for linking only (the lint reports them); what runs is shared or linked in.
    let found: Vec<_> = package
        .runtimes()
        .filter(|(_, r)| r.form != RuntimeForm::Archive)
        .collect();
    if found.is_empty() {
        return Ok(Outcome::pass(
            format!(
                "the package's closure ({} files) carries no CUDA runtime, shared or static",
                package.files
            ),
            facts! { "closure_from" => &package.closure_from },
        ));
    }
    // The CUDA version of the driver to judge them against: the one loaded, else
    // `--driver-cuda`/`--driver`, else the manifest's.
    let loaded_cuda = session.driver().ok().and_then(|d| d.version().ok());
    let given_cuda = session.options.lint.given_driver().map(|d| d.cuda);
    let manifest_cuda = || session.manifest.driver().and_then(|d| d.cuda_version);
    let Some(driver) = loaded_cuda.or(given_cuda).or_else(manifest_cuda) else {
        return Ok(Outcome::skipped(
            format!(
                "{} CUDA runtime(s) in the package, but no driver to judge them against (none \
                 loads, no --driver-cuda)",
                found.len()
            ),
            facts! { "runtimes" => found.iter().map(|(_, r)| r).collect::<Vec<_>>() },
        ));
    };
    // Shared runtimes are loaded to ask their versions, as runtime::compatibility does.
    let mut loaded: Vec<(usize, Runtime)> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for (i, (file, runtime)) in found.iter().enumerate() {
        if runtime.form == RuntimeForm::Shared {
            match Runtime::load_all(std::slice::from_ref(&file.path)) {
                // One runtime for the one path.
                Ok(one) => loaded.extend(one.into_iter().map(|r| (i, r))),
                Err(why) => failures.push(why.to_string()),
            }
        }
    }
    let candidates = candidates(&found, &loaded);
    let outcome = judge_runtimes(&candidates, driver);
    if let Some(first) = failures.first() {
        return Ok(Outcome::fail(
            format!("a CUDA runtime of the package cannot be loaded: {first}"),
            outcome.facts,
        )
        .with_detail_lines(failures[1..].iter().chain([&outcome.message])));
    }
    Ok(outcome)
}
