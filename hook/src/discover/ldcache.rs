//! Reading the dynamic loader's cache, `/etc/ld.so.cache`, without running `ldconfig`.
//!
//! Only the current format is read (glibc ≥ 2.32 writes it alone; older glibc appended it
//! after the legacy `ld.so-1.7.0` table, which is skipped): a 48-byte header starting with
//! `glibc-ld.so.cache1.1`, then 24-byte entries `{flags: i32, key: u32, value: u32,
//! osversion: u32, hwcap: u64}`, whose key (the soname) and value (the path) are offsets of
//! NUL-terminated strings from the start of the new-format table. Every offset is bounds-checked:
//! a damaged cache is an error, never a panic.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

const MAGIC_NEW: &[u8] = b"glibc-ld.so.cache1.1";
const MAGIC_OLD: &[u8] = b"ld.so-1.7.0";
const HEADER_LEN: usize = 48;
const ENTRY_LEN: usize = 24;

/// `FLAG_ELF_LIBC6`: an ELF library for glibc.
pub const FLAG_ELF_LIBC6: i32 = 0x0003;
/// `FLAG_X8664_LIB64`.
pub const FLAG_X8664_LIB64: i32 = 0x0300;
/// `FLAG_AARCH64_LIB64`.
pub const FLAG_AARCH64_LIB64: i32 = 0x0a00;

/// One library the loader knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    /// The soname, e.g. `libcuda.so.1`.
    pub soname: Vec<u8>,
    /// Where it is, e.g. `/usr/lib/x86_64-linux-gnu/libcuda.so.1`.
    pub path: PathBuf,
    /// The entry's flags (type and architecture).
    pub flags: i32,
}

/// The flags of libraries for this machine's architecture, when known.
pub fn native_flags() -> Option<i32> {
    match std::env::consts::ARCH {
        "x86_64" => Some(FLAG_ELF_LIBC6 | FLAG_X8664_LIB64),
        "aarch64" => Some(FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64),
        _ => None,
    }
}

/// Parses a whole cache file.
pub fn parse(bytes: &[u8]) -> Result<Vec<CacheEntry>, String> {
    let table = if bytes.starts_with(MAGIC_NEW) {
        bytes
    } else if bytes.starts_with(MAGIC_OLD) {
        // Legacy table: magic padded to 12 bytes, nlibs, then 12-byte entries; the new
        // table follows, 8-byte aligned.
        let nlibs = read_u32(bytes, 12).ok_or("truncated legacy header")? as usize;
        let end = nlibs
            .checked_mul(12)
            .and_then(|n| n.checked_add(16))
            .ok_or("legacy table size overflows")?;
        let start = end.div_ceil(8) * 8;
        match bytes.get(start..) {
            Some(rest) if rest.starts_with(MAGIC_NEW) => rest,
            _ => return Err("legacy-only ld.so.cache (no glibc-ld.so.cache1.1 table)".into()),
        }
    } else {
        return Err("not an ld.so.cache (unknown magic)".into());
    };
    let nlibs = read_u32(table, 20).ok_or("truncated header")? as usize;
    let entries_end = nlibs
        .checked_mul(ENTRY_LEN)
        .and_then(|n| n.checked_add(HEADER_LEN))
        .filter(|end| *end <= table.len())
        .ok_or_else(|| format!("header claims {nlibs} entries, more than the file holds"))?;
    let mut out = Vec::with_capacity(nlibs);
    for at in (HEADER_LEN..entries_end).step_by(ENTRY_LEN) {
        let flags = read_u32(table, at).ok_or("truncated entry")? as i32;
        let key = read_u32(table, at + 4).ok_or("truncated entry")? as usize;
        let value = read_u32(table, at + 8).ok_or("truncated entry")? as usize;
        let soname = c_string(table, key).ok_or_else(|| format!("bad name offset {key}"))?;
        let path = c_string(table, value).ok_or_else(|| format!("bad path offset {value}"))?;
        out.push(CacheEntry {
            soname: soname.to_vec(),
            path: PathBuf::from(OsStr::from_bytes(path)),
            flags,
        });
    }
    Ok(out)
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

fn c_string(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let rest = bytes.get(at..)?;
    let end = crate::bytes::find(0, rest)?;
    Some(&rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a new-format cache holding `entries` (soname, path, flags).
    pub(crate) fn build(entries: &[(&str, &str, i32)]) -> Vec<u8> {
        let strings_at = HEADER_LEN + ENTRY_LEN * entries.len();
        let mut strings = Vec::new();
        let mut table = Vec::new();
        for (name, path, flags) in entries {
            let key = strings_at + strings.len();
            strings.extend_from_slice(name.as_bytes());
            strings.push(0);
            let value = strings_at + strings.len();
            strings.extend_from_slice(path.as_bytes());
            strings.push(0);
            table.extend_from_slice(&flags.to_ne_bytes());
            table.extend_from_slice(&(key as u32).to_ne_bytes());
            table.extend_from_slice(&(value as u32).to_ne_bytes());
            table.extend_from_slice(&[0; 12]);
        }
        let mut out = MAGIC_NEW.to_vec();
        out.extend_from_slice(&(entries.len() as u32).to_ne_bytes());
        out.extend_from_slice(&(strings.len() as u32).to_ne_bytes());
        out.resize(HEADER_LEN, 0);
        out.extend_from_slice(&table);
        out.extend_from_slice(&strings);
        out
    }

    #[test]
    fn reads_what_it_is_given() {
        let bytes = build(&[("libcuda.so.1", "/usr/lib/x/libcuda.so.1", 0x303)]);
        let e = parse(&bytes).unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].soname, b"libcuda.so.1");
        assert_eq!(e[0].path, PathBuf::from("/usr/lib/x/libcuda.so.1"));
        assert_eq!(e[0].flags, 0x303);
    }

    #[test]
    fn damaged_caches_are_errors() {
        let bytes = build(&[("libcuda.so.1", "/usr/lib/x/libcuda.so.1", 0x303)]);
        for end in 0..bytes.len() {
            let _ = parse(&bytes[..end]); // never panics
        }
        assert!(parse(&bytes[..60]).is_err());
        assert!(parse(b"something else").is_err());
        let mut huge = bytes.clone();
        huge[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(parse(&huge).is_err());
    }

    #[test]
    fn agrees_with_ldconfig_on_this_machine() {
        let Ok(bytes) = std::fs::read("/etc/ld.so.cache") else {
            return; // not a glibc system
        };
        let ours = parse(&bytes).unwrap();
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
    use std::path::Path;
}
