//! NVIDIA's stub libcuda, recognised by what it is rather than by the directory it sits in.
//!
//! The CUDA toolkit installs a `lib/stubs/libcuda.so` to link against on machines without a
//! driver. It defines the driver API and nothing else: loaded at run time instead of the driver,
//! every call fails with `CUDA_ERROR_STUB_LIBRARY` (34). Measured on the real files (Debian's
//! `nvidia-cuda-dev` 11.8.89 and 12.4.127, `stubs/libcuda.so`, 62 and 70 KB; `readelf -d`,
//! `nm -D`, `objdump -d`, and each entry point called with `dlopen`): `DT_SONAME` is
//! `libcuda.so.1`, there is no `DT_NEEDED` at all (the real driver needs libc, libm, libdl,
//! libpthread and librt), and each of its 545 (11.8) or 625 (12.4) `cu*` functions other than
//! the debugger's `cudbg*` is the two x86-64 instructions `mov $0x22,%eax; ret`, so `cuInit`,
//! `cuDriverGetVersion` and the rest return 34 without touching their arguments.
//!
//! [`stub_libcuda`] holds a file to that fingerprint (SONAME `libcuda.so.1`, no `DT_NEEDED`,
//! every `cu*` entry point `mov $34,%eax; ret`: `CUDA_ERROR_STUB_LIBRARY`). Other architectures'
//! stubs were not available to measure, so only x86-64 files are recognised.

use object::{Architecture, Object, ObjectSection, ObjectSymbol, SymbolKind};

/// The body of each of the stub's entry points on x86-64: `mov $0x22,%eax; ret`.
const RETURN_34_X86_64: [u8; 6] = [0xb8, 0x22, 0x00, 0x00, 0x00, 0xc3];

/// Entry points every stub defines (those a CUDA program cannot do without), each of them held
/// to [`RETURN_34_X86_64`] with the rest.
const REQUIRED: [&str; 6] = [
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGet",
    "cuCtxCreate_v2",
    "cuModuleLoadData",
    "cuLaunchKernel",
];

/// A file that is NVIDIA's stub libcuda.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct StubLibcuda {
    /// How many driver entry points it defines, each returning 34.
    pub entry_points: usize,
}

impl std::fmt::Display for StubLibcuda {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NVIDIA's stub libcuda ({} driver entry points, each returning 34, \
             CUDA_ERROR_STUB_LIBRARY)",
            self.entry_points
        )
    }
}

/// Whether `data` (a whole ELF file) is NVIDIA's stub libcuda by its fingerprint: an x86-64
/// shared object named `libcuda.so.1` that needs no library, defines [`REQUIRED`], and whose
/// every `cu*` function (the debugger's `cudbg*` aside) is `mov $34,%eax; ret`. Anything
/// else, unreadable files included, is not. One pass over the dynamic symbols.
pub fn stub_libcuda(data: &[u8]) -> Option<StubLibcuda> {
    let info = crate::dynamic_info(data).ok()??;
    if info.soname.as_deref() != Some("libcuda.so.1") || !info.needed.is_empty() {
        return None;
    }
    let file = object::File::parse(data).ok()?;
    if file.architecture() != Architecture::X86_64 {
        return None;
    }
    // The `cu*` entry points, each checked to be the stub's body.
    let mut entry_points = Vec::new();
    for symbol in file.dynamic_symbols() {
        if !symbol.is_definition() || symbol.kind() != SymbolKind::Text {
            continue;
        }
        let Ok(name) = symbol.name() else {
            return None;
        };
        if !name.starts_with("cu") || name.starts_with("cudbg") {
            continue;
        }
        let section = file.section_by_index(symbol.section_index()?).ok()?;
        let body = section
            .data_range(symbol.address(), RETURN_34_X86_64.len() as u64)
            .ok()??;
        if body != RETURN_34_X86_64 {
            return None;
        }
        entry_points.push(name);
    }
    REQUIRED
        .iter()
        .all(|r| entry_points.contains(r))
        .then_some(StubLibcuda {
            entry_points: entry_points.len(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_an_elf_shared_object_is_no_stub() {
        assert_eq!(stub_libcuda(b""), None);
        assert_eq!(stub_libcuda(b"\x7fELF"), None);
        assert_eq!(stub_libcuda(&[0u8; 4096]), None);
    }
}
