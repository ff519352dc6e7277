//! Why a plan cannot serve a build: one [`ProblemKind`] per cause, whose Display says what is
//! wrong and whose [`ProblemKind::fix`] says what to do, each in one line. Tests match the
//! kind; `explain` and the hook's one-line failure print the two texts.

use super::gpus::GpuCountError;
use super::stale::StaleDriver;
use crate::cdi::load::LookupError;
use crate::closure::ClosureError;
use crate::mig::Capability;
use crate::scan::mig::MigScanError;
use crate::symlinks::ChainError;
use serde::{Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;

/// A reason the plan cannot serve the build: a required device or path is missing, or a
/// closure could not be computed. Each renders as one line with the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The rule concerned.
    pub rule: String,
    /// What is wrong.
    pub(crate) kind: ProblemKind,
}

impl Problem {
    /// The problem `kind` of the rule(s) `rule`.
    pub(crate) fn new(rule: impl Into<String>, kind: ProblemKind) -> Problem {
        Problem {
            rule: rule.into(),
            kind,
        }
    }

    /// What is missing or broken, in one line.
    pub(crate) fn what(&self) -> String {
        self.kind.to_string()
    }

    /// What to do about it, in one line.
    pub(crate) fn fix(&self) -> Cow<'_, str> {
        self.kind.fix()
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.kind.fix())
    }
}

/// As `explain --json` has always written a problem: `rule`, `what`, `fix`.
impl Serialize for Problem {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = s.serialize_struct("Problem", 3)?;
        out.serialize_field("rule", &self.rule)?;
        out.serialize_field("what", &self.what())?;
        out.serialize_field("fix", &self.fix())?;
        out.end()
    }
}

/// What stops a plan, one variant per cause. Display is the "what"; [`ProblemKind::fix`]
/// the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProblemKind {
    /// A required device glob matched nothing.
    #[error("required device {glob} is missing")]
    MissingDevice {
        /// The glob.
        glob: String,
        /// The rule's hint, else the glob's usual fix.
        fix: String,
    },
    /// A required device's path cannot be said in Nix's protocol.
    #[error(
        "device {} (glob {glob}) cannot be given to the build: {bad:?} holds a newline or '=', \
         which Nix's pre-build-hook protocol cannot express",
        .inside.display()
    )]
    DeviceUnexpressible {
        /// The device as the build sees it.
        inside: PathBuf,
        /// The glob that matched it.
        glob: String,
        /// The path on its chain that cannot be said.
        bad: PathBuf,
    },
    /// A required path cannot be followed.
    #[error("required path {} is unusable: {error}", .inside.display())]
    RequiredPath {
        /// The path as the build sees it.
        inside: PathBuf,
        /// Why.
        error: ChainError,
        /// The rule's hint, else the path's usual fix.
        fix: String,
    },
    /// A required driver was not found.
    #[error(
        "no NVIDIA driver found (no {} and no libcuda.so.1 in /etc/ld.so.cache or {})",
        .link.display(),
        joined(.library_dirs)
    )]
    NoDriver {
        /// The driver link looked at.
        link: PathBuf,
        /// The library directories looked in.
        library_dirs: Vec<PathBuf>,
    },
    /// The user-space driver does not match the loaded kernel module.
    #[error("{}", .0.what())]
    StaleDriver(StaleDriver),
    /// The build's GPU count cannot be met.
    #[error("{0}")]
    GpuCount(GpuCountError),
    /// A store path's closure could not be had.
    #[error("{0}")]
    Closure(ClosureError),
    /// A closure member leads out of the store.
    #[error(
        "closure member {} is a symlink to {}, outside the store",
        .member.display(),
        .to.display()
    )]
    ClosureEscapes {
        /// The member.
        member: PathBuf,
        /// Where it leads.
        to: PathBuf,
    },
    /// The hook cannot tell who holds the lease it would take.
    #[error("cannot read /proc/<parent>/stat to record who holds the GPU lease")]
    NoLeaseHolder,
    /// No slot could be leased (the lease's one-line error).
    #[error("no GPU or MIG instance could be leased: {0}")]
    Lease(String),
    /// The build's read-only `/sys` could not be made (the tree's one-line error).
    #[error("cannot give the build its read-only /sys: {0}")]
    Sysfs(String),
    /// A named CDI device is not in the specs, or two specs define it.
    #[error("{error}")]
    CdiLookup {
        /// Why.
        error: LookupError,
        /// The rule's hint for a device not found.
        hint: Option<String>,
    },
    /// A CDI spec's device node is not a path the hook can use.
    #[error("CDI {device}: device node {why}")]
    CdiSpecNode {
        /// The CDI device.
        device: String,
        /// What is wrong with the spec's path.
        why: String,
    },
    /// A CDI device node on the host cannot be given to the build.
    #[error("CDI {device}: device node {} {fault}", .inside.display())]
    CdiNode {
        /// The CDI device.
        device: String,
        /// The node as the build sees it.
        inside: PathBuf,
        /// What is wrong with it.
        fault: NodeFault,
    },
    /// The MIG instances cannot be read.
    #[error("the MIG instances cannot be read: {0}")]
    MigUnreadable(MigScanError),
    /// A MIG capability's device node is missing.
    #[error("the {capability}'s device node {} is missing", .inside.display())]
    MigNodeMissing {
        /// The capability.
        capability: Capability,
        /// Its node as the build sees it.
        inside: PathBuf,
    },
    /// Something else is where a MIG capability's node should be.
    #[error("{} is not the {capability}'s device node: {why}", .inside.display())]
    MigNodeWrong {
        /// The capability.
        capability: Capability,
        /// Its node as the build sees it.
        inside: PathBuf,
        /// What is there instead.
        why: String,
    },
    /// A MIG capability's node cannot be followed within the roots.
    #[error("the {capability}'s device node {}: {error}", .inside.display())]
    MigNodeChain {
        /// The capability.
        capability: Capability,
        /// Its node as the build sees it.
        inside: PathBuf,
        /// Why.
        error: ChainError,
    },
    /// A MIG capability's node cannot be said in Nix's protocol.
    #[error(
        "the {capability}'s device node cannot be given to the build: {bad:?} holds a newline \
         or '=', which Nix's pre-build-hook protocol cannot express"
    )]
    MigNodeUnexpressible {
        /// The capability.
        capability: Capability,
        /// The path on its chain that cannot be said.
        bad: PathBuf,
    },
}

/// What is wrong with a CDI device node found on the host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NodeFault {
    /// Its chain cannot be followed within the roots.
    #[error("is unusable: {0}")]
    Unusable(ChainError),
    /// It is not a character device (the host path).
    #[error("({}) is not a character device", .0.display())]
    NotCharDevice(PathBuf),
    /// A path on its chain cannot be said in Nix's protocol.
    #[error(
        "cannot be given to the build: {0:?} holds a newline or '=', which Nix's pre-build-hook \
         protocol cannot express"
    )]
    Unexpressible(PathBuf),
}

impl ProblemKind {
    /// What to do about it, in one line.
    pub(crate) fn fix(&self) -> Cow<'_, str> {
        match self {
            ProblemKind::MissingDevice { fix, .. } | ProblemKind::RequiredPath { fix, .. } => {
                Cow::Borrowed(fix)
            }
            ProblemKind::DeviceUnexpressible { .. } => {
                "rename the device node (its udev rule)".into()
            }
            ProblemKind::NoDriver { .. } => "install the NVIDIA driver; on NixOS enable \
                hardware.graphics with the NVIDIA driver, elsewhere make sure ldconfig knows \
                libcuda.so.1"
                .into(),
            ProblemKind::StaleDriver(stale) => stale.fix().into(),
            ProblemKind::GpuCount(_) | ProblemKind::Lease(_) => {
                "see gpus_per_build in the README".into()
            }
            ProblemKind::Closure(_) => {
                "check that the path is valid in this Nix store (`nix-store --verify-path`)".into()
            }
            ProblemKind::ClosureEscapes { .. } => "a store path must not lead out of the store: \
                check the closure cache and the store (`nix-store --verify --check-contents`)"
                .into(),
            ProblemKind::NoLeaseHolder => {
                "run the hook as Nix's pre-build-hook with /proc mounted".into()
            }
            ProblemKind::Sysfs(_) => "run the hook as root on a host with /sys mounted (see \
                sysfs in docs/configuration.md)"
                .into(),
            ProblemKind::CdiLookup {
                error: LookupError::NotFound { .. },
                hint,
            } => match hint {
                Some(hint) => Cow::Borrowed(hint),
                None => "generate the spec (`nvidia-ctk cdi generate \
                    --output=/etc/cdi/nvidia.yaml`) or name a device it lists (`nvidia-ctk cdi \
                    list`)"
                    .into(),
            },
            ProblemKind::CdiLookup {
                error: LookupError::Conflict { .. },
                ..
            } => "remove one of the two specs, or move it to another of cdi_spec_dirs".into(),
            ProblemKind::CdiSpecNode { .. } => "fix the spec (`nvidia-ctk cdi generate`)".into(),
            ProblemKind::CdiNode { .. } => "load the driver and create its nodes \
                (`nvidia-modprobe`), or regenerate the spec (`nvidia-ctk cdi generate`)"
                .into(),
            ProblemKind::MigUnreadable(_) => "check the NVIDIA driver's MIG files (`nvidia-smi \
                mig -lgi`), or remove [rule.mig] from the rule"
                .into(),
            ProblemKind::MigNodeMissing { capability, .. }
            | ProblemKind::MigNodeChain { capability, .. } => create(capability).into(),
            ProblemKind::MigNodeWrong { capability, .. } => {
                format!("remove it, then {}", create(capability)).into()
            }
            ProblemKind::MigNodeUnexpressible { .. } => {
                "rename /dev/nvidia-caps (its udev rule)".into()
            }
        }
    }
}

/// How a MIG capability's node is made.
fn create(capability: &Capability) -> String {
    format!(
        "create it with `nvidia-modprobe -f {}` (at boot, for each instance)",
        capability.proc_path().display()
    )
}

/// `dirs`, joined by `, `.
fn joined(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each problem's one line (what, then its fix), as the hook prints it in its failure and
    /// `explain` in its problems: the texts these kinds replaced, unchanged.
    #[test]
    fn each_kind_says_what_is_wrong_and_its_fix() {
        let gi = Capability::Gi { gpu: 0, gi: 1 };
        let create = "create it with `nvidia-modprobe -f /proc/driver/nvidia/capabilities/gpu0/\
                      mig/gi1/access` (at boot, for each instance)";
        let link = || ChainError::Missing("/dev/x".into());
        for (kind, text) in [
            (
                ProblemKind::DeviceUnexpressible {
                    inside: "/dev/a\nb".into(),
                    glob: "/dev/a*".into(),
                    bad: "/dev/a\nb".into(),
                },
                "device /dev/a\nb (glob /dev/a*) cannot be given to the build: \"/dev/a\\nb\" \
                 holds a newline or '=', which Nix's pre-build-hook protocol cannot express: \
                 rename the device node (its udev rule)"
                    .to_owned(),
            ),
            (
                ProblemKind::NoDriver {
                    link: "/run/opengl-driver".into(),
                    library_dirs: vec!["/usr/lib".into(), "/lib".into()],
                },
                "no NVIDIA driver found (no /run/opengl-driver and no libcuda.so.1 in \
                 /etc/ld.so.cache or /usr/lib, /lib): install the NVIDIA driver; on NixOS \
                 enable hardware.graphics with the NVIDIA driver, elsewhere make sure ldconfig \
                 knows libcuda.so.1"
                    .to_owned(),
            ),
            (
                ProblemKind::ClosureEscapes {
                    member: "/nix/store/x".into(),
                    to: "/etc".into(),
                },
                "closure member /nix/store/x is a symlink to /etc, outside the store: a store \
                 path must not lead out of the store: check the closure cache and the store \
                 (`nix-store --verify --check-contents`)"
                    .to_owned(),
            ),
            (
                ProblemKind::NoLeaseHolder,
                "cannot read /proc/<parent>/stat to record who holds the GPU lease: run the \
                 hook as Nix's pre-build-hook with /proc mounted"
                    .to_owned(),
            ),
            (
                ProblemKind::Lease("busy".into()),
                "no GPU or MIG instance could be leased: busy: see gpus_per_build in the README"
                    .to_owned(),
            ),
            (
                ProblemKind::Sysfs("no".into()),
                "cannot give the build its read-only /sys: no: run the hook as root on a host \
                 with /sys mounted (see sysfs in docs/configuration.md)"
                    .to_owned(),
            ),
            (
                ProblemKind::CdiSpecNode {
                    device: "nvidia.com/gpu=0".into(),
                    why: "\"x\" is not an absolute path".into(),
                },
                "CDI nvidia.com/gpu=0: device node \"x\" is not an absolute path: fix the spec \
                 (`nvidia-ctk cdi generate`)"
                    .to_owned(),
            ),
            (
                ProblemKind::CdiNode {
                    device: "nvidia.com/gpu=0".into(),
                    inside: "/dev/nvidia0".into(),
                    fault: NodeFault::NotCharDevice("/host/dev/nvidia0".into()),
                },
                "CDI nvidia.com/gpu=0: device node /dev/nvidia0 (/host/dev/nvidia0) is not a \
                 character device: load the driver and create its nodes (`nvidia-modprobe`), \
                 or regenerate the spec (`nvidia-ctk cdi generate`)"
                    .to_owned(),
            ),
            (
                ProblemKind::CdiNode {
                    device: "d".into(),
                    inside: "/dev/x".into(),
                    fault: NodeFault::Unusable(link()),
                },
                "CDI d: device node /dev/x is unusable: /dev/x does not exist: load the driver \
                 and create its nodes (`nvidia-modprobe`), or regenerate the spec (`nvidia-ctk \
                 cdi generate`)"
                    .to_owned(),
            ),
            (
                ProblemKind::MigNodeMissing {
                    capability: gi,
                    inside: "/dev/nvidia-caps/nvidia-cap12".into(),
                },
                format!(
                    "the GPU instance nvidia0/gi1's device node /dev/nvidia-caps/nvidia-cap12 \
                     is missing: {create}"
                ),
            ),
            (
                ProblemKind::MigNodeWrong {
                    capability: gi,
                    inside: "/dev/nvidia-caps/nvidia-cap12".into(),
                    why: "a directory".into(),
                },
                format!(
                    "/dev/nvidia-caps/nvidia-cap12 is not the GPU instance nvidia0/gi1's device \
                     node: a directory: remove it, then {create}"
                ),
            ),
            (
                ProblemKind::MigNodeChain {
                    capability: gi,
                    inside: "/dev/x".into(),
                    error: link(),
                },
                format!("the GPU instance nvidia0/gi1's device node /dev/x: /dev/x does not exist: {create}"),
            ),
            (
                ProblemKind::MigNodeUnexpressible {
                    capability: gi,
                    bad: "/dev/nvidia-caps=".into(),
                },
                "the GPU instance nvidia0/gi1's device node cannot be given to the build: \
                 \"/dev/nvidia-caps=\" holds a newline or '=', which Nix's pre-build-hook \
                 protocol cannot express: rename /dev/nvidia-caps (its udev rule)"
                    .to_owned(),
            ),
        ] {
            assert_eq!(Problem::new("gpu", kind).to_string(), text);
        }
    }
}
