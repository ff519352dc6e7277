//! The plan: everything a tagged build gets, each with the reason it is there.
//!
//! Computed once from the derivation's features, the configuration and what exists on the host;
//! then rendered as Nix's answer ([`crate::protocol`]) or as an explanation
//! ([`crate::explain`]). One plan, so the renderings cannot disagree.

mod driver;

use crate::closure::{store_path_of, ClosureCache};
use crate::config::{Config, Platform, Rule};
use crate::discover::choice::{DriverChoice, HostDriverFacts};
use crate::lease::{self, Holder, LeaseRequest, Leases};
use crate::symlinks::{self, ChainError, Space};
use cuda_sandbox_manifest::{DriverManifest, Manifest, MANIFEST_PATH, MANIFEST_VERSION};
use serde::Serialize;
use std::collections::BTreeSet;
use std::os::unix::fs::FileTypeExt;
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
    /// The NVIDIA driver: `driver-link`, `host-library from …`, `compat`, or
    /// `compat-at-driver-link`.
    Driver {
        /// The rule.
        rule: String,
        /// Where the driver file or directory comes from.
        source: String,
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
    /// What stops the build from getting a working GPU; non-empty means a tagged build fails.
    pub problems: Vec<Problem>,
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
    /// Whether `leased_gpus` are held by a lease (hook mode) or only shown.
    pub lease_taken: bool,
    /// Where symlinks may lead (the store and the configured roots).
    #[serde(skip)]
    symlink_roots: Vec<PathBuf>,
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

/// What the plan is for: the derivation, its features, and the sandbox (absent for `explain`).
#[derive(Debug, Clone, Default)]
pub struct BuildContext {
    /// The derivation path (for the manifest and messages).
    pub derivation: String,
    /// Its required features.
    pub features: Vec<String>,
    /// The chroot root Nix passed, when planning for a real build.
    pub chroot: Option<PathBuf>,
    /// The derivation's `cudaSandboxGpus` attribute ([`lease::GPUS_ATTR`]), when set.
    pub gpus_wanted: Option<String>,
    /// Take GPU leases for `chroot` (hook mode); otherwise only show what a build would get.
    pub take_lease: bool,
}

impl Plan {
    /// Builds the plan for `rules` (the ones that matched the derivation) under `config`.
    pub fn build(config: &Config, rules: &[&Rule], ctx: &BuildContext) -> Plan {
        let mut plan = Plan {
            rules: rules.iter().map(|r| r.name.clone()).collect(),
            symlink_roots: std::iter::once(config.store_dir.clone())
                .chain(config.symlink_roots.iter().cloned())
                .collect(),
            ..Plan::default()
        };
        let rooted = Space::Rooted {
            root: &config.host_root,
            store_dir: &config.store_dir,
        };
        let platform = if crate::discover::host::is_tegra(&config.host_root, &config.store_dir) {
            Platform::Tegra
        } else {
            Platform::Discrete
        };
        for rule in rules {
            plan.add_devices(rule, rooted, platform);
            for p in &rule.paths {
                let inside = symlinks::normalize(&p.path);
                let outside = rooted.outside(&inside);
                let reason = Reason::HostPath {
                    rule: rule.name.clone(),
                };
                plan.add_path(rule, &inside, &outside, rooted, reason, p.required, &p.hint);
            }
            for m in &rule.mounts {
                let inside = symlinks::normalize(&m.inside);
                let reason = Reason::Mount {
                    rule: rule.name.clone(),
                };
                plan.add_path(
                    rule,
                    &inside,
                    &m.outside,
                    Space::Literal,
                    reason,
                    m.required,
                    &m.hint,
                );
            }
            if let Some(driver) = &rule.driver {
                if plan.driver.is_none() {
                    plan.add_driver(rule, driver, config);
                }
            }
        }
        plan.add_closures(config);
        plan.drop_nested();
        if plan.problems.is_empty() {
            plan.lease_gpus(config, ctx);
        }
        plan.add_manifest(config, ctx);
        plan
    }

    /// With `gpus_per_build > 0`: leases this build its own GPUs (or, without
    /// `ctx.take_lease`, picks the ones it would get) and drops the other `/dev/nvidiaN`
    /// nodes; the control nodes (`nvidiactl`, `nvidia-uvm`, …) stay, as every CUDA process
    /// needs them.
    fn lease_gpus(&mut self, config: &Config, ctx: &BuildContext) {
        if config.gpus_per_build == 0 {
            if let Some(v) = &ctx.gpus_wanted {
                self.skipped.push(Skip {
                    path: format!("{} = {v:?}", lease::GPUS_ATTR),
                    why: "ignored: gpus_per_build = 0 gives every GPU to every build".to_string(),
                });
            }
            return;
        }
        let mut gpus: Vec<u32> = self
            .exposures
            .iter()
            .filter(|e| matches!(e.reason, Reason::Device { .. }))
            .filter_map(|e| gpu_number(&e.inside))
            .collect();
        gpus.sort_unstable();
        gpus.dedup();
        if gpus.is_empty() {
            return;
        }
        let rule = self.rules.join(",");
        let problem = |what: String, fix: &str| Problem {
            rule: rule.clone(),
            what,
            fix: fix.to_string(),
        };
        let count = match lease::wanted(
            ctx.gpus_wanted.as_deref(),
            config.gpus_per_build,
            gpus.len(),
        ) {
            Ok(n) => n,
            Err(e) => {
                self.problems
                    .push(problem(e, "see gpus_per_build in the README"));
                return;
            }
        };
        let leases = Leases::new(&config.runtime_dir);
        let picked = match (&ctx.chroot, ctx.take_lease) {
            (Some(chroot), true) => {
                let Some(holder) = Holder::parent() else {
                    self.problems.push(problem(
                        "cannot read /proc/<parent>/stat to record who holds the GPU lease"
                            .to_string(),
                        "run the hook as Nix's pre-build-hook with /proc mounted",
                    ));
                    return;
                };
                let req = LeaseRequest {
                    gpus: &gpus,
                    count,
                    chroot,
                    derivation: &ctx.derivation,
                    wait: std::time::Duration::from_secs(config.lease_wait_seconds),
                };
                match leases.acquire(&req, holder) {
                    Ok(p) => p,
                    Err(e) => {
                        self.problems.push(problem(
                            format!("no GPU could be leased: {e}"),
                            "see gpus_per_build in the README",
                        ));
                        return;
                    }
                }
            }
            _ => match leases.preview(&gpus, count) {
                Ok(p) => p,
                Err(e) => {
                    self.skipped.push(Skip {
                        path: format!("{count} GPU lease(s)"),
                        why: format!(
                            "none free now, a build would wait up to {} s: {e}",
                            config.lease_wait_seconds
                        ),
                    });
                    gpus[..count].to_vec()
                }
            },
        };
        let others: Vec<PathBuf> = self
            .exposures
            .iter()
            .filter(|e| matches!(e.reason, Reason::Device { .. }))
            .filter(|e| gpu_number(&e.inside).is_some_and(|g| !picked.contains(&g)))
            .map(|e| e.inside.clone())
            .collect();
        self.exposures.retain(|e| match &e.reason {
            Reason::SymlinkTarget { link } => !others.contains(link),
            _ => !others.contains(&e.inside),
        });
        let given: Vec<String> = picked.iter().map(|g| format!("nvidia{g}")).collect();
        let who = if ctx.take_lease {
            "this build is leased"
        } else {
            "a build now would be leased"
        };
        for other in others {
            self.skipped.push(Skip {
                path: other.display().to_string(),
                why: format!(
                    "another build's GPU: {who} {} only ({count} of {} GPUs; gpus_per_build = {})",
                    given.join(", "),
                    gpus.len(),
                    config.gpus_per_build
                ),
            });
        }
        self.leased_gpus = picked;
        self.lease_taken = ctx.take_lease && ctx.chroot.is_some();
    }

    /// Plans the manifest: its content from the final exposures, its file under the runtime
    /// directory (named after the chroot), and its exposure at [`MANIFEST_PATH`].
    fn add_manifest(&mut self, config: &Config, ctx: &BuildContext) {
        let name = ctx
            .chroot
            .as_deref()
            .and_then(Path::file_name)
            .map(|n| sanitize_file_name(&n.to_string_lossy()))
            .unwrap_or_else(|| "explain".to_string());
        let outside = config
            .runtime_dir
            .join("manifests")
            .join(format!("{name}.json"));
        let devices = self
            .exposures
            .iter()
            .filter(|e| matches!(e.reason, Reason::Device { .. }))
            .map(|e| e.inside.to_string_lossy().into_owned())
            .collect();
        let driver = self
            .driver
            .clone()
            .unwrap_or_else(|| DriverManifest::none("no rule configures a driver"));
        let content = Manifest {
            version: MANIFEST_VERSION,
            derivation: ctx.derivation.clone(),
            chroot: ctx
                .chroot
                .as_ref()
                .map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_default(),
            rules: self.rules.clone(),
            features: ctx.features.clone(),
            devices,
            leased_gpus: self.leased_gpus.clone(),
            driver,
        };
        self.exposures.push(Exposure {
            inside: PathBuf::from(MANIFEST_PATH),
            outside: outside.clone(),
            reason: Reason::Manifest,
        });
        self.exposures.sort_by(|a, b| a.inside.cmp(&b.inside));
        self.manifest = Some(PlannedManifest { outside, content });
    }

    fn add_devices(&mut self, rule: &Rule, space: Space<'_>, platform: Platform) {
        let Space::Rooted { root, .. } = space else {
            unreachable!("devices are always looked up under the host root")
        };
        for device in &rule.devices {
            if device.platform.is_some_and(|p| p != platform) {
                self.skipped.push(Skip {
                    path: device.glob.clone(),
                    why: format!(
                        "only on {} hosts; this one is {}",
                        name_of(device.platform.unwrap()),
                        name_of(platform)
                    ),
                });
                continue;
            }
            let pattern = if root == Path::new("/") {
                device.glob.clone()
            } else {
                let root = glob::Pattern::escape(&root.to_string_lossy());
                format!(
                    "{}/{}",
                    root.trim_end_matches('/'),
                    device.glob.trim_start_matches('/')
                )
            };
            let mut found = 0;
            let matches = match glob::glob(&pattern) {
                Ok(m) => m,
                Err(e) => {
                    self.skipped.push(Skip {
                        path: device.glob.clone(),
                        why: format!("invalid glob: {e}"),
                    });
                    continue;
                }
            };
            for entry in matches {
                let outside = match entry {
                    Ok(p) => p,
                    Err(e) => {
                        self.skipped.push(Skip {
                            path: e.path().display().to_string(),
                            why: format!("cannot read: {}", e.error()),
                        });
                        continue;
                    }
                };
                let inside = match outside.strip_prefix(root) {
                    Ok(rel) => Path::new("/").join(rel),
                    Err(_) => continue,
                };
                match symlinks::follow(&inside, &outside, space)
                    .and_then(|c| symlinks::check_within(&c, &self.symlink_roots).map(|()| c))
                {
                    Ok(chain) => {
                        let ft = chain.target.file_type();
                        if !(ft.is_char_device() || ft.is_dir()) {
                            self.skipped.push(Skip {
                                path: inside.display().to_string(),
                                why: "not a character device or directory".to_string(),
                            });
                            continue;
                        }
                        found += 1;
                        let reason = Reason::Device {
                            rule: rule.name.clone(),
                            glob: device.glob.clone(),
                        };
                        self.add_chain(chain.hops, reason);
                    }
                    Err(e) => self.skipped.push(Skip {
                        path: inside.display().to_string(),
                        why: e.to_string(),
                    }),
                }
            }
            if found == 0 {
                if device.required {
                    self.problems.push(Problem {
                        rule: rule.name.clone(),
                        what: format!("required device {} is missing", device.glob),
                        fix: device
                            .hint
                            .clone()
                            .unwrap_or_else(|| device_hint(&device.glob)),
                    });
                } else {
                    self.skipped.push(Skip {
                        path: device.glob.clone(),
                        why: "optional device glob matched nothing".to_string(),
                    });
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn add_path(
        &mut self,
        rule: &Rule,
        inside: &Path,
        outside: &Path,
        space: Space<'_>,
        reason: Reason,
        required: bool,
        hint: &Option<String>,
    ) {
        match symlinks::follow(inside, outside, space)
            .and_then(|c| symlinks::check_within(&c, &self.symlink_roots).map(|()| c))
        {
            Ok(chain) => self.add_chain(chain.hops, reason),
            Err(e) if required => {
                let fix = match (&e, hint) {
                    (_, Some(h)) => h.clone(),
                    (ChainError::Missing(_), None) => path_hint(inside),
                    (_, None) => "fix the link or remove the entry from the config".to_string(),
                };
                self.problems.push(Problem {
                    rule: rule.name.clone(),
                    what: format!("required path {} is unusable: {e}", inside.display()),
                    fix,
                });
            }
            Err(e) => self.skipped.push(Skip {
                path: inside.display().to_string(),
                why: format!("optional: {e}"),
            }),
        }
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

    fn add_closures(&mut self, config: &Config) {
        let roots: BTreeSet<PathBuf> = self
            .exposures
            .iter()
            .filter_map(|e| store_path_of(&e.outside, &config.store_dir))
            .collect();
        if roots.is_empty() {
            return;
        }
        let cache = ClosureCache {
            dir: config.closure_cache.clone(),
            store_dir: config.store_dir.clone(),
            nix_store: config.nix_store.clone(),
        };
        for root in roots {
            match cache.closure(&root) {
                Ok(closure) => {
                    if closure.from_cache {
                        self.closures_cached += 1;
                    } else {
                        self.closures_computed += 1;
                    }
                    for member in closure.members {
                        self.exposures.push(Exposure {
                            inside: member.clone(),
                            outside: member,
                            reason: Reason::ClosureMember { of: root.clone() },
                        });
                    }
                }
                Err(e) => self.problems.push(Problem {
                    rule: self.rules.join(","),
                    what: e.to_string(),
                    fix:
                        "check that the path is valid in this Nix store (`nix-store --verify-path`)"
                            .to_string(),
                }),
            }
        }
    }

    /// Sorts by inside path and drops entries already covered by another: exact duplicates and
    /// paths nested in an exposed directory at the same relative place.
    fn drop_nested(&mut self) {
        let mut all = std::mem::take(&mut self.exposures);
        // Component-wise order puts every ancestor right before its descendants' run.
        all.sort_by(|a, b| a.inside.cmp(&b.inside));
        let mut kept: Vec<Exposure> = Vec::with_capacity(all.len());
        for e in all {
            let covered = kept.iter().rev().find_map(|k| {
                let rel = e.inside.strip_prefix(&k.inside).ok()?;
                Some((k, rel))
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
                _ => kept.push(e),
            }
        }
        self.exposures = kept;
    }
}

fn name_of(p: Platform) -> &'static str {
    match p {
        Platform::Tegra => "Tegra (Jetson)",
        Platform::Discrete => "discrete-GPU",
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

/// A file name made of the safe characters of `name` (others become `_`).
fn sanitize_file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "+-._".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The fix to suggest when a required device glob matches nothing.
pub fn device_hint(glob: &str) -> String {
    if glob.contains("nvidia-uvm") {
        "the nvidia-uvm module is not loaded or its node not created yet: run \
         `nvidia-modprobe -u -c=0` (or `modprobe nvidia-uvm`) on the builder, and make it \
         happen at boot"
            .to_string()
    } else if glob.contains("nvidiactl") || glob.contains("nvidia[") {
        "no NVIDIA device nodes: is the NVIDIA kernel driver loaded (`nvidia-smi`)? On NixOS set \
         services.xserver.videoDrivers = [ \"nvidia\" ] or hardware.nvidia"
            .to_string()
    } else {
        "create the device or mark it `required = false` in the config".to_string()
    }
}

fn path_hint(inside: &Path) -> String {
    if inside.starts_with("/run/opengl-driver") {
        "the driver link is missing: on NixOS enable hardware.graphics with the NVIDIA driver; \
         on other distributions add a [[rule.mount]] of the driver libraries at \
         /run/opengl-driver/lib"
            .to_string()
    } else {
        "create it, or mark it `required = false` in the config".to_string()
    }
}

/// Serialises a path as text even when it is not UTF-8 (such bytes become U+FFFD).
fn lossy_path<S: serde::Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&path.to_string_lossy())
}
