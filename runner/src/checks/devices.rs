//! `devices::nodes`: the NVIDIA device nodes exist, are character devices with the
//! right numbers, and there are at least as many `/dev/nvidiaN` as CUDA devices. With the
//! hook's manifest, every device it says it exposed must be here, and when the hook leased
//! this build its own GPUs, CUDA must see exactly that many devices.
//!
//! Under ZLUDA (the CUDA driver API on AMD's HIP, [`crate::facts::zluda`]) it checks `/dev/kfd`
//! and the DRM render nodes instead ([`crate::facts::amd_nodes`]).
//!
//! `devices::features`: the GPUs this process can use satisfy every `cuda-sm-*` feature the
//! derivation requires ([`crate::facts::build_features`]), by the rule the hook's lease choice uses
//! ([`cuda_sandbox_cuda_facts::features::Required`]); cross-checked with the manifest's.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use cuda_sandbox_cuda_facts::features::{self as fatbin_features, feature_name, Required};
use cuda_sandbox_manifest::Manifest;

use crate::check::Verdict::{Fail, Pass};
use crate::check::{facts_of, Facts, Outcome};
use crate::facts::access::{Node, NodeSnapshot, NVIDIACTL_MINOR, NVIDIA_MAJOR};
use crate::facts::amd_nodes::AmdNodes;
use crate::facts::build_features;
use crate::facts::features::FeatureGpu;
use crate::facts::zluda::Zluda;
use crate::session::Session;

/// What `devices::nodes` reports (the report's `facts`), whether it passes or fails.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodesFacts {
    /// The directory looked at (`/dev`, or `--dev-root`).
    pub(crate) dev_root: PathBuf,
    /// Every `nvidiaN` there before any driver call, sorted by N.
    pub gpu_nodes: Vec<PathBuf>,
    /// `nvidiactl`'s (major, minor) before any driver call, when it was a character device.
    pub nvidiactl: Option<(u32, u32)>,
    /// `nvidia-uvm`'s (major, minor) before any driver call, when it was a character device.
    pub(crate) nvidia_uvm: Option<(u32, u32)>,
    /// The nodes as they were before any driver call, which the check judges.
    pub(crate) nodes_before_driver_calls: NodeSnapshot,
    /// `nvidiactl` after the driver ran (the real `cuInit`, as root, creates it).
    pub(crate) nvidiactl_now: Node,
    /// The major number `/proc/devices` gives `nvidia-uvm`, when listed.
    pub(crate) nvidia_uvm_major_in_proc_devices: Option<u32>,
    /// How many devices CUDA reports, when it can say.
    pub cuda_device_count: Option<usize>,
    /// Why CUDA cannot say how many devices there are.
    pub(crate) cuda_device_count_unavailable: Option<String>,
    /// The manifest in brief, or a string saying why there is none
    /// ([`crate::facts::expectations::ManifestState::fact`]).
    pub(crate) manifest: Value,
    /// The device paths the manifest says the hook exposed, when there is a manifest.
    pub(crate) manifest_devices: Option<Vec<String>>,
    /// How many of those are `/dev/nvidiaN`, when there is a manifest.
    pub manifest_gpu_nodes: Option<usize>,
    /// The GPUs the hook leased this build, when there is a manifest.
    pub manifest_leased_gpus: Option<Vec<u32>>,
}

/// The major number of character device `device` in /proc/devices, when listed.
fn major_from_proc(device: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/proc/devices").ok()?;
    let in_char_section = text.split("\n\n").next()?;
    in_char_section.lines().find_map(|line| {
        let (major, name) = line.trim().split_once(' ')?;
        (name.trim() == device).then(|| major.parse().ok())?
    })
}

/// What `devices::nodes` reports under ZLUDA (the report's `facts`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AmdNodesFacts {
    /// The AMD nodes ZLUDA's HIP opens, as they are.
    pub nodes: AmdNodes,
    /// The major number `/proc/devices` gives `kfd`, when listed.
    pub(crate) kfd_major_in_proc_devices: Option<u32>,
    /// How many devices CUDA reports, when it can say.
    pub cuda_device_count: Option<usize>,
    /// Why CUDA cannot say how many devices there are.
    pub(crate) cuda_device_count_unavailable: Option<String>,
}

/// `devices::nodes` under ZLUDA: `/dev/kfd` and the DRM render nodes instead of `/dev/nvidia*`,
/// and every device the hook's manifest lists.
fn amd_nodes(session: &Session, zluda: &Zluda) -> Outcome {
    let root = &session.access.nodes.dev_root;
    let nodes = AmdNodes::scan(root);
    let kfd_major = major_from_proc("kfd");
    let cuda_count = session.devices().map(<[_]>::len);
    let mut problems = nodes.problems(kfd_major, cuda_count.as_ref().ok().copied());
    judge_manifest_devices(session, root, 0, &mut problems);
    let facts = facts_of(&AmdNodesFacts {
        nodes: nodes.clone(),
        kfd_major_in_proc_devices: kfd_major,
        cuda_device_count: cuda_count.as_ref().ok().copied(),
        cuda_device_count_unavailable: cuda_count.as_ref().err().map(ToString::to_string),
    });
    let present = format!(
        "{}: kfd and {} DRM render node(s) present",
        zluda.describe(),
        nodes.render_nodes.len()
    );
    judged(&problems, present, cuda_count.ok(), facts)
}

/// Fails with the first of `problems` (the rest as detail), or passes: the nodes `present`
/// for CUDA's device count (`None`: CUDA cannot say).
fn judged(problems: &[String], present: String, count: Option<usize>, facts: Facts) -> Outcome {
    match (problems.first(), count) {
        (None, Some(n)) => Outcome::pass(format!("{present} for {n} CUDA device(s)"), facts),
        (None, None) => Outcome::pass(
            format!("{present} (CUDA device count unavailable, see driver::version)"),
            facts,
        ),
        (Some(first), _) => Outcome::fail(first, facts).with_detail_lines(&problems[1..]),
    }
}

/// What a node was, for messages.
fn describe(node: &Node) -> &'static str {
    match node {
        Node::Missing => "missing",
        Node::NotCharDevice => "not a character device",
        Node::Char(..) => "a character device",
    }
}

/// Runs `devices::nodes`.
pub(crate) fn nodes(session: &Session) -> Result<Outcome, Outcome> {
    if let Some(zluda) = session.zluda() {
        return Ok(amd_nodes(session, zluda));
    }
    // Judged on the nodes as they were before any driver call (see crate::facts::access).
    let before: &NodeSnapshot = &session.access.nodes;
    let root = &before.dev_root;
    let mut problems: Vec<String> = Vec::new();
    let not_exposed = session.access.explain_no_gpu();
    // The driver runs first, so that a node it creates itself is seen and named as such.
    let cuda_count = session.devices().map(<[_]>::len);

    let ctl = root.join("nvidiactl");
    judge_ctl(&before.nvidiactl, &ctl, &not_exposed, &mut problems);
    let uvm_expected = major_from_proc("nvidia-uvm");
    judge_uvm(before, uvm_expected, &mut problems);
    let gpus = before.gpus.len();
    judge_gpu_nodes(before, &not_exposed, &mut problems);
    let manifest_gpus = judge_manifest_devices(session, root, gpus, &mut problems);
    if let Ok(count) = cuda_count {
        judge_device_count(session, count, gpus, &mut problems);
    }

    let char_numbers = |node: &Node| match node {
        Node::Char(major, minor) => Some((*major, *minor)),
        _ => None,
    };
    let manifest = session.manifest.manifest();
    let facts = facts_of(&NodesFacts {
        dev_root: root.clone(),
        gpu_nodes: before.gpus.iter().map(|(_, p, _)| p.clone()).collect(),
        nvidiactl: char_numbers(&before.nvidiactl),
        nvidia_uvm: char_numbers(&before.nvidia_uvm),
        nodes_before_driver_calls: before.clone(),
        nvidiactl_now: Node::at(&ctl),
        nvidia_uvm_major_in_proc_devices: uvm_expected,
        cuda_device_count: cuda_count.as_ref().ok().copied(),
        cuda_device_count_unavailable: cuda_count.as_ref().err().map(ToString::to_string),
        manifest: session.manifest.fact(),
        manifest_devices: manifest.map(|m| m.devices.clone()),
        manifest_gpu_nodes: manifest.map(|_| manifest_gpus),
        manifest_leased_gpus: manifest.map(|m| m.leased_gpus.clone()),
    });
    let present = format!("nvidiactl, nvidia-uvm and {gpus} GPU node(s) present");
    Ok(judged(&problems, present, cuda_count.ok(), facts))
}

/// `nvidiactl` (at `ctl`) as it was before any driver call: the NVIDIA control device.
fn judge_ctl(node: &Node, ctl: &Path, not_exposed: &str, problems: &mut Vec<String>) {
    match node {
        Node::Char(NVIDIA_MAJOR, NVIDIACTL_MINOR) => {}
        Node::Char(major, minor) => problems.push(format!(
            "{} is {major}:{minor}, not {NVIDIA_MAJOR}:{NVIDIACTL_MINOR}: not the NVIDIA control device",
            ctl.display()
        )),
        other => problems.push(format!(
            "{} was {} before any driver call{}: {not_exposed}",
            ctl.display(),
            describe(other),
            // Missing before any driver call but here now: the real `cuInit`, run as root,
            // creates `/dev/nvidiactl` itself.
            if *other == Node::Missing && Node::at(ctl).exists() {
                " (it exists now because the driver created it: cuInit running as root makes a \
                 missing nvidiactl itself; it was not exposed)"
            } else {
                ""
            }
        )),
    }
}

/// `nvidia-uvm` of `before`: a character device of the major `/proc/devices` gives it
/// (`expected`, when listed), not a GPU node.
fn judge_uvm(before: &NodeSnapshot, expected: Option<u32>, problems: &mut Vec<String>) {
    let uvm = before.dev_root.join("nvidia-uvm");
    match &before.nvidia_uvm {
        Node::Char(major, _) if expected.is_some_and(|m| m != *major) => problems.push(format!(
            "{} has major {major} but /proc/devices says nvidia-uvm is {}: a stale or wrong node",
            uvm.display(),
            expected.unwrap_or_default()
        )),
        Node::Char(NVIDIA_MAJOR, minor) => problems.push(format!(
            "{} is {NVIDIA_MAJOR}:{minor}, a GPU node, not nvidia-uvm (which has its own major)",
            uvm.display()
        )),
        Node::Char(..) => {}
        other => problems.push(format!(
            "{} is {}: the nvidia-uvm module creates it lazily; run `nvidia-modprobe -u -c=0` \
             on the host (then the hook exposes it)",
            uvm.display(),
            describe(other)
        )),
    }
}

/// Every `nvidiaN` of `before`: the NVIDIA major and minor N; and at least one.
fn judge_gpu_nodes(before: &NodeSnapshot, not_exposed: &str, problems: &mut Vec<String>) {
    for (number, path, node) in &before.gpus {
        match node {
            Node::Char(NVIDIA_MAJOR, minor) if minor == number => {}
            Node::Char(major, minor) => problems.push(format!(
                "{} is {major}:{minor}, not {NVIDIA_MAJOR}:{number}",
                path.display()
            )),
            other => problems.push(format!("{} is {}", path.display(), describe(other))),
        }
    }
    if before.gpus.is_empty() {
        problems.push(format!(
            "no {}/nvidiaN node: {not_exposed}",
            before.dev_root.display()
        ));
    }
}

/// Every device the hook's manifest lists is here (under `root`), and no more `/dev/nvidiaN`
/// than it lists (`gpus` are here). Returns how many of its devices are `/dev/nvidiaN`.
fn judge_manifest_devices(
    session: &Session,
    root: &Path,
    gpus: usize,
    problems: &mut Vec<String>,
) -> usize {
    let Some(devices) = session.manifest.manifest().map(|m| &m.devices) else {
        return 0;
    };
    for device in devices {
        // The manifest names inside paths under /dev; --dev-root moves /dev.
        let here = Path::new(device)
            .strip_prefix("/dev")
            .map_or_else(|_| PathBuf::from(device), |rest| root.join(rest));
        if std::fs::symlink_metadata(&here).is_err() {
            problems.push(format!(
                "the hook's manifest lists {device} as exposed, but {} is missing: the sandbox \
                 did not get what the hook planned (a stale manifest, or a Nix without \
                 pre-build-hook support for it)",
                here.display()
            ));
        }
    }
    let manifest_gpus = devices
        .iter()
        .filter(|d| {
            d.strip_prefix("/dev/nvidia")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .count();
    if gpus > manifest_gpus {
        problems.push(format!(
            "{gpus} /dev/nvidiaN node(s) are here but the hook's manifest lists {manifest_gpus}: \
             something other than cuda-sandbox-hook exposes GPUs to this build (check Nix's \
             sandbox-paths)"
        ));
    }
    manifest_gpus
}

/// CUDA's device count (`count`) against the GPUs the hook leased this build, and against the
/// `gpus` `/dev/nvidiaN` nodes here.
fn judge_device_count(session: &Session, count: usize, gpus: usize, problems: &mut Vec<String>) {
    let leased: &[u32] = session
        .manifest
        .manifest()
        .map_or(&[], |m| m.leased_gpus.as_slice());
    if !leased.is_empty() && count != leased.len() {
        let why = if count > leased.len() {
            "the build reaches GPUs leased to other builds (is something other than \
             cuda-sandbox-hook exposing /dev/nvidiaN, or CUDA_VISIBLE_DEVICES unset where the \
             driver ignores device nodes?)"
        } else {
            "some leased GPU nodes are not usable here (check the hook's device globs and the \
             nodes' permissions)"
        };
        problems.push(format!(
            "CUDA reports {count} device(s) but the hook leased this build {} GPU(s) \
             {leased:?}: {why}",
            leased.len()
        ));
    }
    if gpus < count {
        problems.push(format!(
            "CUDA reports {count} devices but only {gpus} /dev/nvidiaN nodes exist: the hook's \
             device glob misses some GPUs"
        ));
    }
}

/// What `devices::features` reports (the report's `facts`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeaturesFacts {
    /// Where the required features were read: `$requiredSystemFeatures`, a structured attrs
    /// file, the hook's manifest (nothing declared in the environment), or nothing declared.
    pub source: String,
    /// Every required feature, as declared.
    pub required: Vec<String>,
    /// The `cuda-sm-*` features among them, each once (malformed ones included).
    pub(crate) cuda_sm: Vec<String>,
    /// The GPUs CUDA reports to this process, when it can say.
    pub gpus: Option<Vec<FeatureGpu>>,
    /// Why CUDA cannot say.
    pub(crate) gpus_unavailable: Option<String>,
    /// The `cuda-sm-*` features no GPU here satisfies.
    pub unmet: Vec<String>,
    /// The manifest's `features`, when there is a manifest.
    pub manifest_features: Option<Vec<String>>,
    /// The `cuda-sm-*` features the build requires that the manifest lacks: the hook did not
    /// choose GPUs by them (it had no derivation to read, e.g. a remote build).
    pub(crate) not_in_manifest: Vec<String>,
    /// The manifest's `cuda-sm-*` features the build does not require: another build's
    /// manifest.
    pub(crate) only_in_manifest: Vec<String>,
}

/// The names of a requirement's features: the well-formed ones, then the malformed.
fn feature_names(required: &Required) -> Vec<String> {
    required
        .archs
        .iter()
        .map(|&arch| feature_name(arch))
        .chain(required.malformed.iter().cloned())
        .collect()
}

/// `GPU 0: 8.9, GPU 1: 9.0`, or `no GPU`.
fn describe_gpus(gpus: &[FeatureGpu]) -> String {
    if gpus.is_empty() {
        return "no GPU".to_owned();
    }
    let each: Vec<String> = gpus
        .iter()
        .map(|gpu| (gpu.ordinal.unwrap_or_default(), gpu.capability))
        .map(|(ordinal, capability)| format!("GPU {ordinal}: {capability}"))
        .collect();
    each.join(", ")
}

/// Runs `devices::features`.
pub(crate) fn features(session: &Session) -> Result<Outcome, Outcome> {
    let declared = build_features::from_env().map_err(|error| {
        Outcome::fail_without_facts(format!(
            "cannot read the build's required features: {error}"
        ))
    })?;
    let manifest = session.manifest.manifest();
    // Where the build's required features are read, in words, and the features: the
    // environment's, else the hook's manifest's, else none.
    let (source, required) = match (declared, manifest) {
        (Some(declared), _) => (declared.source.describe(), declared.features),
        (None, Some(manifest)) => (
            "the hook's manifest (no requiredSystemFeatures in the environment)".to_owned(),
            manifest.features.clone(),
        ),
        (None, None) => (
            "nothing declared: no $requiredSystemFeatures, no .attrs.json, no manifest".to_owned(),
            Vec::new(),
        ),
    };
    let wanted = fatbin_features::required(required.iter().map(String::as_str));
    let cuda_sm = feature_names(&wanted);
    let (not_in_manifest, only_in_manifest) = against_manifest(&cuda_sm, manifest);
    let listed = session
        .devices()
        .map(|devices| devices.iter().map(FeatureGpu::from).collect::<Vec<_>>());
    let unmet = match &listed {
        Ok(gpus) => wanted.unmet_by(&gpus.iter().map(|gpu| gpu.capability).collect::<Vec<_>>()),
        Err(_) => cuda_sm.clone(),
    };
    let gpus: &[FeatureGpu] = listed.as_deref().unwrap_or_default();
    // The note on required features the manifest lacks, or nothing.
    let hook_note = if not_in_manifest.is_empty() {
        String::new()
    } else {
        format!(
            "; note: the hook's manifest lacks {}, so the hook did not choose GPUs by it (it \
             had no derivation to read: a remote build, see missing_drv)",
            not_in_manifest.join(" ")
        )
    };
    // Whether it passes, and why, the first of these that holds deciding.
    let (verdict, message) = if !only_in_manifest.is_empty() {
        (Fail, another_builds(&only_in_manifest, &source, &cuda_sm))
    } else if wanted.is_empty() {
        let message = format!(
            "no cuda-sm-* feature required ({source}): any GPU will do (a derivation that \
             needs an architecture requires its cuda-sm-* feature)"
        );
        (Pass, message)
    } else if let Err(error) = &listed {
        let message = format!(
            "the build requires {} but the GPUs cannot be asked for their compute capability: \
             {error}",
            cuda_sm.join(" ")
        );
        (Fail, message)
    } else if unmet.is_empty() {
        let message = format!(
            "{} met by the GPUs this process can use ({}){hook_note}",
            cuda_sm.join(" "),
            describe_gpus(gpus)
        );
        (Pass, message)
    } else {
        (Fail, not_met(&unmet, &wanted, gpus, &hook_note))
    };
    let facts = facts_of(&FeaturesFacts {
        source,
        required,
        cuda_sm,
        gpus: listed.as_ref().ok().cloned(),
        gpus_unavailable: listed.as_ref().err().map(ToString::to_string),
        unmet: if wanted.is_empty() { Vec::new() } else { unmet },
        manifest_features: manifest.map(|m| m.features.clone()),
        not_in_manifest,
        only_in_manifest,
    });
    Ok(Outcome::new(verdict, message, facts))
}

/// The build's `cuda-sm-*` features (`cuda_sm`) against the manifest's: those it lacks, and
/// those only it has (both empty without a manifest).
fn against_manifest(cuda_sm: &[String], manifest: Option<&Manifest>) -> (Vec<String>, Vec<String>) {
    let Some(manifest) = manifest else {
        return (Vec::new(), Vec::new());
    };
    let listed = feature_names(&fatbin_features::required(
        manifest.features.iter().map(String::as_str),
    ));
    // The features of `a` that `b` lacks, in `a`'s order.
    let lacking =
        |a: &[String], b: &[String]| a.iter().filter(|f| !b.contains(f)).cloned().collect();
    (lacking(cuda_sm, &listed), lacking(&listed, cuda_sm))
}

/// The failure of a manifest that holds the build to features (`only_in_manifest`) it does not
/// require (it requires `cuda_sm`, as `source` says).
fn another_builds(only_in_manifest: &[String], source: &str, cuda_sm: &[String]) -> String {
    format!(
        "the hook's manifest holds this build to {}, which it does not require ({source} \
         says {}): the manifest is another build's, or the hook read another derivation",
        only_in_manifest.join(" "),
        if cuda_sm.is_empty() {
            "none".to_owned()
        } else {
            cuda_sm.join(" ")
        },
    )
}

/// The failure of features (`unmet`, of the requirement `wanted`) the `gpus` do not meet.
fn not_met(unmet: &[String], wanted: &Required, gpus: &[FeatureGpu], hook_note: &str) -> String {
    let malformed = if wanted.malformed.is_empty() {
        String::new()
    } else {
        format!(
            " ({} name no architecture of Nixpkgs' convention: write cuda-sm-90, cuda-sm-90a, \
             cuda-sm-100f)",
            wanted.malformed.join(" ")
        )
    };
    format!(
        "{} not met by the GPUs this process can use ({}){malformed}: the builder \
         advertises a feature its GPUs lack (compare its system-features or \
         supportedFeatures with `cuda-sandbox-check features` there), or the GPUs given \
         to this build are not the ones that have it{hook_note}",
        unmet.join(" "),
        describe_gpus(gpus)
    )
}
