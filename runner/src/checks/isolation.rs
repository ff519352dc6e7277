//! `isolation::no_gpu`: the negative check, for an *untagged* build. It passes only when the
//! build sees no GPU device node (NVIDIA's, or AMD's `kfd` and `dri/*` that ZLUDA uses),
//! cannot load `libcuda.so.1` or `libnvidia-ml.so.1`, and has
//! neither the driver link nor a hook manifest: proof that the hook gave nothing to a build
//! that did not ask.

use std::path::Path;

use super::Outcome;
use crate::facts;
use crate::session::Session;

/// Device names (in the device root) that must not be visible to an untagged build.
const GPU_NODES: &[&str] = &[
    // AMD's compute device, which ZLUDA reaches the GPU through (with `dri/*`, below).
    "kfd",
    "nvidia",
    "nvmap",
    "nvhost-",
    "nvgpu",
    "nvsciipc",
    "host1x-fence",
];

/// The check.
pub(crate) fn no_gpu(session: &Session) -> Result<Outcome, Outcome> {
    let dev_root = &session.options.dev_root;
    let listed = |dir: &Path| std::fs::read_dir(dir).into_iter().flatten().flatten();
    let gpu_node = |name: &str| GPU_NODES.iter().any(|p| name.starts_with(p));
    let mut seen: Vec<String> = listed(dev_root)
        .filter(|e| gpu_node(&e.file_name().to_string_lossy()))
        .chain(listed(&dev_root.join("dri")))
        .map(|e| e.path().display().to_string())
        .collect();
    // A driver that loads here is exactly the failure this check reports.
    let loadable: Vec<String> = ["libcuda.so.1", "libnvidia-ml.so.1"]
        .into_iter()
        .filter(|lib| crate::cuda::loaded::library_loads(lib))
        .map(String::from)
        .collect();
    let manifest = session
        .options
        .manifest
        .clone()
        .unwrap_or_else(|| cuda_sandbox_manifest::MANIFEST_PATH.into());
    let mut paths: Vec<String> = Vec::new();
    // The driver link (`--driver-link`, /run/opengl-driver/lib by default) and the link
    // itself (/run/opengl-driver), taken from the flag so tests never look at the host's.
    let link = &session.options.lint.driver_link;
    let link_parent = link.parent().unwrap_or(link);
    for p in [manifest.as_path(), link_parent, link.as_path()] {
        if p.symlink_metadata().is_ok() && !paths.contains(&p.display().to_string()) {
            paths.push(p.display().to_string());
        }
    }
    seen.sort();
    let facts = facts! {
        "dev_root" => dev_root.display().to_string(),
        "gpu_nodes_seen" => seen,
        "driver_libraries_loadable" => loadable,
        "driver_paths_seen" => paths,
    };
    if seen.is_empty() && loadable.is_empty() && paths.is_empty() {
        return Ok(Outcome::pass(
            "no GPU device, driver library, driver link or manifest is visible",
            facts,
        ));
    }
    let mut what = seen.clone();
    what.extend(loadable.iter().map(|l| format!("{l} loads")));
    what.extend(paths.iter().cloned());
    Ok(Outcome::fail(
        format!(
            "this build must not see the GPU but sees {}: the hook exposed it to a build \
             without a configured requiredSystemFeatures, or the sandbox is off",
            what.join(", ")
        ),
        facts,
    ))
}
