//! Container Device Interface (CDI) specs: the files in which a vendor's tooling (the NVIDIA
//! container toolkit's `nvidia-ctk cdi generate`, NixOS's `hardware.nvidia-container-toolkit`)
//! lists, for each device it names (`nvidia.com/gpu=0`, `=all`, `=GPU-…`, MIG `=0:1`), the
//! device nodes, mounts, hooks and environment a container gets.
//!
//! - [`name`]: the fully qualified device names a rule's `cdi` list holds;
//! - [`spec`]: the spec's schema (CDI spec `specs-go/config.go`), read from JSON or YAML;
//! - [`yaml`]: the guard a YAML spec passes first: no anchor or alias, and a cap on its events;
//! - [`load`]: the spec directories (`/etc/cdi`, `/var/run/cdi`, `/run/cdi`), each spec
//!   trusted like the configuration before it is read, and a device looked up by its name.
//!
//! [`crate::scan::cdi`] reads the specs a rule names and the CDI planner (`plan/cdi`) turns what they
//! list into exposures.

pub(crate) mod load;
pub(crate) mod name;
pub(crate) mod spec;
pub(crate) mod yaml;

pub(crate) use name::DeviceName;
pub(crate) use spec::ContainerEdits;

use serde::Deserialize;
use std::path::PathBuf;

/// The directories CDI specs are read from, in increasing priority: a device defined in a
/// later directory replaces one of the same name in an earlier one (the CDI spec's
/// `/etc/cdi`, then `/var/run/cdi`, then `/run/cdi`). Each must be an absolute path.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Vec<PathBuf>")]
pub(crate) struct SpecDirs(Vec<PathBuf>);

impl SpecDirs {
    /// The directories, lowest priority first.
    pub(crate) fn dirs(&self) -> &[PathBuf] {
        &self.0
    }
}

impl Default for SpecDirs {
    /// `/etc/cdi` and `/var/run/cdi`, where container runtimes look (CDI spec, "CDI file
    /// locations"), and `/run/cdi`, where NixOS's `hardware.nvidia-container-toolkit` writes
    /// its spec (the unit's `RuntimeDirectory`). Where `/var/run` is a root-owned link to
    /// `/run` the two are one directory, read once; where it is not (or is not root's), `/run/cdi`
    /// is still read, on its own trust.
    fn default() -> Self {
        SpecDirs(vec![
            PathBuf::from("/etc/cdi"),
            PathBuf::from("/var/run/cdi"),
            PathBuf::from("/run/cdi"),
        ])
    }
}

impl TryFrom<Vec<PathBuf>> for SpecDirs {
    type Error = String;

    fn try_from(dirs: Vec<PathBuf>) -> Result<Self, Self::Error> {
        if let Some(d) = dirs.iter().find(|d| !d.is_absolute()) {
            return Err(format!(
                "cdi_spec_dirs entry {d:?} must be an absolute path"
            ));
        }
        Ok(SpecDirs(dirs))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn a_rule_names_cdi_devices_and_the_config_its_spec_dirs() {
        let c = Config::parse(
            "cdi_spec_dirs = [\"/etc/cdi\", \"/run/cdi\"]\n[[rule]]\nname = \"r\"\n\
             features = [\"cuda\"]\ncdi = [\"nvidia.com/gpu=all\"]\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.rules[0].cdi[0].as_str(), "nvidia.com/gpu=all");
        assert_eq!(c.cdi_spec_dirs.dirs()[1], std::path::Path::new("/run/cdi"));
        assert_eq!(
            Config::builtin().cdi_spec_dirs.dirs(),
            [
                std::path::Path::new("/etc/cdi"),
                std::path::Path::new("/var/run/cdi"),
                std::path::Path::new("/run/cdi")
            ]
        );
        for (text, needle) in [
            (
                "[[rule]]\nname=\"r\"\nfeatures=[\"c\"]\ncdi=[\"nvidia.com/gpu\"]\n",
                "vendor.com/class=name",
            ),
            ("cdi_spec_dirs = [\"cdi\"]\n", "absolute"),
        ] {
            let e = Config::parse(text, "t").unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("line"), "{e}");
        }
    }
}
