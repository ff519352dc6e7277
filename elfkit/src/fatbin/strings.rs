//! C strings looked for in an ELF file's data while the magic scan reads it
//! ([`super::read_gpu_code_and_strings`]), so that a caller who needs both (the runner's search
//! for a static CUDA runtime's own strings) reads the data once: each block is searched for
//! the container magic and for every string not yet found while it is in the CPU's cache.
//!
//! What is searched: the file's allocated data sections (`object`'s `Data`, `ReadOnlyData` and
//! `ReadOnlyString`: `.rodata`, `.rodata.str1.1`, `.data.rel.ro`, `.data`, …; never code, and
//! never `.nv_fatbin`, `__nv_relfatbin` or `.nvFatBinSegment`), outside every container found,
//! each section on its own: a string counts when it lies, with its NUL, inside one section and
//! between containers.

use memchr::memmem;

/// Bytes searched at a time: small enough to stay in the cache while the magic and every
/// string are looked for in them.
pub(crate) const BLOCK: usize = 256 << 10;

/// Which of some C strings the data holds, found as the magic scan goes.
pub struct CStrings {
    /// Each string with its NUL.
    needles: Vec<Vec<u8>>,
    /// Whether each was found.
    found: Vec<bool>,
    /// Whether each is left out of the forward search, found ahead ([`CStrings::look_ahead`]).
    deferred: Vec<bool>,
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
            needles: texts
                .iter()
                .map(|t| [t.as_bytes(), b"\0"].concat())
                .collect(),
            found: vec![false; texts.len()],
            deferred: vec![false; texts.len()],
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

    /// The longest string, NUL included, less one: how far a match may run past a block.
    fn overlap(&self) -> usize {
        self.needles.iter().map(Vec::len).max().unwrap_or(1) - 1
    }

    /// Looks for the missing strings starting in `data[from..to]` and ending by `limit`, in
    /// blocks of [`BLOCK`]; `excluded(start, end)` rejects a match lying on bytes that are
    /// not searched (containers found another way).
    pub(crate) fn search(
        &mut self,
        data: &[u8],
        from: usize,
        to: usize,
        limit: usize,
        excluded: &dyn Fn(usize, usize) -> bool,
    ) {
        self.search_some(data, from, to, limit, excluded, None);
    }

    /// [`CStrings::search`] for the strings neither found nor deferred, or for string `only`.
    fn search_some(
        &mut self,
        data: &[u8],
        from: usize,
        to: usize,
        limit: usize,
        excluded: &dyn Fn(usize, usize) -> bool,
        only: Option<usize>,
    ) {
        let overlap = self.overlap();
        let searched = |i: usize| match only {
            Some(only) => only == i,
            None => !self.deferred[i],
        };
        if !self.covered || !(0..self.needles.len()).any(|i| !self.found[i] && searched(i)) {
            return;
        }
        let to = to.min(limit);
        let mut p = from;
        while p < to && self.wanted() {
            let block_end = to.min(p + BLOCK);
            let window = &data[p..limit.min(block_end + overlap)];
            for (i, needle) in self.needles.iter().enumerate() {
                if self.found[i] || !searched(i) {
                    continue;
                }
                self.found[i] = memmem::find_iter(window, needle)
                    .take_while(|&at| p + at < block_end)
                    .any(|at| !excluded(p + at, p + at + needle.len()));
            }
            p = block_end;
        }
    }

    /// Looks ahead in the last [`BLOCK`] of the section `data[start..end]`, before it is
    /// scanned (a program's static runtime is linked last, so its strings end `.rodata`): each
    /// missing string found there, off `excluded`, is left out of the forward search until
    /// [`CStrings::settle`] knows the section's containers.
    pub(crate) fn look_ahead(
        &mut self,
        data: &[u8],
        start: usize,
        end: usize,
        excluded: &dyn Fn(usize, usize) -> bool,
    ) -> Ahead {
        let from = start.max(end.saturating_sub(BLOCK));
        let mut candidates = Vec::new();
        for (i, needle) in self.needles.iter().enumerate() {
            if self.found[i] {
                continue;
            }
            for at in memmem::find_iter(&data[from..end], needle) {
                let (a, b) = (from + at, from + at + needle.len());
                if !excluded(a, b) {
                    candidates.push((i, a, b));
                    self.deferred[i] = true;
                }
            }
        }
        Ahead {
            start,
            end,
            candidates,
        }
    }

    /// Settles what [`CStrings::look_ahead`] deferred, now that `containers` (the section's,
    /// sorted, disjoint) are known: a string with a candidate outside them is found; one whose
    /// candidates all lie inside is searched for in the section's bytes between them.
    pub(crate) fn settle(
        &mut self,
        data: &[u8],
        ahead: Ahead,
        containers: &[(usize, usize)],
        excluded: &dyn Fn(usize, usize) -> bool,
    ) {
        let inside = |a: usize| {
            let i = containers.partition_point(|&(_, e)| e <= a);
            containers.get(i).is_some_and(|&(s, _)| s <= a)
        };
        for &(i, a, _) in &ahead.candidates {
            if !inside(a) {
                self.found[i] = true;
            }
        }
        for i in 0..self.needles.len() {
            if !std::mem::take(&mut self.deferred[i]) || self.found[i] {
                continue;
            }
            let mut from = ahead.start;
            for &(s, e) in containers {
                self.search_some(data, from, s, s, excluded, Some(i));
                from = from.max(e);
            }
            self.search_some(data, from, ahead.end, ahead.end, excluded, Some(i));
        }
    }
}

/// Strings a section's last block holds ([`CStrings::look_ahead`]): `(string, start, end)`,
/// each yet to be settled against the section's containers.
pub(crate) struct Ahead {
    start: usize,
    end: usize,
    candidates: Vec<(usize, usize, usize)>,
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
            s.search(&data, 0, data.len(), data.len(), &never);
            assert_eq!(s.found(), Some(&[true, false][..]), "at {at}");
            // Starting at or after `to`: not found here.
            let mut s = CStrings::new(&[text]);
            s.search(&data, 0, at, data.len(), &never);
            assert_eq!(s.found(), Some(&[false][..]), "at {at}");
            // Ending past `limit`: not found.
            let mut s = CStrings::new(&[text]);
            s.search(&data, 0, data.len(), at + text.len(), &never);
            assert_eq!(s.found(), Some(&[false][..]), "at {at}");
            // On excluded bytes: not found.
            let mut s = CStrings::new(&[text]);
            let inside = |a: usize, b: usize| a < at + 1 && b > at;
            s.search(&data, 0, data.len(), data.len(), &inside);
            assert_eq!(s.found(), Some(&[false][..]), "at {at}");
        }
    }

    #[test]
    fn only_printable_ascii_strings_are_searched_here() {
        assert!(CStrings::new(&["a\u{e9}"]).found().is_none());
        assert!(CStrings::new(&[""]).found().is_none());
        assert!(CStrings::new(&["libcuda.so.1"]).found().is_some());
    }
}
