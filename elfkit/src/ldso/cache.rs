//! The loader's cache, `ld.so.cache` (glibc's `elf/dl-cache.c`, `sysdeps/generic/dl-cache.h`),
//! read without running `ldconfig`, and looked up as `_dl_load_cache_lookup` does.
//!
//! Only the current format is read (glibc ≥ 2.32 writes it alone; older glibc appended it
//! after the legacy `ld.so-1.7.0` table, which is skipped): a 48-byte header starting with
//! `glibc-ld.so.cache1.1` (`nlibs` at 20, `extension_offset` at 32), then 24-byte entries
//! `{flags: i32, key: u32, value: u32, osversion: u32, hwcap: u64}` whose key (the soname) and
//! value (the path) are offsets of NUL-terminated strings from the start of the new-format
//! table. An entry whose `hwcap` has bit 62 set (and nothing else in its upper half but the
//! ISA-level bits) belongs to a glibc-hwcaps subdirectory: its low 32 bits index the
//! extension section of tag 1, an array of string offsets naming the subdirectories. Every
//! offset is bounds-checked: a damaged cache is an error, never a panic.

use super::ElfHost;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const MAGIC_NEW: &[u8] = b"glibc-ld.so.cache1.1";
const MAGIC_OLD: &[u8] = b"ld.so-1.7.0";
const HEADER_LEN: usize = 48;
const ENTRY_LEN: usize = 24;
const EXTENSION_MAGIC: u32 = 0xeaa4_2174; // (uint32_t) -358342284
const EXTENSION_TAG_GLIBC_HWCAPS: u32 = 1;
const HWCAP_EXTENSION: u64 = 1 << 62;
const ISA_LEVEL_MASK: u64 = (1 << 10) - 1;

/// `FLAG_ELF_LIBC6`: an ELF library for glibc.
pub const FLAG_ELF_LIBC6: i32 = 0x0003;
/// `FLAG_X8664_LIB64`.
pub const FLAG_X8664_LIB64: i32 = 0x0300;
/// `FLAG_AARCH64_LIB64`.
pub const FLAG_AARCH64_LIB64: i32 = 0x0a00;

/// The most bytes of a cache read (real ones are a few hundred KiB).
pub const MAX_CACHE_BYTES: u64 = 64 << 20;

/// Why bytes are not an `ld.so.cache` this reader can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// Neither magic.
    #[error("not an ld.so.cache (unknown magic)")]
    Magic,
    /// The legacy table's header is cut short.
    #[error("truncated legacy header")]
    LegacyHeader,
    /// The legacy table's entry count overflows its size.
    #[error("legacy table size overflows")]
    LegacySize,
    /// A legacy table without the current one after it.
    #[error("legacy-only ld.so.cache (no glibc-ld.so.cache1.1 table)")]
    LegacyOnly,
    /// The current table's header is cut short.
    #[error("truncated header")]
    Header,
    /// The header claims more entries than the file holds.
    #[error("header claims {0} entries, more than the file holds")]
    Entries(usize),
    /// An entry is cut short.
    #[error("truncated entry")]
    Entry,
    /// An entry's soname offset names no string.
    #[error("bad name offset {0}")]
    Name(usize),
    /// An entry's path offset names no string.
    #[error("bad path offset {0}")]
    Path(usize),
}

/// One library the cache knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    /// The soname, e.g. `libcuda.so.1`.
    pub soname: Vec<u8>,
    /// Where it is, e.g. `/usr/lib/x86_64-linux-gnu/libcuda.so.1`.
    pub path: PathBuf,
    /// The entry's flags (type and architecture).
    pub flags: i32,
    /// The glibc-hwcaps subdirectory it was found in (`x86-64-v3`), for such entries.
    pub glibc_hwcaps: Option<String>,
    /// A legacy hwcaps entry (`hwcap` set without the extension bit), which glibc ≥ 2.37
    /// skips.
    pub legacy_hwcap: bool,
}

/// A parsed cache: its entries in file order (sorted by name, as `ldconfig` writes them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cache {
    /// The entries.
    pub entries: Vec<CacheEntry>,
}

/// The flags of libraries for this process's machine (`_DL_CACHE_DEFAULT_ID`), when known.
pub fn native_flags() -> Option<i32> {
    default_flags(ElfHost::native())
}

/// The cache flags of `elf`'s libraries (`_DL_CACHE_DEFAULT_ID`), where glibc defines them.
pub fn default_flags(elf: ElfHost) -> Option<i32> {
    elf.x86_64_or_aarch64(FLAG_X8664_LIB64, FLAG_AARCH64_LIB64)
        .map(|machine| FLAG_ELF_LIBC6 | machine)
}

/// Whether a cache entry with `flags` is for `elf` (`_dl_cache_check_flags`: the machine's
/// own flags, or on machines without any, `FLAG_ELF` or `FLAG_ELF_LIBC6`).
pub fn flags_match(elf: ElfHost, flags: i32) -> bool {
    default_flags(elf).map_or(flags == 1 || flags == 3, |f| flags == f)
}

impl Cache {
    /// Parses a whole cache file.
    pub fn parse(bytes: &[u8]) -> Result<Cache, CacheError> {
        let table = if bytes.starts_with(MAGIC_NEW) {
            bytes
        } else if bytes.starts_with(MAGIC_OLD) {
            // Legacy table: magic padded to 12 bytes, nlibs, then 12-byte entries; the new
            // table follows, 8-byte aligned.
            let nlibs = read_u32(bytes, 12).ok_or(CacheError::LegacyHeader)? as usize;
            let end = nlibs
                .checked_mul(12)
                .and_then(|n| n.checked_add(16))
                .ok_or(CacheError::LegacySize)?;
            let start = end.div_ceil(8) * 8;
            (bytes.get(start..))
                .filter(|rest| rest.starts_with(MAGIC_NEW))
                .ok_or(CacheError::LegacyOnly)?
        } else {
            return Err(CacheError::Magic);
        };
        let nlibs = read_u32(table, 20).ok_or(CacheError::Header)? as usize;
        let entries_end = nlibs
            .checked_mul(ENTRY_LEN)
            .and_then(|n| n.checked_add(HEADER_LEN))
            .filter(|end| *end <= table.len())
            .ok_or(CacheError::Entries(nlibs))?;
        let hwcaps_names = hwcaps_names(bytes, table).unwrap_or_default();
        let mut entries = Vec::with_capacity(nlibs);
        for at in (HEADER_LEN..entries_end).step_by(ENTRY_LEN) {
            let word = |at: usize| read_u32(table, at).ok_or(CacheError::Entry);
            let flags = word(at)? as i32;
            let key = word(at + 4)? as usize;
            let value = word(at + 8)? as usize;
            let hwcap = u64::from(word(at + 16)?) | (u64::from(word(at + 20)?) << 32);
            let soname = c_string(table, key).ok_or(CacheError::Name(key))?;
            let path = c_string(table, value).ok_or(CacheError::Path(value))?;
            let extension = (hwcap >> 32) & !ISA_LEVEL_MASK == HWCAP_EXTENSION >> 32;
            let glibc_hwcaps = extension.then(|| {
                let index = (hwcap & 0xffff_ffff) as usize;
                // An index outside the section names nothing the loader searches.
                hwcaps_names.get(index).cloned().unwrap_or_default()
            });
            entries.push(CacheEntry {
                soname: soname.to_vec(),
                path: PathBuf::from(OsStr::from_bytes(path)),
                flags,
                glibc_hwcaps,
                legacy_hwcap: !extension && hwcap != 0,
            });
        }
        Ok(Cache { entries })
    }

    /// The path the cache gives `name` for a loader of `elf` searching the glibc-hwcaps
    /// subdirectories `glibc_hwcaps` (best first), as `search_cache` picks it: among the
    /// entries of that name with the machine's flags, the glibc-hwcaps entry of the highest
    /// priority searched, else the first plain entry.
    pub fn lookup(&self, name: &str, elf: ElfHost, glibc_hwcaps: &[String]) -> Option<&Path> {
        let mut best: Option<(&Path, Option<usize>)> = None;
        for entry in self.entries.iter().filter(|e| e.soname == name.as_bytes()) {
            if !flags_match(elf, entry.flags) {
                continue;
            }
            match &entry.glibc_hwcaps {
                // Priority: the position among the subdirectories searched (0 best).
                Some(sub) => match glibc_hwcaps.iter().position(|s| s == sub) {
                    Some(priority) if best.is_none_or(|(_, p)| p.is_some_and(|p| priority < p)) => {
                        best = Some((&entry.path, Some(priority)));
                    }
                    _ => {}
                },
                None if best.is_some() => break,
                None if entry.legacy_hwcap => {}
                None => {
                    best = Some((&entry.path, None));
                    if Some(entry.flags) == default_flags(elf) {
                        break;
                    }
                }
            }
        }
        best.map(|(p, _)| p)
    }
}

/// The names of the glibc-hwcaps subdirectories in the cache's extension (none when it has
/// none or it is damaged: glibc then ignores those entries too).
fn hwcaps_names(file: &[u8], table: &[u8]) -> Option<Vec<String>> {
    let offset = read_u32(table, 32)
        .map(|o| o as usize)
        .filter(|o| *o != 0)?;
    if offset % 4 != 0 || read_u32(file, offset)? != EXTENSION_MAGIC {
        return None;
    }
    let count = read_u32(file, offset + 4)? as usize;
    for i in 0..count.min(1 << 16) {
        let at = offset.checked_add(8)?.checked_add(i.checked_mul(16)?)?;
        if read_u32(file, at)? != EXTENSION_TAG_GLIBC_HWCAPS {
            continue;
        }
        let start = read_u32(file, at + 8)? as usize;
        let size = read_u32(file, at + 12)? as usize;
        let section = file.get(start..start.checked_add(size)?)?;
        if size == 0 || size % 4 != 0 || start % 4 != 0 {
            return None;
        }
        return section
            .chunks_exact(4)
            .map(|w| c_string(file, read_u32(w, 0)? as usize))
            .map(|s| Some(String::from_utf8_lossy(s?).into_owned()))
            .collect();
    }
    None
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

fn c_string(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let rest = bytes.get(at..)?;
    rest.get(..memchr::memchr(0, rest)?)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An x86-64 loader's ELF files.
    pub(crate) const X86_64: ElfHost = ElfHost {
        class64: true,
        little_endian: true,
        machine: 62,
    };

    /// Builds a new-format cache holding `entries` (soname, path, flags, glibc-hwcaps name),
    /// with the extension section when one names a subdirectory.
    pub(crate) fn build(entries: &[(&str, &str, i32, Option<&str>)]) -> Vec<u8> {
        let names: Vec<&str> = {
            let mut n: Vec<&str> = entries.iter().filter_map(|e| e.3).collect();
            n.sort();
            n.dedup();
            n
        };
        let strings_at = HEADER_LEN + ENTRY_LEN * entries.len();
        let mut strings = Vec::new();
        let string = |s: &str, strings: &mut Vec<u8>| {
            let at = strings_at + strings.len();
            strings.extend_from_slice(s.as_bytes());
            strings.push(0);
            at as u32
        };
        let name_offsets: Vec<u32> = names.iter().map(|n| string(n, &mut strings)).collect();
        let mut table = Vec::new();
        for (name, path, flags, sub) in entries {
            let key = string(name, &mut strings);
            let value = string(path, &mut strings);
            let hwcap = match sub {
                Some(s) => HWCAP_EXTENSION | names.iter().position(|n| n == s).unwrap() as u64,
                None => 0,
            };
            table.extend_from_slice(&flags.to_ne_bytes());
            table.extend_from_slice(&key.to_ne_bytes());
            table.extend_from_slice(&value.to_ne_bytes());
            table.extend_from_slice(&0u32.to_ne_bytes());
            table.extend_from_slice(&hwcap.to_ne_bytes());
        }
        let mut out = MAGIC_NEW.to_vec();
        out.extend_from_slice(&(entries.len() as u32).to_ne_bytes());
        out.extend_from_slice(&(strings.len() as u32).to_ne_bytes());
        out.resize(HEADER_LEN, 0);
        out.extend_from_slice(&table);
        out.extend_from_slice(&strings);
        if !names.is_empty() {
            out.resize(out.len().div_ceil(4) * 4, 0);
            let ext = out.len() as u32;
            out[32..36].copy_from_slice(&ext.to_ne_bytes());
            let section = ext + 8 + 16;
            for w in [EXTENSION_MAGIC, 1, EXTENSION_TAG_GLIBC_HWCAPS, 0, section] {
                out.extend_from_slice(&w.to_ne_bytes());
            }
            out.extend_from_slice(&(4 * name_offsets.len() as u32).to_ne_bytes());
            for o in name_offsets {
                out.extend_from_slice(&o.to_ne_bytes());
            }
        }
        out
    }

    #[test]
    fn reads_what_it_is_given() {
        let bytes = build(&[("libcuda.so.1", "/usr/lib/x/libcuda.so.1", 0x303, None)]);
        let c = Cache::parse(&bytes).unwrap();
        assert_eq!(c.entries.len(), 1);
        assert_eq!(c.entries[0].soname, b"libcuda.so.1");
        assert_eq!(c.entries[0].path, PathBuf::from("/usr/lib/x/libcuda.so.1"));
        assert_eq!(c.entries[0].flags, 0x303);
        assert_eq!(c.entries[0].glibc_hwcaps, None);
    }

    #[test]
    fn damaged_caches_are_errors() {
        let bytes = build(&[(
            "libx.so.1",
            "/a/glibc-hwcaps/x86-64-v3/libx.so.1",
            0x303,
            Some("x86-64-v3"),
        )]);
        for end in 0..bytes.len() {
            let _ = Cache::parse(&bytes[..end]); // never panics
        }
        assert_eq!(Cache::parse(&bytes[..60]), Err(CacheError::Entries(1)));
        assert_eq!(Cache::parse(&bytes[..20]), Err(CacheError::Header));
        assert_eq!(Cache::parse(b"something else"), Err(CacheError::Magic));
        assert_eq!(Cache::parse(b"ld.so-1.7.0"), Err(CacheError::LegacyHeader));
        let mut huge = bytes.clone();
        huge[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(
            Cache::parse(&huge),
            Err(CacheError::Entries(u32::MAX as usize))
        );
        let mut lost = bytes.clone();
        lost[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(
            Cache::parse(&lost),
            Err(CacheError::Name(u32::MAX as usize))
        );
        assert_eq!(
            CacheError::Entries(7).to_string(),
            "header claims 7 entries, more than the file holds"
        );
    }

    #[test]
    fn agrees_with_ldconfig_on_this_machine() {
        let Ok(bytes) = std::fs::read("/etc/ld.so.cache") else {
            return; // not a glibc system
        };
        let ours = Cache::parse(&bytes).unwrap().entries;
        let Ok(out) = std::process::Command::new("ldconfig").arg("-p").output() else {
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let theirs: Vec<(String, String)> = text
            .lines()
            .skip(1)
            .filter_map(|l| {
                let (left, path) = l.trim().split_once(" => ")?;
                Some((left.split(' ').next()?.to_string(), path.to_string()))
            })
            .collect();
        assert_eq!(ours.len(), theirs.len());
        for ((name, path), e) in theirs.iter().zip(&ours) {
            assert_eq!(name.as_bytes(), e.soname.as_slice());
            assert_eq!(Path::new(path), e.path);
        }
    }

    #[test]
    fn lookup_prefers_the_best_hwcaps_subdirectory_then_the_plain_entry() {
        let x86 = X86_64;
        let mut hwcaps = vec!["x86-64-v3".to_string(), "x86-64-v2".to_string()];
        let bytes = build(&[
            (
                "libx.so.1",
                "/a/glibc-hwcaps/x86-64-v2/libx.so.1",
                0x303,
                Some("x86-64-v2"),
            ),
            (
                "libx.so.1",
                "/a/glibc-hwcaps/x86-64-v3/libx.so.1",
                0x303,
                Some("x86-64-v3"),
            ),
            (
                "libx.so.1",
                "/a/glibc-hwcaps/x86-64-v4/libx.so.1",
                0x303,
                Some("x86-64-v4"),
            ),
            ("libx.so.1", "/lib32/libx.so.1", 0x003, None),
            ("libx.so.1", "/a/libx.so.1", 0x303, None),
        ]);
        let c = Cache::parse(&bytes).unwrap();
        assert_eq!(c.entries[2].glibc_hwcaps.as_deref(), Some("x86-64-v4"));
        let got = c.lookup("libx.so.1", x86, &hwcaps);
        assert_eq!(got, Some(Path::new("/a/glibc-hwcaps/x86-64-v3/libx.so.1")));
        hwcaps.clear();
        assert_eq!(
            c.lookup("libx.so.1", x86, &hwcaps),
            Some(Path::new("/a/libx.so.1"))
        );
        assert_eq!(c.lookup("liby.so.1", x86, &hwcaps), None);
    }
}
