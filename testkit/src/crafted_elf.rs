//! ELF files that lie to readers which trust the wrong headers, as an attacker would craft them.
//!
//! The kernel and `ld.so` read a program's interpreter and dynamic array from the *program*
//! headers, and the dynamic array at `PT_DYNAMIC`'s address (`p_vaddr`); section headers and
//! `PT_DYNAMIC`'s file offset are ignored by both. [`lie_about_dependencies`] appends a second,
//! false dynamic array and string table to a real 64-bit little-endian ELF file and points the
//! `.dynamic` and `.dynstr` section headers and `PT_DYNAMIC`'s `p_offset`/`p_filesz` at it. The
//! file still runs exactly as before; only a reader that believes the lie sees the false names.

use std::path::Path;

const SHT_DYNAMIC: u32 = 6;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_RUNPATH: u64 = 29;

fn u16_at(b: &[u8], at: usize) -> usize {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap()) as usize
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Rewrites the ELF file at `path` (64-bit, little-endian, with a `.dynamic` section) so that
/// its section headers and `PT_DYNAMIC`'s file offset describe a dynamic array that needs
/// `needed` (and searches `runpath`, when given), while its program headers' addresses, which
/// the loader follows, still lead to the real one.
pub fn lie_about_dependencies(
    path: &Path,
    needed: &[&str],
    runpath: Option<&str>,
) -> std::io::Result<()> {
    let mut elf = std::fs::read(path)?;
    let bad = |what: &str| std::io::Error::other(format!("{}: {what}", path.display()));
    if !elf.starts_with(b"\x7fELF\x02\x01") {
        return Err(bad("not a 64-bit little-endian ELF file"));
    }
    // The false strings, then the false array, appended 8-byte aligned.
    let mut strings = vec![0u8];
    let mut entries = Vec::new();
    for name in needed {
        entries.push((DT_NEEDED, strings.len() as u64));
        strings.extend_from_slice(name.as_bytes());
        strings.push(0);
    }
    if let Some(r) = runpath {
        entries.push((DT_RUNPATH, strings.len() as u64));
        strings.extend_from_slice(r.as_bytes());
        strings.push(0);
    }
    entries.push((DT_NULL, 0));
    while elf.len() % 8 != 0 {
        elf.push(0);
    }
    let strings_at = elf.len() as u64;
    elf.extend_from_slice(&strings);
    while elf.len() % 8 != 0 {
        elf.push(0);
    }
    let dynamic_at = elf.len() as u64;
    for (tag, value) in &entries {
        elf.extend_from_slice(&tag.to_le_bytes());
        elf.extend_from_slice(&value.to_le_bytes());
    }
    let dynamic_size = (entries.len() * 16) as u64;

    let (shoff, shentsize, shnum) = (
        u64_at(&elf, 0x28) as usize,
        u16_at(&elf, 0x3a),
        u16_at(&elf, 0x3c),
    );
    let dynamic_section = (0..shnum)
        .map(|i| shoff + i * shentsize)
        .find(|&sh| u32_at(&elf, sh + 4) == SHT_DYNAMIC)
        .ok_or_else(|| bad("no .dynamic section"))?;
    let link = u32_at(&elf, dynamic_section + 0x28) as usize;
    let strings_section = shoff + link * shentsize;
    put_u64(&mut elf, dynamic_section + 0x18, dynamic_at);
    put_u64(&mut elf, dynamic_section + 0x20, dynamic_size);
    put_u64(&mut elf, strings_section + 0x18, strings_at);
    put_u64(&mut elf, strings_section + 0x20, strings.len() as u64);

    let (phoff, phentsize, phnum) = (
        u64_at(&elf, 0x20) as usize,
        u16_at(&elf, 0x36),
        u16_at(&elf, 0x38),
    );
    let dynamic_segment = (0..phnum)
        .map(|i| phoff + i * phentsize)
        .find(|&ph| u32_at(&elf, ph) == PT_DYNAMIC)
        .ok_or_else(|| bad("no PT_DYNAMIC"))?;
    put_u64(&mut elf, dynamic_segment + 0x08, dynamic_at);
    put_u64(&mut elf, dynamic_segment + 0x20, dynamic_size);
    // Written in place, so the file keeps its mode (an executable stays executable).
    std::fs::write(path, &elf)
}
