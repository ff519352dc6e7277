//! The AMD device nodes a CUDA program reaches the GPU through under ZLUDA, which calls HIP,
//! whose ROCm runtime opens `/dev/kfd` (the amdgpu kernel driver's compute interface, its
//! major given in `/proc/devices` as `kfd`) and each GPU's DRM render node `/dev/dri/renderD<N>`
//! (major 226, minors from 128: the kernel's `DRM_MAJOR` and render-node minor base). Nixpkgs'
//! `nix-required-mounts` preset for ZLUDA exposes `/dev/kfd` and `/dev/dri` likewise.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::access::Node;

/// The DRM character device major number (`/dev/dri/*`).
pub(crate) const DRM_MAJOR: u32 = 226;
/// The first minor number of a DRM render node (`renderD128`).
pub(crate) const RENDER_MINOR_BASE: u32 = 128;

/// The AMD compute nodes under a device directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AmdNodes {
    /// The directory looked at (`/dev`, or `--dev-root`).
    pub(crate) dev_root: PathBuf,
    /// `kfd`.
    pub(crate) kfd: Node,
    /// Every `dri/renderD<N>`, sorted by N.
    pub(crate) render_nodes: Vec<(u32, PathBuf, Node)>,
}

impl AmdNodes {
    /// Looks under `dev_root`.
    pub(crate) fn scan(dev_root: &Path) -> AmdNodes {
        AmdNodes {
            dev_root: dev_root.to_path_buf(),
            kfd: Node::at(&dev_root.join("kfd")),
            render_nodes: Node::numbered(&dev_root.join("dri"), "renderD"),
        }
    }

    /// What is wrong with these nodes for `cuda_devices` GPUs (when CUDA can say), judged
    /// against `kfd_major` (`/proc/devices`' major of `kfd`, when listed); empty when nothing is.
    pub(crate) fn problems(
        &self,
        kfd_major: Option<u32>,
        cuda_devices: Option<usize>,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        let kfd = self.dev_root.join("kfd");
        match self.kfd {
            Node::Char(major, _) if kfd_major.is_some_and(|m| m != major) => {
                problems.push(format!(
                    "{} has major {major} but /proc/devices says kfd is {}: a stale or wrong node",
                    kfd.display(),
                    kfd_major.unwrap_or_default()
                ))
            }
            Node::Char(DRM_MAJOR, minor) => problems.push(format!(
                "{} is {DRM_MAJOR}:{minor}, a DRM node, not the KFD compute device",
                kfd.display()
            )),
            Node::Char(..) => {}
            Node::NotCharDevice => {
                problems.push(format!("{} is not a character device", kfd.display()))
            }
            Node::Missing => problems.push(format!(
                "{} is missing: ROCm cannot reach the GPU without the KFD compute device; expose \
                 /dev/kfd and /dev/dri to the build (a hook rule for the cuda feature on this AMD \
                 host), or outside Nix load the amdgpu kernel module",
                kfd.display()
            )),
        }
        for (number, path, node) in &self.render_nodes {
            match node {
                Node::Char(DRM_MAJOR, minor) if minor == number && *minor >= RENDER_MINOR_BASE => {}
                Node::Char(major, minor) => problems.push(format!(
                    "{} is {major}:{minor}, not the DRM render node {DRM_MAJOR}:{number}",
                    path.display()
                )),
                _ => problems.push(format!("{} is not a character device", path.display())),
            }
        }
        let render = self.render_nodes.len();
        if render == 0 {
            problems.push(format!(
                "no {}/dri/renderD<N> node: ROCm reaches each GPU through its DRM render node; \
                 expose /dev/dri to the build",
                self.dev_root.display()
            ));
        } else if let Some(count) = cuda_devices.filter(|&count| count > render) {
            problems.push(format!(
                "CUDA reports {count} devices but only {render} render node(s) exist: the \
                 exposed /dev/dri misses some GPUs"
            ));
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(kfd: Node, render: &[(u32, Node)]) -> AmdNodes {
        AmdNodes {
            dev_root: PathBuf::from("/dev"),
            kfd,
            render_nodes: render
                .iter()
                .map(|(n, node)| {
                    (
                        *n,
                        PathBuf::from(format!("/dev/dri/renderD{n}")),
                        node.clone(),
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn kfd_and_one_render_node_per_gpu_pass() {
        let ok = nodes(Node::Char(235, 0), &[(128, Node::Char(226, 128))]);
        assert_eq!(ok.problems(Some(235), Some(1)), Vec::<String>::new());
        assert_eq!(ok.problems(None, None), Vec::<String>::new());
    }

    #[test]
    fn a_missing_kfd_a_wrong_major_and_too_few_render_nodes_are_named() {
        let missing = nodes(Node::Missing, &[(128, Node::Char(226, 128))]);
        assert!(missing.problems(None, Some(1))[0].contains("/dev/kfd is missing"));
        let stale = nodes(Node::Char(234, 0), &[(128, Node::Char(226, 128))]);
        assert!(stale.problems(Some(235), Some(1))[0].contains("stale"));
        let few = nodes(Node::Char(235, 0), &[(128, Node::Char(226, 128))]);
        assert!(few.problems(None, Some(2))[0].contains("only 1 render node"));
        let none = nodes(Node::Char(235, 0), &[]);
        assert!(none.problems(None, Some(1))[0].contains("no /dev/dri/renderD<N>"));
        let card = nodes(Node::Char(235, 0), &[(128, Node::Char(226, 0))]);
        assert!(card.problems(None, Some(1))[0].contains("not the DRM render node"));
    }
}
