//! A static runtime in a file outside the package that a process of it would load (the mixing
//! check, [`crate::facts::mixing`]): the same answer as [`super::runtime_in`], in bounded
//! memory, the file read in released pieces.

use std::ops::Range;
use std::path::Path;

use memchr::memmem;
use object::{Object, ObjectSection, SectionKind};

use cuda_sandbox_elfkit::fatbin::parse::CONTAINER_MAGIC;
use cuda_sandbox_elfkit::fatbin::sections::{
    FATBIN_SECTION, RELFATBIN_SECTION, WRAPPER_MAGIC, WRAPPER_SECTION,
};
use cuda_sandbox_elfkit::fatbin::strings::may_hold_strings;
use cuda_sandbox_elfkit::ldso::RealFs;
use cuda_sandbox_elfkit::map::Mapped;

use super::{
    c_string_finders, evidence_of, getter_constants, gpu_code_and_runtime, runtime_found,
    searched_strings, FoundRuntime, StaticEvidence, DECIDING, GETTER_LEN,
};

/// Bytes of a dependency read at a time ([`runtime_in_dependency`]), then released: its
/// memory, whatever the file's size.
const PIECE: usize = 4 << 20;

/// Calls `f` with each piece of `map`'s bytes `range`, [`PIECE`] bytes and the `overlap` after
/// them (within `range`), from the last piece to the first, until `f` returns `true` (stop): a
/// match of up to `overlap + 1` bytes is whole in some piece. Each piece's pages are released
/// once `f` has read them ([`Mapped::release`]), so they do not add up in the process's memory.
fn each_piece(map: &Mapped, range: Range<usize>, overlap: usize, mut f: impl FnMut(&[u8]) -> bool) {
    for p in range.clone().step_by(PIECE).rev() {
        let end = range.end.min(p + PIECE + overlap);
        let stop = f(&map.bytes()[p..end]);
        map.release(p..end);
        if stop {
            break;
        }
    }
}

/// Why [`runtime_in_dependency`] reads the whole file after all: a string was found in a
/// section that may hold a container, or the file is not laid out as the search needs.
struct Undecided;

/// [`super::static_runtime_in`] of a file outside the package (a dependency of one of its files),
/// without holding its bytes: which of [`searched_strings`] its string sections hold, and its
/// code's getter constants, each read in pieces ([`each_piece`]). A string counts as found
/// where it lies in a section without the container magic: the containers elfkit would find
/// lie in `.nv_fatbin` (and `__nv_relfatbin`, checked apart from the sections searched), or,
/// found by the magic scan, inside one data section, and a wrapper's container is one of
/// those when its address is in a fat-binary section. A string found only in a section that
/// holds the magic, or a file laid out otherwise, is [`Undecided`].
fn dependency_evidence(map: &Mapped) -> Result<Option<StaticEvidence>, Undecided> {
    let data = map.bytes();
    let elf = object::File::parse(data).map_err(|_| Undecided)?;
    let is_fatbin = |name: &str| name == FATBIN_SECTION || name == RELFATBIN_SECTION;
    let (mut strings, mut code, mut scanned, mut fatbins) = (vec![], vec![], vec![], vec![]);
    let mut wrappers = None;
    for s in elf.sections() {
        let (name, kind) = (s.name().unwrap_or(""), s.kind());
        // Where it lies in the file; one that does not lie in it is read by no one.
        let range = s.file_range().and_then(|(at, n)| {
            let at = usize::try_from(at).ok()?;
            let end = at.checked_add(usize::try_from(n).ok()?)?;
            (end <= data.len()).then_some(at..end)
        });
        if is_fatbin(name) {
            fatbins.push((range.clone().ok_or(Undecided)?, s.address(), s.size()));
        }
        if name == WRAPPER_SECTION && wrappers.is_none() {
            wrappers = Some(range.clone().ok_or(Undecided)?);
        }
        let Some(range) = range else { continue };
        if may_hold_strings(name, kind) {
            strings.push(range.clone());
        }
        if kind == SectionKind::Text {
            code.push(range.clone());
        }
        let scanned_kind = matches!(
            kind,
            SectionKind::Data | SectionKind::ReadOnlyData | SectionKind::ReadOnlyDataWithRel
        );
        if scanned_kind && !is_fatbin(name) && name != WRAPPER_SECTION {
            scanned.push(range);
        }
    }
    if code.is_empty() {
        return Err(Undecided); // regions may search the whole file then
    }
    // The sections searched and scanned, and the fat binaries, each apart from the others.
    let mut apart: Vec<Range<usize>> = strings.iter().chain(&scanned).cloned().collect();
    apart.sort_by_key(|r| (r.start, r.end));
    apart.dedup();
    apart.extend(fatbins.iter().map(|(r, _, _)| r.clone()));
    apart.sort_by_key(|r| (r.start, r.end));
    if apart.windows(2).any(|w| w[1].start < w[0].end) {
        return Err(Undecided);
    }
    for w in wrappers.map_or(&[][..], |r| &data[r]).chunks_exact(24) {
        let word = |at: usize, n: usize| {
            w[at..at + n]
                .iter()
                .rev()
                .fold(0u64, |v, &b| v << 8 | u64::from(b))
        };
        let address = word(8, 8);
        let in_fatbin = fatbins
            .iter()
            .any(|&(_, at, n)| (at..at.saturating_add(n)).contains(&address));
        if word(0, 4) == u64::from(WRAPPER_MAGIC) && !in_fatbin {
            return Err(Undecided);
        }
    }
    let texts = searched_strings();
    let (finders, overlap) = c_string_finders(&texts);
    let magic = memmem::Finder::new(&CONTAINER_MAGIC.to_le_bytes()).into_owned();
    // Per string: `Some(true)` found in a section without the magic (so outside any
    // container), `Some(false)` found only in sections with it, `None` not found. `search`
    // looks for the strings `wanted` (indices) not yet found.
    let mut present: Vec<Option<bool>> = vec![None; texts.len()];
    let search = |wanted: Range<usize>, present: &mut Vec<Option<bool>>| {
        for section in &strings {
            let missing: Vec<usize> = wanted
                .clone()
                .filter(|&i| present[i] != Some(true))
                .collect();
            if missing.is_empty() {
                break;
            }
            let mut here = vec![false; texts.len()];
            each_piece(map, section.clone(), overlap, |piece| {
                for &i in &missing {
                    here[i] = here[i] || finders[i].find(piece).is_some();
                }
                missing.iter().all(|&i| here[i])
            });
            if !here.contains(&true) {
                continue;
            }
            let mut has_magic = false;
            each_piece(map, section.clone(), 3, |piece| {
                has_magic = magic.find(piece).is_some();
                has_magic
            });
            for i in (0..texts.len()).filter(|&i| here[i]) {
                present[i] = Some(present[i] == Some(true) || !has_magic);
            }
        }
        match present[wanted].contains(&Some(false)) {
            true => Err(Undecided),
            false => Ok(()),
        }
    };
    search(0..DECIDING, &mut present)?;
    if !present[..DECIDING].contains(&Some(true)) {
        return Ok(None);
    }
    search(DECIDING..texts.len(), &mut present)?;
    let present: Vec<bool> = present.iter().map(|p| *p == Some(true)).collect();
    Ok(evidence_of(&present, || {
        let mut constants = Vec::new();
        for section in &code {
            each_piece(map, section.clone(), GETTER_LEN - 1, |piece| {
                constants.extend(getter_constants(&[piece]));
                false
            });
        }
        constants
    }))
}

/// [`super::runtime_in`] of a file outside the package that a process of it would load (the mixing
/// check, [`crate::facts::mixing`]), the same answer in bounded memory: the file's runtime
/// strings and code read in pieces ([`dependency_evidence`]); the whole file only where that
/// search cannot decide.
pub fn runtime_in_dependency(path: &Path) -> Option<FoundRuntime> {
    let file = RealFs::open_regular(path).ok()?.ok()?;
    let map = Mapped::of(&file).ok()?;
    match dependency_evidence(&map) {
        Ok(evidence) => runtime_found(path, || evidence),
        // Read whole, as the package's own files are.
        Err(Undecided) => gpu_code_and_runtime(path, map.bytes()).1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_range_and_overlap_by_what_a_match_needs() {
        let text = b"cudaErrorCudartUnloading\0";
        for at in [
            0,
            PIECE - 10,
            PIECE - 1,
            PIECE,
            2 * PIECE - 3,
            2 * PIECE + 100,
        ] {
            let mut data = vec![0x41u8; 2 * PIECE + 200];
            data[at..at + text.len()].copy_from_slice(text);
            let mut file = tempfile::tempfile().unwrap();
            std::io::Write::write_all(&mut file, &data).unwrap();
            let map = Mapped::of(&file).unwrap();
            let mut found = 0;
            let mut read = 0;
            each_piece(&map, 5..data.len(), text.len() - 1, |piece| {
                read += piece.len();
                found += memmem::find_iter(piece, text).count();
                false
            });
            assert!(found >= usize::from(at >= 5), "at {at}");
            assert!(read < data.len() + 3 * text.len(), "each byte about once");
        }
    }
}
