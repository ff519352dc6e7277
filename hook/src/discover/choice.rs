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
    /// Why it was not used.
    pub why: String,
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
    let mut accepted: Vec<CompatDriver> = Vec::new();
    for c in candidates {
        match judge(host, &c) {
            Ok(()) => accepted.push(c),
            Err(why) => rejected.push(Rejection {
                dir: c.dir.display().to_string(),
                why,
            }),
        }
    }
    accepted.sort_by_key(|c| std::cmp::Reverse(c.cuda_version));
    let host_cuda = host
        .cuda_version
        .map_or("an unknown CUDA version".to_string(), |v| {
            format!("CUDA {v}")
        });
    if let Some(best) = accepted.first().cloned() {
        for other in &accepted[1..] {
            rejected.push(Rejection {
                dir: other.dir.display().to_string(),
                why: format!("a newer compat driver was chosen ({})", best.dir.display()),
            });
        }
        let cuda = best.cuda_version.expect("judge requires a version");
        let listed = match (
            &best.note.as_ref().and_then(|n| n.drivers.clone()),
            host.kernel_branch,
        ) {
            (Some(_), Some(b)) => format!(", and its note lists kernel driver branch {b}"),
            (Some(_), None) => ", on a Jetson whose kernel driver version is unknown".to_string(),
            (None, _) => ", and its note lists no kernel drivers".to_string(),
        };
        return DriverChoice {
            kind: DriverKind::Compat,
            compat: Some(best.clone()),
            cuda_version: Some(cuda),
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

fn judge(host: &HostDriverFacts, c: &CompatDriver) -> Result<(), String> {
    let Some(cuda) = c.cuda_version else {
        return Err("its CUDA version is unknown (no note, no version in the file name)".into());
    };
    if let Some(h) = host.cuda_version {
        if cuda <= h {
            return Err(format!(
                "it provides CUDA {cuda}, not newer than the host driver's CUDA {h}"
            ));
        }
    }
    let drivers = c.note.as_ref().and_then(|n| n.drivers.as_ref());
    match (drivers, host.kernel_branch) {
        (Some(list), Some(branch)) if !list.contains(&branch) => Err(format!(
            "its note does not list the host's kernel driver branch {branch} (it lists {list:?}); \
             cuInit would fail with 803"
        )),
        (Some(_), None) if !host.tegra => Err(
            "the host's kernel driver version is unknown (no /proc/driver/nvidia/version), so its \
             driver list cannot be checked"
                .into(),
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::compat::CompatNote;
    use std::path::PathBuf;

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
        assert!(c.rejected[0].why.contains("not newer"));
        let c = choose(&host(Some(470), 11040), vec![compat("/c", 12020, None)]);
        assert_eq!(c.kind, DriverKind::Compat);
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
