//! Act: the only steps that change the host. Store closures (computed with `nix-store` and
//! cached), the GPU lease, and the manifest file.
//!
//! Reads the plan from [`crate::plan::decide`]; writes the closure cache, the lease files and
//! the manifest, each in a state directory that is verified on every run (root-owned, not
//! writable by group or others, not a symlink; see [`crate::statedir`]). Computing a closure
//! reads the store (`nix-store`, and an `lstat` of each member) and may fill the cache, so it
//! is done here, not in the scan. `explain` acts without a lease (it shows which GPUs a build
//! would get) and without writing a manifest; [`crate::pipeline`] decides which mode runs.

use crate::closure::ClosureCache;
use crate::config::Config;
use crate::lease::{Holder, LeaseRequest, Leases};
use crate::manifest_file;
use crate::pipeline::Mode;
use crate::plan::{Plan, Problem, Skip};
use crate::request::Request;
use crate::sysfs;
use std::path::PathBuf;
use std::time::Duration;

/// Completes `plan`: adds the closures of its store paths, prunes nested paths, leases (or
/// previews) its GPUs and plans the manifest. Problems met here are added to the plan.
pub fn act(mut plan: Plan, req: &Request, config: &Config, mode: Mode) -> Plan {
    add_closures(&mut plan, req, config, mode);
    let name = manifest_file::name_for(req.chroot.as_deref());
    plan.place_sysfs(sysfs::tree_name(&name), &config.runtime_dir);
    plan.drop_nested();
    if plan.problems.is_empty() {
        lease(&mut plan, req, config, mode);
    }
    sysfs_tree(&mut plan, req, config, mode);
    plan.add_manifest(config, req, &name);
    plan
}

/// Ends the lease `plan` took (hook mode) when the hook fails after taking it: Nix then does
/// not start the build, so nothing else would end the lease before that Nix ends. A lease that
/// cannot be ended here stays (the next hook judges it as usual).
pub fn release_lease(plan: &Plan, req: &Request, config: &Config) {
    if let (Some(tree), Some(_)) = (&plan.sysfs, &req.chroot) {
        let _ = sysfs::remove(&config.runtime_dir, &tree.name);
    }
    if let (true, Some(chroot), Some(holder)) = (plan.lease_taken, &req.chroot, Holder::parent()) {
        let _ = Leases::new(&config.runtime_dir).release(&plan.leased_slots, chroot, holder);
    }
}

/// The manifest file could not be written.
#[derive(Debug)]
pub struct ManifestWriteError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub error: std::io::Error,
}

impl std::fmt::Display for ManifestWriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot write the manifest {}: {}",
            self.path.display(),
            self.error
        )
    }
}

impl std::error::Error for ManifestWriteError {}

impl Clone for ManifestWriteError {
    fn clone(&self) -> Self {
        ManifestWriteError {
            path: self.path.clone(),
            error: std::io::Error::new(self.error.kind(), self.error.to_string()),
        }
    }
}

impl PartialEq for ManifestWriteError {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.error.to_string() == other.error.to_string()
    }
}

impl Eq for ManifestWriteError {}

/// Writes the plan's manifest (the pipeline calls it in the modes that write one, once the
/// plan has no problems and its answer could be rendered).
pub fn write_manifest(plan: &Plan, config: &Config) -> Result<(), ManifestWriteError> {
    match &plan.manifest {
        Some(m) => {
            manifest_file::write(m, &config.runtime_dir).map_err(|error| ManifestWriteError {
                path: m.outside.clone(),
                error,
            })
        }
        None => Ok(()),
    }
}

fn add_closures(plan: &mut Plan, req: &Request, config: &Config, mode: Mode) {
    if plan.closure_roots.is_empty() {
        return;
    }
    let cache = ClosureCache {
        dir: config.closure_cache.clone(),
        store_dir: config.store_dir.clone(),
        nix_store: config.nix_store.clone(),
        search_path: req.search_path.clone(),
    };
    // A user running `explain` cannot (and need not) use root's cache.
    let uncached = mode == Mode::Explain && !nix::unistd::geteuid().is_root();
    for root in plan.closure_roots.clone() {
        let closure = if uncached {
            cache.closure_uncached(&root)
        } else {
            cache.closure(&root)
        };
        match closure {
            Ok(closure) => {
                if closure.from_cache {
                    plan.closures_cached += 1;
                } else {
                    plan.closures_computed += 1;
                }
                plan.add_closure(&root, closure.members, &config.store_dir);
            }
            // Not the hook's verdict: the hook runs as root.
            Err(e) if uncached => plan.skipped.push(Skip {
                path: root.display().to_string(),
                why: format!("closure not shown: {e}; run explain as root to see it"),
            }),
            Err(e) => plan.problems.push(Problem {
                rule: plan.rules.join(","),
                what: e.to_string(),
                fix: "check that the path is valid in this Nix store (`nix-store --verify-path`)"
                    .to_string(),
            }),
        }
    }
}

fn lease(plan: &mut Plan, req: &Request, config: &Config, mode: Mode) {
    let Some(demand) = plan.gpu_demand.clone() else {
        return;
    };
    let problem = |what: String, fix: &str| Problem {
        rule: plan.rules.join(","),
        what,
        fix: fix.to_string(),
    };
    let leases = Leases::new(&config.runtime_dir);
    let picked = match (mode, &req.chroot) {
        (Mode::Hook, Some(chroot)) => {
            let Some(holder) = Holder::parent() else {
                let p = problem(
                    "cannot read /proc/<parent>/stat to record who holds the GPU lease".into(),
                    "run the hook as Nix's pre-build-hook with /proc mounted",
                );
                plan.problems.push(p);
                return;
            };
            let derivation = req.derivation_name();
            let lease_req = LeaseRequest {
                slots: &demand.slots,
                count: demand.count,
                chroot,
                derivation: &derivation,
                wait: Duration::from_secs(config.lease_wait_seconds),
            };
            match leases.acquire(&lease_req, holder) {
                Ok(p) => p,
                Err(e) => {
                    let p = problem(
                        format!("no GPU or MIG instance could be leased: {e}"),
                        "see gpus_per_build in the README",
                    );
                    plan.problems.push(p);
                    return;
                }
            }
        }
        _ => match leases.preview(&demand.slots, demand.count) {
            Ok(p) => p,
            Err(e) => {
                plan.skipped.push(Skip {
                    path: format!("{} GPU lease(s)", demand.count),
                    why: format!(
                        "none free now, a build would wait up to {} s: {e}",
                        config.lease_wait_seconds
                    ),
                });
                demand.slots[..demand.count].to_vec()
            }
        },
    };
    let taken = mode == Mode::Hook && req.chroot.is_some();
    plan.keep_gpus(picked, taken, config);
}

/// Hook mode: sweeps the trees of ended builds, then makes this build's (a failure is a
/// problem: the build does not start without what its rule asks for). `exec` makes none.
fn sysfs_tree(plan: &mut Plan, req: &Request, config: &Config, mode: Mode) {
    let chroot = match (mode, &req.chroot) {
        (Mode::Hook, Some(chroot)) => chroot,
        (Mode::Explain, _) => return,
        _ => return plan.drop_sysfs("exec makes no /sys tree: run the build under Nix"),
    };
    let _ = sysfs::sweep(&config.runtime_dir);
    let Some(tree) = plan.sysfs.as_ref().filter(|_| plan.problems.is_empty()) else {
        return;
    };
    if let Err(e) = sysfs::build(tree, &config.runtime_dir, chroot, plan.lease_taken) {
        plan.problems.push(Problem {
            rule: plan.rules.join(","),
            what: format!("cannot give the build its read-only /sys: {e}"),
            fix: "run the hook as root on a host with /sys mounted (see sysfs in \
                  docs/configuration.md)"
                .to_string(),
        });
    }
}
