//! Act: the only steps that change the host. Store closures (computed with `nix-store` and
//! cached), the GPU lease, and the manifest file.
//!
//! Takes the [`Decision`] of [`crate::plan::decide`] as it is and returns what was
//! [`Granted`]: the exposures (the decision's, with the closures' members, only the leased
//! GPUs' nodes, and the manifest), what was left out and what stops the build (the
//! decision's, then act's own), the lease guard, and the manifest to write. Writes the closure
//! cache, the lease files and the manifest, each in a state directory that is verified on
//! every run (root-owned, not writable by group or others, not a symlink; see
//! [`crate::statedir`]). Computing a closure reads the store (`nix-store`, and an `lstat` of
//! each member) and may fill the cache, so it is done here, not in the scan. `explain` acts
//! without a lease (it shows which GPUs a build would get) and without writing a manifest;
//! the [`Mode`] says which.

use crate::closure::ClosureCache;
use crate::config::Config;
use crate::discover::choice::{DriverChoice, HostDriverFacts};
use crate::lease::{Holder, LeaseGuard, LeaseRequest, Leases};
use crate::manifest_file;
use crate::plan::{
    self, closure_members, plan_manifest, Decision, Exposure, NotCarriedOut, PlannedManifest,
    Problem, ProblemKind, Skip, Skipped,
};
use crate::request::BuildContext;
use crate::slot::{self, Slot};
use crate::sysfs::{self, TreeBind, TreeGuard};
use cuda_sandbox_manifest::DriverManifest;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// Who runs the pipeline, and so what act may change on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The pre-build hook: lease GPUs to the build in its chroot and write its manifest.
    Hook,
    /// `explain`: show what a build would get; no lease, no manifest.
    Explain,
    /// `exec`: no lease (its private root cannot carry one); the manifest is written, since
    /// the command may be the runner, which reads it.
    Exec,
}

impl Mode {
    /// Whether this mode writes the build's manifest.
    pub(crate) fn writes_manifest(self) -> bool {
        matches!(self, Mode::Hook | Mode::Exec)
    }
}

/// What a build was granted: the decision completed by act. Empty for an untagged or refused
/// request.
#[derive(Debug, Default)]
pub(crate) struct Granted {
    /// Names of the rules that matched.
    pub rules: Vec<String>,
    /// What the build gets, sorted by inside path, nothing nested in another entry.
    pub exposures: Vec<Exposure>,
    /// What was considered and left out.
    pub skipped: Vec<Skip>,
    /// What CDI specs ask for that a pre-build hook cannot carry out, each with the reason.
    pub not_carried_out: Vec<NotCarriedOut>,
    /// What stops the build from getting a working GPU; non-empty means a tagged build fails.
    pub problems: Vec<Problem>,
    /// What the hook warns about on stderr although the build goes on.
    pub warnings: Vec<String>,
    /// How many closures came from the cache.
    pub closures_cached: usize,
    /// How many closures were computed with `nix-store`.
    pub closures_computed: usize,
    /// The driver the build should load (when a rule configures a driver).
    pub driver: Option<DriverManifest>,
    /// What is known of the host driver.
    pub driver_facts: Option<HostDriverFacts>,
    /// The compat decision, with every rejected candidate.
    pub driver_choice: Option<DriverChoice>,
    /// The manifest to write for the build, and where (outside).
    pub manifest: Option<PlannedManifest>,
    /// With `gpus_per_build > 0`: the slots (whole GPUs, or one MIG instance) leased to this
    /// build alone, or for `explain` and `exec` the ones a build would get now. Empty when
    /// every build gets every GPU.
    pub slots: Vec<Slot>,
    /// The lease that holds `slots` (hook mode): ended when dropped, unless committed once the
    /// build may start.
    pub lease: Option<LeaseGuard>,
    /// The build's tree of read-only `/sys` binds (hook mode, a rule with `sysfs`): removed
    /// when dropped, unless committed with the lease.
    pub sysfs: Option<TreeGuard>,
}

impl Granted {
    /// Keeps the lease for the build (the answer for Nix was rendered and the manifest
    /// written): it is no longer ended when the grant is dropped.
    pub(crate) fn commit(&mut self) {
        if let Some(lease) = &mut self.lease {
            lease.commit();
        }
        if let Some(tree) = &mut self.sysfs {
            tree.commit();
        }
    }
}

/// `explain --json`'s `plan`: the grant, field for field as it has always been printed.
#[derive(Serialize)]
struct GrantedJson<'a> {
    rules: &'a [String],
    exposures: &'a [Exposure],
    skipped: &'a [Skip],
    not_carried_out: &'a [NotCarriedOut],
    problems: &'a [Problem],
    warnings: &'a [String],
    closures_cached: usize,
    closures_computed: usize,
    driver: &'a Option<DriverManifest>,
    driver_facts: &'a Option<HostDriverFacts>,
    driver_choice: &'a Option<DriverChoice>,
    manifest: &'a Option<PlannedManifest>,
    leased_gpus: Vec<u32>,
    leased_mig: Option<crate::mig::InstanceId>,
    lease_taken: bool,
}

impl Serialize for Granted {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        GrantedJson {
            rules: &self.rules,
            exposures: &self.exposures,
            skipped: &self.skipped,
            not_carried_out: &self.not_carried_out,
            problems: &self.problems,
            warnings: &self.warnings,
            closures_cached: self.closures_cached,
            closures_computed: self.closures_computed,
            driver: &self.driver,
            driver_facts: &self.driver_facts,
            driver_choice: &self.driver_choice,
            manifest: &self.manifest,
            leased_gpus: slot::gpus(&self.slots),
            leased_mig: slot::mig(&self.slots),
            lease_taken: self.lease.is_some(),
        }
        .serialize(s)
    }
}

/// Grants `decision`: adds the closures of its store paths, prunes nested paths, leases (or
/// previews) its GPUs and plans the manifest. Problems met here are added after the
/// decision's.
pub(crate) fn act(
    decision: Decision,
    build: &BuildContext<'_>,
    config: &Config,
    mode: Mode,
) -> Granted {
    let Decision {
        rules,
        exposures,
        skipped,
        not_carried_out,
        problems,
        warnings,
        driver,
        driver_facts,
        driver_choice,
        closure_roots,
        gpu_demand,
        sysfs: sysfs_binds,
        ..
    } = decision;
    let mut granted = Granted {
        rules,
        exposures,
        skipped,
        not_carried_out,
        problems,
        warnings,
        driver,
        driver_facts,
        driver_choice,
        ..Granted::default()
    };
    let name = manifest_file::name_for(build.chroot);
    let tree_name = sysfs::tree_name(&name);
    let tree = plan::sysfs_exposures(&sysfs_binds, tree_name, &config.runtime_dir);
    let more = !tree.is_empty();
    granted.exposures.extend(tree);
    if add_closures(&mut granted, &closure_roots, build, config, mode) || more {
        granted.exposures =
            plan::drop_nested(std::mem::take(&mut granted.exposures), &mut granted.skipped);
    }
    if let (true, Some(demand)) = (granted.problems.is_empty(), &gpu_demand) {
        lease(&mut granted, demand, build, config, mode);
    }
    sysfs_tree(&mut granted, &sysfs_binds, tree_name, build, config, mode);
    let manifest = plan_manifest(
        &mut granted.exposures,
        &granted.rules,
        granted.driver.as_ref(),
        &granted.slots,
        build,
        config,
        &name,
    );
    granted.manifest = Some(manifest);
    granted
}

/// The manifest file could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the manifest {}: {error}", .path.display())]
pub struct ManifestWriteError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub error: std::io::Error,
}

/// Writes the grant's manifest (the pipeline calls it in the modes that write one, once the
/// grant has no problems and its answer could be rendered).
pub(crate) fn write_manifest(granted: &Granted, config: &Config) -> Result<(), ManifestWriteError> {
    match &granted.manifest {
        Some(m) => {
            manifest_file::write(m, &config.runtime_dir).map_err(|error| ManifestWriteError {
                path: m.outside.clone(),
                error,
            })
        }
        None => Ok(()),
    }
}

/// Adds the closures of `roots` to `granted`; whether any member was added (the exposures
/// then need pruning again).
fn add_closures(
    granted: &mut Granted,
    roots: &[PathBuf],
    build: &BuildContext<'_>,
    config: &Config,
    mode: Mode,
) -> bool {
    if roots.is_empty() {
        return false;
    }
    let cache = ClosureCache {
        dir: config.closure_cache.clone(),
        store_dir: config.store_dir.clone(),
        nix_store: config.nix_store.clone(),
        search_path: build.search_path.map(ToOwned::to_owned),
    };
    // A user running `explain` cannot (and need not) use root's cache.
    let uncached = mode == Mode::Explain && !nix::unistd::geteuid().is_root();
    let before = granted.exposures.len();
    for root in roots {
        let closure = if uncached {
            cache.closure_uncached(root)
        } else {
            cache.closure(root)
        };
        match closure {
            Ok(closure) => {
                if closure.from_cache {
                    granted.closures_cached += 1;
                } else {
                    granted.closures_computed += 1;
                }
                closure_members(
                    root,
                    closure.members,
                    &config.store_dir,
                    &granted.rules,
                    &mut granted.exposures,
                    &mut granted.problems,
                );
            }
            // Not the hook's verdict: the hook runs as root.
            Err(e) if uncached => granted.skipped.push(Skip::new(
                root.display().to_string(),
                Skipped::ClosureNotShown(e),
            )),
            Err(e) => granted
                .problems
                .push(Problem::new(&granted.rules, ProblemKind::Closure(e))),
        }
    }
    granted.exposures.len() > before
}

/// Leases `demand` to the build (hook mode), or shows which slots a build would get now, and
/// keeps only those slots' nodes.
fn lease(
    granted: &mut Granted,
    demand: &plan::GpuDemand,
    build: &BuildContext<'_>,
    config: &Config,
    mode: Mode,
) {
    let problem = |kind: ProblemKind| Problem::new(&granted.rules, kind);
    let leases = Leases::new(&config.runtime_dir);
    let (picked, guard) = match (mode, build.chroot) {
        (Mode::Hook, Some(chroot)) => {
            let Some(holder) = Holder::parent() else {
                let p = problem(ProblemKind::NoLeaseHolder);
                granted.problems.push(p);
                return;
            };
            let lease_req = LeaseRequest {
                slots: &demand.slots,
                count: demand.count,
                chroot,
                derivation: &build.derivation,
                wait: Duration::from_secs(config.lease_wait_seconds),
            };
            match leases.acquire_guarded(&lease_req, demand.fit.as_ref(), holder) {
                Ok(guard) => (guard.slots().to_vec(), Some(guard)),
                Err(e) => {
                    let p = problem(ProblemKind::Lease(e.to_string()));
                    granted.problems.push(p);
                    return;
                }
            }
        }
        _ => match leases.preview_fitting(&demand.slots, demand.count, demand.fit.as_ref()) {
            Ok(p) => (p, None),
            Err(e) => {
                granted.skipped.push(Skip::new(
                    format!("{} GPU lease(s)", demand.count),
                    Skipped::NoneFree {
                        wait_seconds: config.lease_wait_seconds,
                        error: e.to_string(),
                    },
                ));
                let first = demand.fit.as_ref().map_or_else(
                    || Some(demand.slots[..demand.count].to_vec()),
                    |fit| fit.choose(&demand.slots, demand.count),
                );
                (first.unwrap_or_default(), None)
            }
        },
    };
    demand.keep(
        &picked,
        guard.is_some(),
        config.gpus_per_build,
        &mut granted.exposures,
        &mut granted.skipped,
        &mut granted.not_carried_out,
    );
    granted.slots = picked;
    granted.lease = guard;
}

/// The PCI part of the build's tree: with `topology`, the PCI devices of the GPUs whose
/// `/dev/nvidia<N>` the build gets (after the lease kept only the leased ones); with `kfd`,
/// those of the DRM nodes it gets, and their `/sys/dev/char` links. A device that cannot be
/// found is left out, saying why (the build still gets the rest of its tree).
fn pci_layout(granted: &mut Granted, binds: &[TreeBind], config: &Config) -> sysfs::PciLayout {
    let asked = |part: &[(&str, &str)]| binds.iter().any(|b| b.mount_point == part[0].1);
    let mut gpus = Vec::new();
    let mut drm = Vec::new();
    if asked(&sysfs::TOPOLOGY) {
        let minors: Vec<u32> = granted
            .exposures
            .iter()
            .filter_map(|e| e.inside.to_str()?.strip_prefix("/dev/nvidia")?.parse().ok())
            .collect();
        for found in sysfs::discover(&config.host_root) {
            match found {
                Ok(gpu) if minors.contains(&gpu.minor) => gpus.push(gpu),
                Ok(_) => {}
                Err(e) => granted.skipped.push(Skip::new(
                    "/sys/devices/pci*",
                    Skipped::PciDevice(e.to_string()),
                )),
            }
        }
    }
    if asked(&sysfs::KFD) {
        for found in sysfs::discover_drm(&config.host_root, &drm_minors(&granted.exposures)) {
            match found {
                Ok(node) => {
                    gpus.push(node.gpu.clone());
                    drm.push(node);
                }
                Err(e) => granted.skipped.push(Skip::new(
                    "/sys/dev/char/226:*",
                    Skipped::PciDevice(e.to_string()),
                )),
            }
        }
    }
    let mut layout = sysfs::PciLayout::new(&gpus, &config.host_root);
    layout.add_drm_links(&drm);
    layout
}

/// The minors of the DRM nodes (character devices of major 226) among `exposures`, from the
/// nodes themselves, in order.
fn drm_minors(exposures: &[Exposure]) -> Vec<u32> {
    use std::os::unix::fs::FileTypeExt;
    use std::os::unix::fs::MetadataExt;
    let mut minors: Vec<u32> = exposures
        .iter()
        .filter(|e| e.inside.starts_with("/dev/dri"))
        .filter_map(|e| std::fs::symlink_metadata(&e.outside).ok())
        .filter(|m| m.file_type().is_char_device())
        .filter(|m| nix::sys::stat::major(m.rdev()) == sysfs::DRM_MAJOR)
        .map(|m| nix::sys::stat::minor(m.rdev()) as u32)
        .collect();
    minors.sort_unstable();
    minors.dedup();
    minors
}

/// Hook mode: sweeps the trees of ended builds, then makes this build's (a failure is a
/// problem: the build does not start without what its rule asks for). `exec` makes none.
fn sysfs_tree(
    granted: &mut Granted,
    binds: &[TreeBind],
    name: &str,
    build: &BuildContext<'_>,
    config: &Config,
    mode: Mode,
) {
    let chroot = match (mode, build.chroot) {
        (Mode::Hook, Some(chroot)) => chroot,
        (Mode::Explain, _) => return,
        _ => {
            let why = "exec makes no /sys tree: run the build under Nix";
            return plan::drop_sysfs(&mut granted.exposures, &mut granted.skipped, why);
        }
    };
    let _ = sysfs::sweep(&config.runtime_dir);
    if binds.is_empty() || !granted.problems.is_empty() {
        return;
    }
    let leased = granted.lease.is_some();
    let pci = pci_layout(granted, binds, config);
    let tree = config.runtime_dir.join(sysfs::TREES_DIR).join(name);
    let rule = binds[0].rule.clone();
    let parts = sysfs::TreeParts { binds, pci: &pci };
    match sysfs::build(parts, name, &config.runtime_dir, chroot, leased) {
        Ok(guard) => {
            granted.sysfs = Some(guard);
            granted
                .exposures
                .extend(pci.exposed.iter().map(|(inside, top)| Exposure {
                    inside: inside.clone(),
                    outside: tree.join(top),
                    reason: plan::Reason::Sysfs { rule: rule.clone() },
                }));
            granted.exposures.sort_by(|a, b| a.inside.cmp(&b.inside));
        }
        Err(e) => granted.problems.push(Problem::new(
            &granted.rules,
            ProblemKind::Sysfs(e.to_string()),
        )),
    }
}
