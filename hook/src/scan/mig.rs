//! The MIG source: the instances the driver publishes under the host root's `/proc`
//! ([`crate::mig`]), each with its capability nodes checked under the host root's `/dev`.
//!
//! Every file is opened only once trusted ([`crate::trust::open_file`]: root-owned, not
//! writable by group or others, no symlink on the way to elsewhere) and read to a bound;
//! directories are listed only once their path is trusted, to a bound of entries. A node is
//! present only when it is a character device of the `nvidia-caps` major and the capability's
//! minor. Nothing is written.

use super::Recorder;
use crate::config::{Config, MigConfig};
use crate::mig::formats::{self, FormatError};
use crate::mig::{self, Capability, InstanceId};
use crate::symlinks::Space;
use crate::trust;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The most entries looked at in one directory of the capability tree (the driver publishes
/// at most 32 GPUs, 15 GPU instances and 8 compute instances each).
pub(crate) const ENTRIES_MAX: usize = 4096;

/// What was found for a rule's MIG source: the instances (none where MIG is off), or why they
/// could not be read.
pub(crate) type MigView = Result<MigHost, MigScanError>;

/// The MIG instances of the host and the administration capabilities the source names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MigHost {
    /// Every compute instance, in order, with its GPU instance's node and its own.
    pub instances: Vec<InstanceFound>,
    /// The `config` and `monitor` capabilities, when the source names them.
    pub admin: Vec<CapNode>,
}

/// One compute instance and the two nodes a process needs to use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InstanceFound {
    /// Its GPU instance's capability node.
    pub gi: CapNode,
    /// Its own capability node.
    pub ci: CapNode,
}

/// A capability and its device node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CapNode {
    /// The capability.
    pub capability: Capability,
    /// Its minor (`DeviceFileMinor`).
    pub minor: u32,
    /// What is at `/dev/nvidia-caps/nvidia-cap<minor>` under the host root.
    pub node: NodeState,
}

impl CapNode {
    /// The node as the build sees it.
    pub(crate) fn inside(&self) -> PathBuf {
        mig::node_path(self.minor)
    }
}

/// What the capability's device node is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeState {
    /// The right character device.
    Present,
    /// Nothing there (`nvidia-modprobe -f` creates it).
    Missing,
    /// Something else: why it is not the capability's node.
    Wrong(String),
}

/// Why the MIG files could not be read; one line naming the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MigScanError {
    /// A file or directory (its host path) failed the trust check or could not be read, and
    /// why.
    #[error("cannot read {path}: {1}", path = .0.display())]
    Read(PathBuf, String),
    /// A file (its host path) is not of the documented form, and what is wrong.
    #[error("{path}: {1}", path = .0.display())]
    Format(PathBuf, FormatError),
    /// A capability file and `mig-minors` disagree on its minor: the capability, its file,
    /// the minor its file gives and the minor `mig-minors` gives.
    #[error(
        "{0}: {path} says minor {2}, {minors} says {3}",
        path = .1.display(),
        minors = mig::MIG_MINORS
    )]
    Mismatch(Capability, PathBuf, u32, u32),
    /// Instances exist but `/proc/devices` lists no `nvidia-caps` major.
    #[error(
        "MIG instances exist but {} lists no nvidia-caps major",
        mig::PROC_DEVICES
    )]
    NoMajor,
    /// A directory holds more entries than the driver ever publishes.
    #[error("{} holds more than {ENTRIES_MAX} entries", .0.display())]
    TooMany(PathBuf),
}

/// Scans the MIG source `source` under `config`'s host root: the instances the driver
/// publishes and the administration capabilities the rule names, checked against
/// `mig-minors`, with the state of each capability's node (each present node followed in `fs`
/// for the planner).
pub(crate) fn scan(source: &MigConfig, config: &Config, fs: &Recorder) -> MigView {
    let rooted = config.space();
    let minors = walk_capabilities(source, rooted)?;
    if minors.is_empty() {
        return Ok(MigHost::default());
    }
    // `mig-minors` must not list a capability with another minor than its `access` file
    // gives (a capability it does not list is not judged).
    let listed_file = rooted.outside(Path::new(mig::MIG_MINORS));
    let listed = listed_file
        .exists()
        .then(|| read_parsed(&listed_file, formats::MIG_MINORS_MAX, formats::mig_minors))
        .transpose()?;
    for (cap, minor) in &minors {
        if let Some(l) = listed.as_ref().and_then(|l| l.get(cap)) {
            if l != minor {
                let path = rooted.outside(&cap.proc_path());
                return Err(MigScanError::Mismatch(*cap, path, *minor, *l));
            }
        }
    }
    let devices = rooted.outside(Path::new(mig::PROC_DEVICES));
    let major = read_parsed(&devices, formats::PROC_DEVICES_MAX, formats::caps_major)?
        .ok_or(MigScanError::NoMajor)?;
    let mut host = MigHost::default();
    // The walk gives each GPU instance before its compute instances.
    let mut gi = None;
    for (capability, minor) in minors {
        let inside = mig::node_path(minor);
        let outside = rooted.outside(&inside);
        let state = node_state(&outside, major, minor);
        if state == NodeState::Present {
            fs.follow(&inside, &outside, rooted);
        }
        let node = CapNode {
            capability,
            minor,
            node: state,
        };
        match (capability, &gi) {
            (Capability::Gi { .. }, _) => gi = Some(node),
            (Capability::Ci(_), Some(gi)) => host.instances.push(InstanceFound {
                gi: gi.clone(),
                ci: node,
            }),
            (Capability::Ci(_), None) => {}
            (Capability::Config | Capability::Monitor, _) => host.admin.push(node),
        }
    }
    Ok(host)
}

/// The capability files under the driver's capabilities directory (`rooted`): each GPU
/// instance followed by its compute instances, then the administration capabilities the rule
/// names, each with the minor its `access` file gives. Nothing when the directory is absent.
fn walk_capabilities(
    source: &MigConfig,
    rooted: Space<'_>,
) -> Result<Vec<(Capability, u32)>, MigScanError> {
    // A capability and the `DeviceFileMinor` its file gives.
    let with_minor = |cap: Capability| {
        let path = rooted.outside(&cap.proc_path());
        read_parsed(&path, formats::ACCESS_MAX, formats::access_minor).map(|minor| (cap, minor))
    };
    let caps_dir = rooted.outside(Path::new(mig::CAPABILITIES_DIR));
    let mut walked = Vec::new();
    if !caps_dir.exists() {
        return Ok(walked);
    }
    for gpu in numbered(&caps_dir, "gpu")? {
        let mig_dir = caps_dir.join(format!("gpu{gpu}/mig"));
        if !mig_dir.exists() {
            continue;
        }
        for gi in numbered(&mig_dir, "gi")? {
            walked.push(with_minor(Capability::Gi { gpu, gi })?);
            for ci in numbered(&mig_dir.join(format!("gi{gi}")), "ci")? {
                walked.push(with_minor(Capability::Ci(InstanceId { gpu, gi, ci }))?);
            }
        }
    }
    let named = [
        (source.config, Capability::Config),
        (source.monitor, Capability::Monitor),
    ];
    for (_, cap) in named.iter().filter(|(named, _)| *named) {
        walked.push(with_minor(*cap)?);
    }
    Ok(walked)
}

/// The numbers N of the entries `<prefix>N` of the directory `dir` (trusted first, as a
/// directory to list: [`trust::listed_dir`]), sorted.
fn numbered(dir: &Path, prefix: &str) -> Result<Vec<u32>, MigScanError> {
    let read_err = |why: String| MigScanError::Read(dir.to_path_buf(), why);
    let listed = trust::listed_dir(dir).map_err(|e| read_err(e.to_string()))?;
    let entries = std::fs::read_dir(listed).map_err(|e| read_err(e.to_string()))?;
    let mut found = Vec::new();
    for (i, entry) in entries.enumerate() {
        if i >= ENTRIES_MAX {
            return Err(MigScanError::TooMany(dir.to_path_buf()));
        }
        let name = entry.map_err(|e| read_err(e.to_string()))?.file_name();
        if let Some(n) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(formats::number)
        {
            found.push(n);
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// The file at `path`, opened once trusted and read to at most `limit` + 1 bytes (so that a
/// larger one is caught by the parser's bound), parsed by `parse`. `/proc` files report size
/// 0, so the size is not asked.
fn read_parsed<T>(
    path: &Path,
    limit: u64,
    parse: fn(&[u8]) -> Result<T, FormatError>,
) -> Result<T, MigScanError> {
    let bytes = super::read_trusted(path, limit)
        .map_err(|why| MigScanError::Read(path.to_path_buf(), why))?;
    parse(&bytes).map_err(|error| MigScanError::Format(path.to_path_buf(), error))
}

/// Whether `outside` is the character device `major`:`minor` (no symlink followed).
fn node_state(outside: &Path, major: u32, minor: u32) -> NodeState {
    let meta = match std::fs::symlink_metadata(outside) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return NodeState::Missing,
        Err(e) => return NodeState::Wrong(e.to_string()),
    };
    if !meta.file_type().is_char_device() {
        return NodeState::Wrong("not a character device".to_string());
    }
    let rdev = meta.rdev();
    let (got_major, got_minor) = (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev));
    if (got_major, got_minor) != (u64::from(major), u64::from(minor)) {
        return NodeState::Wrong(format!(
            "device {got_major}:{got_minor}, not nvidia-caps {major}:{minor}"
        ));
    }
    NodeState::Present
}
