//! Choosing the driver: the host's, or a newer `cuda_compat` one (NVIDIA's CUDA Compatibility guide; docs/architecture.md).
//!
//! A compat driver is used only when it provides a newer CUDA than the host driver and, when its
//! note lists the kernel driver branches it runs on, the host's kernel module is among them
//! (otherwise `cuInit` fails with 803). Without a list, a newer CUDA suffices. On Jetson, whose
//! kernel module version may be unknown, a listed compat driver is accepted on the CUDA version
//! alone. The newest acceptable compat driver wins; every rejection is recorded with its reason.

use super::compat::CompatDriver;
use super::versions::CudaVersion;
use cuda_sandbox_manifest::DriverKind;
use serde::Serialize;
use std::path::PathBuf;

/// What is known of the host's own driver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct HostDriverFacts {
    /// The kernel module version, e.g. `535.104.05`.
    pub kernel_driver: Option<String>,
    /// Its branch (major), e.g. 535.
    pub kernel_branch: Option<u32>,
    /// The CUDA version of the host's user-space driver (from its file name, the kernel
    /// branch, or the L4T release).
    pub cuda_version: Option<CudaVersion>,
    /// True on a Tegra (Jetson) host.
    pub tegra: bool,
}

/// A compat driver that was not used, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Rejection {
    /// The compat directory.
    pub dir: String,
    /// Why it was not used (its one line in `explain --json`).
    #[serde(serialize_with = "crate::plan::as_text")]
    pub why: Rejected,
}

/// Why a compat driver was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Rejected {
    /// Neither its note nor its file name gives its CUDA version.
    #[error("its CUDA version is unknown (no note, no version in the file name)")]
    UnknownCuda,
    /// It provides no newer CUDA than the host driver: its CUDA version, and the host
    /// driver's.
    #[error("it provides CUDA {0}, not newer than the host driver's CUDA {1}")]
    NotNewer(CudaVersion, CudaVersion),
    /// Its note lists driver branches, and not the host kernel module's: the host kernel
    /// module's branch, and the branches its note lists.
    #[error(
        "its note does not list the host's kernel driver branch {0} (it lists {1:?}); cuInit \
         would fail with 803"
    )]
    BranchNotListed(u32, Vec<u32>),
    /// Its note lists driver branches, and the host kernel module's version is unknown.
    #[error(
        "the host's kernel driver version is unknown (no /proc/driver/nvidia/version), so its \
         driver list cannot be checked"
    )]
    KernelUnknown,
    /// Another acceptable compat driver provides a newer CUDA: the compat directory chosen.
    #[error("a newer compat driver was chosen ({})", .0.display())]
    NewerChosen(PathBuf),
}

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct DriverChoice {
    /// Host or compat.
    pub kind: DriverKind,
    /// The chosen compat driver, when compat.
    pub compat: Option<CompatDriver>,
    /// The CUDA version the chosen driver provides.
    pub cuda_version: Option<CudaVersion>,
    /// One sentence: why.
    pub reason: String,
    /// Compat drivers considered and not used.
    pub rejected: Vec<Rejection>,
}

/// Chooses between the host driver and the `candidates`.
pub(crate) fn choose(host: &HostDriverFacts, candidates: Vec<CompatDriver>) -> DriverChoice {
    let mut rejected = Vec::new();
    let mut accepted: Vec<(CudaVersion, CompatDriver)> = Vec::new();
    for c in candidates {
        match judge(host, &c) {
            Ok(cuda) => accepted.push((cuda, c)),
            Err(why) => rejected.push(Rejection {
                dir: c.dir.display().to_string(),
                why,
            }),
        }
    }
    accepted.sort_by_key(|(cuda, _)| std::cmp::Reverse(*cuda));
    let host_cuda = (host.cuda_version.map(|v| format!("CUDA {v}")))
        .unwrap_or_else(|| "an unknown CUDA version".to_string());
    if let Some(((cuda, best), others)) = accepted.split_first() {
        rejected.extend(others.iter().map(|(_, other)| Rejection {
            dir: other.dir.display().to_string(),
            why: Rejected::NewerChosen(best.dir.clone()),
        }));
        let drivers = best.note.as_ref().and_then(|n| n.drivers.as_ref());
        let listed = match (drivers, host.kernel_branch) {
            (Some(_), Some(b)) => format!(", and its note lists kernel driver branch {b}"),
            (Some(_), None) => ", on a Jetson whose kernel driver version is unknown".to_string(),
            (None, _) => ", and its note lists no kernel drivers".to_string(),
        };
        return DriverChoice {
            kind: DriverKind::Compat,
            compat: Some(best.clone()),
            cuda_version: Some(*cuda),
            reason: format!(
                "compat driver {} provides CUDA {cuda}, newer than the host driver's {host_cuda}{listed}",
                best.dir.display()
            ),
            rejected,
        };
    }
    let reason = if rejected.is_empty() {
        format!("the host driver ({host_cuda}); no compat driver is configured or present")
    } else {
        let whys: Vec<String> = rejected
            .iter()
            .map(|r| format!("{}: {}", r.dir, r.why))
            .collect();
        format!(
            "the host driver ({host_cuda}); compat not used: {}",
            whys.join("; ")
        )
    };
    DriverChoice {
        kind: DriverKind::Host,
        compat: None,
        cuda_version: host.cuda_version,
        reason,
        rejected,
    }
}

/// The CUDA version `c` provides, when it may be used on `host`.
fn judge(host: &HostDriverFacts, c: &CompatDriver) -> Result<CudaVersion, Rejected> {
    let Some(cuda) = c.cuda_version else {
        return Err(Rejected::UnknownCuda);
    };
    if let Some(h) = host.cuda_version.filter(|h| cuda <= *h) {
        return Err(Rejected::NotNewer(cuda, h));
    }
    let drivers = c.note.as_ref().and_then(|n| n.drivers.as_ref());
    match (drivers, host.kernel_branch) {
        (Some(list), Some(branch)) if !list.contains(&branch) => {
            Err(Rejected::BranchNotListed(branch, list.clone()))
        }
        (Some(_), None) if !host.tegra => Err(Rejected::KernelUnknown),
        _ => Ok(cuda),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::compat::CompatNote;

    fn host(branch: Option<u32>, cuda: i32) -> HostDriverFacts {
        HostDriverFacts {
            kernel_driver: branch.map(|b| format!("{b}.1.2")),
            kernel_branch: branch,
            cuda_version: Some(CudaVersion(cuda)),
            tegra: false,
        }
    }

    fn compat(dir: &str, cuda: i32, drivers: Option<Vec<u32>>) -> CompatDriver {
        CompatDriver {
            dir: PathBuf::from(dir),
            dir_outside: PathBuf::from(dir),
            libcuda: "libcuda.so.1".into(),
            note: Some(CompatNote {
                cuda_version: Some(CudaVersion(cuda)),
                drivers,
                json: String::new(),
            }),
            cuda_version: Some(CudaVersion(cuda)),
            libraries: Vec::new(),
        }
    }

    #[test]
    fn compat_is_chosen_when_note_lists_host_driver() {
        let c = choose(
            &host(Some(470), 11040),
            vec![compat("/c", 12020, Some(vec![470, 525]))],
        );
        assert_eq!(c.kind, DriverKind::Compat);
        assert!(
            c.reason.contains("lists kernel driver branch 470"),
            "{}",
            c.reason
        );
    }

    #[test]
    fn host_is_chosen_when_note_does_not_list_host_driver() {
        let c = choose(
            &host(Some(470), 11040),
            vec![compat("/c", 12020, Some(vec![525, 535]))],
        );
        assert_eq!(c.kind, DriverKind::Host);
        assert!(
            c.reason
                .contains("does not list the host's kernel driver branch 470"),
            "{}",
            c.reason
        );
        assert!(c.reason.contains("803"));
    }

    #[test]
    fn compat_must_be_newer() {
        let c = choose(&host(Some(550), 12040), vec![compat("/c", 12020, None)]);
        assert_eq!(c.kind, DriverKind::Host);
        assert_eq!(
            c.rejected[0].why,
            Rejected::NotNewer(CudaVersion(12020), CudaVersion(12040))
        );
        let c = choose(&host(Some(470), 11040), vec![compat("/c", 12020, None)]);
        assert_eq!(c.kind, DriverKind::Compat);
    }

    /// Each reason's one line, as `explain` shows a rejected compat driver.
    #[test]
    fn each_rejection_says_why_in_one_line() {
        for (why, text) in [
            (
                Rejected::UnknownCuda,
                "its CUDA version is unknown (no note, no version in the file name)",
            ),
            (
                Rejected::NotNewer(CudaVersion(12020), CudaVersion(12040)),
                "it provides CUDA 12.2, not newer than the host driver's CUDA 12.4",
            ),
            (
                Rejected::BranchNotListed(470, vec![525, 535]),
                "its note does not list the host's kernel driver branch 470 (it lists [525, \
                 535]); cuInit would fail with 803",
            ),
            (
                Rejected::KernelUnknown,
                "the host's kernel driver version is unknown (no /proc/driver/nvidia/version), \
                 so its driver list cannot be checked",
            ),
            (
                Rejected::NewerChosen("/b".into()),
                "a newer compat driver was chosen (/b)",
            ),
        ] {
            assert_eq!(why.to_string(), text);
        }
    }

    #[test]
    fn newest_acceptable_compat_wins() {
        let c = choose(
            &host(Some(470), 11040),
            vec![
                compat("/a", 12020, None),
                compat("/b", 12040, Some(vec![470])),
                compat("/z", 12090, Some(vec![535])),
            ],
        );
        assert_eq!(c.compat.unwrap().dir, PathBuf::from("/b"));
        assert_eq!(c.rejected.len(), 2);
    }

    #[test]
    fn jetson_without_kernel_version_accepts_listed_compat() {
        let mut h = host(None, 11040);
        h.tegra = true;
        assert_eq!(
            choose(&h, vec![compat("/c", 12020, Some(vec![540]))]).kind,
            DriverKind::Compat
        );
        h.tegra = false;
        assert_eq!(
            choose(&h, vec![compat("/c", 12020, Some(vec![540]))]).kind,
            DriverKind::Host
        );
    }
}
