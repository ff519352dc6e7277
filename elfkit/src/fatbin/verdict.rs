//! From modules to one verdict per file, by a stated policy that fits real libraries.
//!
//! Real libraries carry modules meant only for some GPUs (NVIDIA's cuRAND has 13 in
//! `.nv_fatbin` and some 1,700 more in `.data`), guard arch-specific kernels at run time, and
//! keep modules nothing can use (cuFFT 11.4 has an sm_52 cubin with no kernel and no data).
//! So, for one GPU and driver:
//! 1. containers that are link input are listed, not judged: `__nv_relfatbin` in a linked
//!    file (device-link input; the driver is handed only `.nv_fatbin`) and every container of
//!    a relocatable object or `.a` member;
//! 2. a kernel module that does not drive the GPU fails the file: it predates the GPU's
//!    architecture, or its branch dropped it ([`super::gpus`]); a GPU the table does not know,
//!    or one the driver calls by another capability (Thor), makes the file unknown;
//! 3. a module with only NVVM IR (or kinds unknown here) is not judged: nvJitLink links it;
//! 4. a module that cannot load is *reported*, not failed, while some other module of the file
//!    loads, when its images are all arch- or family-specific ('a'/'f') for other GPUs, or when
//!    the program loads it itself: found by the magic scan, a byte array the library hands to
//!    `cuModuleLoadData` (cuRAND keeps one single-architecture module per GPU in `.data` and
//!    picks the one for the GPU it runs on);
//! 5. any other module that cannot load (209, 222, an image the driver cannot unpack) is
//!    read: when nothing in it can be launched or read (no kernel entry, no device data, no
//!    `.entry` in its PTX: [`super::image`]) it is listed, not judged; otherwise it fails the
//!    file;
//! 6. a file whose own modules (those it registers, not the byte arrays it loads itself) hold
//!    a cubin of a newer CUDA major than the driver's fails: the cubin records the toolkit
//!    that built it, and CUDA's compatibility stops at the major ([`toolkit_on_driver`]). That
//!    is the file's toolkit, whichever module says it, inert ones included;
//! 7. a file none of whose judged modules loads fails;
//! 8. otherwise a module the rules cannot judge makes the file unknown, never a pass;
//! 9. otherwise the file runs: by SASS, or by JIT when any module needs PTX compiled.
//!
//! Payloads are read only where a verdict depends on them: a module that would otherwise fail
//! (rule 5), and for rule 6 one cubin per registered module (NVIDIA's tools build a module's
//! images in one compilation), only when the cubin's format allows a toolkit of a newer major
//! than the driver's (ELF ABI 7 cubins, entry version 1.7, come from ptxas 12.9 or older; ABI
//! 8, entry version 1.8, from 12.8 or newer: so only under an 11.x driver, or a 12.x driver
//! for ABI 8 cubins), stopping at the first of a newer major. A cubin of a major newer than 13
//! that keeps ABI 8 is not caught under a 13.x driver: no such toolkit exists to measure.

use serde::Serialize;

use super::gpus::{self, Drives};
use super::image::{cubin_facts, ptx_facts};
use super::payload::payload;
use super::rules::{
    load, ptx_applies, sass_runs, toolkit_on_driver, Driver, Load, Toolkit, ToolkitFit,
};
use super::{Capability, Container, Entry, EntryKind, GpuCode, Origin, Purpose, Variant, Version};

/// Why a module that cannot load does not fail its file (rule 4).
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
    /// The module's index in [`GpuCode::containers`] (JSON: its number from 1, as messages
    /// write `module 2 of 13`).
    #[serde(serialize_with = "from_one")]
    pub module: usize,
    /// What the driver does with it.
    #[serde(flatten)]
    pub load: Load,
    /// Why it would not fail the file, when it cannot load (rule 4).
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
    /// It cannot run: the driver does not drive the GPU, or a module cannot load.
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

/// The modules listed and not judged, by why (rules 1, 3 and 5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NotJudged {
    /// `__nv_relfatbin` in a linked file: device-link input.
    pub device_link_input: usize,
    /// Containers of a relocatable object or archive member: link input.
    pub link_input: usize,
    /// Modules of NVVM IR only.
    pub nvvm_only: usize,
    /// Modules with no kernel and no device data.
    pub inert: usize,
}

/// Whether the kernel module drives the GPU, as [`gpus::drives`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "drives")]
pub enum GpuDriven {
    /// It does.
    Yes,
    /// It predates the architecture.
    TooOld {
        /// The first release that drives it.
        #[serde(serialize_with = "as_release")]
        first: i32,
    },
    /// Its branch no longer drives it.
    Dropped {
        /// The last release that drives it.
        #[serde(serialize_with = "as_release")]
        last: i32,
    },
    /// This driver calls the GPU by another capability.
    Renamed {
        /// The capability it reports under this driver.
        to: Capability,
    },
    /// The architecture table does not know the capability.
    Unknown,
}

/// A module's index as its number from 1, the way messages count modules.
fn from_one<S: serde::Serializer>(index: &usize, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(*index as u64 + 1)
}

fn as_release<S: serde::Serializer>(v: &i32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&super::release(*v))
}

impl From<Drives> for GpuDriven {
    fn from(d: Drives) -> GpuDriven {
        match d {
            Drives::Yes => GpuDriven::Yes,
            Drives::TooOld { first } => GpuDriven::TooOld { first },
            Drives::Dropped { last } => GpuDriven::Dropped { last },
            Drives::Renamed { to, .. } => GpuDriven::Renamed { to },
            Drives::Unknown => GpuDriven::Unknown,
        }
    }
}

/// A cubin of the file's own modules built by a toolkit of a newer major than the driver's
/// (rule 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NewerToolkit {
    /// The module's index in [`GpuCode::containers`] (JSON: its number from 1).
    #[serde(serialize_with = "from_one")]
    pub module: usize,
    /// The cubin's index among its entries.
    pub image: usize,
    /// The release of the ptxas that built it.
    #[serde(serialize_with = "as_release")]
    pub toolkit: i32,
}

/// One file judged for one GPU and driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Judgement {
    /// The file's verdict.
    pub verdict: FileVerdict,
    /// Whether the driver drives the GPU (rule 2).
    pub gpu: GpuDriven,
    /// A cubin of the file's own modules of a newer major than the driver's (rule 6).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub newer_toolkit: Option<NewerToolkit>,
    /// Every judged module's answer, in module order.
    pub modules: Vec<ModuleVerdict>,
    /// The modules listed and not judged.
    pub not_judged: NotJudged,
}

impl Judgement {
    /// The modules that fail the file (rules 5 and 6).
    pub fn failing(&self) -> impl Iterator<Item = &ModuleVerdict> {
        let none_loads = !self.modules.iter().any(|m| m.load.loads());
        self.modules
            .iter()
            .filter(move |m| m.load.fails() && (none_loads || m.excuse.is_none()))
    }

    /// The modules reported under rule 4, while others load.
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

/// Whether nothing in `module` can be launched or read (rule 5): every image read, and none
/// with a kernel or device data. An image that cannot be read, or of a kind unknown here,
/// counts as holding something. The cheapest images are read first (stored as they are, then
/// the smallest): one that holds something ends the question.
fn inert(data: &[u8], module: &Container) -> bool {
    let mut images: Vec<&Entry> = module
        .entries
        .iter()
        .filter(|e| e.kind != EntryKind::NvvmIr)
        .collect();
    images.sort_by_key(|e| (e.compression != super::Compression::None, e.stored.size));
    !images.is_empty()
        && images.into_iter().all(|e| match e.kind {
            EntryKind::Sass => payload(data, e)
                .ok()
                .and_then(|b| cubin_facts(&b).ok())
                .is_some_and(|f| f.inert()),
            EntryKind::Ptx => payload(data, e).is_ok_and(|b| ptx_facts(&b).inert()),
            _ => false,
        })
}

/// Whether the cubin `entry`'s format allows a toolkit of a newer major than `driver`'s: ELF
/// ABI 7 (entry 1.7) comes from ptxas 12.9 or older, ABI 8 from 12.8 or newer, 13.x the
/// newest known.
fn may_be_newer(entry: &Entry, driver: &Driver) -> bool {
    let major = driver.cuda / 1000;
    if entry.version >= Version::new(1, 8) {
        major < 13
    } else {
        major < 12
    }
}

/// Rule 6: one cubin per module the file registers, whose format allows a newer major, until
/// one was built by a toolkit of a newer major than `driver` serves. The cheapest are read
/// first (stored as they are, then the smallest), so a file that fails by it is found fast.
/// It depends on the driver alone, not on the GPU: [`judge_given`] takes it computed once.
pub fn newer_toolkit(code: &GpuCode, data: &[u8], driver: &Driver) -> Option<NewerToolkit> {
    let mut candidates: Vec<(usize, usize, &Entry)> = Vec::new();
    for (module, c) in code.containers.iter().enumerate() {
        if c.purpose != Purpose::Loadable || matches!(c.origin, Origin::Scan(_)) {
            continue;
        }
        let cost = |e: &Entry| (e.compression != super::Compression::None, e.stored.size);
        let cheapest = c
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.kind == EntryKind::Sass && may_be_newer(e, driver))
            .min_by_key(|(_, e)| cost(e));
        if let Some((image, entry)) = cheapest {
            candidates.push((module, image, entry));
        }
    }
    candidates.sort_by_key(|(_, _, e)| (e.compression != super::Compression::None, e.stored.size));
    candidates.into_iter().find_map(|(module, image, entry)| {
        let toolkit = cubin_facts(&payload(data, entry).ok()?).ok()?.toolkit?;
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
        device,
        driver,
        newer_toolkit(code, data, driver),
    )
}

/// [`judge`], with rule 6's answer for this file and driver already known
/// ([`newer_toolkit`]): for judging several GPUs with one driver.
pub fn judge_given(
    code: &GpuCode,
    data: &[u8],
    device: Capability,
    driver: &Driver,
    toolkit: Option<NewerToolkit>,
) -> Judgement {
    let mut judgement = Judgement {
        verdict: FileVerdict::NoGpuCode,
        gpu: GpuDriven::from(gpus::drives(driver.kernel, device)),
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
    match judgement.gpu {
        GpuDriven::Yes => {}
        GpuDriven::TooOld { .. } | GpuDriven::Dropped { .. } => {
            judgement.verdict = FileVerdict::Fails;
            return judgement;
        }
        GpuDriven::Renamed { .. } | GpuDriven::Unknown => {
            judgement.verdict = FileVerdict::Unknown;
            return judgement;
        }
    }
    // Rule 6 first: a file it fails needs no module read for rule 5.
    judgement.newer_toolkit = toolkit;
    let read_modules = judgement.newer_toolkit.is_none();
    for i in loadable {
        let c = &code.containers[i];
        let mut load = load(&c.entries, device, driver);
        let excuse = if !load.fails() {
            None
        } else if only_for_other_gpus(c, device) {
            Some(Excuse::OnlyForOtherGpus)
        } else if matches!(c.origin, Origin::Scan(_)) {
            Some(Excuse::LoadedByTheProgram)
        } else {
            None
        };
        if read_modules && load.fails() && excuse.is_none() && inert(data, c) {
            load = Load::Inert;
        }
        match load {
            Load::NotForTheDriver => judgement.not_judged.nvvm_only += 1,
            Load::Inert => judgement.not_judged.inert += 1,
            _ => judgement.modules.push(ModuleVerdict {
                module: i,
                load,
                excuse,
            }),
        }
    }
    judgement.verdict = if judgement.newer_toolkit.is_some() {
        FileVerdict::Fails
    } else if judgement.modules.is_empty() {
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
    use crate::fatbin::{Arch, Compression};

    fn module(images: &[(&str, EntryKind)]) -> Container {
        Container {
            offset: 0,
            size: 0,
            origin: Origin::File,
            purpose: Purpose::Loadable,
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
                    stored: Default::default(),
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
        let on_hopper = judge(&file, &[], cc("9.0"), &Driver::of(12020));
        assert_eq!(on_hopper.verdict, FileVerdict::RunsBySass);
        let reported: Vec<usize> = on_hopper.reported().map(|m| m.module).collect();
        assert_eq!(reported, [2]);
        let on_ampere = judge(&file, &[], cc("8.6"), &Driver::of(12020));
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
        let j = judge(&code(per_gpu.clone()), &[], cc("9.0"), &Driver::of(13000));
        assert_eq!(j.verdict, FileVerdict::RunsBySass);
        assert_eq!(j.reported().count(), 3);
        assert!(j
            .reported()
            .all(|m| m.excuse == Some(Excuse::LoadedByTheProgram)));
        // None loads: the file fails, scanned modules and all.
        let j = judge(&code(per_gpu), &[], cc("7.0"), &Driver::of(13000));
        assert_eq!(j.verdict, FileVerdict::Fails);
        assert_eq!(j.failing().count(), 4);
    }

    #[test]
    fn a_file_none_of_whose_modules_loads_fails() {
        let file = code(vec![module(&[("sm_90a", S)]), module(&[("sm_100a", S)])]);
        let j = judge(&file, &[], cc("8.6"), &Driver::of(12020));
        assert_eq!(j.verdict, FileVerdict::Fails);
        assert_eq!(j.failing().count(), 2);
    }

    #[test]
    fn a_plain_module_that_cannot_load_fails_the_file() {
        let file = code(vec![
            module(&[("sm_80", S)]),
            module(&[("sm_75", S), ("sm_86", S)]),
        ]);
        let j = judge(&file, &[], cc("8.0"), &Driver::of(12020));
        assert_eq!(j.verdict, FileVerdict::Fails);
        assert_eq!(j.failing().map(|m| m.module).collect::<Vec<_>>(), [1]);
    }

    #[test]
    fn jit_anywhere_makes_the_file_run_by_jit() {
        let file = code(vec![module(&[("sm_80", S)]), module(&[("compute_80", P)])]);
        assert_eq!(
            judge(&file, &[], cc("8.0"), &Driver::of(12020)).verdict,
            FileVerdict::RunsByJit
        );
        let both = code(vec![module(&[("sm_80", S), ("compute_80", P)])]);
        assert_eq!(
            judge(&both, &[], cc("8.6"), &Driver::of(12020)).verdict,
            FileVerdict::RunsBySass
        );
        assert_eq!(
            judge(&both, &[], cc("9.0"), &Driver::of(12020)).verdict,
            FileVerdict::RunsByJit
        );
    }

    #[test]
    fn unknown_is_never_a_pass_and_nvvm_alone_is_no_gpu_code() {
        let file = code(vec![module(&[("sm_80", S)])]);
        assert_eq!(
            judge(&file, &[], cc("8.5"), &Driver::of(12020)).verdict,
            FileVerdict::Unknown
        );
        let lto = code(vec![module(&[("compute_90", EntryKind::NvvmIr)])]);
        assert_eq!(
            judge(&lto, &[], cc("9.0"), &Driver::of(13000)).verdict,
            FileVerdict::NoGpuCode
        );
        assert_eq!(
            judge(&GpuCode::default(), &[], cc("9.0"), &Driver::of(13000)).verdict,
            FileVerdict::NoGpuCode
        );
    }

    /// Rule 1: `__nv_relfatbin` in a linked file is device-link input (the driver is handed
    /// only `.nv_fatbin` through the registration wrappers), and an object's or archive
    /// member's containers are link input: counted, never judged.
    #[test]
    fn link_input_is_counted_and_never_judged() {
        let mut relocatable = module(&[("sm_75", S)]);
        relocatable.purpose = Purpose::DeviceLinkInput;
        let file = code(vec![module(&[("sm_90", S)]), relocatable.clone()]);
        let j = judge(&file, &[], cc("9.0"), &Driver::of(12020));
        assert_eq!(j.verdict, FileVerdict::RunsBySass);
        assert_eq!((j.modules.len(), j.not_judged.device_link_input), (1, 1));
        // Alone, on a GPU it has no image for: still nothing to judge, never a 209.
        let j = judge(&code(vec![relocatable]), &[], cc("8.6"), &Driver::of(12020));
        assert_eq!(j.verdict, FileVerdict::NoGpuCode);
        let mut object = module(&[("sm_75", S)]);
        object.purpose = Purpose::LinkInput;
        let j = judge(&code(vec![object]), &[], cc("9.0"), &Driver::of(12020));
        assert_eq!(
            (j.verdict, j.not_judged.link_input),
            (FileVerdict::NoGpuCode, 1)
        );
    }

    /// Rule 2 (gpus.txt, measured with ptxas 12.6/12.8/12.9/13.0): a 12.4 kernel module
    /// predates Blackwell, 12.8 drives it; Thor is 11.0 under a 13.x driver.
    #[test]
    fn a_kernel_module_that_does_not_drive_the_gpu_decides_before_any_module() {
        let file = code(vec![module(&[("sm_120", S)])]);
        let j = judge(&file, &[], cc("12.0"), &Driver::of(12040));
        assert_eq!(j.verdict, FileVerdict::Fails);
        assert_eq!(j.gpu, GpuDriven::TooOld { first: 12080 });
        assert!(j.modules.is_empty());
        // Under compat only libcuda is newer: the kernel module still predates the GPU.
        let compat = Driver {
            cuda: 12080,
            kernel: 12020,
            version: None,
        };
        assert_eq!(
            judge(&file, &[], cc("12.0"), &compat).verdict,
            FileVerdict::Fails
        );
        assert_eq!(
            judge(&file, &[], cc("12.0"), &Driver::of(12080)).verdict,
            FileVerdict::RunsBySass
        );
        let thor = code(vec![module(&[("sm_101", S)])]);
        let j = judge(&thor, &[], cc("10.1"), &Driver::of(13000));
        assert_eq!(j.verdict, FileVerdict::Unknown);
        assert_eq!(j.gpu, GpuDriven::Renamed { to: cc("11.0") });
    }

    /// Rule 6 reads a cubin only where its format allows a newer major than the driver's: a
    /// 1.8 (ELF ABI 8) entry under a 13.x driver is never read; an unreadable payload proves
    /// nothing and fails nothing.
    #[test]
    fn cubins_are_read_for_their_toolkit_only_where_it_can_matter() {
        let file = code(vec![module(&[("sm_90", S)])]);
        assert_eq!(newer_toolkit(&file, &[], &Driver::of(13000)), None);
        assert_eq!(newer_toolkit(&file, &[], &Driver::of(12040)), None);
        let j = judge(&file, &[], cc("9.0"), &Driver::of(12040));
        assert_eq!(j.verdict, FileVerdict::RunsBySass);
    }
}
