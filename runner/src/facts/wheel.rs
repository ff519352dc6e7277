//! Wheels (`.whl`: zip files, PEP 427), read without unpacking them: each member that is an
//! ELF file or a fat binary is inflated, one at a time, into an unnamed temporary file and
//! mapped from there, so memory stays bounded as for a file on disk (cuBLASLt's 749 MB
//! library is never held in memory). Other members are counted and skipped after their first
//! four bytes.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use cuda_sandbox_elfkit::map::Mapped;

/// Why a wheel cannot be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WheelError {
    /// Not a zip file, or a damaged one.
    #[error("cannot be read as a wheel (a zip file): {0}")]
    Zip(#[from] zip::result::ZipError),
    /// Reading a member, or writing it to the temporary file, failed.
    #[error("cannot be read as a wheel: {0}")]
    Io(#[from] std::io::Error),
}

/// Whether `path` names a wheel: a `.whl` file (its bytes must then be a zip file).
pub(crate) fn is_wheel(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("whl"))
}

/// Calls `judge` with each ELF or fat-binary member of the wheel at `path`, in the wheel's
/// order, as `(path/member, its bytes)`; returns how many regular members the wheel holds.
pub(crate) fn each_binary_member(
    path: &Path,
    mut judge: impl FnMut(&Path, &[u8]),
) -> Result<usize, WheelError> {
    let mut wheel = zip::ZipArchive::new(std::io::BufReader::new(std::fs::File::open(path)?))?;
    let mut files = 0;
    for index in 0..wheel.len() {
        let mut member = wheel.by_index(index)?;
        if !member.is_file() {
            continue;
        }
        files += 1;
        let mut head = Vec::with_capacity(4);
        member.by_ref().take(4).read_to_end(&mut head)?;
        if !matches!(
            head.as_slice(),
            [0x7f, b'E', b'L', b'F'] | [0x50, 0xed, 0x55, 0xba]
        ) {
            continue;
        }
        // A member named with `..` or an absolute path keeps its name as written, inside the
        // wheel's path all the same.
        let name: PathBuf = member
            .enclosed_name()
            .unwrap_or_else(|| member.name().trim_start_matches('/').into());
        let mut inflated = tempfile::tempfile()?;
        inflated.write_all(&head)?;
        std::io::copy(&mut member, &mut inflated)?;
        inflated.rewind()?;
        let map = Mapped::of(&inflated)?;
        judge(&path.join(name), map.bytes());
    }
    Ok(files)
}
