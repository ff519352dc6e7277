//! Something a plan considered and left out: one [`Skipped`] per cause, whose Display is the
//! one line `explain` shows (and `explain --json` writes as `why`).

use crate::cdi::load::SpecError;
use crate::closure::ClosureError;
use crate::config::Platform;
use crate::discover::compat::CompatError;
use crate::scan::devices::GlobError;
use crate::symlinks::ChainError;
use crate::sysfs::drm::DrmError;
use serde::Serialize;
use std::path::PathBuf;

/// Something considered and left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Skip {
    /// The path (or glob) concerned.
    pub path: String,
    /// Why it was left out.
    #[serde(serialize_with = "super::as_text")]
    pub why: Skipped,
}

impl Skip {
    /// `path` left out for `why`.
    pub(crate) fn new(path: impl std::fmt::Display, why: Skipped) -> Skip {
        Skip {
            path: path.to_string(),
            why,
        }
    }
}

/// Why a build under leases does not get a DRM node (besides its being another GPU's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DrmLeft {
    /// Its GPU cannot be told.
    #[error("whose GPU cannot be told ({0})")]
    Unmapped(DrmError),
    /// Of the GPU whose MIG instance the build is leased.
    #[error(
        "of nvidia{0}, whose MIG instance this build is leased: the node opens the whole GPU, \
         which the other instances' builds share, and CUDA does not use it"
    )]
    OfMigGpu(u32),
}

/// Why something was left out of a plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Skipped {
    /// A device glob for another kind of host: the kind it is for, and this host's.
    #[error("only on {} hosts; this one is {}", platform_name(*.0), platform_name(*.1))]
    OtherPlatform(Platform, Platform),
    /// An optional device glob matched nothing.
    #[error("optional device glob matched nothing")]
    NothingMatched,
    /// A glob, or an entry it reached, gave no path.
    #[error("{0}")]
    Glob(GlobError),
    /// A MIG capability node matched by a wildcard.
    #[error(
        "a MIG capability node: only [rule.mig] exposes these (each build its own instance's), \
         or a device glob naming the node itself"
    )]
    MigCapabilityNode,
    /// A matched device's chain cannot be followed within the roots.
    #[error("{0}")]
    DeviceChain(ChainError),
    /// A matched device is neither a character device nor a directory.
    #[error("not a character device or directory")]
    NotDevice,
    /// An optional device whose path Nix's protocol cannot say.
    #[error(
        "optional, and its path cannot be expressed in Nix's pre-build-hook protocol (newline or \
         '=')"
    )]
    Unexpressible,
    /// An optional path that cannot be followed.
    #[error("optional: {0}")]
    OptionalPath(ChainError),
    /// An entry exposed where another, with another host path, already is.
    #[error("conflicts with {} already exposed there", .0.display())]
    Conflicts(PathBuf),
    /// A build's `cuda-sm-*` features without a usable GPU inventory: they select nothing.
    /// The features, comma-separated, and why there is no inventory, in one line.
    #[error(
        "{0} select no GPU: no GPU inventory ({1}); the build gets GPUs as though it required no \
         cuda-sm-* feature"
    )]
    NoInventory(String, String),
    /// `cudaSandboxGpus` without `gpus_per_build`.
    #[error("ignored: gpus_per_build = 0 gives every GPU to every build")]
    GpusIgnored,
    /// A note of the host library scan (`/etc/ld.so.cache`), as it wrote it.
    #[error("{0}")]
    HostLibraries(String),
    /// A host driver library the compat driver replaces.
    #[error("replaced by the compat driver's library")]
    ReplacedByCompat,
    /// No driver, and none required.
    #[error("no NVIDIA driver found (optional)")]
    NoDriver,
    /// A compat directory without a compat libcuda.
    #[error("compat directory without a libcuda.so.*")]
    CompatWithoutLibcuda,
    /// A compat directory that cannot be looked at.
    #[error("compat driver unreadable: {0}")]
    CompatUnreadable(CompatError),
    /// A closure only root may compute (`explain` as another user).
    #[error("closure not shown: {0}; run explain as root to see it")]
    ClosureNotShown(ClosureError),
    /// No GPU is free now (`explain`): `lease_wait_seconds`, and the lease's one line.
    #[error("none free now, a build would wait up to {0} s: {1}")]
    NoneFree(u64, String),
    /// Another build's GPU or MIG instance.
    #[error(
        "{}: {} {} only ({count} of {total} {}; gpus_per_build = {gpus_per_build})",
        if *.mig { "another build's MIG instance" } else { "another build's GPU" },
        if *.leased { "this build is leased" } else { "a build now would be leased" },
        .given.join(", "),
        if *.any_mig { "GPUs and MIG instances" } else { "GPUs" }
    )]
    NotLeased {
        /// Whether it is a MIG instance (else a GPU).
        mig: bool,
        /// Whether the lease was taken (else previewed).
        leased: bool,
        /// The slots this build gets.
        given: Vec<String>,
        /// How many it needs.
        count: usize,
        /// How many there are.
        total: usize,
        /// Whether any of them is a MIG instance.
        any_mig: bool,
        /// `gpus_per_build`.
        gpus_per_build: u32,
    },
    /// With leases: a DRM node the build does not get: why, and `gpus_per_build`.
    #[error(
        "a DRM node {0}; with gpus_per_build = {1} a build gets only the DRM nodes of the GPUs \
         it is leased whole"
    )]
    DrmNode(DrmLeft, u32),
    /// A GPU's PCI device cannot be given (its one line).
    #[error("a GPU's PCI device is not given: {0}")]
    PciDevice(String),
    /// The `/sys` tree is not made in this mode.
    #[error("{0}")]
    NoSysfsTree(&'static str),
    /// A CDI spec directory or file that was not used.
    #[error("{0}")]
    CdiSpec(SpecError),
    /// A CDI node no single-GPU device lists, with leases on: the CDI device, its spec, and
    /// `gpus_per_build`.
    #[error(
        "CDI {0}: no device of {spec} for one GPU lists this node, and with gpus_per_build = {2} \
         a build gets only its leased GPUs' devices",
        spec = .1.display()
    )]
    CdiUnowned(String, PathBuf, u32),
    /// A CDI mount whose paths cannot be used: the CDI device, and what is wrong with them.
    #[error("CDI {0}: {1}")]
    CdiMountPath(String, String),
    /// A CDI mount of the host's C/C++ runtime (the CDI device).
    #[error(
        "CDI {0}: the host's C/C++ runtime never enters the sandbox (Nix's glibc and libstdc++ \
         must be the ones loaded)"
    )]
    CdiHostRuntime(String),
    /// A CDI mount of an FHS program: the CDI device, and the program's directory.
    #[error(
        "CDI {0}: an FHS program; builds do not look in {dir} and a program built for the \
         host's glibc cannot run against Nix's (use the Nixpkgs package)",
        dir = .1.display()
    )]
    CdiFhsProgram(String, PathBuf),
    /// A CDI library mount where the driver link is exposed: the CDI device, and the link.
    #[error("CDI {0}: the driver link {link} is exposed, with the driver behind it", link = .1.display())]
    CdiDriverLink(String, PathBuf),
}

/// How a kind of host is named.
fn platform_name(p: Platform) -> &'static str {
    match p {
        Platform::Tegra => "Tegra (Jetson)",
        Platform::Discrete => "discrete-GPU",
    }
}

#[cfg(test)]
mod tests {
    use super::Skipped;

    /// The lines `explain` shows for the skips that carry data, as their format strings wrote
    /// them before they were typed (the fixed ones are pinned in plan/tests.rs).
    #[test]
    fn each_skip_says_why_in_one_line() {
        for (why, text) in [
            (
                Skipped::NotLeased {
                    mig: false,
                    leased: true,
                    given: vec!["nvidia1".into()],
                    count: 1,
                    total: 2,
                    any_mig: false,
                    gpus_per_build: 1,
                },
                "another build's GPU: this build is leased nvidia1 only (1 of 2 GPUs; \
                 gpus_per_build = 1)",
            ),
            (
                Skipped::NotLeased {
                    mig: true,
                    leased: false,
                    given: vec!["nvidia0".into(), "nvidia1".into()],
                    count: 2,
                    total: 3,
                    any_mig: true,
                    gpus_per_build: 2,
                },
                "another build's MIG instance: a build now would be leased nvidia0, nvidia1 \
                 only (2 of 3 GPUs and MIG instances; gpus_per_build = 2)",
            ),
            (
                Skipped::NoInventory("cuda-sm-90a".into(), "/run/x/inventory.json: gone".into()),
                "cuda-sm-90a select no GPU: no GPU inventory (/run/x/inventory.json: gone); the \
                 build gets GPUs as though it required no cuda-sm-* feature",
            ),
            (
                Skipped::NoneFree(600, "all 1 GPUs are leased".into()),
                "none free now, a build would wait up to 600 s: all 1 GPUs are leased",
            ),
            (
                Skipped::CdiUnowned(
                    "nvidia.com/gpu=all".into(),
                    "/etc/cdi/nvidia.yaml".into(),
                    1,
                ),
                "CDI nvidia.com/gpu=all: no device of /etc/cdi/nvidia.yaml for one GPU lists \
                 this node, and with gpus_per_build = 1 a build gets only its leased GPUs' \
                 devices",
            ),
            (
                Skipped::CdiFhsProgram("d".into(), "/usr/bin".into()),
                "CDI d: an FHS program; builds do not look in /usr/bin and a program built for \
                 the host's glibc cannot run against Nix's (use the Nixpkgs package)",
            ),
            (
                Skipped::CdiDriverLink("d".into(), "/run/opengl-driver".into()),
                "CDI d: the driver link /run/opengl-driver is exposed, with the driver behind it",
            ),
            (
                Skipped::CdiHostRuntime("d".into()),
                "CDI d: the host's C/C++ runtime never enters the sandbox (Nix's glibc and \
                 libstdc++ must be the ones loaded)",
            ),
            (
                Skipped::MigCapabilityNode,
                "a MIG capability node: only [rule.mig] exposes these (each build its own \
                 instance's), or a device glob naming the node itself",
            ),
            (
                Skipped::Unexpressible,
                "optional, and its path cannot be expressed in Nix's pre-build-hook protocol \
                 (newline or '=')",
            ),
        ] {
            assert_eq!(why.to_string(), text);
        }
    }
}
