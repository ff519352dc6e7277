//! The ZLUDA rule: what of a file's GPU code ZLUDA (the CUDA driver API on AMD's HIP) can
//! run. ZLUDA compiles PTX for the AMD GPU and never loads SASS (vosen/ZLUDA v6,
//! `get_best_ptx_and_compile` in `zluda/src/impl/module.rs`: of a fat binary it keeps the PTX
//! images, text or compressed, and skips every other kind; v4, which Nixpkgs builds, takes PTX
//! text alone through `cuModuleLoadData`). So, for a ZLUDA target:
//!
//! - a module with PTX runs by JIT: ZLUDA refuses no PTX ISA version and no `.target` (its
//!   `ptx_parser` reads `.version` and `.target sm_XY` and checks neither), so no ISA table
//!   bounds it; whether it handles every instruction of the PTX is known only by loading it;
//! - a module with SASS alone cannot load (v6's release build then compiles an empty module, and
//!   the program's kernel is not found in it): its kernels fail, as a module without code for
//!   the GPU does on NVIDIA's driver, so the file runs partly when other modules carry PTX and
//!   cannot run when none does;
//! - the capability judged is ZLUDA's reported one (8.8 by default in v4 and v6, 8.5 from
//!   v7-preview.8; `ZLUDA_CC`/`ZLUDA_SM` set it from v6): it decides nothing here, as ZLUDA
//!   compiles whichever PTX it is given, but it is what the program sees.
//!
//! The judgement is made in elfkit's terms ([`Judgement`], [`Load`]) so that it reads like any
//! other target's.

use crate::facts::gpu_words::module_carries;
use cuda_sandbox_cuda_facts::gpus::Drives;
use cuda_sandbox_cuda_facts::{Capability, CudaVersion};
use cuda_sandbox_elfkit::fatbin::rules::Load;
use cuda_sandbox_elfkit::fatbin::verdict::{judge_loads, Judgement, ModuleReads};
use cuda_sandbox_elfkit::fatbin::{Entry, EntryKind, GpuCode};

/// The compute capability ZLUDA reports by default: 8.8 in v4 (as Nixpkgs builds it) and v6,
/// its newest release (`COMPUTE_CAPABILITY_MINOR = 8`); from v7-preview.8 it is 8.5.
pub(crate) const REPORTED_CAPABILITY: Capability = Capability { major: 8, minor: 8 };

/// The CUDA version ZLUDA v4's `cuDriverGetVersion` reports (`CUDA_VERSION` of its
/// `cuda_types`, 12040; v6 reports 13000). ZLUDA's rule does not depend on it.
pub(crate) const REPORTED_CUDA: CudaVersion = CudaVersion(12040);

/// Each module of `code` (read from the file `data`) as ZLUDA loads it, and the file's
/// verdict by the same module model as for NVIDIA's driver
/// ([`cuda_sandbox_elfkit::fatbin::verdict::judge_loads`]): a module of SASS alone fails its
/// own kernels, so a file runs partly when others carry PTX, and cannot run when none does.
/// Modules are read through `reads`.
pub(crate) fn judge(code: &GpuCode, data: &[u8], reads: &ModuleReads) -> Judgement {
    judge_loads(code, data, reads, Drives::Yes, None, load)
}

/// What ZLUDA does with a module of `entries`: it compiles a PTX image (v6 tries the last
/// first), and loads nothing else.
fn load(entries: &[Entry]) -> Load {
    let image = |kind: EntryKind| entries.iter().rposition(|e| e.kind == kind);
    match (image(EntryKind::Ptx), image(EntryKind::Sass)) {
        (Some(image), _) => Load::Jit { image },
        (None, Some(_)) => Load::NoBinaryForGpu,
        (None, None) => Load::NotForTheDriver,
    }
}

/// The verdict of [`judge`] in one line, on `on` (the target described).
pub(crate) fn reason(code: &GpuCode, judgement: &Judgement, on: &str) -> String {
    let modules = &code.containers;
    if let Some(m) = judgement.failing().next() {
        return format!(
            "cannot run on {on}: {}: SASS only, and ZLUDA loads no SASS (it compiles PTX for \
             the AMD GPU); build it with PTX as well (nvcc -gencode arch=compute_XY,\
             code=compute_XY, or Nixpkgs' cudaForwardCompat)",
            module_carries(modules, m.module)
        );
    }
    match judgement.modules.iter().find(|m| m.load.loads()) {
        None => format!("no module ZLUDA loads on {on}"),
        Some(m) => format!(
            "runs on {on} by compiling its PTX ({}): ZLUDA refuses no PTX ISA version; whether \
             it compiles every instruction is known only by loading it",
            module_carries(modules, m.module)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuda_sandbox_cuda_facts::Arch;
    use cuda_sandbox_elfkit::fatbin::verdict::FileVerdict;
    use cuda_sandbox_elfkit::fatbin::{Compression, Container, Origin, Purpose, Version};

    fn module(origin: Origin, images: &[(EntryKind, &str)]) -> Container {
        Container {
            offset: 0,
            size: 0,
            origin,
            purpose: Purpose::Loadable,
            member: None,
            entries: images
                .iter()
                .map(|&(kind, arch)| Entry {
                    kind,
                    arch: Arch::parse(arch).unwrap(),
                    version: Version::new(9, 9),
                    compression: Compression::None,
                    offset: 0,
                    stored: Default::default(),
                })
                .collect(),
        }
    }

    fn verdict(containers: Vec<Container>) -> FileVerdict {
        judge(&GpuCode { containers }, &[], &ModuleReads::default()).verdict
    }

    const SASS: EntryKind = EntryKind::Sass;
    const PTX: EntryKind = EntryKind::Ptx;

    #[test]
    fn sass_alone_never_loads_and_ptx_of_any_isa_or_target_does() {
        let file = || Origin::Section(".nv_fatbin".into());
        // SASS for the very capability ZLUDA reports runs no better than any other.
        assert_eq!(
            verdict(vec![module(file(), &[(SASS, "sm_88")])]),
            FileVerdict::Fails
        );
        // ISA 9.9 and a target above ZLUDA's capability: ZLUDA checks neither.
        assert_eq!(
            verdict(vec![module(file(), &[(SASS, "sm_80"), (PTX, "sm_120")])]),
            FileVerdict::RunsByJit
        );
        // A module of SASS alone beside one with PTX fails its own kernels, not the file;
        // what it holds cannot be read here (these modules have no payload), so the file's
        // answer is unknown, never "runs" (with kernels it runs partly: the cli tests).
        assert_eq!(
            verdict(vec![
                module(file(), &[(PTX, "sm_75")]),
                module(file(), &[(SASS, "sm_90")]),
            ]),
            FileVerdict::Unknown
        );
        assert_eq!(verdict(vec![]), FileVerdict::NoGpuCode);
    }

    #[test]
    fn a_module_the_program_loads_itself_is_reported_and_fails_the_file_only_alone() {
        let scan = || Origin::Scan(".data".into());
        let file = || Origin::Section(".nv_fatbin".into());
        assert_eq!(
            verdict(vec![
                module(file(), &[(PTX, "sm_75")]),
                module(scan(), &[(SASS, "sm_120")]),
            ]),
            FileVerdict::RunsByJit
        );
        assert_eq!(
            verdict(vec![module(scan(), &[(SASS, "sm_120")])]),
            FileVerdict::Fails
        );
    }
}
