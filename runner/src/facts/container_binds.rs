//! `cuda-sandbox-check container-binds [--run-dir DIR]`: the `systemd-nspawn` arguments that
//! give a NixOS test container exactly the GPU the hook gave the build it runs in, one
//! argument a line, read from the build's manifest when the container starts.
//!
//! - each device node the manifest lists: `--bind=/dev/…` (read-write, as CUDA opens them);
//! - the driver: every path the manifest names for it (the driver link directory, each hop to
//!   `libcuda.so.1`, the compat directory) that lies outside the store, as one read-only bind
//!   of its top directory under `/run` (`/run/opengl-driver`, with what is mounted below it)
//!   or of the path itself elsewhere. Store paths need no bind of their own: the container
//!   profile binds `/nix/store` recursively, and so carries every store path Nix bound into
//!   the sandbox, the hook's closure of the driver with them. They must exist all the same;
//! - the `/sys` topology (`/sys/devices/system/cpu` and `node`, and AMD's
//!   `/sys/devices/virtual/kfd` beside `/dev/kfd`) when the sandbox has it, read-only;
//! - the manifest itself, read-only at its place, so that `cuda-sandbox-check` inside the
//!   container judges the same GPU.
//!
//! The test driver mounts a fresh tmpfs over the sandbox's `/run` before it starts a
//! container when `/run` is not writable (it is not, in a build: Nix made it as the host's
//! root), which hides what the hook put there; `--run-dir` names where that `/run` can still
//! be read (the GPU test helper binds it there first). Sources under `/run` are read there;
//! targets stay where the build saw them.
//!
//! Every path must exist as the manifest says (a device as a character device), or nothing is
//! printed and the exit status is 2: a container never starts with less, or more, than the
//! build was given.

use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use cuda_sandbox_manifest::{Manifest, MANIFEST_PATH};

use crate::facts::access::Node;
use crate::output;

/// `cuda-sandbox-check container-binds`.
#[derive(Debug, Parser)]
#[command(
    name = "cuda-sandbox-check container-binds",
    about = "Prints the systemd-nspawn arguments (one a line) that give a NixOS test container \
             the GPU the hook gave this build: its device nodes, the driver, the /sys \
             topology when present, and the hook's manifest.",
    after_help = "Run it inside the tagged build, where the container starts (the NixOS module \
                  cuda-sandbox.testContainer does). Exit status: 0 printed, 2 no readable \
                  manifest, or a path it names is missing or malformed (nothing is printed)."
)]
pub struct ContainerBindsCli {
    /// Where the build's /run can be read (the test driver may have hidden /run itself).
    #[arg(long, value_name = "DIR", default_value = "/run")]
    pub run_dir: PathBuf,
}

/// Why no bind list was printed. One line.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum BindsError {
    /// A path the manifest names is not a plain absolute path where it must be: which field,
    /// the path as written, and what it must be.
    #[error("the manifest's {0} {1:?} is not an absolute path {2}")]
    Malformed(&'static str, String, &'static str),
    /// A path the manifest names (which field) is missing from this build (where it was
    /// looked for).
    #[error("{path} ({0} in the manifest) is missing from this build", path = .1.display())]
    Missing(&'static str, PathBuf),
    /// A device the manifest lists is not a character device here (where it was looked for).
    #[error("{} (a device in the manifest) is not a character device", .0.display())]
    NotCharDevice(PathBuf),
}

/// One bind of the container: `source` (as this process sees it) at `target` inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// The path here.
    pub source: PathBuf,
    /// The path in the container.
    pub target: PathBuf,
    /// Read-only.
    pub read_only: bool,
}

impl Bind {
    /// The `systemd-nspawn` argument: `--bind=SRC:DST` or `--bind-ro=SRC:DST`, with `\` and
    /// `:` escaped as nspawn reads them.
    pub fn argument(&self) -> String {
        let escape = |p: &Path| {
            p.display()
                .to_string()
                .replace('\\', "\\\\")
                .replace(':', "\\:")
        };
        let flag = if self.read_only {
            "--bind-ro"
        } else {
            "--bind"
        };
        format!("{flag}={}:{}", escape(&self.source), escape(&self.target))
    }
}

/// The directories of the `/sys` topology the hook can bind (`sysfs = "topology"`).
const TOPOLOGY: [&str; 2] = ["/sys/devices/system/cpu", "/sys/devices/system/node"];

/// AMD's KFD topology (the hook's `sysfs = "kfd"`), which ROCm reads beside `/dev/kfd`.
const KFD_TOPOLOGY: &str = "/sys/devices/virtual/kfd";

/// The parts of `/sys` a container of a build given `devices` gets when the build has them:
/// the topology, and KFD's topology when `/dev/kfd` is among the devices.
fn sys_parts(devices: &[String]) -> Vec<&'static str> {
    let mut parts = TOPOLOGY.to_vec();
    if devices.iter().any(|d| d == "/dev/kfd") {
        parts.push(KFD_TOPOLOGY);
    }
    parts
}

/// The binds for `manifest`, with `/run` read at `run_dir` and every other path under `root`
/// (`/` but in tests).
pub fn binds(manifest: &Manifest, run_dir: &Path, root: &Path) -> Result<Vec<Bind>, BindsError> {
    let here = |inside: &Path| match inside.strip_prefix("/run") {
        Ok(rest) => run_dir.join(rest),
        Err(_) => root.join(inside.strip_prefix("/").unwrap_or(inside)),
    };
    let read_only = |target: PathBuf| Bind {
        source: here(&target),
        target,
        read_only: true,
    };
    let mut binds = Vec::new();
    for device in &manifest.devices {
        let target = plain(device, "device", "under /dev", "/dev/")?;
        let source = here(&target);
        match Node::at(&source) {
            Node::Char(..) => binds.push(Bind {
                source,
                target,
                read_only: false,
            }),
            Node::NotCharDevice => return Err(BindsError::NotCharDevice(source)),
            Node::Missing => return Err(BindsError::Missing("a device", source)),
        }
    }
    let driver = &manifest.driver;
    let driver_paths = driver
        .driver_link_lib
        .iter()
        .chain(&driver.compat_dir)
        .chain(&driver.libcuda);
    for path in driver_paths {
        let inside = plain(path, "driver path", "without . or .. or a newline", "/")?;
        if std::fs::symlink_metadata(here(&inside)).is_err() {
            return Err(BindsError::Missing("a driver path", here(&inside)));
        }
        if inside.starts_with("/nix/store") {
            continue;
        }
        // Under /run, its top directory there; elsewhere, itself.
        let top = inside
            .strip_prefix("/run")
            .ok()
            .and_then(|r| r.components().next());
        let target = top.map_or_else(|| inside.clone(), |top| Path::new("/run").join(top));
        if !binds.iter().any(|b: &Bind| target.starts_with(&b.target)) {
            binds.push(read_only(target));
        }
    }
    for part in sys_parts(&manifest.devices) {
        if here(Path::new(part)).is_dir() {
            binds.push(read_only(PathBuf::from(part)));
        }
    }
    binds.push(read_only(PathBuf::from(MANIFEST_PATH)));
    Ok(binds)
}

/// `path` as a plain absolute path (no `.` or `..`, no newline, which the one-a-line output
/// could not carry) under the directory `under` (`/` for any), else the error naming `rule_text`.
fn plain(
    path: &str,
    what: &'static str,
    rule_text: &'static str,
    under: &str,
) -> Result<PathBuf, BindsError> {
    let p = Path::new(path);
    let ok = p.is_absolute()
        && !path.contains('\n')
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        && p.starts_with(under);
    if ok {
        Ok(p.to_path_buf())
    } else {
        Err(BindsError::Malformed(what, path.to_string(), rule_text))
    }
}

/// Runs `container-binds`: the arguments on stdout, or the reason (main says it in one line on
/// stderr, exit status 2).
pub fn run(cli: &ContainerBindsCli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let manifest = Manifest::read(&cli.run_dir.join("cuda-sandbox/manifest.json"))?;
    let binds = binds(&manifest, &cli.run_dir, Path::new("/"))?;
    output::to_stdout(|out| {
        binds
            .iter()
            .try_for_each(|b| writeln!(out, "{}", b.argument()))
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuda_sandbox_manifest::{DriverManifest, MANIFEST_VERSION};

    fn manifest(devices: &[&str], driver: DriverManifest) -> Manifest {
        Manifest {
            version: MANIFEST_VERSION,
            derivation: "/nix/store/x.drv".into(),
            chroot: "/nix/store/x.drv.chroot".into(),
            rules: vec!["nvidia".into()],
            features: vec!["cuda".into()],
            devices: devices.iter().map(|d| d.to_string()).collect(),
            leased_gpus: Vec::new(),
            mig: None,
            driver,
        }
    }

    #[test]
    fn arguments_escape_colons_and_backslashes() {
        let bind = Bind {
            source: "/a:b\\c".into(),
            target: "/dev/x".into(),
            read_only: true,
        };
        assert_eq!(bind.argument(), "--bind-ro=/a\\:b\\\\c:/dev/x");
    }

    #[test]
    fn malformed_paths_are_refused_before_anything_is_looked_at() {
        let none = DriverManifest::none("no driver");
        for (device, rule) in [
            ("/dev/../etc/shadow", "under /dev"),
            ("dev/nvidia0", "under /dev"),
            ("/etc/passwd", "under /dev"),
            ("/dev/nvidia0\n--bind=/", "under /dev"),
        ] {
            let e = binds(
                &manifest(&[device], none.clone()),
                Path::new("/run"),
                Path::new("/"),
            )
            .unwrap_err();
            assert!(
                matches!(&e, BindsError::Malformed(_, _, r) if *r == rule),
                "{device:?}: {e:?}"
            );
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        let mut driver = none;
        driver.driver_link_lib = Some("/run/../etc".into());
        assert!(matches!(
            binds(&manifest(&[], driver), Path::new("/run"), Path::new("/")),
            Err(BindsError::Malformed(..))
        ));
    }

    #[test]
    fn a_missing_or_wrong_device_renders_nothing() {
        let temp = tempfile::tempdir().unwrap();
        std::fs::create_dir(temp.path().join("dev")).unwrap();
        std::fs::write(temp.path().join("dev/nvidia0"), "").unwrap();
        let none = DriverManifest::none("no driver");
        let e = binds(
            &manifest(&["/dev/nvidia0"], none.clone()),
            Path::new("/run"),
            temp.path(),
        )
        .unwrap_err();
        assert_eq!(
            e,
            BindsError::NotCharDevice(temp.path().join("dev/nvidia0"))
        );
        let e = binds(
            &manifest(&["/dev/nvidia1"], none),
            Path::new("/run"),
            temp.path(),
        )
        .unwrap_err();
        assert!(matches!(e, BindsError::Missing(..)), "{e:?}");
    }

    #[test]
    fn driver_paths_bind_their_top_directory_under_run_once_and_store_paths_not_at_all() {
        let temp = tempfile::tempdir().unwrap();
        let run = temp.path().join("saved-run");
        std::fs::create_dir_all(run.join("opengl-driver/lib")).unwrap();
        std::fs::write(run.join("opengl-driver/lib/libcuda.so.1"), "").unwrap();
        let store_lib = "/nix/store/00000000000000000000000000000000-driver/lib/libcuda.so.1";
        std::fs::create_dir_all(temp.path().join(&store_lib[1..]).parent().unwrap()).unwrap();
        std::fs::write(temp.path().join(&store_lib[1..]), "").unwrap();
        let mut driver = DriverManifest::none("host");
        driver.driver_link_lib = Some("/run/opengl-driver/lib".into());
        driver.libcuda = vec![
            "/run/opengl-driver/lib/libcuda.so.1".into(),
            store_lib.into(),
        ];
        let got = binds(&manifest(&[], driver.clone()), &run, temp.path()).unwrap();
        let args: Vec<String> = got.iter().map(Bind::argument).collect();
        assert_eq!(
            args,
            [
                format!(
                    "--bind-ro={}:/run/opengl-driver",
                    run.join("opengl-driver").display()
                ),
                format!(
                    "--bind-ro={}:/run/cuda-sandbox/manifest.json",
                    run.join("cuda-sandbox/manifest.json").display()
                ),
            ]
        );
        // A driver path the build lacks fails, naming where it was looked for.
        driver
            .libcuda
            .push("/run/opengl-driver/lib/libcuda.so.535.104.05".into());
        let e = binds(&manifest(&[], driver), &run, temp.path()).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} (a driver path in the manifest) is missing from this build",
                run.join("opengl-driver/lib/libcuda.so.535.104.05")
                    .display()
            )
        );
    }

    #[test]
    fn kfd_topology_only_beside_dev_kfd() {
        assert_eq!(sys_parts(&["/dev/nvidia0".into()]), TOPOLOGY);
        assert_eq!(
            sys_parts(&["/dev/kfd".into(), "/dev/dri/renderD128".into()]),
            [TOPOLOGY[0], TOPOLOGY[1], KFD_TOPOLOGY]
        );
    }

    #[test]
    fn the_sys_topology_is_bound_read_only_when_present() {
        let temp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(temp.path().join("sys/devices/system/node")).unwrap();
        let got = binds(
            &manifest(&[], DriverManifest::none("none")),
            Path::new("/run"),
            temp.path(),
        )
        .unwrap();
        assert_eq!(
            got[0],
            Bind {
                source: temp.path().join("sys/devices/system/node"),
                target: "/sys/devices/system/node".into(),
                read_only: true,
            }
        );
        assert_eq!(got.len(), 2, "{got:?}");
    }
}
