//! One container's header and its entries' headers, from bytes. Payloads are never read:
//! headers are never compressed, so listing needs no decompression.
//!
//! Layout (little-endian; `docs/fatbin.md`):
//! - container, 16 bytes: `u32 magic 0xBA55ED50, u16 version 1, u16 header size 16, u64 size of
//!   the entries that follow`;
//! - entry, `header size` bytes (64 at least): `u16 kind, u16 0x0101, u32 header size, u64
//!   payload size, u32 compressed size, u32 options offset, u16 minor, u16 major, u32 arch, u32
//!   name offset, u32 name length, u64 flags, u64 0, u64 uncompressed size`; the next entry
//!   starts after its header and payload;
//! - a CUDA 13 concatenated entry (kind 0x100) packs several images in one payload: at its
//!   options offset, `u32 count, u32 table bytes` (those 8 included), then `count` part
//!   headers laid out like an entry header, with the part's offset in the unpacked payload
//!   where the header size is (so a part's own size comes from its options: [`part_size`]).

use super::{
    flags, Arch, Capability, Compression, Entry, EntryKind, FatbinError, Part, Stored, Variant,
    Version,
};

/// The first four bytes of a container.
pub const CONTAINER_MAGIC: u32 = 0xBA55_ED50;
/// The container header's size.
pub const CONTAINER_HEADER_SIZE: usize = 16;
/// The smallest entry header.
pub const ENTRY_HEADER_MIN: usize = 64;
/// The entry kind of a CUDA 13 concatenated entry.
pub const KIND_CONCATENATED: u16 = 0x100;

/// The little-endian `u16` at `at`, when `data` holds it (so do [`u32_at`] and [`u64_at`]).
pub(super) fn u16_at(data: &[u8], at: usize) -> Option<u16> {
    let end = at.checked_add(2)?;
    Some(u16::from_le_bytes(data.get(at..end)?.try_into().ok()?))
}

pub(super) fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    let end = at.checked_add(4)?;
    Some(u32::from_le_bytes(data.get(at..end)?.try_into().ok()?))
}

pub(super) fn u64_at(data: &[u8], at: usize) -> Option<u64> {
    let end = at.checked_add(8)?;
    Some(u64::from_le_bytes(data.get(at..end)?.try_into().ok()?))
}

/// The `len` bytes at `at` of `data`, when it holds them.
pub(super) fn bytes_at(data: &[u8], at: u64, len: u64) -> Option<&[u8]> {
    let at = usize::try_from(at).ok()?;
    data.get(at..at.checked_add(usize::try_from(len).ok()?)?)
}

/// Whether a container's magic starts at `at`.
pub fn has_magic(data: &[u8], at: usize) -> bool {
    u32_at(data, at) == Some(CONTAINER_MAGIC)
}

/// The fields of one entry (or part) header that say what it is.
struct Header {
    kind: u16,
    /// The header size (a part: its offset in the unpacked payload).
    size: u32,
    payload: u64,
    compressed: u32,
    options_offset: u32,
    version: Version,
    arch: u32,
    flags: u64,
    unpacked: u64,
}

impl Header {
    /// The entry this header describes, its header at file offset `offset`, its bytes where
    /// `stored` says.
    fn entry(&self, compression: Compression, offset: u64, stored: Stored) -> Entry {
        let variant = match self.flags {
            f if f & flags::ARCH_SPECIFIC != 0 => Variant::ArchSpecific,
            f if f & flags::FAMILY != 0 => Variant::Family,
            _ => Variant::Plain,
        };
        let capability = Capability::from_sm(self.arch);
        Entry {
            // The header's `kind` field: 1 PTX, 2 ELF, 8 NVVM IR.
            kind: match self.kind {
                1 => EntryKind::Ptx,
                2 => EntryKind::Sass,
                8 => EntryKind::NvvmIr,
                other => EntryKind::Other(other),
            },
            arch: Arch {
                capability,
                variant,
            },
            version: self.version,
            compression,
            offset,
            stored,
        }
    }

    /// Where the payload of the entry whose header is at file offset `at` lies.
    fn stored(&self, at: u64) -> Stored {
        Stored {
            offset: at + u64::from(self.size),
            size: self.payload,
            compressed: self.compressed,
            unpacked: self.unpacked,
            part: None,
        }
    }
}

fn header_at(data: &[u8], at: usize) -> Option<Header> {
    data.get(at..at.checked_add(ENTRY_HEADER_MIN)?)?;
    Some(Header {
        kind: u16_at(data, at)?,
        size: u32_at(data, at + 4)?,
        payload: u64_at(data, at + 8)?,
        compressed: u32_at(data, at + 16)?,
        options_offset: u32_at(data, at + 20)?,
        version: Version::new(u16_at(data, at + 26)?, u16_at(data, at + 24)?),
        arch: u32_at(data, at + 28)?,
        flags: u64_at(data, at + 40)?,
        unpacked: u64_at(data, at + 56)?,
    })
}

/// One container read from `data` at `at`: its entries and the offset just past it. `base` is
/// added to every offset reported (the position of `data` in the file).
pub fn container_at(data: &[u8], at: usize, base: u64) -> Result<(Vec<Entry>, usize), FatbinError> {
    let pos = |p: usize| base + p as u64;
    let truncated = |what, p| FatbinError::Truncated(what, pos(p));
    let malformed = |what: String, p| FatbinError::Malformed(what, pos(p));
    if !has_magic(data, at) {
        return Err(malformed("no container magic 0xBA55ED50".into(), at));
    }
    let version = u16_at(data, at + 4).ok_or(truncated("container header", at))?;
    let header_size = u16_at(data, at + 6).ok_or(truncated("container header", at))?;
    let size = u64_at(data, at + 8).ok_or(truncated("container header", at))?;
    if version != 1 {
        return Err(malformed(format!("container version {version}, not 1"), at));
    }
    if usize::from(header_size) != CONTAINER_HEADER_SIZE {
        return Err(malformed(
            format!("container header size {header_size}, not 16"),
            at,
        ));
    }
    let start = at + CONTAINER_HEADER_SIZE;
    let end = usize::try_from(size)
        .ok()
        .and_then(|s| start.checked_add(s))
        .filter(|&e| e <= data.len())
        .ok_or(truncated("container", at))?;
    let mut entries = Vec::new();
    let mut p = start;
    while p < end {
        let h = header_at(&data[..end], p).ok_or(truncated("entry header", p))?;
        let header_size = h.size as usize;
        if header_size < ENTRY_HEADER_MIN {
            return Err(malformed(
                format!("entry header size {header_size}, under 64"),
                p,
            ));
        }
        let next = usize::try_from(h.payload)
            .ok()
            .and_then(|s| p.checked_add(header_size)?.checked_add(s))
            .filter(|&n| n <= end)
            .ok_or(truncated("entry", p))?;
        let compression = match (h.flags & flags::LZ4 != 0, h.flags & flags::ZSTD != 0) {
            (false, false) => Compression::None,
            (true, false) => Compression::Lz4,
            (false, true) => Compression::Zstd,
            (true, true) => Compression::Unknown,
        };
        if h.kind == KIND_CONCATENATED {
            parts(data, p, &h, compression, base, &mut entries)?;
        } else {
            entries.push(h.entry(compression, pos(p), h.stored(pos(p))));
        }
        p = next;
    }
    Ok((entries, end))
}

/// The parts of a concatenated entry at `p`, whose header `outer` says where they are listed.
fn parts(
    data: &[u8],
    p: usize,
    outer: &Header,
    compression: Compression,
    base: u64,
    entries: &mut Vec<Entry>,
) -> Result<(), FatbinError> {
    let at = base + p as u64;
    let malformed = |what: String| FatbinError::Malformed(what, at);
    let header_end = p + outer.size as usize;
    let list = p
        .checked_add(outer.options_offset as usize)
        .filter(|&l| l.checked_add(8).is_some_and(|e| e <= header_end))
        .ok_or_else(|| {
            malformed("concatenated entry's part list lies outside its header".into())
        })?;
    let count = u32_at(data, list).unwrap_or(0) as usize;
    let bytes = u32_at(data, list + 4).unwrap_or(0) as usize;
    let table_end = list
        .checked_add(bytes)
        .filter(|&e| e <= header_end && bytes >= 8)
        .ok_or_else(|| {
            malformed(format!(
                "concatenated entry's part table of {bytes} bytes does not fit its header"
            ))
        })?;
    let mut q = list + 8;
    for i in 0..count {
        let bad = || {
            malformed(format!(
                "concatenated entry's part {i} is not a part header"
            ))
        };
        let h = header_at(&data[..table_end], q).ok_or_else(bad)?;
        if u16_at(data, q + 2) != Some(0x0101) {
            return Err(bad());
        }
        let mut stored = outer.stored(at);
        stored.part = Some(Part {
            offset: u64::from(h.size),
            size: h.payload,
        });
        entries.push(h.entry(compression, at, stored));
        q = q
            .checked_add(part_size(&data[..table_end], q, &h).ok_or_else(bad)?)
            .ok_or_else(bad)?;
    }
    if q != table_end {
        return Err(malformed(format!(
            "concatenated entry's {count} part(s) fill {} of its table's {} bytes",
            q - list,
            bytes
        )));
    }
    Ok(())
}

/// The size of the part header at `q`: 64 bytes, or, when it has options, up to the end of its
/// option block (`u32 offset, u32 length` at its options offset, both from the part's start)
/// and 4 bytes more, rounded up to 8. Measured on `fatbinary` 13.5 `--concat` output: 64 for
/// a cubin without options, 80 for PTX, 112 to 120 for sm_100 and newer cubins.
fn part_size(table: &[u8], q: usize, h: &Header) -> Option<usize> {
    if h.options_offset == 0 {
        return Some(ENTRY_HEADER_MIN);
    }
    let pair = q.checked_add(h.options_offset as usize)?;
    let offset = u32_at(table, pair)? as usize;
    let length = u32_at(table, pair + 4)? as usize;
    let end = offset.checked_add(length)?.checked_add(4 + 7)? & !7;
    (end >= ENTRY_HEADER_MIN).then_some(end)
}

/// Every container of a region that holds them back to back (a `.nv_fatbin` or
/// `__nv_relfatbin` section, a `.fatbin` file), as `(offset in data, entries, end)`. Zero bytes
/// between containers are padding; anything else is an error.
pub fn containers_in(
    data: &[u8],
    base: u64,
) -> Result<Vec<(usize, Vec<Entry>, usize)>, FatbinError> {
    let mut out = Vec::new();
    let mut p = 0;
    while p < data.len() {
        if data[p] == 0 {
            p += 1;
            continue;
        }
        let (entries, end) = container_at(data, p, base)?;
        out.push((p, entries, end));
        p = end;
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An entry header as `fatbinary` writes it, with `payload` bytes after it.
    pub(crate) fn entry(
        kind: u16,
        arch: u32,
        major: u16,
        minor: u16,
        flags: u64,
        payload: usize,
    ) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[0..2].copy_from_slice(&kind.to_le_bytes());
        h[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
        h[4..8].copy_from_slice(&64u32.to_le_bytes());
        h[8..16].copy_from_slice(&(payload as u64).to_le_bytes());
        h[24..26].copy_from_slice(&minor.to_le_bytes());
        h[26..28].copy_from_slice(&major.to_le_bytes());
        h[28..32].copy_from_slice(&arch.to_le_bytes());
        h[40..48].copy_from_slice(&flags.to_le_bytes());
        h.resize(64 + payload, 0xAB);
        h
    }

    pub(crate) fn container(entries: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = entries.concat();
        let mut c = Vec::new();
        c.extend_from_slice(&CONTAINER_MAGIC.to_le_bytes());
        c.extend_from_slice(&1u16.to_le_bytes());
        c.extend_from_slice(&16u16.to_le_bytes());
        c.extend_from_slice(&(body.len() as u64).to_le_bytes());
        c.extend(body);
        c
    }

    #[test]
    fn entries_give_kind_arch_variant_version_and_compression() {
        let c = container(&[
            entry(2, 90, 1, 8, 0x11 | super::flags::ARCH_SPECIFIC, 8),
            entry(1, 100, 9, 5, 0x8011 | super::flags::FAMILY, 16),
            entry(2, 75, 1, 8, 0x2011, 0),
        ]);
        let (entries, end) = container_at(&c, 0, 1000).unwrap();
        assert_eq!(end, c.len());
        let names: Vec<_> = entries
            .iter()
            .map(|e| (e.kind, e.arch_name(), e.version.to_string(), e.compression))
            .collect();
        assert_eq!(
            names,
            [
                (
                    EntryKind::Sass,
                    "sm_90a".to_string(),
                    "1.8".to_string(),
                    Compression::None
                ),
                (
                    EntryKind::Ptx,
                    "compute_100f".to_string(),
                    "9.5".to_string(),
                    Compression::Zstd
                ),
                (
                    EntryKind::Sass,
                    "sm_75".to_string(),
                    "1.8".to_string(),
                    Compression::Lz4
                ),
            ]
        );
        assert_eq!(entries[1].offset, 1000 + 16 + 72);
    }

    #[test]
    fn every_truncation_is_an_error_never_a_panic() {
        let c = container(&[entry(2, 90, 1, 8, 0x11, 40), entry(1, 90, 9, 0, 0x11, 40)]);
        for len in 0..c.len() {
            assert!(container_at(&c[..len], 0, 0).is_err(), "{len}");
        }
        assert!(container_at(&c, 0, 0).is_ok());
    }

    #[test]
    fn sizes_past_the_end_and_tiny_headers_are_refused() {
        let mut c = container(&[entry(2, 90, 1, 8, 0x11, 0)]);
        c[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(
            container_at(&c, 0, 0).unwrap_err().to_string(),
            "fat binary truncated: container at byte 0 runs past its end"
        );
        let mut c = container(&[entry(2, 90, 1, 8, 0x11, 0)]);
        c[16 + 4..16 + 8].copy_from_slice(&0u32.to_le_bytes());
        let err = container_at(&c, 0, 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "malformed fat binary at byte 16: entry header size 0, under 64"
        );
        let mut c = container(&[entry(2, 90, 1, 8, 0x11, 0)]);
        c[16 + 8..16 + 16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(container_at(&c, 0, 0).is_err());
    }

    #[test]
    fn back_to_back_containers_skip_zero_padding() {
        let mut region = container(&[entry(2, 80, 1, 8, 0x11, 4)]);
        region.extend_from_slice(&[0; 4]);
        region.extend(container(&[entry(2, 90, 1, 8, 0x11, 0)]));
        region.extend_from_slice(&[0; 8]);
        let found = containers_in(&region, 0).unwrap();
        assert_eq!(found.len(), 2);
        region.push(7);
        assert!(containers_in(&region, 0).is_err());
    }
}
