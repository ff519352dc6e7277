//! What glibc's loader derives from this CPU, for a loader that is not asked
//! ([`super::Loader::debian`], [`super::Loader::nixpkgs`]): the glibc-hwcaps subdirectories it
//! searches and what `$PLATFORM` stands for.
//!
//! x86-64 only, as glibc has it (`sysdeps/x86/get-isa-level.h`, `sysdeps/x86_64/
//! dl-hwcaps-subdirs.c`, `sysdeps/x86/cpu-features.c`); elsewhere there are no glibc-hwcaps
//! subdirectories here and `$PLATFORM` is the kernel's `AT_PLATFORM`. `GLIBC_TUNABLES` masks
//! are not read. The differential test holds both to `ld.so --list-diagnostics`.

use std::sync::OnceLock;

/// The glibc-hwcaps subdirectories this CPU supports, best first (`x86-64-v4`, `x86-64-v3`,
/// `x86-64-v2`). Worked out once per process: `cpuid` traps to the hypervisor in a virtual
/// machine (8 µs each on the development machine), and every [`super::Loader`] asks.
pub fn glibc_hwcaps() -> Vec<String> {
    static SUBDIRS: OnceLock<Vec<String>> = OnceLock::new();
    SUBDIRS
        .get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            let level = x86::isa_level();
            #[cfg(not(target_arch = "x86_64"))]
            let level = 1; // the baseline: no glibc-hwcaps subdirectory
            (2..=level).rev().map(|v| format!("x86-64-v{v}")).collect()
        })
        .clone()
}

/// What `$PLATFORM` stands for in this process's loader: on an Intel x86-64 CPU with AVX2 and
/// friends `haswell`, else the kernel's `AT_PLATFORM`. Worked out once per process, as
/// [`glibc_hwcaps`] is.
pub fn platform() -> Option<String> {
    static PLATFORM: OnceLock<Option<String>> = OnceLock::new();
    PLATFORM
        .get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            if let Some(p) = x86::platform() {
                return Some(p.to_string());
            }
            // Else this process's `AT_PLATFORM` (`x86_64`, `aarch64`), when the kernel gave one.
            // SAFETY: getauxval has no preconditions; AT_PLATFORM, when present, points at a
            // NUL-terminated string the kernel put on the initial stack, alive for the whole
            // process.
            let p = unsafe { libc::getauxval(libc::AT_PLATFORM) } as *const libc::c_char;
            if p.is_null() {
                return None;
            }
            // SAFETY: as above, a valid NUL-terminated string that is never freed.
            let s = unsafe { std::ffi::CStr::from_ptr(p) };
            Some(s.to_string_lossy().into_owned())
        })
        .clone()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    /// Whether this CPU has every feature named.
    macro_rules! all {
        ($($feature:tt),+) => { true $(&& std::arch::is_x86_feature_detected!($feature))+ };
    }

    /// `cpuid` of `leaf` (subleaf 0).
    fn cpuid(leaf: u32) -> std::arch::x86_64::CpuidResult {
        // SAFETY: every x86-64 CPU has `cpuid`; an unsupported leaf returns zeros or the
        // highest basic leaf's values, which the callers only compare.
        #[allow(unused_unsafe)]
        unsafe {
            std::arch::x86_64::__cpuid(leaf)
        }
    }

    /// glibc's ISA level: 1 (baseline, every x86-64), 2, 3 or 4.
    pub fn isa_level() -> u32 {
        let lahf_sahf = cpuid(0x8000_0000).eax >= 0x8000_0001 && cpuid(0x8000_0001).ecx & 1 != 0;
        let v2 = lahf_sahf && all!("cmpxchg16b", "popcnt", "sse3", "ssse3", "sse4.1", "sse4.2");
        let v3 = v2 && all!("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "lzcnt", "movbe");
        let v4 = v3 && all!("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl");
        1 + u32::from(v2) + u32::from(v3) + u32::from(v4)
    }

    /// glibc's `dl_platform` override for Intel CPUs (`init_cpu_features`): `haswell` with
    /// AVX2, FMA, BMI1, BMI2, LZCNT, MOVBE and POPCNT. (Its `xeon_phi`, for AVX512ER and
    /// AVX512PF, is not detected: Rust no longer names those features.)
    pub fn platform() -> Option<&'static str> {
        let haswell = all!("avx2", "fma", "bmi1", "bmi2", "lzcnt", "movbe", "popcnt");
        let r = cpuid(0);
        let intel = [r.ebx, r.edx, r.ecx].map(u32::to_le_bytes).concat() == b"GenuineIntel";
        (intel && haswell).then_some("haswell")
    }
}
