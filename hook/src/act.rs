//! Act: the only steps that change the host. Store closures (computed with `nix-store` and
//! cached), the GPU lease, and the manifest file.
//!
//! Reads the plan from [`crate::plan::decide`]; writes the closure cache, the lease files and
//! the manifest, each in a state directory that is verified on every run (root-owned, not
//! writable by group or others, not a symlink; see [`crate::statedir`]). `explain` acts
//! without a lease (it shows which GPUs a build would get) and without writing a manifest.

use crate::closure::ClosureCache;
use crate::config::Config;
use crate::lease::{Holder, LeaseRequest, Leases};
use crate::manifest_file;
use crate::plan::{decide, Plan, Problem, Skip};
use crate::request::Request;
use crate::scan::scan;
use crate::symlinks::Node;
use std::time::Duration;

/// Who acts, and so what may change on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The pre-build hook: lease GPUs to the build in its chroot and write its manifest.
    Hook,
    /// `explain`: show what a build would get; no lease, no manifest.
    Explain,
    /// `exec`: no lease (its private root cannot carry one); the manifest is written.
    Exec,
}

/// The whole pipeline after resolve, for a tagged request: scan the host, decide the plan, and
/// act on it ([`act`]). Used alike by the hook, `explain` and `exec`.
pub fn plan(req: &Request, config: &Config, mode: Mode) -> Plan {
    let rules: Vec<&crate::config::Rule> = req.rules.iter().map(|i| &config.rules[*i]).collect();
    let view = scan(config, &rules);
    let plan = decide(req, config, &view);
    act(plan, req, config, mode)
}

/// Completes `plan`: adds the closures of its store paths, prunes nested paths, leases (or
/// previews) its GPUs and plans the manifest. Problems met here are added to the plan.
pub fn act(mut plan: Plan, req: &Request, config: &Config, mode: Mode) -> Plan {
    add_closures(&mut plan, config, mode);
    plan.drop_nested();
    if plan.problems.is_empty() {
        lease(&mut plan, req, config, mode);
    }
    let name = manifest_file::name_for(req.chroot.as_deref());
    plan.add_manifest(config, req, &name);
    plan
}

/// Ends the lease `plan` took (hook mode) when the hook fails after taking it: Nix then does
/// not start the build, so nothing else would end the lease before that Nix ends. A lease that
/// cannot be ended here stays (the next hook judges it as usual).
pub fn release_lease(plan: &Plan, req: &Request, config: &Config) {
    if let (true, Some(chroot), Some(holder)) = (plan.lease_taken, &req.chroot, Holder::parent()) {
        let _ = Leases::new(&config.runtime_dir).release(&plan.leased_gpus, chroot, holder);
    }
}

/// Writes the plan's manifest (hook and exec, once the plan has no problems and its answer
/// could be rendered).
pub fn write_manifest(plan: &Plan, config: &Config) -> Result<(), String> {
    match &plan.manifest {
        Some(m) => manifest_file::write(m, &config.runtime_dir)
            .map_err(|e| format!("cannot write the manifest {}: {e}", m.outside.display())),
        None => Ok(()),
    }
}

fn add_closures(plan: &mut Plan, config: &Config, mode: Mode) {
    if plan.closure_roots.is_empty() {
        return;
    }
    let cache = ClosureCache {
        dir: config.closure_cache.clone(),
        store_dir: config.store_dir.clone(),
        nix_store: config.nix_store.clone(),
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
                let members = closure
                    .members
                    .into_iter()
                    .map(|m| {
                        let node = Node::of(&m);
                        (m, node)
                    })
                    .collect();
                plan.add_closure(&root, members, &config.store_dir);
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
                gpus: &demand.gpus,
                count: demand.count,
                chroot,
                derivation: &derivation,
                wait: Duration::from_secs(config.lease_wait_seconds),
            };
            match leases.acquire(&lease_req, holder) {
                Ok(p) => p,
                Err(e) => {
                    let p = problem(
                        format!("no GPU could be leased: {e}"),
                        "see gpus_per_build in the README",
                    );
                    plan.problems.push(p);
                    return;
                }
            }
        }
        _ => match leases.preview(&demand.gpus, demand.count) {
            Ok(p) => p,
            Err(e) => {
                plan.skipped.push(Skip {
                    path: format!("{} GPU lease(s)", demand.count),
                    why: format!(
                        "none free now, a build would wait up to {} s: {e}",
                        config.lease_wait_seconds
                    ),
                });
                demand.gpus[..demand.count].to_vec()
            }
        },
    };
    let taken = mode == Mode::Hook && req.chroot.is_some();
    plan.keep_gpus(picked, taken, config);
}
