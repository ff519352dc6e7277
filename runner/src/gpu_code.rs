//! A package's GPU code in words: what a file's fat binaries carry, and, for a target GPU and
//! driver, whether it runs there (by SASS or by JIT) or which module fails and how to fix it.
//! The reading, the rules and the file policy are `cuda_sandbox_elfkit::fatbin`'s.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cuda_sandbox_elfkit::fatbin::rules::{newest_ptx_isa, Load};
use cuda_sandbox_elfkit::fatbin::verdict::{judge, Excuse, FileVerdict, Judgement, ModuleVerdict};
use cuda_sandbox_elfkit::fatbin::{Arch, Capability, Container, EntryKind, GpuCode, Origin};
use serde::Serialize;

use crate::cuda::version::CudaVersion;

/// The GPU and driver a package's GPU code is judged for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Target {
    /// The GPU's compute capability.
    pub device: Capability,
    /// The CUDA version of the driver that loads the code (`cuDriverGetVersion`).
    pub driver: CudaVersion,
}

impl Target {
    /// `sm_90 (driver CUDA 12.2)`.
    pub fn describe(&self) -> String {
        format!("sm_{} (driver CUDA {})", self.device.sm(), self.driver)
    }
}

/// One file's GPU code, and its judgement when a target was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileGpuCode {
    /// The file.
    pub file: PathBuf,
    /// Its modules and their entries.
    pub modules: Vec<Container>,
    /// The verdict for the target, with every module's answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judgement: Option<Judgement>,
    /// The same in one line.
    pub summary: String,
}

/// What a set of entries carries, e.g. `SASS sm_75 sm_80, PTX compute_80 (ISA 8.8)`.
pub fn carried<'a>(
    entries: impl IntoIterator<Item = &'a cuda_sandbox_elfkit::fatbin::Entry>,
) -> String {
    let mut sass: BTreeSet<Arch> = BTreeSet::new();
    let mut ptx: BTreeSet<(Arch, String)> = BTreeSet::new();
    let mut nvvm: BTreeSet<Arch> = BTreeSet::new();
    for e in entries {
        match e.kind {
            EntryKind::Sass => {
                sass.insert(e.arch);
            }
            EntryKind::Ptx => {
                ptx.insert((e.arch, e.version.to_string()));
            }
            _ => {
                nvvm.insert(e.arch);
            }
        }
    }
    let mut parts = Vec::new();
    if !sass.is_empty() {
        let names: Vec<String> = sass.iter().map(|a| a.sm_name()).collect();
        parts.push(format!("SASS {}", names.join(" ")));
    }
    if !ptx.is_empty() {
        let names: Vec<String> = ptx
            .iter()
            .map(|(a, isa)| format!("{} (ISA {isa})", a.compute_name()))
            .collect();
        parts.push(format!("PTX {}", names.join(" ")));
    }
    if !nvvm.is_empty() {
        let names: Vec<String> = nvvm.iter().map(|a| a.compute_name()).collect();
        parts.push(format!("NVVM IR {}", names.join(" ")));
    }
    if parts.is_empty() {
        "nothing".into()
    } else {
        parts.join(", ")
    }
}

/// Where a module is, for messages: `module 2 of 13 (.nv_fatbin at byte 0x1806b8)`.
pub fn module_place(modules: &[Container], index: usize) -> String {
    let c = &modules[index];
    let place = match &c.origin {
        Origin::Section(s) => format!("{s} at byte {:#x}", c.offset),
        Origin::Wrapper(s) => format!("{s} at byte {:#x}, by its wrapper", c.offset),
        Origin::Scan(s) => format!("a byte array in {s} at byte {:#x}", c.offset),
        Origin::File => format!("byte {:#x}", c.offset),
    };
    let member = c
        .member
        .as_deref()
        .map(|m| format!(" of member {m}"))
        .unwrap_or_default();
    format!(
        "module {} of {} ({place}{member})",
        index + 1,
        modules.len()
    )
}

/// Why one module cannot load on `target`, and what to change, in one line.
pub fn failure(modules: &[Container], module: &ModuleVerdict, target: &Target) -> String {
    let c = &modules[module.module];
    let cc = target.device;
    let place = module_place(modules, module.module);
    let carries = carried(&c.entries);
    match &module.load {
        Load::NoBinaryForGpu if module.excuse == Some(Excuse::OnlyForOtherGpus) => format!(
            "{place} carries {carries}: only arch- or family-specific images for other GPUs, \
             none for a {cc} GPU (CUDA_ERROR_NO_BINARY_FOR_GPU, 209)"
        ),
        Load::NoBinaryForGpu => {
            let sass = if cc.minor == 0 {
                format!("sm_{}", cc.sm())
            } else {
                format!("one of sm_{}0 to sm_{}", cc.major, cc.sm())
            };
            format!(
                "{place} carries {carries}: no kernel image for a {cc} GPU \
                 (CUDA_ERROR_NO_BINARY_FOR_GPU, 209); it needs SASS {sass}, or PTX for \
                 compute_{} or older; build for it (Nixpkgs: cudaCapabilities = [ \"{cc}\" ], \
                 and cudaForwardCompat = true for PTX of the newest capability)",
                cc.sm()
            )
        }
        Load::UnsupportedPtx { image, needs } => {
            let ptx = &c.entries[*image];
            format!(
                "{place} carries {carries}: no SASS for a {cc} GPU, and its PTX {} is ISA {}, \
                 which needs a CUDA {} driver; this driver (CUDA {}) JITs PTX up to ISA {} \
                 (CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222); build SASS for it (Nixpkgs: \
                 cudaCapabilities = [ \"{cc}\" ]), or load it with a newer driver (a newer host \
                 driver, or cuda_compat where this GPU supports it)",
                ptx.arch.compute_name(),
                ptx.version,
                CudaVersion(*needs),
                target.driver,
                newest_ptx_isa(target.driver.0)
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "none the table knows".into())
            )
        }
        Load::Unknown { why } => format!("{place} carries {carries}: cannot be judged: {why}"),
        _ => format!("{place} carries {carries}: loads"),
    }
}

/// Why a file cannot run on `target`, in one line: its first failing module and how many
/// more fail alike; `None` when no module fails the file.
pub fn cannot_run(modules: &[Container], judgement: &Judgement, target: &Target) -> Option<String> {
    let mut failing = judgement.failing();
    let first = failing.next()?;
    let more = match failing.count() {
        0 => String::new(),
        n => format!(" ({n} more module(s) fail alike)"),
    };
    Some(format!(
        "cannot run on {}: {}{more}",
        target.describe(),
        failure(modules, first, target)
    ))
}

/// One line for a file: what it carries, and on the target whether it runs, by SASS or JIT.
pub fn summary(
    modules: &[Container],
    judgement: Option<&Judgement>,
    target: Option<&Target>,
) -> String {
    let carries = format!(
        "{} module(s): {}",
        modules.len(),
        carried(modules.iter().flat_map(|m| m.entries.iter()))
    );
    let (Some(j), Some(t)) = (judgement, target) else {
        return carries;
    };
    let on = t.describe();
    let verdict = match j.verdict {
        FileVerdict::NoGpuCode => format!("nothing the driver loads on {on}"),
        FileVerdict::RunsBySass => format!("runs on {on} by SASS"),
        FileVerdict::RunsByJit => {
            let jit = j
                .modules
                .iter()
                .filter(|m| matches!(m.load, Load::Jit { .. }))
                .count();
            format!(
                "runs on {on} by JIT: {jit} module(s) have no SASS for it and are compiled from \
                 PTX at their first launch"
            )
        }
        FileVerdict::Fails => {
            let failing: Vec<&ModuleVerdict> = j.failing().collect();
            let codes: BTreeSet<&str> = failing
                .iter()
                .map(|m| match m.load {
                    Load::UnsupportedPtx { .. } => "222: PTX newer than the driver",
                    _ => "209: no kernel image for this GPU",
                })
                .collect();
            format!(
                "CANNOT run on {on}: {} of {} module(s) cannot load (CUDA error {})",
                failing.len(),
                j.modules.len(),
                codes.into_iter().collect::<Vec<_>>().join("; ")
            )
        }
        FileVerdict::Unknown => {
            let first = j
                .modules
                .iter()
                .find(|m| matches!(m.load, Load::Unknown { .. }))
                .map(|m| failure(modules, m, t))
                .unwrap_or_default();
            format!("cannot be judged for {on}: {first}")
        }
    };
    let other_gpus = j
        .reported()
        .filter(|m| m.excuse == Some(Excuse::OnlyForOtherGpus))
        .count();
    let by_program = j.reported().count() - other_gpus;
    let mut notes = Vec::new();
    if other_gpus > 0 {
        notes.push(format!(
            "{other_gpus} module(s) hold only arch- or family-specific images for other GPUs"
        ));
    }
    if by_program > 0 {
        notes.push(format!(
            "{by_program} module(s) the program loads itself cannot load here (kept per GPU, \
             chosen at run time)"
        ));
    }
    let reported = if notes.is_empty() {
        String::new()
    } else {
        format!(" (reported, not failed: {})", notes.join("; "))
    };
    format!("{carries}; {verdict}{reported}")
}

/// Reads and judges one file; `None` when it has no fat binary at all.
pub fn examine(path: &Path, code: GpuCode, target: Option<&Target>) -> Option<FileGpuCode> {
    if code.containers.is_empty() {
        return None;
    }
    let judgement = target.map(|t| judge(&code, t.device, t.driver.0));
    Some(FileGpuCode {
        file: path.to_path_buf(),
        summary: summary(&code.containers, judgement.as_ref(), target),
        modules: code.containers,
        judgement,
    })
}
