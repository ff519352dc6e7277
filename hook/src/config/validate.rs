//! What a parsed configuration must hold beyond its schema: absolute paths Nix's hook protocol
//! can express, valid globs, unique rule names, features that can match, and something to
//! expose in every rule.

use super::{Config, Rule};
use std::path::{Path, PathBuf};

/// A value the configuration may not hold.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Invalid {
    /// A top-level path (or a `symlink_roots` entry) is relative: the key (e.g. `host_root`),
    /// and its value.
    #[error("{0} must be an absolute path, got {1:?}")]
    NotAbsolute(&'static str, PathBuf),
    /// `nix_store` is neither the default name nor an absolute path.
    #[error("nix_store must be an absolute path to a root-owned program, got {0:?}")]
    NixStore(PathBuf),
    /// A `[[rule]]` has an empty name.
    #[error("a [[rule]] has an empty name")]
    EmptyRuleName,
    /// Two rules share a name.
    #[error("rule '{0}' is defined twice")]
    DuplicateRule(String),
    /// A rule lists no features.
    #[error("rule '{0}' has no features, so it would never apply")]
    NoFeatures(String),
    /// A rule names no source at all: its builds would be told they are tagged and get nothing.
    #[error(
        "rule '{0}' exposes nothing: it has no [[rule.device]], [[rule.path]], [[rule.mount]], \
         [rule.driver], cdi, [rule.mig] or sysfs; add what its builds need, or remove the rule"
    )]
    NothingToExpose(String),
    /// A feature is empty or holds whitespace or a control character: the rule, the feature.
    #[error("rule '{0}': feature {1:?} is empty or holds whitespace")]
    Feature(String, String),
    /// A rule's path or glob is relative: the rule, which value (e.g. `mount inside`), the
    /// value.
    #[error("rule '{0}': {1} {path} must be absolute", path = .2.display())]
    RelativePath(String, &'static str, PathBuf),
    /// A rule's path or glob holds a newline or `=`: the rule, which value (e.g. `path`), the
    /// value.
    #[error(
        "rule '{0}': {1} {2:?} holds a newline or '=', which Nix's hook protocol cannot express"
    )]
    Inexpressible(String, &'static str, PathBuf),
    /// Leases with a rule that gives builds an AMD GPU: not shown to confine a build to the
    /// GPUs it leased (see [`exposes_amd_gpus`]): the rule, what of it is AMD's (`/dev/kfd` or
    /// `sysfs = "kfd"`), and `gpus_per_build`.
    #[error(
        "rule '{0}' exposes AMD GPUs ({1}), which GPU leases (gpus_per_build = {2}) \
         cannot confine yet: KFD lets a process use every GPU it lists in its topology that \
         the device cgroup allows, and a Nix sandbox sets none; set gpus_per_build = 0 or \
         remove the rule (see docs/data-centre.md)"
    )]
    LeasedAmd(String, &'static str, u32),
    /// A device or compat glob does not parse: the rule, which (`device glob` or `compat
    /// glob`), the glob, and what the glob parser said.
    #[error("rule '{0}': {1} {2:?} is not a valid glob: {3}")]
    Glob(String, &'static str, String, glob::PatternError),
}

impl Config {
    /// Checks the values the schema cannot: the first problem found, in file order.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        for (field, path) in [
            ("host_root", &self.host_root),
            ("store_dir", &self.store_dir),
            ("closure_cache", &self.closure_cache),
            ("runtime_dir", &self.runtime_dir),
        ] {
            absolute(field, path)?;
        }
        if self.nix_store != Path::new("nix-store") && !self.nix_store.is_absolute() {
            return Err(Invalid::NixStore(self.nix_store.clone()));
        }
        for path in &self.symlink_roots {
            absolute("symlink_roots entry", path)?;
        }
        // A BTreeSet: a HashSet would ask the kernel for a random seed on every run.
        let mut names = std::collections::BTreeSet::new();
        for rule in &self.rules {
            let name = &rule.name;
            if name.is_empty() {
                return Err(Invalid::EmptyRuleName);
            }
            if !names.insert(name) {
                return Err(Invalid::DuplicateRule(name.clone()));
            }
            if rule.features.is_empty() {
                return Err(Invalid::NoFeatures(name.clone()));
            }
            for feature in &rule.features {
                if feature.is_empty()
                    || feature.chars().any(|c| c.is_whitespace() || c.is_control())
                {
                    return Err(Invalid::Feature(name.clone(), feature.clone()));
                }
            }
            // A rule naming no device glob, path, mount, driver, CDI device, MIG or part of
            // `/sys` can never give a build anything (what the host then has is the scan's
            // business).
            if rule.devices.is_empty()
                && rule.paths.is_empty()
                && rule.mounts.is_empty()
                && rule.driver.is_none()
                && rule.cdi.is_empty()
                && rule.mig.is_none()
                && rule.sysfs.is_none()
            {
                return Err(Invalid::NothingToExpose(name.clone()));
            }
            if let (true, Some(what)) = (self.gpus_per_build > 0, exposes_amd_gpus(rule)) {
                return Err(Invalid::LeasedAmd(name.clone(), what, self.gpus_per_build));
            }
            for d in &rule.devices {
                glob(name, "device glob", &d.glob)?;
            }
            for p in &rule.paths {
                expressible(name, "path", &p.path)?;
            }
            for m in &rule.mounts {
                expressible(name, "mount inside", &m.inside)?;
                expressible(name, "mount outside", &m.outside)?;
            }
            if let Some(d) = &rule.driver {
                expressible(name, "driver link", &d.link)?;
                for dir in &d.library_dirs {
                    expressible(name, "driver library_dirs entry", dir)?;
                }
                for c in &d.compat {
                    glob(name, "compat glob", c)?;
                }
            }
        }
        Ok(())
    }

    /// The settings of this configuration that have no effect as written.
    pub fn notes(&self) -> Vec<Note> {
        let mut notes = Vec::new();
        if self.gpus_per_build == 0 && self.max_gpus_per_build > 0 {
            notes.push(Note::MaxWithoutLease(self.max_gpus_per_build));
        }
        notes
    }
}

/// A setting that has no effect as written (`check-config` prints it, with what to change).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Note {
    /// `max_gpus_per_build` (the value set) without `gpus_per_build`, which gives every GPU
    /// to every build and leases none.
    #[error(
        "max_gpus_per_build = {0} has no effect: gpus_per_build = 0 gives every GPU to every \
         tagged build and leases none; set gpus_per_build (e.g. 1) to lease GPUs"
    )]
    MaxWithoutLease(u32),
}

/// What of `rule` gives its builds AMD GPUs, if anything: `/dev/kfd` (a device glob that
/// matches it, the path itself or a mount of it), through which a process computes on every GPU of the
/// KFD topology, or the KFD topology itself. Leases cannot confine these yet: KFD gives a
/// process a GPU only when the device cgroup allows that GPU's render node, and a Nix sandbox
/// sets no device cgroup; newer kernels also need an open DRM file of the GPU
/// (`AMDKFD_IOC_ACQUIRE_VM`), but the topology still lists every GPU, and what ROCm does with
/// a listed GPU it cannot open is unknown until shown on an AMD GPU.
fn exposes_amd_gpus(rule: &Rule) -> Option<&'static str> {
    let kfd = Path::new(KFD_NODE);
    let devices = rule
        .devices
        .iter()
        .any(|d| glob::Pattern::new(&d.glob).is_ok_and(|g| g.matches_path(kfd)));
    let paths = rule.paths.iter().any(|p| p.path == kfd);
    let mounts = rule.mounts.iter().any(|m| m.outside == kfd);
    if devices || paths || mounts {
        Some(KFD_NODE)
    } else if rule.sysfs == Some(super::Sysfs::Kfd) {
        Some("sysfs = \"kfd\"")
    } else {
        None
    }
}

/// AMD's compute node: KFD, the kernel's interface for ROCm.
const KFD_NODE: &str = "/dev/kfd";

fn absolute(field: &'static str, path: &Path) -> Result<(), Invalid> {
    if path.is_absolute() {
        Ok(())
    } else {
        Err(Invalid::NotAbsolute(field, path.to_path_buf()))
    }
}

/// `path` of rule `rule` is absolute and holds no newline or `=`.
fn expressible(rule: &str, what: &'static str, path: &Path) -> Result<(), Invalid> {
    if !path.is_absolute() {
        return Err(Invalid::RelativePath(rule.into(), what, path.into()));
    }
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes.contains(&b'\n') || bytes.contains(&b'=') {
        return Err(Invalid::Inexpressible(rule.into(), what, path.into()));
    }
    Ok(())
}

/// `glob` of rule `rule` is [`expressible`] and a valid glob.
fn glob(rule: &str, what: &'static str, glob: &str) -> Result<(), Invalid> {
    expressible(rule, what, Path::new(glob))?;
    glob::Pattern::new(glob).map_err(|e| Invalid::Glob(rule.into(), what, glob.into(), e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_values_are_refused() {
        let rule = |body: &str| format!("[[rule]]\nname=\"a\"\nfeatures=[\"c\"]\n{body}");
        for (text, needle) in [
            (
                "[[rule]]\nname=\"a\"\nfeatures=[]\n".to_string(),
                "no features",
            ),
            (
                "[[rule]]\nname=\"a\"\nfeatures=[\"c d\"]\n".to_string(),
                "whitespace",
            ),
            (rule("[[rule.path]]\npath=\"rel\"\n"), "absolute"),
            (rule("[[rule.path]]\npath=\"/a=b\"\n"), "'='"),
            (rule("[[rule.device]]\nglob=\"/dev/[\"\n"), "valid glob"),
            (
                rule("[rule.mig]\n[[rule]]\nname=\"a\"\nfeatures=[\"d\"]\n[rule.mig]\n"),
                "twice",
            ),
            ("host_root = \"x\"\n".to_string(), "absolute"),
            ("[[rule]]\nname = 3\n".to_string(), "line 2"),
        ] {
            let e = Config::parse(&text, "t").unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    /// A rule that names no source is refused, naming the rule; any one source is enough.
    #[test]
    fn a_rule_that_exposes_nothing_is_refused_by_name() {
        let with = |body: &str| {
            format!(
                "[[rule]]\nname=\"gpu\"\nfeatures=[\"cuda\"]\n[[rule.device]]\nglob=\"/dev/x\"\n\
                 [[rule]]\nname=\"nvidia-gpu\"\nfeatures=[\"cuda-ada\"]\n{body}"
            )
        };
        let e = Config::parse(&with(""), "t").unwrap_err();
        assert!(
            matches!(&e.problem, super::super::Problem::Invalid(Invalid::NothingToExpose(r)) if r == "nvidia-gpu"),
            "{e:?}"
        );
        let line = e.to_string();
        assert!(
            line.starts_with("config t: rule 'nvidia-gpu' exposes nothing:")
                && line.contains("add what its builds need, or remove the rule")
                && !line.contains('\n'),
            "{line}"
        );
        for source in [
            "[[rule.device]]\nglob=\"/dev/y\"\n",
            "[[rule.path]]\npath=\"/opt/y\"\n",
            "[[rule.mount]]\ninside=\"/y\"\noutside=\"/opt/y\"\n",
            "[rule.driver]\n",
            "cdi=[\"nvidia.com/gpu=all\"]\n",
            "[rule.mig]\n",
        ] {
            Config::parse(&with(source), "t").unwrap_or_else(|e| panic!("{source:?}: {e}"));
        }
    }

    #[test]
    fn a_cap_without_leases_is_noted() {
        let c = Config::parse("max_gpus_per_build = 2\n", "t").unwrap();
        assert_eq!(c.notes(), [Note::MaxWithoutLease(2)]);
        assert!(c.notes()[0]
            .to_string()
            .starts_with("max_gpus_per_build = 2 has no effect"));
        let c = Config::parse("gpus_per_build = 1\nmax_gpus_per_build = 2\n", "t").unwrap();
        assert!(c.notes().is_empty());
    }

    #[test]
    fn each_problem_is_its_own_variant() {
        let invalid = |text: &str| match Config::parse(text, "t").unwrap_err().problem {
            super::super::Problem::Invalid(i) => i,
            other => panic!("{text:?}: {other:?}"),
        };
        assert!(matches!(
            invalid("host_root = \"x\"\n"),
            Invalid::NotAbsolute("host_root", path) if path == Path::new("x")
        ));
        assert!(matches!(
            invalid("nix_store = \"bin/nix-store\"\n"),
            Invalid::NixStore(p) if p == Path::new("bin/nix-store")
        ));
        assert!(matches!(
            invalid("[[rule]]\nname=\"a\"\nfeatures=[\"c\"]\n[[rule.mount]]\ninside=\"/x\"\noutside=\"/a\\nb\"\n"),
            Invalid::Inexpressible(_, "mount outside", _)
        ));
        assert!(matches!(
            invalid("[[rule]]\nname=\"a\"\nfeatures=[\"c\"]\n[rule.driver]\ncompat=[\"/x/[\"]\n"),
            Invalid::Glob(_, "compat glob", ..)
        ));
    }
}
