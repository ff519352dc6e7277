//! The driver part of the plan: the NixOS driver link or the host's libraries, the compat
//! choice, and the libcuda paths the build is expected to load.

use super::{stale, Decision, ProblemKind, Reason, Skipped};
use crate::config::{Config, Platform};
use crate::discover::choice::{self, HostDriverFacts};
use crate::discover::compat::CompatDriver;
use crate::discover::host::{self, Capability, HostDataFile, HostLibrary, COMPAT_LIBRARIES};
use crate::discover::versions;
use crate::scan::{DriverView, HostFacts, HostView};
use crate::symlinks::{self, Space};
use cuda_sandbox_manifest::{DriverKind, DriverManifest};
use std::path::{Path, PathBuf};

/// Where an exposed driver file or directory comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DriverSource {
    /// The NixOS driver link (`driver-link`).
    DriverLink,
    /// A host library bound at the link (`host-library (<capability>) from <where it was
    /// found>`): what it is for, and where it was found (`ld.so.cache`, a directory, or a CDI
    /// spec).
    HostLibrary(Capability, String),
    /// A host data file (ICD file, `nvoptix.bin`) bound under the link's `share`
    /// (`host-data-file (graphics) from <directory>`): the configuration directory it was
    /// found in.
    HostDataFile(String),
    /// The chosen compat driver's directory (`compat`).
    Compat,
    /// A compat library bound at the link in place of the host's (`compat-at-driver-link`).
    CompatAtDriverLink,
}

impl std::fmt::Display for DriverSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DriverSource::DriverLink => f.write_str("driver-link"),
            DriverSource::HostLibrary(capability, found_in) => {
                write!(f, "host-library ({capability}) from {found_in}")
            }
            DriverSource::HostDataFile(found_in) => {
                write!(f, "host-data-file (graphics) from {found_in}")
            }
            DriverSource::Compat => f.write_str("compat"),
            DriverSource::CompatAtDriverLink => f.write_str("compat-at-driver-link"),
        }
    }
}

/// Where the host driver comes from.
enum HostSource {
    /// The NixOS driver link ([`DriverSite::link`]).
    Link,
    /// Host libraries bound at `<link>/lib/<name>`, and data files at `<link>/share/<rel>`.
    Libraries(Vec<HostLibrary>, Vec<HostDataFile>),
    /// Nothing found.
    Absent,
}

/// One rule's driver as the planning steps see it: the rule, what the scan found, where the
/// host is (`space`) and the driver link the build sees (`link`, its `lib`).
struct DriverSite<'a> {
    rule: &'a str,
    driver: &'a DriverView,
    config: &'a Config,
    view: &'a HostView,
    space: Space<'a>,
    link: PathBuf,
    link_lib: PathBuf,
}

impl DriverSite<'_> {
    /// The exposures' reason, for a file from `source`.
    fn reason(&self, source: DriverSource) -> Reason {
        Reason::Driver {
            rule: self.rule.to_string(),
            source,
        }
    }
}

impl Decision {
    /// Plans the driver of `rule`: where the host driver comes from, which driver the build
    /// gets (the host's or a compat one, `choice::choose`), the files exposed for it, and the
    /// driver part of the manifest.
    pub(super) fn add_driver(
        &mut self,
        rule: &str,
        driver: &DriverView,
        config: &Config,
        view: &HostView,
    ) {
        let link = symlinks::normalize(&driver.source.link);
        let site = DriverSite {
            rule,
            driver,
            config,
            view,
            space: config.space(),
            link_lib: link.join("lib"),
            link,
        };
        let source = self.host_source(driver);

        // The host libcuda's real file name, as the scan recorded it, tells the host driver's
        // version.
        let libcuda = match &source {
            HostSource::Link => Some(site.space.outside(&site.link_lib.join("libcuda.so.1"))),
            HostSource::Libraries(libs, _) => host_libcuda(libs).map(|l| l.outside.clone()),
            HostSource::Absent => None,
        };
        let real_name = libcuda
            .and_then(|p| view.snapshot.real_paths.get(&p))
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        let facts = host_facts(&view.facts, real_name.as_deref());
        let at_link = matches!(source, HostSource::Link).then_some(site.link.as_path());
        if let Some(stale) = stale::stale_driver(&view.facts, real_name.as_deref(), at_link) {
            self.add_problem_of(rule, ProblemKind::StaleDriver(stale));
        }

        // The compat drivers the scan found in the config's compat directories; directories
        // without one, or unreadable, are skips.
        let mut candidates = Vec::new();
        for seen in &driver.compat {
            match &seen.found {
                Ok(Some(c)) => candidates.push(c.clone()),
                Ok(None) => self.skip(seen.inside.display(), Skipped::CompatWithoutLibcuda),
                Err(e) => self.skip(seen.inside.display(), Skipped::CompatUnreadable(e.clone())),
            }
        }
        let choice = choice::choose(&facts, candidates);
        // Where the hook binds the driver file by file (no NixOS link), the compat driver's
        // libraries replace the host's at the link, so that binaries finding libcuda through
        // DT_RUNPATH (or LD_LIBRARY_PATH) load it too. A NixOS link is one directory: there
        // the build's library path must put the compat directory first.
        let replace_at_link = choice.compat.is_some() && !matches!(source, HostSource::Link);

        let mut expected: Vec<PathBuf> = Vec::new();
        self.expose_host_driver(&site, &source, choice.compat.is_some(), &mut expected);
        if let Some(c) = &choice.compat {
            self.expose_compat(&site, c, replace_at_link, &mut expected);
        }
        expected.sort();
        expected.dedup();

        // The driver part of the manifest: which driver the build gets, the libcuda paths it
        // may load, the versions, and why.
        let kind = match (&source, &choice.compat) {
            (_, Some(_)) => DriverKind::Compat,
            (HostSource::Absent, None) => DriverKind::None,
            _ => DriverKind::Host,
        };
        self.driver = Some(DriverManifest {
            kind,
            libcuda: expected
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
            cuda_version: choice.cuda_version,
            host_cuda_version: facts.cuda_version,
            kernel_driver: facts.kernel_driver.clone(),
            compat_dir: choice
                .compat
                .as_ref()
                .map(|c| c.dir.to_string_lossy().into_owned()),
            driver_link_lib: (!matches!(source, HostSource::Absent) || replace_at_link)
                .then(|| site.link_lib.to_string_lossy().into_owned()),
            reason: if kind == DriverKind::None {
                "no NVIDIA driver was found on this host".to_string()
            } else {
                choice.reason.clone()
            },
        });
        self.driver_facts = Some(facts);
        self.driver_choice = Some(choice);
    }

    /// Where the host driver comes from: the NixOS link when the scan found it, else the host
    /// libraries when a libcuda is among them (the library search's warnings become skips).
    fn host_source(&mut self, driver: &DriverView) -> HostSource {
        if driver.link_present {
            return HostSource::Link;
        }
        let Some(found) = driver.host_libraries.clone() else {
            return HostSource::Absent;
        };
        for w in found.warnings {
            self.skip("/etc/ld.so.cache", Skipped::HostLibraries(w));
        }
        if found.libraries.iter().any(|l| l.stem == "libcuda") {
            HostSource::Libraries(found.libraries, found.data_files)
        } else {
            HostSource::Absent
        }
    }

    /// Exposes the host driver from `source` (the link, or each host library and data file
    /// at the link, less those a `compat` driver replaces there), or says that there is none;
    /// without a compat driver, adds the libcuda paths the build loads to `expected`.
    fn expose_host_driver(
        &mut self,
        site: &DriverSite,
        source: &HostSource,
        compat: bool,
        expected: &mut Vec<PathBuf>,
    ) {
        let (rule, cfg, view) = (site.rule, &site.driver.source, site.view);
        match source {
            HostSource::Link => {
                let l = &site.link;
                let outside = site.space.outside(l);
                let want = cfg.required.then_some(None);
                let why = site.reason(DriverSource::DriverLink);
                self.add_path(rule, l, &outside, site.space, view, why, want);
                if !compat {
                    expected.extend(libcuda_paths(&site.link_lib.join("libcuda.so.1"), site));
                }
            }
            HostSource::Libraries(libs, data_files) => {
                for file in data_files {
                    let why = site.reason(DriverSource::HostDataFile(file.found_in.clone()));
                    let inside = site.link.join("share").join(&file.rel);
                    self.add_optional_host_path(rule, &inside, &file.outside, view, why);
                }
                for lib in libs {
                    let inside = site.link_lib.join(&lib.name);
                    if compat && COMPAT_LIBRARIES.contains(&lib.stem) {
                        self.skip(lib.outside.display(), Skipped::ReplacedByCompat);
                        continue;
                    }
                    let capability = host::capability_of(lib.stem);
                    let source = DriverSource::HostLibrary(capability, lib.found_in.clone());
                    let why = site.reason(source);
                    self.add_optional_host_path(rule, &inside, &lib.outside, view, why);
                }
                if !compat {
                    if let Some(lib) = host_libcuda(libs) {
                        let inside = site.link_lib.join(&lib.name);
                        expected.extend(chain_paths(&inside, &lib.outside, Space::Literal, view));
                    }
                }
            }
            HostSource::Absent if cfg.required => {
                let kind = ProblemKind::NoDriver(site.link.clone(), cfg.library_dirs.clone());
                self.add_problem_of(rule, kind);
            }
            HostSource::Absent => self.skip(site.link.display(), Skipped::NoDriver),
        }
    }

    /// Exposes the chosen compat driver's directory (and, with `replace_at_link`, its
    /// libraries at the link), adding the libcuda paths the build loads to `expected`.
    fn expose_compat(
        &mut self,
        site: &DriverSite,
        c: &CompatDriver,
        replace_at_link: bool,
        expected: &mut Vec<PathBuf>,
    ) {
        let (rule, space, view) = (site.rule, site.space, site.view);
        let why = site.reason(DriverSource::Compat);
        self.add_path(rule, &c.dir, &c.dir_outside, space, view, why, Some(None));
        for libcuda in [&c.dir.join("libcuda.so.1"), &c.dir.join(&c.libcuda)] {
            expected.extend(libcuda_paths(libcuda, site));
        }
        if !replace_at_link {
            return;
        }
        // The compat driver's libraries, bound at the driver link in place of the host's.
        for name in &c.libraries {
            let inside = site.link_lib.join(name);
            let outside = c.dir_outside.join(name);
            let why = site.reason(DriverSource::CompatAtDriverLink);
            self.add_optional_host_path(rule, &inside, &outside, view, why);
            if name.starts_with("libcuda.so") {
                expected.extend(chain_paths(&inside, &outside, Space::Literal, view));
            }
        }
    }
}

/// The host's libcuda among `libs`: `libcuda.so.1`, else any libcuda.
fn host_libcuda(libs: &[HostLibrary]) -> Option<&HostLibrary> {
    libs.iter()
        .find(|l| l.name == "libcuda.so.1")
        .or_else(|| libs.iter().find(|l| l.stem == "libcuda"))
}

/// The inside paths a libcuda reached at `inside` may resolve to: each hop of its chain and
/// its real path.
fn libcuda_paths(inside: &Path, site: &DriverSite) -> Vec<PathBuf> {
    let outside = site.space.outside(inside);
    let mut out = chain_paths(inside, &outside, site.space, site.view);
    let real = site.view.snapshot.real_paths.get(&outside);
    out.extend(real.map(|real| inside_of(real, site.config)));
    out
}

/// The inside paths of the chain at (`inside`, `outside`): each hop, or `inside` alone when
/// it cannot be followed.
fn chain_paths(inside: &Path, outside: &Path, space: Space<'_>, view: &HostView) -> Vec<PathBuf> {
    match symlinks::follow(inside, outside, space, view) {
        Ok(chain) => chain.hops.into_iter().map(|h| h.inside).collect(),
        Err(_) => vec![inside.to_path_buf()],
    }
}

/// What is known of the host driver: the kernel module (and its branch), Tegra, and the CUDA
/// version of the host's user-space driver, from `libcuda_file` (the real file name of the
/// host's libcuda) when it carries a version, else from the kernel branch, else from the L4T
/// release.
pub(super) fn host_facts(view: &HostFacts, libcuda_file: Option<&str>) -> HostDriverFacts {
    let kernel_branch = view
        .kernel_driver
        .as_deref()
        .and_then(versions::driver_branch);
    let from_file = libcuda_file
        .and_then(|f| versions::version_in_file_name(f, "libcuda"))
        .and_then(|v| versions::driver_branch(&v))
        .and_then(versions::cuda_for_branch);
    let cuda_version = from_file
        .or_else(|| kernel_branch.and_then(versions::cuda_for_branch))
        .or_else(|| view.l4t.and_then(versions::cuda_for_l4t));
    HostDriverFacts {
        kernel_driver: view.kernel_driver.clone(),
        kernel_branch,
        cuda_version,
        tegra: view.platform() == Platform::Tegra,
    }
}

/// The inside path of a real host path: store paths as they are, others without the root.
fn inside_of(real: &Path, config: &Config) -> PathBuf {
    if real.starts_with(&config.store_dir) || config.host_root == Path::new("/") {
        return real.to_path_buf();
    }
    match real.strip_prefix(&config.host_root) {
        Ok(rel) => Path::new("/").join(rel),
        Err(_) => real.to_path_buf(),
    }
}
