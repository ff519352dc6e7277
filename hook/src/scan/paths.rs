//! The path sources: a rule's host paths (the same path inside, looked up under the host
//! root) and mounts (a host path at another inside path), each with the chain from it
//! recorded, and with `follow_entry_symlinks` the links directly inside the directory. The
//! planner is [`crate::plan`]'s `paths` module.

use super::Recorder;
use crate::config::{HostPath, Mount};
use crate::symlinks::{self, Lookup, Node, Space};
use std::path::{Path, PathBuf};

/// The most entries of one directory that `follow_entry_symlinks` looks at: a bound on the
/// work a directory anyone filled can cause.
pub(crate) const ENTRY_SYMLINKS_MAX: usize = 4096;

/// Which kind of configured path a [`PathView`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathOrigin {
    /// A `[[rule.path]]`: `outside` is `inside` under the host root.
    HostPath,
    /// A `[[rule.mount]]`: `outside` is a literal host path.
    Mount,
}

/// A configured path or mount and what the scan found for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathView {
    /// Which kind of entry it is.
    pub origin: PathOrigin,
    /// Where the build sees it (normalised).
    pub inside: PathBuf,
    /// Where it is on the host.
    pub outside: PathBuf,
    /// Fail tagged builds when it is unusable.
    pub required: bool,
    /// What to tell the user when a required one is unusable.
    pub hint: Option<String>,
    /// With `follow_entry_symlinks`: the directory's links (`None`: not asked, or the path is
    /// not a directory).
    pub entry_symlinks: Option<EntrySymlinks>,
}

impl PathView {
    /// How the path's symlinks resolve: under the host root for host paths, literally on the
    /// host for mounts.
    pub(crate) fn space<'a>(&self, root: &'a Path, store_dir: &'a Path) -> Space<'a> {
        match self.origin {
            PathOrigin::HostPath => Space::Rooted { root, store_dir },
            PathOrigin::Mount => Space::Literal,
        }
    }
}

/// The symlinks directly inside a directory whose entries' links a rule follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EntrySymlinks {
    /// Where the directory really is, once its own links are followed.
    pub dir: symlinks::Hop,
    /// The names of the links in it, sorted, at most [`ENTRY_SYMLINKS_MAX`].
    pub names: Vec<String>,
}

/// Scans a `[[rule.path]]`.
pub(crate) fn scan_host_path(p: &HostPath, rooted: Space<'_>, fs: &Recorder) -> PathView {
    let inside = symlinks::normalize(&p.path);
    let outside = rooted.outside(&inside);
    scan_one(
        PathView {
            origin: PathOrigin::HostPath,
            inside,
            outside,
            required: p.required,
            hint: p.hint.clone(),
            entry_symlinks: None,
        },
        p.follow_entry_symlinks,
        rooted,
        fs,
    )
}

/// Scans a `[[rule.mount]]`.
pub(crate) fn scan_mount(m: &Mount, fs: &Recorder) -> PathView {
    scan_one(
        PathView {
            origin: PathOrigin::Mount,
            inside: symlinks::normalize(&m.inside),
            outside: m.outside.clone(),
            required: m.required,
            hint: m.hint.clone(),
            entry_symlinks: None,
        },
        m.follow_entry_symlinks,
        Space::Literal,
        fs,
    )
}

fn scan_one(mut view: PathView, follow_entries: bool, space: Space<'_>, fs: &Recorder) -> PathView {
    fs.follow(&view.inside, &view.outside, space);
    if follow_entries {
        view.entry_symlinks = entry_symlinks(&view.inside, &view.outside, space, fs);
    }
    view
}

/// Lists the symlinks directly inside the directory at `inside` (where it really is, once its
/// own links are followed; `None` when it is not a directory) and follows each, so that the
/// planner can expose their targets.
fn entry_symlinks(
    inside: &Path,
    outside: &Path,
    space: Space<'_>,
    fs: &Recorder,
) -> Option<EntrySymlinks> {
    let chain = symlinks::follow(inside, outside, space, fs).ok()?;
    let dir = (chain.target == Node::Dir).then(|| chain.hops.last().cloned())??;
    let entries = std::fs::read_dir(&dir.outside).ok()?;
    let mut names = Vec::new();
    for entry in entries.flatten().take(ENTRY_SYMLINKS_MAX) {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let link_outside = dir.outside.join(&name);
        if matches!(fs.lstat(&link_outside), Node::Symlink(_)) {
            fs.follow(&dir.inside.join(&name), &link_outside, space);
            names.push(name);
        }
    }
    names.sort();
    Some(EntrySymlinks { dir, names })
}
