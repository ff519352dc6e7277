//! CUDA's loading rules, as pure functions: given one module's entries, a GPU's compute
//! capability and the driver ([`Driver`]), which image the driver loads, or the error it
//! gives; and whether a driver serves what a toolkit built ([`toolkit_on_driver`]). The facts
//! and their sources are in `docs/fatbin.md`; each test names its source.
//!
//! - SASS for sm_XY loads on the same major version with a device minor at least Y (binary
//!   compatibility within a major: CUDA C Programming Guide, "Binary Compatibility").
//! - 'a' images (sm_90a) load only on exactly that capability; 'f' images (sm_100f) within their
//!   family: the same major, minor at least their own; Thor (10.1 before CUDA 13 renamed it
//!   11.0) is a family of its own (`ptxas --help` 13.x; measured with ptxas 13.5 and 12.9).
//! - PTX for compute_XY JITs on any device at or above X.Y ('a' PTX only on that capability,
//!   'f' PTX only in its family), when the driver knows its ISA version: [`PTX_ISA_RELEASES`].
//! - No usable image: CUDA_ERROR_NO_BINARY_FOR_GPU (209). PTX newer than the driver's JIT:
//!   CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222). Minor-version compatibility covers SASS, not PTX.
//! - A Zstandard-compressed image needs a libcuda of R550 (CUDA 12.4) or newer
//!   ([`ZSTD_DRIVER`]); LZ4 is read by every driver these rules know.
//! - A capability or ISA newer than these tables know is [`Load::Unknown`], never a pass.

use std::fmt;

use serde::Serialize;

use super::gpus;
use super::{Capability, Compression, Entry, EntryKind, ValueError, Variant, Version};

use cuda_sandbox_cuda_facts::CudaVersion;

/// Each PTX ISA version and the first CUDA release whose compiler (ptxas, and the driver's JIT
/// of that release's branch) accepts it. Sources: NVIDIA's PTX ISA "PTX Release History"
/// table (editions 9.3 and 9.4) for 6.0–9.4, NVIDIA cuda-python `_ptx_utils.py` for 6.0–9.1;
/// 7.7–9.5 also measured as the newest `.version` of the ptxas of each release (PyPI wheels;
/// 12.7 has none). 9.5 → 13.5 rests on that measurement alone. CUDA 12.6 added no ISA.
pub const PTX_ISA_RELEASES: &[(Version, CudaVersion)] = &[
    (Version::new(6, 0), CudaVersion(9000)),
    (Version::new(6, 1), CudaVersion(9010)),
    (Version::new(6, 2), CudaVersion(9020)),
    (Version::new(6, 3), CudaVersion(10000)),
    (Version::new(6, 4), CudaVersion(10010)),
    (Version::new(6, 5), CudaVersion(10020)),
    (Version::new(7, 0), CudaVersion(11000)),
    (Version::new(7, 1), CudaVersion(11010)),
    (Version::new(7, 2), CudaVersion(11020)),
    (Version::new(7, 3), CudaVersion(11030)),
    (Version::new(7, 4), CudaVersion(11040)),
    (Version::new(7, 5), CudaVersion(11050)),
    (Version::new(7, 6), CudaVersion(11060)),
    (Version::new(7, 7), CudaVersion(11070)),
    (Version::new(7, 8), CudaVersion(11080)),
    (Version::new(8, 0), CudaVersion(12000)),
    (Version::new(8, 1), CudaVersion(12010)),
    (Version::new(8, 2), CudaVersion(12020)),
    (Version::new(8, 3), CudaVersion(12030)),
    (Version::new(8, 4), CudaVersion(12040)),
    (Version::new(8, 5), CudaVersion(12050)),
    (Version::new(8, 6), CudaVersion(12070)),
    (Version::new(8, 7), CudaVersion(12080)),
    (Version::new(8, 8), CudaVersion(12090)),
    (Version::new(9, 0), CudaVersion(13000)),
    (Version::new(9, 1), CudaVersion(13010)),
    (Version::new(9, 2), CudaVersion(13020)),
    (Version::new(9, 3), CudaVersion(13030)),
    (Version::new(9, 4), CudaVersion(13040)),
    (Version::new(9, 5), CudaVersion(13050)),
];

/// The first CUDA release that JIT-compiles PTX of `isa`; `None` for an ISA newer than the
/// table. ISA versions older than 6.0 need nothing newer than CUDA 9.0.
pub fn cuda_for_ptx_isa(isa: Version) -> Option<CudaVersion> {
    if isa < PTX_ISA_RELEASES[0].0 {
        return Some(PTX_ISA_RELEASES[0].1);
    }
    PTX_ISA_RELEASES
        .iter()
        .find(|(v, _)| *v == isa)
        .map(|(_, cuda)| *cuda)
}

/// The newest PTX ISA a driver of CUDA `driver` can JIT, as far as the table knows.
pub fn newest_ptx_isa(driver: CudaVersion) -> Option<Version> {
    PTX_ISA_RELEASES
        .iter()
        .rev()
        .find(|(_, cuda)| *cuda <= driver)
        .map(|(v, _)| *v)
}

/// A driver's own version, `550.54.14`: branch, minor, patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DriverVersion {
    /// The branch (550).
    pub branch: u32,
    /// 54.
    pub minor: u32,
    /// 14.
    pub patch: u32,
}

impl DriverVersion {
    /// `branch.minor.patch`.
    pub const fn new(branch: u32, minor: u32, patch: u32) -> DriverVersion {
        DriverVersion {
            branch,
            minor,
            patch,
        }
    }

    /// Parses `550.54.14`, `580.65` or `580`.
    pub fn parse(text: &str) -> Result<DriverVersion, ValueError> {
        let bad = || ValueError::DriverVersion(text.to_owned());
        let parts: Vec<u32> = (text.trim().split('.').map(str::parse))
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        let part = |i: usize| parts.get(i).copied().unwrap_or(0);
        match parts.len() {
            1..=3 => Ok(DriverVersion::new(part(0), part(1), part(2))),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for DriverVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}.{:02}", self.branch, self.minor, self.patch)
    }
}

cuda_sandbox_cuda_facts::serialize_as_display!(DriverVersion, Toolkit);

/// The driver that loads a file's GPU code. Two versions, because they can differ: under
/// `cuda_compat` a newer libcuda runs on an older kernel module, and only libcuda is newer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Driver {
    /// libcuda's CUDA version (`cuDriverGetVersion`): its PTX JIT, its fat-binary
    /// decompression, the runtimes and toolkits it serves.
    pub cuda: CudaVersion,
    /// The CUDA version of the kernel module's branch (R535: 12.2): the GPUs it drives.
    pub kernel: CudaVersion,
    /// libcuda's own version, when known, for floors NVIDIA gives as driver versions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<DriverVersion>,
}

impl Driver {
    /// A driver of CUDA `cuda` on a kernel module of the same release (no compat).
    pub const fn of(cuda: CudaVersion) -> Driver {
        Driver {
            cuda,
            kernel: cuda,
            version: None,
        }
    }
}

/// The oldest libcuda that reads Zstandard-compressed images: CUDA 12.4 (550.54.14). Source:
/// rapids-cmake's `rapids_cuda_enable_fatbin_compression` documentation ("balanced" and
/// "size", which use zstd: "CUDA 12 Requires Driver Version: 550.54.14+"); no NVIDIA document
/// found states it (nvcc and fatbinary `--help` 12.8 to 13.5 list `--compress-mode` without a
/// driver requirement).
pub const ZSTD_DRIVER: (CudaVersion, DriverVersion) =
    (CudaVersion(12040), DriverVersion::new(550, 54, 14));

/// The minimum driver for a major's minor-version compatibility: a runtime or cubin of any
/// X.y runs on a driver of major X at or above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Floor {
    /// The toolkit major.
    pub major: i32,
    /// The minimum driver.
    pub driver: DriverVersion,
    /// The CUDA release of that driver's branch.
    pub cuda: CudaVersion,
    /// Whether every driver reporting that release meets it (the release's own driver does):
    /// then a driver known only by its CUDA version is judged; else only by its version.
    pub met_by_its_release: bool,
}

impl Floor {
    /// The floor of `major`, whose driver is of the branch of CUDA `major`.0.
    const fn new(major: i32, driver: DriverVersion, met_by_its_release: bool) -> Floor {
        Floor {
            major,
            driver,
            cuda: CudaVersion(major * 1000),
            met_by_its_release,
        }
    }
}

/// NVIDIA's CUDA Compatibility guide, "Minor Version Compatibility", table 1 (13.x >= 580,
/// 12.x >= 525, 11.x >= 450, with the note: "CUDA 11.0 was released with an earlier driver
/// version, but by upgrading to Tesla Recommended Drivers 450.80.02 (Linux) ... minor version
/// compatibility is possible across the CUDA 11.x family"), and the CUDA toolkit release notes'
/// table of minimum drivers for minor-version compatibility (12.x >= 525.60.13, the 12.0
/// release's own driver; 11.x >= 450.80.02; 11.0 itself shipped with 450.36.06).
pub const FLOORS: &[Floor] = &[
    Floor::new(11, DriverVersion::new(450, 80, 2), false),
    Floor::new(12, DriverVersion::new(525, 60, 13), true),
    Floor::new(13, DriverVersion::new(580, 0, 0), true),
];

/// What built a runtime or a cubin: its CUDA release, or only its major (`libcudart.so.12`).
/// In JSON as it prints: `"12.9"`, or `"12.x"` for a major only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toolkit {
    /// The release (12090).
    Exact(CudaVersion),
    /// The major only (12).
    Major(i32),
}

impl Toolkit {
    /// Its major.
    pub fn major(self) -> i32 {
        match self {
            Toolkit::Exact(v) => v.major(),
            Toolkit::Major(m) => m,
        }
    }
}

impl fmt::Display for Toolkit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Toolkit::Exact(v) => write!(f, "{v}"),
            Toolkit::Major(m) => write!(f, "{m}.x"),
        }
    }
}

/// How a driver serves what a toolkit built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "fit")]
pub enum ToolkitFit {
    /// The driver is of a newer major, or of the same major and not older.
    Served,
    /// Same major, newer minor (or minor unknown), the driver above the major's floor:
    /// minor-version compatibility.
    MinorVersionCompatible,
    /// A newer major than the driver's: cudaErrorInsufficientDriver (35) for a runtime.
    NewerMajor,
    /// Same major, newer minor, the driver below the major's floor.
    BelowFloor {
        /// The floor.
        floor: Floor,
    },
    /// Same major, newer minor, the driver of the floor's release but of unknown version.
    FloorUnknown {
        /// The floor.
        floor: Floor,
    },
    /// A major the floors do not know.
    UnknownMajor,
}

/// Whether `driver` serves what toolkit `built` made (a runtime, a cubin): CUDA's rules as
/// NVIDIA's CUDA Compatibility guide states them. A newer major fails; within a major, a
/// newer minor needs the major's floor ([`FLOORS`]); an older major is served (binary
/// backward compatibility). The floor is compared with libcuda's version when known, else it
/// holds for a driver of a newer release than the floor's, or of the floor's release when
/// that release's own driver meets it.
pub fn toolkit_on_driver(built: Toolkit, driver: &Driver) -> ToolkitFit {
    let major = driver.cuda.major();
    if built.major() > major {
        return ToolkitFit::NewerMajor;
    }
    if built.major() < major || matches!(built, Toolkit::Exact(v) if v <= driver.cuda) {
        return ToolkitFit::Served;
    }
    let Some(floor) = FLOORS.iter().find(|f| f.major == major).copied() else {
        return ToolkitFit::UnknownMajor;
    };
    match driver.version {
        Some(v) if v < floor.driver => ToolkitFit::BelowFloor { floor },
        None if driver.cuda <= floor.cuda && !floor.met_by_its_release => {
            ToolkitFit::FloorUnknown { floor }
        }
        _ => ToolkitFit::MinorVersionCompatible,
    }
}

/// Whether `driver`'s libcuda can unpack an image stored with `compression`: `None` when it
/// can, else the CUDA release it needs.
pub fn unpacks(compression: Compression, driver: &Driver) -> Option<CudaVersion> {
    let (release, version) = ZSTD_DRIVER;
    let old = driver
        .version
        .map_or(driver.cuda < release, |v| v < version);
    (compression == Compression::Zstd && old).then_some(release)
}

/// Whether the SASS image or the PTX `e` may load on `device` (PTX: its ISA aside). Plain SASS
/// runs within its major on an equal or newer minor, plain PTX on any device at or above it;
/// an 'a' image only on its capability, an 'f' image within its family.
fn fits(e: &Entry, device: Capability) -> bool {
    let c = e.arch.capability;
    // Thor was 10.1 until CUDA 13 renamed it 11.0; ptxas 12.9 already kept it apart from 10.x.
    let thor = Capability::from_sm(101);
    let within_major = c.major == device.major && device.minor >= c.minor;
    match e.arch.variant {
        Variant::ArchSpecific => c == device,
        Variant::Family => within_major && ((c == thor) == (device == thor)),
        Variant::Plain if e.kind == EntryKind::Sass => within_major,
        Variant::Plain => device >= c,
    }
}

/// What the driver does with one module on one GPU. `image` is an index into the module's
/// entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "load")]
pub enum Load {
    /// It loads the SASS image built for a compatible architecture.
    Sass {
        /// The image.
        image: usize,
    },
    /// No SASS fits; it JIT-compiles this PTX (the first launch compiles it).
    Jit {
        /// The image.
        image: usize,
    },
    /// CUDA_ERROR_NO_BINARY_FOR_GPU (209): no SASS for this GPU and no PTX it could JIT.
    NoBinaryForGpu,
    /// CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222): the only way in is PTX newer than the driver.
    UnsupportedPtx {
        /// The PTX image the driver would JIT.
        image: usize,
        /// The CUDA version its ISA needs (as NVIDIA's ISA table says; JSON: `"12.7"`).
        needs: CudaVersion,
    },
    /// The image the driver would load is compressed in a way this driver's libcuda cannot
    /// unpack (Zstandard before R550).
    CompressionTooNew {
        /// The image.
        image: usize,
        /// The CUDA release whose driver unpacks it (JSON: `"12.4"`).
        needs: CudaVersion,
    },
    /// The module holds nothing the driver loads itself (NVVM IR only, linked at run time by
    /// nvJitLink, or kinds unknown here): not judged.
    NotForTheDriver,
    /// The tables do not know enough to say.
    Unknown {
        /// Why, in one line.
        why: String,
    },
}

impl Load {
    /// Whether the driver loads the module (by SASS or by JIT).
    pub fn loads(&self) -> bool {
        matches!(self, Load::Sass { .. } | Load::Jit { .. })
    }

    /// Whether the driver refuses it (209, 222, an image it cannot unpack).
    pub fn fails(&self) -> bool {
        matches!(
            self,
            Load::NoBinaryForGpu | Load::UnsupportedPtx { .. } | Load::CompressionTooNew { .. }
        )
    }
}

/// The image the driver loads from one module's `entries` on a GPU of capability `device`
/// with `driver`, or why it cannot. Among fitting SASS images it names the newest
/// architecture (an exact 'a'/'f' image before a plain one); among fitting PTX images, the
/// newest architecture. The image picked must be one the driver's libcuda can unpack. (What
/// the image holds and who built it needs its payload: [`super::verdict`] reads it.)
pub fn load(entries: &[Entry], device: Capability, driver: &Driver) -> Load {
    if gpus::architecture(device).is_none() {
        return Load::Unknown {
            why: format!("compute capability {device} is not one these rules know"),
        };
    }
    let picked = |image: usize, load: Load| match entries[image].compression {
        Compression::Unknown => Load::Unknown {
            why: "the image it would load sets both compression flags, a layout NVIDIA's tools \
                  were not seen to write"
                .into(),
        },
        c => unpacks(c, driver).map_or(load, |needs| Load::CompressionTooNew { image, needs }),
    };
    let images = || {
        entries
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e.kind, EntryKind::Sass | EntryKind::Ptx))
    };
    if images().next().is_none() {
        return Load::NotForTheDriver;
    }
    let specificity = |e: &Entry| (e.arch.capability, e.arch.variant != Variant::Plain);
    if let Some((i, _)) = images()
        .filter(|(_, e)| e.kind == EntryKind::Sass && fits(e, device))
        .max_by_key(|(_, e)| specificity(e))
    {
        return picked(i, Load::Sass { image: i });
    }
    let ptx: Vec<(usize, &Entry)> = images()
        .filter(|(_, e)| e.kind == EntryKind::Ptx && fits(e, device))
        .collect();
    let Some(&(best, chosen)) = ptx.iter().max_by_key(|(_, e)| specificity(e)) else {
        return Load::NoBinaryForGpu;
    };
    if ptx.iter().any(|(_, e)| e.version != chosen.version) {
        return Load::Unknown {
            why: "its PTX images for this GPU have different ISA versions, and which one the \
                  driver picks is not documented"
                .into(),
        };
    }
    match cuda_for_ptx_isa(chosen.version) {
        None => Load::Unknown {
            why: format!(
                "PTX ISA {} is newer than these rules know (newest: {})",
                chosen.version,
                PTX_ISA_RELEASES[PTX_ISA_RELEASES.len() - 1].0
            ),
        },
        Some(needs) if needs > driver.cuda => Load::UnsupportedPtx { image: best, needs },
        Some(_) => picked(best, Load::Jit { image: best }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fatbin::{Arch, Compression};

    fn image(kind: EntryKind, arch: &str, isa: (u16, u16)) -> Entry {
        Entry {
            kind,
            arch: Arch::parse(arch).unwrap(),
            version: Version::new(isa.0, isa.1),
            compression: Compression::None,
            offset: 0,
            stored: Default::default(),
        }
    }
    fn sass(arch: &str) -> Entry {
        image(EntryKind::Sass, arch, (1, 8))
    }
    fn ptx(arch: &str, isa: (u16, u16)) -> Entry {
        image(EntryKind::Ptx, arch, isa)
    }
    fn cc(text: &str) -> Capability {
        Capability::parse(text).unwrap()
    }
    const R535: Driver = Driver::of(CudaVersion(12020));
    const R580: Driver = Driver::of(CudaVersion(13000));

    /// CUDA C Programming Guide, "Binary Compatibility": a cubin for X.y runs on X.z, z >= y.
    #[test]
    fn sass_runs_within_its_major_on_equal_or_newer_minors() {
        let m = [sass("sm_80")];
        assert_eq!(load(&m, cc("8.6"), &R535), Load::Sass { image: 0 });
        assert_eq!(load(&m, cc("8.9"), &R535), Load::Sass { image: 0 });
        assert_eq!(load(&m, cc("8.0"), &R535), Load::Sass { image: 0 });
        assert_eq!(load(&m, cc("9.0"), &R535), Load::NoBinaryForGpu);
        assert_eq!(
            load(&[sass("sm_86")], cc("8.0"), &R535),
            Load::NoBinaryForGpu
        );
        assert_eq!(
            load(&[sass("sm_75")], cc("8.0"), &R535),
            Load::NoBinaryForGpu
        );
    }

    /// `ptxas --help` 13.5 ("PTX with .target sm_XYa can only be compiled to GPU target
    /// sm_XYa") and the CUDA Programming Guide's architecture-specific feature set.
    #[test]
    fn arch_specific_images_run_only_on_that_exact_capability() {
        assert_eq!(
            load(&[sass("sm_90a")], cc("9.0"), &R535),
            Load::Sass { image: 0 }
        );
        assert_eq!(
            load(&[sass("sm_100a")], cc("10.3"), &R580),
            Load::NoBinaryForGpu
        );
        let p = [ptx("compute_100a", (9, 0))];
        assert_eq!(load(&p, cc("10.0"), &R580), Load::Jit { image: 0 });
        assert_eq!(load(&p, cc("10.3"), &R580), Load::NoBinaryForGpu);
        assert_eq!(load(&p, cc("12.0"), &R580), Load::NoBinaryForGpu);
    }

    /// `ptxas --help` 13.x ("PTX for .target sm_XYf can be compiled to GPU targets sm_XZ ...
    /// where Z >= Y and sm_XY and sm_XZ belong in same family"); measured with ptxas 13.5:
    /// sm_100f → 10.0, 10.3, 10.7; sm_120f → 12.0, 12.1; never across majors; and with ptxas
    /// 12.9: sm_100f does not reach sm_101 (Thor).
    #[test]
    fn family_images_run_within_their_family() {
        let s = [sass("sm_100f")];
        for yes in ["10.0", "10.3", "10.7"] {
            assert_eq!(load(&s, cc(yes), &R580), Load::Sass { image: 0 }, "{yes}");
        }
        for no in ["10.1", "11.0", "12.0", "9.0"] {
            assert_eq!(load(&s, cc(no), &R580), Load::NoBinaryForGpu, "{no}");
        }
        assert_eq!(
            load(&[sass("sm_103f")], cc("10.0"), &R580),
            Load::NoBinaryForGpu
        );
        let p = [ptx("compute_120f", (8, 8))];
        assert_eq!(
            load(&p, cc("12.1"), &Driver::of(CudaVersion(12090))),
            Load::Jit { image: 0 }
        );
        assert_eq!(
            load(&p, cc("11.0"), &Driver::of(CudaVersion(12090))),
            Load::NoBinaryForGpu
        );
    }

    /// `ptxas --help` 13.5: "PTX for .target sm_XY can be compiled to all GPU targets sm_MN,
    /// sm_MNa, SM_MNf where MN >= XY".
    #[test]
    fn plain_ptx_jits_on_every_newer_gpu_and_the_first_launch_compiles() {
        let p = [ptx("compute_75", (8, 0))];
        for yes in ["7.5", "8.6", "9.0", "10.0", "12.1"] {
            assert_eq!(load(&p, cc(yes), &R535), Load::Jit { image: 0 }, "{yes}");
        }
        assert_eq!(load(&p, cc("7.0"), &R535), Load::NoBinaryForGpu);
    }

    /// NVIDIA's PTX ISA release history (8.2 is CUDA 12.2's, 8.8 is 12.9's) and
    /// NVIDIA/nvbandwidth#61: a CUDA 13.2 build fails with 222 on a 580 driver (13.0).
    #[test]
    fn ptx_newer_than_the_driver_fails_with_222_even_within_the_major() {
        let p = [sass("sm_80"), ptx("compute_80", (8, 8))];
        assert_eq!(
            load(&p, cc("9.0"), &R535),
            Load::UnsupportedPtx {
                image: 1,
                needs: CudaVersion(12090)
            }
        );
        assert_eq!(
            load(&p, cc("9.0"), &Driver::of(CudaVersion(12090))),
            Load::Jit { image: 1 }
        );
        // SASS for the GPU needs no JIT: minor-version compatibility covers it.
        assert_eq!(load(&p, cc("8.6"), &R535), Load::Sass { image: 0 });
        let nvbandwidth = [sass("sm_80"), ptx("compute_90", (9, 2))];
        assert_eq!(
            load(&nvbandwidth, cc("9.0"), &R580),
            Load::UnsupportedPtx {
                image: 1,
                needs: CudaVersion(13020)
            }
        );
        assert_eq!(
            load(&[ptx("compute_75", (8, 2))], cc("9.0"), &R535),
            Load::Jit { image: 0 }
        );
    }

    /// The tables end somewhere: what lies beyond them is unknown, never a pass.
    #[test]
    fn an_isa_or_capability_beyond_the_tables_is_unknown() {
        let p = [ptx("compute_75", (9, 6))];
        assert!(matches!(
            load(&p, cc("9.0"), &Driver::of(CudaVersion(14000))),
            Load::Unknown { .. }
        ));
        let s = [sass("sm_130")];
        assert!(matches!(
            load(&s, cc("13.0"), &Driver::of(CudaVersion(14000))),
            Load::Unknown { .. }
        ));
        assert!(matches!(
            load(&[sass("sm_90")], cc("9.5"), &R580),
            Load::Unknown { .. }
        ));
    }

    #[test]
    fn the_newest_fitting_sass_is_named_and_sass_wins_over_ptx() {
        let m = [
            sass("sm_75"),
            sass("sm_80"),
            sass("sm_86"),
            ptx("compute_86", (8, 0)),
        ];
        assert_eq!(load(&m, cc("8.9"), &R535), Load::Sass { image: 2 });
        assert_eq!(load(&m, cc("9.0"), &R535), Load::Jit { image: 3 });
        let exact = [sass("sm_90"), sass("sm_90a")];
        assert_eq!(load(&exact, cc("9.0"), &R535), Load::Sass { image: 1 });
    }

    #[test]
    fn nvvm_ir_alone_is_not_for_the_driver() {
        let m = [image(EntryKind::NvvmIr, "compute_90", (9, 0))];
        assert_eq!(load(&m, cc("9.0"), &R580), Load::NotForTheDriver);
    }

    /// The table's rows: PTX ISA release history; each driver JITs up to its own release's ISA.
    #[test]
    fn the_isa_table_answers_per_driver() {
        assert_eq!(newest_ptx_isa(CudaVersion(12020)), Some(Version::new(8, 2)));
        assert_eq!(newest_ptx_isa(CudaVersion(12060)), Some(Version::new(8, 5)));
        assert_eq!(newest_ptx_isa(CudaVersion(11040)), Some(Version::new(7, 4)));
        assert_eq!(newest_ptx_isa(CudaVersion(13050)), Some(Version::new(9, 5)));
        assert_eq!(
            cuda_for_ptx_isa(Version::new(5, 0)),
            Some(CudaVersion(9000))
        );
        assert_eq!(
            cuda_for_ptx_isa(Version::new(8, 6)),
            Some(CudaVersion(12070))
        );
        assert_eq!(cuda_for_ptx_isa(Version::new(9, 6)), None);
        assert!(PTX_ISA_RELEASES.windows(2).all(|w| w[0] < w[1]));
    }

    /// NVIDIA's CUDA Compatibility guide, "Minor Version Compatibility", table 1 (13.x >= 580,
    /// 12.x >= 525, 11.x >= 450 with 450.80.02 for minor-version compatibility) and the toolkit
    /// release notes' minimum drivers (12.x >= 525.60.13): a newer major fails, a newer minor
    /// needs the floor, an older major is served by backward compatibility.
    #[test]
    fn a_driver_serves_its_major_above_the_floor_and_every_older_major() {
        let fit = |built: Toolkit, cuda: CudaVersion, version: Option<&str>| {
            toolkit_on_driver(
                built,
                &Driver {
                    cuda,
                    kernel: cuda,
                    version: version.map(|v| DriverVersion::parse(v).unwrap()),
                },
            )
        };
        assert_eq!(
            fit(Toolkit::Exact(CudaVersion(13040)), CudaVersion(12080), None),
            ToolkitFit::NewerMajor
        );
        assert_eq!(
            fit(Toolkit::Major(13), CudaVersion(12090), None),
            ToolkitFit::NewerMajor
        );
        assert_eq!(
            fit(Toolkit::Exact(CudaVersion(12090)), CudaVersion(11080), None),
            ToolkitFit::NewerMajor
        );
        assert_eq!(
            fit(Toolkit::Exact(CudaVersion(13040)), CudaVersion(13000), None),
            ToolkitFit::MinorVersionCompatible
        );
        assert_eq!(
            fit(Toolkit::Exact(CudaVersion(12090)), CudaVersion(12000), None),
            ToolkitFit::MinorVersionCompatible
        );
        assert_eq!(
            fit(Toolkit::Exact(CudaVersion(12020)), CudaVersion(12020), None),
            ToolkitFit::Served
        );
        assert_eq!(
            fit(Toolkit::Exact(CudaVersion(11080)), CudaVersion(13000), None),
            ToolkitFit::Served
        );
        assert_eq!(
            fit(Toolkit::Major(12), CudaVersion(12040), None),
            ToolkitFit::MinorVersionCompatible
        );
        // 11.0 shipped with 450.36.06, below the 11.x floor: only the exact version can say.
        assert!(matches!(
            fit(Toolkit::Exact(CudaVersion(11080)), CudaVersion(11000), None),
            ToolkitFit::FloorUnknown { .. }
        ));
        assert!(matches!(
            fit(
                Toolkit::Exact(CudaVersion(11080)),
                CudaVersion(11000),
                Some("450.36.06")
            ),
            ToolkitFit::BelowFloor { .. }
        ));
        assert_eq!(
            fit(
                Toolkit::Exact(CudaVersion(11080)),
                CudaVersion(11000),
                Some("450.80.02")
            ),
            ToolkitFit::MinorVersionCompatible
        );
        assert!(matches!(
            fit(
                Toolkit::Exact(CudaVersion(12090)),
                CudaVersion(12000),
                Some("525.60.11")
            ),
            ToolkitFit::BelowFloor { .. }
        ));
        assert_eq!(
            fit(Toolkit::Exact(CudaVersion(15000)), CudaVersion(15000), None),
            ToolkitFit::Served
        );
        assert_eq!(
            fit(Toolkit::Exact(CudaVersion(15010)), CudaVersion(15000), None),
            ToolkitFit::UnknownMajor
        );
    }

    /// rapids-cmake's `rapids_cuda_enable_fatbin_compression` ("balanced" and "size", zstd:
    /// "CUDA 12 Requires Driver Version: 550.54.14+"; NVIDIA documents none): a Zstandard
    /// image needs a libcuda of CUDA 12.4; LZ4 and stored images load on every driver.
    #[test]
    fn a_zstd_image_needs_an_r550_libcuda_and_lz4_needs_nothing() {
        let zstd = Entry {
            compression: Compression::Zstd,
            ..ptx("compute_80", (8, 0))
        };
        assert_eq!(
            load(std::slice::from_ref(&zstd), cc("9.0"), &R535),
            Load::CompressionTooNew {
                image: 0,
                needs: CudaVersion(12040)
            }
        );
        assert_eq!(
            load(
                std::slice::from_ref(&zstd),
                cc("9.0"),
                &Driver::of(CudaVersion(12040))
            ),
            Load::Jit { image: 0 }
        );
        let exact = |v: &str| Driver {
            version: Some(DriverVersion::parse(v).unwrap()),
            ..Driver::of(CudaVersion(12040))
        };
        assert_eq!(
            unpacks(Compression::Zstd, &exact("550.40.07")),
            Some(CudaVersion(12040))
        );
        assert_eq!(unpacks(Compression::Zstd, &exact("550.54.14")), None);
        assert_eq!(
            unpacks(Compression::Lz4, &Driver::of(CudaVersion(11040))),
            None
        );
        assert_eq!(
            unpacks(Compression::None, &Driver::of(CudaVersion(11040))),
            None
        );
        // Only the image the driver picks matters: a stored SASS image beside zstd PTX.
        let both = [sass("sm_90"), zstd];
        assert_eq!(load(&both, cc("9.0"), &R535), Load::Sass { image: 0 });
    }

    #[test]
    fn driver_versions_parse_and_compare_as_numbers() {
        let v = |t: &str| DriverVersion::parse(t).unwrap();
        assert!(v("550.54.14") > v("550.40.07"));
        assert!(v("580") < v("580.65.06"));
        assert_eq!(v("450.80.02").to_string(), "450.80.02");
        for bad in ["5x0", "1.2.3.4", ""] {
            assert_eq!(
                DriverVersion::parse(bad),
                Err(ValueError::DriverVersion(bad.into()))
            );
        }
        assert_eq!(
            ValueError::DriverVersion("5x0".into()).to_string(),
            r#"bad driver version "5x0": write 550.54.14"#
        );
    }
}
