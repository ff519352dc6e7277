//! From modules to one verdict per file, by a stated policy that fits real libraries.
//!
//! Real libraries carry modules meant only for some GPUs (NVIDIA's cuRAND has 13 in
//! `.nv_fatbin` and some 1,700 more in `.data`), and guard arch-specific kernels at run time.
//! So, for one GPU and driver:
//! 1. a module with only NVVM IR (or kinds unknown here) is not judged: nvJitLink links it;
//! 2. a module that cannot load is *reported*, not failed, while some other module of the file
//!    loads, when its images are all arch- or family-specific ('a'/'f') for other GPUs, or when
//!    the program loads it itself: found by the magic scan, a byte array the library hands to
//!    `cuModuleLoadData` (cuRAND keeps one single-architecture module per GPU in `.data` and
//!    picks the one for the GPU it runs on);
//! 3. any other module that cannot load (209, 222) fails the file;
//! 4. a file none of whose judged modules loads fails;
//! 5. otherwise a module the rules cannot judge makes the file unknown, never a pass;
//! 6. otherwise the file runs: by SASS, or by JIT when any module needs PTX compiled.

use serde::Serialize;

use super::rules::{load, ptx_applies, sass_runs, CudaEncoded, Load};
use super::{Capability, Container, EntryKind, GpuCode, Origin, Variant};

/// Why a module that cannot load does not fail its file (rule 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Excuse {
    /// Its images are all 'a'/'f' for other GPUs.
    OnlyForOtherGpus,
    /// The program loads it itself (a byte array found by the magic scan).
    LoadedByTheProgram,
}

/// One module's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModuleVerdict {
    /// The module's index in [`GpuCode::containers`].
    pub module: usize,
    /// What the driver does with it.
    #[serde(flatten)]
    pub load: Load,
    /// Why it would not fail the file, when it cannot load (rule 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excuse: Option<Excuse>,
}

/// The answer for a whole file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileVerdict {
    /// No module the driver would load.
    NoGpuCode,
    /// Every judged module loads from SASS.
    RunsBySass,
    /// It runs, some modules by JIT-compiling PTX at their first launch.
    RunsByJit,
    /// A module cannot load: see the module verdicts.
    Fails,
    /// The rules do not know enough to say.
    Unknown,
}

impl FileVerdict {
    /// Whether the file runs on the GPU judged.
    pub fn runs(self) -> bool {
        matches!(self, FileVerdict::RunsBySass | FileVerdict::RunsByJit)
    }
}

/// One file judged for one GPU and driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Judgement {
    /// The file's verdict.
    pub verdict: FileVerdict,
    /// Every judged module's answer, in module order (rule 1's modules left out).
    pub modules: Vec<ModuleVerdict>,
}

impl Judgement {
    /// The modules that fail the file (rules 3 and 4).
    pub fn failing(&self) -> impl Iterator<Item = &ModuleVerdict> {
        let none_loads = !self.modules.iter().any(|m| m.load.loads());
        self.modules
            .iter()
            .filter(move |m| m.load.fails() && (none_loads || m.excuse.is_none()))
    }

    /// The modules reported under rule 2, while others load.
    pub fn reported(&self) -> impl Iterator<Item = &ModuleVerdict> {
        let some_loads = self.modules.iter().any(|m| m.load.loads());
        self.modules
            .iter()
            .filter(move |m| some_loads && m.load.fails() && m.excuse.is_some())
    }
}

/// Whether every SASS/PTX image of `module` is 'a'/'f' and none of them fits `device`.
fn only_for_other_gpus(module: &Container, device: Capability) -> bool {
    let mut images = module
        .entries
        .iter()
        .filter(|e| matches!(e.kind, EntryKind::Sass | EntryKind::Ptx))
        .peekable();
    images.peek().is_some()
        && images.all(|e| {
            e.arch.variant != Variant::Plain
                && !(match e.kind {
                    EntryKind::Sass => sass_runs(e.arch, device),
                    _ => ptx_applies(e.arch, device),
                })
        })
}

/// Judges every module of `code` for a GPU of capability `device` with a driver of CUDA
/// version `driver`, and the file by the policy above.
pub fn judge(code: &GpuCode, device: Capability, driver: CudaEncoded) -> Judgement {
    let modules: Vec<ModuleVerdict> = code
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let load = load(&c.entries, device, driver);
            let excuse = if !load.fails() {
                None
            } else if only_for_other_gpus(c, device) {
                Some(Excuse::OnlyForOtherGpus)
            } else if matches!(c.origin, Origin::Scan(_)) {
                Some(Excuse::LoadedByTheProgram)
            } else {
                None
            };
            ModuleVerdict {
                module: i,
                load,
                excuse,
            }
        })
        .filter(|m| m.load != Load::NotForTheDriver)
        .collect();
    let mut judgement = Judgement {
        verdict: FileVerdict::NoGpuCode,
        modules,
    };
    judgement.verdict = if judgement.modules.is_empty() {
        FileVerdict::NoGpuCode
    } else if judgement.failing().next().is_some() {
        FileVerdict::Fails
    } else if judgement
        .modules
        .iter()
        .any(|m| matches!(m.load, Load::Unknown { .. }))
    {
        FileVerdict::Unknown
    } else if judgement
        .modules
        .iter()
        .any(|m| matches!(m.load, Load::Jit { .. }))
    {
        FileVerdict::RunsByJit
    } else {
        FileVerdict::RunsBySass
    };
    judgement
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fatbin::{Arch, Compression, Entry, Version};

    fn module(images: &[(&str, EntryKind)]) -> Container {
        Container {
            offset: 0,
            size: 0,
            origin: Origin::File,
            member: None,
            entries: images
                .iter()
                .map(|(arch, kind)| Entry {
                    kind: *kind,
                    arch: Arch::parse(arch).unwrap(),
                    version: if *kind == EntryKind::Ptx {
                        Version::new(8, 0)
                    } else {
                        Version::new(1, 8)
                    },
                    compression: Compression::None,
                    flags: 0,
                    offset: 0,
                    stored_size: 0,
                    concatenated: false,
                })
                .collect(),
        }
    }
    fn code(modules: Vec<Container>) -> GpuCode {
        GpuCode {
            containers: modules,
        }
    }
    const S: EntryKind = EntryKind::Sass;
    const P: EntryKind = EntryKind::Ptx;
    fn cc(t: &str) -> Capability {
        Capability::parse(t).unwrap()
    }

    #[test]
    fn arch_specific_modules_for_other_gpus_are_reported_while_others_load() {
        let file = code(vec![
            module(&[("sm_80", S), ("sm_90", S)]),
            module(&[("sm_90a", S)]),
            module(&[("sm_100a", S), ("sm_100f", S)]),
        ]);
        let on_hopper = judge(&file, cc("9.0"), 12020);
        assert_eq!(on_hopper.verdict, FileVerdict::RunsBySass);
        let reported: Vec<usize> = on_hopper.reported().map(|m| m.module).collect();
        assert_eq!(reported, [2]);
        let on_ampere = judge(&file, cc("8.6"), 12020);
        assert_eq!(on_ampere.verdict, FileVerdict::RunsBySass);
        assert_eq!(on_ampere.reported().count(), 2);
    }

    #[test]
    fn modules_the_program_loads_itself_are_reported_while_a_registered_one_loads() {
        let mut per_gpu = vec![module(&[("sm_80", S), ("sm_90", S)])];
        for arch in ["sm_75", "sm_86", "sm_120"] {
            let mut m = module(&[(arch, S)]);
            m.origin = Origin::Scan(".data".into());
            per_gpu.push(m);
        }
        let j = judge(&code(per_gpu.clone()), cc("9.0"), 13000);
        assert_eq!(j.verdict, FileVerdict::RunsBySass);
        assert_eq!(j.reported().count(), 3);
        assert!(j
            .reported()
            .all(|m| m.excuse == Some(Excuse::LoadedByTheProgram)));
        // None loads: the file fails, scanned modules and all.
        let j = judge(&code(per_gpu), cc("7.0"), 13000);
        assert_eq!(j.verdict, FileVerdict::Fails);
        assert_eq!(j.failing().count(), 4);
    }

    #[test]
    fn a_file_none_of_whose_modules_loads_fails() {
        let file = code(vec![module(&[("sm_90a", S)]), module(&[("sm_100a", S)])]);
        let j = judge(&file, cc("8.6"), 12020);
        assert_eq!(j.verdict, FileVerdict::Fails);
        assert_eq!(j.failing().count(), 2);
    }

    #[test]
    fn a_plain_module_that_cannot_load_fails_the_file() {
        let file = code(vec![
            module(&[("sm_80", S)]),
            module(&[("sm_75", S), ("sm_86", S)]),
        ]);
        let j = judge(&file, cc("8.0"), 12020);
        assert_eq!(j.verdict, FileVerdict::Fails);
        assert_eq!(j.failing().map(|m| m.module).collect::<Vec<_>>(), [1]);
    }

    #[test]
    fn jit_anywhere_makes_the_file_run_by_jit() {
        let file = code(vec![module(&[("sm_80", S)]), module(&[("compute_80", P)])]);
        assert_eq!(
            judge(&file, cc("8.0"), 12020).verdict,
            FileVerdict::RunsByJit
        );
        let both = code(vec![module(&[("sm_80", S), ("compute_80", P)])]);
        assert_eq!(
            judge(&both, cc("8.6"), 12020).verdict,
            FileVerdict::RunsBySass
        );
        assert_eq!(
            judge(&both, cc("9.0"), 12020).verdict,
            FileVerdict::RunsByJit
        );
    }

    #[test]
    fn unknown_is_never_a_pass_and_nvvm_alone_is_no_gpu_code() {
        let file = code(vec![module(&[("sm_80", S)])]);
        assert_eq!(judge(&file, cc("8.5"), 12020).verdict, FileVerdict::Unknown);
        let lto = code(vec![module(&[("compute_90", EntryKind::NvvmIr)])]);
        assert_eq!(
            judge(&lto, cc("9.0"), 13000).verdict,
            FileVerdict::NoGpuCode
        );
        assert_eq!(
            judge(&GpuCode::default(), cc("9.0"), 13000).verdict,
            FileVerdict::NoGpuCode
        );
    }
}
