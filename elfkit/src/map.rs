//! A file mapped read-only into memory: the `unsafe` of this crate.

use std::fs::File;
use std::ops::Range;

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

    /// Takes the pages of `range` (of [`Mapped::bytes`], widened to whole pages) out of this
    /// process's memory (`madvise(MADV_DONTNEED)`): mapped pages count in its resident size
    /// until then. A later read of them faults them in again from the file. Where the kernel
    /// refuses, they stay counted, and nothing else changes.
    pub fn release(&self, range: Range<usize>) {
        let Some(len) = range.end.checked_sub(range.start) else {
            return;
        };
        // SAFETY: the mapping is read-only, never written: after MADV_DONTNEED its pages read the
        // file's bytes again, the same bytes as long as the file does not change under it (what
        // `Mapped::of` assumes already). memmap2 checks the range against the mapping.
        let _ = unsafe {
            self.0
                .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, range.start, len)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The resident size of the mapping that holds `at`, in KiB, from `/proc/self/smaps`.
    fn resident_kib(at: *const u8) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((start, end)) = line
                .split_whitespace()
                .next()
                .and_then(|range| range.split_once('-'))
            {
                let parse = |h: &str| usize::from_str_radix(h, 16).ok();
                if let (Some(start), Some(end)) = (parse(start), parse(end)) {
                    inside = (start..end).contains(&(at as usize));
                    continue;
                }
            }
            if let Some(kib) = line.strip_prefix("Rss:").filter(|_| inside) {
                return kib.trim().trim_end_matches("kB").trim().parse().unwrap();
            }
        }
        panic!("no mapping holds {at:?}");
    }

    #[test]
    fn released_pages_leave_the_resident_size_and_read_the_same() {
        let data: Vec<u8> = (0..8 << 20).map(|i: u32| (i % 251) as u8).collect();
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, &data).unwrap();
        let map = Mapped::of(&file).unwrap();
        let bytes = map.bytes();
        let sum = |b: &[u8]| b.iter().step_by(4096).map(|&x| u64::from(x)).sum::<u64>();
        let before = sum(bytes);
        assert!(
            resident_kib(bytes.as_ptr()) >= 8 << 10,
            "every page read is resident"
        );
        map.release(0..bytes.len() / 2);
        let half = resident_kib(bytes.as_ptr());
        assert!(half <= (4 << 10) + 4, "half released: {half} KiB resident");
        map.release(0..bytes.len());
        assert_eq!(resident_kib(bytes.as_ptr()), 0);
        assert_eq!(sum(bytes), before, "released pages read the file again");
        assert_eq!(bytes, &data[..]);
    }
}
