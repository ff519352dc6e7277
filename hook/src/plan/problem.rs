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
use std::path::PathBuf;

/// A reason the plan cannot serve the build: a required device or path is missing, or a
/// closure could not be computed. Each renders as one line with the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {}", .kind.fix())]
pub struct Problem {
    /// The rule or rules concerned.
    pub rule: RuleIds,
    /// What is wrong.
    pub(crate) kind: ProblemKind,
}

impl Problem {
    /// The problem `kind` of the rule(s) `rule`.
    pub(crate) fn new(rule: impl Into<RuleIds>, kind: ProblemKind) -> Problem {
        Problem {
            rule: rule.into(),
            kind,
        }
    }
}

/// The config rules a [`Problem`] concerns, by name: one rule, or every rule that matched the
/// build for a problem of the build as a whole. Shown, and written in `explain --json`, as the
/// names joined by `,`, as `explain` has always written them.
#[derive(Debug, Clone, Default, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join(","))]
pub struct RuleIds(Vec<String>);

impl From<&str> for RuleIds {
    fn from(name: &str) -> RuleIds {
        RuleIds(vec![name.to_owned()])
    }
}

impl From<&Vec<String>> for RuleIds {
    fn from(names: &Vec<String>) -> RuleIds {
        RuleIds(names.clone())
    }
}

/// As `explain --json` has always written a problem: `rule`, `what`, `fix`.
impl Serialize for Problem {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = s.serialize_struct("Problem", 3)?;
        out.serialize_field("rule", &self.rule.to_string())?;
        out.serialize_field("what", &self.kind.to_string())?;
        out.serialize_field("fix", &self.kind.fix())?;
        out.end()
    }
}

/// What stops a plan, one variant per cause. Display is the "what"; [`ProblemKind::fix`]
/// the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProblemKind {
    /// A required device glob matched nothing: the glob, and the rule's hint, else the glob's
    /// usual fix.
    #[error("required device {0} is missing")]
    MissingDevice(String, String),
    /// A required device's path cannot be said in Nix's protocol: the device as the build sees
    /// it, the glob that matched it, and the path on its chain that cannot be said.
    #[error(
        "device {inside} (glob {1}) cannot be given to the build: {2:?} holds a newline or '=', \
         which Nix's pre-build-hook protocol cannot express",
        inside = .0.display()
    )]
    DeviceUnexpressible(PathBuf, String, PathBuf),
    /// A required path cannot be followed: the path as the build sees it, why, and the rule's
    /// hint, else the path's usual fix.
    #[error("required path {inside} is unusable: {1}", inside = .0.display())]
    RequiredPath(PathBuf, ChainError, String),
    /// A required driver was not found: the driver link looked at, and the library
    /// directories looked in.
    #[error(
        "no NVIDIA driver found (no {} and no libcuda.so.1 in /etc/ld.so.cache or {})",
        .0.display(),
        .1.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NoDriver(PathBuf, Vec<PathBuf>),
    /// The user-space driver does not match the loaded kernel module.
    #[error("{0}")]
    StaleDriver(StaleDriver),
    /// The build's GPU count cannot be met.
    #[error("{0}")]
    GpuCount(GpuCountError),
    /// A store path's closure could not be had.
    #[error("{0}")]
    Closure(ClosureError),
    /// A closure member leads out of the store: the member, and where it leads.
    #[error(
        "closure member {} is a symlink to {}, outside the store",
        .0.display(),
        .1.display()
    )]
    ClosureEscapes(PathBuf, PathBuf),
    /// The hook's parent is not the Nix that runs the build (it does not read the hook's
    /// standard output), or cannot be read: no one would hold the lease.
    #[error(
        "the hook's parent is not a Nix reading its output, so no one would hold the GPU lease"
    )]
    NoLeaseHolder,
    /// No slot could be leased (the lease's one-line error).
    #[error("no GPU or MIG instance could be leased: {0}")]
    Lease(String),
    /// The build's read-only `/sys` could not be made (the tree's one-line error).
    #[error("cannot give the build its read-only /sys: {0}")]
    Sysfs(String),
    /// A named CDI device is not in the specs, or two specs define it: why, and the rule's
    /// hint for a device not found.
    #[error("{0}")]
    CdiLookup(LookupError, Option<String>),
    /// A CDI spec's device node is not a path the hook can use: the CDI device, and what is
    /// wrong with the spec's path.
    #[error("CDI {0}: device node {1}")]
    CdiSpecNode(String, String),
    /// A CDI device node on the host cannot be given to the build: the CDI device, the node
    /// as the build sees it, and what is wrong with it.
    #[error("CDI {0}: device node {inside} {2}", inside = .1.display())]
    CdiNode(String, PathBuf, NodeFault),
    /// No GPU here, busy or not, satisfies the build's `cuda-sm-*` features: the features no
    /// GPU meets, and the GPUs, `nvidia1 9.0 at 0000:02:00.0, …`.
    #[error("no GPU here satisfies {unmet} (this host has {1})", unmet = .0.join(", "))]
    FeaturesUnmet(Vec<String>, String),
    /// No set of the build's count of GPUs satisfies its `cuda-sm-*` features together: the
    /// build's GPU count, its `cuda-sm-*` features, and the GPUs, as for
    /// [`ProblemKind::FeaturesUnmet`].
    #[error(
        "no {0} of this host's GPUs together satisfy {features} (this host has {2})",
        features = .1.join(", ")
    )]
    FeaturesUnmetTogether(usize, Vec<String>, String),
    /// A Jetson's GPU (`tegra_capability`) does not satisfy the build's features: the
    /// configured capability, and the features it does not meet.
    #[error(
        "this Jetson's GPU ({0}, tegra_capability) does not satisfy {unmet}",
        unmet = .1.join(", ")
    )]
    TegraUnmet(String, Vec<String>),
    /// The MIG instances cannot be read.
    #[error("the MIG instances cannot be read: {0}")]
    MigUnreadable(MigScanError),
    /// A MIG capability's device node is missing: the capability, and its node as the build
    /// sees it.
    #[error("the {0}'s device node {inside} is missing", inside = .1.display())]
    MigNodeMissing(Capability, PathBuf),
    /// Something else is where a MIG capability's node should be: the capability, its node as
    /// the build sees it, and what is there instead.
    #[error("{inside} is not the {0}'s device node: {2}", inside = .1.display())]
    MigNodeWrong(Capability, PathBuf, String),
    /// A MIG capability's node cannot be followed within the roots: the capability, its node
    /// as the build sees it, and why.
    #[error("the {0}'s device node {inside}: {2}", inside = .1.display())]
    MigNodeChain(Capability, PathBuf, ChainError),
    /// A MIG capability's node cannot be said in Nix's protocol: the capability, and the path
    /// on its chain that cannot be said.
    #[error(
        "the {0}'s device node cannot be given to the build: {1:?} holds a newline or '=', \
         which Nix's pre-build-hook protocol cannot express"
    )]
    MigNodeUnexpressible(Capability, PathBuf),
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
            ProblemKind::MissingDevice(_, fix) | ProblemKind::RequiredPath(_, _, fix) => {
                Cow::Borrowed(fix)
            }
            ProblemKind::DeviceUnexpressible(..) => "rename the device node (its udev rule)".into(),
            ProblemKind::NoDriver(..) => "install the NVIDIA driver; on NixOS enable \
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
            ProblemKind::ClosureEscapes(..) => "a store path must not lead out of the store: \
                check the closure cache and the store (`nix-store --verify --check-contents`)"
                .into(),
            ProblemKind::NoLeaseHolder => {
                "run the hook as Nix's pre-build-hook with /proc mounted; a wrapper script must \
                 `exec` it"
                    .into()
            }
            ProblemKind::Sysfs(_) => "run the hook as root on a host with /sys mounted (see \
                sysfs in docs/configuration.md)"
                .into(),
            ProblemKind::CdiLookup(LookupError::NotFound(..), hint) => match hint {
                Some(hint) => Cow::Borrowed(hint),
                None => "generate the spec (`nvidia-ctk cdi generate \
                    --output=/etc/cdi/nvidia.yaml`) or name a device it lists (`nvidia-ctk cdi \
                    list`)"
                    .into(),
            },
            ProblemKind::CdiLookup(LookupError::Conflict(..), _) => {
                "remove one of the two specs, or move it to another of cdi_spec_dirs".into()
            }
            ProblemKind::CdiSpecNode(..) => "fix the spec (`nvidia-ctk cdi generate`)".into(),
            ProblemKind::CdiNode(..) => "load the driver and create its nodes \
                (`nvidia-modprobe`), or regenerate the spec (`nvidia-ctk cdi generate`)"
                .into(),
            ProblemKind::FeaturesUnmet(..) => "build it on a builder whose GPUs do: this \
                builder advertises features its GPUs lack (compare its system-features with \
                `cuda-sandbox-check features`)"
                .into(),
            ProblemKind::FeaturesUnmetTogether(..) => "ask for more GPUs (the derivation's \
                cudaSandboxGpus, or gpus_per_build) or build it where fewer GPUs satisfy it"
                .into(),
            ProblemKind::TegraUnmet(..) => "build it on a builder whose GPU does \
                (`cuda-sandbox-check features` prints what a builder may advertise)"
                .into(),
            ProblemKind::MigUnreadable(_) => "check the NVIDIA driver's MIG files (`nvidia-smi \
                mig -lgi`), or remove [rule.mig] from the rule"
                .into(),
            ProblemKind::MigNodeMissing(capability, _)
            | ProblemKind::MigNodeChain(capability, ..) => create(capability).into(),
            ProblemKind::MigNodeWrong(capability, ..) => {
                format!("remove it, then {}", create(capability)).into()
            }
            ProblemKind::MigNodeUnexpressible(..) => {
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
                ProblemKind::DeviceUnexpressible(
                    "/dev/a\nb".into(),
                    "/dev/a*".into(),
                    "/dev/a\nb".into(),
                ),
                "device /dev/a\nb (glob /dev/a*) cannot be given to the build: \"/dev/a\\nb\" \
                 holds a newline or '=', which Nix's pre-build-hook protocol cannot express: \
                 rename the device node (its udev rule)"
                    .to_owned(),
            ),
            (
                ProblemKind::NoDriver(
                    "/run/opengl-driver".into(),
                    vec!["/usr/lib".into(), "/lib".into()],
                ),
                "no NVIDIA driver found (no /run/opengl-driver and no libcuda.so.1 in \
                 /etc/ld.so.cache or /usr/lib, /lib): install the NVIDIA driver; on NixOS \
                 enable hardware.graphics with the NVIDIA driver, elsewhere make sure ldconfig \
                 knows libcuda.so.1"
                    .to_owned(),
            ),
            (
                ProblemKind::ClosureEscapes("/nix/store/x".into(), "/etc".into()),
                "closure member /nix/store/x is a symlink to /etc, outside the store: a store \
                 path must not lead out of the store: check the closure cache and the store \
                 (`nix-store --verify --check-contents`)"
                    .to_owned(),
            ),
            (
                ProblemKind::FeaturesUnmet(
                    vec!["cuda-sm-100a".into()],
                    "nvidia0 8.9 at 0000:01:00.0, nvidia1 9.0 at 0000:02:00.0".into(),
                ),
                "no GPU here satisfies cuda-sm-100a (this host has nvidia0 8.9 at 0000:01:00.0, \
                 nvidia1 9.0 at 0000:02:00.0): build it on a builder whose GPUs do: this builder \
                 advertises features its GPUs lack (compare its system-features with \
                 `cuda-sandbox-check features`)"
                    .to_owned(),
            ),
            (
                ProblemKind::FeaturesUnmetTogether(
                    1,
                    vec!["cuda-sm-90a".into(), "cuda-sm-100f".into()],
                    "nvidia0 9.0 at 0000:01:00.0, nvidia1 10.0 at 0000:02:00.0".into(),
                ),
                "no 1 of this host's GPUs together satisfy cuda-sm-90a, cuda-sm-100f (this host \
                 has nvidia0 9.0 at 0000:01:00.0, nvidia1 10.0 at 0000:02:00.0): ask for more \
                 GPUs (the derivation's cudaSandboxGpus, or gpus_per_build) or build it where \
                 fewer GPUs satisfy it"
                    .to_owned(),
            ),
            (
                ProblemKind::TegraUnmet("8.7".into(), vec!["cuda-sm-90".into()]),
                "this Jetson's GPU (8.7, tegra_capability) does not satisfy cuda-sm-90: build it \
                 on a builder whose GPU does (`cuda-sandbox-check features` prints what a \
                 builder may advertise)"
                    .to_owned(),
            ),
            (
                ProblemKind::NoLeaseHolder,
                "the hook's parent is not a Nix reading its output, so no one would hold the \
                 GPU lease: run the hook as Nix's pre-build-hook with /proc mounted; a wrapper \
                 script must `exec` it"
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
                ProblemKind::CdiSpecNode(
                    "nvidia.com/gpu=0".into(),
                    "\"x\" is not an absolute path".into(),
                ),
                "CDI nvidia.com/gpu=0: device node \"x\" is not an absolute path: fix the spec \
                 (`nvidia-ctk cdi generate`)"
                    .to_owned(),
            ),
            (
                ProblemKind::CdiNode(
                    "nvidia.com/gpu=0".into(),
                    "/dev/nvidia0".into(),
                    NodeFault::NotCharDevice("/host/dev/nvidia0".into()),
                ),
                "CDI nvidia.com/gpu=0: device node /dev/nvidia0 (/host/dev/nvidia0) is not a \
                 character device: load the driver and create its nodes (`nvidia-modprobe`), \
                 or regenerate the spec (`nvidia-ctk cdi generate`)"
                    .to_owned(),
            ),
            (
                ProblemKind::CdiNode("d".into(), "/dev/x".into(), NodeFault::Unusable(link())),
                "CDI d: device node /dev/x is unusable: /dev/x does not exist: load the driver \
                 and create its nodes (`nvidia-modprobe`), or regenerate the spec (`nvidia-ctk \
                 cdi generate`)"
                    .to_owned(),
            ),
            (
                ProblemKind::MigNodeMissing(gi, "/dev/nvidia-caps/nvidia-cap12".into()),
                format!(
                    "the GPU instance nvidia0/gi1's device node /dev/nvidia-caps/nvidia-cap12 \
                     is missing: {create}"
                ),
            ),
            (
                ProblemKind::MigNodeWrong(
                    gi,
                    "/dev/nvidia-caps/nvidia-cap12".into(),
                    "a directory".into(),
                ),
                format!(
                    "/dev/nvidia-caps/nvidia-cap12 is not the GPU instance nvidia0/gi1's device \
                     node: a directory: remove it, then {create}"
                ),
            ),
            (
                ProblemKind::MigNodeChain(gi, "/dev/x".into(), link()),
                format!("the GPU instance nvidia0/gi1's device node /dev/x: /dev/x does not exist: {create}"),
            ),
            (
                ProblemKind::MigNodeUnexpressible(gi, "/dev/nvidia-caps=".into()),
                "the GPU instance nvidia0/gi1's device node cannot be given to the build: \
                 \"/dev/nvidia-caps=\" holds a newline or '=', which Nix's pre-build-hook \
                 protocol cannot express: rename /dev/nvidia-caps (its udev rule)"
                    .to_owned(),
            ),
        ] {
            assert_eq!(Problem::new("gpu", kind).to_string(), text);
        }
    }

    /// A problem of the build as a whole names every rule that matched, as typed ids; the
    /// text and `explain --json` write them joined by `,`, as before the ids were typed.
    #[test]
    fn a_problem_of_several_rules_keeps_each_rule_and_writes_them_joined() {
        let rules = vec!["gpu".to_owned(), "nvidia".to_owned()];
        let kind = ProblemKind::Sysfs("cannot read /sys".into());
        let problem = Problem::new(&rules, kind.clone());
        assert_eq!(problem.rule.0, ["gpu", "nvidia"]);
        assert_eq!(problem.rule.to_string(), "gpu,nvidia");
        let json = serde_json::to_value(&problem).unwrap();
        assert_eq!(json["rule"], "gpu,nvidia");
        assert_eq!(Problem::new("gpu", kind).rule.0, ["gpu"]);
    }
}
