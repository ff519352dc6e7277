//! Decide: the request, the configuration and the host view → the [`Decision`]. Pure: reads
//! nothing but its arguments, writes nothing.
//!
//! The decision is everything a tagged build gets, each with the reason it is there, what was
//! left out and why, and what stops the build, plus what [`crate::act`] must still do: the
//! store paths whose closures it adds and the GPUs it leases. Act takes the decision as it is
//! and returns what was granted; how its findings change the exposures (closure members, the
//! leased GPUs kept, the manifest) is decided here too, purely (`grant`). [`crate::protocol`],
//! [`crate::explain`] and [`crate::exec`] render the same grant, so they cannot disagree.

mod cdi;
mod devices;
mod driver;
mod features;
mod gpus;
mod grant;
mod mig;
mod paths;
mod problem;
mod skip;
mod stale;
mod sysfs;

pub(crate) use cdi::{CdiItem, NotCarriedOut};
pub(crate) use driver::DriverSource;
pub use problem::Problem;
pub(crate) use problem::{NodeFault, ProblemKind};
pub(crate) use skip::{DrmLeft, Skip, Skipped};
pub(crate) use sysfs::sysfs_exposures;

use crate::config::Config;
use crate::discover::choice::{DriverChoice, HostDriverFacts};
use crate::mig::{Capability, InstanceId};
use crate::request::{GpusWanted, Request, Tagged};
use crate::scan::HostView;
use crate::slot::Slot;
use crate::symlinks;
use cuda_sandbox_elfkit::store_path_of;
use cuda_sandbox_manifest::{DriverManifest, Manifest};
use serde::{Serialize, Serializer};
use std::collections::BTreeSet;
use std::fmt::Display;
use std::path::{Path, PathBuf};

/// Why a path is exposed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub(crate) enum Reason {
    /// Matched a rule's device glob.
    Device {
        /// The rule.
        rule: String,
        /// The glob as configured.
        glob: String,
    },
    /// A rule's host path.
    HostPath {
        /// The rule.
        rule: String,
    },
    /// A rule's mount.
    Mount {
        /// The rule.
        rule: String,
    },
    /// A hop of a symlink chain that starts at `link` (inside path).
    SymlinkTarget {
        /// The exposed link the chain starts from.
        #[serde(serialize_with = "lossy_path")]
        link: PathBuf,
    },
    /// The NVIDIA driver.
    Driver {
        /// The rule.
        rule: String,
        /// Where the driver file or directory comes from.
        #[serde(serialize_with = "as_text")]
        source: DriverSource,
    },
    /// What a CDI spec lists for a device a rule names.
    Cdi {
        /// The rule.
        rule: String,
        /// The CDI device (`nvidia.com/gpu=all`).
        device: String,
        /// The spec file that lists it.
        #[serde(serialize_with = "lossy_path")]
        spec: PathBuf,
        /// What it is.
        item: CdiItem,
        /// With leases: the GPU whose device lists it, kept only for a build leased that GPU.
        #[serde(skip_serializing_if = "Option::is_none")]
        gpu: Option<u32>,
    },
    /// A MIG capability node of a rule's MIG source.
    Mig {
        /// The rule.
        rule: String,
        /// The capability the node grants.
        #[serde(serialize_with = "as_text")]
        capability: Capability,
    },
    /// A read-only part of the host's `/sys` (`sysfs` on a rule), bound from the build's tree.
    Sysfs {
        /// The rule.
        rule: String,
    },
    /// The manifest the runner reads.
    Manifest,
    /// In the runtime closure of an exposed store path.
    ClosureMember {
        /// The store path whose closure this belongs to.
        #[serde(serialize_with = "lossy_path")]
        of: PathBuf,
    },
}

impl Reason {
    /// Whether the exposure is a device node a rule's device glob matched, a CDI spec listed
    /// or a MIG source found: these are the build's devices (the manifest lists them, and the
    /// GPUs and MIG instances among them are leased).
    pub(crate) fn is_device(&self) -> bool {
        matches!(
            self,
            Reason::Device { .. }
                | Reason::Mig { .. }
                | Reason::Cdi {
                    item: CdiItem::DeviceNode,
                    ..
                }
        )
    }
}

/// One path the build gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Exposure {
    /// Where the build sees it.
    #[serde(serialize_with = "lossy_path")]
    pub inside: PathBuf,
    /// Where it is on the host.
    #[serde(serialize_with = "lossy_path")]
    pub outside: PathBuf,
    /// Why it is there.
    pub reason: Reason,
}

/// What decide found for one build: its answer, which act completes in what it grants
/// ([`crate::act::Granted`], which holds it). Serialized as `explain --json` prints its
/// lists; the driver is printed by the grant, after the closure counts, where it always was.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Decision {
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
    /// What the hook warns about on stderr although the build goes on (an optional device it
    /// cannot express, …).
    pub warnings: Vec<String>,
    /// The driver the build should load (when a rule configures a driver).
    #[serde(skip)]
    pub driver: Option<DriverManifest>,
    /// What is known of the host driver.
    #[serde(skip)]
    pub driver_facts: Option<HostDriverFacts>,
    /// The compat decision, with every rejected candidate.
    #[serde(skip)]
    pub driver_choice: Option<DriverChoice>,
    /// The store paths whose closures act must add.
    #[serde(skip)]
    pub closure_roots: Vec<PathBuf>,
    /// With `gpus_per_build > 0`: the slots found (whole GPUs, MIG instances) and how many
    /// this build needs, for act to lease.
    #[serde(skip)]
    pub gpu_demand: Option<GpuDemand>,
    /// The read-only binds of `/sys` the build's tree holds, when a rule asks for some
    /// ([`crate::sysfs`]); act names the tree, makes it, and exposes it.
    #[serde(skip)]
    pub sysfs: Vec<crate::sysfs::TreeBind>,
    /// Where symlinks may lead (the store and the configured roots).
    #[serde(skip)]
    symlink_roots: Vec<PathBuf>,
}

/// The slots a build must be leased before it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GpuDemand {
    /// The slots it may be given: each GPU the plan found whole, or its MIG instances when
    /// it has some; only whole GPUs when it needs more than one.
    pub slots: Vec<Slot>,
    /// How many slots the build needs.
    pub count: usize,
    /// The build's `cuda-sm-*` features and the GPUs' capabilities, when an inventory gives
    /// them: the slots leased must satisfy the features together.
    pub fit: Option<crate::fit::Fit>,
    /// The GPU of each DRM node found, or why it cannot be told: a build keeps only its
    /// whole GPUs' DRM nodes ([`GpuDemand::keep`]).
    pub drm: crate::scan::DrmOwners,
}

/// The manifest of a tagged build and the host file it is written to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PlannedManifest {
    /// The file outside the sandbox (bound read-only at
    /// [`cuda_sandbox_manifest::MANIFEST_PATH`] inside).
    #[serde(serialize_with = "lossy_path")]
    pub outside: PathBuf,
    /// Its content.
    pub content: Manifest,
}

/// The decision for `req`, `tagged` (under its configuration), on the host `view`: devices,
/// paths, mounts and the driver, each with its reason, nested paths pruned, the closures to add
/// and the GPUs to lease. Pure.
pub(crate) fn decide(req: &Request, tagged: &Tagged, view: &HostView) -> Decision {
    let config = &tagged.config;
    let mut plan = Decision {
        rules: view.rules.iter().map(|r| r.name.clone()).collect(),
        symlink_roots: std::iter::once(config.store_dir.clone())
            .chain(config.symlink_roots.iter().cloned())
            .collect(),
        ..Decision::default()
    };
    for rule in &view.rules {
        for device in &rule.devices {
            plan.add_device(&rule.name, device, config, view);
        }
        for path in &rule.paths {
            plan.add_configured_path(&rule.name, path, config, view);
        }
        if let Some(cdi) = &rule.cdi {
            plan.add_cdi(&rule.name, cdi, rule.driver.as_ref(), config, view);
        }
        if let Some(mig) = &rule.mig {
            plan.add_mig(&rule.name, mig, config, view);
        }
        // The first matched rule with a driver gives the build its driver.
        if let Some(driver) = rule.driver.as_ref().filter(|_| plan.driver.is_none()) {
            plan.add_driver(&rule.name, driver, config, view);
        }
        if let Some(sysfs) = rule.sysfs {
            plan.add_sysfs(&rule.name, sysfs, config);
        }
    }
    plan.prune_nested();
    plan.closure_roots = plan
        .exposures
        .iter()
        .filter_map(|e| store_path_of(&e.outside, &config.store_dir))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if plan.problems.is_empty() {
        plan.gpu_demand(config, tagged.gpus.as_ref(), &view.drm);
    }
    let required = req.required_gpu_features();
    if plan.problems.is_empty() && !required.is_empty() {
        plan.add_features(&required, view.inventory.as_ref());
    }
    plan
}

impl Decision {
    /// With `gpus_per_build > 0`: the GPUs found and how many the build needs (its
    /// `cudaSandboxGpus`, else `gpus_per_build`, never above `max_gpus_per_build`).
    fn gpu_demand(
        &mut self,
        config: &Config,
        wanted: Option<&GpusWanted>,
        drm: &crate::scan::DrmOwners,
    ) {
        if config.gpus_per_build == 0 {
            if let Some(v) = wanted {
                self.skip(
                    format!("{} = {:?}", crate::drv::GPUS_ATTR, v.text),
                    Skipped::GpusIgnored,
                );
            }
            return;
        }
        let gpus = gpu_numbers(devices(&self.exposures).map(|e| e.inside.as_path()));
        if gpus.is_empty() {
            return;
        }
        // The MIG instances whose compute-instance node the plan exposes, in order.
        let instances: BTreeSet<InstanceId> = (self.exposures.iter())
            .filter_map(|e| match &e.reason {
                Reason::Mig {
                    capability: Capability::Ci(id),
                    ..
                } => Some(*id),
                _ => None,
            })
            .collect();
        // Each GPU's MIG instances, or the GPU whole when it has none.
        let mut slots = Vec::new();
        for &g in &gpus {
            let (before, on) = (slots.len(), instances.iter().filter(|i| i.gpu == g));
            slots.extend(on.map(|&i| Slot::Mig(i)));
            if slots.len() == before {
                slots.push(Slot::Gpu(g));
            }
        }
        let counted = gpus::gpu_count(
            wanted,
            config.gpus_per_build,
            config.max_gpus_per_build,
            slots.len(),
        )
        .and_then(|count| gpus::one_mig_instance(count, &slots, wanted).map(|s| (count, s)));
        match counted {
            Ok((count, slots)) => {
                self.gpu_demand = Some(GpuDemand {
                    slots,
                    count,
                    fit: None,
                    drm: drm.clone(),
                })
            }
            Err(e) => self.add_problem(ProblemKind::GpuCount(e)),
        }
    }

    /// Adds a problem of the build as a whole: it concerns every rule that matched.
    pub(crate) fn add_problem(&mut self, kind: ProblemKind) {
        self.problems.push(Problem::new(&self.rules, kind));
    }

    /// Adds a problem of the rule `rule`.
    fn add_problem_of(&mut self, rule: &str, kind: ProblemKind) {
        self.problems.push(Problem::new(rule, kind));
    }

    /// Leaves `path` out of the plan, for `why`.
    pub(crate) fn skip(&mut self, path: impl Display, why: Skipped) {
        self.skipped.push(Skip::new(path, why));
    }

    /// Exposes the hops of a chain: the first for `reason`, each later one as a hop of the
    /// chain that starts there.
    fn add_chain(&mut self, hops: Vec<symlinks::Hop>, reason: Reason) {
        let link = hops.first().map(|h| h.inside.clone()).unwrap_or_default();
        let later = std::iter::repeat(Reason::SymlinkTarget { link });
        for (hop, reason) in hops.into_iter().zip(std::iter::once(reason).chain(later)) {
            self.exposures.push(Exposure {
                inside: hop.inside,
                outside: hop.outside,
                reason,
            });
        }
    }

    /// Follows the chain at (`inside`, `outside`) in `space` and checks that it stays within
    /// the roots symlinks may be followed into ([`symlinks::check_within`]).
    fn follow(
        &self,
        inside: &Path,
        outside: &Path,
        space: symlinks::Space<'_>,
        view: &HostView,
    ) -> Result<symlinks::Chain, symlinks::ChainError> {
        let chain = symlinks::follow(inside, outside, space, view)?;
        symlinks::check_within(&chain, &self.symlink_roots).map(|()| chain)
    }

    /// Sorts the exposures by inside path and drops those already covered by another: exact
    /// duplicates and paths nested in an exposed directory at the same relative place; an
    /// entry at the same inside path as another with a different outside is a conflict,
    /// skipped.
    pub(crate) fn prune_nested(&mut self) {
        let mut all = std::mem::take(&mut self.exposures);
        // Component-wise order puts every ancestor right before its descendants' run.
        sort_by_inside(&mut all);
        let mut kept: Vec<Exposure> = Vec::with_capacity(all.len());
        // The kept entries whose inside path holds the current one, outermost first. In
        // component-wise order a path's descendants directly follow it, so an entry that does
        // not hold the current path holds no later one either: one pass, not a search of
        // `kept` for each entry.
        let mut holders: Vec<usize> = Vec::new();
        for e in all {
            while holders
                .last()
                .is_some_and(|&k| !e.inside.starts_with(&kept[k].inside))
            {
                holders.pop();
            }
            let covered = holders.last().and_then(|&k| {
                let k = &kept[k];
                Some((k, e.inside.strip_prefix(&k.inside).ok()?))
            });
            match covered {
                Some((k, rel)) if e.outside.strip_prefix(&k.outside).ok() == Some(rel) => {}
                Some((k, _)) if k.inside == e.inside => {
                    self.skip(e.inside.display(), Skipped::Conflicts(k.outside.clone()))
                }
                _ => {
                    holders.push(kept.len());
                    kept.push(e);
                }
            }
        }
        self.exposures = kept;
    }
}

/// The build's device nodes among `exposures`: those [`Reason::is_device`] names.
fn devices(exposures: &[Exposure]) -> impl Iterator<Item = &Exposure> {
    exposures.iter().filter(|e| e.reason.is_device())
}

/// N for a GPU node `/dev/nvidiaN` (not `nvidiactl`, `nvidia-uvm`, …).
fn gpu_number(inside: &Path) -> Option<u32> {
    crate::mig::formats::number(inside.to_str()?.strip_prefix("/dev/nvidia")?)
}

/// The GPUs of the `/dev/nvidiaN` nodes among `paths`, each once, in order.
pub(crate) fn gpu_numbers<'a>(paths: impl Iterator<Item = &'a Path>) -> Vec<u32> {
    let gpus: BTreeSet<u32> = paths.filter_map(gpu_number).collect();
    gpus.into_iter().collect()
}

/// Sorts exposures by inside path in component-wise order, as `Path`'s `Ord` has it, comparing
/// bytes: each path's key is its bytes with `/` made the lowest byte, so that a component ends
/// before any longer one that shares its start (`/a/b` before `/a-b`), which is `Path`'s order
/// for the normalised absolute paths a plan holds. One key per path instead of a component
/// walk per comparison.
fn sort_by_inside(exposures: &mut [Exposure]) {
    exposures.sort_by_cached_key(|e| component_order_key(&e.inside));
}

/// `path`'s bytes with each `/` replaced by 0, the lowest byte (a path never holds a 0 byte).
fn component_order_key(path: &Path) -> Vec<u8> {
    path.as_os_str()
        .as_encoded_bytes()
        .iter()
        .map(|&b| if b == b'/' { 0 } else { b })
        .collect()
}

/// Serialises a value as its one-line text.
pub(crate) fn as_text<S: Serializer>(value: &impl Display, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}

/// Serialises a path as text even when it is not UTF-8 (such bytes become U+FFFD).
fn lossy_path<S: Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&path.to_string_lossy())
}

#[cfg(test)]
mod tests;
