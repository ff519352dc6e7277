//! What one image holds, read from its payload ([`fn@super::payload`]): whether anything in it can
//! be launched (a kernel) or read by host code (device data), and, for a cubin, the toolkit that
//! built it. Measured on NVIDIA's files and on cubins NVIDIA's ptxas 11.7 to 13.5 builds
//! (`docs/fatbin.md`):
//!
//! - a kernel is a symbol whose `st_other` has `STO_CUDA_ENTRY` (0x10; `cuobjdump -elf` prints
//!   it as `ENTRY`), in ELF ABI 7 and 8 alike. Device functions have `.text.*` sections too,
//!   so sections say nothing about kernels;
//! - device data lives in `.nv.global*` (`__device__`, `__managed__`) and `.nv.constant1` to
//!   `.nv.constant9` (`__constant__` is bank 3 on every architecture seen); `.nv.constant0.*`
//!   is a kernel's parameters;
//! - PTX declares kernels with `.entry`, and data with `.global` or `.const` at module scope;
//! - the toolkit: an ELF ABI 7 cubin (`EI_ABIVERSION` 7, `EI_OSABI` 0x33; ptxas up to 12.9)
//!   keeps it in `e_version` as major·10 + minor (0x76 from 11.8, 0x81 from 12.9); an ABI 8
//!   cubin (`EI_OSABI` 0x41; ptxas 12.8 and 12.9 for sm_100 and newer, every 13.x cubin) keeps
//!   `e_version` 1 and names its release in the note `.note.nv.tkinfo` ("Cuda compilation
//!   tools, release 13.0, V13.0.88"). cuFFT 11.4's kernel-less sm_52 module is
//!   `e_version` 0x81: CUDA 12.9.

use super::CudaEncoded;

/// `STO_CUDA_ENTRY`: the `st_other` bit of a kernel's symbol.
pub const STO_CUDA_ENTRY: u8 = 0x10;

/// `e_machine` of a cubin (`EM_CUDA`).
pub const EM_CUDA: u16 = 190;

/// What a cubin holds that decides whether it must load, and who built it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CubinFacts {
    /// `EI_ABIVERSION`: 7 up to CUDA 12.9 (below sm_100), 8 after.
    pub abi: u8,
    /// Kernels: symbols marked `STO_CUDA_ENTRY`.
    pub kernels: usize,
    /// Whether it has device data (`.nv.global*`, `.nv.constant1`..`9`) host code may read.
    pub data: bool,
    /// The CUDA release whose ptxas built it, when it records one.
    pub toolkit: Option<CudaEncoded>,
}

impl CubinFacts {
    /// Whether nothing in it can be launched or read.
    pub fn inert(&self) -> bool {
        self.kernels == 0 && !self.data
    }
}

/// Whether a section name is device data host code can reach.
fn is_data_section(name: &str) -> bool {
    if name.starts_with(".nv.global") {
        return true;
    }
    name.strip_prefix(".nv.constant")
        .and_then(|rest| rest.bytes().next())
        .is_some_and(|bank| (b'1'..=b'9').contains(&bank))
}

/// `release 13.0` in a `.note.nv.tkinfo` description → 13000.
fn release_in(note: &[u8]) -> Option<CudaEncoded> {
    const MARK: &[u8] = b"compilation tools, release ";
    let at = memchr::memmem::find(note, MARK)? + MARK.len();
    let rest = &note[at..];
    let end = rest
        .iter()
        .position(|b| !(b.is_ascii_digit() || *b == b'.'))?;
    let text = std::str::from_utf8(&rest[..end]).ok()?;
    let (major, minor) = text.split_once('.')?;
    let major: i32 = major.parse().ok()?;
    let minor: i32 = minor.parse().ok()?;
    ((1..100).contains(&major) && (0..10).contains(&minor)).then_some(major * 1000 + minor * 10)
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: usize) -> Option<usize> {
    let v = u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?);
    usize::try_from(v).ok()
}

/// One section header of an ELF64 file: name offset, type, file range.
struct Section {
    name: u32,
    kind: u32,
    start: usize,
    size: usize,
}

/// The section headers of the ELF64 little-endian file `b`. Read field by field: ptxas puts
/// the section table at offsets that are not 8-aligned (ptxas 13.5: byte 988), which
/// `object`'s in-place reader refuses.
fn sections(b: &[u8]) -> Option<Vec<Section>> {
    let shoff = u64_at(b, 0x28)?;
    let entsize = usize::from(u16_at(b, 0x3a)?);
    let count = usize::from(u16_at(b, 0x3c)?);
    if entsize < 64 || shoff.checked_add(entsize.checked_mul(count)?)? > b.len() {
        return None;
    }
    (0..count)
        .map(|i| {
            let at = shoff + i * entsize;
            Some(Section {
                name: u32_at(b, at)?,
                kind: u32_at(b, at + 4)?,
                start: u64_at(b, at + 24)?,
                size: u64_at(b, at + 32)?,
            })
        })
        .collect()
}

/// The bytes of section `s` (none for SHT_NOBITS).
fn section_bytes<'a>(b: &'a [u8], s: &Section) -> &'a [u8] {
    if s.kind == SHT_NOBITS {
        return &[];
    }
    s.start
        .checked_add(s.size)
        .and_then(|end| b.get(s.start..end))
        .unwrap_or(&[])
}

const SHT_SYMTAB: u32 = 2;
const SHT_NOBITS: u32 = 8;
/// An ELF64 symbol's size, and where `st_other` is in it.
const SYM_SIZE: usize = 24;
const ST_OTHER: usize = 5;

/// Why bytes are not a cubin [`cubin_facts`] can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CubinError {
    /// No little-endian ELF64 header.
    #[error("not a cubin: no little-endian ELF64 header")]
    NotElf64,
    /// An ELF file for another machine.
    #[error("not a cubin: e_machine {0}, not EM_CUDA ({em_cuda})", em_cuda = EM_CUDA)]
    Machine(u16),
    /// The section table runs past the bytes.
    #[error("not a cubin: its section table runs past its end")]
    SectionTable,
}

/// What the cubin `bytes` holds; an error when it is not a cubin this reader can parse: its
/// ELF header, section table and symbol table are read, each bounded by the bytes there.
pub fn cubin_facts(bytes: &[u8]) -> Result<CubinFacts, CubinError> {
    if !bytes.starts_with(b"\x7fELF\x02\x01") {
        return Err(CubinError::NotElf64);
    }
    let machine = u16_at(bytes, 0x12).unwrap_or(0);
    if machine != EM_CUDA {
        return Err(CubinError::Machine(machine));
    }
    let table = sections(bytes).ok_or(CubinError::SectionTable)?;
    let strings = usize::from(u16_at(bytes, 0x3e).unwrap_or(0));
    let names = table
        .get(strings)
        .map(|s| section_bytes(bytes, s))
        .unwrap_or(&[]);
    let name_of = |s: &Section| {
        let start = s.name as usize;
        let rest = names.get(start..)?;
        let end = rest.iter().position(|&c| c == 0)?;
        std::str::from_utf8(&rest[..end]).ok()
    };
    let kernels = table
        .iter()
        .filter(|s| s.kind == SHT_SYMTAB)
        .flat_map(|s| section_bytes(bytes, s).chunks_exact(SYM_SIZE))
        .filter(|sym| sym[ST_OTHER] & STO_CUDA_ENTRY != 0)
        .count();
    let data = table
        .iter()
        .any(|s| name_of(s).is_some_and(is_data_section));
    let toolkit = match u32_at(bytes, 0x14).unwrap_or(0) {
        // ABI 7: major·10 + minor.
        v if (90..1000).contains(&v) => Some((v / 10) as i32 * 1000 + (v % 10) as i32 * 10),
        _ => table
            .iter()
            .find(|s| name_of(s) == Some(".note.nv.tkinfo"))
            .and_then(|s| release_in(section_bytes(bytes, s))),
    };
    Ok(CubinFacts {
        abi: bytes[8],
        kernels,
        data,
        toolkit,
    })
}

/// What a PTX text declares that decides whether its module must load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtxFacts {
    /// `.entry` directives: kernels.
    pub entries: usize,
    /// Whether it defines `.global` or `.const` data at module scope.
    pub data: bool,
}

impl PtxFacts {
    /// Whether nothing in it can be launched or read.
    pub fn inert(&self) -> bool {
        self.entries == 0 && !self.data
    }
}

/// What the PTX `text` declares. Comments are skipped; a directive counts at module scope
/// (outside every `{ }`), after the linkage directives `.visible`, `.weak` and `.common`
/// (`.extern` declares what another module defines, so it is not this module's data).
pub fn ptx_facts(text: &[u8]) -> PtxFacts {
    let mut facts = PtxFacts {
        entries: 0,
        data: false,
    };
    let mut depth = 0usize;
    let mut in_block_comment = false;
    for line in text.split(|b| *b == b'\n') {
        let mut code = Vec::with_capacity(line.len());
        let mut i = 0;
        while i < line.len() {
            if in_block_comment {
                if line[i..].starts_with(b"*/") {
                    in_block_comment = false;
                    i += 2;
                } else {
                    i += 1;
                }
            } else if line[i..].starts_with(b"/*") {
                in_block_comment = true;
                i += 2;
            } else if line[i..].starts_with(b"//") {
                break;
            } else {
                code.push(line[i]);
                i += 1;
            }
        }
        let mut words = code
            .split(|b| b.is_ascii_whitespace() || *b == b'(' || *b == b'{' || *b == b';')
            .filter(|w| !w.is_empty());
        let mut first = words.next();
        while matches!(first, Some(b".visible" | b".weak" | b".common")) {
            first = words.next();
        }
        if depth == 0 {
            match first {
                Some(b".entry") => facts.entries += 1,
                Some(b".global" | b".const") => facts.data = true,
                _ => {}
            }
        }
        for b in &code {
            match b {
                b'{' => depth += 1,
                b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    facts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_sections_are_globals_and_constant_banks_1_to_9() {
        for yes in [
            ".nv.global",
            ".nv.global.init",
            ".nv.constant3",
            ".nv.constant1",
        ] {
            assert!(is_data_section(yes), "{yes}");
        }
        for no in [
            ".nv.constant0.k",
            ".nv.constant0",
            ".text.k",
            ".nv.callgraph",
            ".nv.rel.action",
            ".nv.shared.k",
        ] {
            assert!(!is_data_section(no), "{no}");
        }
    }

    /// `.note.nv.tkinfo` of a ptxas 13.0.88 cubin (measured): "Cuda compilation tools, release
    /// 13.0, V13.0.88".
    #[test]
    fn the_release_is_read_from_the_toolkit_note() {
        let note = b"\0ptxas\0Cuda compilation tools, release 13.0, V13.0.88\0Build cuda_13.0\0";
        assert_eq!(release_in(note), Some(13000));
        assert_eq!(
            release_in(b"Cuda compilation tools, release 12.8, V12.8.93"),
            Some(12080)
        );
        assert_eq!(release_in(b"release 13.0"), None);
        assert_eq!(release_in(b"compilation tools, release x"), None);
    }

    /// PTX as NVIDIA's compilers write it: kernels are `.entry`, device data `.global`/`.const`
    /// at module scope; `.func`, `.extern` declarations, state spaces in instructions
    /// (`ld.global`) and comments are neither.
    #[test]
    fn ptx_kernels_and_data_are_found_at_module_scope() {
        let kernel = b".version 8.8\n.target sm_90\n.address_size 64\n\n\
            // .entry in a comment\n.visible .entry saxpy(\n.param .u64 p\n)\n{\n\
            ld.global.f32 %f1, [%rd1];\nret;\n}\n";
        assert_eq!(
            ptx_facts(kernel),
            PtxFacts {
                entries: 1,
                data: false
            }
        );
        let data = b".version 8.8\n.target sm_90\n.visible .global .align 4 .u32 counter;\n\
            .const .align 8 .b8 table[64];\n.visible .func f()\n{\nret;\n}\n";
        assert_eq!(
            ptx_facts(data),
            PtxFacts {
                entries: 0,
                data: true
            }
        );
        let inert = b".version 8.8\n.target sm_52\n/* .entry k() */\n\
            .extern .global .u32 elsewhere;\n.visible .func f()\n{\n.reg .b32 r;\nret;\n}\n";
        assert!(ptx_facts(inert).inert(), "{:?}", ptx_facts(inert));
    }

    #[test]
    fn bytes_that_are_not_a_cubin_are_an_error() {
        assert_eq!(cubin_facts(b""), Err(CubinError::NotElf64));
        assert_eq!(
            cubin_facts(b"\x7fELF not really"),
            Err(CubinError::NotElf64)
        );
        let mut x86 = b"\x7fELF\x02\x01".to_vec();
        x86.resize(64, 0);
        x86[0x12] = 62;
        assert_eq!(cubin_facts(&x86), Err(CubinError::Machine(62)));
        assert_eq!(
            CubinError::Machine(62).to_string(),
            "not a cubin: e_machine 62, not EM_CUDA (190)"
        );
        x86[0x12] = 190;
        x86[0x28] = 0xff; // e_shoff past the end
        x86[0x3a] = 64;
        x86[0x3c] = 1;
        assert_eq!(cubin_facts(&x86), Err(CubinError::SectionTable));
    }
}
