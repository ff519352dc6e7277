//! Byte searches for the hook's start-up path, without CPU feature detection.
//!
//! `memchr::memchr` picks AVX2 or SSE2 at run time, and its first call asks the CPU which it
//! has (`cpuid`, through `std_detect`). The hook is a fresh process per build, so it paid for
//! that question on every run: in a virtual machine, where each `cpuid` traps to the
//! hypervisor, about 30–40 µs, a few percent of the whole hook. SSE2 is part of
//! x86-64 itself, so its searches need no question; elsewhere `memchr` decides as before
//! (aarch64 has NEON unconditionally).

/// The index of the first `needle` in `haystack`.
#[inline]
pub(crate) fn find(needle: u8, haystack: &[u8]) -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(one) = memchr::arch::x86_64::sse2::memchr::One::new(needle) {
        return one.find(haystack);
    }
    memchr::memchr(needle, haystack)
}

/// The index of the first `a` or `b` in `haystack`.
#[inline]
pub(crate) fn find2(a: u8, b: u8, haystack: &[u8]) -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(two) = memchr::arch::x86_64::sse2::memchr::Two::new(a, b) {
        return two.find(haystack);
    }
    memchr::memchr2(a, b, haystack)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_like_memchr() {
        let hay: Vec<u8> = (0..300u32).map(|i| (i % 97) as u8).collect();
        for n in [0u8, 1, 50, 96, 97, 200] {
            assert_eq!(find(n, &hay), memchr::memchr(n, &hay));
            for m in [0u8, 3, 96, 250] {
                assert_eq!(find2(n, m, &hay), memchr::memchr2(n, m, &hay));
                assert_eq!(find2(n, m, &hay[7..]), memchr::memchr2(n, m, &hay[7..]));
            }
        }
        assert_eq!(find(b'x', b""), None);
        assert_eq!(find2(b'"', b'\\', b"ab\\c\""), Some(2));
    }
}
