//! What a CDI device a rule names gives a build when GPUs are leased (`gpus_per_build > 0`):
//! its spec's top-level edits, which every build gets, and the edits of each GPU it lists,
//! each tagged with that GPU so that only a build leased it keeps them
//! ([`crate::plan::GpuDemand::keep`]).
//!
//! A device belongs to GPU N when the one `/dev/nvidiaN` node it lists itself is N (nvidia-ctk's
//! `0`, `GPU-<uuid>`, and a MIG device `0:1` of that GPU). Such a device a rule names is that
//! GPU's. A device that lists several GPUs (`all`) stands for the GPU devices of its spec whose
//! GPU it lists: their own nodes (`/dev/dri/card1`, `/dev/dri/renderD129`, …) and hooks go with
//! their GPU. A node of it no such device lists is its GPU's when it is a `/dev/nvidiaN`, and is
//! otherwise given to no build, as it cannot be told whose it is; its other edits (mounts,
//! hooks, variables) no GPU device lists are every build's, like the spec's.
//!
//! Without leases a device is planned whole, as every build gets every GPU.

use crate::cdi::ContainerEdits;
use crate::plan::{gpu_number, gpu_numbers};
use crate::scan::CdiDevice;
use std::collections::BTreeSet;
use std::path::Path;

/// Edits of one device, and the GPU whose they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Part {
    /// The device that lists them (fully qualified).
    pub device: String,
    /// The GPU (its `/dev/nvidiaN` number) they belong to; `None`: every build's.
    pub gpu: Option<u32>,
    /// The edits.
    pub edits: ContainerEdits,
}

/// The parts of the device `name` (found as `found`): the whole device without leases,
/// else split by GPU, with the paths of the nodes that belong to no GPU (which cannot be
/// given to one build).
pub(super) fn parts(name: &str, found: &CdiDevice, leased: bool) -> (Vec<Part>, Vec<String>) {
    // The part of the device `device` that goes with `gpu` (none: every build's).
    let part = |device: &str, gpu, edits: &ContainerEdits| Part {
        device: device.to_string(),
        gpu,
        edits: edits.clone(),
    };
    let own_gpus = gpus_of(&found.own);
    if !leased || own_gpus.is_empty() {
        return (vec![part(name, None, &found.edits)], Vec::new());
    }
    let shared = part(name, None, &found.shared);
    if let [gpu] = own_gpus[..] {
        return (vec![part(name, Some(gpu), &found.own), shared], Vec::new());
    }
    let mut parts: Vec<Part> = found
        .siblings
        .iter()
        .filter_map(|(device, edits)| match gpus_of(edits)[..] {
            [gpu] if own_gpus.contains(&gpu) => Some(part(device, Some(gpu), edits)),
            _ => None,
        })
        .collect();
    let listed = |f: &dyn Fn(&ContainerEdits) -> bool| parts.iter().any(|p| f(&p.edits));
    let covered: BTreeSet<&str> = parts
        .iter()
        .flat_map(|p| p.edits.device_nodes.iter().map(|n| n.path.as_str()))
        .collect();
    let mut rest = ContainerEdits {
        env: (found.own.env.iter())
            .filter(|v| !listed(&|e| e.env.contains(v)))
            .cloned()
            .collect(),
        hooks: (found.own.hooks.iter())
            .filter(|h| !listed(&|e| e.hooks.contains(h)))
            .cloned()
            .collect(),
        mounts: (found.own.mounts.iter())
            .filter(|m| !listed(&|e| e.mounts.contains(m)))
            .cloned()
            .collect(),
        ..found.own.clone()
    };
    rest.device_nodes = Vec::new();
    let mut unowned = Vec::new();
    let mut alone: Vec<Part> = Vec::new();
    for n in &found.own.device_nodes {
        if covered.contains(n.path.as_str()) {
            continue;
        }
        match gpu_number(Path::new(&n.path)) {
            Some(gpu) => alone.push(part(
                name,
                Some(gpu),
                &ContainerEdits {
                    device_nodes: vec![n.clone()],
                    ..ContainerEdits::default()
                },
            )),
            None => unowned.push(n.path.clone()),
        }
    }
    parts.extend(alone);
    rest.extend(&found.shared);
    parts.push(part(name, None, &rest));
    (parts, unowned)
}

/// The GPUs whose `/dev/nvidiaN` node `edits` list, each once, in order.
fn gpus_of(edits: &ContainerEdits) -> Vec<u32> {
    gpu_numbers(edits.device_nodes.iter().map(|n| Path::new(&n.path)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cdi::spec::DeviceNode;

    fn nodes(paths: &[&str]) -> ContainerEdits {
        ContainerEdits {
            device_nodes: paths
                .iter()
                .map(|p| DeviceNode {
                    path: p.to_string(),
                    ..DeviceNode::default()
                })
                .collect(),
            ..ContainerEdits::default()
        }
    }

    fn device(own: &[&str], siblings: &[(&str, &[&str])]) -> CdiDevice {
        let shared = nodes(&["/dev/nvidiactl"]);
        let mut edits = nodes(own);
        edits.extend(&shared);
        CdiDevice {
            spec: "/run/cdi/s.json".into(),
            edits,
            sonames: Default::default(),
            own: nodes(own),
            shared,
            siblings: siblings
                .iter()
                .map(|(n, p)| (format!("nvidia.com/gpu={n}"), nodes(p)))
                .collect(),
        }
    }

    fn summary(parts: &[Part]) -> Vec<(String, Option<u32>, Vec<String>)> {
        parts
            .iter()
            .map(|p| {
                let paths = p.edits.device_nodes.iter().map(|n| n.path.clone());
                (p.device.clone(), p.gpu, paths.collect())
            })
            .collect()
    }

    #[test]
    fn all_stands_for_the_gpu_devices_of_its_spec_and_gives_no_node_it_cannot_place() {
        let all = device(
            &[
                "/dev/nvidia0",
                "/dev/dri/card1",
                "/dev/nvidia1",
                "/dev/dri/card9",
            ],
            &[
                ("0", &["/dev/nvidia0", "/dev/dri/card1"]),
                ("0:1", &["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21"]),
                ("2", &["/dev/nvidia2", "/dev/dri/card3"]),
            ],
        );
        let (parts, unowned) = parts("nvidia.com/gpu=all", &all, true);
        let s =
            |d: &str, g, p: &[&str]| (d.to_string(), g, p.iter().map(|x| x.to_string()).collect());
        assert_eq!(
            summary(&parts),
            [
                s(
                    "nvidia.com/gpu=0",
                    Some(0),
                    &["/dev/nvidia0", "/dev/dri/card1"]
                ),
                s(
                    "nvidia.com/gpu=0:1",
                    Some(0),
                    &["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21"]
                ),
                // No device of its own: the GPU node alone is its GPU's.
                s("nvidia.com/gpu=all", Some(1), &["/dev/nvidia1"]),
                s("nvidia.com/gpu=all", None, &["/dev/nvidiactl"]),
            ]
        );
        // GPU 2's device is not among those `all` lists; card9 is no GPU's.
        assert_eq!(unowned, ["/dev/dri/card9"]);
    }

    #[test]
    fn a_gpu_device_is_its_gpus_and_without_leases_a_device_is_whole() {
        let one = device(&["/dev/nvidia1", "/dev/dri/card2"], &[]);
        let (split, unowned) = parts("nvidia.com/gpu=1", &one, true);
        assert_eq!(split[0].gpu, Some(1));
        assert_eq!(split[0].edits, one.own);
        assert_eq!((split[1].gpu, &split[1].edits), (None, &one.shared));
        assert!(unowned.is_empty());
        let (whole, _) = parts("nvidia.com/gpu=1", &one, false);
        assert_eq!(whole.len(), 1);
        assert_eq!((whole[0].gpu, &whole[0].edits), (None, &one.edits));
    }
}
