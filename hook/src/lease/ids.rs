//! The host ids a build with auto-allocated ids runs as, read from the chroot Nix made for it
//! (see [`super::Holder::allocated_ids`]).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The host ids a build with auto-allocated ids runs as: `count` ids from `first`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    /// The first uid (and gid).
    pub first: u32,
    /// How many: 1, or 65536 for a `uid-range` build.
    pub count: u32,
}

impl IdRange {
    /// The ids a `uid-range` build's user namespace maps (Nix's `maxIdsPerBuild` on Linux).
    pub const UID_RANGE: u32 = 1 << 16;

    /// The ids of the build whose chroot top Nix made `chroot` (see
    /// [`super::Holder::allocated_ids`]): its group is the build's first id, and it is owned
    /// by that id too in a `uid-range` build. None for a top of another shape.
    pub(super) fn of_chroot(chroot: &Path) -> Option<IdRange> {
        let m = std::fs::symlink_metadata(chroot).ok()?;
        m.is_dir()
            .then(|| IdRange::of_top(m.uid(), m.gid(), m.mode() & 0o7777))
            .flatten()
    }

    /// The ids of a build whose chroot top has this owner, group and mode.
    fn of_top(owner: u32, group: u32, mode: u32) -> Option<IdRange> {
        let count = match (owner, mode) {
            (0, 0o750) => 1,
            (owner, 0o755) if owner == group => Self::UID_RANGE,
            _ => return None,
        };
        (group != 0).then_some(IdRange {
            first: group,
            count,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chroot_top_names_the_allocated_ids_of_its_build() {
        // As Nix 2.26 and 2.34 make it: 0:<uid> 0750, or <uid>:<uid> 0755 for uid-range.
        let uid = 872_415_232 + 3 * 65536;
        assert_eq!(
            IdRange::of_top(0, uid, 0o750),
            Some(IdRange {
                first: uid,
                count: 1
            })
        );
        assert_eq!(
            IdRange::of_top(uid, uid, 0o755),
            Some(IdRange {
                first: uid,
                count: 65536
            })
        );
        // Any other shape names no build's ids: a root-only top, or one changed since.
        assert_eq!(IdRange::of_top(0, 0, 0o750), None);
        assert_eq!(IdRange::of_top(uid, uid + 1, 0o755), None);
        assert_eq!(IdRange::of_top(0, uid, 0o777), None);
        assert_eq!(IdRange::of_top(uid, uid, 0o750), None);
    }
}
