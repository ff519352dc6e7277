//! The CDI planner: what the specs of a rule's CDI devices list (scanned by
//! [`crate::scan::cdi`]) as exposures, through the same symlink and root rules as every other
//! path; what must never enter a sandbox, skipped with the reason; and every edit a pre-build
//! hook cannot carry out, listed in [`Plan::not_carried_out`].
//!
//! - `deviceNodes`: the host node (`hostPath`, else `path`), a character device, at `path`;
//!   each is required, as the rule asked for the device.
//! - `mounts`: a library is bound at the driver link under its file name and its soname
//!   (Nixpkgs binaries find libraries through their DT_RUNPATH, which holds
//!   `/run/opengl-driver/lib`, never in FHS directories); with a `[rule.driver]` the driver
//!   libraries are the driver planner's (the host driver then comes from the spec). Vendor
//!   data files (Vulkan, EGL and GLVND ICD files, `nvoptix.bin`) are bound at their path and
//!   under the driver link's `share`. Other files are bound at `containerPath`. Host C and C++
//!   runtimes and FHS programs are skipped.
//! - `hooks`: the links the NVIDIA container toolkit's `create-symlinks` hook would make in a
//!   library directory are made at the driver link; no other hook can run.

use super::{Plan, Problem, Reason, Skip, OPTIONAL};
use crate::cdi::spec::Hook;
use crate::config::{Config, DriverConfig};
use crate::discover::host;
use crate::scan::cdi::{below_library_dir, host_path, is_library_name};
use crate::scan::{CdiDevice, CdiView, DriverView, HostView};
use crate::symlinks::{self, Node, Space};
use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// What a CDI exposure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CdiItem {
    /// One of the device's nodes.
    DeviceNode,
    /// A mount, at its container path.
    Mount,
    /// A library mount, at the driver link.
    Library,
    /// A data file (ICD file, …) mount, under the driver link's `share`.
    DataFile,
    /// A link the `create-symlinks` hook would make, at the driver link.
    Link,
}

impl fmt::Display for CdiItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CdiItem::DeviceNode => "device node",
            CdiItem::Mount => "mount",
            CdiItem::Library => "library at the driver link",
            CdiItem::DataFile => "data file at the driver link",
            CdiItem::Link => "create-symlinks link at the driver link",
        })
    }
}

/// An edit of a CDI spec that a pre-build hook cannot carry out: it can only add paths to the
/// sandbox, before the sandbox exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "edit", rename_all = "kebab-case")]
pub enum CdiEdit {
    /// An environment variable.
    Env {
        /// `NAME=value`.
        value: String,
    },
    /// An OCI hook.
    Hook {
        /// When it would run.
        hook_name: String,
        /// The program and its first argument (the toolkit's subcommand).
        program: String,
    },
    /// Supplementary groups.
    AdditionalGids {
        /// The groups.
        gids: Vec<u32>,
    },
    /// Options of a mount (the mount itself is planned apart).
    MountOptions {
        /// The mount's container path.
        container_path: String,
        /// The options.
        options: Vec<String>,
    },
    /// A mount of a filesystem type other than a bind mount.
    MountType {
        /// The mount's container path.
        container_path: String,
        /// Its type.
        kind: String,
    },
    /// Owner, mode or cgroup permissions of a device node.
    NodeAttributes {
        /// The node's path.
        path: String,
    },
    /// A link of the `create-symlinks` hook outside the library directories.
    Link {
        /// The link.
        link: String,
        /// Its target.
        target: String,
    },
    /// An edit the hook does not know (`intelRdt`, `netDevices`, …).
    Other {
        /// Its key.
        key: String,
    },
}

impl CdiEdit {
    /// Why the hook does not carry it out.
    pub fn why(&self) -> &'static str {
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

impl fmt::Display for CdiEdit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CdiEdit::Env { value } => write!(f, "env {value}"),
            CdiEdit::Hook { hook_name, program } => write!(f, "{hook_name} hook {program}"),
            CdiEdit::AdditionalGids { gids } => write!(f, "additionalGids {gids:?}"),
            CdiEdit::MountOptions {
                container_path,
                options,
            } => write!(f, "mount options {} of {container_path}", options.join(",")),
            CdiEdit::MountType {
                container_path,
                kind,
            } => write!(f, "{kind} mount at {container_path}"),
            CdiEdit::NodeAttributes { path } => write!(f, "owner/mode/permissions of {path}"),
            CdiEdit::Link { link, target } => write!(f, "link {link} -> {target}"),
            CdiEdit::Other { key } => write!(f, "{key}"),
        }
    }
}

/// A CDI edit that was not carried out, and for which device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotCarriedOut {
    /// The rule.
    pub rule: String,
    /// The CDI device.
    pub device: String,
    /// The edit.
    pub edit: CdiEdit,
    /// Why not.
    pub why: &'static str,
}

/// Why a spec's paths cannot be given to a build: a relative path, or one holding a newline
/// or `=`, which Nix's pre-build-hook protocol cannot express.
fn unusable(paths: &[&str]) -> Option<String> {
    paths.iter().find_map(|p| {
        if !p.starts_with('/') {
            Some(format!("{p:?} is not an absolute path"))
        } else if p.contains(['\n', '=']) {
            Some(format!(
                "{p:?} holds a newline or '=', which Nix's pre-build-hook protocol cannot express"
            ))
        } else {
            None
        }
    })
}

/// File names of the host's C and C++ runtime, which must never shadow Nix's.
fn is_host_runtime(name: &str) -> bool {
    const RUNTIME: &[&str] = &[
        "libc",
        "libm",
        "libdl",
        "libpthread",
        "librt",
        "libresolv",
        "libutil",
        "libstdc++",
        "libgcc_s",
        "libatomic",
    ];
    name.starts_with("ld-linux")
        || name.starts_with("ld64.so")
        || name
            .split_once(".so")
            .is_some_and(|(stem, _)| RUNTIME.contains(&stem))
}

/// Whether `container_path` is in an FHS program directory.
fn is_fhs_program(container_path: &Path) -> bool {
    const BIN: &[&str] = &[
        "/bin",
        "/sbin",
        "/usr/bin",
        "/usr/sbin",
        "/usr/local/bin",
        "/usr/local/sbin",
    ];
    container_path
        .parent()
        .is_some_and(|p| BIN.iter().any(|b| p == Path::new(b)))
}

/// Where a vendor data file goes under the driver link's `share` (`/usr/share/vulkan/icd.d/x`
/// → `vulkan/icd.d/x`), as Nixpkgs' loaders look there.
fn data_file_place(container_path: &Path) -> Option<PathBuf> {
    const SHARED: &[&str] = &["vulkan", "glvnd", "egl", "nvidia", "OpenCL"];
    let rel = container_path
        .strip_prefix("/usr/share")
        .or_else(|_| container_path.strip_prefix("/etc"))
        .ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    SHARED.contains(&first).then(|| rel.to_path_buf())
}

impl Plan {
    /// Plans a rule's CDI devices. `driver` is the rule's driver, whose planner binds the
    /// driver libraries the spec mounts.
    pub(super) fn add_cdi(
        &mut self,
        rule: &str,
        cdi: &CdiView,
        driver: Option<&DriverView>,
        config: &Config,
        view: &HostView,
    ) {
        for e in &cdi.spec_errors {
            let skip = Skip {
                path: e.path().display().to_string(),
                why: e.to_string(),
            };
            if !self.skipped.contains(&skip) {
                self.skipped.push(skip);
            }
        }
        let default_driver = DriverConfig::default();
        let link = symlinks::normalize(&driver.map_or(&default_driver, |d| &d.source).link);
        let place = Place {
            rule,
            link_lib: link.join("lib"),
            link_share: link.join("share"),
            link_present: driver.is_some_and(|d| d.link_present),
            driver_binds_libraries: driver.is_some_and(|d| d.host_libraries.is_some()),
        };
        for d in &cdi.devices {
            match &d.found {
                Ok(found) => self.add_cdi_device(&place, d.name.as_str(), found, config, view),
                Err(e) => self.problems.push(Problem {
                    rule: rule.to_string(),
                    what: e.to_string(),
                    fix: "generate the spec (`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`) \
                          or name a device it lists (`nvidia-ctk cdi list`)"
                        .to_string(),
                }),
            }
        }
    }

    fn add_cdi_device(
        &mut self,
        at: &Place<'_>,
        device: &str,
        found: &CdiDevice,
        config: &Config,
        view: &HostView,
    ) {
        let reason = |item: CdiItem| Reason::Cdi {
            rule: at.rule.to_string(),
            device: device.to_string(),
            spec: found.spec.clone(),
            item,
        };
        let mut pending: Vec<CdiEdit> = Vec::new();
        let mut not_done = |edit: CdiEdit| pending.push(edit);
        let edits = &found.edits;
        for value in &edits.env {
            not_done(CdiEdit::Env {
                value: value.clone(),
            });
        }
        if !edits.additional_gids.is_empty() {
            not_done(CdiEdit::AdditionalGids {
                gids: edits.additional_gids.clone(),
            });
        }
        for key in edits.other.keys() {
            not_done(CdiEdit::Other { key: key.clone() });
        }
        for n in &edits.device_nodes {
            if n.uid.is_some()
                || n.gid.is_some()
                || n.file_mode.is_some()
                || n.permissions.is_some()
            {
                not_done(CdiEdit::NodeAttributes {
                    path: n.path.clone(),
                });
            }
        }
        for m in &edits.mounts {
            if !m.options.is_empty() {
                not_done(CdiEdit::MountOptions {
                    container_path: m.container_path.clone(),
                    options: m.options.clone(),
                });
            }
            if let Some(kind) = m.kind.as_ref().filter(|k| k.as_str() != "bind") {
                not_done(CdiEdit::MountType {
                    container_path: m.container_path.clone(),
                    kind: kind.clone(),
                });
            }
        }
        let mut links = Vec::new();
        for h in &edits.hooks {
            match create_symlinks(h) {
                Some(l) => links.extend(l),
                None => not_done(CdiEdit::Hook {
                    hook_name: h.hook_name.clone(),
                    program: program_of(h),
                }),
            }
        }

        for n in &edits.device_nodes {
            if let Some(why) = unusable(&[&n.path, n.host_path.as_deref().unwrap_or(&n.path)]) {
                self.problems.push(Problem {
                    rule: at.rule.to_string(),
                    what: format!("CDI {device}: device node {why}"),
                    fix: "fix the spec (`nvidia-ctk cdi generate`)".to_string(),
                });
                continue;
            }
            let inside = symlinks::normalize(Path::new(&n.path));
            let outside = host_path(n.host_path.as_deref().unwrap_or(&n.path), config);
            self.add_cdi_node(
                at.rule,
                device,
                &inside,
                &outside,
                view,
                reason(CdiItem::DeviceNode),
            );
        }
        for m in &edits.mounts {
            if m.kind.as_ref().is_some_and(|k| k.as_str() != "bind") {
                continue;
            }
            let inside = symlinks::normalize(Path::new(&m.container_path));
            let outside = host_path(&m.host_path, config);
            if let Some(why) = unusable(&[&m.container_path, &m.host_path]) {
                self.skipped.push(Skip {
                    path: m.container_path.clone(),
                    why: format!("CDI {device}: {why}"),
                });
                continue;
            }
            let name = inside
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let skip = |why: String| Skip {
                path: inside.display().to_string(),
                why,
            };
            if is_host_runtime(&name) {
                self.skipped.push(skip(format!(
                    "CDI {device}: the host's C/C++ runtime never enters the sandbox (Nix's \
                     glibc and libstdc++ must be the ones loaded)"
                )));
                continue;
            }
            if is_fhs_program(&inside) {
                self.skipped.push(skip(format!(
                    "CDI {device}: an FHS program; builds do not look in {} and a program built \
                     for the host's glibc cannot run against Nix's (use the Nixpkgs package)",
                    inside.parent().unwrap_or(Path::new("/")).display()
                )));
                continue;
            }
            if is_library_name(&name) {
                if at.link_present {
                    self.skipped.push(skip(format!(
                        "CDI {device}: the driver link {} is exposed, with the driver behind it",
                        at.link_lib.parent().unwrap_or(&at.link_lib).display()
                    )));
                    continue;
                }
                if at.driver_binds_libraries && host::driver_library_stem(&name).is_some() {
                    // The driver planner binds it (the host driver comes from the spec).
                    continue;
                }
                let rel = below_library_dir(&inside);
                let soname = found.sonames.get(&outside);
                let names = std::iter::once(rel.clone()).chain(
                    soname
                        .filter(|s| Some(s.as_str()) != rel.file_name().and_then(|f| f.to_str()))
                        .map(|s| rel.with_file_name(s)),
                );
                for rel in names {
                    let inside = at.link_lib.join(rel);
                    self.add_path(
                        at.rule,
                        &inside,
                        &outside,
                        Space::Literal,
                        view,
                        reason(CdiItem::Library),
                        OPTIONAL,
                    );
                }
                continue;
            }
            if let Some(rel) = data_file_place(&inside) {
                self.add_path(
                    at.rule,
                    &at.link_share.join(rel),
                    &outside,
                    Space::Literal,
                    view,
                    reason(CdiItem::DataFile),
                    OPTIONAL,
                );
            }
            self.add_path(
                at.rule,
                &inside,
                &outside,
                Space::Literal,
                view,
                reason(CdiItem::Mount),
                OPTIONAL,
            );
        }
        for (target, link) in links {
            if let Some(edit) = self.add_cdi_link(at, device, found, &target, &link, config, view) {
                pending.push(edit);
            }
        }
        for edit in pending {
            let why = edit.why();
            let entry = NotCarriedOut {
                rule: at.rule.to_string(),
                device: device.to_string(),
                edit,
                why,
            };
            if !self.not_carried_out.contains(&entry) {
                self.not_carried_out.push(entry);
            }
        }
    }

    /// Exposes one device node: a character device, required.
    fn add_cdi_node(
        &mut self,
        rule: &str,
        device: &str,
        inside: &Path,
        outside: &Path,
        view: &HostView,
        reason: Reason,
    ) {
        let fail = |what: String| Problem {
            rule: rule.to_string(),
            what: format!("CDI {device}: device node {} {what}", inside.display()),
            fix: "load the driver and create its nodes (`nvidia-modprobe`), or regenerate the \
                  spec (`nvidia-ctk cdi generate`)"
                .to_string(),
        };
        let chain = match symlinks::follow(inside, outside, Space::Literal, view)
            .and_then(|c| symlinks::check_within(&c, &self.symlink_roots).map(|()| c))
        {
            Ok(c) => c,
            Err(e) => return self.problems.push(fail(format!("is unusable: {e}"))),
        };
        if chain.target != Node::CharDevice {
            return self.problems.push(fail(format!(
                "({}) is not a character device",
                outside.display()
            )));
        }
        if let Some(bad) = super::devices::unexpressible(&chain.hops) {
            return self.problems.push(fail(format!(
                "cannot be given to the build: {bad:?} holds a newline or '=', which Nix's \
                 pre-build-hook protocol cannot express"
            )));
        }
        self.add_chain(chain.hops, reason);
    }

    /// Makes a `create-symlinks` link at the driver link when it names a library, by exposing
    /// the file its target names there; another link is returned, as not carried out.
    #[allow(clippy::too_many_arguments)]
    fn add_cdi_link(
        &mut self,
        at: &Place<'_>,
        device: &str,
        found: &CdiDevice,
        target: &str,
        link: &str,
        config: &Config,
        view: &HostView,
    ) -> Option<CdiEdit> {
        let link_path = symlinks::normalize(Path::new(link));
        let name = link_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let target_path =
            symlinks::normalize(&link_path.parent().unwrap_or(Path::new("/")).join(target));
        // The target is a mounted file, or the soname link ldconfig makes to one.
        let mounted = found.edits.mounts.iter().find(|m| {
            let path = symlinks::normalize(Path::new(&m.container_path));
            path == target_path
                || (path.parent() == target_path.parent()
                    && found
                        .sonames
                        .get(&host_path(&m.host_path, config))
                        .map(Path::new)
                        == target_path.file_name().map(Path::new))
        });
        let (true, Some(m)) = (is_library_name(&name) && !at.link_present, mounted) else {
            return Some(CdiEdit::Link {
                link: link.to_string(),
                target: target.to_string(),
            });
        };
        let inside = at.link_lib.join(below_library_dir(&link_path));
        let reason = Reason::Cdi {
            rule: at.rule.to_string(),
            device: device.to_string(),
            spec: found.spec.clone(),
            item: CdiItem::Link,
        };
        let outside = host_path(&m.host_path, config);
        self.add_path(
            at.rule,
            &inside,
            &outside,
            Space::Literal,
            view,
            reason,
            OPTIONAL,
        );
        None
    }
}

/// Where a rule's CDI libraries go, and whether the driver planner takes them.
struct Place<'a> {
    rule: &'a str,
    link_lib: PathBuf,
    link_share: PathBuf,
    link_present: bool,
    driver_binds_libraries: bool,
}

/// The links (target, link) of the NVIDIA container toolkit's `create-symlinks` hook
/// (`nvidia-ctk hook create-symlinks --link TARGET::LINK`, or `nvidia-cdi-hook`); `None` for
/// any other hook.
fn create_symlinks(h: &Hook) -> Option<Vec<(String, String)>> {
    let position = h.args.iter().position(|a| a == "create-symlinks")?;
    let mut out = Vec::new();
    let mut args = h.args[position + 1..].iter();
    while let Some(a) = args.next() {
        let value = match a.strip_prefix("--link=") {
            Some(v) => v,
            None if a == "--link" => match args.next() {
                Some(v) => v,
                None => break,
            },
            None => continue,
        };
        if let Some((target, link)) = value.split_once("::") {
            out.push((target.to_string(), link.to_string()));
        }
    }
    Some(out)
}

/// The hook's program and subcommand, for messages: `nvidia-cdi-hook update-ldcache`.
fn program_of(h: &Hook) -> String {
    let program = Path::new(&h.path)
        .file_name()
        .map_or(h.path.clone(), |n| n.to_string_lossy().into_owned());
    let sub = h
        .args
        .iter()
        .skip(1)
        .find(|a| !a.starts_with('-') && *a != "hook");
    match sub {
        Some(s) => format!("{program} {s}"),
        None => program,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libraries_keep_their_place_below_the_library_directory() {
        for (path, rel) in [
            ("/usr/lib/x86_64-linux-gnu/libcuda.so.1", "libcuda.so.1"),
            (
                "/usr/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.1",
                "vdpau/libvdpau_nvidia.so.1",
            ),
            ("/nix/store/x-nvidia/lib/libcuda.so", "libcuda.so"),
            ("/usr/lib/libVendor.so.0", "libVendor.so.0"),
            ("/opt/odd/libX.so", "libX.so"),
        ] {
            assert_eq!(below_library_dir(Path::new(path)), Path::new(rel), "{path}");
        }
    }

    #[test]
    fn relative_or_unexpressible_spec_paths_are_refused() {
        assert!(unusable(&["/dev/nvidia0", "/dev/nvidia0"]).is_none());
        for bad in ["dev/nvidia0", "/dev/a=b", "/dev/a\nb"] {
            assert!(unusable(&["/dev/ok", bad]).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn what_never_enters_is_recognised() {
        for name in [
            "libc.so.6",
            "libstdc++.so.6",
            "ld-linux-x86-64.so.2",
            "libgcc_s.so.1",
        ] {
            assert!(is_host_runtime(name), "{name}");
        }
        for name in ["libcuda.so.1", "libcudart.so.12", "libnvidia-ml.so.1"] {
            assert!(!is_host_runtime(name), "{name}");
        }
        assert!(is_fhs_program(Path::new("/usr/bin/nvidia-smi")));
        assert!(!is_fhs_program(Path::new("/usr/bin/x/nvidia-smi")));
    }

    #[test]
    fn create_symlinks_links_are_read_in_both_spellings() {
        let h = Hook {
            hook_name: "createContainer".into(),
            path: "/usr/bin/nvidia-cdi-hook".into(),
            args: [
                "nvidia-cdi-hook",
                "create-symlinks",
                "--link",
                "libcuda.so.1::/usr/lib/x/libcuda.so",
                "--link=a::/b",
            ]
            .map(String::from)
            .to_vec(),
            ..Hook::default()
        };
        assert_eq!(
            create_symlinks(&h).unwrap(),
            [
                (
                    "libcuda.so.1".to_string(),
                    "/usr/lib/x/libcuda.so".to_string()
                ),
                ("a".to_string(), "/b".to_string())
            ]
        );
        assert_eq!(program_of(&h), "nvidia-cdi-hook create-symlinks");
        let ld = Hook {
            args: ["nvidia-ctk", "hook", "update-ldcache"]
                .map(String::from)
                .to_vec(),
            path: "/usr/bin/nvidia-ctk".into(),
            ..Hook::default()
        };
        assert!(create_symlinks(&ld).is_none());
        assert_eq!(program_of(&ld), "nvidia-ctk update-ldcache");
        assert!(CdiEdit::Hook {
            hook_name: "x".into(),
            program: program_of(&ld)
        }
        .why()
        .starts_with("not needed"));
    }
}
