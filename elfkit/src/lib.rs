//! ELF and Nix store helpers for cuda-sandbox, written once: what an ELF file asks of the
//! dynamic loader (32- and 64-bit, either byte order, through `object`), the
//! `.note.cuda.fwd_compatibility` note of a `cuda_compat` libcuda, and store-path arithmetic.
//!
//! Used by the hook; meant to replace the runner's own ELF reader and store helpers
//! (`runner/src/lint.rs`) when that crate adopts it. Reads bytes it is given and paths as text:
//! it touches no file.

use object::elf;
use object::read::elf::{Dyn, FileHeader, ProgramHeader};
use object::Endianness;
use std::path::{Component, Path, PathBuf};

/// What one ELF file asks of the loader.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamicInfo {
    /// `PT_INTERP`, for executables.
    pub interpreter: Option<PathBuf>,
    /// `DT_NEEDED` names.
    pub needed: Vec<String>,
    /// `DT_RUNPATH` (or `DT_RPATH` when there is no runpath), split at `:`.
    pub runpath: Vec<String>,
}

/// Reads the dynamic information of an ELF file (32- or 64-bit); `Ok(None)` for anything that
/// is not ELF. Errors name what is malformed.
pub fn dynamic_info(data: &[u8]) -> Result<Option<DynamicInfo>, String> {
    match object::FileKind::parse(data) {
        Ok(object::FileKind::Elf64) => dynamic_info_of::<elf::FileHeader64<Endianness>>(data),
        Ok(object::FileKind::Elf32) => dynamic_info_of::<elf::FileHeader32<Endianness>>(data),
        _ => Ok(None),
    }
}

fn dynamic_info_of<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
) -> Result<Option<DynamicInfo>, String> {
    let Ok(header) = Elf::parse(data) else {
        return Ok(None);
    };
    let endian = header.endian().map_err(|e| e.to_string())?;
    let mut info = DynamicInfo::default();
    for ph in header
        .program_headers(endian, data)
        .map_err(|e| e.to_string())?
    {
        if ph.p_type(endian) == elf::PT_INTERP {
            let bytes = ph
                .data(endian, data)
                .map_err(|_| "bad PT_INTERP".to_string())?;
            let bytes = bytes.split(|b| *b == 0).next().unwrap_or_default();
            info.interpreter = Some(PathBuf::from(String::from_utf8_lossy(bytes).into_owned()));
        }
    }
    let sections = header.sections(endian, data).map_err(|e| e.to_string())?;
    let Some((dyns, link)) = sections.dynamic(endian, data).map_err(|e| e.to_string())? else {
        return Ok(Some(info));
    };
    let strings = sections
        .strings(endian, data, link)
        .map_err(|e| e.to_string())?;
    let (mut runpath, mut rpath) = (Vec::new(), Vec::new());
    for d in dyns {
        // A tag that does not fit 32 bits is none of these (no truncation to a known one).
        let Some(tag) = d.tag32(endian) else {
            continue;
        };
        let text = || {
            d.string(endian, strings)
                .ok()
                .map(|b| String::from_utf8_lossy(b).into_owned())
        };
        match tag {
            elf::DT_NEEDED => info.needed.extend(text()),
            elf::DT_RUNPATH => runpath.extend(text()),
            elf::DT_RPATH => rpath.extend(text()),
            _ => {}
        }
    }
    let chosen = if runpath.is_empty() { rpath } else { runpath };
    info.runpath = chosen
        .iter()
        .flat_map(|r| r.split(':'))
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    Ok(Some(info))
}

/// The section holding a compat driver's note.
pub const COMPAT_NOTE_SECTION: &str = ".note.cuda.fwd_compatibility";
/// The note's owner.
pub const COMPAT_NOTE_OWNER: &[u8] = b"NVIDIA Corporation";

/// The descriptor of the NVIDIA note in [`COMPAT_NOTE_SECTION`] (up to its first NUL), or
/// `Ok(None)` for an ELF file without it. The section is walked note by note whatever its
/// section type (tools add it as `PROGBITS` as well as `NOTE`) and padding after the last note
/// is accepted; a note that runs past the section is an error naming the byte.
pub fn compat_note(elf_bytes: &[u8]) -> Result<Option<&[u8]>, String> {
    use object::{Object, ObjectSection};
    let file =
        object::File::parse(elf_bytes).map_err(|e| format!("not a readable ELF file: {e}"))?;
    let Some(section) = file.section_by_name(COMPAT_NOTE_SECTION) else {
        return Ok(None);
    };
    let data = section
        .data()
        .map_err(|e| format!("cannot read {COMPAT_NOTE_SECTION}: {e}"))?;
    let little = file.is_little_endian();
    let word = |at: usize| -> Option<usize> {
        let b: [u8; 4] = data.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if little {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        } as usize)
    };
    let align4 = |n: usize| n.checked_add(3).map(|n| n & !3);
    let mut at = 0;
    while at < data.len() {
        let bad = || format!("{COMPAT_NOTE_SECTION} is malformed at byte {at}");
        let namesz = word(at).ok_or_else(bad)?;
        let descsz = word(at + 4).ok_or_else(bad)?;
        let name_at = at + 12;
        let desc_at = align4(namesz)
            .and_then(|n| name_at.checked_add(n))
            .ok_or_else(bad)?;
        let next = align4(descsz)
            .and_then(|n| desc_at.checked_add(n))
            .ok_or_else(bad)?;
        let name = data
            .get(name_at..name_at.checked_add(namesz).ok_or_else(bad)?)
            .ok_or_else(bad)?;
        let desc = data
            .get(desc_at..desc_at.checked_add(descsz).ok_or_else(bad)?)
            .ok_or_else(bad)?;
        let name = name.strip_suffix(&[0]).unwrap_or(name);
        if name == COMPAT_NOTE_OWNER {
            return Ok(Some(desc.split(|b| *b == 0).next().unwrap_or_default()));
        }
        at = next;
    }
    Ok(None)
}

/// The top-level store path containing `path` (`/nix/store/abc-x/lib/y` → `/nix/store/abc-x`),
/// or `None` when `path` is not strictly inside `store_dir`. `path` must be normalised.
pub fn store_path_of(path: &Path, store_dir: &Path) -> Option<PathBuf> {
    let rest = path.strip_prefix(store_dir).ok()?;
    match rest.components().next()? {
        Component::Normal(name) => Some(store_dir.join(name)),
        _ => None,
    }
}

/// Lexically removes `.` and `..` components (`..` at the root stays at the root); the result
/// is absolute.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_program_needs_libc_and_its_interpreter() {
        let info = dynamic_info(&std::fs::read("/bin/sh").unwrap())
            .unwrap()
            .unwrap();
        assert!(info.interpreter.is_some(), "{info:?}");
        assert!(
            info.needed.iter().any(|n| n.starts_with("libc.so")),
            "{info:?}"
        );
        assert_eq!(dynamic_info(b"#!/bin/sh\n").unwrap(), None);
        assert_eq!(dynamic_info(b"").unwrap(), None);
    }

    #[test]
    fn the_compat_note_of_a_real_library() {
        let t = tempfile::tempdir().unwrap();
        let lib = t.path().join("libcuda.so.575.1");
        cuda_sandbox_testkit::shared_library(&lib, Some("libcuda.so.1")).unwrap();
        assert_eq!(compat_note(&std::fs::read(&lib).unwrap()).unwrap(), None);
        let json = r#"{"Format":1,"CUDA Version":"12.9","Driver":[535]}"#;
        cuda_sandbox_testkit::add_compat_note(&lib, json).unwrap();
        let bytes = std::fs::read(&lib).unwrap();
        assert_eq!(compat_note(&bytes).unwrap(), Some(json.as_bytes()));
        assert!(compat_note(b"not an elf").is_err());
    }

    #[test]
    fn store_paths_and_normal_paths() {
        let s = Path::new("/nix/store");
        assert_eq!(
            store_path_of(Path::new("/nix/store/abc-x/lib/y"), s).unwrap(),
            Path::new("/nix/store/abc-x")
        );
        assert_eq!(store_path_of(Path::new("/nix/store"), s), None);
        assert_eq!(store_path_of(Path::new("/nix/storex/a"), s), None);
        assert_eq!(normalize(Path::new("/a/./b/../c")), Path::new("/a/c"));
        assert_eq!(normalize(Path::new("/../../x")), Path::new("/x"));
    }
}
