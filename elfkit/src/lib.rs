//! ELF and Nix store helpers for cuda-sandbox, written once: what an ELF file asks of the
//! dynamic loader (32- and 64-bit, either byte order, through `object`), the
//! `.note.cuda.fwd_compatibility` note of a `cuda_compat` libcuda, and store-path arithmetic.
//!
//! Used by the hook (exposure, closures, `exec`) and the runner (the ELF lint), so both read
//! ELF files and the store the same way. Reads bytes it is given and paths as text, touches no
//! file; [`requisites`] is the one place either crate asks `nix-store` for a closure.

pub mod fatbin;
pub mod map;

use object::elf;
use object::read::elf::{Dyn, FileHeader, ProgramHeader};
use object::Endianness;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, ExitStatus};

/// What one ELF file asks of the loader.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamicInfo {
    /// `PT_INTERP`, for executables.
    pub interpreter: Option<PathBuf>,
    /// `DT_NEEDED` names.
    pub needed: Vec<String>,
    /// `DT_RUNPATH`, split at `:`, when the file has one.
    pub runpath: Option<Vec<String>>,
    /// `DT_RPATH`, split at `:`, when the file has one.
    pub rpath: Option<Vec<String>>,
}

impl DynamicInfo {
    /// The search path the loader takes from the file itself, and the tag's name: `DT_RUNPATH`
    /// when the file has one (its `DT_RPATH` is then ignored, as glibc does), else `DT_RPATH`.
    pub fn search_path(&self) -> (&[String], &'static str) {
        match (&self.runpath, &self.rpath) {
            (Some(r), _) => (r, "DT_RUNPATH"),
            (None, Some(r)) => (r, "DT_RPATH"),
            (None, None) => (&[], "DT_RUNPATH"),
        }
    }

    /// Whether the file needs the CUDA driver (`libcuda.so*`).
    pub fn needs_libcuda(&self) -> bool {
        self.needed.iter().any(|n| n.starts_with("libcuda.so"))
    }
}

/// Reads the dynamic information of an ELF file (32- or 64-bit, either byte order); `Ok(None)`
/// for anything that is not ELF. An ELF file whose headers, dynamic section or strings cannot
/// be read is an error naming what is wrong.
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
    let bad = |e: object::read::Error| format!("not a readable ELF file: {e}");
    let header = Elf::parse(data).map_err(bad)?;
    let endian = header.endian().map_err(bad)?;
    let mut info = DynamicInfo::default();
    for ph in header.program_headers(endian, data).map_err(bad)? {
        if ph.p_type(endian) == elf::PT_INTERP {
            let bytes = ph
                .data(endian, data)
                .map_err(|_| "not a readable ELF file: bad PT_INTERP".to_string())?;
            let bytes = bytes.split(|b| *b == 0).next().unwrap_or_default();
            info.interpreter = Some(PathBuf::from(String::from_utf8_lossy(bytes).into_owned()));
        }
    }
    let sections = header.sections(endian, data).map_err(bad)?;
    let Some((dyns, link)) = sections.dynamic(endian, data).map_err(bad)? else {
        return Ok(Some(info)); // a static executable or an object file: no search path
    };
    let strings = sections.strings(endian, data, link).map_err(bad)?;
    for d in dyns {
        // A tag that does not fit 32 bits is none of these (no truncation to a known one).
        let Some(tag) = d.tag32(endian) else {
            continue;
        };
        if ![elf::DT_NEEDED, elf::DT_RUNPATH, elf::DT_RPATH].contains(&tag) {
            continue;
        }
        let value = d.string(endian, strings).map_err(bad)?;
        let value = String::from_utf8_lossy(value).into_owned();
        let split = || value.split(':').filter(|s| !s.is_empty()).map(String::from);
        match tag {
            elf::DT_NEEDED => info.needed.push(value.clone()),
            elf::DT_RUNPATH => info.runpath.get_or_insert_with(Vec::new).extend(split()),
            _ => info.rpath.get_or_insert_with(Vec::new).extend(split()),
        }
    }
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

/// Why `nix-store --query --requisites` gave no closure.
#[derive(Debug)]
pub enum RequisitesError {
    /// The program could not be started.
    Spawn {
        /// The program tried.
        program: PathBuf,
        /// Why it did not start.
        error: std::io::Error,
    },
    /// It ran and failed.
    Failed {
        /// The program run.
        program: PathBuf,
        /// Its exit status.
        status: ExitStatus,
        /// The first non-empty line of its standard error.
        stderr: String,
    },
}

impl std::fmt::Display for RequisitesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequisitesError::Spawn { program, error } => {
                write!(f, "cannot run {}: {error}", program.display())
            }
            RequisitesError::Failed {
                program,
                status,
                stderr,
            } => write!(
                f,
                "`{} --query --requisites` failed ({status}): {stderr}",
                program.display()
            ),
        }
    }
}

impl std::error::Error for RequisitesError {}

/// The runtime closure of `store_path` as `nix_store --query --requisites` prints it: one path
/// a line, in its order, the path itself among them. The lines are not checked here; callers
/// that trust them only as store paths check them against their store directory.
pub fn requisites(nix_store: &Path, store_path: &Path) -> Result<Vec<PathBuf>, RequisitesError> {
    use std::os::unix::ffi::OsStrExt;
    let output = run_retrying_busy(|| {
        Command::new(nix_store)
            .args(["--query", "--requisites"])
            .arg(store_path)
            .output()
    })
    .map_err(|error| RequisitesError::Spawn {
        program: nix_store.to_path_buf(),
        error,
    })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(RequisitesError::Failed {
            program: nix_store.to_path_buf(),
            status: output.status,
            stderr: stderr
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .to_string(),
        });
    }
    Ok(output
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| PathBuf::from(std::ffi::OsStr::from_bytes(l)))
        .collect())
}

/// Runs `spawn`, retrying briefly on ETXTBSY: a program just written by one thread can be
/// held open for writing by a child another thread forked but has not yet exec'd.
fn run_retrying_busy(
    spawn: impl Fn() -> std::io::Result<std::process::Output>,
) -> std::io::Result<std::process::Output> {
    const ETXTBSY: i32 = 26;
    let mut tries = 0;
    loop {
        match spawn() {
            Err(e) if e.raw_os_error() == Some(ETXTBSY) && tries < 20 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            other => return other,
        }
    }
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
    fn runpath_hides_rpath_and_libcuda_users_are_seen() {
        let mut info = DynamicInfo {
            needed: vec!["libcuda.so.1".into()],
            rpath: Some(vec!["/r".into()]),
            ..DynamicInfo::default()
        };
        assert!(info.needs_libcuda());
        assert_eq!(info.search_path(), (&["/r".to_string()][..], "DT_RPATH"));
        info.runpath = Some(vec![]);
        assert_eq!(info.search_path(), (&[][..], "DT_RUNPATH"));
    }

    #[test]
    fn requisites_come_from_nix_store_or_say_why_not() {
        let p = Path::new("/nix/store/aaa-x");
        let echo = requisites(Path::new("/bin/echo"), p).unwrap();
        assert_eq!(
            echo,
            [PathBuf::from("--query --requisites /nix/store/aaa-x")]
        );
        let e = requisites(Path::new("/bin/false"), p).unwrap_err();
        assert!(matches!(e, RequisitesError::Failed { .. }), "{e}");
        assert!(e.to_string().contains("failed"), "{e}");
        let e = requisites(Path::new("/nonexistent/nix-store"), p).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot run /nonexistent/nix-store"),
            "{e}"
        );
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
