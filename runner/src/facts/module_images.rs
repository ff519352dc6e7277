//! Fat binaries built here, byte by byte, for `gpu-confirm` to hand the driver and the runtime
//! on a GPU host that has no NVIDIA compiler: a module with no kernel and no data, holding one
//! sm_52 cubin laid out as NVIDIA's cuFFT 11.4 ships one (ELF ABI 7, `e_version` 0x81 for
//! CUDA 12.9, sections `.shstrtab`, `.strtab`, `.symtab`, `.nv.callgraph` and nothing that can
//! be launched or read); a module whose one kernel has SASS for sm_80 alone; a module of one
//! managed variable in sm_52 SASS alone; and a module of the saxpy PTX the kernel check
//! JIT-compiles. The layout is `docs/fatbin.md`'s; elfkit reads them back, and NVIDIA's
//! cuobjdump lists them (runner/tests/gpu_confirm/).

use crate::cuda::gpu::SAXPY_PTX;

/// The container magic.
const CONTAINER_MAGIC: u32 = 0xBA55_ED50;
/// Entry flags: 64-bit code, built for Linux.
const FLAGS_64_LINUX: u64 = 0x11;

/// One fat-binary container holding one uncompressed entry of `kind` (1 PTX, 2 ELF) for
/// `arch`, of format or ISA version `major.minor`, with `payload` (padded to 8 bytes). A PTX
/// entry gets the empty option block `fatbinary` 13.5 writes for one (its header 80 bytes,
/// options at 64: `u32 72, u32 0`), without which cuobjdump refuses the header.
fn container(kind: u16, arch: u32, major: u16, minor: u16, payload: &[u8]) -> Vec<u8> {
    let ptx = kind == 1;
    let header_size: u32 = if ptx { 80 } else { 64 };
    let mut body = payload.to_vec();
    body.resize(payload.len().next_multiple_of(8), 0);
    let mut entry = Vec::with_capacity(header_size as usize + body.len());
    entry.extend(u16::to_le_bytes(kind));
    entry.extend(u16::to_le_bytes(0x0101));
    entry.extend(u32::to_le_bytes(header_size));
    entry.extend(u64::to_le_bytes(body.len() as u64));
    entry.extend(u32::to_le_bytes(0)); // compressed size: stored as it is
    entry.extend(u32::to_le_bytes(if ptx { 64 } else { 0 })); // options offset
    entry.extend(u16::to_le_bytes(minor));
    entry.extend(u16::to_le_bytes(major));
    entry.extend(u32::to_le_bytes(arch));
    entry.extend(u32::to_le_bytes(0)); // name offset
    entry.extend(u32::to_le_bytes(0)); // name length
    entry.extend(u64::to_le_bytes(FLAGS_64_LINUX));
    entry.extend(u64::to_le_bytes(0));
    entry.extend(u64::to_le_bytes(0)); // uncompressed size: not compressed
    if ptx {
        entry.extend(u32::to_le_bytes(72)); // the option string's offset, from the entry's start
        entry.extend(u32::to_le_bytes(0)); // and its length: none
        entry.extend(u64::to_le_bytes(0));
    }
    entry.extend(body);
    let mut out = Vec::with_capacity(16 + entry.len());
    out.extend(u32::to_le_bytes(CONTAINER_MAGIC));
    out.extend(u16::to_le_bytes(1));
    out.extend(u16::to_le_bytes(16));
    out.extend(u64::to_le_bytes(entry.len() as u64));
    out.extend(entry);
    out
}

/// One ELF64 section header: Elf64_Shdr's fields in their order, but sh_addr (always 0) and
/// with sh_offset and sh_size as one pair: sh_name, sh_type, sh_flags, (sh_offset, sh_size),
/// sh_link, sh_info, sh_addralign, sh_entsize.
struct Section(u32, u32, u64, (u64, u64), u32, u32, u64, u64);

/// What a hand-built cubin holds besides its call graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// Nothing that can be launched or read (cuFFT 11.4's sm_52 module).
    Nothing,
    /// One kernel of this name (`STO_CUDA_ENTRY`): 128 bytes of `.text`, never run.
    Kernel(&'static str),
    /// One 4-byte managed variable of this name (`STO_CUDA_MANAGED`, in `.nv.global`).
    Managed(&'static str),
}

/// A cubin for `sm_XY` laid out as ptxas 12.9 writes one (ELF ABI 7, `EI_OSABI` 0x33,
/// `e_version` 0x81, `e_flags` `sm << 16 | 0x500 | sm` as cuFFT's sm_52 one, 0x340534): a symbol
/// table, a call graph of no function, and what `holding` says. Only its layout is real: a
/// kernel's code is zeros, for a GPU it cannot load on.
pub(crate) fn cubin(sm: u32, holding: Holding) -> Vec<u8> {
    // The section of the kernel or variable (name, type, flags, size) and its symbol.
    let (extra_section, extra_kind, extra_flags, size, symbol) = match holding {
        Holding::Nothing => (String::new(), 0, 0, 0, None),
        // SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR; STT_FUNC | STB_GLOBAL, STO_CUDA_ENTRY.
        Holding::Kernel(name) => (format!(".text.{name}"), 1, 6, 128, Some((name, 0x12, 0x10))),
        // SHT_NOBITS, SHF_WRITE | SHF_ALLOC; STT_OBJECT | STB_GLOBAL, STO_CUDA_MANAGED.
        Holding::Managed(name) => (".nv.global".into(), 8, 3, 4, Some((name, 0x11, 0x04))),
    };
    // The kernel's code is zeros; a NOBITS section has no bytes in the file.
    let extra_bytes = vec![0u8; if extra_kind == 8 { 0 } else { size as usize }];
    let mut shstrtab = b"\0.shstrtab\0.strtab\0.symtab\0.nv.callgraph\0".to_vec();
    let extra_at = shstrtab.len() as u32;
    if symbol.is_some() {
        shstrtab.extend_from_slice(extra_section.as_bytes());
        shstrtab.push(0);
    }
    let name_at = |name: &[u8]| {
        shstrtab
            .windows(name.len())
            .position(|w| w == name)
            .expect("a name of the table") as u32
    };
    let mut strtab = b"\0".to_vec();
    // Symbols: the null one, the section symbol of .nv.callgraph (section 4), and the kernel's
    // or variable's (in section 5), global, after the locals.
    let mut symtab = vec![0u8; 24];
    symtab.extend_from_slice(&[0, 0, 0, 0, 3, 0]); // st_name 0, STT_SECTION, STB_LOCAL
    symtab.extend_from_slice(&4u16.to_le_bytes()); // st_shndx
    symtab.extend_from_slice(&[0; 16]); // st_value, st_size
    if let Some((name, info, other)) = symbol {
        symtab.extend(u32::to_le_bytes(strtab.len() as u32));
        strtab.extend_from_slice(name.as_bytes());
        strtab.push(0);
        symtab.extend_from_slice(&[info, other]);
        symtab.extend_from_slice(&5u16.to_le_bytes());
        symtab.extend(u64::to_le_bytes(0));
        symtab.extend(u64::to_le_bytes(size));
    }
    // The call graph of a module with no function: ptxas writes `<0,-1>` to `<0,-4>`.
    let mut callgraph = Vec::new();
    for k in 1..=4i32 {
        callgraph.extend(u32::to_le_bytes(0));
        callgraph.extend_from_slice(&(-k).to_le_bytes());
    }
    let mut body = vec![0u8; 64];
    // Where each part goes, and its size.
    let mut place = |bytes: &[u8], align: usize| -> (u64, u64) {
        while body.len() % align != 0 {
            body.push(0);
        }
        let at = body.len() as u64;
        body.extend_from_slice(bytes);
        (at, bytes.len() as u64)
    };
    let shstrtab_at = place(&shstrtab, 1);
    let strtab_at = place(&strtab, 1);
    let symtab_at = place(&symtab, 8);
    let callgraph_at = place(&callgraph, 4);
    let (extra_offset, _) = place(&extra_bytes, 128);
    let graph_name = name_at(b".nv.callgraph\0");
    let mut sections = vec![
        Section(0, 0, 0, (0, 0), 0, 0, 0, 0),
        Section(name_at(b".shstrtab\0"), 3, 0, shstrtab_at, 0, 0, 1, 0),
        Section(name_at(b".strtab\0"), 3, 0, strtab_at, 0, 0, 1, 0),
        // sh_info: one past the last local symbol.
        Section(name_at(b".symtab\0"), 2, 0, symtab_at, 2, 2, 8, 24),
        // SHT_CUDA_CALLGRAPH.
        Section(graph_name, 0x7000_0001, 0, callgraph_at, 3, 0, 4, 8),
    ];
    if symbol.is_some() {
        let at = (extra_offset, size);
        let section = Section(extra_at, extra_kind, extra_flags, at, 0, 0, size, 0);
        sections.push(section);
    }
    let (shoff, _) = place(&[], 8);
    for Section(name, kind, flags, (offset, size), link, info, align, entsize) in &sections {
        body.extend(u32::to_le_bytes(*name));
        body.extend(u32::to_le_bytes(*kind));
        body.extend(u64::to_le_bytes(*flags));
        body.extend(u64::to_le_bytes(0)); // address
        body.extend(u64::to_le_bytes(*offset));
        body.extend(u64::to_le_bytes(*size));
        body.extend(u32::to_le_bytes(*link));
        body.extend(u32::to_le_bytes(*info));
        body.extend(u64::to_le_bytes(*align));
        body.extend(u64::to_le_bytes(*entsize));
    }
    let mut header = Vec::with_capacity(64);
    header.extend_from_slice(&[
        0x7f, b'E', b'L', b'F', 2, 1, 1, 0x33, 7, 0, 0, 0, 0, 0, 0, 0,
    ]);
    header.extend(u16::to_le_bytes(2)); // ET_EXEC
    header.extend(u16::to_le_bytes(190)); // EM_CUDA
    header.extend(u32::to_le_bytes(0x81)); // e_version: CUDA 12.9
    header.extend(u64::to_le_bytes(0)); // e_entry
    header.extend(u64::to_le_bytes(0)); // e_phoff: no program headers
    header.extend(u64::to_le_bytes(shoff));
    header.extend(u32::to_le_bytes(sm << 16 | 0x500 | sm)); // e_flags
    header.extend(u16::to_le_bytes(64)); // e_ehsize
    header.extend(u16::to_le_bytes(56)); // e_phentsize
    header.extend(u16::to_le_bytes(0)); // e_phnum
    header.extend(u16::to_le_bytes(64)); // e_shentsize
    header.extend(u16::to_le_bytes(sections.len() as u16));
    header.extend(u16::to_le_bytes(1)); // e_shstrndx
    body[..64].copy_from_slice(&header);
    body
}

/// A fat binary of one module holding an sm_52 cubin with no kernel and no device data alone
/// ([`cubin`] holding nothing; entry format 1.7, as CUDA 12.9's fatbinary writes an ABI 7
/// cubin): on any GPU but a 5.x one, no image fits.
pub fn kernelless_sm52_fatbin() -> Vec<u8> {
    container(2, 52, 1, 7, &cubin(52, Holding::Nothing))
}

/// A fat binary of one module holding one kernel, `cuda_sandbox_sm80_only`, in SASS for sm_80
/// alone: on any GPU but an 8.x one, no image fits (209), and only a launch of that kernel
/// needs it. Its code is zeros: it is for GPUs it cannot load on.
pub fn sm80_only_fatbin() -> Vec<u8> {
    container(2, 80, 1, 7, &cubin(80, Holding::Kernel(SM80_KERNEL)))
}

/// The kernel of [`sm80_only_fatbin`].
pub const SM80_KERNEL: &str = "cuda_sandbox_sm80_only";

/// A fat binary of one module holding one managed variable, `cuda_sandbox_managed`, and no
/// kernel, in an sm_52 cubin alone: on any GPU but a 5.x one it has no image. The runtime
/// loads a module with a managed variable when the program starts, even under lazy loading.
pub fn managed_sm52_fatbin() -> Vec<u8> {
    container(2, 52, 1, 7, &cubin(52, Holding::Managed(MANAGED_VARIABLE)))
}

/// The variable of [`managed_sm52_fatbin`].
pub const MANAGED_VARIABLE: &str = "cuda_sandbox_managed";

/// A fat binary of one module holding the saxpy PTX (ISA 6.0, compute_50): every driver from
/// CUDA 9.0 on JIT-compiles it for its GPU.
pub fn saxpy_fatbin() -> Vec<u8> {
    container(1, 50, 6, 0, &[SAXPY_PTX.as_bytes(), b"\0"].concat())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuda_sandbox_cuda_facts::CudaVersion;
    use cuda_sandbox_elfkit::fatbin::image::{cubin_facts, ptx_facts};
    use cuda_sandbox_elfkit::fatbin::{payload, read_gpu_code, EntryKind};

    #[test]
    fn the_kernelless_module_reads_back_as_an_inert_sm52_cubin_of_cuda_12_9() {
        let bytes = kernelless_sm52_fatbin();
        let code = read_gpu_code(&bytes).unwrap();
        assert_eq!(code.containers.len(), 1);
        let e = &code.containers[0].entries[0];
        assert_eq!(
            (e.kind, e.arch.sm_name()),
            (EntryKind::Sass, "sm_52".into())
        );
        let facts = cubin_facts(payload(&bytes, e, &mut Vec::new()).unwrap()).unwrap();
        assert!(facts.symbols.inert(), "{facts:?}");
        assert_eq!((facts.abi, facts.toolkit), (7, Some(CudaVersion(12090))));
    }

    #[test]
    fn the_sm80_and_managed_modules_read_back_with_their_kernel_and_variable() {
        let bytes = sm80_only_fatbin();
        let code = read_gpu_code(&bytes).unwrap();
        let e = &code.containers[0].entries[0];
        assert_eq!(e.arch.sm_name(), "sm_80");
        let facts = cubin_facts(payload(&bytes, e, &mut Vec::new()).unwrap()).unwrap();
        assert_eq!(
            (facts.symbols.kernels, facts.symbols.managed),
            (vec![SM80_KERNEL.into()], vec![])
        );
        let bytes = managed_sm52_fatbin();
        let code = read_gpu_code(&bytes).unwrap();
        let e = &code.containers[0].entries[0];
        assert_eq!(e.arch.sm_name(), "sm_52");
        let facts = cubin_facts(payload(&bytes, e, &mut Vec::new()).unwrap()).unwrap();
        assert_eq!(
            (facts.symbols.kernels, facts.symbols.managed),
            (vec![], vec![MANAGED_VARIABLE.into()])
        );
    }

    #[test]
    fn the_saxpy_module_reads_back_as_ptx_with_one_kernel() {
        let bytes = saxpy_fatbin();
        let code = read_gpu_code(&bytes).unwrap();
        let e = &code.containers[0].entries[0];
        assert_eq!(
            (e.kind, e.arch.compute_name()),
            (EntryKind::Ptx, "compute_50".into())
        );
        assert_eq!(e.version.to_string(), "6.0");
        let facts = ptx_facts(payload(&bytes, e, &mut Vec::new()).unwrap());
        assert_eq!(facts.kernels, ["saxpy"]);
    }
}
