//! ELF and Nix store helpers for cuda-sandbox, written once: what an ELF file asks of the
//! dynamic loader (32- and 64-bit, either byte order, through `object`), the
//! `.note.cuda.fwd_compatibility` note of a `cuda_compat` libcuda, and store-path arithmetic.
//!
//! Used by the hook (exposure, closures, `exec`) and the runner (the ELF lint), so both read
//! ELF files and the store the same way. Reads bytes it is given and paths as text; [`ldso`],
//! glibc's library search, reads files only through the `Fs` its caller gives it (and runs a
//! loader's `--help` only when asked: `ldso::Loader::ask`); [`requisites`] is the one place
//! either crate asks `nix-store` for a closure.

// Developer docs, read with --document-private-items (docs/architecture.md): private links resolve.
#![allow(rustdoc::private_intra_doc_links)]

mod error;
pub mod fatbin;
pub mod ldso;
pub mod map;
pub mod stub;

pub use error::ElfError;

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader};
use object::{Endian, Endianness, ReadRef};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, ExitStatus};

/// What one ELF file asks of the loader.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamicInfo {
    /// `PT_INTERP`, for executables.
    pub interpreter: Option<PathBuf>,
    /// `DT_NEEDED` names.
    pub needed: Vec<String>,
    /// `DT_RUNPATH`, split at `:` (an empty entry is the current directory), when the file
    /// has one.
    pub runpath: Option<Vec<String>>,
    /// `DT_RPATH`, split at `:` likewise, when the file has one.
    pub rpath: Option<Vec<String>>,
    /// `DT_SONAME`: the name a library is loaded by (`libcuda.so.1`), when it has one.
    pub soname: Option<String>,
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
/// for anything that is not ELF. An ELF file whose headers, dynamic segment or strings cannot
/// be read is an error naming what is wrong.
///
/// It reads what the kernel and `ld.so` read, never the section headers (which the loader
/// ignores, so a file may make them say anything): the interpreter from the first `PT_INTERP`'s
/// file bytes (as `binfmt_elf` does), the dynamic array at the last `PT_DYNAMIC`'s *address*
/// (as glibc's `ld.so` does), that address and `DT_STRTAB`'s taken through the `PT_LOAD`
/// segments to the file bytes the loader would map there (bytes past a segment's file size are
/// zeros, as in memory), and each string within `DT_STRSZ`. Where a tag repeats, the last one
/// counts, as in glibc's `elf_get_dynamic_info` (`DT_NEEDED` excepted: each is a library).
pub fn dynamic_info(data: &[u8]) -> Result<Option<DynamicInfo>, ElfError> {
    dynamic_info_in(data)
}

/// [`dynamic_info`] of an open file, reading only what the loader would read: the ELF and
/// program headers, the interpreter, the dynamic array (at most [`MAX_DYNAMIC_BYTES`]) and each
/// string it names (at most 4096 bytes), each with `pread`-like reads. A file of any size costs
/// a few small reads; nothing is mapped, so a file truncated meanwhile is an error, not a fault.
/// The caller decides which files to open (a FIFO or a device is not a file to read).
pub fn dynamic_info_of_file(file: &std::fs::File) -> Result<Option<DynamicInfo>, ElfError> {
    dynamic_info_in(&object::ReadCache::new(file))
}

/// The most bytes of dynamic array read (4096 entries of a 64-bit file; real files have tens).
pub const MAX_DYNAMIC_BYTES: u64 = 64 << 10;

fn dynamic_info_in<'data, R: ReadRef<'data>>(data: R) -> Result<Option<DynamicInfo>, ElfError> {
    match object::FileKind::parse(data) {
        Ok(object::FileKind::Elf64) => dynamic_info_of::<elf::FileHeader64<Endianness>, R>(data),
        Ok(object::FileKind::Elf32) => dynamic_info_of::<elf::FileHeader32<Endianness>, R>(data),
        _ => Ok(None),
    }
}

fn dynamic_info_of<'data, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'data>>(
    data: R,
) -> Result<Option<DynamicInfo>, ElfError> {
    let header = Elf::parse(data).map_err(ElfError::Headers)?;
    let endian = header.endian().map_err(ElfError::Headers)?;
    let mut info = DynamicInfo::default();
    let len = data
        .len()
        .map_err(|()| ElfError::Unreadable("its length"))?;
    // The file as the loader maps it: `(p_vaddr, p_memsz, p_offset, p_filesz)` of each
    // `PT_LOAD`, in program header order.
    let mut segments: Vec<(u64, u64, u64, u64)> = Vec::new();
    let mut dynamic = None;
    for ph in header
        .program_headers(endian, data)
        .map_err(ElfError::Headers)?
    {
        match ph.p_type(endian) {
            elf::PT_INTERP if info.interpreter.is_none() => {
                let bytes = ph.data(endian, data).map_err(|()| ElfError::Interpreter)?;
                let bytes = bytes.split(|b| *b == 0).next().unwrap_or_default();
                info.interpreter = Some(PathBuf::from(String::from_utf8_lossy(bytes).into_owned()));
            }
            elf::PT_DYNAMIC => {
                dynamic = Some((ph.p_vaddr(endian).into(), ph.p_memsz(endian).into()));
            }
            elf::PT_LOAD => segments.push((
                ph.p_vaddr(endian).into(),
                ph.p_memsz(endian).into(),
                ph.p_offset(endian).into(),
                ph.p_filesz(endian).into(),
            )),
            _ => {}
        }
    }
    // What the loader would have at `addr`: file bytes, as their offset and how many there
    // are to the end of the segment's file part, or `None` for zeros (past the segment's file
    // size, inside its memory size). A later segment maps over an earlier one, as
    // `mmap(MAP_FIXED)` in program header order does.
    let mapped = |addr: u64, what: &'static str| -> Result<Option<(u64, u64)>, ElfError> {
        let &(vaddr, _, offset, filesz) = (segments.iter().rev())
            .find(|&&(v, m, _, _)| addr >= v && addr - v < m)
            .ok_or(ElfError::Unmapped(what, addr))?;
        let delta = addr - vaddr;
        if delta >= filesz {
            return Ok(None);
        }
        match offset.checked_add(filesz) {
            Some(end) if end <= len => Ok(Some((offset + delta, filesz - delta))),
            _ => Err(ElfError::SegmentPastEnd(what)),
        }
    };
    let Some((address, memsz)) = dynamic else {
        return Ok(Some(info)); // a static executable or an object file: no search path
    };
    let Some((offset, available)) = mapped(address, "PT_DYNAMIC")? else {
        return Ok(Some(info)); // zeros: DT_NULL first, nothing to load
    };
    let word_size: usize = if header.is_type_64() { 8 } else { 4 };
    // A word of the file's class and byte order (`bytes` holds 4 or 8).
    let word = |bytes: &[u8]| match bytes.try_into() {
        Ok(b) => endian.read_u64_bytes(b),
        Err(_) => u64::from(endian.read_u32_bytes(bytes.try_into().unwrap_or_default())),
    };
    // ld.so reads p_memsz / sizeof(Dyn) entries at most, up to DT_NULL; past the segment's
    // file bytes its memory holds zeros, that is DT_NULL.
    let entry_size = 2 * word_size as u64;
    let length = (memsz - memsz % entry_size).min(available - available % entry_size);
    let entries = data
        .read_bytes_at(offset, length.min(MAX_DYNAMIC_BYTES))
        .map_err(|()| ElfError::Unreadable("PT_DYNAMIC"))?;
    let mut strtab = None;
    let mut strsz = None;
    let mut needed = Vec::new();
    let (mut runpath, mut rpath, mut soname) = (None, None, None);
    let mut ended = length <= MAX_DYNAMIC_BYTES;
    for entry in entries.chunks_exact(2 * word_size) {
        let tag = word(&entry[..word_size]);
        let value = word(&entry[word_size..]);
        // A tag that does not fit 32 bits is none of these (no truncation to a known one).
        match u32::try_from(tag).ok() {
            Some(elf::DT_NULL) => {
                ended = true;
                break;
            }
            Some(elf::DT_STRTAB) => strtab = Some(value),
            Some(elf::DT_STRSZ) => strsz = Some(value),
            Some(elf::DT_NEEDED) => needed.push(value),
            Some(elf::DT_RUNPATH) => runpath = Some(value),
            Some(elf::DT_RPATH) => rpath = Some(value),
            Some(elf::DT_SONAME) => soname = Some(value),
            _ => {}
        }
    }
    if !ended {
        return Err(ElfError::Unterminated);
    }
    if needed.is_empty() && runpath.is_none() && rpath.is_none() && soname.is_none() {
        return Ok(Some(info));
    }
    let strtab = strtab.ok_or(ElfError::NoStringTable)?;
    let (table, table_len) = match mapped(strtab, "DT_STRTAB")? {
        Some((offset, available)) => (offset, available.min(strsz.unwrap_or(u64::MAX))),
        None => (0, 0),
    };
    let string = |offset: u64| -> Result<String, ElfError> {
        if offset >= table_len {
            return Err(ElfError::StringOutside(offset));
        }
        let bytes = data
            .read_bytes_at_until(table + offset..table + table_len, 0)
            .map_err(|()| ElfError::StringOutside(offset))?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    };
    // As glibc's `fillin_rpath` splits it: an empty string is no directory, an empty entry
    // of a longer one is the current directory.
    let split = |value: String| match value.as_str() {
        "" => Vec::new(),
        v => v.split(':').map(String::from).collect(),
    };
    info.needed = needed.into_iter().map(string).collect::<Result<_, _>>()?;
    info.runpath = runpath.map(string).transpose()?.map(split);
    info.rpath = rpath.map(string).transpose()?.map(split);
    info.soname = soname.map(string).transpose()?;
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
pub fn compat_note(elf_bytes: &[u8]) -> Result<Option<&[u8]>, ElfError> {
    use object::{Object, ObjectSection};
    let file = object::File::parse(elf_bytes).map_err(ElfError::Headers)?;
    let Some(section) = file.section_by_name(COMPAT_NOTE_SECTION) else {
        return Ok(None);
    };
    let data = section.data().map_err(ElfError::NoteSection)?;
    let endian = Endianness::from_little_endian(file.is_little_endian()).unwrap_or_default();
    let field = |at: usize, len: usize| data.get(at..at.checked_add(len)?);
    let word = |at| Some(endian.read_u32_bytes(field(at, 4)?.try_into().ok()?) as usize);
    let align4 = |n: usize| n.checked_add(3).map(|n| n & !3);
    let mut at = 0;
    while at < data.len() {
        // The note at `at`: its name, its descriptor, where the next one starts.
        let note = || {
            let namesz = word(at)?;
            let descsz = word(at + 4)?;
            let desc_at = (at + 12).checked_add(align4(namesz)?)?;
            let next = desc_at.checked_add(align4(descsz)?)?;
            Some((field(at + 12, namesz)?, field(desc_at, descsz)?, next))
        };
        let (name, desc, next) = note().ok_or(ElfError::NoteMalformed(at))?;
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
            Component::ParentDir => _ = out.pop(),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Why `nix-store --query --requisites` gave no closure.
#[derive(Debug, thiserror::Error)]
pub enum RequisitesError {
    /// The program tried could not be started, and why.
    #[error("cannot run {program}: {1}", program = .0.display())]
    Spawn(PathBuf, std::io::Error),
    /// The program run failed: its exit status, the first non-empty line of its standard
    /// error.
    #[error("`{program} --query --requisites` failed ({1}): {2}", program = .0.display())]
    Failed(PathBuf, ExitStatus, String),
}

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
    .map_err(|error| RequisitesError::Spawn(nix_store.to_path_buf(), error))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = (stderr.lines().find(|l| !l.trim().is_empty())).map_or("", str::trim);
        return Err(RequisitesError::Failed(
            nix_store.to_path_buf(),
            output.status,
            first.into(),
        ));
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

    /// The old reader, through the section headers: for a well-formed file it must agree with
    /// the program headers; for a crafted one it is what an attacker fools.
    fn from_sections(data: &[u8]) -> Option<(Vec<String>, Option<Vec<String>>)> {
        use object::read::elf::Dyn;
        let header = elf::FileHeader64::<Endianness>::parse(data).ok()?;
        let endian = header.endian().ok()?;
        let sections = header.sections(endian, data).ok()?;
        let (dyns, link) = sections.dynamic(endian, data).ok()??;
        let strings = sections.strings(endian, data, link).ok()?;
        let (mut needed, mut runpath) = (Vec::new(), None);
        for d in dyns {
            let value = || String::from_utf8_lossy(d.string(endian, strings).unwrap()).into_owned();
            match d.tag32(endian) {
                Some(elf::DT_NEEDED) => needed.push(value()),
                Some(elf::DT_RUNPATH) => {
                    runpath = Some(value().split(':').map(String::from).collect());
                }
                _ => {}
            }
        }
        Some((needed, runpath))
    }

    fn compile(dir: &Path, name: &str, source: &str) -> PathBuf {
        let src = dir.join(format!("{name}.c"));
        std::fs::write(&src, source).unwrap();
        let out = dir.join(name);
        let ok = Command::new("cc")
            .arg("-o")
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap()
            .success();
        assert!(ok, "cc failed");
        out
    }

    #[test]
    fn lying_section_headers_and_dynamic_offset_are_not_believed() {
        // Dependencies came from the section headers, which the loader ignores, so a
        // program could name any host file and have `exec` bind it.
        let t = tempfile::tempdir().unwrap();
        let program = compile(t.path(), "p", "int main(void) { return 0; }\n");
        let honest = dynamic_info(&std::fs::read(&program).unwrap())
            .unwrap()
            .unwrap();
        cuda_sandbox_testkit::crafted_elf::lie_about_dependencies(
            &program,
            &["/home/victim/private.txt", "libc.so.6"],
            Some("/home/victim"),
        )
        .unwrap();
        let crafted = std::fs::read(&program).unwrap();
        // The lie is there for a reader of sections to believe ...
        let (needed, runpath) = from_sections(&crafted).unwrap();
        assert_eq!(needed, ["/home/victim/private.txt", "libc.so.6"]);
        assert_eq!(runpath, Some(vec!["/home/victim".to_string()]));
        // ... the loader does not (the program still runs), and neither do we.
        let ran = run_retrying_busy(|| Command::new(&program).output()).unwrap();
        assert!(ran.status.success());
        assert_eq!(dynamic_info(&crafted).unwrap().unwrap(), honest);
        assert!(!honest.needed.iter().any(|n| n.contains("victim")));
    }

    #[test]
    fn well_formed_files_read_as_their_sections_say() {
        // Program headers and section headers agree on every well-formed file of this host.
        let mut compared = 0;
        for dir in [
            "/usr/bin",
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
        ] {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.filter_map(Result::ok).take(400) {
                let path = entry.path();
                let Ok(meta) = std::fs::metadata(&path) else {
                    continue;
                };
                if !meta.is_file() || meta.len() > 64 << 20 {
                    continue;
                }
                let Ok(data) = std::fs::read(&path) else {
                    continue;
                };
                if !data.starts_with(b"\x7fELF\x02") {
                    continue;
                }
                let Some(expected) = from_sections(&data) else {
                    continue;
                };
                let info = dynamic_info(&data).unwrap().unwrap();
                let file = std::fs::File::open(&path).unwrap();
                assert_eq!(dynamic_info_of_file(&file).unwrap().as_ref(), Some(&info));
                assert_eq!((info.needed, info.runpath), expected, "{}", path.display());
                compared += 1;
            }
        }
        assert!(compared > 50, "only {compared} ELF files compared");
        // A debug-only file keeps the program headers with no bytes behind them: nothing.
        let t = tempfile::tempdir().unwrap();
        let debug = t.path().join("sh.debug");
        let ok = Command::new("objcopy")
            .args(["--only-keep-debug", "/bin/sh"])
            .arg(&debug)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let info = dynamic_info(&std::fs::read(&debug).unwrap())
            .unwrap()
            .unwrap();
        assert!(info.needed.is_empty() && info.runpath.is_none(), "{info:?}");
    }

    #[test]
    fn a_large_file_costs_a_few_small_reads() {
        // Every "library" was read to its end, as root.
        let rchar = || -> u64 {
            let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
            let line = io.lines().find(|l| l.starts_with("rchar:")).unwrap();
            line[6..].trim().parse().unwrap()
        };
        let t = tempfile::tempdir().unwrap();
        let big = t.path().join("big.so");
        std::fs::copy("/bin/sh", &big).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&big).unwrap();
        file.set_len(1 << 30).unwrap(); // 1 GiB, sparse
        let file = std::fs::File::open(&big).unwrap();
        let before = rchar();
        let info = dynamic_info_of_file(&file).unwrap().unwrap();
        let read = rchar() - before;
        assert!(
            info.needed.iter().any(|n| n.starts_with("libc.so")),
            "{info:?}"
        );
        assert!(read < 64 << 10, "read {read} bytes");
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
        assert!(matches!(e, RequisitesError::Failed(..)), "{e}");
        assert_eq!(
            e.to_string(),
            "`/bin/false --query --requisites` failed (exit status: 1): "
        );
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
        assert!(matches!(
            compat_note(b"not an elf"),
            Err(ElfError::Headers(_))
        ));
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
