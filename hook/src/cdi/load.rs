//! Reading the spec directories, and finding a device in them.
//!
//! A spec says which host files root gives a build, so it is trusted exactly like the
//! configuration: each directory only when it and every component on the way are owned by
//! root (or the hook's user) and not writable by group or others (the directory itself not
//! even when sticky: what is in it decides what is read, [`crate::trust::listed_dir`]), each
//! symlink on the way only when root made it, and each file through
//! [`crate::config::read_text`] (the same checks, then `openat` with `O_NOFOLLOW|O_NONBLOCK`
//! from its trusted parent, a regular file of at most [`crate::config::MAX_CONFIG_BYTES`]). A
//! directory or file that fails is not read and is reported; it never widens what a build
//! gets.

use super::name::DeviceName;
use super::spec::{Device, Format, Spec};
use super::SpecDirs;
use crate::config::{self, ConfigSource};
use std::path::{Path, PathBuf};

/// The most entries of one spec directory looked at: far more than any host has specs, and a
/// bound on the work a full directory can cause.
pub(crate) const MAX_DIR_ENTRIES: usize = 1024;

/// Why a spec directory or file was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SpecError {
    /// The directory (or a component on its way) is not trusted, cannot be listed or holds
    /// more entries than are looked at: the directory, and what is wrong, with the fix.
    #[error("CDI spec directory {0}: {1}")]
    Dir(PathBuf, String),
    /// The file is not trusted, cannot be read or is no valid spec: the file, and what is
    /// wrong, with the fix.
    #[error("CDI spec {0}: {1}")]
    File(PathBuf, String),
}

impl SpecError {
    /// The directory or file concerned.
    pub(crate) fn path(&self) -> &Path {
        match self {
            SpecError::Dir(path, _) | SpecError::File(path, _) => path,
        }
    }
}

/// One spec file that was read and parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LoadedSpec {
    /// The file (every symlink on the way resolved).
    pub file: PathBuf,
    /// Its directory's place in [`SpecDirs`] (higher wins).
    pub priority: usize,
    /// The spec.
    pub spec: Spec,
}

/// Every spec of the spec directories, and what could not be used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SpecSet {
    /// The specs read, lowest priority first, in file-name order within a directory.
    pub specs: Vec<LoadedSpec>,
    /// The directories and files that were not used, and why.
    pub errors: Vec<SpecError>,
}

/// Why a named device was not found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LookupError {
    /// No spec of the right kind defines the device (with the directories looked in, for
    /// the message).
    #[error("no CDI spec in {1} defines {0}")]
    NotFound(DeviceName, String),
    /// Two specs of the same priority define the device (the CDI spec calls this a
    /// conflict).
    #[error("{0} is defined by both {1} and {2}; remove one")]
    Conflict(DeviceName, PathBuf, PathBuf),
}

impl SpecSet {
    /// Reads every spec in `dirs`. A missing directory holds no spec; anything else that
    /// cannot be used is recorded in [`SpecSet::errors`].
    pub(crate) fn load(dirs: &SpecDirs) -> SpecSet {
        let mut set = SpecSet::default();
        let mut seen: Vec<PathBuf> = Vec::new();
        for (priority, dir) in dirs.dirs().iter().enumerate() {
            // `symlink_metadata` and `exists` open nothing; a dangling link is no directory.
            if dir.symlink_metadata().is_err() {
                continue;
            }
            let resolved = match crate::trust::listed_dir(dir) {
                Ok(path) => path,
                Err(error) => {
                    let why = match error {
                        crate::trust::TrustError::NotADirectory(_) => "not a directory".into(),
                        why => format!("refused: {why}"),
                    };
                    set.errors.push(SpecError::Dir(dir.clone(), why));
                    continue;
                }
            };
            // `/var/run` is `/run` on most hosts: one directory named twice is read once, at
            // its higher priority.
            if seen.contains(&resolved) {
                for s in set
                    .specs
                    .iter_mut()
                    .filter(|s| s.file.starts_with(&resolved))
                {
                    s.priority = priority;
                }
            } else {
                set.read_dir(dir, &resolved, priority);
                seen.push(resolved);
            }
        }
        set
    }

    fn read_dir(&mut self, dir: &Path, resolved: &Path, priority: usize) {
        let entries = match std::fs::read_dir(resolved) {
            Ok(e) => e,
            Err(e) => {
                let why = format!("cannot list it: {e}");
                self.errors.push(SpecError::Dir(dir.to_path_buf(), why));
                return;
            }
        };
        let mut names: Vec<(String, Format)> = Vec::new();
        for (i, entry) in entries.enumerate() {
            if i == MAX_DIR_ENTRIES {
                let why =
                    format!("more than {MAX_DIR_ENTRIES} entries; only the first were looked at");
                self.errors.push(SpecError::Dir(dir.to_path_buf(), why));
                break;
            }
            let Ok(entry) = entry else { continue };
            if let Ok(name) = entry.file_name().into_string() {
                if let Some(format) = Format::of(&name).filter(|_| !name.starts_with('.')) {
                    names.push((name, format));
                }
            }
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, format) in names {
            let file = resolved.join(&name);
            let parsed = config::read_text(&ConfigSource::File(file.clone()))
                .map_err(|e| e.problem.to_string())
                .and_then(|text| Spec::parse(&text, format).map_err(|e| e.to_string()));
            match parsed {
                Ok(spec) => self.specs.push(LoadedSpec {
                    file,
                    priority,
                    spec,
                }),
                Err(why) => self.errors.push(SpecError::File(file, why)),
            }
        }
    }

    /// The device `name` and the spec that defines it: the spec of its kind with the highest
    /// priority that defines it.
    pub(crate) fn find(
        &self,
        name: &DeviceName,
        dirs: &SpecDirs,
    ) -> Result<(&LoadedSpec, &Device), LookupError> {
        let mut best: Option<(&LoadedSpec, &Device)> = None;
        for s in self.specs.iter().filter(|s| s.spec.kind == name.kind()) {
            let Some(device) = s.spec.device(name.device()) else {
                continue;
            };
            match best {
                Some((b, _)) if b.priority > s.priority => {}
                Some((b, _)) if b.priority == s.priority => {
                    let (first, second) = (b.file.clone(), s.file.clone());
                    return Err(LookupError::Conflict(name.clone(), first, second));
                }
                _ => best = Some((s, device)),
            }
        }
        best.ok_or_else(|| {
            let shown = dirs.dirs().iter().map(|d| d.display().to_string());
            LookupError::NotFound(name.clone(), shown.collect::<Vec<_>>().join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn spec(kind: &str, device: &str, node: &str) -> String {
        format!(
            r#"{{"cdiVersion":"0.5.0","kind":"{kind}","devices":[{{"name":"{device}","containerEdits":{{"deviceNodes":[{{"path":"{node}"}}]}}}}]}}"#
        )
    }

    fn dirs(paths: &[&Path]) -> SpecDirs {
        SpecDirs::try_from(paths.iter().map(|p| p.to_path_buf()).collect::<Vec<_>>()).unwrap()
    }

    fn node_of((_, device): (&LoadedSpec, &Device)) -> String {
        device.container_edits.device_nodes[0].path.clone()
    }

    #[test]
    fn a_later_directory_wins_and_one_directory_conflicts() {
        let t = tempfile::tempdir().unwrap();
        let (etc, run) = (t.path().join("etc"), t.path().join("run"));
        std::fs::create_dir(&etc).unwrap();
        std::fs::create_dir(&run).unwrap();
        std::fs::write(etc.join("a.json"), spec("nvidia.com/gpu", "0", "/dev/etc")).unwrap();
        std::fs::write(run.join("b.yaml"), spec("nvidia.com/gpu", "0", "/dev/run")).unwrap();
        std::fs::write(etc.join("c.json"), spec("nvidia.com/gpu", "1", "/dev/one")).unwrap();
        std::fs::write(etc.join("notes.txt"), "not a spec").unwrap();
        let d = dirs(&[&etc, &run]);
        let set = SpecSet::load(&d);
        assert!(set.errors.is_empty(), "{:?}", set.errors);
        let name = |n: &str| DeviceName::parse(n).unwrap();
        assert_eq!(
            node_of(set.find(&name("nvidia.com/gpu=0"), &d).unwrap()),
            "/dev/run"
        );
        assert_eq!(
            node_of(set.find(&name("nvidia.com/gpu=1"), &d).unwrap()),
            "/dev/one"
        );
        let missing = set.find(&name("nvidia.com/gpu=2"), &d).unwrap_err();
        assert!(matches!(missing, LookupError::NotFound(..)));
        assert_eq!(
            missing.to_string(),
            format!(
                "no CDI spec in {}, {} defines nvidia.com/gpu=2",
                etc.display(),
                run.display()
            )
        );
        assert!(matches!(
            set.find(&name("other.com/gpu=0"), &d),
            Err(LookupError::NotFound(..))
        ));
        std::fs::write(etc.join("d.json"), spec("nvidia.com/gpu", "1", "/dev/two")).unwrap();
        let set = SpecSet::load(&d);
        let both = set.find(&name("nvidia.com/gpu=1"), &d).unwrap_err();
        assert!(matches!(both, LookupError::Conflict(..)));
        assert_eq!(
            both.to_string(),
            format!(
                "nvidia.com/gpu=1 is defined by both {} and {}; remove one",
                etc.join("c.json").display(),
                etc.join("d.json").display()
            )
        );
    }

    #[test]
    fn untrusted_or_odd_specs_are_not_read() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("cdi");
        std::fs::create_dir(&dir).unwrap();
        let good = dir.join("good.json");
        std::fs::write(&good, spec("a.com/b", "x", "/dev/x")).unwrap();
        let writable = dir.join("writable.json");
        std::fs::write(&writable, spec("a.com/b", "y", "/dev/y")).unwrap();
        std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o666)).unwrap();
        nix::unistd::mkfifo(
            &dir.join("fifo.json"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero.yaml")).unwrap();
        std::fs::write(dir.join("broken.yaml"), "kind: [").unwrap();
        let d = dirs(&[&dir, &t.path().join("missing")]);
        let set = SpecSet::load(&d);
        assert_eq!(set.specs.len(), 1, "{set:?}");
        assert_eq!(set.specs[0].file, good);
        assert_eq!(set.errors.len(), 4, "{:?}", set.errors);
        for e in &set.errors {
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        assert!(set
            .errors
            .iter()
            .any(|e| e.to_string().contains("writable by group or others")));
        // A directory anyone can write is not read at all.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let set = SpecSet::load(&d);
        assert!(set.specs.is_empty());
        assert!(
            matches!(set.errors[..], [SpecError::Dir(..)]),
            "{:?}",
            set.errors
        );
    }

    #[test]
    fn one_directory_named_twice_is_read_once() {
        let t = tempfile::tempdir().unwrap();
        let run = t.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::os::unix::fs::symlink(&run, t.path().join("var-run")).unwrap();
        std::fs::write(run.join("a.json"), spec("a.com/b", "x", "/dev/x")).unwrap();
        let d = dirs(&[&run, &t.path().join("var-run")]);
        let set = SpecSet::load(&d);
        assert_eq!(set.specs.len(), 1);
        assert_eq!(set.specs[0].priority, 1);
        assert!(set
            .find(&DeviceName::parse("a.com/b=x").unwrap(), &d)
            .is_ok());
    }
}
