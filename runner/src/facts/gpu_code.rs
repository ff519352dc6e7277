//! One judgment for a file, shared by `lint` and the `package::*` checks, so that the same
//! file, target and driver get the same verdict and the same words on both routes: what its
//! fat binaries carry, and, for each target GPU and driver, whether it runs there (by SASS or
//! by JIT), runs partly (some modules have no code that loads there: their kernels named, and
//! what launching them gives), cannot run (and why, with the fix), or cannot be judged.
//!
//! The verdict combines, in this order (certain failures first, then what the rules cannot
//! judge, then the runs):
//! 1. the driver against the GPU ([`cuda_sandbox_cuda_facts::gpus`]): a kernel module that
//!    predates the GPU's architecture, or whose branch dropped it, drives nothing;
//! 2. the driver against the file's CUDA runtime, as `package::runtimes` judges it (a shared
//!    `libcudart.so.N` in DT_NEEDED, a static copy, the file itself being one): a newer major
//!    fails with 35, a newer minor needs the major's floor ([`toolkit_on_driver`]);
//! 3. the modules, by elfkit's rules and file policy ([`judge_given`]);
//!
//! Each verdict names its [`Rule`]. The reading, the rules and the module policy are
//! `cuda_sandbox_elfkit::fatbin`'s; this module adds the runtime and the words.

use std::path::{Path, PathBuf};

use cuda_sandbox_cuda_facts::gpus::{architecture, Drives};
use cuda_sandbox_cuda_facts::releases::{needed_driver, newest_release};
use cuda_sandbox_cuda_facts::Capability;
use cuda_sandbox_elfkit::fatbin::rules::{
    newest_ptx_isa, toolkit_on_driver, Driver, Load, Toolkit, ToolkitFit,
};
use cuda_sandbox_elfkit::fatbin::verdict::{
    judge_given, newer_toolkit, FileVerdict, Holds, Judgement, ModuleReads, ModuleVerdict,
    NewerToolkit,
};
use cuda_sandbox_elfkit::fatbin::{Container, GpuCode};
use cuda_sandbox_elfkit::DynamicInfo;
use cuda_sandbox_manifest::versions::branch_for_cuda;
use serde::Serialize;

use crate::cuda::version::CudaVersion;
use crate::facts::gpu_words::{
    carried, carried_by_member, jit_modules, module_carries, module_place, notes, partly,
    shown_names,
};
use crate::facts::provenance::Provenance;
use crate::facts::runtime_scan::{FoundRuntime, RuntimeForm};
use crate::facts::zluda_code;

/// The GPU and driver a package's GPU code is judged for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Target {
    /// The GPU's compute capability.
    pub(crate) device: Capability,
    /// The driver that loads the code: libcuda's CUDA version and the kernel module's.
    pub(crate) driver: Driver,
    /// Whether the driver is ZLUDA on an AMD GPU (`device` being the capability it reports):
    /// the code is judged by [`crate::facts::zluda_code`], as ZLUDA loads it.
    pub(crate) on_zluda: bool,
}

impl Target {
    /// GPU `device` under `driver` (ZLUDA's, `on_zluda`).
    pub(crate) fn new(device: Capability, driver: Driver, on_zluda: bool) -> Target {
        Target {
            device,
            driver,
            on_zluda,
        }
    }

    /// `sm_90 (driver CUDA 12.2)`, or under compat `sm_90 (driver CUDA 12.8 on a CUDA 12.2
    /// kernel module)`.
    pub(crate) fn describe(&self) -> String {
        let (d, sm) = (&self.driver, self.device.sm());
        if self.on_zluda {
            format!("ZLUDA on AMD (reporting sm_{sm})")
        } else if d.kernel == d.cuda {
            format!("sm_{sm} (driver CUDA {})", d.cuda)
        } else {
            format!(
                "sm_{sm} (driver CUDA {} on a CUDA {} kernel module)",
                d.cuda, d.kernel
            )
        }
    }
}

/// `R570` for 12.8, or the release when no branch is known.
fn branch_of(cuda: CudaVersion) -> String {
    branch_for_cuda(cuda)
        .map(|b| format!("R{b}"))
        .unwrap_or_else(|| format!("CUDA {cuda}"))
}

/// A CUDA runtime a file needs or holds, as the runtime rule judges it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct RuntimeUse {
    /// How, in words: `a static CUDA runtime 13.4`, `libcudart.so.13 (DT_NEEDED)`.
    pub what: String,
    /// The toolkit it comes from.
    pub toolkit: Toolkit,
}

/// The runtimes `file` needs (a `libcudart.so.N` in DT_NEEDED) or holds (a static copy, or
/// the file is one), with a version to judge by; archives are for linking only.
pub(crate) fn runtime_uses(
    dynamic: Option<&DynamicInfo>,
    runtime: Option<&FoundRuntime>,
) -> Vec<RuntimeUse> {
    let mut uses = Vec::new();
    if let Some(r) = runtime.filter(|r| r.form != RuntimeForm::Archive) {
        if let Some(toolkit) = r.version {
            let what = match r.form {
                RuntimeForm::StaticCopy => format!("a static CUDA runtime {toolkit}"),
                _ => format!("the CUDA runtime {toolkit} (libcudart)"),
            };
            uses.push(RuntimeUse { what, toolkit });
        }
    }
    for needed in dynamic.map(|d| d.needed.as_slice()).unwrap_or_default() {
        let Some(rest) = needed.strip_prefix("libcudart.so.") else {
            continue;
        };
        if let Some(major) = rest.split('.').next().and_then(|m| m.parse().ok()) {
            uses.push(RuntimeUse {
                what: format!("{needed} (DT_NEEDED)"),
                toolkit: Toolkit::Major(major),
            });
        }
    }
    uses
}

/// Which rule decided a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Rule {
    /// Every judged module loads from SASS.
    Sass,
    /// Some module is JIT-compiled from PTX.
    Jit,
    /// Some modules with kernels have no code that loads on the GPU; others load.
    SomeModulesDoNotLoad,
    /// No module the driver must load (NVVM IR only, modules with nothing to launch or read).
    NothingToLoad,
    /// A relocatable object or archive: input for a link, not loaded as it is.
    LinkInput,
    /// The kernel module predates the GPU's architecture.
    DriverPredatesGpu,
    /// The kernel module's branch no longer drives the GPU's architecture.
    DriverDroppedGpu,
    /// Under this driver the GPU reports another capability (Thor).
    GpuRenamed,
    /// A GPU the architecture table does not know.
    GpuUnknown,
    /// A driver newer than the newest CUDA release the tables know.
    DriverUnknown,
    /// A CUDA runtime of a newer major than the driver's (35).
    RuntimeNewerMajor,
    /// A runtime of a newer minor on a driver below the major's floor.
    RuntimeBelowFloor,
    /// A runtime of a newer minor, and the driver's exact version is needed to say.
    RuntimeFloorUnknown,
    /// No kernel image for the GPU (209).
    NoKernelImage,
    /// PTX newer than the driver's JIT (222).
    PtxTooNew,
    /// An image compressed in a way the driver cannot unpack.
    CompressionTooNew,
    /// The file's own cubins were built by a toolkit of a newer major than the driver's.
    CubinTooNew,
    /// A module the rules cannot judge.
    ModuleUnknown,
    /// A module of SASS only, on ZLUDA, which loads no SASS ([`crate::facts::zluda_code`]).
    SassOnlyOnZluda,
    /// A module without code for the GPU holds a managed variable (loaded when the program
    /// starts), or what it holds could not be read.
    MissingModuleUnknown,
}

/// One file judged for one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetVerdict {
    /// The GPU and driver.
    pub(crate) target: Target,
    /// The file's verdict.
    pub(crate) verdict: FileVerdict,
    /// The rule that decided it.
    pub(crate) rule: Rule,
    /// The verdict in one line, with the cause and the fix when it cannot run.
    pub reason: String,
    /// Every judged module's answer, and the modules listed and not judged.
    pub(crate) judgement: Judgement,
}

impl TargetVerdict {
    /// Whether the file cannot run on the target.
    pub(crate) fn fails(&self) -> bool {
        self.verdict == FileVerdict::Fails
    }

    /// Whether the rules cannot judge it.
    pub(crate) fn unknown(&self) -> bool {
        self.verdict == FileVerdict::Unknown
    }
}

/// One file's GPU code, and its verdict for each target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileGpuCode {
    /// The file.
    pub file: PathBuf,
    /// Its modules and their entries.
    pub(crate) modules: Vec<Container>,
    /// The verdict for each target, in the order given.
    pub verdicts: Vec<TargetVerdict>,
    /// What it carries and each verdict, in one line.
    pub summary: String,
}

/// Why one module cannot load on `target`, and what to change, in one line.
pub(crate) fn failure(
    modules: &[Container],
    module: &ModuleVerdict,
    target: &Target,
    provenance: Provenance,
) -> String {
    let c = &modules[module.module];
    let cc = target.device;
    let what = module_carries(modules, module.module);
    match &module.load {
        Load::NoBinaryForGpu => {
            let sass = if cc.minor == 0 {
                format!("sm_{}", cc.sm())
            } else {
                format!("one of sm_{}0 to sm_{}", cc.major, cc.sm())
            };
            format!(
                "{what}: no kernel image for a {cc} GPU \
                 (CUDA_ERROR_NO_BINARY_FOR_GPU, 209); it needs SASS {sass}, or PTX for \
                 compute_{} or older; {}",
                cc.sm(),
                provenance.build_for(cc)
            )
        }
        Load::UnsupportedPtx { image, needs } => {
            let ptx = &c.entries[*image];
            format!(
                "{what}: no SASS for a {cc} GPU, and its PTX {} is ISA {}, \
                 which needs a driver of {}; this driver (CUDA {}) JITs PTX up to ISA {} \
                 (CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222); {}, or load it with a newer driver \
                 (a newer host driver, or cuda_compat where this GPU supports it)",
                ptx.arch.compute_name(),
                ptx.version,
                needed_driver(*needs),
                target.driver.cuda,
                newest_ptx_isa(target.driver.cuda)
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "none the table knows".into()),
                provenance.sass_instead(cc)
            )
        }
        Load::CompressionTooNew { image, needs } => format!(
            "{what}: the image it would load ({}) is Zstandard-compressed, \
             which libcuda unpacks from CUDA {needs} ({}, 550.54.14) on; this driver is CUDA {}; \
             rebuild with `nvcc --compress-mode=speed` (LZ4) or `none`, or use a newer driver",
            c.entries[*image].arch_name(),
            branch_of(*needs),
            target.driver.cuda
        ),
        Load::Unknown { why } => format!("{what}: cannot be judged: {why}"),
        _ => format!("{what}: loads"),
    }
}

/// The runtime rule's answer for a file, when it decides: (rule, verdict, words).
fn runtime_verdict(uses: &[RuntimeUse], target: &Target) -> Option<(Rule, FileVerdict, String)> {
    let d = &target.driver;
    let cuda = d.cuda;
    let mut unknown = None;
    for u in uses {
        let what = &u.what;
        let (rule, why) = match toolkit_on_driver(u.toolkit, d) {
            ToolkitFit::NewerMajor => {
                let major = u.toolkit.major();
                let why = format!(
                    "{what} is a newer major than the driver's CUDA {cuda}: every runtime call \
                     fails with cudaErrorInsufficientDriver (35); install a driver providing \
                     CUDA >= {major}.0 on the host, or use cuda_compat >= {major}.0 on a \
                     data-centre GPU or Jetson, or build against CUDA {}.x",
                    cuda.major()
                );
                (Rule::RuntimeNewerMajor, why)
            }
            ToolkitFit::BelowFloor { floor } => {
                let why = format!(
                    "{what} is newer than the driver's CUDA {cuda}, and minor-version \
                     compatibility needs a driver >= {} for CUDA {}.x (this one: {}); update \
                     the driver",
                    floor.driver,
                    floor.major,
                    d.version.map(|v| v.to_string()).unwrap_or_default()
                );
                (Rule::RuntimeBelowFloor, why)
            }
            ToolkitFit::FloorUnknown { floor } => {
                let why = format!(
                    "{what} is newer than the driver's CUDA {cuda}: minor-version compatibility \
                     needs a driver >= {} for CUDA {}.x, and only the driver's CUDA version is \
                     known",
                    floor.driver, floor.major
                );
                (Rule::RuntimeFloorUnknown, why)
            }
            ToolkitFit::UnknownMajor => {
                let why = format!("{what} is of a major the rules have no minimum driver for");
                (Rule::RuntimeFloorUnknown, why)
            }
            ToolkitFit::Served | ToolkitFit::MinorVersionCompatible => continue,
        };
        // A runtime the driver cannot serve decides at once; the first one of unknown fit, only
        // when none fails.
        if rule != Rule::RuntimeFloorUnknown {
            return Some((rule, FileVerdict::Fails, why));
        }
        unknown.get_or_insert((rule, FileVerdict::Unknown, why));
    }
    unknown
}

/// The driver-against-GPU rule's answer, when the kernel module does not drive the GPU.
fn gpu_rule(gpu: Drives, target: &Target) -> Option<(Rule, String)> {
    let cc = target.device;
    let name = architecture(cc)
        .map(|a| format!(" ({})", a.name))
        .unwrap_or_default();
    let kernel = target.driver.kernel;
    Some(match gpu {
        Drives::Yes => return None,
        Drives::TooOld { first } => (
            Rule::DriverPredatesGpu,
            format!(
                "the kernel module (CUDA {kernel}, {}) predates compute capability {cc}{name}: \
                 the first driver for it is CUDA {first} ({}); install a newer host driver \
                 (cuda_compat cannot help: the kernel module decides which GPUs are driven)",
                branch_of(kernel),
                branch_of(first)
            ),
        ),
        Drives::Dropped { last } => (
            Rule::DriverDroppedGpu,
            format!(
                "compute capability {cc}{name} is driven up to CUDA {last} ({branch}); this \
                 kernel module (CUDA {kernel}) is of a later branch, which no longer drives it; \
                 use a {branch} driver",
                branch = branch_of(last)
            ),
        ),
        Drives::Renamed { to, .. } => (
            Rule::GpuRenamed,
            format!(
                "under a CUDA {kernel} driver this GPU reports compute capability {to}, not \
                 {cc} (NVIDIA renamed Thor in CUDA 13): judge it as {to}"
            ),
        ),
        Drives::Unknown => (
            Rule::GpuUnknown,
            format!("compute capability {cc} is not one the rules' architecture table knows"),
        ),
    })
}

/// The verdict, its rule and its reason for a file of GPU code `code` whose modules were
/// judged `j` for `target`: the driver against the GPU, against the file's runtimes
/// (`runtimes`), then its modules (the module doc).
fn decide(
    code: &GpuCode,
    j: &Judgement,
    runtimes: &[RuntimeUse],
    provenance: Provenance,
    target: &Target,
) -> (FileVerdict, Rule, String) {
    let on = target.describe();
    let modules = &code.containers;
    if target.on_zluda {
        let rule = match j.verdict {
            FileVerdict::Fails => Rule::SassOnlyOnZluda,
            FileVerdict::NoGpuCode => Rule::NothingToLoad,
            FileVerdict::RunsByJit => Rule::Jit,
            _ => return by_modules(j, modules, target, provenance),
        };
        return (j.verdict, rule, zluda_code::reason(code, j, &on));
    }
    if !modules.is_empty() && j.modules.is_empty() && j.not_judged.link_input == modules.len() {
        let reason = format!(
            "for the link, not loaded as it is: an object or archive carries {} for the program \
             it is linked into, which is judged itself",
            carried(code.entries())
        );
        return (FileVerdict::NoGpuCode, Rule::LinkInput, reason);
    }
    let newest = newest_release();
    let d = &target.driver;
    if j.verdict != FileVerdict::NoGpuCode && d.cuda.max(d.kernel) > newest {
        let reason = format!(
            "cannot be judged for {on}: the driver is newer than the newest CUDA release the \
             rules know ({}): which GPUs it drives, the ISA it JITs and the runtimes it \
             serves are not known here",
            newest
        );
        return (FileVerdict::Unknown, Rule::DriverUnknown, reason);
    }
    if j.verdict != FileVerdict::NoGpuCode {
        if let Some((rule, why)) = gpu_rule(j.gpu, target) {
            return (j.verdict, rule, because(j.verdict, &on, &why));
        }
    }
    if let Some((rule, v, why)) = runtime_verdict(runtimes, target) {
        if v == FileVerdict::Fails || j.verdict != FileVerdict::Fails {
            return (v, rule, because(v, &on, &why));
        }
    }
    if let Some(t) = &j.newer_toolkit {
        // Its cubin was built by a newer CUDA major than the driver's.
        let (built, major) = (t.toolkit, t.toolkit.major());
        let reason = format!(
            "cannot run on {on}: it was built by CUDA {built} (its {} cubin in {} records ptxas \
             {built}), a newer major than this driver's CUDA {}: CUDA's compatibility stops at \
             the major (a CUDA {major}.x build needs a driver of CUDA {major}.0 or newer); use a \
             newer driver, or a build of it for CUDA {}.x",
            modules[t.module].entries[t.image].arch_name(),
            module_place(modules, t.module),
            d.cuda,
            d.cuda.major()
        );
        return (FileVerdict::Fails, Rule::CubinTooNew, reason);
    }
    by_modules(j, modules, target, provenance)
}

/// The verdict of a file that no earlier rule decided, from its modules' judgement `j`: the
/// rule it rests on and its reason for `target` (naming the first failing module of
/// `modules`, and who built it by `provenance`).
fn by_modules(
    j: &Judgement,
    modules: &[Container],
    target: &Target,
    provenance: Provenance,
) -> (FileVerdict, Rule, String) {
    let on = target.describe();
    let (rule, reason) = match j.verdict {
        FileVerdict::NoGpuCode => (
            Rule::NothingToLoad,
            format!("nothing the driver loads on {on}{}", notes(j)),
        ),
        FileVerdict::RunsBySass => (Rule::Sass, format!("runs on {on} by SASS{}", notes(j))),
        FileVerdict::RunsPartly => (
            Rule::SomeModulesDoNotLoad,
            format!("runs on {on}, partly: {}{}", partly(j, modules), notes(j)),
        ),
        FileVerdict::RunsByJit => (
            Rule::Jit,
            format!(
                "runs on {on} by JIT: {} module(s) have no SASS for it and are compiled from \
                 PTX at their first launch{}",
                jit_modules(j),
                notes(j)
            ),
        ),
        FileVerdict::Fails => {
            let mut failing = j.failing();
            let first = failing.next().expect("a failing file has a failing module");
            let more = match failing.count() {
                0 => String::new(),
                n => format!(" ({n} more module(s) fail alike)"),
            };
            let rule = match first.load {
                Load::UnsupportedPtx { .. } => Rule::PtxTooNew,
                Load::CompressionTooNew { .. } => Rule::CompressionTooNew,
                _ => Rule::NoKernelImage,
            };
            (
                rule,
                format!(
                    "cannot run on {on}: {}{more}",
                    failure(modules, first, target, provenance)
                ),
            )
        }
        FileVerdict::Unknown => {
            if let Some(m) = j
                .modules
                .iter()
                .find(|m| matches!(m.load, Load::Unknown { .. }))
            {
                let why = because(j.verdict, &on, &failure(modules, m, target, provenance));
                return (j.verdict, Rule::ModuleUnknown, why);
            }
            let undecided = j
                .missing()
                .find(|m| m.holds.as_ref().is_some_and(Holds::undecided))
                .expect("an unknown file has an unknown or undecided module");
            let what = module_carries(modules, undecided.module);
            let why = match &undecided.holds {
                Some(Holds::Read(symbols)) => format!(
                    "{what}, no code for a {} GPU, and holds the managed \
                     variable(s) {}: a module with managed variables is loaded when the \
                     program starts, even under lazy loading, and whether that start then \
                     fails is not settled without a GPU (tests-gpu/device-check measures it)",
                    target.device,
                    shown_names(&symbols.managed)
                ),
                _ => format!(
                    "{what}, no code for a {} GPU, and none of its images \
                     could be read to say whether it holds a kernel or a managed variable",
                    target.device
                ),
            };
            (Rule::MissingModuleUnknown, because(j.verdict, &on, &why))
        }
    };
    (j.verdict, rule, reason)
}

/// `why` a file of `verdict` cannot run on the target `on` (a failure), or cannot be judged
/// there.
fn because(verdict: FileVerdict, on: &str, why: &str) -> String {
    match verdict {
        FileVerdict::Fails => format!("cannot run on {on}: {why}"),
        _ => format!("cannot be judged for {on}: {why}"),
    }
}

/// Judges one file (its GPU code `code`, read from `data`) for every target, in order.
pub(crate) fn judge_all(
    code: &GpuCode,
    data: &[u8],
    runtimes: &[RuntimeUse],
    provenance: Provenance,
    targets: &[Target],
) -> Vec<TargetVerdict> {
    // What a module holds depends on neither GPU nor driver: each is read once for all targets.
    // Rule 5 depends on the driver alone, and unpacks a cubin per module under a 12.x driver
    // (cuBLASLt 12.9: 0.1 s of CPU): once per driver, not per target.
    let reads = ModuleReads::default();
    let mut toolkits: Vec<(Driver, Option<NewerToolkit>)> = Vec::new();
    targets
        .iter()
        .map(|t| {
            let toolkit = match toolkits.iter().find(|(d, _)| *d == t.driver) {
                Some(&(_, known)) => known,
                None => {
                    let found = newer_toolkit(code, data, &t.driver);
                    toolkits.push((t.driver, found));
                    found
                }
            };
            // Elfkit's rule 6 (the file's cubins against the driver, `toolkit`) is answered for
            // this driver: it does not depend on the GPU.
            let judgement = if t.on_zluda {
                zluda_code::judge(code, data, &reads)
            } else {
                judge_given(code, data, &reads, t.device, &t.driver, toolkit)
            };
            let (verdict, rule, reason) = decide(code, &judgement, runtimes, provenance, t);
            TargetVerdict {
                target: *t,
                verdict,
                rule,
                reason,
                judgement,
            }
        })
        .collect()
}

/// Reads and judges one file for every target; `None` when it has no fat binary at all,
/// unless it carries a CUDA runtime the driver of some target cannot serve (or the rules
/// cannot say): such a file is judged by the runtime alone, as `package::runtimes` judges it.
pub(crate) fn examine(
    path: &Path,
    data: &[u8],
    code: GpuCode,
    runtimes: &[RuntimeUse],
    provenance: Provenance,
    targets: &[Target],
) -> Option<FileGpuCode> {
    let verdicts = judge_all(&code, data, runtimes, provenance, targets);
    let mut summary = if code.containers.is_empty() {
        if !verdicts.iter().any(|v| v.fails() || v.unknown()) {
            return None;
        }
        let runtimes: Vec<&str> = runtimes.iter().map(|u| u.what.as_str()).collect();
        format!("no GPU code; {}", runtimes.join(", "))
    } else {
        let carries =
            carried_by_member(&code.containers).unwrap_or_else(|| carried(code.entries()));
        format!("{} module(s): {carries}", code.containers.len())
    };
    summary.extend(verdicts.iter().flat_map(|v| ["; ", v.reason.as_str()]));
    Some(FileGpuCode {
        file: path.to_path_buf(),
        modules: code.containers,
        verdicts,
        summary,
    })
}
