//! A file mapped read-only into memory: the one `unsafe` of this crate.

use std::fs::File;

/// A read-only private mapping of a whole file.
pub struct Mapped(memmap2::Mmap);

impl Mapped {
    /// Maps `file` (its length must be non-zero; `mmap` refuses empty mappings).
    pub fn of(file: &File) -> std::io::Result<Mapped> {
        // SAFETY: the mapping is read-only and private, and only ever read as bytes. Another
        // process truncating the file while it is mapped would make a read fault (SIGBUS);
        // memmap2 cannot rule that out, and the readers of GPU code accept it for speed: they
        // read package files that the same user or Nix wrote and does not change under them.
        let map = unsafe { memmap2::Mmap::map(file) }?;
        Ok(Mapped(map))
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}
