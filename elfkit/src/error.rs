//! Why an ELF file's dynamic information ([`crate::dynamic_info`]) or compat note
//! ([`crate::compat_note`]) could not be read: one variant per fault, one line each.

use crate::{COMPAT_NOTE_SECTION, MAX_DYNAMIC_BYTES};

/// Why an ELF file could not be read as the loader reads it, or its compat note could not be
/// walked. Each renders to one line naming what is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    /// `object` refused its ELF or program headers.
    #[error("not a readable ELF file: {0}")]
    Headers(object::read::Error),
    /// A part the loader reads could not be read from the file.
    #[error("not a readable ELF file: cannot read {0}")]
    Unreadable(&'static str),
    /// `PT_INTERP` names bytes outside the file.
    #[error("not a readable ELF file: bad PT_INTERP")]
    Interpreter,
    /// An address the loader reads (`PT_DYNAMIC`, `DT_STRTAB`) lies in no `PT_LOAD` segment:
    /// what lies there, and its address.
    #[error("not a readable ELF file: {0} at {1:#x} lies in no PT_LOAD segment")]
    Unmapped(&'static str, u64),
    /// The `PT_LOAD` segment holding `what` claims file bytes past the end of the file.
    #[error(
        "not a readable ELF file: the PT_LOAD segment holding {0} runs past the end of the file"
    )]
    SegmentPastEnd(&'static str),
    /// The dynamic array has no `DT_NULL` in the [`MAX_DYNAMIC_BYTES`] read.
    #[error(
        "not a readable ELF file: its dynamic array has no DT_NULL in {max} bytes",
        max = MAX_DYNAMIC_BYTES
    )]
    Unterminated,
    /// The dynamic array names strings but has no `DT_STRTAB`.
    #[error("not a readable ELF file: strings named but no DT_STRTAB")]
    NoStringTable,
    /// A string offset lies outside `DT_STRTAB` (or its `DT_STRSZ`).
    #[error("not a readable ELF file: string {0:#x} is outside DT_STRTAB")]
    StringOutside(u64),
    /// The compat note's section could not be read.
    #[error("cannot read {section}: {0}", section = COMPAT_NOTE_SECTION)]
    NoteSection(object::read::Error),
    /// A note of the compat section runs past it, at this byte of the section.
    #[error("{section} is malformed at byte {0}", section = COMPAT_NOTE_SECTION)]
    NoteMalformed(usize),
}

#[cfg(test)]
mod tests {
    use super::ElfError;

    /// The one-line texts callers show (the hook's problems, the runner's lint) stay as they
    /// were when these were strings.
    #[test]
    fn each_fault_is_one_line_naming_what_is_wrong() {
        let headers = object::File::parse(&b"\x7fELF"[..]).unwrap_err();
        for (error, text) in [
            (
                ElfError::Unmapped("PT_DYNAMIC", 0x3e00),
                "not a readable ELF file: PT_DYNAMIC at 0x3e00 lies in no PT_LOAD segment",
            ),
            (
                ElfError::SegmentPastEnd("DT_STRTAB"),
                "not a readable ELF file: the PT_LOAD segment holding DT_STRTAB runs past the \
                 end of the file",
            ),
            (
                ElfError::Unterminated,
                "not a readable ELF file: its dynamic array has no DT_NULL in 65536 bytes",
            ),
            (
                ElfError::StringOutside(0x41),
                "not a readable ELF file: string 0x41 is outside DT_STRTAB",
            ),
            (
                ElfError::Unreadable("PT_DYNAMIC"),
                "not a readable ELF file: cannot read PT_DYNAMIC",
            ),
            (
                ElfError::NoteMalformed(12),
                ".note.cuda.fwd_compatibility is malformed at byte 12",
            ),
        ] {
            assert_eq!(error.to_string(), text);
        }
        assert_eq!(
            ElfError::Headers(headers).to_string(),
            format!("not a readable ELF file: {headers}")
        );
    }
}
