//! What one image holds, read from its payload ([`fn@super::payload`]): its kernels (entry
//! functions) and managed variables, the two things that make a module matter when it cannot
//! load (a launch of its kernel fails; a module with a managed variable is loaded when the
//! program starts), and, for a cubin, the toolkit that built it. Measured on NVIDIA's files and
//! on cubins NVIDIA's ptxas 11.7 to 13.5 builds (`docs/fatbin.md`):
//!
//! - a kernel is a symbol whose `st_other` has `STO_CUDA_ENTRY` (0x10; `cuobjdump -elf` prints
//!   it as `ENTRY`), in ELF ABI 7 and 8 alike. Device functions have `.text.*` sections too,
//!   so sections say nothing about kernels;
//! - a managed variable (`__managed__`) is a symbol whose `st_other` has `STO_CUDA_MANAGED`
//!   (0x04; `cuobjdump -elf` prints `MANAGED`), measured with ptxas 11.7, 12.9 and 13.5;
//! - PTX declares kernels with `.entry NAME`, and managed variables with
//!   `.global .attribute(.managed)`, at module scope;
//! - the toolkit: an ELF ABI 7 cubin (`EI_ABIVERSION` 7, `EI_OSABI` 0x33; ptxas up to 12.9)
//!   keeps it in `e_version` as major·10 + minor (0x76 from 11.8, 0x81 from 12.9); an ABI 8
//!   cubin (`EI_OSABI` 0x41; ptxas 12.8 and 12.9 for sm_100 and newer, every 13.x cubin) keeps
//!   `e_version` 1 and names its release in the note `.note.nv.tkinfo` ("Cuda compilation
//!   tools, release 13.0, V13.0.88"). cuFFT 11.4's kernel-less sm_52 module is
//!   `e_version` 0x81: CUDA 12.9.

use super::parse::{u16_at, u32_at, u64_at};
use super::CudaVersion;

/// `STO_CUDA_ENTRY`: the `st_other` bit of a kernel's symbol.
pub const STO_CUDA_ENTRY: u8 = 0x10;

/// `STO_CUDA_MANAGED`: the `st_other` bit of a managed variable's symbol.
pub const STO_CUDA_MANAGED: u8 = 0x04;

/// `e_machine` of a cubin (`EM_CUDA`).
pub const EM_CUDA: u16 = 190;

/// How many kernel names a module's JSON shows: enough to name a few.
pub const NAMED_KERNELS: usize = 3;

/// Kernel names in JSON: `{"count": N, "first": [the first NAMED_KERNELS]}`.
fn few<S: serde::Serializer>(names: &[String], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    let mut out = s.serialize_struct("Kernels", 2)?;
    out.serialize_field("count", &names.len())?;
    out.serialize_field("first", &names[..names.len().min(NAMED_KERNELS)])?;
    out.end()
}

/// What an image (a cubin or PTX) holds that decides whether its module must load.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Symbols {
    /// Kernels: in a cubin the names of the symbols marked `STO_CUDA_ENTRY`, in symbol-table
    /// order; in PTX the names of its `.entry` directives (JSON: how many, and the first
    /// [`NAMED_KERNELS`]).
    #[serde(serialize_with = "few")]
    pub kernels: Vec<String>,
    /// Managed variables: in a cubin the names of the symbols marked `STO_CUDA_MANAGED`; in
    /// PTX the `.global .attribute(.managed)` variables it defines.
    pub managed: Vec<String>,
}

impl Symbols {
    /// Whether it holds neither a kernel nor a managed variable: nothing that fails if its
    /// module cannot load.
    pub fn inert(&self) -> bool {
        self.kernels.is_empty() && self.managed.is_empty()
    }
}

/// What a cubin holds that decides whether it must load, and who built it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CubinFacts {
    /// `EI_ABIVERSION`: 7 up to CUDA 12.9 (below sm_100), 8 after.
    pub abi: u8,
    /// Its kernels and managed variables.
    pub symbols: Symbols,
    /// The CUDA release whose ptxas built it, when it records one.
    pub toolkit: Option<CudaVersion>,
}

/// `release 13.0` in a `.note.nv.tkinfo` description → 13000.
fn release_in(note: &[u8]) -> Option<CudaVersion> {
    const MARK: &[u8] = b"compilation tools, release ";
    let at = memchr::memmem::find(note, MARK)? + MARK.len();
    let rest = &note[at..];
    let end = rest
        .iter()
        .position(|b| !(b.is_ascii_digit() || *b == b'.'))?;
    CudaVersion::parse(std::str::from_utf8(&rest[..end]).ok()?).ok()
}

/// The little-endian `u64` at `at` as an offset or size.
fn usize_at(b: &[u8], at: usize) -> Option<usize> {
    usize::try_from(u64_at(b, at)?).ok()
}

/// One section header of an ELF64 file: name offset, type, file range, linked section.
struct Section {
    name: u32,
    kind: u32,
    start: usize,
    size: usize,
    link: usize,
}

/// The section headers of the ELF64 little-endian file `b`. Read field by field: ptxas puts
/// the section table at offsets that are not 8-aligned (ptxas 13.5: byte 988), which
/// `object`'s in-place reader refuses.
fn sections(b: &[u8]) -> Option<Vec<Section>> {
    let shoff = usize_at(b, 0x28)?;
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
                start: usize_at(b, at + 24)?,
                size: usize_at(b, at + 32)?,
                link: u32_at(b, at + 40)? as usize,
            })
        })
        .collect()
}

/// The bytes of section `s` (none for SHT_NOBITS).
fn section_bytes<'a>(b: &'a [u8], s: &Section) -> &'a [u8] {
    (s.start.checked_add(s.size))
        .filter(|_| s.kind != SHT_NOBITS)
        .and_then(|end| b.get(s.start..end))
        .unwrap_or(&[])
}

const SHT_SYMTAB: u32 = 2;
const SHT_NOBITS: u32 = 8;
/// An ELF64 symbol's size, and where `st_other` is in it.
const SYM_SIZE: usize = 24;
const ST_OTHER: usize = 5;

/// The NUL-terminated string at `at` of a string table, lossily as UTF-8.
fn string_at(table: &[u8], at: usize) -> String {
    let rest = table.get(at..).unwrap_or(&[]);
    let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end]).into_owned()
}

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
    // The bytes of the section at an index (none for an index past the table).
    let bytes_of = |i: usize| table.get(i).map_or(&[][..], |s| section_bytes(bytes, s));
    let names = bytes_of(usize::from(u16_at(bytes, 0x3e).unwrap_or(0)));
    let mut symbols = Symbols::default();
    for symtab in table.iter().filter(|s| s.kind == SHT_SYMTAB) {
        let strings = bytes_of(symtab.link);
        for sym in section_bytes(bytes, symtab).chunks_exact(SYM_SIZE) {
            let name = || string_at(strings, u32_at(sym, 0).unwrap_or(0) as usize);
            if sym[ST_OTHER] & STO_CUDA_ENTRY != 0 {
                symbols.kernels.push(name());
            } else if sym[ST_OTHER] & STO_CUDA_MANAGED != 0 {
                symbols.managed.push(name());
            }
        }
    }
    let toolkit = match u32_at(bytes, 0x14).unwrap_or(0) {
        // ABI 7: major·10 + minor.
        v @ 90..1000 => Some(CudaVersion((v / 10) as i32 * 1000 + (v % 10) as i32 * 10)),
        _ => table
            .iter()
            .find(|s| string_at(names, s.name as usize) == ".note.nv.tkinfo")
            .and_then(|s| release_in(section_bytes(bytes, s))),
    };
    Ok(CubinFacts {
        abi: bytes[8],
        symbols,
        toolkit,
    })
}

/// What the PTX `text` declares. Comments are skipped; a directive counts at module scope
/// (outside every `{ }`), after the linkage directives `.visible`, `.weak` and `.common`
/// (`.extern` declares what another module defines, so it is not this module's). A managed
/// variable's name is the last word of its declaration before any `[`, `=` or `;`.
pub fn ptx_facts(text: &[u8]) -> Symbols {
    let mut facts = Symbols::default();
    let mut depth = 0usize;
    let mut in_block_comment = false;
    for line in text.split(|b| *b == b'\n') {
        let mut code = Vec::with_capacity(line.len());
        let mut i = 0;
        while i < line.len() {
            match (in_block_comment, &line[i..]) {
                // `*/` ends a block comment, `/*` outside one starts it.
                (true, [b'*', b'/', ..]) | (false, [b'/', b'*', ..]) => {
                    in_block_comment = !in_block_comment;
                    i += 2;
                }
                (true, _) => i += 1,
                (false, [b'/', b'/', ..]) => break,
                (false, _) => {
                    code.push(line[i]);
                    i += 1;
                }
            }
        }
        let declaration = code.split(|b| b"[=;".contains(b)).next().unwrap_or(&[]);
        let mut words = declaration
            .split(|b| b.is_ascii_whitespace() || b"(){,".contains(b))
            .filter(|w| !w.is_empty());
        let first = words.find(|w| !matches!(*w, b".visible" | b".weak" | b".common"));
        let text = |w: &[u8]| String::from_utf8_lossy(w).into_owned();
        // Only what is declared at module scope.
        match first.filter(|_| depth == 0) {
            Some(b".entry") => facts.kernels.extend(words.next().map(text)),
            Some(b".global") => {
                let rest: Vec<&[u8]> = words.collect();
                if rest.contains(&&b".managed"[..]) {
                    facts.managed.extend(rest.last().map(|w| text(w)));
                }
            }
            _ => {}
        }
        depth = code.iter().fold(depth, |depth, b| match b {
            b'{' => depth + 1,
            b'}' => depth.saturating_sub(1),
            _ => depth,
        });
    }
    facts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `.note.nv.tkinfo` of a ptxas 13.0.88 cubin (measured): "Cuda compilation tools, release
    /// 13.0, V13.0.88".
    #[test]
    fn the_release_is_read_from_the_toolkit_note() {
        let note = b"\0ptxas\0Cuda compilation tools, release 13.0, V13.0.88\0Build cuda_13.0\0";
        assert_eq!(release_in(note), Some(CudaVersion(13000)));
        assert_eq!(
            release_in(b"Cuda compilation tools, release 12.8, V12.8.93"),
            Some(CudaVersion(12080))
        );
        assert_eq!(release_in(b"release 13.0"), None);
        assert_eq!(release_in(b"compilation tools, release x"), None);
    }

    /// PTX as NVIDIA's compilers write it: kernels are `.entry NAME`, managed variables
    /// `.global .attribute(.managed)` at module scope; `.func`, plain `.global`/`.const` data,
    /// `.extern` declarations, state spaces in instructions (`ld.global`) and comments are
    /// neither.
    #[test]
    fn ptx_kernels_and_managed_variables_are_found_at_module_scope() {
        let kernel = b".version 8.8\n.target sm_90\n.address_size 64\n\n\
            // .entry in a comment\n.visible .entry saxpy(\n.param .u64 p\n)\n{\n\
            ld.global.f32 %f1, [%rd1];\nret;\n}\n";
        let facts = ptx_facts(kernel);
        assert_eq!(facts.kernels, ["saxpy"]);
        assert!(facts.managed.is_empty());
        let managed = b".version 8.8\n.target sm_90\n\
            .visible .global .attribute(.managed) .align 4 .u32 counter;\n\
            .global .attribute( .managed ) .align 8 .b8 table[64] = {0};\n\
            .visible .global .align 4 .u32 plain;\n.const .align 8 .b8 c[8];\n\
            .visible .func f()\n{\nret;\n}\n";
        let facts = ptx_facts(managed);
        assert_eq!(facts.managed, ["counter", "table"]);
        assert!(facts.kernels.is_empty());
        let inert = b".version 8.8\n.target sm_52\n/* .entry k() */\n\
            .extern .global .attribute(.managed) .u32 elsewhere;\n\
            .visible .global .u32 data;\n.visible .func f()\n{\n.reg .b32 r;\nret;\n}\n";
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
