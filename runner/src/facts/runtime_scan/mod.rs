//! Finds the CUDA runtimes inside a package's files, without loading them: shared `libcudart`
//! files, archives and static copies linked into other ELF files, with their versions where a
//! name or the runtime's own code gives them. Two runtimes of different versions in one process
//! are the version-mixing hazard ([`crate::facts::mixing`]): each resolves driver entry points at its
//! own version.
//!
//! A static copy (`libcudart_static.a` linked into a program or library) is found by what the
//! runtime's own data contains ([`static_runtime_in`]), never by a symbol: `strip -s`,
//! `--strip-unneeded`, `-Wl,-s` and section-less (sstrip-ed) files leave no symbol to read, and
//! a file can define the runtime's API without holding the runtime (XLA's `cudart_stub.cc`, a
//! table of trampolines to a libcudart it loads later, in JAX's CUDA plugins).
//!
//! Loading a runtime to ask it is [`crate::cuda::cudart`].

use std::ops::Range;
use std::path::{Path, PathBuf};

use memchr::memmem;
use object::{Object, ObjectSection, SectionKind};
use serde::Serialize;

use cuda_sandbox_elfkit::fatbin::rules::Toolkit;
use cuda_sandbox_elfkit::fatbin::strings::{may_hold_strings, CStrings};
use cuda_sandbox_elfkit::fatbin::{read_gpu_code_and_strings, FatbinError, GpuCode};

use crate::cuda::cudart::version_from_file_name;
use crate::cuda::version::CudaVersion;

mod dependency;
pub use dependency::runtime_in_dependency;

/// How a runtime is present in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuntimeForm {
    /// A `libcudart.so*` shared library.
    Shared,
    /// `libcudart_static.a` (or another archive of it).
    Archive,
    /// Linked statically into another ELF file.
    StaticCopy,
}

impl RuntimeForm {
    /// Its stable name, as the JSON writes it: `shared`, `archive`, `static-copy`.
    pub fn name(self) -> &'static str {
        match self {
            RuntimeForm::Shared => "shared",
            RuntimeForm::Archive => "archive",
            RuntimeForm::StaticCopy => "static-copy",
        }
    }
}

/// One CUDA runtime found in a package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FoundRuntime {
    /// The file holding it.
    pub file: PathBuf,
    /// Shared, archive, or a static copy inside another ELF file.
    pub form: RuntimeForm,
    /// `12.9`, `12.x` (major only), or `None` when nothing names it.
    pub version: Option<Toolkit>,
    /// Why it counts as a runtime and where the version comes from, e.g. `symbol
    /// cudaGetDriverEntryPoint; version 12.9 from cudaRuntimeGetVersion's constant 12090`.
    pub evidence: String,
}

/// The runtime's own strings a static copy keeps when stripped, none of them a symbol name, one
/// a line ([`runtime_markers`]). Measured (2026-12-01) in the `.rodata` of NVIDIA's libcudart
/// 11.8.89 (shared), 12.9.79 and 13.0.96 (shared, and `libcudart_static.a` linked into programs
/// and shared libraries, stripped with `-S`, `-s`, `--strip-unneeded`, and `-Wl,--gc-sections
/// -s`): all four in every one. In none of libcuda 535.309.01 / 470.256.02, libnvidia-ml,
/// libnvidia-ptxjitcompiler, libcurand 10.4, the CUDA 13.5 tools, nor any of 4,230 other ELF
/// files of a Debian 12 system (`/lib`, `/usr`, the Rust toolchain). [`MARKERS_NEEDED`] of them
/// must be there as C strings, with [`DRIVER_NAME`]. Kept as lines (each ends in `\n`, never in
/// NUL) so that this program's own copy of them is no match:
/// - `/cudart.shm.%x.%x.%llx`: the name of the runtime's shared-memory segment (`shm_open`);
/// - `cudaErrorCudartUnloading`: in `cudaGetErrorName`'s table, an error only the runtime has;
/// - `CUDA driver version is insufficient for CUDA runtime version`: `cudaGetErrorString` of
///   cudaErrorInsufficientDriver (35);
/// - `CUDA_ENABLE_MODULE_LAZY_LOADING`: an environment variable the runtime reads.
pub(crate) const RUNTIME_MARKERS: &str = "/cudart.shm.%x.%x.%llx\n\
    cudaErrorCudartUnloading\n\
    CUDA driver version is insufficient for CUDA runtime version\n\
    CUDA_ENABLE_MODULE_LAZY_LOADING\n";

/// [`RUNTIME_MARKERS`], one string each.
pub(crate) fn runtime_markers() -> Vec<&'static str> {
    RUNTIME_MARKERS.lines().collect()
}

/// How many of [`RUNTIME_MARKERS`] a static copy must hold: all four in every runtime measured;
/// one may change in a later release.
pub(crate) const MARKERS_NEEDED: usize = 3;

/// The driver every runtime `dlopen`s by name: required as well (alone it proves nothing: the
/// driver itself and NVML hold it too).
pub(crate) const DRIVER_NAME: &str = "libcuda.so.1";

/// A name in the runtime's table of API names from CUDA 12.0 (`cudaGetDeviceProperties` became
/// `_v2` there) that 13.0 dropped: measured in 12.9.79, absent from 11.8.89 and 13.0.96.
const NAME_OF_12: &str = "cudaGetDeviceProperties_v2";

/// A name in that table from 13.0 on: in 13.0.96, absent from 12.9.79 and 11.8.89. It bounds
/// the version from below only, so alone it gives no major.
const NAME_FROM_13: &str = "cudaLogsCurrent";

/// What shows a CUDA runtime inside an ELF file without its symbols: [`static_runtime_in`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StaticEvidence {
    /// Those of [`runtime_markers`] found, in that order.
    pub markers: Vec<&'static str>,
    /// Its version, where its code or data gives one: [`version_of`].
    pub version: Option<ContentVersion>,
}

/// A runtime version read from the runtime's own code or data, and from what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContentVersion {
    /// `12.9`, or `12.x` when only the major can be read.
    pub version: Toolkit,
    /// What gave it, e.g. `cudaRuntimeGetVersion's constant 12090`.
    pub(crate) source: String,
}

/// The parts of an ELF file to search: allocated data (`.rodata`, `.data.rel.ro`, `.data`; not
/// the symbol and string tables, not fat binaries, which are device code, not the unwind
/// tables: [`may_hold_strings`]) and code. The whole
/// file for both when it has no section headers (or they do not parse). `device` holds the
/// file ranges of fat-binary containers found elsewhere (byte arrays in `.rodata`, `.ldata`),
/// sorted by start: device code too, left out of the data searched.
fn regions<'a>(data: &'a [u8], device: &[Range<usize>]) -> (Vec<&'a [u8]>, Vec<&'a [u8]>) {
    let mut read_only = Vec::new();
    let mut code = Vec::new();
    if let Ok(file) = object::File::parse(data) {
        for section in file.sections() {
            let name = section.name().unwrap_or("");
            let Ok(bytes) = section.data() else { continue };
            match section.kind() {
                kind if may_hold_strings(name, kind) => {
                    match section
                        .file_range()
                        .and_then(|(at, _)| usize::try_from(at).ok())
                    {
                        Some(at) => outside(bytes, at, device, &mut read_only),
                        None => read_only.push(bytes),
                    }
                }
                SectionKind::Text => code.push(bytes),
                _ => {}
            }
        }
    }
    if read_only.is_empty() && code.is_empty() {
        outside(data, 0, device, &mut read_only);
        return (read_only, vec![data]);
    }
    (read_only, code)
}

/// The pieces of `bytes` (at file offset `at`) that no range of `device` (sorted by start,
/// disjoint) covers, pushed to `out`.
fn outside<'a>(bytes: &'a [u8], at: usize, device: &[Range<usize>], out: &mut Vec<&'a [u8]>) {
    let end = at + bytes.len();
    let mut from = at;
    let first = device.partition_point(|r| r.end <= at);
    for r in device[first..].iter().take_while(|r| r.start < end) {
        if r.start > from {
            out.push(&bytes[from - at..r.start - at]);
        }
        from = from.max(r.end);
    }
    if from < end {
        out.push(&bytes[from - at..]);
    }
}

/// The file ranges of `code`'s containers, sorted and merged: what [`regions`] leaves out.
pub fn device_ranges(code: &GpuCode) -> Vec<Range<usize>> {
    let mut ranges: Vec<Range<usize>> = code
        .containers
        .iter()
        .filter_map(|c| {
            let start = usize::try_from(c.offset).ok()?;
            Some(start..start.checked_add(usize::try_from(c.size).ok()?)?)
        })
        .collect();
    ranges.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

/// A searcher for each of `texts` as a C string (with its NUL; a longer string ending in it
/// counts too, as the linker merges such tails), and how far a match may run past a block of
/// the bytes searched: the longest string, NUL included, less one.
pub(super) fn c_string_finders(texts: &[&str]) -> (Vec<memmem::Finder<'static>>, usize) {
    let finders: Vec<memmem::Finder> = texts
        .iter()
        .map(|t| memmem::Finder::new(&[t.as_bytes(), b"\0"].concat()).into_owned())
        .collect();
    let overlap = finders.iter().map(|f| f.needle().len()).max().unwrap_or(1) - 1;
    (finders, overlap)
}

/// Bytes searched at a time by [`strings_present`]: small enough to stay in the CPU's cache
/// while every string is looked for in them.
const BLOCK: usize = 256 << 10;

/// Which of `texts` one of `regions` holds as a C string (with its NUL; a longer string ending
/// in it counts too, as the linker merges such tails), in one pass over the bytes: each block
/// of [`BLOCK`] bytes is searched for every string not yet found while it is in the cache, so
/// a large file is read from memory once, not once per string. Each region's blocks are taken
/// from its end: a program's static runtime is linked last (`-lcudart_static` ends the link
/// line), so its strings lie at the end of `.rodata`, and a string found there is not looked
/// for through the tens of MB of data before it (cuRAND's 20 MB of tables).
fn strings_present(regions: &[&[u8]], texts: &[&str]) -> Vec<bool> {
    let (finders, overlap) = c_string_finders(texts);
    let mut found = vec![false; texts.len()];
    for region in regions {
        for p in (0..region.len()).step_by(BLOCK).rev() {
            if !found.contains(&false) {
                return found;
            }
            let block = &region[p..region.len().min(p + BLOCK + overlap)];
            for (f, seen) in finders.iter().zip(found.iter_mut()) {
                *seen = *seen || f.find(block).is_some();
            }
        }
    }
    found
}

/// Whether `data` (an ELF file's bytes) holds a CUDA runtime by its own strings: [`DRIVER_NAME`]
/// and at least [`MARKERS_NEEDED`] of [`runtime_markers`] in its allocated data sections (the
/// whole file when it has no section headers). Reads no symbol, so it works on stripped files;
/// libcuda itself does not qualify. With the version where [`version_of`] reads one.
pub fn static_runtime_in(data: &[u8]) -> Option<StaticEvidence> {
    static_runtime_found(data, &[], None)
}

/// Every string this module looks for in a file's data, in this order: [`runtime_markers`],
/// [`DRIVER_NAME`], and the two API names that bound the version.
fn searched_strings() -> Vec<&'static str> {
    let mut all = runtime_markers();
    all.extend([DRIVER_NAME, NAME_OF_12, NAME_FROM_13]);
    all
}

/// The markers that decide alone: without one of the first two, three of the four cannot be
/// there.
const DECIDING: usize = 4 + 1 - MARKERS_NEEDED; // of the four markers

/// An ELF file's GPU code and the CUDA runtime in it, its data read once: elfkit's magic
/// scan looks for the runtime's strings in the data sections as it reads them
/// ([`read_gpu_code_and_strings`]), over the same bytes [`regions`] gives (the data sections
/// outside the containers); where it cannot ([`CStrings::found`] is `None`), they are looked
/// for here as [`runtime_in`] does. The runtime is [`runtime_in`]'s, whatever reads the strings.
pub fn gpu_code_and_runtime(
    path: &Path,
    data: &[u8],
) -> (Result<GpuCode, FatbinError>, Option<FoundRuntime>) {
    // The rest only where a deciding marker is (as static_runtime_found searches).
    let mut strings = CStrings::new(&searched_strings());
    let code = read_gpu_code_and_strings(data, &mut strings);
    let device = code.as_ref().map(device_ranges).unwrap_or_default();
    let found = strings.found().filter(|_| code.is_ok());
    let runtime = runtime_found(path, || static_runtime_found(data, &device, found));
    (code, runtime)
}

/// [`static_runtime_in`], the file ranges `device` ([`device_ranges`]) left out of the data
/// searched, with which of [`searched_strings`] the data holds already `found` when a reader
/// found them (the magic scan: [`gpu_code_and_runtime`]). The markers that decide alone first:
/// without the first two, three of the four cannot be there, and no more is read.
fn static_runtime_found(
    data: &[u8],
    device: &[Range<usize>],
    found: Option<&[bool]>,
) -> Option<StaticEvidence> {
    let present = match found {
        Some(found) if !found[..DECIDING].contains(&true) => return None,
        Some(found) => found.to_vec(),
        None => {
            let (read_only, _) = regions(data, device);
            let first = strings_present(&read_only, &searched_strings()[..DECIDING]);
            if !first.contains(&true) {
                return None;
            }
            let later = strings_present(&read_only, &searched_strings()[DECIDING..]);
            [first, later].concat()
        }
    };
    evidence_of(&present, || getter_constants(&regions(data, device).1))
}

/// The evidence of a static runtime, given which of [`searched_strings`] are `present` and the
/// getter `constants` of the code ([`getter_constants`], asked for only where it is a runtime).
fn evidence_of(present: &[bool], constants: impl FnOnce() -> Vec<i32>) -> Option<StaticEvidence> {
    let all = runtime_markers();
    let markers: Vec<&'static str> = all
        .iter()
        .zip(present)
        .filter_map(|(m, &p)| p.then_some(*m))
        .collect();
    let [driver, names_12, names_13] = present[all.len()..] else {
        unreachable!("three strings after the markers")
    };
    if markers.len() < MARKERS_NEEDED || !driver {
        return None;
    }
    Some(StaticEvidence {
        markers,
        version: version_of(names_12, names_13, constants()),
    })
}

/// The values of every `int *out` getter in `code` that, compiled for x86-64, reads
/// `if (!out) …; *out = IMM; return 0;`: `test %rdi,%rdi; je …; movl $IMM,(%rdi); xor
/// %eax,%eax; ret` (48 85 ff 74 xx c7 07 IMM32 31 c0 c3). NVIDIA's `cudaRuntimeGetVersion`
/// calls one holding the runtime's version (12090 in 12.9.79, 13000 in 13.0.96, 11080 in
/// 11.8.89, static and shared alike: the archive's code is NVIDIA's, whatever compiles the
/// program).
fn getter_constants(code: &[&[u8]]) -> Vec<i32> {
    const HEAD: &[u8] = &[0x48, 0x85, 0xff, 0x74];
    let finder = memmem::Finder::new(HEAD);
    let mut values = Vec::new();
    for region in code {
        for at in finder.find_iter(region) {
            let Some(tail) = region.get(at + 5..at + GETTER_LEN) else {
                continue;
            };
            if tail[..2] == [0xc7, 0x07] && tail[6..] == [0x31, 0xc0, 0xc3] {
                values.push(i32::from_le_bytes([tail[2], tail[3], tail[4], tail[5]]));
            }
        }
    }
    values
}

/// The length of the getter [`getter_constants`] reads.
const GETTER_LEN: usize = 14;

/// The version from the getter constants of the code ([`getter_constants`]), and whether the
/// runtime's table of API names holds [`NAME_OF_12`] and [`NAME_FROM_13`].
fn version_of(names_12: bool, names_13: bool, constants: Vec<i32>) -> Option<ContentVersion> {
    // Those `cudaRuntimeGetVersion` could answer: 1000·major + 10·minor, major 9 to 99.
    let mut constants: Vec<i32> = constants
        .into_iter()
        .filter(|v| (9000..100_000).contains(v) && v % 10 == 0)
        .collect();
    constants.sort_unstable();
    constants.dedup();
    if let [value] = constants[..] {
        let agrees =
            (!names_12 || (12000..13000).contains(&value)) && (!names_13 || value >= 13000);
        if agrees {
            return Some(ContentVersion {
                version: Toolkit::Exact(CudaVersion(value)),
                source: format!("cudaRuntimeGetVersion's constant {value}"),
            });
        }
    }
    (names_12 && !names_13).then(|| ContentVersion {
        version: Toolkit::Major(12),
        source: format!("API name {NAME_OF_12} (12.0 to 12.9)"),
    })
}

/// The CUDA version a path names: `libcudart.so.12.9.79` → 12.9; a store path such as
/// `/nix/store/…-cuda_cudart-12.9.79-lib/…` → 12.9; `libcudart.so.12` → `12.x`.
pub(crate) fn version_named_by(path: &Path) -> Option<Toolkit> {
    let text = path.to_string_lossy();
    let after = |marker: &str| -> Option<CudaVersion> {
        let start = text.find(marker)? + marker.len();
        let rest = &text[start..];
        let mut parts = rest.split(|c: char| !c.is_ascii_digit());
        let major: i32 = parts.next()?.parse().ok()?;
        let minor: i32 = parts.next()?.parse().ok()?;
        (rest[major.to_string().len()..].starts_with('.')).then_some(())?;
        Some(CudaVersion(major * 1000 + minor * 10))
    };
    let named = version_from_file_name(path);
    if let Some(Toolkit::Exact(_)) = named {
        return named;
    }
    after("cuda_cudart-")
        .or_else(|| after("cudart-"))
        .map(Toolkit::Exact)
        .or(named)
}

/// Classifies one file; `data` is its bytes when it is an ELF file. `libcudart.so*` and
/// `libcudart_static*.a` count by name; another ELF file when the runtime's own strings are in
/// it ([`static_runtime_in`]), whether or not it defines the runtime's symbols: XLA's
/// `cudart_stub.cc` (in JAX's CUDA plugins) defines `cudaGetDriverEntryPoint` and the rest as
/// trampolines to a libcudart loaded later, and holds none of them. The version: from the name
/// ([`version_named_by`]); for a static copy first from its code ([`version_of`]); for a shared
/// library named with its major
/// only (`libcudart.so.12`), from its code when that is a runtime's and agrees on the major.
pub fn runtime_in(
    path: &Path,
    data: Option<&[u8]>,
    device: &[Range<usize>],
) -> Option<FoundRuntime> {
    runtime_found(path, || {
        data.and_then(|d| static_runtime_found(d, device, None))
    })
}

/// [`runtime_in`], the file's content read by `evidence` ([`static_runtime_in`]'s answer),
/// called only where the name leaves the answer open.
fn runtime_found(
    path: &Path,
    evidence: impl FnOnce() -> Option<StaticEvidence>,
) -> Option<FoundRuntime> {
    let name = path.file_name()?.to_string_lossy();
    let named = version_named_by(path);
    let (form, content, why) = if name.starts_with("libcudart.so") {
        let exact = matches!(named, Some(Toolkit::Exact(_)));
        let content = (!exact)
            .then(evidence)
            .flatten()
            .and_then(|e| e.version)
            .filter(|c| named.is_none_or(|n| n.major() == c.version.major()));
        (RuntimeForm::Shared, content, "file name".to_owned())
    } else if name.starts_with("libcudart_static") && name.ends_with(".a") {
        (RuntimeForm::Archive, None, "file name".to_owned())
    } else {
        let evidence = evidence()?;
        let why = format!("strings: {}", evidence.markers.join(", "));
        (RuntimeForm::StaticCopy, evidence.version, why)
    };
    // The content's version where it is exact or the path names none, else the path's.
    let (version, source) = match (content, named) {
        (Some(c), _) if matches!(c.version, Toolkit::Exact(_)) || named.is_none() => {
            let source = format!("version {} from {}", c.version, c.source);
            (Some(c.version), source)
        }
        (_, Some(v)) => (named, format!("version {v} from the path")),
        (_, None) => (None, "version unknown".to_owned()),
    };
    Some(FoundRuntime {
        file: path.to_path_buf(),
        form,
        version,
        evidence: format!("{why}; {source}"),
    })
}

impl FoundRuntime {
    /// Its version, or `version unknown`.
    pub(crate) fn version_text(&self) -> String {
        self.version
            .map_or("version unknown".into(), |v| v.to_string())
    }

    /// Its version when it can mix with another runtime's: exact (`12.9`, not `12.x` or
    /// unknown), and not an archive (which no process loads).
    pub(crate) fn mixing_version(&self) -> Option<CudaVersion> {
        match self.version {
            Some(Toolkit::Exact(v)) if self.form != RuntimeForm::Archive => Some(v),
            _ => None,
        }
    }
}

/// The distinct versions among `runtimes` that are exact (`12.9`, not `12.x`), when more than
/// one: mixed CUDA runtimes.
pub(crate) fn mixed_versions(runtimes: &[FoundRuntime]) -> Option<Vec<String>> {
    let mut versions: Vec<String> = runtimes
        .iter()
        .filter_map(FoundRuntime::mixing_version)
        .map(|v| v.to_string())
        .collect();
    versions.sort();
    versions.dedup();
    (versions.len() > 1).then_some(versions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_give_versions() {
        let v = |p: &str| version_named_by(Path::new(p)).map(|t| t.to_string());
        assert_eq!(v("/x/lib/libcudart.so.12.9.79").as_deref(), Some("12.9"));
        assert_eq!(v("/x/lib/libcudart.so.12").as_deref(), Some("12.x"));
        assert_eq!(v("/x/lib/libcudart.so.11.0").as_deref(), Some("11.x"));
        assert_eq!(
            v("/nix/store/abc-cuda_cudart-12.4.127-lib/lib/libcudart.so.12").as_deref(),
            Some("12.4")
        );
        assert_eq!(v("/x/bin/app"), None);
    }

    /// Bytes holding `strings` as C strings, then `code`.
    fn blob(strings: &[&str], code: &[u8]) -> Vec<u8> {
        let mut data = b"junk\0".to_vec();
        for s in strings {
            data.extend_from_slice(s.as_bytes());
            data.push(0);
        }
        data.extend_from_slice(code);
        data
    }

    /// `test %rdi,%rdi; je +8; movl $value,(%rdi); xor %eax,%eax; ret`.
    fn getter(value: i32) -> Vec<u8> {
        let mut code = vec![0x48, 0x85, 0xff, 0x74, 0x08, 0xc7, 0x07];
        code.extend_from_slice(&value.to_le_bytes());
        code.extend_from_slice(&[0x31, 0xc0, 0xc3]);
        code
    }

    #[test]
    fn the_runtime_strings_without_symbols_are_a_runtime() {
        let mut strings = runtime_markers();
        assert_eq!(strings.len(), 4);
        strings.push(DRIVER_NAME);
        let found = static_runtime_in(&blob(&strings, &[])).expect("a runtime");
        assert_eq!(found.markers, runtime_markers());
        assert_eq!(found.version, None);
        // One marker may be missing, not two; the driver's name must be there.
        assert!(static_runtime_in(&blob(&strings[1..], &[])).is_some());
        assert!(static_runtime_in(&blob(&strings[2..], &[])).is_none());
        assert!(static_runtime_in(&blob(&runtime_markers(), &[])).is_none());
        // A longer string is no marker (only its tail may be shared).
        let prefixed: Vec<String> = strings.iter().map(|s| format!("{s}_v2")).collect();
        let prefixed: Vec<&str> = prefixed.iter().map(String::as_str).collect();
        assert!(static_runtime_in(&blob(&prefixed, &[])).is_none());
        // What libcuda holds: its name and its own error strings.
        let driver = blob(
            &[DRIVER_NAME, "CUDA driver is a stub library", "%d.%d.%d"],
            &[],
        );
        assert!(static_runtime_in(&driver).is_none());
    }

    #[test]
    fn the_version_constant_gives_the_version() {
        let mut strings = runtime_markers();
        strings.push(DRIVER_NAME);
        let version = |extra: &[&str], code: &[u8]| {
            let mut all = strings.clone();
            all.extend_from_slice(extra);
            static_runtime_in(&blob(&all, code))
                .expect("a runtime")
                .version
                .map(|v| v.version.to_string())
        };
        let mut code = getter(12090);
        code.extend(getter(2)); // not a version: ignored
        assert_eq!(version(&[NAME_OF_12], &code).as_deref(), Some("12.9"));
        assert_eq!(
            version(&[NAME_FROM_13], &getter(13000)).as_deref(),
            Some("13.0")
        );
        assert_eq!(version(&[], &getter(11080)).as_deref(), Some("11.8"));
        // Two candidates, or one the API names contradict: not read; the names' major instead.
        let mut two = getter(12090);
        two.extend(getter(12080));
        assert_eq!(version(&[NAME_OF_12], &two).as_deref(), Some("12.x"));
        assert_eq!(
            version(&[NAME_OF_12], &getter(13000)).as_deref(),
            Some("12.x")
        );
        assert_eq!(version(&[NAME_FROM_13], &getter(12090)), None);
        // 13.0's names alone bound the version from below only.
        assert_eq!(version(&[NAME_FROM_13], &[]), None);
        assert_eq!(version(&[], &[]), None);
    }

    #[test]
    fn strings_are_found_across_block_edges_and_in_every_region() {
        let text = "cudaErrorCudartUnloading";
        for at in [
            0,
            BLOCK - 10,
            BLOCK - 1,
            BLOCK,
            2 * BLOCK - 3,
            3 * BLOCK - 25,
        ] {
            let mut data = vec![0x41u8; 3 * BLOCK];
            data[at..at + text.len()].copy_from_slice(text.as_bytes());
            data[at + text.len()] = 0;
            let other = b"libcuda.so.1\0".to_vec();
            let found = strings_present(&[&other, &data], &[text, DRIVER_NAME, NAME_FROM_13]);
            assert_eq!(found, [true, true, false], "at {at}");
        }
        // Without its NUL it is not the C string.
        let data = [text.as_bytes(), b"x\0"].concat();
        assert_eq!(strings_present(&[&data], &[text]), [false]);
    }

    #[test]
    fn device_code_is_left_out_of_the_data_searched() {
        let bytes: Vec<u8> = (0..100).collect();
        let mut pieces = Vec::new();
        // The section lies at file offset 1000; containers at 990..1010, 1040..1050, 1095..1200.
        outside(
            &bytes,
            1000,
            &[0..5, 990..1010, 1040..1050, 1095..1200],
            &mut pieces,
        );
        assert_eq!(pieces, [&bytes[10..40], &bytes[50..95]]);
        let mut pieces = Vec::new();
        outside(
            &bytes,
            1000,
            std::slice::from_ref(&(2000..2100)),
            &mut pieces,
        );
        assert_eq!(pieces, [&bytes[..]]);
        // A runtime's strings inside a container are not a runtime of the host code.
        let mut strings = runtime_markers();
        strings.push(DRIVER_NAME);
        let data = blob(&strings, &[]);
        assert!(static_runtime_found(&data, &[], None).is_some());
        let all_but_junk = 5..data.len();
        assert!(static_runtime_found(&data, std::slice::from_ref(&all_but_junk), None).is_none());
    }

    #[test]
    fn mixing_needs_two_exact_versions() {
        let r = |v: Toolkit| FoundRuntime {
            file: PathBuf::from("f"),
            form: RuntimeForm::Shared,
            version: Some(v),
            evidence: "file name".into(),
        };
        assert_eq!(
            mixed_versions(&[r(Toolkit::Exact(CudaVersion(12090))), r(Toolkit::Major(12))]),
            None
        );
        assert_eq!(
            mixed_versions(&[
                r(Toolkit::Exact(CudaVersion(12090))),
                r(Toolkit::Exact(CudaVersion(11080)))
            ]),
            Some(vec!["11.8".into(), "12.9".into()])
        );
    }
}
