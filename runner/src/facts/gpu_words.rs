//! The words of a verdict that do not depend on the target: what a module carries, where it
//! is in its file, and what was listed and not judged ([`crate::facts::gpu_code`] says the rest).

use std::collections::BTreeSet;

use cuda_sandbox_cuda_facts::Arch;
use cuda_sandbox_elfkit::fatbin::rules::Load;
use cuda_sandbox_elfkit::fatbin::verdict::{Holds, Judgement, ModuleVerdict};
use cuda_sandbox_elfkit::fatbin::{Container, EntryKind, Origin};

/// What a set of entries carries, e.g. `SASS sm_75 sm_80, PTX compute_80 (ISA 8.8)`.
pub(crate) fn carried<'a>(
    entries: impl IntoIterator<Item = &'a cuda_sandbox_elfkit::fatbin::Entry>,
) -> String {
    // SASS, PTX and NVVM IR, each by architecture (PTX then by ISA), each named once.
    let mut kinds: [BTreeSet<(Arch, String)>; 3] = Default::default();
    for e in entries {
        let (kind, name) = match e.kind {
            EntryKind::Sass => (0, e.arch.sm_name()),
            EntryKind::Ptx => (1, format!("{} (ISA {})", e.arch.compute_name(), e.version)),
            _ => (2, e.arch.compute_name()),
        };
        kinds[kind].insert((e.arch, name));
    }
    let parts: Vec<String> = ["SASS", "PTX", "NVVM IR"]
        .iter()
        .zip(&kinds)
        .filter(|(_, names)| !names.is_empty())
        .map(|(kind, names)| {
            let names: Vec<&str> = names.iter().map(|(_, name)| name.as_str()).collect();
            format!("{kind} {}", names.join(" "))
        })
        .collect();
    if parts.is_empty() {
        "nothing".into()
    } else {
        parts.join(", ")
    }
}

/// What each archive member carries, in member order, as cuobjdump lists an archive's members:
/// `2 member(s): a.o [SASS sm_50], b.o [PTX compute_50 (ISA 8.8)]`; `None` when no module is
/// a member's (not an archive).
pub(crate) fn carried_by_member(modules: &[Container]) -> Option<String> {
    let mut members: Vec<(&str, Vec<&Container>)> = Vec::new();
    for c in modules {
        let Some(name) = c.member.as_deref() else {
            continue;
        };
        match members.last_mut() {
            Some((last, held)) if *last == name => held.push(c),
            _ => members.push((name, vec![c])),
        }
    }
    if members.is_empty() {
        return None;
    }
    let each: Vec<String> = members
        .iter()
        .map(|(name, held)| {
            let what = carried(held.iter().flat_map(|c| c.entries.iter()));
            format!("{name} [{what}]")
        })
        .collect();
    Some(format!("{} member(s): {}", members.len(), each.join(", ")))
}

/// Where a module is, for messages: `module 2 of 13 (.nv_fatbin at byte 0x1806b8)`.
pub(crate) fn module_place(modules: &[Container], index: usize) -> String {
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

/// A module and what it carries, for messages: `module 2 of 13 (.nv_fatbin at byte 0x1806b8)
/// carries SASS sm_80`.
pub(crate) fn module_carries(modules: &[Container], index: usize) -> String {
    let carries = carried(&modules[index].entries);
    format!("{} carries {carries}", module_place(modules, index))
}

/// What was listed and not judged, and what was reported and not failed, as a parenthesis.
pub(crate) fn notes(j: &Judgement) -> String {
    let n = &j.not_judged;
    let mut notes = Vec::new();
    if n.inert > 0 {
        notes.push(format!(
            "{} module(s) with neither a kernel nor a managed variable, which nothing launches \
             or loads at start",
            n.inert
        ));
    }
    if n.nvvm_only > 0 {
        notes.push(format!(
            "{} module(s) of NVVM IR only, linked at run time by nvJitLink",
            n.nvvm_only
        ));
    }
    if n.device_link_input > 0 {
        notes.push(format!(
            "{} relocatable module(s) in __nv_relfatbin, input for device linking, which the \
             driver never loads",
            n.device_link_input
        ));
    }
    let mut out = String::new();
    if !notes.is_empty() {
        out.push_str(&format!(" (listed, not judged: {})", notes.join("; ")));
    }
    let by_program = j.reported().count();
    if by_program > 0 {
        out.push_str(&format!(
            " (reported, not failed: {by_program} module(s) the program loads itself cannot \
             load here (kept per GPU, chosen at run time))"
        ));
    }
    out
}

/// `a`, `b`, `c` (each in backquotes), and how many more.
pub(crate) fn shown_names(names: &[String]) -> String {
    let mut shown: Vec<String> = names.iter().take(3).map(|n| format!("`{n}`")).collect();
    if names.len() > 3 {
        shown.push(format!("{} more", names.len() - 3));
    }
    shown.join(", ")
}

/// The kernels read from the modules of `j` that have no code that loads.
pub(crate) fn missing_kernels(j: &Judgement) -> impl Iterator<Item = &String> {
    j.missing()
        .filter_map(|m| match &m.holds {
            Some(Holds::Read(symbols)) => Some(&symbols.kernels),
            _ => None,
        })
        .flatten()
}

/// How many of `j`'s modules load by JIT from PTX.
pub(crate) fn jit_modules(j: &Judgement) -> usize {
    j.modules
        .iter()
        .filter(|m| matches!(m.load, Load::Jit { .. }))
        .count()
}

/// What is missing from a file that runs partly (judgement `j` of `modules`): how many modules
/// with kernels have no code that loads there, a few of their kernels, the error launching
/// one gives, and how the rest loads.
pub(crate) fn partly(j: &Judgement, modules: &[Container]) -> String {
    let missing: Vec<&ModuleVerdict> = j.missing().collect();
    let judged = j
        .modules
        .iter()
        .filter(|m| !m.loaded_by_the_program)
        .count();
    let names: Vec<String> = missing_kernels(j).cloned().collect();
    let kernels = names.len();
    // What launching them gives, each once, in this order.
    let errors: BTreeSet<(u8, &str)> = missing
        .iter()
        .filter_map(|m| match m.load {
            Load::NoBinaryForGpu => Some((0, "CUDA_ERROR_NO_BINARY_FOR_GPU (209)")),
            Load::UnsupportedPtx { .. } => Some((1, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)")),
            Load::CompressionTooNew { .. } => Some((2, "an image this driver cannot unpack")),
            _ => None,
        })
        .collect();
    let errors: Vec<&str> = errors.into_iter().map(|(_, error)| error).collect();
    let jit = jit_modules(j);
    let rest = if jit > 0 {
        format!("the rest runs, {jit} module(s) by JIT from PTX at their first launch")
    } else {
        "the rest runs by SASS".into()
    };
    format!(
        "{} of the {judged} module(s) judged have no code that loads on it ({}{}), \
         so launching one of their {kernels} kernel(s) ({}) fails with {}; NVIDIA's and \
         other libraries keep kernels for some GPUs in modules of their own and choose kernels \
         by the GPU at run time, so this is expected of them; {rest}",
        missing.len(),
        module_carries(modules, missing[0].module),
        if missing.len() > 1 {
            ", and others"
        } else {
            ""
        },
        shown_names(&names),
        errors.join(" or ")
    )
}
