//! The pure half of act: how what [`crate::act`] found changes what a decision exposes. The
//! members of the store closures are added ([`Decision::add_closure`]), only the leased GPUs'
//! nodes are kept ([`GpuDemand::keep`]), and the manifest is planned from the result
//! ([`Decision::plan_manifest`]). Reads nothing but its arguments.

use super::{devices, gpu_number, sort_by_inside, Decision, Exposure, GpuDemand, PlannedManifest};
use super::{DrmLeft, ProblemKind, Reason, Skip, Skipped};
use crate::config::Config;
use crate::mig::Capability;
use crate::request::Request;
use crate::slot::{self, Slot};
use crate::symlinks::{self, Node};
use crate::sysfs::drm::{DrmError, DRM_DEV_DIR};
use cuda_sandbox_manifest::{
    DriverManifest, Manifest, MigInstance, MANIFEST_PATH, MANIFEST_VERSION,
};
use std::path::{Path, PathBuf};

impl GpuDemand {
    /// Keeps in `decision`'s exposures only the slots `picked` (leased, or for `explain` and
    /// `exec` the ones a build would get now): the other `/dev/nvidiaN` nodes and the other MIG
    /// instances' capability nodes are dropped, each with a skip; the control
    /// nodes (`nvidiactl`, `nvidia-uvm`, …) stay, as every CUDA process needs them, and so do
    /// the MIG administration nodes a rule names, and the CDI edits not carried out of the
    /// GPUs kept or of every build. A DRM node (`/dev/dri/…`, or any path the scan found to be
    /// one) stays only with its GPU leased whole. `taken`: whether a lease holds `picked`.
    pub(crate) fn keep(
        &self,
        picked: &[Slot],
        taken: bool,
        gpus_per_build: u32,
        decision: &mut Decision,
    ) {
        let parents = slot::gpus(picked);
        // Whether what belongs to `gpu` stays: every build's (no GPU), or a GPU kept.
        let kept_gpu = |gpu: Option<u32>| gpu.is_none_or(|g| parents.contains(&g));
        let not_leased = |mig| Skipped::NotLeased {
            mig,
            leased: taken,
            given: picked.iter().map(Slot::to_string).collect(),
            count: self.count,
            total: self.slots.len(),
            any_mig: self.slots.iter().any(|s| matches!(s, Slot::Mig(_))),
            gpus_per_build,
        };
        let drm = |why| Skipped::DrmNode(why, gpus_per_build);
        // Why the build does not get the device node of `e`; `None`: it keeps it.
        let left_out = |e: &Exposure| match &e.reason {
            Reason::Mig { capability, .. } => {
                let kept = match capability {
                    Capability::Gi { gpu, gi } => picked
                        .iter()
                        .any(|s| matches!(s, Slot::Mig(i) if (i.gpu, i.gi) == (*gpu, *gi))),
                    Capability::Ci(id) => picked.contains(&Slot::Mig(*id)),
                    Capability::Config | Capability::Monitor => true,
                };
                (!kept).then(|| not_leased(true))
            }
            // A DRM node is kept with its GPU leased whole. One whose GPU cannot be told is
            // dropped (it may be another GPU's, or no GPU's the lease knows). A MIG instance's
            // build gets no DRM node of its parent GPU: the node opens the whole GPU, which the
            // other instances' builds share (MIG isolates through the capability nodes, not
            // DRM), and CUDA does not use it.
            Reason::Device { .. }
                if e.inside.starts_with(DRM_DEV_DIR) || self.drm.contains_key(&e.inside) =>
            {
                match self.drm.get(&e.inside) {
                    Some(Ok(g)) if picked.contains(&Slot::Gpu(*g)) => None,
                    Some(Ok(g)) if picked.iter().any(|s| s.gpu() == *g) => {
                        Some(drm(DrmLeft::OfMigGpu(*g)))
                    }
                    Some(Ok(_)) => Some(not_leased(false)),
                    Some(Err(e)) => Some(drm(DrmLeft::Unmapped(e.clone()))),
                    None => Some(drm(DrmLeft::Unmapped(DrmError::Unscanned))),
                }
            }
            // A CDI exposure of one GPU's device is that GPU's, a `/dev/nvidiaN` node GPU N's;
            // what is no GPU's every build gets.
            Reason::Cdi { gpu: Some(g), .. } => (!parents.contains(g)).then(|| not_leased(false)),
            _ if kept_gpu(gpu_number(&e.inside)) => None,
            _ => Some(not_leased(false)),
        };
        let others: Vec<(PathBuf, Skipped)> = devices(&decision.exposures)
            .filter_map(|e| Some((e.inside.clone(), left_out(e)?)))
            .collect();
        let dropped = |p: &PathBuf| others.iter().any(|(o, _)| o == p);
        decision.exposures.retain(|e| match &e.reason {
            Reason::SymlinkTarget { link } => !dropped(link),
            _ => !dropped(&e.inside),
        });
        let skips = others
            .into_iter()
            .map(|(o, why)| Skip::new(o.display(), why));
        decision.skipped.extend(skips);
        // The edits not carried out: every build's, and those of the GPUs kept only.
        decision.not_carried_out.retain(|n| kept_gpu(n.gpu));
    }
}

impl Decision {
    /// Adds the members of `root`'s closure to the exposures. A member that is a symlink
    /// leading out of the store is never exposed (Nix would bind its target): it is a problem
    /// of the decision's rules.
    pub(crate) fn add_closure(
        &mut self,
        root: &Path,
        members: Vec<(PathBuf, Node)>,
        store_dir: &Path,
    ) {
        for (member, node) in members {
            if let Node::Symlink(target) = &node {
                // An absolute target replaces the directory it is joined to.
                let to = symlinks::normalize(&member.parent().unwrap_or(store_dir).join(target));
                if !to.starts_with(store_dir) {
                    self.add_problem(ProblemKind::ClosureEscapes(member.clone(), to));
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

    /// Plans the manifest of `build` given the exposures (final but for the manifest), the
    /// rules, the driver and the `leased` slots: its content, its file `name` under the
    /// runtime directory ([`crate::manifest_file::name_for`] the chroot), and its exposure at
    /// [`MANIFEST_PATH`], added to the exposures in order.
    pub(crate) fn plan_manifest(
        &mut self,
        leased: &[Slot],
        build: &Request,
        config: &Config,
        name: &str,
    ) -> PlannedManifest {
        let outside = config.runtime_dir.join("manifests").join(name);
        let devices = devices(&self.exposures)
            .map(|e| e.inside.to_string_lossy().into_owned())
            .collect();
        let driver = self
            .driver
            .clone()
            .unwrap_or_else(|| DriverManifest::none("no rule configures a driver"));
        let content = Manifest {
            version: MANIFEST_VERSION,
            derivation: build.derivation_name(),
            chroot: build
                .chroot
                .as_ref()
                .map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_default(),
            rules: self.rules.clone(),
            features: build.features_lossy(),
            devices,
            leased_gpus: slot::gpus(leased),
            mig: slot::mig(leased).map(|i| MigInstance {
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
        PlannedManifest { outside, content }
    }
}
