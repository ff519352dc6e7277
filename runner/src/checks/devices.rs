//! `devices::nodes`: the NVIDIA device nodes exist, are character devices with the
//! right numbers, and there are at least as many `/dev/nvidiaN` as CUDA devices. With the
//! hook's manifest, every device it says it exposed must be here, and when the hook leased
//! this build its own GPUs, CUDA must see exactly that many devices.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::checks::Outcome;
use crate::facts;
use crate::session::Session;

/// The NVIDIA character device major number (`/dev/nvidiaN`, `/dev/nvidiactl`).
const NVIDIA_MAJOR: u32 = 195;
/// `/dev/nvidiactl`'s minor number.
const NVIDIACTL_MINOR: u32 = 255;

const NOT_EXPOSED: &str = "the GPU device nodes are not exposed: tag the derivation with \
    requiredSystemFeatures = [ \"cuda\" ] and install cuda-sandbox-hook as Nix's pre-build-hook";

/// A character device's (major, minor), or a description of what is there instead.
fn char_device(path: &Path) -> Result<(u32, u32), String> {
    let metadata = std::fs::metadata(path).map_err(|_| "missing".to_owned())?;
    if !metadata.file_type().is_char_device() {
        return Err("not a character device".to_owned());
    }
    let rdev = metadata.rdev();
    Ok((libc::major(rdev), libc::minor(rdev)))
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

/// The `nvidiaN` entries of `dev_root`, sorted by N.
fn numbered_nodes(dev_root: &Path) -> Vec<(u32, std::path::PathBuf)> {
    let mut nodes: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir(dev_root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let number: u32 = name.strip_prefix("nvidia")?.parse().ok()?;
            Some((number, entry.path()))
        })
        .collect();
    nodes.sort();
    nodes
}

/// Runs `devices::nodes`.
pub fn nodes(session: &Session) -> Outcome {
    let root = &session.options.dev_root;
    let mut problems: Vec<String> = Vec::new();

    let ctl = root.join("nvidiactl");
    match char_device(&ctl) {
        Ok((NVIDIA_MAJOR, NVIDIACTL_MINOR)) => {}
        Ok((major, minor)) => problems.push(format!(
            "{} is {major}:{minor}, not {NVIDIA_MAJOR}:{NVIDIACTL_MINOR}: not the NVIDIA control device",
            ctl.display()
        )),
        Err(what) => problems.push(format!("{} is {what}: {NOT_EXPOSED}", ctl.display())),
    }

    let uvm = root.join("nvidia-uvm");
    let uvm_expected = uvm_major_from_proc();
    match char_device(&uvm) {
        Ok((major, _)) if uvm_expected.is_some_and(|m| m != major) => problems.push(format!(
            "{} has major {major} but /proc/devices says nvidia-uvm is {}: a stale or wrong node",
            uvm.display(),
            uvm_expected.unwrap_or_default()
        )),
        Ok((NVIDIA_MAJOR, minor)) => problems.push(format!(
            "{} is {NVIDIA_MAJOR}:{minor}, a GPU node, not nvidia-uvm (which has its own major)",
            uvm.display()
        )),
        Ok(_) => {}
        Err(what) => problems.push(format!(
            "{} is {what}: the nvidia-uvm module creates it lazily; run `nvidia-modprobe -u -c=0` \
             on the host (then the hook exposes it)",
            uvm.display()
        )),
    }

    let gpus = numbered_nodes(root);
    for (number, path) in &gpus {
        match char_device(path) {
            Ok((NVIDIA_MAJOR, minor)) if minor == *number => {}
            Ok((major, minor)) => problems.push(format!(
                "{} is {major}:{minor}, not {NVIDIA_MAJOR}:{number}",
                path.display()
            )),
            Err(what) => problems.push(format!("{} is {what}", path.display())),
        }
    }
    if gpus.is_empty() {
        problems.push(format!("no {}/nvidiaN node: {NOT_EXPOSED}", root.display()));
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
    let cuda_count = session.devices().map(<[_]>::len);
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

    let facts = facts! {
        "dev_root" => root,
        "gpu_nodes" => gpus.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>(),
        "nvidiactl" => char_device(&ctl).ok(),
        "nvidia_uvm" => char_device(&uvm).ok(),
        "nvidia_uvm_major_in_proc_devices" => uvm_expected,
        "cuda_device_count" => cuda_count.as_ref().ok(),
        "cuda_device_count_unavailable" => cuda_count.as_ref().err(),
        "manifest" => session.manifest.fact(),
        "manifest_devices" => session.manifest.manifest().map(|m| &m.devices),
        "manifest_gpu_nodes" => session.manifest.manifest().map(|_| manifest_gpus),
        "manifest_leased_gpus" => session.manifest.manifest().map(|m| &m.leased_gpus),
    };
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
