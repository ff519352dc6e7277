//! Where a file's containers are: the sections NVIDIA's toolchain writes them to, the wrappers
//! that point at them, archive members, a bare `.fatbin` file, and, by their magic, anywhere
//! else a program keeps one as bytes.
//!
//! Each byte of the file is looked at a bounded number of times: sections that hold containers
//! are walked once, the magic scan covers the other data sections once and resumes past every
//! candidate it tried, so a file of any size is read in linear time.

use std::collections::BTreeMap;

use memchr::memmem;
use object::read::archive::ArchiveFile;
use object::{Object, ObjectKind, ObjectSection, SectionKind};

use super::parse::{bytes_at, container_at, containers_in, u32_at, u64_at, CONTAINER_MAGIC};
use super::strings::{may_hold_strings, Ahead, CStrings, BLOCK};
use super::{Container, Entry, FatbinError, GpuCode, Origin, Purpose};

pub use super::sections::{FATBIN_SECTION, RELFATBIN_SECTION, WRAPPER_MAGIC, WRAPPER_SECTION};

/// The containers of a file's bytes: an ELF file, a `.a` archive of them, or a bare fat binary.
/// Anything else has none.
pub fn read_gpu_code(data: &[u8]) -> Result<GpuCode, FatbinError> {
    read_gpu_code_and_strings(data, &mut CStrings::new(&[]))
}

/// [`read_gpu_code`], looking for `strings` in the ELF file's data sections as the magic scan
/// reads them ([`super::strings`] says which bytes), so that the data is read once. An
/// archive, a bare fat binary, or an ELF file whose data sections overlap or that has no
/// section headers is not searched (`strings.found()` is `None` then).
pub fn read_gpu_code_and_strings(
    data: &[u8],
    strings: &mut CStrings,
) -> Result<GpuCode, FatbinError> {
    let mut code = GpuCode::default();
    if !data.starts_with(b"\x7fELF") {
        strings.give_up();
    }
    if data.starts_with(b"!<arch>\n") || data.starts_with(b"!<thin>\n") {
        let archive =
            ArchiveFile::parse(data).map_err(|e| FatbinError::Container(e.to_string()))?;
        for member in archive.members() {
            let member = member.map_err(|e| FatbinError::Container(e.to_string()))?;
            let (start, size) = member.file_range();
            // None: a thin archive's member lives in another file; else it must be ELF.
            let Some(bytes) = bytes_at(data, start, size).filter(|b| b.starts_with(b"\x7fELF"))
            else {
                continue;
            };
            let name = String::from_utf8_lossy(member.name()).into_owned();
            let from = code.containers.len();
            // ELF headers are read in place and must be aligned; `ar` aligns members to 2.
            let mut copy = Vec::new();
            let none = &mut CStrings::new(&[]);
            elf_containers(aligned(bytes, &mut copy), start, &mut code.containers, none)?;
            for c in &mut code.containers[from..] {
                c.member = Some(name.clone());
            }
        }
    } else if data.starts_with(b"\x7fELF") {
        elf_containers(data, 0, &mut code.containers, strings)?;
    } else if super::parse::has_magic(data, 0) {
        for found in containers_in(data, 0)? {
            code.containers.push(container(0, found, Origin::File));
        }
    }
    Ok(code)
}

/// `bytes`, or, when they do not start 8-aligned, a copy of them in `buffer` that does.
fn aligned<'a>(bytes: &'a [u8], buffer: &'a mut Vec<u8>) -> &'a [u8] {
    if bytes.as_ptr().align_offset(8) == 0 {
        return bytes;
    }
    buffer.resize(bytes.len() + 8, 0);
    let skip = buffer.as_ptr().align_offset(8);
    buffer[skip..skip + bytes.len()].copy_from_slice(bytes);
    &buffer[skip..skip + bytes.len()]
}

/// Disjoint byte ranges of a file, merged as they are added: what the walks have covered.
#[derive(Default)]
struct Ranges(BTreeMap<usize, usize>);

impl Ranges {
    /// Whether any added range meets `[start, end)`.
    fn meets(&self, start: usize, end: usize) -> bool {
        self.0
            .range(..end.max(start + 1))
            .next_back()
            .is_some_and(|(_, &e)| e > start)
    }

    fn add(&mut self, mut start: usize, mut end: usize) {
        while let Some((&s, &e)) = self.0.range(..=end).next_back() {
            if e < start {
                break;
            }
            self.0.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.0.insert(start, end);
    }
}

/// A section with a file range, for address look-ups and the scan.
struct Placed {
    name: String,
    address: u64,
    start: usize,
    end: usize,
    kind: SectionKind,
}

/// The containers of one ELF file (`base`: its offset in the file read, for archive members).
/// Sections that overlap are each looked at once: a fat-binary section meeting one already
/// walked is skipped, data sections are merged before the scan. `strings` are looked for as
/// the data sections are read ([`super::strings`]).
fn elf_containers(
    data: &[u8],
    base: u64,
    out: &mut Vec<Container>,
    strings: &mut CStrings,
) -> Result<(), FatbinError> {
    let file = object::File::parse(data).map_err(|e| {
        strings.give_up();
        FatbinError::Container(e.to_string())
    })?;
    if !file.is_little_endian() {
        strings.give_up();
        return Ok(()); // fat binaries are little-endian; NVIDIA ships no others
    }
    let from = out.len();
    let mut placed: Vec<Placed> = file
        .sections()
        .filter_map(|s| {
            let (start, size) = s.file_range()?;
            let start = usize::try_from(start).ok()?;
            let end = start.checked_add(usize::try_from(size).ok()?)?;
            // An empty section holds nothing, and one at another's offset would stand in for
            // it where sections are told apart by where they start.
            (start < end && end <= data.len()).then(|| Placed {
                name: s.name().unwrap_or_default().to_owned(),
                address: s.address(),
                start,
                end,
                kind: s.kind(),
            })
        })
        .collect();
    if file.sections().next().is_none() {
        // No section headers (stripped by sstrip, say): the magic scan over the whole file.
        strings.give_up();
        scan(data, 0, data.len(), base, "(no sections)", out, None);
        return Ok(());
    }
    let relocatable = file.kind() == ObjectKind::Relocatable;
    let mut walked = Ranges::default();
    for s in (placed.iter()).filter(|s| s.name == FATBIN_SECTION || s.name == RELFATBIN_SECTION) {
        if walked.meets(s.start, s.end) {
            continue;
        }
        let section_base = base + s.start as u64;
        for found in containers_in(&data[s.start..s.end], section_base)? {
            let mut c = container(section_base, found, Origin::Section(s.name.clone()));
            if s.name == RELFATBIN_SECTION {
                c.purpose = Purpose::DeviceLinkInput; // a relocatable object's: LinkInput below
            }
            out.push(c);
        }
        walked.add(s.start, s.end);
    }
    // Wrappers hold the address of their container; in a relocatable object it is filled in by
    // a relocation, so only linked files are followed. Addresses are looked up among the
    // sections sorted by address.
    placed.sort_by_key(|s| s.address);
    let wrappers = placed.iter().find(|s| s.name == WRAPPER_SECTION);
    if let Some(wrappers) = wrappers.filter(|_| !relocatable) {
        for w in data[wrappers.start..wrappers.end].chunks_exact(24) {
            let address = u64_at(w, 8).filter(|_| u32_at(w, 0) == Some(WRAPPER_MAGIC));
            let Some((at, section)) = address
                .and_then(|a| file_offset_of(&placed, a))
                .filter(|&(at, _)| !walked.meets(at, at + 1))
            else {
                continue;
            };
            let (entries, stop) = container_at(data, at, base)?;
            walked.add(at, stop);
            let origin = Origin::Wrapper(section);
            out.push(container(base, (at, entries, stop), origin));
        }
    }
    use SectionKind::{Data, ReadOnlyData, ReadOnlyDataWithRel};
    // The magic elsewhere: data sections only (never code, never the ones walked), each byte
    // once however the section headers overlap.
    let mut data_sections: Vec<&Placed> = (placed.iter())
        .filter(|s| ![FATBIN_SECTION, RELFATBIN_SECTION, WRAPPER_SECTION].contains(&&*s.name))
        .filter(|s| matches!(s.kind, Data | ReadOnlyData | ReadOnlyDataWithRel))
        .collect();
    data_sections.sort_by_key(|s| (s.start, s.end));
    // The sections the strings are looked for in: the scanned ones but ReadOnlyDataWithRel
    // (which ELF files do not have), and the string sections, which are not scanned. Each must
    // be read whole and alone: where any of them overlap, the strings are not searched here.
    let is_text_data = |s: &Placed| may_hold_strings(&s.name, s.kind);
    let mut searched: Vec<(usize, usize)> = placed
        .iter()
        .filter(|s| is_text_data(s) || data_sections.iter().any(|d| std::ptr::eq(*d, *s)))
        .map(|s| (s.start, s.end))
        .collect();
    searched.sort_unstable();
    if searched.windows(2).any(|w| w[1].0 < w[0].1) {
        strings.give_up();
    }
    // Every searched section's last block first, before any is scanned: what is found there
    // the forward search does not look for (kept for speed: CStrings::look_ahead says what it
    // buys).
    let excluded = |a, b| walked.meets(a, b);
    let mut aheads: BTreeMap<usize, Ahead> = BTreeMap::new();
    if strings.wanted() {
        for s in placed.iter().filter(|s| is_text_data(s)) {
            aheads.insert(
                s.start,
                strings.look_ahead(data, (s.start, s.end), &excluded),
            );
        }
    }
    let mut scanned_to = 0;
    let before = out.len();
    for s in &data_sections {
        let start = s.start.max(scanned_to);
        if start >= s.end {
            continue;
        }
        let ahead = aheads.remove(&s.start).filter(|_| is_text_data(s));
        let search = ahead.map(|ahead| (&mut *strings, &walked, ahead));
        scan(data, start, s.end, base, &s.name, out, search);
        scanned_to = s.end;
    }
    // The string sections, which the magic scan does not read.
    for (_, ahead) in aheads {
        strings.search(data, (ahead.start, ahead.end, ahead.end), &ahead, &excluded);
        strings.settle(data, &ahead, &[], &excluded);
    }
    // A container a walk or a wrapper found (its bytes are walked) is not found twice by the
    // scan.
    let mut kept = out.split_off(before);
    kept.retain(|c| {
        let at = (c.offset - base) as usize;
        !walked.meets(at, at + 1)
    });
    out.extend(kept);
    out[from..].sort_by_key(|c| c.offset);
    if relocatable {
        for c in &mut out[from..] {
            c.purpose = Purpose::LinkInput;
        }
    }
    Ok(())
}

/// The container read at `at` of the bytes walked, up to `end` (`base`: their offset in the
/// file), found where `origin` says; loadable until the caller says otherwise.
fn container(
    base: u64,
    (at, entries, end): (usize, Vec<Entry>, usize),
    origin: Origin,
) -> Container {
    Container {
        offset: base + at as u64,
        size: (end - at) as u64,
        origin,
        purpose: Purpose::Loadable,
        member: None,
        entries,
    }
}

/// The file offset of a virtual address, and the name of the section holding it, among
/// `sections` sorted by address.
fn file_offset_of(sections: &[Placed], address: u64) -> Option<(usize, String)> {
    let i = sections
        .partition_point(|s| s.address <= address)
        .checked_sub(1)?;
    let s = &sections[i];
    let into = usize::try_from(address - s.address).ok()?;
    let at = s.start.checked_add(into)?;
    (s.address != 0 && at < s.end).then(|| (at, s.name.clone()))
}

/// Finds containers by their magic in `data[start..end]`. A candidate that does not parse is
/// a coincidence of bytes and is skipped, and the search resumes past what its walk read (the
/// header it failed at): bytes a candidate walked, valid or not, are not searched again, so
/// each byte is read a bounded number of times. (A real container hidden inside the entries of
/// a bogus one is then missed: only a file made to deceive has that.)
///
/// With `search` (strings to look for, the bytes already known to be containers, where a match
/// does not count, and what the section's last block holds), the strings are looked for in the
/// same bytes block by block, outside the containers found: each block of [`BLOCK`] bytes is
/// searched for the magic, then for the strings up to the first container in it, while it is
/// in the cache.
fn scan(
    data: &[u8],
    start: usize,
    end: usize,
    base: u64,
    section: &str,
    out: &mut Vec<Container>,
    mut search: Option<(&mut CStrings, &Ranges, Ahead)>,
) {
    let magic = CONTAINER_MAGIC.to_le_bytes();
    let finder = memmem::Finder::new(&magic);
    let region = &data[..end];
    let mut p = start;
    let from = out.len();
    // Strings have been looked for in the matches that start before `s` (never past `p`).
    let mut s = start;
    let mut strings_to = |s: &mut usize, to: usize, limit: usize| {
        if let Some((strings, walked, ahead)) = search.as_mut().filter(|x| x.0.wanted()) {
            let excluded = |a, b| walked.meets(a, b);
            strings.search(data, (*s, to, limit), ahead, &excluded);
        }
        *s = to;
    };
    loop {
        // The leftmost magic starting in this block, as a search of the whole rest would find
        // it: the window runs on by the magic's length less one.
        let block_end = end.min(p + BLOCK);
        let window = &region[p..end.min(block_end + magic.len() - 1)];
        let hit = finder.find(window).map(|hit| p + hit);
        let Some(at) = hit.filter(|&at| at < block_end) else {
            strings_to(&mut s, block_end, end);
            if block_end >= end {
                break;
            }
            p = block_end;
            continue;
        };
        match container_at(region, at, base) {
            Ok((entries, stop)) if !entries.is_empty() => {
                // No string holds the magic, so none runs from before `at` into the container.
                strings_to(&mut s, at, at);
                s = stop;
                let origin = Origin::Scan(section.to_owned());
                out.push(container(base, (at, entries, stop), origin));
                p = stop;
            }
            Ok((_, stop)) => p = stop.max(at + 1),
            Err(e) => {
                let reached = usize::try_from(e.offset().saturating_sub(base)).unwrap_or(at);
                p = reached.clamp(at + 1, end);
            }
        }
    }
    if let Some((strings, walked, ahead)) = search {
        let containers: Vec<(usize, usize)> = out[from..]
            .iter()
            .map(|c| {
                let at = (c.offset - base) as usize;
                (at, at + c.size as usize)
            })
            .collect();
        strings.settle(data, &ahead, &containers, &|a, b| walked.meets(a, b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fatbin::parse::tests::{container, entry};

    #[test]
    fn a_bare_fatbin_file_lists_its_containers() {
        let mut file = container(&[entry(2, 90, 1, 8, 0x11, 8)]);
        file.extend(container(&[entry(1, 80, 8, 0, 0x11, 8)]));
        let code = read_gpu_code(&file).unwrap();
        assert_eq!(code.containers.len(), 2);
        assert_eq!(code.containers[1].origin, Origin::File);
        assert_eq!(code.containers[1].offset, 88);
    }

    #[test]
    fn other_files_have_no_gpu_code() {
        assert_eq!(read_gpu_code(b"#!/bin/sh\n").unwrap(), GpuCode::default());
        assert_eq!(read_gpu_code(b"").unwrap(), GpuCode::default());
    }

    #[test]
    fn the_scan_finds_a_container_among_other_bytes_and_skips_coincidences() {
        let mut data = vec![0x11u8; 37];
        data.extend_from_slice(&CONTAINER_MAGIC.to_le_bytes()); // a coincidence: no header
        data.extend_from_slice(&[0x22; 5]);
        let at = data.len();
        data.extend(container(&[entry(2, 86, 1, 8, 0x11, 3)]));
        data.extend_from_slice(&[0x33; 9]);
        let mut out = Vec::new();
        scan(&data, 0, data.len(), 0, ".rodata", &mut out, None);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].offset, at as u64);
        assert_eq!(out[0].origin, Origin::Scan(".rodata".into()));
    }

    /// A crafted region: 64-byte entry headers, each holding a container header at byte 48
    /// whose entries run on to a truncated last one. Every candidate fails at the end; a scan
    /// that walked each again would read the region once per candidate.
    #[test]
    fn failed_candidates_that_walk_far_are_not_walked_again() {
        let headers = 1 << 15; // 2 MiB: minutes for a quadratic scan, milliseconds here
        let len = headers * 64 + 32; // the last entry header is cut short
        let mut data = Vec::with_capacity(len);
        for k in 0..headers {
            let mut h = entry(2, 80, 1, 8, 0x11, 0);
            // Its entries are the headers after this one, up to the end of the data.
            h[48..52].copy_from_slice(&CONTAINER_MAGIC.to_le_bytes());
            h[52..54].copy_from_slice(&1u16.to_le_bytes());
            h[54..56].copy_from_slice(&16u16.to_le_bytes());
            h[56..64].copy_from_slice(&((len - 64 * (k + 1)) as u64).to_le_bytes());
            data.extend(h);
        }
        data.resize(len, 0);
        let started = std::time::Instant::now();
        let mut out = Vec::new();
        scan(&data, 0, data.len(), 0, ".rodata", &mut out, None);
        assert!(out.is_empty());
        assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
    }

    /// Which of `texts` lie, with their NUL, in `data` outside `containers`: the two-pass
    /// search the scan's own is held to.
    fn outside_containers(data: &[u8], containers: &[Container], texts: &[&str]) -> Vec<bool> {
        let mut pieces = Vec::new();
        let mut from = 0;
        for c in containers {
            pieces.push(&data[from..c.offset as usize]);
            from = (c.offset + c.size) as usize;
        }
        pieces.push(&data[from..]);
        texts
            .iter()
            .map(|t| {
                let needle = [t.as_bytes(), b"\0"].concat();
                pieces.iter().any(|p| memmem::find(p, &needle).is_some())
            })
            .collect()
    }

    /// A string inside a container, in the last block or not, is not found; one between
    /// containers, after a coincidence of the magic, or found ahead in the last block is.
    #[test]
    fn the_scan_finds_strings_outside_its_containers_as_two_passes_do() {
        let texts = [
            "libcuda.so.1",
            "cudaLogsCurrent",
            "cudaErrorCudartUnloading",
            "/cudart.shm.%x.%x.%llx",
            "CUDA_ENABLE_MODULE_LAZY_LOADING",
        ];
        let with = |container: &mut Vec<u8>, text: &str| {
            let at = container.len() - 40;
            container[at..at + text.len()].copy_from_slice(text.as_bytes());
            container[at + text.len()] = 0;
        };
        for shm_early in [false, true] {
            let mut data = b"junk\0libcuda.so.1\0".to_vec();
            let mut first = container(&[entry(2, 90, 1, 8, 0x11, 64)]);
            with(&mut first, texts[1]);
            data.extend(first);
            data.extend_from_slice(&CONTAINER_MAGIC.to_le_bytes()); // no container: 0 entries
            data.extend_from_slice(b"cudaErrorCudartUnloading\0");
            if shm_early {
                data.extend_from_slice(b"/cudart.shm.%x.%x.%llx\0");
            }
            data.resize(BLOCK + 1000, 0x11);
            let mut last = container(&[entry(2, 90, 1, 8, 0x11, 64)]);
            with(&mut last, texts[3]);
            data.extend(last);
            data.extend_from_slice(b"CUDA_ENABLE_MODULE_LAZY_LOADING\0");
            let mut strings = CStrings::new(&texts);
            let walked = Ranges::default();
            let mut out = Vec::new();
            let ahead = strings.look_ahead(&data, (0, data.len()), &|_, _| false);
            let search = Some((&mut strings, &walked, ahead));
            scan(&data, 0, data.len(), 0, ".rodata", &mut out, search);
            assert_eq!(out.len(), 2);
            let expected = outside_containers(&data, &out, &texts);
            assert_eq!(expected, [true, false, true, shm_early, true]);
            assert_eq!(
                strings.found(),
                Some(&expected[..]),
                "shm early: {shm_early}"
            );
        }
    }

    #[test]
    fn ranges_merge_and_answer_overlaps() {
        let mut r = Ranges::default();
        r.add(10, 20);
        r.add(30, 40);
        assert!(r.meets(15, 16) && r.meets(5, 11) && r.meets(39, 50));
        assert!(!r.meets(20, 30) && !r.meets(0, 10) && !r.meets(40, 41));
        r.add(18, 32);
        assert_eq!(r.0.len(), 1);
        assert!(r.meets(25, 26));
    }

    #[test]
    fn a_magic_on_every_byte_is_scanned_in_linear_time() {
        // Candidates that claim the whole rest of the region and fail at its end.
        let mut data = Vec::new();
        for _ in 0..20_000 {
            data.extend_from_slice(&CONTAINER_MAGIC.to_le_bytes());
            data.extend_from_slice(&1u16.to_le_bytes());
            data.extend_from_slice(&16u16.to_le_bytes());
        }
        let started = std::time::Instant::now();
        let mut out = Vec::new();
        scan(&data, 0, data.len(), 0, ".data", &mut out, None);
        assert!(out.is_empty());
        // 160 kB: a quadratic scan takes minutes here, a linear one well under a second.
        assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
    }
}
