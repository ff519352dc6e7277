//! The CDI planner: what the specs of a rule's CDI devices list (scanned by
//! [`crate::scan::cdi`]) as exposures, through the same symlink and root rules as every other
//! path; what must never enter a sandbox, skipped with the reason; and every edit a pre-build
//! hook cannot carry out, listed in [`Decision::not_carried_out`].
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
//!
//! [`edits`] holds the typed reasons (what an exposure is, what was not carried out);
//! [`classify`] what a spec's entry is (a host runtime, an FHS program, a data file, a
//! `create-symlinks` link).

mod classify;
mod edits;
mod lease;

pub(crate) use edits::{CdiEdit, CdiItem, NotCarriedOut};

use super::{Decision, NodeFault, ProblemKind, Reason, Skip, Skipped};
use crate::cdi::spec::{DeviceNode, Mount};
use crate::cdi::ContainerEdits;
use crate::config::{Config, DriverConfig};
use crate::discover::host;
use crate::scan::cdi::{below_library_dir, host_path, is_library_name};
use crate::scan::{CdiDevice, CdiView, DriverView, HostView};
use crate::symlinks::{self, Node, Space};
use classify::{
    create_symlinks, data_file_place, is_fhs_program, is_host_runtime, program_of, unusable,
};
use std::path::{Path, PathBuf};

impl Decision {
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
            let skip = Skip::new(e.path().display(), Skipped::CdiSpec(e.clone()));
            if !self.skipped.contains(&skip) {
                self.skipped.push(skip);
            }
        }
        let default_driver = DriverConfig::default();
        let place = Place {
            rule,
            link: symlinks::normalize(&driver.map_or(&default_driver, |d| &d.source).link),
            link_present: driver.is_some_and(|d| d.link_present),
            driver_binds_libraries: driver.is_some_and(|d| d.host_libraries.is_some()),
            config,
            view,
        };
        for d in &cdi.devices {
            match &d.found {
                Ok(found) => {
                    let (parts, unowned) =
                        lease::parts(d.name.as_str(), found, config.gpus_per_build > 0);
                    for path in unowned {
                        self.skip(
                            path,
                            Skipped::CdiUnowned(
                                d.name.as_str().to_owned(),
                                found.spec.to_path_buf(),
                                config.gpus_per_build,
                            ),
                        );
                    }
                    for part in &parts {
                        self.add_cdi_device(&place, part, found);
                    }
                }
                Err(error) => self.add_problem_of(
                    rule,
                    ProblemKind::CdiLookup(error.clone(), cdi.hint.clone()),
                ),
            }
        }
    }

    /// Plans one part of a device (the whole device without leases): its device nodes, its
    /// mounts and its `create-symlinks` links as exposures (or skips and problems), and the
    /// edits a pre-build hook cannot carry out.
    fn add_cdi_device(&mut self, at: &Place<'_>, part: &lease::Part, found: &CdiDevice) {
        let (mut pending, links) = unsupported_edits(&part.edits);
        for n in &part.edits.device_nodes {
            self.add_cdi_device_node(at, part, found, n);
        }
        for m in &part.edits.mounts {
            self.add_cdi_mount(at, part, found, m);
        }
        for (target, link) in links {
            pending.extend(self.add_cdi_link(at, part, found, &target, &link));
        }
        for edit in pending {
            let why = edit.why();
            let entry = NotCarriedOut {
                rule: at.rule.to_string(),
                device: part.device.clone(),
                gpu: part.gpu,
                edit,
                why,
            };
            if !self.not_carried_out.contains(&entry) {
                self.not_carried_out.push(entry);
            }
        }
    }

    /// Exposes one of a device's nodes, a character device, required: a spec that names an
    /// unusable path, or a node that cannot be followed, is not a character device or cannot
    /// be said in Nix's protocol, is a problem.
    fn add_cdi_device_node(
        &mut self,
        at: &Place<'_>,
        part: &lease::Part,
        found: &CdiDevice,
        n: &DeviceNode,
    ) {
        let device = part.device.clone();
        let host = n.host_path.as_deref().unwrap_or(&n.path);
        if let Some(why) = unusable(&[&n.path, host]) {
            return self.add_problem_of(at.rule, ProblemKind::CdiSpecNode(device, why));
        }
        let inside = symlinks::normalize(Path::new(&n.path));
        let outside = host_path(host, at.config);
        let fault = match self.follow(&inside, &outside, Space::Literal, at.view) {
            Err(e) => NodeFault::Unusable(e),
            Ok(chain) if chain.target != Node::CharDevice => NodeFault::NotCharDevice(outside),
            Ok(chain) => match super::devices::unexpressible(&chain.hops) {
                Some(bad) => NodeFault::Unexpressible(bad),
                None => {
                    let reason = cdi_reason(at, part, found, CdiItem::DeviceNode);
                    return self.add_chain(chain.hops, reason);
                }
            },
        };
        self.add_problem_of(at.rule, ProblemKind::CdiNode(device, inside, fault));
    }

    /// Exposes one of a device's bind mounts where the build can use it: a library at the
    /// driver link (under its name and its soname) unless the driver link or the driver
    /// planner brings it, a data file also under the link's `share`, anything else at its
    /// `containerPath`; the host's C/C++ runtime and FHS programs are skipped.
    fn add_cdi_mount(&mut self, at: &Place<'_>, part: &lease::Part, found: &CdiDevice, m: &Mount) {
        if m.kind.as_ref().is_some_and(|k| k.as_str() != "bind") {
            return;
        }
        let device = part.device.clone();
        let inside = symlinks::normalize(Path::new(&m.container_path));
        let outside = host_path(&m.host_path, at.config);
        if let Some(why) = unusable(&[&m.container_path, &m.host_path]) {
            let why = Skipped::CdiMountPath(device, why);
            return self.skip(m.container_path.clone(), why);
        }
        let name = inside.file_name().unwrap_or_default().to_string_lossy();
        if is_host_runtime(&name) {
            return self.skip(inside.display(), Skipped::CdiHostRuntime(device));
        }
        if is_fhs_program(&inside) {
            let dir = inside.parent().unwrap_or(Path::new("/")).to_path_buf();
            return self.skip(inside.display(), Skipped::CdiFhsProgram(device, dir));
        }
        if is_library_name(&name) {
            if at.link_present {
                let link = at.link.clone();
                return self.skip(inside.display(), Skipped::CdiDriverLink(device, link));
            }
            if at.driver_binds_libraries && host::driver_library_stem(&name).is_some() {
                // The driver planner binds it (the host driver comes from the spec).
                return;
            }
            let rel = below_library_dir(&inside);
            let soname = found.sonames.get(&outside);
            let names = std::iter::once(rel.clone()).chain(
                soname
                    .filter(|s| Some(s.as_str()) != rel.file_name().and_then(|f| f.to_str()))
                    .map(|s| rel.with_file_name(s)),
            );
            for rel in names {
                let inside = at.link.join("lib").join(rel);
                let reason = cdi_reason(at, part, found, CdiItem::Library);
                self.add_optional_host_path(at.rule, &inside, &outside, at.view, reason);
            }
            return;
        }
        if let Some(rel) = data_file_place(&inside) {
            let reason = cdi_reason(at, part, found, CdiItem::DataFile);
            let share = at.link.join("share").join(rel);
            self.add_optional_host_path(at.rule, &share, &outside, at.view, reason);
        }
        let reason = cdi_reason(at, part, found, CdiItem::Mount);
        self.add_optional_host_path(at.rule, &inside, &outside, at.view, reason);
    }

    /// Makes a `create-symlinks` link at the driver link when it names a library, by exposing
    /// the file its target names there; another link is returned, as not carried out.
    fn add_cdi_link(
        &mut self,
        at: &Place<'_>,
        part: &lease::Part,
        found: &CdiDevice,
        target: &str,
        link: &str,
    ) -> Option<CdiEdit> {
        let link_path = symlinks::normalize(Path::new(link));
        let name = link_path.file_name().unwrap_or_default().to_string_lossy();
        let target_path =
            symlinks::normalize(&link_path.parent().unwrap_or(Path::new("/")).join(target));
        // The target is a mounted file, or the soname link ldconfig makes to one.
        let mounted = found.edits.mounts.iter().find(|m| {
            let path = symlinks::normalize(Path::new(&m.container_path));
            path == target_path
                || (path.parent() == target_path.parent()
                    && found
                        .sonames
                        .get(&host_path(&m.host_path, at.config))
                        .map(Path::new)
                        == target_path.file_name().map(Path::new))
        });
        let (true, Some(m)) = (is_library_name(&name) && !at.link_present, mounted) else {
            return Some(CdiEdit::Link {
                link: link.to_string(),
                target: target.to_string(),
            });
        };
        let inside = at.link.join("lib").join(below_library_dir(&link_path));
        let reason = cdi_reason(at, part, found, CdiItem::Link);
        let outside = host_path(&m.host_path, at.config);
        self.add_optional_host_path(at.rule, &inside, &outside, at.view, reason);
        None
    }
}

/// The reason of an exposure `item` of a device's part.
fn cdi_reason(at: &Place<'_>, part: &lease::Part, found: &CdiDevice, item: CdiItem) -> Reason {
    Reason::Cdi {
        rule: at.rule.to_string(),
        device: part.device.clone(),
        spec: found.spec.clone(),
        item,
        gpu: part.gpu,
    }
}

/// The edits of `edits` a pre-build hook cannot carry out (environment, extra groups, node
/// attributes, mount options and types, hooks other than `create-symlinks`), and the
/// `(target, link)` pairs its `create-symlinks` hooks ask for.
fn unsupported_edits(edits: &ContainerEdits) -> (Vec<CdiEdit>, Vec<(String, String)>) {
    let mut pending: Vec<CdiEdit> = Vec::new();
    for value in &edits.env {
        pending.push(CdiEdit::Env {
            value: value.clone(),
        });
    }
    if !edits.additional_gids.is_empty() {
        pending.push(CdiEdit::AdditionalGids {
            gids: edits.additional_gids.clone(),
        });
    }
    for key in edits.other.keys() {
        pending.push(CdiEdit::Other { key: key.clone() });
    }
    for n in &edits.device_nodes {
        if n.uid.is_some() || n.gid.is_some() || n.file_mode.is_some() || n.permissions.is_some() {
            pending.push(CdiEdit::NodeAttributes {
                path: n.path.clone(),
            });
        }
    }
    for m in &edits.mounts {
        if !m.options.is_empty() {
            pending.push(CdiEdit::MountOptions {
                container_path: m.container_path.clone(),
                options: m.options.clone(),
            });
        }
        if let Some(kind) = m.kind.as_ref().filter(|k| k.as_str() != "bind") {
            pending.push(CdiEdit::MountType {
                container_path: m.container_path.clone(),
                kind: kind.clone(),
            });
        }
    }
    let mut links = Vec::new();
    for h in &edits.hooks {
        match create_symlinks(h) {
            Some(l) => links.extend(l),
            None => pending.push(CdiEdit::Hook {
                hook_name: h.hook_name.clone(),
                program: program_of(h),
            }),
        }
    }
    (pending, links)
}

/// Where a rule's CDI libraries go, whether the driver planner takes them, and the
/// configuration and host the rule is planned under.
struct Place<'a> {
    rule: &'a str,
    link: PathBuf,
    link_present: bool,
    driver_binds_libraries: bool,
    config: &'a Config,
    view: &'a HostView,
}
