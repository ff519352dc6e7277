//! A package's GPU code: the fat binaries (NVIDIA's `fatbin` containers) inside its files, what
//! each one carries, and whether a GPU with a given driver can load it.
//!
//! - [`parse`] reads one container's header and its entry headers (never a payload: listing
//!   needs no decompression).
//! - [`locate`] finds the containers of a file: `.nv_fatbin`, the `.nvFatBinSegment` wrappers,
//!   relocatable `__nv_relfatbin` sections in objects and `.a` members, a bare `.fatbin` file,
//!   and containers elsewhere (byte arrays in `.rodata`, `.data`) by their magic.
//! - [`mod@payload`] unpacks one entry's payload (LZ4, Zstandard), only when a rule needs it, and
//!   [`image`] reads what a cubin or PTX holds: kernels, device data, the toolkit.
//! - [`gpus`] is the table of GPU architectures, as data: the first driver of each.
//! - [`rules`] is CUDA's loading rules as pure functions: one module, one GPU, one driver.
//! - [`verdict`] turns the modules of a file into one verdict, by a stated policy.
//!
//! The layout was read from NVIDIA's files and checked against NVIDIA's `cuobjdump` 13.5, which
//! the differential test (`elfkit/tests/fatbin_differential/`) keeps as the oracle;
//! `docs/fatbin.md` has the field facts and their sources. Every input is untrusted: a truncated
//! or hostile file gives a [`FatbinError`], in time linear in its size and memory bounded by
//! the number of entry headers it really holds.

pub mod image;
pub mod locate;
pub mod parse;
pub mod payload;
pub mod rules;
pub mod sections;
pub mod strings;
pub mod verdict;

// The CUDA facts the rules apply (the GPU and release tables, capabilities, architectures)
// are their own crate, `cuda_sandbox_cuda_facts`.
use cuda_sandbox_cuda_facts::{gpus, Arch, Capability, CudaVersion, ValueError, Variant};

use serde::Serialize;
use std::fmt;

pub use locate::{read_gpu_code, read_gpu_code_and_strings};
pub use payload::payload;

/// What an entry of a container holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    /// PTX text for a virtual architecture (`compute_XY`): the driver JIT-compiles it.
    Ptx,
    /// A cubin (an ELF file of SASS) for a real architecture (`sm_XY`).
    Sass,
    /// NVVM IR (LTO-IR), linked at run time by nvJitLink; the driver cannot load it as it is.
    NvvmIr,
    /// A kind this reader does not know (its number from the entry header).
    Other(u16),
}

impl EntryKind {
    /// `sass`, `ptx`, `nvvm-ir` or `kind-N`.
    pub fn name(self) -> String {
        match self {
            EntryKind::Ptx => "ptx".into(),
            EntryKind::Sass => "sass".into(),
            EntryKind::NvvmIr => "nvvm-ir".into(),
            EntryKind::Other(code) => format!("kind-{code}"),
        }
    }
}

/// A `major.minor` version from an entry header: the PTX ISA version of a PTX entry (9.5), the
/// format version of a cubin entry (1.8 from CUDA 13's `fatbinary`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// The major number.
    pub major: u16,
    /// The minor number.
    pub minor: u16,
}

impl Version {
    /// `major.minor`.
    pub const fn new(major: u16, minor: u16) -> Version {
        Version { major, minor }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

cuda_sandbox_cuda_facts::serialize_as_display!(Version);

/// How an entry's payload is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Compression {
    /// Stored as it is.
    None,
    /// LZ4 block (flag 0x2000; `fatbinary --compress-mode=speed`).
    Lz4,
    /// Zstandard (flag 0x8000; `fatbinary` 13.x's default).
    Zstd,
    /// Both flags set: not a layout NVIDIA's tools were seen to write.
    Unknown,
}

/// Entry header flags (measured with `fatbinary` 13.5; `docs/fatbin.md`).
pub mod flags {
    /// LZ4-compressed payload.
    pub const LZ4: u64 = 0x2000;
    /// Zstandard-compressed payload.
    pub const ZSTD: u64 = 0x8000;
    /// An arch-specific ('a') architecture.
    pub const ARCH_SPECIFIC: u64 = 0x10_0000;
    /// A family-specific ('f') architecture.
    pub const FAMILY: u64 = 0x20_0000;
}

/// One image in a container: what the driver may pick to load the module. Serialized as
/// `{kind, arch, ptx_isa | cubin_version, compression, concatenated, offset, stored_size}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// SASS, PTX, NVVM IR.
    pub kind: EntryKind,
    /// The architecture it was built for, with its variant.
    pub arch: Arch,
    /// PTX: the ISA version; SASS: the entry's format version.
    pub version: Version,
    /// How its payload is stored.
    pub compression: Compression,
    /// Offset of its header in the file (for a part of a concatenated entry: the outer one's).
    pub offset: u64,
    /// Where its bytes are, for reading them ([`fn@payload`]): JSON's `concatenated` (one part
    /// of a CUDA 13 concatenated entry, kind 0x100) and `stored_size` (the payload bytes as
    /// stored; a part's size once unpacked) come from it.
    pub stored: Stored,
}

/// Where an entry's payload lies in the file and how it is packed (the entry header's fields).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stored {
    /// File offset of the payload (for a part of a concatenated entry: the outer entry's).
    pub offset: u64,
    /// Bytes stored there.
    pub size: u64,
    /// The compressed length within them (0 when stored as it is).
    pub compressed: u32,
    /// Its size once unpacked, as the header says.
    pub unpacked: u64,
    /// For a part of a concatenated entry: where it lies in the unpacked payload.
    pub part: Option<Part>,
}

/// One image's place in the unpacked payload of a concatenated entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Its offset in the unpacked payload.
    pub offset: u64,
    /// Its size.
    pub size: u64,
}

impl Serialize for Entry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = s.serialize_struct("Entry", 7)?;
        out.serialize_field("kind", &self.kind.name())?;
        out.serialize_field("arch", &self.arch)?;
        match self.kind {
            EntryKind::Ptx | EntryKind::NvvmIr => out.serialize_field("ptx_isa", &self.version)?,
            _ => out.serialize_field("cubin_version", &self.version)?,
        }
        out.serialize_field("compression", &self.compression)?;
        out.serialize_field("concatenated", &self.stored.part.is_some())?;
        out.serialize_field("offset", &self.offset)?;
        let stored_size = self.stored.part.map_or(self.stored.size, |p| p.size);
        out.serialize_field("stored_size", &stored_size)?;
        out.end()
    }
}

impl Entry {
    /// `sm_90a` for SASS, `compute_90a` for PTX and NVVM IR.
    pub fn arch_name(&self) -> String {
        match self.kind {
            EntryKind::Sass | EntryKind::Other(_) => self.arch.sm_name(),
            EntryKind::Ptx | EntryKind::NvvmIr => self.arch.compute_name(),
        }
    }
}

/// Where in the file a container was found.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case", tag = "by", content = "section")]
pub enum Origin {
    /// Walking a section that holds containers back to back (`.nv_fatbin`, `__nv_relfatbin`).
    Section(String),
    /// A `.nvFatBinSegment` wrapper's address, outside the sections walked.
    Wrapper(String),
    /// The container magic elsewhere (a byte array in `.rodata` or `.data`): code the program
    /// loads itself (`cuModuleLoadData`), which NVIDIA's `cuobjdump` does not list.
    Scan(String),
    /// The file is itself a fat binary (`.fatbin`).
    File,
}

/// What a container is for: loaded by the driver, or input for a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Purpose {
    /// In a linked program or library (or a `.fatbin` file): the driver loads it.
    Loadable,
    /// `__nv_relfatbin` in a linked program or library: relocatable device code kept for device
    /// linking (`nvcc -dlink`); the driver is handed only `.nv_fatbin` through the registration
    /// wrappers, so it never loads or JITs this.
    DeviceLinkInput,
    /// In a relocatable object (`.o`, or a `.a` member): input for the link that makes a
    /// program, not loaded as it is.
    LinkInput,
}

/// One fat binary: the unit the driver loads as a module, choosing one of its entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Container {
    /// Offset of its header in the file.
    pub offset: u64,
    /// Its size, header included.
    pub size: u64,
    /// Where it was found.
    pub origin: Origin,
    /// Loaded by the driver, or link input.
    pub purpose: Purpose,
    /// The `.a` member holding it, for archives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// Its entries, in file order.
    pub entries: Vec<Entry>,
}

/// Why a file's GPU code could not be read: one line, naming the offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FatbinError {
    /// A header runs past the end of its container, section or file: what was being read,
    /// its offset in the file.
    #[error("fat binary truncated: {0} at byte {1} runs past its end")]
    Truncated(&'static str, u64),
    /// A field holds a value no container can have: what is wrong, the offset of the header
    /// holding it.
    #[error("malformed fat binary at byte {1}: {0}")]
    Malformed(String, u64),
    /// The file's ELF or archive structure could not be read.
    #[error("cannot read the file's structure: {0}")]
    Container(String),
}

impl FatbinError {
    /// The file offset the error is at (0 for errors of the file's structure).
    pub fn offset(&self) -> u64 {
        match self {
            FatbinError::Truncated(_, at) | FatbinError::Malformed(_, at) => *at,
            FatbinError::Container(_) => 0,
        }
    }
}

/// Every container of one file, in file order (archive members in member order).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GpuCode {
    /// The containers: one module each.
    pub containers: Vec<Container>,
}

impl GpuCode {
    /// Every entry of every container, in order.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.containers.iter().flat_map(|c| c.entries.iter())
    }
}
