//! C strings looked for in an ELF file's data while the magic scan reads it
//! ([`super::read_gpu_code_and_strings`]), so that a caller who needs both (the runner's search
//! for a static CUDA runtime's own strings) reads the data once: each block is searched for
//! the container magic and for every string not yet found while it is in the CPU's cache.
//!
//! What is searched: the file's allocated data sections ([`may_hold_strings`]: `.rodata`,
//! `.rodata.str1.1`, `.data.rel.ro`, `.data`, …; never code, never `.nv_fatbin`,
//! `__nv_relfatbin` or `.nvFatBinSegment`, never the unwind tables), outside every container
//! found, each section on its own: a string counts when it lies, with its NUL, inside one
//! section and between containers.

use memchr::memmem;
use object::SectionKind;

use super::sections::{FATBIN_SECTION, RELFATBIN_SECTION, WRAPPER_SECTION};

/// Sections of a linked file's data that hold no C string a program wrote: the unwind tables
/// the compiler emits (`.eh_frame`, its index `.eh_frame_hdr`, and C++'s `.gcc_except_table`),
/// whose formats have no place for one. They are 70% of what nvJPEG 12.4's data sections
/// outside its containers hold (412 of 600 KB).
const UNWIND_SECTIONS: &[&str] = &[".eh_frame", ".eh_frame_hdr", ".gcc_except_table"];

/// Whether the section `name` of kind `kind` is one where a program's C strings are looked
/// for: allocated data (`object`'s `Data`, `ReadOnlyData`, `ReadOnlyString`), but not the fat
/// binaries' sections (device code) nor the unwind tables ([`UNWIND_SECTIONS`]). The runner's
/// own search for a static runtime's strings reads the same sections.
pub fn may_hold_strings(name: &str, kind: SectionKind) -> bool {
    matches!(
        kind,
        SectionKind::Data | SectionKind::ReadOnlyData | SectionKind::ReadOnlyString
    ) && ![FATBIN_SECTION, RELFATBIN_SECTION, WRAPPER_SECTION].contains(&name)
        && !UNWIND_SECTIONS.contains(&name)
}

/// Bytes searched at a time: small enough to stay in the cache while the magic and every
/// string are looked for in them.
pub(crate) const BLOCK: usize = 256 << 10;

/// Which of some C strings the data holds, found as the magic scan goes.
pub struct CStrings {
    /// A searcher for each string with its NUL ([`memmem::Finder::needle`]), built once (a
    /// file's data between containers is searched in many small pieces: cuFFT's in 24,454).
    finders: Vec<memmem::Finder<'static>>,
    /// Whether each was found.
    found: Vec<bool>,
    /// Whether the search covered what the module documentation says (a file whose data
    /// sections overlap, or that has none, is not searched here).
    covered: bool,
}

impl CStrings {
    /// A search for `texts`, each looked for as a C string (followed by its NUL; a longer
    /// string ending in it counts too, as the linker merges such tails). Each must be
    /// non-empty printable ASCII: no such string can hold a container's magic (whose second
    /// byte is 0xed), so none lies across the start of a container.
    pub fn new(texts: &[&str]) -> CStrings {
        let ascii = texts
            .iter()
            .all(|t| !t.is_empty() && t.bytes().all(|b| (0x20..0x7f).contains(&b)));
        CStrings {
            finders: (texts.iter())
                .map(|t| memmem::Finder::new(&[t.as_bytes(), b"\0"].concat()).into_owned())
                .collect(),
            found: vec![false; texts.len()],
            covered: ascii,
        }
    }

    /// For each string, whether the data holds it; `None` when the search could not cover the
    /// data as [the module](self) says (the caller searches itself then).
    pub fn found(&self) -> Option<&[bool]> {
        self.covered.then_some(&self.found[..])
    }

    /// Whether the search is still of use: it covers the data and some string is missing.
    pub(crate) fn wanted(&self) -> bool {
        self.covered && self.found.contains(&false)
    }

    /// Marks the search as not covering the data.
    pub(crate) fn give_up(&mut self) {
        self.covered = false;
    }

    /// Looks for the missing strings starting in `data[from..to]` and ending by `limit`, in
    /// blocks of [`BLOCK`], but those `ahead` defers; `excluded(start, end)` rejects a match
    /// lying on bytes that are not searched (containers found another way).
    pub(crate) fn search(
        &mut self,
        data: &[u8],
        (from, to, limit): (usize, usize, usize),
        ahead: &Ahead,
        excluded: &dyn Fn(usize, usize) -> bool,
    ) {
        self.search_for(data, (from, to, limit), &|i| !ahead.deferred[i], excluded);
    }

    /// Looks for the missing strings `wanted` says (by index), as [`CStrings::search`] says;
    /// nothing is allocated (cuFFT's data is searched in 24,454 pieces, one call each).
    fn search_for(
        &mut self,
        data: &[u8],
        (from, to, limit): (usize, usize, usize),
        wanted: &dyn Fn(usize) -> bool,
        excluded: &dyn Fn(usize, usize) -> bool,
    ) {
        // The longest string, NUL included, less one: how far a match may run past a block.
        let longest = self.finders.iter().map(|f| f.needle().len()).max();
        let overlap = longest.unwrap_or(1) - 1;
        let to = to.min(limit);
        let mut p = from;
        while self.covered && p < to && (0..self.found.len()).any(|i| !self.found[i] && wanted(i)) {
            let block_end = to.min(p + BLOCK);
            let window = &data[p..limit.min(block_end + overlap)];
            for i in 0..self.finders.len() {
                if self.found[i] || !wanted(i) {
                    continue;
                }
                let len = self.finders[i].needle().len();
                self.found[i] = self.finders[i]
                    .find_iter(window)
                    .take_while(|&at| p + at < block_end)
                    .any(|at| !excluded(p + at, p + at + len));
            }
            p = block_end;
        }
    }

    /// Looks ahead in the last [`BLOCK`] of the section `data[start..end]`, before any section
    /// is scanned (a program's static runtime is linked last, so its strings end `.rodata`):
    /// each missing string found there, off `excluded`, is left out of the section's forward
    /// search until [`CStrings::settle`] knows its containers.
    ///
    /// Kept for speed, measured (issue 58, 2026-12-04, docs/performance.md): without it (every
    /// string searched forward only), `lint --no-manifest --json` costs 1.20x the CPU on
    /// cuRAND 10.3.10 and 1.07x on cuBLASLt 12.9.3 (7 paired runs, medians), whose
    /// static runtimes' strings end a `.rodata` of 20 and 47 MB.
    pub(crate) fn look_ahead(
        &self,
        data: &[u8],
        (start, end): (usize, usize),
        excluded: &dyn Fn(usize, usize) -> bool,
    ) -> Ahead {
        let mut ahead = Ahead {
            start,
            end,
            whole: end - start <= BLOCK,
            candidates: Vec::new(),
            deferred: vec![false; self.finders.len()],
        };
        let from = start.max(end.saturating_sub(BLOCK));
        for (i, finder) in self.finders.iter().enumerate() {
            if self.found[i] || !self.covered {
                continue;
            }
            // A section no longer than a block is searched whole here: every match is known.
            ahead.deferred[i] |= ahead.whole;
            for at in finder.find_iter(&data[from..end]) {
                let (a, b) = (from + at, from + at + finder.needle().len());
                if !excluded(a, b) {
                    ahead.candidates.push((i, a));
                    ahead.deferred[i] = true;
                }
            }
        }
        ahead
    }

    /// Settles what [`CStrings::look_ahead`] deferred in one section, now that `containers`
    /// (the section's, sorted, disjoint) are known: a string with a candidate outside them is
    /// found; one whose candidates all lie inside is searched for between them (unless the
    /// look-ahead read the whole section, and so knows it is not there).
    pub(crate) fn settle(
        &mut self,
        data: &[u8],
        ahead: &Ahead,
        containers: &[(usize, usize)],
        excluded: &dyn Fn(usize, usize) -> bool,
    ) {
        let inside = |a: usize| {
            let i = containers.partition_point(|&(_, e)| e <= a);
            containers.get(i).is_some_and(|&(s, _)| s <= a)
        };
        for &(i, _) in ahead.candidates.iter().filter(|&&(_, a)| !inside(a)) {
            self.found[i] = true;
        }
        for i in 0..self.finders.len() {
            if !ahead.deferred[i] || self.found[i] || ahead.whole {
                continue;
            }
            let mut from = ahead.start;
            for &(s, e) in containers {
                self.search_for(data, (from, s, s), &|j| j == i, excluded);
                from = from.max(e);
            }
            self.search_for(data, (from, ahead.end, ahead.end), &|j| j == i, excluded);
        }
    }
}

/// What a section's last block holds ([`CStrings::look_ahead`]), yet to be settled against
/// the section's containers.
pub(crate) struct Ahead {
    /// The section's file range.
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// Whether the last block is the whole section (so every match of a string looked for is
    /// among the candidates).
    whole: bool,
    /// `(string, start)` of each match found there.
    candidates: Vec<(usize, usize)>,
    /// The strings left out of the section's forward search.
    deferred: Vec<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(_: usize, _: usize) -> bool {
        false
    }

    #[test]
    fn strings_are_found_across_blocks_within_the_limit_and_outside_exclusions() {
        let text = "cudaErrorCudartUnloading";
        for at in [0, BLOCK - 10, BLOCK - 1, BLOCK, 2 * BLOCK - 3] {
            let mut data = vec![0x41u8; 3 * BLOCK];
            data[at..at + text.len()].copy_from_slice(text.as_bytes());
            data[at + text.len()] = 0;
            let mut s = CStrings::new(&[text, "libcuda.so.1"]);
            s.search_for(&data, (0, data.len(), data.len()), &|_| true, &never);
            assert_eq!(s.found(), Some(&[true, false][..]), "at {at}");
            // Starting at or after `to`: not found here.
            let mut s = CStrings::new(&[text]);
            s.search_for(&data, (0, at, data.len()), &|_| true, &never);
            assert_eq!(s.found(), Some(&[false][..]), "at {at}");
            // Ending past `limit`: not found.
            let mut s = CStrings::new(&[text]);
            s.search_for(&data, (0, data.len(), at + text.len()), &|_| true, &never);
            assert_eq!(s.found(), Some(&[false][..]), "at {at}");
            // On excluded bytes: not found.
            let mut s = CStrings::new(&[text]);
            let inside = |a: usize, b: usize| a < at + 1 && b > at;
            s.search_for(&data, (0, data.len(), data.len()), &|_| true, &inside);
            assert_eq!(s.found(), Some(&[false][..]), "at {at}");
        }
    }

    /// Every string is looked for: a later one is found without an earlier one.
    #[test]
    fn a_later_string_is_found_without_an_earlier_one() {
        let data = b"junk\0libcuda.so.1\0".to_vec();
        let mut s = CStrings::new(&["cudaErrorCudartUnloading", "libcuda.so.1"]);
        s.search_for(&data, (0, data.len(), data.len()), &|_| true, &never);
        assert_eq!(s.found(), Some(&[false, true][..]));
    }

    #[test]
    fn only_printable_ascii_strings_are_searched_here() {
        assert!(CStrings::new(&["a\u{e9}"]).found().is_none());
        assert!(CStrings::new(&[""]).found().is_none());
        assert!(CStrings::new(&["libcuda.so.1"]).found().is_some());
    }
}
