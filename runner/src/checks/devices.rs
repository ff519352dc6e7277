//! `devices::nodes`: the NVIDIA device nodes exist, are character devices with the
//! right numbers, and there are at least as many `/dev/nvidiaN` as CUDA devices. With the
//! hook's manifest, every device it says it exposed must be here, and when the hook leased
//! this build its own GPUs, CUDA must see exactly that many devices.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::check::{facts_of, Outcome};
use crate::facts::access::{Node, NodeSnapshot, NVIDIACTL_MINOR, NVIDIA_MAJOR};
use crate::session::Session;

/// What `devices::nodes` reports (the report's `facts`), whether it passes or fails.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodesFacts {
    /// The directory looked at (`/dev`, or `--dev-root`).
    pub dev_root: PathBuf,
    /// Every `nvidiaN` there before any driver call, sorted by N.
    pub gpu_nodes: Vec<PathBuf>,
    /// `nvidiactl`'s (major, minor) before any driver call, when it was a character device.
    pub nvidiactl: Option<(u32, u32)>,
    /// `nvidia-uvm`'s (major, minor) before any driver call, when it was a character device.
    pub nvidia_uvm: Option<(u32, u32)>,
    /// The nodes as they were before any driver call, which the check judges.
    pub nodes_before_driver_calls: NodeSnapshot,
    /// `nvidiactl` after the driver ran (the real `cuInit`, as root, creates it).
    pub nvidiactl_now: Node,
    /// The major number `/proc/devices` gives `nvidia-uvm`, when listed.
    pub nvidia_uvm_major_in_proc_devices: Option<u32>,
    /// How many devices CUDA reports, when it can say.
    pub cuda_device_count: Option<usize>,
    /// Why CUDA cannot say how many devices there are.
    pub cuda_device_count_unavailable: Option<String>,
    /// The manifest in brief, or a string saying why there is none
    /// ([`crate::facts::expectations::ManifestState::fact`]).
    pub manifest: Value,
    /// The device paths the manifest says the hook exposed, when there is a manifest.
    pub manifest_devices: Option<Vec<String>>,
    /// How many of those are `/dev/nvidiaN`, when there is a manifest.
    pub manifest_gpu_nodes: Option<usize>,
    /// The GPUs the hook leased this build, when there is a manifest.
    pub manifest_leased_gpus: Option<Vec<u32>>,
}

/// The major number of `nvidia-uvm` in /proc/devices, when listed.
fn uvm_major_from_proc() -> Option<u32> {
    let text = std::fs::read_to_string("/proc/devices").ok()?;
    let in_char_section = text.split("\n\n").next()?;
    in_char_section.lines().find_map(|line| {
        let (major, name) = line.trim().split_once(' ')?;
        (name.trim() == "nvidia-uvm").then(|| major.parse().ok())?
    })
}

/// What a node was, for messages.
fn describe(node: &Node) -> &'static str {
    match node {
        Node::Missing => "missing",
        Node::NotCharDevice => "not a character device",
        Node::Char(..) => "a character device",
    }
}

/// A note for a node that was missing before any driver call but is here now: the real
/// `cuInit`, run as root, creates `/dev/nvidiactl` itself.
fn created_since(before: &Node, path: &Path) -> String {
    if *before == Node::Missing && Node::at(path).exists() {
        " (it exists now because the driver created it: cuInit running as root makes a missing \
         nvidiactl itself; it was not exposed)"
            .to_owned()
    } else {
        String::new()
    }
}

/// Runs `devices::nodes`.
pub fn nodes(session: &Session) -> Outcome {
    // Judged on the nodes as they were before any driver call (see crate::facts::access).
    let before: &NodeSnapshot = &session.access.nodes;
    let root = &before.dev_root;
    let mut problems: Vec<String> = Vec::new();
    let not_exposed = session.access.explain_no_gpu();
    // The driver runs first, so that a node it creates itself is seen and named as such.
    let cuda_count = session.devices().map(<[_]>::len);

    let ctl = root.join("nvidiactl");
    match &before.nvidiactl {
        Node::Char(NVIDIA_MAJOR, NVIDIACTL_MINOR) => {}
        Node::Char(major, minor) => problems.push(format!(
            "{} is {major}:{minor}, not {NVIDIA_MAJOR}:{NVIDIACTL_MINOR}: not the NVIDIA control device",
            ctl.display()
        )),
        other => problems.push(format!(
            "{} was {} before any driver call{}: {not_exposed}",
            ctl.display(),
            describe(other),
            created_since(other, &ctl)
        )),
    }

    let uvm = root.join("nvidia-uvm");
    let uvm_expected = uvm_major_from_proc();
    match &before.nvidia_uvm {
        Node::Char(major, _) if uvm_expected.is_some_and(|m| m != *major) => {
            problems.push(format!(
            "{} has major {major} but /proc/devices says nvidia-uvm is {}: a stale or wrong node",
            uvm.display(),
            uvm_expected.unwrap_or_default()
        ))
        }
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

    let gpus: Vec<(u32, PathBuf)> = before
        .gpus
        .iter()
        .map(|(n, p, _)| (*n, p.clone()))
        .collect();
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
    if gpus.is_empty() {
        problems.push(format!("no {}/nvidiaN node: {not_exposed}", root.display()));
    }

    let exposed: Vec<&str> = session
        .manifest
        .manifest()
        .map(|m| m.devices.iter().map(String::as_str).collect())
        .unwrap_or_default();
    for device in &exposed {
        // The manifest names inside paths under /dev; --dev-root moves /dev.
        let here = match Path::new(device).strip_prefix("/dev") {
            Ok(rest) => root.join(rest),
            Err(_) => Path::new(device).to_path_buf(),
        };
        if std::fs::symlink_metadata(&here).is_err() {
            problems.push(format!(
                "the hook's manifest lists {device} as exposed, but {} is missing: the sandbox \
                 did not get what the hook planned (a stale manifest, or a Nix without \
                 pre-build-hook support for it)",
                here.display()
            ));
        }
    }
    let manifest_gpus = exposed
        .iter()
        .filter(|d| {
            d.strip_prefix("/dev/nvidia")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .count();
    if session.manifest.manifest().is_some() && gpus.len() > manifest_gpus {
        problems.push(format!(
            "{} /dev/nvidiaN node(s) are here but the hook's manifest lists {manifest_gpus}: \
             something other than cuda-sandbox-hook exposes GPUs to this build (check Nix's \
             sandbox-paths)",
            gpus.len()
        ));
    }

    let leased: &[u32] = session
        .manifest
        .manifest()
        .map_or(&[], |m| m.leased_gpus.as_slice());
    if let Ok(count) = cuda_count {
        if !leased.is_empty() && count != leased.len() {
            problems.push(format!(
                "CUDA reports {count} device(s) but the hook leased this build {} GPU(s) {leased:?}:                  {}",
                leased.len(),
                if count > leased.len() {
                    "the build reaches GPUs leased to other builds (is something other than                      cuda-sandbox-hook exposing /dev/nvidiaN, or CUDA_VISIBLE_DEVICES unset                      where the driver ignores device nodes?)"
                } else {
                    "some leased GPU nodes are not usable here (check the hook's device globs                      and the nodes' permissions)"
                }
            ));
        }
        if gpus.len() < count {
            problems.push(format!(
                "CUDA reports {count} devices but only {} /dev/nvidiaN nodes exist: the hook's \
                 device glob misses some GPUs",
                gpus.len()
            ));
        }
    }

    let char_numbers = |node: &Node| match node {
        Node::Char(major, minor) => Some((*major, *minor)),
        _ => None,
    };
    let manifest = session.manifest.manifest();
    let facts = facts_of(&NodesFacts {
        dev_root: root.clone(),
        gpu_nodes: gpus.iter().map(|(_, p)| p.clone()).collect(),
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
    match problems.first() {
        None => Outcome::pass(
            format!(
                "nvidiactl, nvidia-uvm and {} GPU node(s) present{}",
                gpus.len(),
                match cuda_count {
                    Ok(n) => format!(" for {n} CUDA device(s)"),
                    Err(_) => " (CUDA device count unavailable, see driver::version)".to_owned(),
                }
            ),
            facts,
        ),
        Some(first) => {
            let outcome = Outcome::fail(first.clone(), facts);
            if problems.len() > 1 {
                outcome.with_detail(problems[1..].join("\n"))
            } else {
                outcome
            }
        }
    }
}
