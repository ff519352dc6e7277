//! The CUDA releases and the driver branches that provide them, as data: `releases.txt`
//! beside this file (with its sources). The one place for both: the hook chooses a driver by
//! the branches, the runner reads `--driver-cuda` and `--driver` by them, and messages name
//! the first release at or above what a file needs ([`first_release_at_or_above`]), while
//! the ISA table (elfkit's `fatbin::rules::PTX_ISA_RELEASES`) stays as NVIDIA wrote it.

use std::sync::OnceLock;

use super::table::{self, TableError, TableFault};
use super::CudaVersion;

/// The table, as written (see its header for the rows).
pub const TABLE: &str = include_str!("releases.txt");

/// The releases and branches, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Releases {
    /// Every CUDA toolkit release, in increasing order.
    pub releases: Vec<CudaVersion>,
    /// Each driver branch and the CUDA version its libcuda reports, in increasing order.
    pub branches: Vec<(u32, CudaVersion)>,
}

/// Parses a table written as [`TABLE`] is.
pub fn parse(text: &str) -> Result<Releases, TableError> {
    let mut out = Releases::default();
    for (line, at) in table::rows(text, "releases.txt") {
        let fields: Vec<&str> = line.split(" | ").map(str::trim).collect();
        match fields[..] {
            ["release", version, source] if !source.is_empty() => {
                let v = table::release(version).map_err(at)?;
                if out.releases.last().is_some_and(|last| *last >= v) {
                    return Err(at(TableFault::ReleaseOrder));
                }
                out.releases.push(v);
            }
            ["branch", branch, version, source] if !source.is_empty() => {
                let b: u32 = branch
                    .parse()
                    .map_err(|_| at(TableFault::Branch(branch.into())))?;
                let v = table::release(version).map_err(at)?;
                if out
                    .branches
                    .last()
                    .is_some_and(|(lb, lv)| *lb >= b || *lv > v)
                {
                    return Err(at(TableFault::BranchOrder));
                }
                out.branches.push((b, v));
            }
            _ => return Err(at(TableFault::ReleasesRow)),
        }
    }
    if out.releases.is_empty() || out.branches.is_empty() {
        return Err(TableError::Empty("releases.txt"));
    }
    Ok(out)
}

/// The releases and branches of [`TABLE`].
pub fn table() -> &'static Releases {
    static ROWS: OnceLock<Releases> = OnceLock::new();
    // Compiled in and parsed by its unit test: an error here is a defect of this crate's
    // source, never of its input.
    ROWS.get_or_init(|| parse(TABLE).expect("releases.txt parses (its unit test says so)"))
}

/// Whether `cuda` is a CUDA toolkit release.
pub fn is_release(cuda: CudaVersion) -> bool {
    table().releases.contains(&cuda)
}

/// The newest release the table knows: above it the rules cannot judge.
pub fn newest_release() -> CudaVersion {
    *table().releases.last().expect("the table has releases")
}

/// The first release at or above `cuda` (12.7 → 12.8), for messages; `None` above the table.
pub fn first_release_at_or_above(cuda: CudaVersion) -> Option<CudaVersion> {
    table().releases.iter().copied().find(|r| *r >= cuda)
}

/// The releases either side of `cuda` that is not one (12.7 → 12.6 and 12.8).
pub fn nearest_releases(cuda: CudaVersion) -> (Option<CudaVersion>, Option<CudaVersion>) {
    let r = &table().releases;
    (
        r.iter().rev().copied().find(|v| *v < cuda),
        r.iter().copied().find(|v| *v > cuda),
    )
}

/// The CUDA version a driver branch provides (535 → 12.2): the newest known branch at or
/// below it. `None` for branches older than the table, or more than 9 above its newest (a
/// branch the table cannot know).
pub fn cuda_for_branch(branch: u32) -> Option<CudaVersion> {
    let branches = &table().branches;
    let newest_known = branches[branches.len() - 1].0;
    if branch > newest_known + 9 {
        return None;
    }
    branches
        .iter()
        .rev()
        .find(|(b, _)| *b <= branch)
        .map(|(_, cuda)| *cuda)
}

/// The first driver branch that provides CUDA `cuda` (12.8 → 570), when the table has one.
pub fn branch_for_cuda(cuda: CudaVersion) -> Option<u32> {
    table()
        .branches
        .iter()
        .find(|(_, c)| *c == cuda)
        .map(|(b, _)| *b)
}

/// A driver of CUDA `needs` or newer, in words for a message: `CUDA 12.8 (R570)`; where no
/// release is `needs` (12.7), the first release above it and the branch that reports it:
/// `CUDA 12.8 (R570; or an R565 driver, which reports CUDA 12.7)`.
pub fn needed_driver(needs: CudaVersion) -> String {
    let Some(first) = first_release_at_or_above(needs) else {
        return format!("CUDA {needs}");
    };
    // The first branch at or above `needs` (12.7 → R565), when it reports less than `first`.
    let at_or_above = table().branches.iter().find(|(_, c)| *c >= needs);
    let between = at_or_above.filter(|(_, c)| *c < first);
    match (branch_for_cuda(first), between) {
        (Some(b), Some(&(older, c))) => {
            format!("CUDA {first} (R{b}; or an R{older} driver, which reports CUDA {c})")
        }
        (Some(b), None) => format!("CUDA {first} (R{b})"),
        (None, _) => format!("CUDA {first}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_every_branch_reports_a_release_or_a_driver_only_version() {
        let t = table();
        assert!(t.releases.len() >= 30, "{}", t.releases.len());
        assert_eq!(newest_release(), CudaVersion(13050));
        for (branch, cuda) in &t.branches {
            // Every branch's CUDA version is a release, but R565's 12.7 (a driver-only branch).
            assert!(is_release(*cuda) || *branch == 565, "R{branch}");
        }
    }

    #[test]
    fn bad_rows_are_refused_with_their_line() {
        let line = |line: usize, fault: TableFault| TableError::Line("releases.txt", line, fault);
        for (bad, want) in [
            ("release | 12.2", line(1, TableFault::ReleasesRow)),
            (
                "release | 12 | x",
                line(1, TableFault::Release("12".into())),
            ),
            (
                "release | 0.5 | x",
                line(1, TableFault::Release("0.5".into())),
            ),
            (
                "release | 12.2 | x\nrelease | 12.1 | x\nbranch | 1 | 1.0 | x",
                line(2, TableFault::ReleaseOrder),
            ),
            (
                "branch | r535 | 12.2 | x",
                line(1, TableFault::Branch("r535".into())),
            ),
            (
                "branch | 535 | 12.2 | x\nbranch | 530 | 12.2 | x",
                line(2, TableFault::BranchOrder),
            ),
            ("gpu | 9.0 | x", line(1, TableFault::ReleasesRow)),
            ("release | 12.2 | x", TableError::Empty("releases.txt")),
        ] {
            assert_eq!(parse(bad), Err(want), "{bad}");
        }
        assert_eq!(
            line(3, TableFault::Release("12".into())).to_string(),
            r#"releases.txt line 3: "12" is not a CUDA release X.Y"#
        );
    }

    /// No CUDA 12.7 was released (no 12.7 ptxas on PyPI); R565 reports 12.7.
    #[test]
    fn twelve_seven_is_no_release_and_messages_name_twelve_eight() {
        assert!(!is_release(CudaVersion(12070)));
        assert!(is_release(CudaVersion(12080)) && is_release(CudaVersion(12060)));
        assert_eq!(
            nearest_releases(CudaVersion(12070)),
            (Some(CudaVersion(12060)), Some(CudaVersion(12080)))
        );
        assert_eq!(
            first_release_at_or_above(CudaVersion(12070)),
            Some(CudaVersion(12080))
        );
        assert_eq!(first_release_at_or_above(CudaVersion(13060)), None);
        assert_eq!(
            needed_driver(CudaVersion(12070)),
            "CUDA 12.8 (R570; or an R565 driver, which reports CUDA 12.7)"
        );
        assert_eq!(needed_driver(CudaVersion(12080)), "CUDA 12.8 (R570)");
        assert_eq!(needed_driver(CudaVersion(13030)), "CUDA 13.3");
    }

    #[test]
    fn branches_map_to_their_cuda_version() {
        assert_eq!(cuda_for_branch(535), Some(CudaVersion(12020)));
        assert_eq!(cuda_for_branch(536), Some(CudaVersion(12020)));
        assert_eq!(cuda_for_branch(565), Some(CudaVersion(12070)));
        assert_eq!(cuda_for_branch(590), Some(CudaVersion(13010)));
        assert_eq!(cuda_for_branch(418), None);
        assert_eq!(cuda_for_branch(900), None);
        assert_eq!(branch_for_cuda(CudaVersion(12080)), Some(570));
        assert_eq!(branch_for_cuda(CudaVersion(10000)), None);
    }
}
