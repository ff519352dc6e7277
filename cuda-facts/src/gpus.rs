//! The GPU architectures the rules know, as data: `gpus.txt` beside this file, one row per
//! compute capability with the first CUDA release whose driver drives it, the releases that
//! added its 'a' and 'f' variants, the last release that drives it under that name, and the
//! row's source, and the forms of it that Nixpkgs' CUDA capability database holds at the
//! Nixpkgs commit the table names. The loading rules (elfkit's `fatbin::rules`) and the fleet's
//! `cuda-sm-*` features ([`super::features`]) read the same rows.
//!
//! The first ptxas that accepts an architecture stands in for the first driver that drives
//! it: NVIDIA ships both in one release; no driver was run here. `elfkit/tests/gpus_ptxas.rs`
//! holds the table to every ptxas release `scripts/nvidia-userspace` fetches.

use std::sync::OnceLock;

use super::table::{self, TableError, TableFault};
use super::CudaVersion;
use super::{Capability, Variant};

/// The table, as written (see its header for the columns).
pub const TABLE: &str = include_str!("gpus.txt");

/// What happens to an architecture after its last release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retired {
    /// The next driver branch no longer drives it.
    Dropped,
    /// From the next major the same GPU reports another capability (Thor: 10.1 → 11.0).
    RenamedTo(Capability),
}

/// The last CUDA release whose kernel module drives an architecture, and why it stops there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Until {
    /// The last release (the kernel module's CUDA version) that drives it.
    pub cuda: CudaVersion,
    /// Dropped or renamed.
    pub then: Retired,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Architecture {
    /// Its compute capability.
    pub capability: Capability,
    /// The architecture's name (`Hopper`).
    pub name: &'static str,
    /// An integrated (Jetson) GPU, whose driver comes with L4T.
    pub jetson: bool,
    /// The first CUDA release whose driver drives it.
    pub first: CudaVersion,
    /// The first release with its `sm_XYa` variant.
    pub arch_specific: Option<CudaVersion>,
    /// The first release with its `sm_XYf` variant.
    pub family: Option<CudaVersion>,
    /// The last release that drives it under this capability, when there is one.
    pub until: Option<Until>,
    /// The forms of it (`Plain` for X.Y, `ArchSpecific`, `Family`) that Nixpkgs'
    /// `_cuda.db.cudaCapabilityToInfo` holds at [`Table::nixpkgs`]'s commit, in that order;
    /// empty when Nixpkgs has none.
    pub nixpkgs: Vec<Variant>,
    /// Where the row comes from.
    pub source: &'static str,
}

/// The Nixpkgs revision the table's `nixpkgs` column follows (its `nixpkgs:` line).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NixpkgsPin {
    /// `owner/name` on GitHub.
    pub repository: &'static str,
    /// The commit, 40 hex digits.
    pub commit: &'static str,
}

/// The whole table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// The `nixpkgs:` line, when the table has one.
    pub nixpkgs: Option<NixpkgsPin>,
    /// The rows, in increasing capability.
    pub rows: Vec<Architecture>,
}

fn optional(text: &str) -> Result<Option<CudaVersion>, TableFault> {
    (text != "-").then(|| table::release(text)).transpose()
}

fn until(text: &str) -> Result<Option<Until>, TableFault> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let (then, release) = match words[..] {
        ["-"] => return Ok(None),
        [release, "dropped"] => (Retired::Dropped, release),
        [release, "renamed", to] => (Retired::RenamedTo(Capability::parse(to)?), release),
        _ => return Err(TableFault::Until(text.to_owned())),
    };
    Ok(Some(Until {
        cuda: table::release(release)?,
        then,
    }))
}

/// `sm a f` → the variants, in that order; `-` → none.
fn nixpkgs_forms(text: &str) -> Result<Vec<Variant>, TableFault> {
    if text == "-" {
        return Ok(Vec::new());
    }
    let mut forms = Vec::new();
    for word in text.split(' ') {
        let form = match word {
            "sm" => Variant::Plain,
            "a" => Variant::ArchSpecific,
            "f" => Variant::Family,
            other => return Err(TableFault::Form(other.to_owned())),
        };
        if forms.last().is_some_and(|last| *last >= form) {
            return Err(TableFault::FormOrder(text.to_owned()));
        }
        forms.push(form);
    }
    Ok(forms)
}

/// `nixpkgs: owner/name <40 hex digits>`.
fn pin(text: &'static str) -> Result<NixpkgsPin, TableFault> {
    let bad = || TableFault::Pin(text.to_owned());
    let (repository, commit) = text.trim().split_once(' ').ok_or_else(bad)?;
    let hex = commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit());
    (repository.contains('/') && hex)
        .then_some(NixpkgsPin { repository, commit })
        .ok_or_else(bad)
}

/// Parses a table written as [`TABLE`] is.
pub fn parse(text: &'static str) -> Result<Table, TableError> {
    let mut rows: Vec<Architecture> = Vec::new();
    let mut nixpkgs = None;
    for (line, at) in table::rows(text, "gpus.txt") {
        if let Some(rest) = line.strip_prefix("nixpkgs:") {
            if nixpkgs.is_some() {
                return Err(at(TableFault::SecondPin));
            }
            nixpkgs = Some(pin(rest).map_err(at)?);
            continue;
        }
        let fields: Vec<&'static str> = line.split(" | ").map(str::trim).collect();
        let [capability, name, jetson, first, a, f, last, forms, source] = fields[..] else {
            return Err(at(TableFault::Fields(fields.len())));
        };
        let row = Architecture {
            capability: Capability::parse(capability).map_err(|e| at(e.into()))?,
            name,
            jetson: match jetson {
                "yes" => true,
                "no" => false,
                other => return Err(at(TableFault::Jetson(other.into()))),
            },
            first: table::release(first).map_err(at)?,
            arch_specific: optional(a).map_err(at)?,
            family: optional(f).map_err(at)?,
            until: until(last).map_err(at)?,
            nixpkgs: nixpkgs_forms(forms).map_err(at)?,
            source,
        };
        let lacks = |variant: Variant, since: Option<CudaVersion>| {
            row.nixpkgs.contains(&variant) && since.is_none()
        };
        if lacks(Variant::ArchSpecific, row.arch_specific) || lacks(Variant::Family, row.family) {
            return Err(at(TableFault::FormWithoutVariant));
        }
        if rows.last().is_some_and(|r| r.capability >= row.capability) {
            return Err(at(TableFault::RowOrder));
        }
        rows.push(row);
    }
    Ok(Table { nixpkgs, rows })
}

/// The table compiled in.
pub fn table() -> &'static Table {
    static TABLE_ROWS: OnceLock<Table> = OnceLock::new();
    // The table is compiled in and its unit test parses it: an error here is a defect of this
    // crate's source, never of its input.
    TABLE_ROWS.get_or_init(|| parse(TABLE).expect("gpus.txt parses (its unit test says so)"))
}

/// Every architecture the rules know, in increasing capability.
pub fn architectures() -> &'static [Architecture] {
    &table().rows
}

/// The Nixpkgs revision the table's `nixpkgs` column follows.
pub fn nixpkgs_pin() -> &'static NixpkgsPin {
    table()
        .nixpkgs
        .as_ref()
        .expect("gpus.txt has a nixpkgs line (its unit test says so)")
}

/// The row of `capability`, when the table has one.
pub fn architecture(capability: Capability) -> Option<&'static Architecture> {
    architectures().iter().find(|a| a.capability == capability)
}

/// Whether a kernel module of CUDA version `kernel` drives a GPU of `capability`; serialized
/// as `{"drives": "too-old", "first": "12.8"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "drives")]
pub enum Drives {
    /// It does.
    Yes,
    /// The driver predates the architecture: its first release is `first`.
    TooOld {
        /// The first release that drives it.
        first: CudaVersion,
    },
    /// The architecture's last branch is older than the driver.
    Dropped {
        /// The last release that drives it.
        last: CudaVersion,
    },
    /// Under this driver the same GPU reports another capability.
    Renamed {
        /// The capability it reports there.
        to: Capability,
        /// The last release that calls it by the capability asked (not serialized).
        #[serde(skip)]
        last: CudaVersion,
    },
    /// The table has no row for it.
    Unknown,
}

/// Whether a kernel module whose branch provides CUDA `kernel` drives a GPU of `capability`
/// (the kernel module decides: a newer `cuda_compat` libcuda does not make an old module
/// drive a new GPU).
pub fn drives(kernel: CudaVersion, capability: Capability) -> Drives {
    let Some(row) = architecture(capability) else {
        return Drives::Unknown;
    };
    if kernel < row.first {
        return Drives::TooOld { first: row.first };
    }
    match row.until {
        Some(Until { cuda, then }) if kernel > cuda => match then {
            Retired::Dropped => Drives::Dropped { last: cuda },
            Retired::RenamedTo(to) => Drives::Renamed { to, last: cuda },
        },
        _ => Drives::Yes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(text: &str) -> Capability {
        Capability::parse(text).unwrap()
    }

    #[test]
    fn the_table_parses_in_order_and_every_row_cites_a_source() {
        let rows = architectures();
        assert!(rows.len() >= 25, "{}", rows.len());
        assert_eq!(nixpkgs_pin().commit.len(), 40);
        for row in rows {
            assert!(!row.source.is_empty(), "{:?}", row.capability);
            if let Some(a) = row.arch_specific {
                assert!(a >= row.first, "{:?}", row.capability);
            }
            if let Some(u) = row.until {
                assert!(u.cuda >= row.first, "{:?}", row.capability);
            }
        }
    }

    #[test]
    fn bad_rows_are_refused_with_their_line() {
        use crate::ValueError;
        let line = |line: usize, fault: TableFault| TableError::Line("gpus.txt", line, fault);
        let pin = "nixpkgs: NixOS/nixpkgs 1da571d99afc691f51e18caaf287375116e315d1";
        for (bad, want) in [
            ("9.0 | Hopper | no | 11.8 | - | -".to_owned(), line(1, TableFault::Fields(6))),
            ("9.0 | Hopper | no | 11.8 | - | - | - | x".into(), line(1, TableFault::Fields(8))),
            (
                "nine | Hopper | no | 11.8 | - | - | - | - | x".into(),
                line(1, ValueError::Capability("nine".into()).into()),
            ),
            (
                "9.0 | Hopper | maybe | 11.8 | - | - | - | - | x".into(),
                line(1, TableFault::Jetson("maybe".into())),
            ),
            (
                "9.0 | Hopper | no | 11 | - | - | - | - | x".into(),
                line(1, TableFault::Release("11".into())),
            ),
            (
                "9.0 | Hopper | no | 11.8 | - | - | 13.0 gone | - | x".into(),
                line(1, TableFault::Until("13.0 gone".into())),
            ),
            (
                "9.0 | Hopper | no | 11.8 | - | - | 13.0 | - | x".into(),
                line(1, TableFault::Until("13.0".into())),
            ),
            (
                "9.0 | Hopper | no | 11.8 | - | - | - | - | x\n8.9 | Ada | no | 11.8 | - | - | - | - | x"
                    .into(),
                line(2, TableFault::RowOrder),
            ),
            (
                "9.0 | Hopper | no | 11.8 | 12.0 | - | - | sm f | x".into(),
                line(1, TableFault::FormWithoutVariant),
            ),
            (
                "9.0 | Hopper | no | 11.8 | 12.0 | - | - | a sm | x".into(),
                line(1, TableFault::FormOrder("a sm".into())),
            ),
            (
                "9.0 | Hopper | no | 11.8 | 12.0 | - | - | sm b | x".into(),
                line(1, TableFault::Form("b".into())),
            ),
            (
                "nixpkgs: NixOS/nixpkgs 1234".into(),
                line(1, TableFault::Pin(" NixOS/nixpkgs 1234".into())),
            ),
            (
                "nixpkgs: nixpkgs 1da571d99afc691f51e18caaf287375116e315d1".into(),
                line(
                    1,
                    TableFault::Pin(" nixpkgs 1da571d99afc691f51e18caaf287375116e315d1".into()),
                ),
            ),
            (format!("{pin}\n{pin}"), line(2, TableFault::SecondPin)),
        ] {
            let bad: &'static str = Box::leak(bad.into_boxed_str());
            assert_eq!(parse(bad), Err(want), "{bad}");
        }
        assert_eq!(
            line(4, TableFault::Jetson("maybe".into())).to_string(),
            r#"gpus.txt line 4: jetson "maybe": yes or no"#
        );
    }

    /// Measured with ptxas from PyPI (gpus.txt's header): sm_100 and sm_120 first in 12.8,
    /// sm_89 and sm_90 in 11.8, sm_103 and sm_121 in 12.9, sm_110 and sm_88 in 13.0, sm_107
    /// in 13.4.
    #[test]
    fn a_driver_drives_the_architectures_of_its_release_and_older() {
        assert_eq!(drives(CudaVersion(12080), cc("12.0")), Drives::Yes);
        assert_eq!(drives(CudaVersion(12080), cc("10.0")), Drives::Yes);
        assert_eq!(
            drives(CudaVersion(12040), cc("12.0")),
            Drives::TooOld {
                first: CudaVersion(12080)
            }
        );
        assert_eq!(
            drives(CudaVersion(12020), cc("10.0")),
            Drives::TooOld {
                first: CudaVersion(12080)
            }
        );
        assert_eq!(drives(CudaVersion(11080), cc("9.0")), Drives::Yes);
        assert_eq!(
            drives(CudaVersion(11070), cc("8.9")),
            Drives::TooOld {
                first: CudaVersion(11080)
            }
        );
        assert_eq!(
            drives(CudaVersion(12080), cc("12.1")),
            Drives::TooOld {
                first: CudaVersion(12090)
            }
        );
        assert_eq!(
            drives(CudaVersion(13030), cc("10.7")),
            Drives::TooOld {
                first: CudaVersion(13040)
            }
        );
        assert_eq!(drives(CudaVersion(13000), cc("8.8")), Drives::Yes);
    }

    /// NVIDIA's Unix graphics feature deprecation schedule: R470 (CUDA 11.4) is the last branch
    /// for Kepler, R580 (CUDA 13.0) for Maxwell, Pascal and Volta. CUDA 13.0's toolkit no
    /// longer builds for sm_50 to sm_72, but a 580 driver still drives them.
    #[test]
    fn a_driver_branch_drops_an_architecture_a_toolkit_dropping_it_does_not() {
        assert_eq!(drives(CudaVersion(13000), cc("7.0")), Drives::Yes);
        assert_eq!(drives(CudaVersion(13000), cc("6.1")), Drives::Yes);
        assert_eq!(
            drives(CudaVersion(13010), cc("7.0")),
            Drives::Dropped {
                last: CudaVersion(13000)
            }
        );
        assert_eq!(drives(CudaVersion(11040), cc("3.5")), Drives::Yes);
        assert_eq!(
            drives(CudaVersion(11050), cc("3.7")),
            Drives::Dropped {
                last: CudaVersion(11040)
            }
        );
        // Jetson drivers come with L4T: no branch drops them here.
        assert_eq!(drives(CudaVersion(13010), cc("7.2")), Drives::Yes);
    }

    /// NVIDIA's CUDA 13.0 release notes: Thor, sm_101 in CUDA 12.8 and 12.9, is sm_110 from
    /// 13.0 (measured: ptxas 12.9 accepts sm_101, 13.0 accepts sm_110 and not sm_101).
    #[test]
    fn thor_is_10_1_before_cuda_13_and_11_0_from_it() {
        assert_eq!(drives(CudaVersion(12090), cc("10.1")), Drives::Yes);
        assert_eq!(
            drives(CudaVersion(13000), cc("10.1")),
            Drives::Renamed {
                to: cc("11.0"),
                last: CudaVersion(12090)
            }
        );
        assert_eq!(drives(CudaVersion(13000), cc("11.0")), Drives::Yes);
        assert_eq!(
            drives(CudaVersion(12090), cc("11.0")),
            Drives::TooOld {
                first: CudaVersion(13000)
            }
        );
        assert!(architecture(cc("10.1")).unwrap().jetson);
    }

    #[test]
    fn a_capability_the_table_lacks_is_unknown() {
        assert_eq!(drives(CudaVersion(13050), cc("13.0")), Drives::Unknown);
        assert_eq!(drives(CudaVersion(13050), cc("9.5")), Drives::Unknown);
    }
}
