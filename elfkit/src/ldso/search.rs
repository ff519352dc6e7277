//! The search for one name: the lists of directories in glibc's order, `$ORIGIN`, `$LIB` and
//! `$PLATFORM`, the subdirectories tried in each directory, the cache, and what `open_verify`
//! makes of each file tried.

use super::cache::Cache;
use super::fs::{Fs, Opened};
use super::{ElfHost, Loader};
use object::{Endian, Endianness};
use std::io;
use std::path::{Path, PathBuf};

/// Where a list of the search came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `DT_RPATH` of this object (the loading one, one that caused it to be loaded, or the
    /// executable).
    Rpath(PathBuf),
    /// `LD_LIBRARY_PATH`.
    LdLibraryPath,
    /// `DT_RUNPATH` of the loading object.
    Runpath(PathBuf),
    /// The loader's cache (this file).
    Cache(PathBuf),
    /// The loader's default directories.
    Default,
    /// A name with a `/`: no search, the path itself.
    Direct,
    /// Already loaded under this name: no search.
    Loaded,
}

/// One list of directories, from one source, after `$ORIGIN`/`$LIB`/`$PLATFORM` expansion,
/// dropped entries and repeats removed. `""` is the current directory. The cache's list has
/// no directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchList {
    /// Where it came from.
    pub source: Source,
    /// The directories, without trailing slashes (except `/`).
    pub dirs: Vec<String>,
}

/// What trying one file gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// Not there, not readable, or a path component is not a directory: the search goes on.
    Missing,
    /// An ELF file of the other class: skipped ("wrong ELF class" if nothing else is found).
    OtherClass,
    /// An ELF file for another machine: skipped.
    OtherMachine,
    /// Opening failed otherwise (`ELOOP`, `ENAMETOOLONG`, …): once the directory's
    /// subdirectories are tried, the rest of this list is skipped.
    ListEnded(String),
    /// Not a usable ELF file: the search ends with this error.
    Unusable(String),
    /// A file the loader takes.
    Loadable,
}

/// One file the loader tries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tried {
    /// The list it belongs to.
    pub source: Source,
    /// The directory tried, subdirectory included (`""`: the current directory).
    pub dir: String,
    /// The file tried, as the loader names it (`LD_DEBUG`'s "trying file=").
    pub file: PathBuf,
    /// Whether `dir` exists. glibc remembers directories it found missing and does not try
    /// them again; compare with `LD_DEBUG` on existing directories only.
    pub dir_exists: bool,
    /// What trying it gave.
    pub attempt: Attempt,
}

/// How a search ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// This file is loaded.
    Found {
        /// The path the loader opened (the loaded object's `l_name`).
        path: PathBuf,
        /// Its real path (symlinks resolved), when it can be had.
        real_path: Option<PathBuf>,
        /// The list it was found through.
        source: Source,
    },
    /// The search stopped at a file that is not a usable ELF file: the load fails.
    Error {
        /// The file.
        path: PathBuf,
        /// glibc's message (`invalid ELF header`, …).
        reason: String,
    },
    /// Nothing found.
    NotFound {
        /// Some candidate was of the other ELF class (glibc then says "wrong ELF class").
        other_class: bool,
    },
}

/// The whole search for one name from one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    /// The name looked for.
    pub name: String,
    /// The object doing the loading (whose `DT_NEEDED` it is, or that called `dlopen`).
    pub requester: PathBuf,
    /// The lists, in search order (lists the search did not reach included).
    pub lists: Vec<SearchList>,
    /// Every file tried, in order.
    pub tried: Vec<Tried>,
    /// How it ended.
    pub outcome: Outcome,
}

impl Search {
    /// The file loaded, when one is.
    pub fn found(&self) -> Option<&Path> {
        match &self.outcome {
            Outcome::Found { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The search path in one line, for messages: `DT_RUNPATH [/a:/b], then ld.so.cache
    /// (/etc/ld.so.cache), then the default directories [/c]`. Empty lists are left out; the
    /// requester's own lists are named by their tag alone.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for list in &self.lists {
            let dirs = list
                .dirs
                .iter()
                .map(|d| if d.is_empty() { "." } else { d.as_str() })
                .collect::<Vec<_>>()
                .join(":");
            parts.push(match &list.source {
                Source::Cache(p) => format!("ld.so.cache ({})", p.display()),
                _ if list.dirs.is_empty() && list.source != Source::Default => continue,
                Source::Rpath(p) if *p == self.requester => format!("DT_RPATH [{dirs}]"),
                Source::Rpath(p) => format!("the DT_RPATH of {} [{dirs}]", p.display()),
                Source::Runpath(_) => format!("DT_RUNPATH [{dirs}]"),
                Source::LdLibraryPath => format!("LD_LIBRARY_PATH [{dirs}]"),
                Source::Default => format!("the default directories [{dirs}]"),
                Source::Direct | Source::Loaded => continue, // no directories
            });
        }
        parts.join(", then ")
    }
}

/// Searches `lists` for `name`, each directory with each of the loader's subdirectories
/// first. The cache's list tries the file the cache gives `name`; a [`Source::Direct`] list
/// (for a name with `/`) tries `direct`, the name with its DSTs replaced, when it has one.
/// The file found, with what was read of it, comes with the search.
pub(crate) fn run(
    name: &str,
    requester: &Path,
    lists: Vec<SearchList>,
    loader: &Loader,
    (cache, direct): (Option<&Cache>, Option<&Path>),
    fs: &impl Fs,
) -> (Search, Option<Opened>) {
    let mut tried = Vec::new();
    let mut end = None;
    let subdirs = loader.subdirs();
    'lists: for list in &lists {
        // The files tried, `(file, directory)`, in groups: one per directory of the list.
        let one = match &list.source {
            Source::Cache(_) => {
                Some(cache.and_then(|c| c.lookup(name, loader.elf, &loader.glibc_hwcaps)))
            }
            Source::Direct => Some(direct),
            _ => None,
        };
        let groups: Vec<Vec<(PathBuf, String)>> = match one {
            Some(file) => Vec::from_iter(file.map(|f| {
                let dir = f.parent().map(|p| p.to_string_lossy().into_owned());
                vec![(f.to_path_buf(), dir.unwrap_or_default())]
            })),
            None => (list.dirs.iter())
                .map(|dir| {
                    let dirs = subdirs.iter().map(|sub| join(dir, sub));
                    dirs.map(|d| (PathBuf::from(join(&d, name)), d)).collect()
                })
                .collect(),
        };
        for group in groups {
            let mut last = Attempt::Missing;
            for (file, dir) in group {
                let (attempt, opened) = try_file(&file, loader.elf, fs);
                let dir_exists = matches!(list.source, Source::Cache(_))
                    || fs.is_dir(Path::new(if dir.is_empty() { "." } else { &dir }));
                tried.push(Tried {
                    source: list.source.clone(),
                    dir,
                    file: file.clone(),
                    dir_exists,
                    attempt: attempt.clone(),
                });
                end = Some(match (attempt, opened) {
                    (Attempt::Loadable, Some(opened)) => {
                        let real = opened.real_path.clone();
                        let real_path = real.or_else(|| fs.canonicalize(&file).ok());
                        let source = list.source.clone();
                        let found = Outcome::Found {
                            path: file,
                            real_path,
                            source,
                        };
                        (found, Some(opened))
                    }
                    (Attempt::Unusable(reason), _) => (Outcome::Error { path: file, reason }, None),
                    (attempt, _) => {
                        last = attempt;
                        continue;
                    }
                });
                break 'lists;
            }
            if matches!(last, Attempt::ListEnded(_)) {
                continue 'lists;
            }
        }
    }
    let other_class = tried.iter().any(|t| t.attempt == Attempt::OtherClass);
    let (outcome, opened) = end.unwrap_or((Outcome::NotFound { other_class }, None));
    let search = Search {
        name: name.to_string(),
        requester: requester.to_path_buf(),
        lists,
        tried,
        outcome,
    };
    (search, opened)
}

/// What glibc's `open_verify` makes of the file at `path`, and what was read of it.
pub(crate) fn try_file(path: &Path, elf: ElfHost, fs: &impl Fs) -> (Attempt, Option<Opened>) {
    let opened = match fs.open(path) {
        Ok(o) => o,
        Err(e) => {
            let attempt = match e.kind() {
                io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied => Attempt::Missing,
                _ if e.raw_os_error() == Some(libc::ENOTDIR) => Attempt::Missing,
                _ => Attempt::ListEnded(e.to_string()),
            };
            return (attempt, None);
        }
    };
    let attempt = match &opened.head {
        Err(e) if e.raw_os_error().is_some() => Attempt::Unusable("cannot read file data".into()),
        Err(e) => Attempt::Unusable(e.to_string()),
        Ok(head) => verify_header(head, elf),
    };
    let attempt = match (&attempt, &opened.dynamic) {
        (Attempt::Loadable, Err(e)) => Attempt::Unusable(e.to_string()),
        _ => attempt,
    };
    (attempt, Some(opened))
}

/// The checks of glibc's `open_verify` on the first bytes of a file.
pub fn verify_header(head: &[u8], host: ElfHost) -> Attempt {
    let ehdr_len = if host.class64 { 64 } else { 52 };
    let bad = |s: &str| Attempt::Unusable(s.to_string());
    if head.len() < ehdr_len {
        return bad("file too short");
    }
    if head[..4] != *b"\x7fELF" {
        return bad("invalid ELF header");
    }
    let class = if host.class64 { 2 } else { 1 };
    if head[4] != class {
        return Attempt::OtherClass;
    }
    match (head[5], host.little_endian) {
        (1, true) | (2, false) => {}
        (_, true) => return bad("ELF file data encoding not little-endian"),
        (_, false) => return bad("ELF file data encoding not big-endian"),
    }
    if head[6] != 1 {
        return bad("ELF file version ident does not match current one");
    }
    // Linux accepts ELFOSABI_SYSV (ABI version 0) and ELFOSABI_GNU.
    match head[7] {
        0 if head[8] != 0 => return bad("ELF file ABI version invalid"),
        0 | 3 => {}
        _ => return bad("ELF file OS ABI invalid"),
    }
    if head[9..16].iter().any(|b| *b != 0) {
        return bad("nonzero padding in e_ident");
    }
    let endian = Endianness::from_little_endian(host.little_endian).unwrap_or_default();
    let u16_at = |at: usize| endian.read_u16_bytes([head[at], head[at + 1]]);
    if endian.read_u32_bytes([head[20], head[21], head[22], head[23]]) != 1 {
        return bad("ELF file version does not match current one");
    }
    if u16_at(18) != host.machine {
        return Attempt::OtherMachine;
    }
    if !matches!(u16_at(16), 2 | 3) {
        return bad("only ET_DYN and ET_EXEC can be loaded");
    }
    let (phentsize_at, phentsize) = if host.class64 { (54, 56) } else { (42, 32) };
    if u16_at(phentsize_at) != phentsize {
        return bad("ELF file's phentsize not the expected size");
    }
    Attempt::Loadable
}

/// One list's entries as `fillin_rpath` makes them: DSTs replaced (an entry with one that
/// cannot be replaced, or empty after replacing, is dropped; an empty entry stays, the
/// current directory), trailing slashes dropped, repeats removed.
pub(crate) fn expand_list(
    entries: &[String],
    origin: Option<&str>,
    loader: &Loader,
) -> Vec<String> {
    let mut dirs: Vec<String> = Vec::new();
    for e in entries {
        let d = if e.is_empty() {
            String::new()
        } else {
            match expand_dsts(e, origin, loader) {
                Some(x) if !x.is_empty() => trim_dir(&x),
                _ => continue,
            }
        };
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs
}

/// Replaces `$ORIGIN`, `$LIB`, `$PLATFORM` (and `${…}`) as `_dl_dst_substitute` does: a name
/// followed by an identifier character is no DST and stays, as does an unknown `$NAME`; a
/// known DST without a value makes the whole string unusable (`None`).
pub fn expand_dsts(input: &str, origin: Option<&str>, loader: &Loader) -> Option<String> {
    let mut out = String::new();
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let dsts = [
            ("ORIGIN", origin),
            ("PLATFORM", loader.platform.as_deref()),
            ("LIB", Some(loader.lib.as_str())),
        ];
        match (dsts.into_iter()).find_map(|(dst, value)| Some((dst_len(after, dst)?, value))) {
            Some((len, Some(value))) => {
                out.push_str(value);
                rest = &after[len..];
            }
            Some((_, None)) => return None,
            None => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Some(out)
}

/// glibc's `is_dst`: the length of DST `name` at the start of `input` (after the `$`),
/// braces included, or `None`.
fn dst_len(input: &str, name: &str) -> Option<usize> {
    if let Some(body) = input.strip_prefix('{') {
        return (body.strip_prefix(name)?.starts_with('}')).then_some(name.len() + 2);
    }
    let next = input.strip_prefix(name)?.bytes().next();
    (!next.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')).then_some(name.len())
}

/// `dir` + `/` + `rest`, as glibc builds names: `""` (the current directory) adds nothing.
fn join(dir: &str, rest: &str) -> String {
    match (dir, rest) {
        (d, "") => d.to_string(),
        ("", r) => r.to_string(),
        ("/", r) => format!("/{r}"),
        (d, r) => format!("{d}/{r}"),
    }
}

/// Removes trailing slashes, keeping `/`.
pub(crate) fn trim_dir(d: &str) -> String {
    match d.trim_end_matches('/') {
        "" if !d.is_empty() => "/".into(),
        t => t.to_string(),
    }
}
