//! Act: the only steps that change the host. Store closures (computed with `nix-store` and
//! cached), the GPU lease, and the manifest file.
//!
//! Takes the [`Decision`] of [`crate::plan::decide`] and returns what was [`Granted`]: that
//! decision, completed (the closures' members added, only the leased GPUs' nodes kept, the
//! manifest exposed, act's skips and problems after the decision's), with what act added:
//! the closure counts, the slots and their lease guard, the `/sys` tree and the manifest to
//! write. Writes the closure
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
use crate::plan::{self, Decision, Exposure, PlannedManifest, ProblemKind, Skipped};
use crate::request::Request;
use crate::slot::{self, Slot};
use crate::sysfs::{self, TreeBind, TreeGuard};
use cuda_sandbox_manifest::DriverManifest;
use serde::Serialize;
use std::collections::BTreeSet;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
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

/// What a build was granted: the decision, completed by act, and what act added. Empty for an
/// untagged or refused request.
#[derive(Debug, Default)]
pub(crate) struct Granted {
    /// The decision, completed: its exposures with the closures' members, only the leased
    /// GPUs' nodes, the `/sys` tree and the manifest (sorted by inside path, nothing nested in
    /// another entry); act's own skips and problems after the decision's.
    pub decision: Decision,
    /// How many closures came from the cache, and how many were computed.
    pub closures: Closures,
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

/// Where the store closures act added came from.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub(crate) struct Closures {
    /// How many came from the cache.
    #[serde(rename = "closures_cached")]
    pub cached: usize,
    /// How many were computed with `nix-store`.
    #[serde(rename = "closures_computed")]
    pub computed: usize,
}

/// `explain --json`'s `plan`: the decision's lists, the closure counts, the driver, the
/// manifest and the lease, in the order they have always been printed.
#[derive(Serialize)]
struct GrantedJson<'a> {
    #[serde(flatten)]
    decision: &'a Decision,
    #[serde(flatten)]
    closures: Closures,
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
            decision: &self.decision,
            closures: self.closures,
            driver: &self.decision.driver,
            driver_facts: &self.decision.driver_facts,
            driver_choice: &self.decision.driver_choice,
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
pub(crate) fn act(decision: Decision, build: &Request, config: &Config, mode: Mode) -> Granted {
    let (roots, demand, binds) = (
        decision.closure_roots.clone(),
        decision.gpu_demand.clone(),
        decision.sysfs.clone(),
    );
    let mut granted = Granted {
        decision,
        ..Granted::default()
    };
    let name = manifest_file::name_for(build.chroot.as_deref());
    let tree_name = sysfs::tree_name(&name);
    let tree = plan::sysfs_exposures(&binds, tree_name, &config.runtime_dir);
    let before = granted.decision.exposures.len();
    granted.decision.exposures.extend(tree);
    // The closures of the store paths: from the cache, else from `nix-store`.
    let cache = ClosureCache {
        dir: config.closure_cache.clone(),
        store_dir: config.store_dir.clone(),
        nix_store: config.nix_store.clone(),
        search_path: build.search_path.clone(),
    };
    // A user running `explain` cannot (and need not) use root's cache.
    let uncached = mode == Mode::Explain && !nix::unistd::geteuid().is_root();
    for root in &roots {
        match cache.closure(root, !uncached) {
            Ok(closure) => {
                if closure.from_cache {
                    granted.closures.cached += 1;
                } else {
                    granted.closures.computed += 1;
                }
                granted
                    .decision
                    .add_closure(root, closure.members, &config.store_dir);
            }
            // Not the hook's verdict: the hook runs as root.
            Err(e) if uncached => granted
                .decision
                .skip(root.display(), Skipped::ClosureNotShown(e)),
            Err(e) => granted.decision.add_problem(ProblemKind::Closure(e)),
        }
    }
    // The tree or a closure added exposures: prune again.
    if granted.decision.exposures.len() > before {
        granted.decision.prune_nested();
    }
    if let (true, Some(demand)) = (granted.decision.problems.is_empty(), &demand) {
        lease(&mut granted, demand, build, config, mode);
    }
    sysfs_tree(&mut granted, &binds, tree_name, build, config, mode);
    let manifest = granted
        .decision
        .plan_manifest(&granted.slots, build, config, &name);
    granted.manifest = Some(manifest);
    granted
}

/// The manifest file could not be written: the file, and why.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the manifest {path}: {1}", path = .0.display())]
pub struct ManifestWriteError(pub PathBuf, pub std::io::Error);

/// Writes the grant's manifest in the modes that write one, the hook's and `exec`'s (the
/// pipeline calls it once the grant has no problems and its answer could be rendered).
pub(crate) fn write_manifest(
    granted: &Granted,
    config: &Config,
    mode: Mode,
) -> Result<(), ManifestWriteError> {
    match &granted.manifest {
        Some(m) if matches!(mode, Mode::Hook | Mode::Exec) => {
            manifest_file::write(m, &config.runtime_dir)
                .map_err(|error| ManifestWriteError(m.outside.clone(), error))
        }
        _ => Ok(()),
    }
}

/// Leases `demand` to the build (hook mode), or shows which slots a build would get now, and
/// keeps only those slots' nodes.
fn lease(
    granted: &mut Granted,
    demand: &plan::GpuDemand,
    build: &Request,
    config: &Config,
    mode: Mode,
) {
    let leases = Leases::new(&config.runtime_dir);
    let (picked, guard) = match (mode, build.chroot.as_deref()) {
        (Mode::Hook, Some(chroot)) => {
            let Some(holder) = Holder::parent() else {
                return granted.decision.add_problem(ProblemKind::NoLeaseHolder);
            };
            let lease_req = LeaseRequest {
                slots: &demand.slots,
                count: demand.count,
                chroot,
                derivation: &build.derivation_name(),
                wait: Duration::from_secs(config.lease_wait_seconds),
            };
            match leases.acquire_guarded(&lease_req, demand.fit.as_ref(), holder) {
                Ok(guard) => (guard.slots().to_vec(), Some(guard)),
                Err(e) => {
                    return granted
                        .decision
                        .add_problem(ProblemKind::Lease(e.to_string()))
                }
            }
        }
        _ => match leases.preview_fitting(&demand.slots, demand.count, demand.fit.as_ref()) {
            Ok(p) => (p, None),
            Err(e) => {
                granted.decision.skip(
                    format!("{} GPU lease(s)", demand.count),
                    Skipped::NoneFree(config.lease_wait_seconds, e.to_string()),
                );
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
        &mut granted.decision,
    );
    granted.slots = picked;
    granted.lease = guard;
}

/// Hook mode: sweeps the trees of ended builds, then makes this build's (a failure is a
/// problem: the build does not start without what its rule asks for). `exec` makes none.
fn sysfs_tree(
    granted: &mut Granted,
    binds: &[TreeBind],
    name: &str,
    build: &Request,
    config: &Config,
    mode: Mode,
) {
    let chroot = match (mode, build.chroot.as_deref()) {
        (Mode::Hook, Some(chroot)) => chroot,
        (Mode::Explain, _) => return,
        _ => {
            let why = "exec makes no /sys tree: run the build under Nix";
            return granted.decision.drop_sysfs(why);
        }
    };
    let _ = sysfs::sweep(&config.runtime_dir);
    if binds.is_empty() || !granted.decision.problems.is_empty() {
        return;
    }
    let leased = granted.lease.is_some();
    // The PCI part of the build's tree: with `topology`, the PCI devices of the GPUs whose
    // `/dev/nvidia<N>` the build gets (after the lease kept only the leased ones); with `kfd`,
    // those of the DRM nodes it gets, and their `/sys/dev/char` links. A device that cannot be
    // found is left out, saying why (the build still gets the rest of its tree).
    let asked = |part: &[(&str, &str)]| binds.iter().any(|b| b.mount_point == part[0].1);
    let mut gpus = Vec::new();
    let mut drm = Vec::new();
    if asked(&sysfs::TOPOLOGY) {
        let exposures = granted.decision.exposures.iter();
        let minors = plan::gpu_numbers(exposures.map(|e| e.inside.as_path()));
        for found in sysfs::discover(&config.host_root) {
            match found {
                Ok(gpu) if minors.contains(&gpu.minor) => gpus.push(gpu),
                Ok(_) => {}
                Err(e) => granted
                    .decision
                    .skip("/sys/devices/pci*", Skipped::PciDevice(e.to_string())),
            }
        }
    }
    if asked(&sysfs::KFD) {
        // The minors of the DRM nodes (character devices of major 226) among the exposures,
        // from the nodes themselves, in order.
        let minors: BTreeSet<u32> = (granted.decision.exposures.iter())
            .filter(|e| e.inside.starts_with("/dev/dri"))
            .filter_map(|e| std::fs::symlink_metadata(&e.outside).ok())
            .filter(|m| m.file_type().is_char_device())
            .filter(|m| nix::sys::stat::major(m.rdev()) == sysfs::DRM_MAJOR)
            .map(|m| nix::sys::stat::minor(m.rdev()) as u32)
            .collect();
        let minors: Vec<u32> = minors.into_iter().collect();
        for found in sysfs::discover_drm(&config.host_root, &minors) {
            match found {
                Ok(node) => {
                    gpus.push(node.gpu.clone());
                    drm.push(node);
                }
                Err(e) => granted
                    .decision
                    .skip("/sys/dev/char/226:*", Skipped::PciDevice(e.to_string())),
            }
        }
    }
    let mut pci = sysfs::PciLayout::new(&gpus, &config.host_root);
    pci.add_drm_links(&drm);
    let tree = config.runtime_dir.join(sysfs::TREES_DIR).join(name);
    let rule = binds[0].rule.clone();
    let parts = sysfs::TreeParts { binds, pci: &pci };
    match sysfs::build(parts, name, &config.runtime_dir, chroot, leased) {
        Ok(guard) => {
            granted.sysfs = Some(guard);
            granted
                .decision
                .exposures
                .extend(pci.exposed.iter().map(|(inside, top)| Exposure {
                    inside: inside.clone(),
                    outside: tree.join(top),
                    reason: plan::Reason::Sysfs { rule: rule.clone() },
                }));
        }
        Err(e) => granted
            .decision
            .add_problem(ProblemKind::Sysfs(e.to_string())),
    }
}
