//! The configuration's schema: the TOML tables and keys, their types and their defaults.

use cuda_sandbox_cuda_facts::features::parse_gpu;
use cuda_sandbox_cuda_facts::Capability;
use serde::{Deserialize, Deserializer};
use std::path::PathBuf;

/// The whole configuration file; a key it leaves out has its [`Default`] value.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Root under which `[[rule.device]]` globs and `[[rule.path]]` paths are looked up; the
    /// paths are exposed inside the sandbox without this prefix. `/` in production; a fake
    /// root in tests.
    pub(crate) host_root: PathBuf,
    /// The Nix store directory; paths under it are never re-rooted and get their closure.
    pub(crate) store_dir: PathBuf,
    /// Directory holding cached store-path closures.
    pub(crate) closure_cache: PathBuf,
    /// The `nix-store` program used to compute closures: an absolute path to a trusted (root-
    /// owned, not group/other-writable) program. Only the default, `nix-store`, is looked up in
    /// `PATH` (and the file found must be trusted too).
    pub(crate) nix_store: PathBuf,
    /// Where symlinks may lead (inside paths, under the host root); the store is always
    /// allowed. A link in an exposed place that leads elsewhere (e.g. to `/etc`) is not followed.
    pub(crate) symlink_roots: Vec<PathBuf>,
    /// What to do when the `.drv` is not on disk and Nix passed no JSON derivation (remote
    /// builders): `skip` (expose nothing, warn), `expose` (plan for every rule, as on a GPU
    /// builder whose mandatory features include `cuda`), or `fail`.
    pub(crate) missing_drv: MissingDrv,
    /// Directory for per-build manifests (outside every sandbox); stale files are removed.
    pub(crate) runtime_dir: PathBuf,
    /// GPUs leased to each tagged build for itself alone (`0`: every build gets every GPU).
    /// A derivation may ask for another number with the env attribute `cudaSandboxGpus`.
    /// Leases live in `<runtime_dir>/leases/` (see [`crate::lease`]).
    pub(crate) gpus_per_build: u32,
    /// The most GPUs one build may lease, whatever its `cudaSandboxGpus` asks (`0`: no cap
    /// but the host's GPUs).
    pub(crate) max_gpus_per_build: u32,
    /// How long a tagged build waits for enough free GPUs before failing (`0`: fail at once).
    pub(crate) lease_wait_seconds: u64,
    /// The compute capability of a Jetson's integrated GPU (`8.7` for Orin), which has no
    /// `/proc/driver/nvidia/gpus` for a GPU inventory: with it, a build's `cuda-sm-*`
    /// features are held to this GPU (see [`crate::scan::inventory`]). Unset: a host without
    /// that directory has no inventory.
    #[serde(deserialize_with = "gpu_capability")]
    pub(crate) tegra_capability: Option<Capability>,
    /// Where CDI specs are read from, lowest priority first (see [`crate::cdi`]).
    pub(crate) cdi_spec_dirs: crate::cdi::SpecDirs,
    /// The rules, each answering to a set of features.
    #[serde(rename = "rule")]
    pub rules: Vec<Rule>,
}

/// The policy for a derivation that is not on disk (see [`Config::missing_drv`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum MissingDrv {
    /// Expose nothing, with a warning.
    #[default]
    Skip,
    /// Expose what every rule gives.
    Expose,
    /// Fail the build.
    Fail,
}

/// What a set of features gets inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A name for messages and `explain`.
    pub(crate) name: String,
    /// The `requiredSystemFeatures` this rule answers to (any one of them suffices).
    pub features: Vec<String>,
    /// Device nodes, by glob under the host root.
    #[serde(default, rename = "device")]
    pub devices: Vec<DeviceGlob>,
    /// Host paths exposed at the same place inside.
    #[serde(default, rename = "path")]
    pub(crate) paths: Vec<HostPath>,
    /// Host paths exposed at another place inside.
    #[serde(default, rename = "mount")]
    pub(crate) mounts: Vec<Mount>,
    /// The NVIDIA driver: where to find it and which compat drivers to consider.
    pub driver: Option<DriverConfig>,
    /// CDI devices (`nvidia.com/gpu=all`) whose specs' device nodes and mounts the build gets
    /// (see [`crate::cdi`]).
    #[serde(default)]
    pub(crate) cdi: Vec<crate::cdi::DeviceName>,
    /// The fix printed when no spec defines one of `cdi` (by default: generate the spec with
    /// `nvidia-ctk cdi generate`); NixOS's module names the unit that writes its spec.
    pub(crate) cdi_hint: Option<String>,
    /// MIG instances as the driver publishes them (see [`crate::mig`]): with `gpus_per_build`
    /// each build is leased one, else every build gets every instance.
    pub(crate) mig: Option<MigConfig>,
    /// What of the host's `/sys` the rule's builds see (see [`crate::sysfs`]); absent: none.
    pub(crate) sysfs: Option<Sysfs>,
}

/// The part of `/sys` a rule's builds see, read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Sysfs {
    /// The CPU and NUMA topology: `/sys/devices/system/cpu` and `/sys/devices/system/node`.
    Topology,
    /// What ROCm reads of an AMD GPU: the KFD topology, `/sys/devices/virtual/kfd`, and the
    /// PCI devices that the exposed DRM nodes' `/sys/dev/char/226:<minor>` links lead to.
    Kfd,
}

/// The MIG source of a rule: each instance's GPU-instance and compute-instance capability
/// nodes; the administration capabilities only when named here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct MigConfig {
    /// Also expose the `config` capability (create and destroy MIG instances).
    pub config: bool,
    /// Also expose the `monitor` capability (see every instance of every GPU).
    pub monitor: bool,
}

/// Where the driver comes from, and the `cuda_compat` drivers to consider; a key left out has
/// its [`Default`] value.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DriverConfig {
    /// The NixOS driver link; used (with its closure) when it exists under the host root.
    pub(crate) link: PathBuf,
    /// Without the link: bind the host's driver libraries (from `/etc/ld.so.cache`, then
    /// `library_dirs`) at `<link>/lib/<name>`.
    pub(crate) host_libraries: bool,
    /// Directories searched for driver libraries after the loader cache.
    pub(crate) library_dirs: Vec<PathBuf>,
    /// Compat driver directories (globs; under the host root unless in the store).
    pub(crate) compat: Vec<String>,
    /// Fail tagged builds when no driver is found.
    pub(crate) required: bool,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            link: PathBuf::from("/run/opengl-driver"),
            host_libraries: true,
            library_dirs: paths(crate::discover::host::USUAL_LIBRARY_DIRS),
            compat: vec![
                "/usr/local/cuda*/compat".to_string(),
                "/usr/local/cuda*/compat_orin".to_string(),
            ],
            required: true,
        }
    }
}

/// A glob of device nodes, e.g. `/dev/nvidia[0-9]*`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceGlob {
    /// Absolute glob, matched under the host root; only character devices and directories count.
    pub(crate) glob: String,
    /// Fail tagged builds when nothing matches.
    #[serde(default)]
    pub(crate) required: bool,
    /// What to tell the user when a required glob matches nothing.
    pub(crate) hint: Option<String>,
    /// Only on this kind of host: `tegra` (Jetson) or `discrete`; absent: on every host.
    pub platform: Option<Platform>,
}

/// The kind of NVIDIA host, for devices that exist on one kind only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    /// Jetson (Tegra): `/etc/nv_tegra_release` or `/sys/devices/soc0/family` = tegra*.
    Tegra,
    /// Any other NVIDIA host (`/dev/nvidiactl` and friends).
    Discrete,
}

/// A host path exposed at the same path inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HostPath {
    /// Absolute path, looked up under the host root.
    pub path: PathBuf,
    /// Fail tagged builds when it does not exist.
    #[serde(default)]
    pub required: bool,
    /// What to tell the user when a required path is missing.
    pub hint: Option<String>,
    /// For a directory: also expose the targets of the symlinks directly inside it (within
    /// `symlink_roots`), as nix-required-mounts' `unsafeFollowSymlinks` does.
    #[serde(default)]
    pub follow_entry_symlinks: bool,
}

/// A host path exposed at a different path inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Mount {
    /// Where the build sees it.
    pub inside: PathBuf,
    /// The real path on the host (not under the host root).
    pub outside: PathBuf,
    /// Fail tagged builds when `outside` does not exist.
    #[serde(default)]
    pub required: bool,
    /// What to tell the user when a required mount source is missing.
    pub hint: Option<String>,
    /// For a directory: also expose the targets of the symlinks directly inside it (within
    /// `symlink_roots`), as nix-required-mounts' `unsafeFollowSymlinks` does.
    #[serde(default)]
    pub follow_entry_symlinks: bool,
}

/// A GPU's compute capability (`8.7`), as `cuda-sandbox-check features --capability` takes it.
fn gpu_capability<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Capability>, D::Error> {
    parse_gpu(&String::deserialize(d)?)
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("tegra_capability: {e}")))
}

/// The values of the keys a file leaves out (the built-in configuration is
/// [`Config::builtin`], a file of its own).
impl Default for Config {
    fn default() -> Self {
        Config {
            host_root: PathBuf::from("/"),
            store_dir: PathBuf::from("/nix/store"),
            closure_cache: PathBuf::from("/var/cache/cuda-sandbox/closures"),
            nix_store: PathBuf::from("nix-store"),
            symlink_roots: paths(&["/dev", "/run", "/usr", "/lib", "/lib64", "/opt"]),
            missing_drv: MissingDrv::default(),
            runtime_dir: PathBuf::from("/run/cuda-sandbox"),
            gpus_per_build: 0,
            max_gpus_per_build: 0,
            lease_wait_seconds: 600,
            tegra_capability: None,
            cdi_spec_dirs: crate::cdi::SpecDirs::default(),
            rules: Vec::new(),
        }
    }
}

fn paths(list: &[&str]) -> Vec<PathBuf> {
    list.iter().map(PathBuf::from).collect()
}

impl Rule {
    /// The first of `features` this rule answers to, for messages.
    pub(crate) fn first_match<'f>(&self, features: &'f [impl AsRef<[u8]>]) -> Option<&'f [u8]> {
        features
            .iter()
            .map(AsRef::as_ref)
            .find(|f| self.features.iter().any(|mine| mine.as_bytes() == *f))
    }
}

#[cfg(test)]
mod tests {
    use super::super::DEFAULT_FEATURES;
    use super::*;

    #[test]
    fn the_embedded_default_is_the_reference_builtin() {
        assert_eq!(Config::builtin(), reference_builtin());
    }

    /// The built-in configuration as it was written in Rust before it moved to a TOML file.
    fn reference_builtin() -> Config {
        let on = |platform: Option<Platform>, glob: &str, required: bool| DeviceGlob {
            glob: glob.to_string(),
            required,
            hint: None,
            platform,
        };
        let device = |glob: &str, required: bool| on(None, glob, required);
        let discrete = |glob: &str| on(Some(Platform::Discrete), glob, true);
        let tegra = |glob: &str, required: bool| on(Some(Platform::Tegra), glob, required);
        Config {
            rules: vec![Rule {
                name: "nvidia".to_string(),
                features: DEFAULT_FEATURES.iter().map(|f| f.to_string()).collect(),
                devices: vec![
                    discrete("/dev/nvidiactl"),
                    discrete("/dev/nvidia-uvm"),
                    discrete("/dev/nvidia[0-9]*"),
                    device("/dev/nvidia-uvm-tools", false),
                    device("/dev/nvidia-modeset", false),
                    device("/dev/nvidia-caps-imex-channels/*", false),
                    device("/dev/dri/renderD*", false),
                    device("/dev/dri/card*", false),
                    tegra("/dev/nvmap", true),
                    tegra("/dev/nvhost-*", false),
                    tegra("/dev/nvgpu/igpu0/*", false),
                    tegra("/dev/nvsciipc", false),
                    tegra("/dev/host1x-fence", false),
                ],
                paths: Vec::new(),
                mounts: Vec::new(),
                driver: Some(DriverConfig::default()),
                cdi: Vec::new(),
                cdi_hint: None,
                mig: Some(MigConfig::default()),
                sysfs: None,
            }],
            ..Config::default()
        }
    }
}
