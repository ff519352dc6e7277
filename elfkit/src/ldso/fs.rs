//! The file system as the dynamic loader sees it: [`Fs`], so that the model runs on the real
//! files ([`RealFs`]), on a namespace a caller is about to build (the hook's `exec`), or on a
//! fake tree in tests.

use crate::{DynamicInfo, ElfError};
use std::io;
use std::path::{Path, PathBuf};

/// How many bytes of a file the loader reads before it judges it: a 64-bit ELF header.
pub const HEAD_LEN: usize = 64;

/// A file's identity, `(st_dev, st_ino)`: glibc loads one file once, whatever name it is
/// reached by (`_dl_map_object_from_fd` compares `l_file_id`).
pub type FileId = (u64, u64);

/// What the loader reads of one file it opened.
#[derive(Debug)]
pub struct Opened {
    /// The file's identity.
    pub id: FileId,
    /// Its first bytes (at most [`HEAD_LEN`]), or why they could not be read (a directory
    /// opens, and then its read fails: glibc's "cannot read file data").
    pub head: Result<Vec<u8>, io::Error>,
    /// What it asks of the loader, read as the loader reads it ([`crate::dynamic_info`]);
    /// `Ok(None)` when it is not ELF.
    pub dynamic: Result<Option<DynamicInfo>, ElfError>,
    /// Its real path, when it can be had.
    pub real_path: Option<PathBuf>,
}

/// The file system the search runs on. Every path the model reads goes through it.
pub trait Fs {
    /// Opens `path` read-only, as `open_verify` does, and reads what the loader reads. An
    /// error is the one `open` gives: not found, permission denied and "not a directory"
    /// let the search go on; other errors end that directory list, as in glibc's
    /// `open_path`.
    fn open(&self, path: &Path) -> io::Result<Opened>;
    /// The real path of `path` (the executable's `$ORIGIN` is the directory of its real path).
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf>;
    /// Whether `path` is a directory (glibc stops trying directories it found missing; used
    /// only to compare the files tried with `LD_DEBUG`).
    fn is_dir(&self, path: &Path) -> bool;
    /// The whole of a small file (the loader's cache), at most `limit` bytes.
    fn read(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>>;
}

/// The real file system. Files are opened non-blocking and without taking a controlling
/// terminal; only regular files are read (a FIFO or a device is judged "not a regular file"
/// without being opened, where glibc would open it), and a file of any size costs a few
/// small reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

impl RealFs {
    /// Opens `path` only if it is a regular file, checked before opening and again on the
    /// descriptor; `Ok(Err(kind))` names what it is instead.
    pub fn open_regular(path: &Path) -> io::Result<Result<std::fs::File, &'static str>> {
        use std::os::unix::fs::OpenOptionsExt;
        let meta = std::fs::metadata(path)?;
        if !meta.is_file() {
            return Ok(Err(kind(&meta)));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Ok(Err(kind(&meta)));
        }
        Ok(Ok(file))
    }
}

/// What a file that is not regular is, in words ("a directory", "a FIFO", …).
pub fn kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    match meta.file_type() {
        t if t.is_dir() => "a directory",
        t if t.is_fifo() => "a FIFO",
        t if t.is_char_device() || t.is_block_device() => "a device",
        t if t.is_socket() => "a socket",
        t if t.is_file() => "a regular file",
        _ => "not a file",
    }
}

/// [`Opened`] for an open regular file: its identity, first bytes and dynamic information.
pub fn read_opened(file: &std::fs::File, path: &Path) -> io::Result<Opened> {
    use std::io::{Read, Seek};
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    let mut head = Vec::with_capacity(HEAD_LEN);
    let mut reader = file;
    let head = (reader.rewind())
        .and_then(|()| reader.take(HEAD_LEN as u64).read_to_end(&mut head))
        .map(|_| head);
    let dynamic = match &head {
        Ok(h) if h.starts_with(b"\x7fELF") => crate::dynamic_info_of_file(file),
        _ => Ok(None),
    };
    Ok(Opened {
        id: (meta.dev(), meta.ino()),
        head,
        dynamic,
        real_path: std::fs::canonicalize(path).ok(),
    })
}

impl Fs for RealFs {
    fn open(&self, path: &Path) -> io::Result<Opened> {
        use std::os::unix::fs::MetadataExt;
        match RealFs::open_regular(path)? {
            Ok(file) => read_opened(&file, path),
            Err(what) => {
                let meta = std::fs::metadata(path)?;
                let why = if what == "a directory" {
                    io::Error::from_raw_os_error(libc::EISDIR)
                } else {
                    io::Error::other(format!("{what}, not a regular file (not opened)"))
                };
                Ok(Opened {
                    id: (meta.dev(), meta.ino()),
                    head: Err(why),
                    dynamic: Ok(None),
                    real_path: std::fs::canonicalize(path).ok(),
                })
            }
        }
    }
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }
    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }
    fn read(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>> {
        use std::io::Read;
        let file = RealFs::open_regular(path)?
            .map_err(|what| io::Error::other(format!("{what}, not a regular file")))?;
        let mut bytes = Vec::new();
        file.take(limit).read_to_end(&mut bytes)?;
        Ok(bytes)
    }
}
