//! The device-glob planner: each node a glob matched (scanned by [`crate::scan::devices`]),
//! with the links on the way, as a device exposure; what cannot be exposed, skipped or a
//! problem, with the reason.

use super::{Decision, ProblemKind, Reason, Skipped};
use crate::config::{Config, DeviceGlob};
use crate::mig;
use crate::scan::{DeviceScan, DeviceView, HostView};
use crate::symlinks::{self, Node};
use std::path::{Path, PathBuf};

impl Decision {
    /// Plans one device glob of the rule `rule`.
    pub(super) fn add_device(
        &mut self,
        rule: &str,
        device: &DeviceView,
        config: &Config,
        view: &HostView,
    ) {
        let glob = &device.source;
        let matches = match &device.found {
            DeviceScan::OtherPlatform(wants, host) => {
                return self.skip(glob.glob.clone(), Skipped::OtherPlatform(*wants, *host));
            }
            DeviceScan::Matched(matches) => matches,
        };
        let mut found = false;
        for entry in matches {
            match entry {
                Ok(outside) => found |= self.add_device_node(rule, glob, outside, config, view),
                Err(e) => self.skip(e.path().display(), Skipped::Glob(e.clone())),
            }
        }
        if found {
            return;
        }
        if glob.required {
            let fix = glob.hint.clone().unwrap_or_else(|| device_hint(&glob.glob));
            self.add_problem_of(rule, ProblemKind::MissingDevice(glob.glob.clone(), fix));
        } else {
            self.skip(glob.glob.clone(), Skipped::NothingMatched);
        }
    }

    /// Exposes one node a device glob matched (`outside`, below the host root), with the
    /// links on the way, and says whether it did: a MIG capability node under a wildcard, a
    /// chain that cannot be followed within the roots, what is neither a character device
    /// nor a directory, and a path Nix's protocol cannot express are not exposed.
    fn add_device_node(
        &mut self,
        rule: &str,
        glob: &DeviceGlob,
        outside: &Path,
        config: &Config,
        view: &HostView,
    ) -> bool {
        let Ok(rel) = outside.strip_prefix(&config.host_root) else {
            return false;
        };
        let inside = Path::new("/").join(rel);
        let why = if glob.glob.contains(['*', '?', '[']) && inside.starts_with(mig::CAPS_DEV_DIR) {
            // A wildcard would give every MIG instance, and the config and monitor
            // capabilities, to every build.
            Skipped::MigCapabilityNode
        } else {
            match self.follow(&inside, outside, config.space(), view) {
                Err(e) => Skipped::DeviceChain(e),
                Ok(c) if !matches!(c.target, Node::CharDevice | Node::Dir) => Skipped::NotDevice,
                Ok(c) => match unexpressible(&c.hops) {
                    None => {
                        let (rule, glob) = (rule.to_string(), glob.glob.clone());
                        self.add_chain(c.hops, Reason::Device { rule, glob });
                        return true;
                    }
                    Some(bad) => {
                        let kind = ProblemKind::DeviceUnexpressible(
                            inside.clone(),
                            glob.glob.clone(),
                            bad,
                        );
                        if glob.required {
                            self.add_problem_of(rule, kind);
                            return false;
                        }
                        self.warnings.push(format!("{kind}; skipped (optional)"));
                        Skipped::Unexpressible
                    }
                },
            }
        };
        self.skip(inside.display(), why);
        false
    }
}

/// The first path of `hops` (inside or outside) that the hook protocol cannot express
/// ([`crate::protocol`]): one holding a newline or `=`.
pub(super) fn unexpressible(hops: &[symlinks::Hop]) -> Option<PathBuf> {
    hops.iter()
        .flat_map(|h| [h.inside.as_path(), h.outside.as_path()])
        .find(|p| {
            let bytes = p.as_os_str().as_encoded_bytes();
            bytes.contains(&b'\n') || bytes.contains(&b'=')
        })
        .map(Path::to_path_buf)
}

/// The fix to suggest when a required device glob matches nothing.
pub(super) fn device_hint(glob: &str) -> String {
    if glob.contains("nvidia-uvm") {
        "the nvidia-uvm module is not loaded or its node not created yet: run \
         `nvidia-modprobe -u -c=0` (or `modprobe nvidia-uvm`) on the builder, and make it \
         happen at boot"
            .to_string()
    } else if glob.contains("nvidiactl") || glob.contains("nvidia[") {
        "no NVIDIA device nodes: is the NVIDIA kernel driver loaded (`nvidia-smi`)? On NixOS set \
         services.xserver.videoDrivers = [ \"nvidia\" ] or hardware.nvidia"
            .to_string()
    } else {
        "create the device or mark it `required = false` in the config".to_string()
    }
}
