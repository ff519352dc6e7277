//! CUDA's loading rules, as a pure function: given one module's entries, a GPU's compute
//! capability and the driver's CUDA version, which image the driver loads, or the error it
//! gives. The facts and their sources are in `docs/fatbin.md`; each test names its source.
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
//! - A capability or ISA newer than these tables know is [`Load::Unknown`], never a pass.

use serde::Serialize;

use super::{Capability, Entry, EntryKind, Variant, Version};

/// A CUDA version in the driver API's encoding: `1000 * major + 10 * minor` (12.2 is 12020), as
/// `cuDriverGetVersion` returns it.
pub type CudaEncoded = i32;

/// Each PTX ISA version and the first CUDA release whose compiler (ptxas, and the driver's JIT
/// of that release's branch) accepts it. Sources: NVIDIA's PTX ISA "PTX Release History"
/// table (editions 9.3 and 9.4) for 6.0–9.4, NVIDIA cuda-python `_ptx_utils.py` for 6.0–9.1;
/// 7.7–9.5 also measured as the newest `.version` of the ptxas of each release (PyPI wheels;
/// 12.7 has none). 9.5 → 13.5 rests on that measurement alone. CUDA 12.6 added no ISA.
pub const PTX_ISA_RELEASES: &[(Version, CudaEncoded)] = &[
    (Version::new(6, 0), 9000),
    (Version::new(6, 1), 9010),
    (Version::new(6, 2), 9020),
    (Version::new(6, 3), 10000),
    (Version::new(6, 4), 10010),
    (Version::new(6, 5), 10020),
    (Version::new(7, 0), 11000),
    (Version::new(7, 1), 11010),
    (Version::new(7, 2), 11020),
    (Version::new(7, 3), 11030),
    (Version::new(7, 4), 11040),
    (Version::new(7, 5), 11050),
    (Version::new(7, 6), 11060),
    (Version::new(7, 7), 11070),
    (Version::new(7, 8), 11080),
    (Version::new(8, 0), 12000),
    (Version::new(8, 1), 12010),
    (Version::new(8, 2), 12020),
    (Version::new(8, 3), 12030),
    (Version::new(8, 4), 12040),
    (Version::new(8, 5), 12050),
    (Version::new(8, 6), 12070),
    (Version::new(8, 7), 12080),
    (Version::new(8, 8), 12090),
    (Version::new(9, 0), 13000),
    (Version::new(9, 1), 13010),
    (Version::new(9, 2), 13020),
    (Version::new(9, 3), 13030),
    (Version::new(9, 4), 13040),
    (Version::new(9, 5), 13050),
];

/// The compute capabilities of the GPUs these rules know (NVIDIA's CUDA GPUs list, the PTX
/// ISA's supported targets, `ptxas --help` of 12.9 and 13.5). A device of another capability
/// is judged [`Load::Unknown`].
pub const KNOWN_CAPABILITIES: &[(u32, u32)] = &[
    (3, 0),
    (3, 2),
    (3, 5),
    (3, 7),
    (5, 0),
    (5, 2),
    (5, 3),
    (6, 0),
    (6, 1),
    (6, 2),
    (7, 0),
    (7, 2),
    (7, 5),
    (8, 0),
    (8, 6),
    (8, 7),
    (8, 8),
    (8, 9),
    (9, 0),
    (10, 0),
    (10, 1),
    (10, 3),
    (10, 7),
    (11, 0),
    (12, 0),
    (12, 1),
];

/// The first CUDA release that JIT-compiles PTX of `isa`; `None` for an ISA newer than the
/// table. ISA versions older than 6.0 need nothing newer than CUDA 9.0.
pub fn cuda_for_ptx_isa(isa: Version) -> Option<CudaEncoded> {
    if isa < PTX_ISA_RELEASES[0].0 {
        return Some(PTX_ISA_RELEASES[0].1);
    }
    PTX_ISA_RELEASES
        .iter()
        .find(|(v, _)| *v == isa)
        .map(|(_, cuda)| *cuda)
}

/// The newest PTX ISA a driver of CUDA `driver` can JIT, as far as the table knows.
pub fn newest_ptx_isa(driver: CudaEncoded) -> Option<Version> {
    PTX_ISA_RELEASES
        .iter()
        .rev()
        .find(|(_, cuda)| *cuda <= driver)
        .map(|(v, _)| *v)
}

fn same_family(image: Capability, device: Capability) -> bool {
    // Thor was 10.1 until CUDA 13 renamed it 11.0; ptxas 12.9 already kept it apart from 10.x.
    let thor = Capability {
        major: 10,
        minor: 1,
    };
    image.major == device.major
        && device.minor >= image.minor
        && ((image == thor) == (device == thor))
}

/// Whether a SASS image for `arch` runs on `device`.
pub fn sass_runs(arch: super::Arch, device: Capability) -> bool {
    let c = arch.capability;
    match arch.variant {
        Variant::ArchSpecific => c == device,
        Variant::Family => same_family(c, device),
        Variant::Plain => c.major == device.major && device.minor >= c.minor,
    }
}

/// Whether PTX for `arch` may be JIT-compiled for `device` (its ISA aside).
pub fn ptx_applies(arch: super::Arch, device: Capability) -> bool {
    let c = arch.capability;
    match arch.variant {
        Variant::ArchSpecific => c == device,
        Variant::Family => same_family(c, device),
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
        /// The CUDA version its ISA needs.
        needs: CudaEncoded,
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

    /// Whether the driver refuses it (209 or 222).
    pub fn fails(&self) -> bool {
        matches!(self, Load::NoBinaryForGpu | Load::UnsupportedPtx { .. })
    }
}

/// The image the driver loads from one module's `entries` on a GPU of capability `device`
/// with a driver of CUDA version `driver`, or why it cannot. Among fitting SASS images it
/// names the newest architecture (an exact 'a'/'f' image before a plain one); among fitting
/// PTX images, the newest architecture.
pub fn load(entries: &[Entry], device: Capability, driver: CudaEncoded) -> Load {
    if !KNOWN_CAPABILITIES.contains(&(device.major, device.minor)) {
        return Load::Unknown {
            why: format!("compute capability {device} is not one these rules know"),
        };
    }
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
        .filter(|(_, e)| e.kind == EntryKind::Sass && sass_runs(e.arch, device))
        .max_by_key(|(_, e)| specificity(e))
    {
        return Load::Sass { image: i };
    }
    let ptx: Vec<(usize, &Entry)> = images()
        .filter(|(_, e)| e.kind == EntryKind::Ptx && ptx_applies(e.arch, device))
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
        Some(needs) if needs > driver => Load::UnsupportedPtx { image: best, needs },
        Some(_) => Load::Jit { image: best },
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
            flags: 0x11,
            offset: 0,
            stored_size: 0,
            concatenated: false,
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
    const R535: CudaEncoded = 12020;
    const R580: CudaEncoded = 13000;

    /// CUDA C Programming Guide, "Binary Compatibility": a cubin for X.y runs on X.z, z >= y.
    #[test]
    fn sass_runs_within_its_major_on_equal_or_newer_minors() {
        let m = [sass("sm_80")];
        assert_eq!(load(&m, cc("8.6"), R535), Load::Sass { image: 0 });
        assert_eq!(load(&m, cc("8.9"), R535), Load::Sass { image: 0 });
        assert_eq!(load(&m, cc("8.0"), R535), Load::Sass { image: 0 });
        assert_eq!(load(&m, cc("9.0"), R535), Load::NoBinaryForGpu);
        assert_eq!(
            load(&[sass("sm_86")], cc("8.0"), R535),
            Load::NoBinaryForGpu
        );
        assert_eq!(
            load(&[sass("sm_75")], cc("8.0"), R535),
            Load::NoBinaryForGpu
        );
    }

    /// `ptxas --help` 13.5 ("PTX with .target sm_XYa can only be compiled to GPU target
    /// sm_XYa") and the CUDA Programming Guide's architecture-specific feature set.
    #[test]
    fn arch_specific_images_run_only_on_that_exact_capability() {
        assert_eq!(
            load(&[sass("sm_90a")], cc("9.0"), R535),
            Load::Sass { image: 0 }
        );
        assert_eq!(
            load(&[sass("sm_100a")], cc("10.3"), R580),
            Load::NoBinaryForGpu
        );
        let p = [ptx("compute_100a", (9, 0))];
        assert_eq!(load(&p, cc("10.0"), R580), Load::Jit { image: 0 });
        assert_eq!(load(&p, cc("10.3"), R580), Load::NoBinaryForGpu);
        assert_eq!(load(&p, cc("12.0"), R580), Load::NoBinaryForGpu);
    }

    /// `ptxas --help` 13.x ("PTX for .target sm_XYf can be compiled to GPU targets sm_XZ ...
    /// where Z >= Y and sm_XY and sm_XZ belong in same family"); measured with ptxas 13.5:
    /// sm_100f → 10.0, 10.3, 10.7; sm_120f → 12.0, 12.1; never across majors; and with ptxas
    /// 12.9: sm_100f does not reach sm_101 (Thor).
    #[test]
    fn family_images_run_within_their_family() {
        let s = [sass("sm_100f")];
        for yes in ["10.0", "10.3", "10.7"] {
            assert_eq!(load(&s, cc(yes), R580), Load::Sass { image: 0 }, "{yes}");
        }
        for no in ["10.1", "11.0", "12.0", "9.0"] {
            assert_eq!(load(&s, cc(no), R580), Load::NoBinaryForGpu, "{no}");
        }
        assert_eq!(
            load(&[sass("sm_103f")], cc("10.0"), R580),
            Load::NoBinaryForGpu
        );
        let p = [ptx("compute_120f", (8, 8))];
        assert_eq!(load(&p, cc("12.1"), 12090), Load::Jit { image: 0 });
        assert_eq!(load(&p, cc("11.0"), 12090), Load::NoBinaryForGpu);
    }

    /// `ptxas --help` 13.5: "PTX for .target sm_XY can be compiled to all GPU targets sm_MN,
    /// sm_MNa, SM_MNf where MN >= XY".
    #[test]
    fn plain_ptx_jits_on_every_newer_gpu_and_the_first_launch_compiles() {
        let p = [ptx("compute_75", (8, 0))];
        for yes in ["7.5", "8.6", "9.0", "10.0", "12.1"] {
            assert_eq!(load(&p, cc(yes), R535), Load::Jit { image: 0 }, "{yes}");
        }
        assert_eq!(load(&p, cc("7.0"), R535), Load::NoBinaryForGpu);
    }

    /// NVIDIA's PTX ISA release history (8.2 is CUDA 12.2's, 8.8 is 12.9's) and
    /// NVIDIA/nvbandwidth#61: a CUDA 13.2 build fails with 222 on a 580 driver (13.0).
    #[test]
    fn ptx_newer_than_the_driver_fails_with_222_even_within_the_major() {
        let p = [sass("sm_80"), ptx("compute_80", (8, 8))];
        assert_eq!(
            load(&p, cc("9.0"), R535),
            Load::UnsupportedPtx {
                image: 1,
                needs: 12090
            }
        );
        assert_eq!(load(&p, cc("9.0"), 12090), Load::Jit { image: 1 });
        // SASS for the GPU needs no JIT: minor-version compatibility covers it.
        assert_eq!(load(&p, cc("8.6"), R535), Load::Sass { image: 0 });
        let nvbandwidth = [sass("sm_80"), ptx("compute_90", (9, 2))];
        assert_eq!(
            load(&nvbandwidth, cc("9.0"), R580),
            Load::UnsupportedPtx {
                image: 1,
                needs: 13020
            }
        );
        assert_eq!(
            load(&[ptx("compute_75", (8, 2))], cc("9.0"), R535),
            Load::Jit { image: 0 }
        );
    }

    /// The tables end somewhere: what lies beyond them is unknown, never a pass.
    #[test]
    fn an_isa_or_capability_beyond_the_tables_is_unknown() {
        let p = [ptx("compute_75", (9, 6))];
        assert!(matches!(load(&p, cc("9.0"), 14000), Load::Unknown { .. }));
        let s = [sass("sm_130")];
        assert!(matches!(load(&s, cc("13.0"), 14000), Load::Unknown { .. }));
        assert!(matches!(
            load(&[sass("sm_90")], cc("9.5"), R580),
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
        assert_eq!(load(&m, cc("8.9"), R535), Load::Sass { image: 2 });
        assert_eq!(load(&m, cc("9.0"), R535), Load::Jit { image: 3 });
        let exact = [sass("sm_90"), sass("sm_90a")];
        assert_eq!(load(&exact, cc("9.0"), R535), Load::Sass { image: 1 });
    }

    #[test]
    fn nvvm_ir_alone_is_not_for_the_driver() {
        let m = [image(EntryKind::NvvmIr, "compute_90", (9, 0))];
        assert_eq!(load(&m, cc("9.0"), R580), Load::NotForTheDriver);
    }

    /// The table's rows: PTX ISA release history; each driver JITs up to its own release's ISA.
    #[test]
    fn the_isa_table_answers_per_driver() {
        assert_eq!(newest_ptx_isa(12020), Some(Version::new(8, 2)));
        assert_eq!(newest_ptx_isa(12060), Some(Version::new(8, 5)));
        assert_eq!(newest_ptx_isa(11040), Some(Version::new(7, 4)));
        assert_eq!(newest_ptx_isa(13050), Some(Version::new(9, 5)));
        assert_eq!(cuda_for_ptx_isa(Version::new(5, 0)), Some(9000));
        assert_eq!(cuda_for_ptx_isa(Version::new(8, 6)), Some(12070));
        assert_eq!(cuda_for_ptx_isa(Version::new(9, 6)), None);
        assert!(PTX_ISA_RELEASES.windows(2).all(|w| w[0] < w[1]));
    }
}
