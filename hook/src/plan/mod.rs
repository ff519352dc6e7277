//! Decide: the request, the configuration and the host view → the plan. Pure: reads nothing
//! but its arguments, writes nothing.
//!
//! The plan is everything a tagged build gets, each with the reason it is there, what was left
//! out and why, and what stops the build. [`crate::act`] then adds the store closures, the GPU
//! lease and the manifest (the only steps that touch the host); [`crate::protocol`],
//! [`crate::explain`] and [`crate::exec`] render the same plan, so they cannot disagree.

mod cdi;
mod devices;
mod driver;
mod gpus;
mod mig;
mod paths;
mod stale;
mod sysfs;

pub use cdi::{CdiEdit, CdiItem, NotCarriedOut};
pub use driver::DriverSource;
pub use stale::{stale_driver, StaleDriver};

use crate::closure::store_path_of;
use crate::config::Config;
use crate::discover::choice::{DriverChoice, HostDriverFacts};
use crate::lease::Slot;
use crate::mig::{Capability, InstanceId};
use crate::request::{GpusWanted, Request};
use crate::scan::HostView;
use crate::symlinks::{self, Node};
use cuda_sandbox_manifest::{
    DriverManifest, Manifest, MigInstance, MANIFEST_PATH, MANIFEST_VERSION,
};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Why a path is exposed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Reason {
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
    pub fn is_device(&self) -> bool {
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
pub struct Exposure {
    /// Where the build sees it.
    #[serde(serialize_with = "lossy_path")]
    pub inside: PathBuf,
    /// Where it is on the host.
    #[serde(serialize_with = "lossy_path")]
    pub outside: PathBuf,
    /// Why it is there.
    pub reason: Reason,
}

/// Something considered and left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skip {
    /// The path (or glob) concerned.
    pub path: String,
    /// Why it was left out.
    pub why: String,
}

/// A reason the plan cannot serve the build: a required device or path is missing, or a
/// closure could not be computed. Each renders as one line with the fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The rule concerned.
    pub rule: String,
    /// What is missing or broken.
    pub what: String,
    /// What to do about it.
    pub fix: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.fix)
    }
}

/// The plan for one build.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
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
    /// How many closures came from the cache and how many were computed.
    pub closures_cached: usize,
    /// How many closures were computed with `nix-store` for this plan.
    pub closures_computed: usize,
    /// The driver the build should load (when a rule configures a driver).
    pub driver: Option<DriverManifest>,
    /// What is known of the host driver.
    pub driver_facts: Option<HostDriverFacts>,
    /// The compat decision, with every rejected candidate.
    pub driver_choice: Option<DriverChoice>,
    /// The manifest to write for the build, and where (outside).
    pub manifest: Option<PlannedManifest>,
    /// With `gpus_per_build > 0`: the GPUs (`/dev/nvidiaN` numbers) leased to this build
    /// alone, or for `explain` and `exec` the ones a build would get now. Empty when every
    /// build gets every GPU.
    pub leased_gpus: Vec<u32>,
    /// The MIG instance leased to this build (or shown), when its GPU is one of MIG slices.
    pub leased_mig: Option<InstanceId>,
    /// What the lease holds (or would): whole GPUs or one MIG instance.
    #[serde(skip)]
    pub leased_slots: Vec<Slot>,
    /// Whether `leased_gpus` are held by a lease (hook mode) or only shown.
    pub lease_taken: bool,
    /// Where symlinks may lead (the store and the configured roots).
    #[serde(skip)]
    symlink_roots: Vec<PathBuf>,
    /// The store paths whose closures [`crate::act`] must add.
    #[serde(skip)]
    pub closure_roots: Vec<PathBuf>,
    /// With `gpus_per_build > 0`: the slots found (whole GPUs, MIG instances) and how many
    /// this build needs, for [`crate::act`] to lease.
    #[serde(skip)]
    pub gpu_demand: Option<GpuDemand>,
    /// The build's tree of read-only `/sys` binds, when a rule asks for one
    /// ([`crate::sysfs`]); act names it, makes it, and exposes it.
    #[serde(skip)]
    pub sysfs: Option<crate::sysfs::TreeSpec>,
    /// Which rule asked for each of the tree's mount points.
    #[serde(skip)]
    sysfs_rules: Vec<(String, String)>,
}

/// The slots a build must be leased before it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuDemand {
    /// The slots it may be given: each GPU the plan found whole, or its MIG instances when
    /// it has some; only whole GPUs when it needs more than one.
    pub slots: Vec<Slot>,
    /// The GPUs the plan found (`/dev/nvidiaN` numbers).
    pub gpus: Vec<u32>,
    /// How many slots the build needs.
    pub count: usize,
}

/// The manifest of a tagged build and the host file it is written to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedManifest {
    /// The file outside the sandbox (bound read-only at [`MANIFEST_PATH`] inside).
    #[serde(serialize_with = "lossy_path")]
    pub outside: PathBuf,
    /// Its content.
    pub content: Manifest,
}

/// The plan for `req` (a tagged request) under `config` on the host `view`: devices, paths,
/// mounts and the driver, each with its reason, nested paths pruned, the closures to add and
/// the GPUs to lease. Pure.
pub fn decide(req: &Request, config: &Config, view: &HostView) -> Plan {
    let mut plan = Plan {
        rules: view.rules.iter().map(|r| r.name.clone()).collect(),
        symlink_roots: std::iter::once(config.store_dir.clone())
            .chain(config.symlink_roots.iter().cloned())
            .collect(),
        ..Plan::default()
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
        if let Some(driver) = &rule.driver {
            if plan.driver.is_none() {
                plan.add_driver(&rule.name, driver, config, view);
            }
        }
        if let Some(sysfs) = rule.sysfs {
            plan.add_sysfs(&rule.name, sysfs, config);
        }
    }
    plan.drop_nested();
    plan.closure_roots = plan
        .exposures
        .iter()
        .filter_map(|e| store_path_of(&e.outside, &config.store_dir))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if plan.problems.is_empty() {
        plan.gpu_demand(config, req.gpus_wanted.as_ref());
    }
    plan
}

/// Whether a configured path must exist, and what to say when it does not.
#[derive(Clone, Copy)]
struct Want<'a> {
    required: bool,
    hint: &'a Option<String>,
}

const OPTIONAL: Want<'static> = Want {
    required: false,
    hint: &None,
};

impl Plan {
    /// With `gpus_per_build > 0`: the GPUs found and how many the build needs (its
    /// `cudaSandboxGpus`, else `gpus_per_build`, never above `max_gpus_per_build`).
    fn gpu_demand(&mut self, config: &Config, wanted: Option<&GpusWanted>) {
        if config.gpus_per_build == 0 {
            if let Some(v) = wanted {
                self.skipped.push(Skip {
                    path: format!("{} = {:?}", crate::drv::GPUS_ATTR, v.text),
                    why: "ignored: gpus_per_build = 0 gives every GPU to every build".to_string(),
                });
            }
            return;
        }
        let mut gpus: Vec<u32> = self
            .devices()
            .filter_map(|e| gpu_number(&e.inside))
            .collect();
        gpus.sort_unstable();
        gpus.dedup();
        if gpus.is_empty() {
            return;
        }
        let instances = self.mig_instances();
        let slots: Vec<Slot> = gpus
            .iter()
            .flat_map(|g| {
                let on: Vec<Slot> = instances
                    .iter()
                    .filter(|i| i.gpu == *g)
                    .map(|i| Slot::Mig(*i))
                    .collect();
                if on.is_empty() {
                    vec![Slot::Gpu(*g)]
                } else {
                    on
                }
            })
            .collect();
        let counted = gpus::gpu_count(
            wanted,
            config.gpus_per_build,
            config.max_gpus_per_build,
            slots.len(),
        )
        .and_then(|count| gpus::one_mig_instance(count, &slots, wanted).map(|s| (count, s)));
        match counted {
            Ok((count, slots)) => self.gpu_demand = Some(GpuDemand { slots, gpus, count }),
            Err(e) => self.problems.push(Problem {
                rule: self.rules.join(","),
                what: e.to_string(),
                fix: "see gpus_per_build in the README".to_string(),
            }),
        }
    }

    /// The MIG instances whose compute-instance node the plan exposes.
    fn mig_instances(&self) -> Vec<InstanceId> {
        let mut found: Vec<InstanceId> = self
            .exposures
            .iter()
            .filter_map(|e| match &e.reason {
                Reason::Mig {
                    capability: Capability::Ci(id),
                    ..
                } => Some(*id),
                _ => None,
            })
            .collect();
        found.sort_unstable();
        found.dedup();
        found
    }

    /// Keeps only the slots `picked` (leased, or for `explain` and `exec` the ones a build
    /// would get now): the other `/dev/nvidiaN` nodes and the other MIG instances' capability
    /// nodes are dropped; the control nodes (`nvidiactl`, `nvidia-uvm`, …) stay, as every CUDA
    /// process needs them, and so do the MIG administration nodes a rule names.
    pub fn keep_gpus(&mut self, picked: Vec<Slot>, taken: bool, config: &Config) {
        let Some(demand) = self.gpu_demand.clone() else {
            return;
        };
        let parents: Vec<u32> = {
            let mut p: Vec<u32> = picked.iter().map(Slot::gpu).collect();
            p.dedup();
            p
        };
        let kept = |e: &Exposure| match &e.reason {
            Reason::Mig { capability, .. } => match capability {
                Capability::Gi { gpu, gi } => picked
                    .iter()
                    .any(|s| matches!(s, Slot::Mig(i) if (i.gpu, i.gi) == (*gpu, *gi))),
                Capability::Ci(id) => picked.contains(&Slot::Mig(*id)),
                Capability::Config | Capability::Monitor => true,
            },
            _ => gpu_number(&e.inside).is_none_or(|g| parents.contains(&g)),
        };
        let others: Vec<(PathBuf, bool)> = self
            .devices()
            .filter(|e| !kept(e))
            .map(|e| (e.inside.clone(), matches!(e.reason, Reason::Mig { .. })))
            .collect();
        let dropped = |p: &PathBuf| others.iter().any(|(o, _)| o == p);
        self.exposures.retain(|e| match &e.reason {
            Reason::SymlinkTarget { link } => !dropped(link),
            _ => !dropped(&e.inside),
        });
        let given: Vec<String> = picked.iter().map(Slot::to_string).collect();
        let who = if taken {
            "this build is leased"
        } else {
            "a build now would be leased"
        };
        for (other, mig) in others {
            let what = if mig {
                "another build's MIG instance"
            } else {
                "another build's GPU"
            };
            self.skipped.push(Skip {
                path: other.display().to_string(),
                why: format!(
                    "{what}: {who} {} only ({} of {} {}; gpus_per_build = {})",
                    given.join(", "),
                    demand.count,
                    demand.slots.len(),
                    if demand.slots.iter().any(|s| matches!(s, Slot::Mig(_))) {
                        "GPUs and MIG instances"
                    } else {
                        "GPUs"
                    },
                    config.gpus_per_build
                ),
            });
        }
        self.leased_gpus = parents;
        self.leased_mig = picked.iter().find_map(|s| match s {
            Slot::Mig(i) => Some(*i),
            Slot::Gpu(_) => None,
        });
        self.leased_slots = picked;
        self.lease_taken = taken;
    }

    /// Adds the members of `root`'s closure. A member that is a symlink leading out of the
    /// store is never exposed (Nix would bind its target): it is a problem.
    pub fn add_closure(&mut self, root: &Path, members: Vec<(PathBuf, Node)>, store_dir: &Path) {
        for (member, node) in members {
            if let Node::Symlink(target) = &node {
                let to = if target.is_absolute() {
                    symlinks::normalize(target)
                } else {
                    symlinks::normalize(&member.parent().unwrap_or(store_dir).join(target))
                };
                if !to.starts_with(store_dir) {
                    self.problems.push(Problem {
                        rule: self.rules.join(","),
                        what: format!(
                            "closure member {} is a symlink to {}, outside the store",
                            member.display(),
                            to.display()
                        ),
                        fix: "a store path must not lead out of the store: check the closure \
                              cache and the store (`nix-store --verify --check-contents`)"
                            .to_string(),
                    });
                    continue;
                }
            }
            self.exposures.push(Exposure {
                inside: member.clone(),
                outside: member,
                reason: Reason::ClosureMember {
                    of: root.to_path_buf(),
                },
            });
        }
    }

    /// Plans the manifest: its content from the final exposures, its file `name` under the
    /// runtime directory ([`crate::manifest_file::name_for`] the chroot), and its exposure at
    /// [`MANIFEST_PATH`].
    pub fn add_manifest(&mut self, config: &Config, req: &Request, name: &str) {
        let outside = config.runtime_dir.join("manifests").join(name);
        let devices = self
            .devices()
            .map(|e| e.inside.to_string_lossy().into_owned())
            .collect();
        let driver = self
            .driver
            .clone()
            .unwrap_or_else(|| DriverManifest::none("no rule configures a driver"));
        let content = Manifest {
            version: MANIFEST_VERSION,
            derivation: req.derivation_name(),
            chroot: req
                .chroot
                .as_ref()
                .map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_default(),
            rules: self.rules.clone(),
            features: req.features_lossy(),
            devices,
            leased_gpus: self.leased_gpus.clone(),
            mig: self.leased_mig.map(|i| MigInstance {
                gpu: i.gpu,
                gi: i.gi,
                ci: i.ci,
                uuid: None,
            }),
            driver,
        };
        self.exposures.push(Exposure {
            inside: PathBuf::from(MANIFEST_PATH),
            outside: outside.clone(),
            reason: Reason::Manifest,
        });
        sort_by_inside(&mut self.exposures);
        self.manifest = Some(PlannedManifest { outside, content });
    }

    /// The build's device nodes: the exposures a device glob matched.
    fn devices(&self) -> impl Iterator<Item = &Exposure> {
        self.exposures.iter().filter(|e| e.reason.is_device())
    }

    fn add_chain(&mut self, hops: Vec<symlinks::Hop>, reason: Reason) {
        let link = hops[0].inside.clone();
        for (i, hop) in hops.into_iter().enumerate() {
            let reason = if i == 0 {
                reason.clone()
            } else {
                Reason::SymlinkTarget { link: link.clone() }
            };
            self.exposures.push(Exposure {
                inside: hop.inside,
                outside: hop.outside,
                reason,
            });
        }
    }

    /// Sorts by inside path and drops entries already covered by another: exact duplicates and
    /// paths nested in an exposed directory at the same relative place.
    pub fn drop_nested(&mut self) {
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
                Some((k, _)) if k.inside == e.inside => self.skipped.push(Skip {
                    path: e.inside.display().to_string(),
                    why: format!(
                        "conflicts with {} already exposed there",
                        k.outside.display()
                    ),
                }),
                _ => {
                    holders.push(kept.len());
                    kept.push(e);
                }
            }
        }
        self.exposures = kept;
    }
}

/// N for a GPU node `/dev/nvidiaN` (not `nvidiactl`, `nvidia-uvm`, …).
fn gpu_number(inside: &Path) -> Option<u32> {
    let digits = inside.to_str()?.strip_prefix("/dev/nvidia")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
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
fn as_text<T: std::fmt::Display, S: serde::Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}

/// Serialises a path as text even when it is not UTF-8 (such bytes become U+FFFD).
fn lossy_path<S: serde::Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&path.to_string_lossy())
}

#[cfg(test)]
mod tests;
