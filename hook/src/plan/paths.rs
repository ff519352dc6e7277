//! The path planner: a rule's host paths and mounts (scanned by [`crate::scan::paths`]),
//! each with its symlink chain, and with `follow_entry_symlinks` the targets of the links in
//! the directory. [`Decision::add_path`] is shared with the driver planner.

use super::{Decision, ProblemKind, Reason, Skipped};
use crate::config::Config;
use crate::scan::{HostView, PathOrigin, PathView};
use crate::symlinks::{ChainError, Space};
use std::path::Path;

impl Decision {
    /// Plans one configured path or mount of the rule `rule`.
    pub(super) fn add_configured_path(
        &mut self,
        rule: &str,
        path: &PathView,
        config: &Config,
        view: &HostView,
    ) {
        let space = path.space(&config.host_root, &config.store_dir);
        let reason = match path.origin {
            PathOrigin::HostPath => Reason::HostPath {
                rule: rule.to_string(),
            },
            PathOrigin::Mount => Reason::Mount {
                rule: rule.to_string(),
            },
        };
        let want = path.required.then_some(path.hint.as_deref());
        self.add_path(rule, &path.inside, &path.outside, space, view, reason, want);
        // Each link directly in the directory is exposed with its targets, as an optional
        // host path (a target outside `symlink_roots` is skipped, named).
        if let Some(entries) = &path.entry_symlinks {
            for name in &entries.names {
                let reason = Reason::HostPath {
                    rule: rule.to_string(),
                };
                self.add_path(
                    rule,
                    &entries.dir.inside.join(name),
                    &entries.dir.outside.join(name),
                    space,
                    view,
                    reason,
                    None,
                );
            }
        }
    }

    /// Exposes the host file or directory `outside` (a literal host path) at `inside` when it
    /// is usable, else skips it: how the driver and CDI planners bind what they found.
    pub(super) fn add_optional_host_path(
        &mut self,
        rule: &str,
        inside: &Path,
        outside: &Path,
        view: &HostView,
        reason: Reason,
    ) {
        self.add_path(rule, inside, outside, Space::Literal, view, reason, None);
    }

    /// Exposes the chain at (`inside`, `outside`) for `reason`; when it cannot be followed or
    /// leaves the allowed roots, a problem if `want` requires it (`Some`, of the config's hint
    /// for the fix if it has one), else a skip.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add_path(
        &mut self,
        rule: &str,
        inside: &Path,
        outside: &Path,
        space: Space<'_>,
        view: &HostView,
        reason: Reason,
        want: Option<Option<&str>>,
    ) {
        match self.follow(inside, outside, space, view) {
            Ok(chain) => self.add_chain(chain.hops, reason),
            Err(e) if want.is_some() => {
                let fix = match (&e, want.flatten()) {
                    (_, Some(h)) => h.to_string(),
                    (ChainError::Missing(_), None) if inside.starts_with("/run/opengl-driver") => {
                        "the driver link is missing: on NixOS enable hardware.graphics with the \
                         NVIDIA driver; on other distributions add a [[rule.mount]] of the driver \
                         libraries at /run/opengl-driver/lib"
                            .to_string()
                    }
                    (ChainError::Missing(_), None) => {
                        "create it, or mark it `required = false` in the config".to_string()
                    }
                    (_, None) => "fix the link or remove the entry from the config".to_string(),
                };
                let kind = ProblemKind::RequiredPath(inside.to_path_buf(), e, fix);
                self.add_problem_of(rule, kind);
            }
            Err(e) => self.skip(inside.display(), Skipped::OptionalPath(e)),
        }
    }
}
