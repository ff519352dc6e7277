//! The CDI planner's typed reasons: what a CDI exposure is ([`CdiItem`]), and each edit of a
//! spec a pre-build hook cannot carry out ([`CdiEdit`]), with why.

use serde::Serialize;

/// What a CDI exposure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum CdiItem {
    /// One of the device's nodes.
    #[error("device node")]
    DeviceNode,
    /// A mount, at its container path.
    #[error("mount")]
    Mount,
    /// A library mount, at the driver link.
    #[error("library at the driver link")]
    Library,
    /// A data file (ICD file, …) mount, under the driver link's `share`.
    #[error("data file at the driver link")]
    DataFile,
    /// A link the `create-symlinks` hook would make, at the driver link.
    #[error("create-symlinks link at the driver link")]
    Link,
}

/// An edit of a CDI spec that a pre-build hook cannot carry out: it can only add paths to the
/// sandbox, before the sandbox exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "edit", rename_all = "kebab-case")]
pub(crate) enum CdiEdit {
    /// An environment variable.
    #[error("env {value}")]
    Env {
        /// `NAME=value`.
        value: String,
    },
    /// An OCI hook.
    #[error("{hook_name} hook {program}")]
    Hook {
        /// When it would run.
        hook_name: String,
        /// The program and its first argument (the toolkit's subcommand).
        program: String,
    },
    /// Supplementary groups.
    #[error("additionalGids {gids:?}")]
    AdditionalGids {
        /// The groups.
        gids: Vec<u32>,
    },
    /// Options of a mount (the mount itself is planned apart).
    #[error("mount options {} of {container_path}", .options.join(","))]
    MountOptions {
        /// The mount's container path.
        container_path: String,
        /// The options.
        options: Vec<String>,
    },
    /// A mount of a filesystem type other than a bind mount.
    #[error("{kind} mount at {container_path}")]
    MountType {
        /// The mount's container path.
        container_path: String,
        /// Its type.
        kind: String,
    },
    /// Owner, mode or cgroup permissions of a device node.
    #[error("owner/mode/permissions of {path}")]
    NodeAttributes {
        /// The node's path.
        path: String,
    },
    /// A link of the `create-symlinks` hook outside the library directories.
    #[error("link {link} -> {target}")]
    Link {
        /// The link.
        link: String,
        /// Its target.
        target: String,
    },
    /// An edit the hook does not know (`intelRdt`, `netDevices`, …).
    #[error("{key}")]
    Other {
        /// Its key.
        key: String,
    },
}

impl CdiEdit {
    /// Why the hook does not carry it out.
    pub(crate) fn why(&self) -> &'static str {
        match self {
            CdiEdit::Env { .. } => {
                "a pre-build hook can only add paths; set the variable in the derivation"
            }
            CdiEdit::Hook { program, .. } if program.ends_with(" update-ldcache") => {
                "not needed: the spec's libraries are bound at the driver link, which Nixpkgs \
                 binaries search"
            }
            CdiEdit::Hook { program, .. } if program.ends_with(" enable-cuda-compat") => {
                "the hook chooses between the host driver and cuda_compat itself"
            }
            CdiEdit::Hook { .. } => {
                "a pre-build hook runs before the sandbox exists and cannot run hooks in it"
            }
            CdiEdit::AdditionalGids { .. } => "the build runs as its Nix build user and groups",
            CdiEdit::MountOptions { .. } => "Nix binds extra sandbox paths with its own options",
            CdiEdit::MountType { .. } => "Nix's sandbox paths are bind mounts only",
            CdiEdit::NodeAttributes { .. } => {
                "Nix binds the host's node: its owner, mode and permissions stay the host's"
            }
            CdiEdit::Link { .. } => "builds do not look in FHS directories",
            CdiEdit::Other { .. } => "an edit the hook does not know",
        }
    }
}

/// A CDI edit that was not carried out, and for which device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct NotCarriedOut {
    /// The rule.
    pub rule: String,
    /// The CDI device.
    pub device: String,
    /// With leases: the GPU whose device lists the edit; `None`: every build's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// The edit.
    pub edit: CdiEdit,
    /// Why not.
    pub why: &'static str,
}
