//! From modules to one verdict per file, by a stated policy that fits real libraries.
//!
//! The driver picks an image per module (fat-binary container), and a module without one for
//! the GPU fails its own kernels, not the file: NVIDIA's CUDA Programming Guide ("Lazy
//! Loading", the default on Linux from CUDA 12.2) loads a module on the first use of one of
//! its kernels or variables, and even under eager loading the error waits for a launch
//! (`docs/fatbin.md`). NVIDIA's own libraries rely on it: cuBLAS 12.9 keeps sm_50/60/61-only
//! modules, cuBLASLt sm_90/sm_100-only ones, and both run on every GPU NVIDIA supports. So,
//! for one GPU and driver:
//! 1. containers that are link input are listed, not judged: `__nv_relfatbin` in a linked
//!    file (device-link input; the driver is handed only `.nv_fatbin`) and every container of
//!    a relocatable object or `.a` member;
//! 2. a kernel module that does not drive the GPU fails the file: it predates the GPU's
//!    architecture, or its branch dropped it ([`super::gpus`]); a GPU the table does not know,
//!    or one the driver calls by another capability (Thor), makes the file unknown;
//! 3. a module with only NVVM IR (or kinds unknown here) is not judged: nvJitLink links it;
//! 4. a module that cannot load (209, 222, an image the driver cannot unpack) and that the
//!    file registers is read ([`super::image`]): with neither a kernel nor a managed variable
//!    it is listed, not judged; otherwise it is *missing* here, its kernels named. A byte
//!    array the magic scan found is one the program hands `cuModuleLoadData` itself (cuRAND
//!    keeps one single-architecture module per GPU in `.data` and picks the one for the GPU
//!    it runs on): it is reported, not read;
//! 5. a file whose own modules (those it registers, not the byte arrays it loads itself) hold
//!    a cubin of a newer CUDA major than the driver's cannot run: the cubin records the
//!    toolkit that built it, and CUDA's compatibility stops at the major
//!    ([`toolkit_on_driver`]). That is the file's toolkit, whichever module says it;
//! 6. a file none of whose judged modules loads, nor can be judged, cannot run, unless the
//!    modules that cannot load hold managed variables and no kernel (then rule 7);
//! 7. otherwise a module the rules cannot judge makes the file unknown, never a pass; so does
//!    a missing module holding a managed variable, or one whose images could not be read:
//!    whether such a module, loaded when the program starts, fails the start is not settled
//!    without a GPU;
//! 8. otherwise, with missing modules, the file runs partly: what is left fails with 209/222
//!    if launched;
//! 9. otherwise the file runs: by SASS, or by JIT when any module needs PTX compiled.
//!
//! Payloads are read only where a verdict depends on them: a module that cannot load (rule
//! 4), and for rule 5 one cubin per registered module (NVIDIA's tools build a module's
//! images in one compilation), only when the cubin's format allows a toolkit of a newer major
//! than the driver's (ELF ABI 7 cubins, entry version 1.7, come from ptxas 12.9 or older; ABI
//! 8, entry version 1.8, from 12.8 or newer: so only under an 11.x driver, or a 12.x driver
//! for ABI 8 cubins), stopping at the first of a newer major. A cubin of a major newer than 13
//! that keeps ABI 8 is not caught under a 13.x driver: no such toolkit exists to measure.

use std::cell::RefCell;
use std::collections::HashMap;

use serde::Serialize;

use super::gpus::{self, Drives};
use super::image::{cubin_facts, ptx_facts, Symbols};
use super::payload::payload;
use super::rules::{load, toolkit_on_driver, Driver, Load, Toolkit, ToolkitFit};
use super::{
    Capability, Container, CudaVersion, Entry, EntryKind, GpuCode, Origin, Purpose, Version,
};

/// What a registered module that cannot load holds (rule 4), read from its images.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "holds")]
pub enum Holds {
    /// Read from one of its images: its kernels and managed variables, never both empty.
    Read(Symbols),
    /// None of its images could be read.
    Unreadable,
}

impl Holds {
    /// Whether what it holds makes the file unknown (rule 7): a managed variable, or nothing
    /// known.
    pub fn undecided(&self) -> bool {
        match self {
            Holds::Read(symbols) => !symbols.managed.is_empty(),
            Holds::Unreadable => true,
        }
    }

    /// Whether it holds managed variables and no kernel: nothing to launch, only a load at
    /// start whose outcome is not settled here.
    pub fn managed_only(&self) -> bool {
        matches!(self, Holds::Read(s) if s.kernels.is_empty() && !s.managed.is_empty())
    }
}

/// One module's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModuleVerdict {
    /// The module's index in [`GpuCode::containers`] (JSON: its number from 1, as messages
    /// write `module 2 of 13`).
    #[serde(serialize_with = "from_one")]
    pub module: usize,
    /// What the driver does with it.
    #[serde(flatten)]
    pub load: Load,
    /// Whether the program loads it itself (a byte array found by the magic scan): when it
    /// cannot load here, it is reported, not read (rule 4).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub loaded_by_the_program: bool,
    /// What it holds, read when it cannot load and the file registers it (rule 4).
    #[serde(skip_serializing_if = "Option::is_none", flatten)]
    pub holds: Option<Holds>,
}

impl ModuleVerdict {
    /// Whether it is missing here: the file registers it and it cannot load.
    pub fn missing(&self) -> bool {
        self.load.fails() && !self.loaded_by_the_program
    }
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
    /// It runs, but some modules with kernels have no code that loads on this GPU: launching
    /// one of their kernels fails (209, 222).
    RunsPartly,
    /// It cannot run: the driver does not drive the GPU or serve the file's toolkit, or no
    /// module with kernels loads.
    Fails,
    /// The rules do not know enough to say.
    Unknown,
}

impl FileVerdict {
    /// Whether the file runs on the GPU judged, wholly or partly.
    pub fn runs(self) -> bool {
        matches!(
            self,
            FileVerdict::RunsBySass | FileVerdict::RunsByJit | FileVerdict::RunsPartly
        )
    }
}

/// The modules listed and not judged, by why (rules 1, 3 and 4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NotJudged {
    /// `__nv_relfatbin` in a linked file: device-link input.
    pub device_link_input: usize,
    /// Containers of a relocatable object or archive member: link input.
    pub link_input: usize,
    /// Modules of NVVM IR only.
    pub nvvm_only: usize,
    /// Modules that cannot load here and hold neither a kernel nor a managed variable.
    pub inert: usize,
}

/// A module's index as its number from 1, the way messages count modules.
fn from_one<S: serde::Serializer>(index: &usize, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(*index as u64 + 1)
}

/// A cubin of the file's own modules built by a toolkit of a newer major than the driver's
/// (rule 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NewerToolkit {
    /// The module's index in [`GpuCode::containers`] (JSON: its number from 1).
    #[serde(serialize_with = "from_one")]
    pub module: usize,
    /// The cubin's index among its entries.
    pub image: usize,
    /// The release of the ptxas that built it.
    pub toolkit: CudaVersion,
}

/// One file judged for one GPU and driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Judgement {
    /// The file's verdict.
    pub verdict: FileVerdict,
    /// Whether the driver drives the GPU (rule 2).
    pub gpu: Drives,
    /// A cubin of the file's own modules of a newer major than the driver's (rule 5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub newer_toolkit: Option<NewerToolkit>,
    /// Every judged module's answer, in module order.
    pub modules: Vec<ModuleVerdict>,
    /// The modules listed and not judged.
    pub not_judged: NotJudged,
}

impl Judgement {
    /// The modules that cannot load, when none loads (rule 6): the file cannot run.
    pub fn failing(&self) -> impl Iterator<Item = &ModuleVerdict> {
        let none_loads = self.verdict == FileVerdict::Fails;
        self.modules
            .iter()
            .filter(move |m| none_loads && m.load.fails())
    }

    /// The modules the file registers that cannot load, while others load (rules 7 and 8).
    pub fn missing(&self) -> impl Iterator<Item = &ModuleVerdict> {
        let some_load = self.verdict != FileVerdict::Fails;
        self.modules
            .iter()
            .filter(move |m| some_load && m.missing())
    }

    /// The modules the program loads itself that cannot load here, while others load.
    pub fn reported(&self) -> impl Iterator<Item = &ModuleVerdict> {
        let some_load = self.verdict != FileVerdict::Fails;
        self.modules
            .iter()
            .filter(move |m| some_load && m.load.fails() && m.loaded_by_the_program)
    }
}

/// What each module of one file holds (rule 4), read once for every GPU the file is judged
/// for: the answer depends on the module's images alone, and a module without code for
/// several of the GPUs judged would otherwise be unpacked once for each.
#[derive(Debug, Default)]
pub struct ModuleReads {
    /// What each module read holds, by its index.
    held: RefCell<HashMap<usize, Option<Holds>>>,
    /// The room their payloads unpack into, one after another ([`payload`]).
    room: RefCell<Vec<u8>>,
}

impl ModuleReads {
    /// [`holds`] of module `index` of `code`, read from `data` the first time it is asked.
    fn holds(&self, data: &[u8], code: &GpuCode, index: usize) -> Option<Holds> {
        let read = || holds(data, &code.containers[index], &mut self.room.borrow_mut());
        let mut held = self.held.borrow_mut();
        held.entry(index).or_insert_with(read).clone()
    }
}

/// What `module` holds (rule 4), or `None` when it holds neither a kernel nor a managed
/// variable. Its images are compilations of one source, so one that can be read tells; the
/// cheapest are read first (stored as they are, then the smallest), and an image that holds
/// nothing sends the reader on to the next. An image that cannot be read, or that is neither
/// SASS nor PTX (NVVM IR, a kind unknown here), is passed over; when no image could be read at
/// all, what it holds is unknown.
fn holds(data: &[u8], module: &Container, room: &mut Vec<u8>) -> Option<Holds> {
    let mut images: Vec<&Entry> = module.entries.iter().collect();
    images.sort_by_key(|e| read_cost(e));
    let mut read = images
        .into_iter()
        .filter_map(|e| match e.kind {
            EntryKind::Sass => (payload(data, e, room).ok())
                .and_then(|b| cubin_facts(b).ok())
                .map(|f| f.symbols),
            EntryKind::Ptx => payload(data, e, room).ok().map(ptx_facts),
            _ => None,
        })
        .peekable();
    if read.peek().is_none() {
        return Some(Holds::Unreadable);
    }
    read.find(|symbols| !symbols.inert()).map(Holds::Read)
}

/// Whether the cubin `entry`'s format allows a toolkit of a newer major than `driver`'s: ELF
/// ABI 7 (entry 1.7) comes from ptxas 12.9 or older, ABI 8 from 12.8 or newer, 13.x the
/// newest known.
fn may_be_newer(entry: &Entry, driver: &Driver) -> bool {
    let abi8 = entry.version >= Version::new(1, 8);
    driver.cuda.major() < if abi8 { 13 } else { 12 }
}

/// What reading an image's payload costs, cheapest first: stored as it is, then the smallest.
fn read_cost(e: &Entry) -> (bool, u64) {
    (e.compression != super::Compression::None, e.stored.size)
}

/// Rule 5: one cubin per module the file registers, whose format allows a newer major, until
/// one was built by a toolkit of a newer major than `driver` serves. The cheapest are read
/// first (stored as they are, then the smallest), so a file that fails by it is found fast.
/// It depends on the driver alone, not on the GPU: [`judge_given`] takes it computed once.
pub fn newer_toolkit(code: &GpuCode, data: &[u8], driver: &Driver) -> Option<NewerToolkit> {
    let mut candidates: Vec<(usize, usize, &Entry)> = (code.containers.iter().enumerate())
        .filter(|(_, c)| c.purpose == Purpose::Loadable && !matches!(c.origin, Origin::Scan(_)))
        .filter_map(|(module, c)| {
            let (image, entry) = (c.entries.iter().enumerate())
                .filter(|(_, e)| e.kind == EntryKind::Sass && may_be_newer(e, driver))
                .min_by_key(|(_, e)| read_cost(e))?;
            Some((module, image, entry))
        })
        .collect();
    candidates.sort_by_key(|(_, _, e)| read_cost(e));
    let mut room = Vec::new();
    candidates.into_iter().find_map(|(module, image, entry)| {
        let toolkit = cubin_facts(payload(data, entry, &mut room).ok()?)
            .ok()?
            .toolkit?;
        (toolkit_on_driver(Toolkit::Exact(toolkit), driver) == ToolkitFit::NewerMajor).then_some(
            NewerToolkit {
                module,
                image,
                toolkit,
            },
        )
    })
}

/// Judges every module of `code` (read from the file `data`) for a GPU of capability `device`
/// with `driver`, and the file by the policy above.
pub fn judge(code: &GpuCode, data: &[u8], device: Capability, driver: &Driver) -> Judgement {
    judge_given(
        code,
        data,
        &ModuleReads::default(),
        device,
        driver,
        newer_toolkit(code, data, driver),
    )
}

/// [`judge`], with rule 5's answer for this file and driver already known
/// ([`newer_toolkit`]) and the modules read so far in `reads`: for judging several GPUs with
/// one driver.
pub fn judge_given(
    code: &GpuCode,
    data: &[u8],
    reads: &ModuleReads,
    device: Capability,
    driver: &Driver,
    toolkit: Option<NewerToolkit>,
) -> Judgement {
    let gpu = gpus::drives(driver.kernel, device);
    judge_loads(code, data, reads, gpu, toolkit, |entries| {
        load(entries, device, driver)
    })
}

/// The policy above, for a driver that loads a module's images as `load` says and that
/// drives the GPU as `gpu` says: NVIDIA's driver ([`judge_given`]) or another implementation
/// of the driver API (ZLUDA, which compiles PTX alone); modules are read through `reads`.
pub fn judge_loads(
    code: &GpuCode,
    data: &[u8],
    reads: &ModuleReads,
    gpu: Drives,
    toolkit: Option<NewerToolkit>,
    load: impl Fn(&[Entry]) -> Load,
) -> Judgement {
    let mut judgement = Judgement {
        verdict: FileVerdict::NoGpuCode,
        gpu,
        newer_toolkit: None,
        modules: Vec::new(),
        not_judged: NotJudged::default(),
    };
    let mut loadable = Vec::new();
    for (i, c) in code.containers.iter().enumerate() {
        match c.purpose {
            Purpose::Loadable => loadable.push(i),
            Purpose::DeviceLinkInput => judgement.not_judged.device_link_input += 1,
            Purpose::LinkInput => judgement.not_judged.link_input += 1,
        }
    }
    if loadable.is_empty() {
        return judgement;
    }
    let undriven = match judgement.gpu {
        Drives::Yes => None,
        Drives::TooOld { .. } | Drives::Dropped { .. } => Some(FileVerdict::Fails),
        Drives::Renamed { .. } | Drives::Unknown => Some(FileVerdict::Unknown),
    };
    if let Some(verdict) = undriven {
        judgement.verdict = verdict;
        return judgement;
    }
    // Rule 5 first: a file it fails needs no module read for rule 4.
    judgement.newer_toolkit = toolkit;
    let read_modules = judgement.newer_toolkit.is_none();
    for i in loadable {
        let c = &code.containers[i];
        let load = load(&c.entries);
        let loaded_by_the_program = matches!(c.origin, Origin::Scan(_));
        let read = read_modules && load.fails() && !loaded_by_the_program;
        let holds = read.then(|| reads.holds(data, code, i));
        if matches!(holds, Some(None)) {
            judgement.not_judged.inert += 1;
            continue;
        }
        match load {
            Load::NotForTheDriver => judgement.not_judged.nvvm_only += 1,
            _ => judgement.modules.push(ModuleVerdict {
                module: i,
                load,
                loaded_by_the_program,
                holds: holds.flatten(),
            }),
        }
    }
    let modules = &judgement.modules;
    let any = |f: fn(&ModuleVerdict) -> bool| modules.iter().any(f);
    judgement.verdict = if judgement.newer_toolkit.is_some() {
        FileVerdict::Fails
    } else if modules.is_empty() {
        FileVerdict::NoGpuCode
    } else if !any(|m| m.load.loads() || matches!(m.load, Load::Unknown { .. })) {
        if any(|m| m.load.fails() && !m.holds.as_ref().is_some_and(Holds::managed_only)) {
            FileVerdict::Fails
        } else {
            FileVerdict::Unknown
        }
    } else if any(|m| {
        matches!(m.load, Load::Unknown { .. })
            || m.missing() && m.holds.as_ref().is_some_and(Holds::undecided)
    }) {
        FileVerdict::Unknown
    } else if any(ModuleVerdict::missing) {
        FileVerdict::RunsPartly
    } else if any(|m| matches!(m.load, Load::Jit { .. })) {
        FileVerdict::RunsByJit
    } else {
        FileVerdict::RunsBySass
    };
    judgement
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fatbin::{Arch, Compression, Stored};

    /// PTX of one kernel, as the modules of these tests hold it.
    const KERNEL: &str = ".version 8.0\n.target sm_80\n.visible .entry k_one(\n)\n{\nret;\n}\n";
    /// PTX of a managed variable and a kernel.
    const MANAGED: &str = ".version 8.0\n.target sm_80\n\
        .visible .global .attribute(.managed) .align 4 .u32 counter;\n\
        .visible .entry k_two(\n)\n{\nret;\n}\n";
    /// PTX of a device function alone: nothing that fails if its module cannot load.
    const NOTHING: &str = ".version 8.0\n.target sm_80\n.visible .global .u32 data;\n\
        .visible .func f()\n{\nret;\n}\n";

    /// A file under construction: its modules, and the bytes their payloads point into.
    #[derive(Default)]
    struct File {
        code: GpuCode,
        data: Vec<u8>,
    }

    impl File {
        /// Adds a registered module of `images`; every image's payload is `text` (PTX, so a
        /// SASS image reads as no cubin).
        fn module(mut self, images: &[(&str, EntryKind)], text: &str) -> File {
            let at = self.data.len() as u64;
            self.data.extend_from_slice(text.as_bytes());
            let entries = images
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
                    offset: at,
                    stored: Stored {
                        offset: at,
                        size: text.len() as u64,
                        ..Stored::default()
                    },
                })
                .collect();
            self.code.containers.push(Container {
                offset: 0,
                size: 0,
                origin: Origin::File,
                purpose: Purpose::Loadable,
                member: None,
                entries,
            });
            self
        }

        /// Adds a module of `images` holding one kernel.
        fn with(self, images: &[(&str, EntryKind)]) -> File {
            self.module(images, KERNEL)
        }

        /// Marks the last module as found by the magic scan, or with another purpose.
        fn last(mut self, f: impl FnOnce(&mut Container)) -> File {
            f(self.code.containers.last_mut().unwrap());
            self
        }

        fn judge(&self, device: &str, driver: CudaVersion) -> Judgement {
            judge(&self.code, &self.data, cc(device), &Driver::of(driver))
        }
    }

    const S: EntryKind = EntryKind::Sass;
    const P: EntryKind = EntryKind::Ptx;
    fn cc(t: &str) -> Capability {
        Capability::parse(t).unwrap()
    }

    /// A module without code for two GPUs is read for the first and remembered for the
    /// second: judged again with no bytes to read, it still holds its kernel.
    #[test]
    fn a_module_is_read_once_for_every_gpu_judged() {
        let file = File::default()
            .with(&[("sm_90", S), ("compute_90", P)])
            .with(&[("sm_80", S)]);
        let reads = ModuleReads::default();
        let driver = Driver::of(CudaVersion(12080));
        let on =
            |data: &[u8], device| judge_given(&file.code, data, &reads, cc(device), &driver, None);
        let first = on(&file.data, "8.0");
        let second = on(&[], "8.6");
        let held = |j: &Judgement| j.missing().map(|m| m.holds.clone()).collect::<Vec<_>>();
        let kernel = Some(Holds::Read(Symbols {
            kernels: vec!["k_one".into()],
            managed: vec![],
        }));
        assert_eq!(held(&first), std::slice::from_ref(&kernel));
        assert_eq!(held(&second), [kernel]);
        // Without the first read remembered, no bytes give nothing to read.
        let fresh = judge_given(
            &file.code,
            &[],
            &ModuleReads::default(),
            cc("8.6"),
            &driver,
            None,
        );
        assert_eq!(held(&fresh), [Some(Holds::Unreadable)]);
    }

    /// cuBLASLt 12.9 on sm_80: its module 88 holds only sm_90/sm_100 SASS (FP8 split-K), the
    /// rest loads: it runs, partly, that module's kernels named.
    #[test]
    fn a_module_without_code_for_the_gpu_fails_its_own_kernels_not_the_file() {
        let file = File::default()
            .with(&[("sm_80", S), ("sm_90", S)])
            .with(&[("sm_90", S), ("compute_90", P)]);
        let j = file.judge("8.0", CudaVersion(12080));
        assert_eq!(j.verdict, FileVerdict::RunsPartly);
        let missing: Vec<&ModuleVerdict> = j.missing().collect();
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].module, 1);
        assert_eq!(
            missing[0].holds,
            Some(Holds::Read(Symbols {
                kernels: vec!["k_one".into()],
                managed: vec![],
            }))
        );
        assert_eq!(j.failing().count(), 0);
        assert_eq!(
            file.judge("9.0", CudaVersion(12080)).verdict,
            FileVerdict::RunsBySass
        );
    }

    /// Arch-specific modules for other GPUs (FlashAttention's sm_90a kernels) are missing on
    /// every other GPU, like any module without code for it.
    #[test]
    fn arch_specific_modules_for_other_gpus_are_missing_while_others_load() {
        let file = File::default()
            .with(&[("sm_80", S), ("sm_90", S)])
            .with(&[("sm_90a", S), ("compute_90a", P)])
            .with(&[("sm_100a", S), ("compute_100a", P)]);
        let on_hopper = file.judge("9.0", CudaVersion(12080));
        assert_eq!(on_hopper.verdict, FileVerdict::RunsPartly);
        assert_eq!(
            on_hopper.missing().map(|m| m.module).collect::<Vec<_>>(),
            [2]
        );
        assert_eq!(file.judge("8.6", CudaVersion(12080)).missing().count(), 2);
    }

    #[test]
    fn modules_the_program_loads_itself_are_reported_while_a_registered_one_loads() {
        let mut file = File::default().with(&[("sm_80", S), ("sm_90", S)]);
        for arch in ["sm_75", "sm_86", "sm_120"] {
            file = file
                .with(&[(arch, S)])
                .last(|c| c.origin = Origin::Scan(".data".into()));
        }
        let j = file.judge("9.0", CudaVersion(13000));
        assert_eq!(j.verdict, FileVerdict::RunsBySass);
        assert_eq!(j.reported().count(), 3);
        assert!(j.reported().all(|m| m.holds.is_none()));
        // None loads: the file cannot run, scanned modules and all.
        let j = file.judge("7.0", CudaVersion(13000));
        assert_eq!(j.verdict, FileVerdict::Fails);
        assert_eq!(j.failing().count(), 4);
    }

    #[test]
    fn a_file_none_of_whose_modules_loads_cannot_run() {
        let file = File::default()
            .with(&[("sm_90a", S), ("compute_90a", P)])
            .with(&[("sm_100a", S)]);
        let j = file.judge("8.6", CudaVersion(12020));
        assert_eq!(j.verdict, FileVerdict::Fails);
        assert_eq!(j.failing().count(), 2);
        assert_eq!(j.missing().count(), 0);
    }

    /// A managed variable's module loads when the program starts (Programming Guide, "Lazy
    /// Loading"): without code for the GPU, whether the start fails is not settled here.
    #[test]
    fn a_missing_module_with_a_managed_variable_is_unknown_never_runs() {
        let file = File::default()
            .with(&[("sm_90", S), ("compute_90", P)])
            .module(&[("sm_80", S), ("compute_100", P)], MANAGED);
        let j = file.judge("9.0", CudaVersion(12080));
        assert_eq!(j.verdict, FileVerdict::Unknown);
        let Some(Holds::Read(symbols)) = &j.missing().next().unwrap().holds else {
            panic!("{j:?}");
        };
        assert_eq!(symbols.managed, ["counter"]);
        // Where it loads, it is no question: the other module is missing there.
        assert_eq!(
            file.judge("8.0", CudaVersion(12080)).verdict,
            FileVerdict::RunsPartly
        );
        assert_eq!(
            File::default()
                .module(&[("sm_90", S), ("compute_90", P)], MANAGED)
                .judge("9.0", CudaVersion(12080))
                .verdict,
            FileVerdict::RunsBySass
        );
    }

    /// A file whose only module without code holds a managed variable and no kernel has
    /// nothing to launch: whether its start fails is not settled here.
    #[test]
    fn a_file_of_managed_variables_alone_without_code_is_unknown() {
        const ONLY_MANAGED: &str = ".version 8.0\n.target sm_80\n\
            .visible .global .attribute(.managed) .align 4 .u32 counter;\n";
        let file = File::default().module(&[("sm_80", S), ("compute_80", P)], ONLY_MANAGED);
        assert_eq!(
            file.judge("7.5", CudaVersion(12080)).verdict,
            FileVerdict::Unknown
        );
        assert_eq!(
            file.judge("8.0", CudaVersion(12080)).verdict,
            FileVerdict::RunsBySass
        );
    }

    /// Modules with neither a kernel nor a managed variable are listed, not judged (cuFFT
    /// 11.4's sm_52 module; cuSPARSELt 0.8.1's module of 1-byte objects); images that cannot
    /// be read leave what the module holds unknown.
    #[test]
    fn modules_holding_nothing_are_not_judged_and_unreadable_ones_are_unknown() {
        let file = File::default()
            .with(&[("sm_90", S)])
            .module(&[("sm_52", S), ("compute_100", P)], NOTHING);
        let j = file.judge("9.0", CudaVersion(12080));
        assert_eq!(j.verdict, FileVerdict::RunsBySass);
        assert_eq!((j.modules.len(), j.not_judged.inert), (1, 1));
        let unreadable = File::default().with(&[("sm_90", S)]).with(&[("sm_52", S)]);
        let j = unreadable.judge("9.0", CudaVersion(12080));
        assert_eq!(j.missing().next().unwrap().holds, Some(Holds::Unreadable));
        assert_eq!(j.verdict, FileVerdict::Unknown);
    }

    #[test]
    fn jit_anywhere_makes_the_file_run_by_jit() {
        let file = File::default()
            .with(&[("sm_80", S)])
            .with(&[("compute_80", P)]);
        assert_eq!(
            file.judge("8.0", CudaVersion(12020)).verdict,
            FileVerdict::RunsByJit
        );
        let both = File::default().with(&[("sm_80", S), ("compute_80", P)]);
        assert_eq!(
            both.judge("8.6", CudaVersion(12020)).verdict,
            FileVerdict::RunsBySass
        );
        assert_eq!(
            both.judge("9.0", CudaVersion(12020)).verdict,
            FileVerdict::RunsByJit
        );
    }

    #[test]
    fn unknown_is_never_a_pass_and_nvvm_alone_is_no_gpu_code() {
        let file = File::default().with(&[("sm_80", S)]);
        assert_eq!(
            file.judge("8.5", CudaVersion(12020)).verdict,
            FileVerdict::Unknown
        );
        let lto = File::default().with(&[("compute_90", EntryKind::NvvmIr)]);
        assert_eq!(
            lto.judge("9.0", CudaVersion(13000)).verdict,
            FileVerdict::NoGpuCode
        );
        assert_eq!(
            File::default().judge("9.0", CudaVersion(13000)).verdict,
            FileVerdict::NoGpuCode
        );
    }

    /// Rule 1: `__nv_relfatbin` in a linked file is device-link input (the driver is handed
    /// only `.nv_fatbin` through the registration wrappers), and an object's or archive
    /// member's containers are link input: counted, never judged.
    #[test]
    fn link_input_is_counted_and_never_judged() {
        let file = File::default()
            .with(&[("sm_90", S)])
            .with(&[("sm_75", S)])
            .last(|c| c.purpose = Purpose::DeviceLinkInput);
        let j = file.judge("9.0", CudaVersion(12020));
        assert_eq!(j.verdict, FileVerdict::RunsBySass);
        assert_eq!((j.modules.len(), j.not_judged.device_link_input), (1, 1));
        // Alone, on a GPU it has no image for: still nothing to judge, never a 209.
        let alone = File::default()
            .with(&[("sm_75", S)])
            .last(|c| c.purpose = Purpose::DeviceLinkInput);
        assert_eq!(
            alone.judge("8.6", CudaVersion(12020)).verdict,
            FileVerdict::NoGpuCode
        );
        let object = File::default()
            .with(&[("sm_75", S)])
            .last(|c| c.purpose = Purpose::LinkInput);
        let j = object.judge("9.0", CudaVersion(12020));
        assert_eq!(
            (j.verdict, j.not_judged.link_input),
            (FileVerdict::NoGpuCode, 1)
        );
    }

    /// Rule 2 (gpus.txt, measured with ptxas 12.6/12.8/12.9/13.0): a 12.4 kernel module
    /// predates Blackwell, 12.8 drives it; Thor is 11.0 under a 13.x driver.
    #[test]
    fn a_kernel_module_that_does_not_drive_the_gpu_decides_before_any_module() {
        let file = File::default().with(&[("sm_120", S)]);
        let j = file.judge("12.0", CudaVersion(12040));
        assert_eq!(j.verdict, FileVerdict::Fails);
        assert_eq!(
            j.gpu,
            Drives::TooOld {
                first: CudaVersion(12080)
            }
        );
        assert!(j.modules.is_empty());
        // Under compat only libcuda is newer: the kernel module still predates the GPU.
        let compat = Driver {
            cuda: CudaVersion(12080),
            kernel: CudaVersion(12020),
            version: None,
        };
        assert_eq!(
            judge(&file.code, &file.data, cc("12.0"), &compat).verdict,
            FileVerdict::Fails
        );
        assert_eq!(
            file.judge("12.0", CudaVersion(12080)).verdict,
            FileVerdict::RunsBySass
        );
        let thor = File::default().with(&[("sm_101", S)]);
        let j = thor.judge("10.1", CudaVersion(13000));
        assert_eq!(j.verdict, FileVerdict::Unknown);
        assert_eq!(
            j.gpu,
            Drives::Renamed {
                to: cc("11.0"),
                last: CudaVersion(12090)
            }
        );
    }

    /// Rule 5 reads a cubin only where its format allows a newer major than the driver's: a
    /// 1.8 (ELF ABI 8) entry under a 13.x driver is never read; an unreadable payload proves
    /// nothing and fails nothing.
    #[test]
    fn cubins_are_read_for_their_toolkit_only_where_it_can_matter() {
        let file = File::default().with(&[("sm_90", S)]);
        assert_eq!(
            newer_toolkit(&file.code, &[], &Driver::of(CudaVersion(13000))),
            None
        );
        assert_eq!(
            newer_toolkit(&file.code, &[], &Driver::of(CudaVersion(12040))),
            None
        );
        assert_eq!(
            file.judge("9.0", CudaVersion(12040)).verdict,
            FileVerdict::RunsBySass
        );
    }
}
