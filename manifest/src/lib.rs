//! The manifest: what the hook exposed to one tagged build and which driver it chose, written by
//! `cuda-sandbox-hook` and read by `cuda-sandbox-check` inside the sandbox.
//!
//! One schema in one place, so the two sides cannot drift. The hook writes it outside the
//! chroot (a runtime directory) and exposes it read-only at [`MANIFEST_PATH`] inside.

pub mod inventory;
pub mod text;
pub mod versions;

use serde::{Deserialize, Deserializer, Serialize};
use std::path::Path;
use versions::CudaVersion;

/// Where a build finds its manifest.
pub const MANIFEST_PATH: &str = "/run/cuda-sandbox/manifest.json";
/// The schema version written in [`Manifest::version`].
pub const MANIFEST_VERSION: u32 = 1;

/// Which user-space driver the build should load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriverKind {
    /// The host's own driver (the NixOS driver link or the host's libraries).
    Host,
    /// A newer `cuda_compat` driver running on the host's older kernel module.
    Compat,
    /// No driver was found or configured.
    #[default]
    None,
}

impl std::fmt::Display for DriverKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DriverKind::Host => "host",
            DriverKind::Compat => "compat",
            DriverKind::None => "none",
        })
    }
}

/// The driver the hook chose, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverManifest {
    /// Host or compat.
    pub kind: DriverKind,
    /// Paths (as the build sees them) any of which is the right `libcuda.so.1` once resolved:
    /// the chosen library's name, each symlink hop, and its real path.
    pub libcuda: Vec<String>,
    /// The CUDA version the chosen driver provides (written `"12.2"`), when known.
    #[serde(default, deserialize_with = "cuda_version_field")]
    pub cuda_version: Option<CudaVersion>,
    /// The host driver's CUDA version (written `"11.4"`), when known.
    #[serde(default, deserialize_with = "host_cuda_version_field")]
    pub host_cuda_version: Option<CudaVersion>,
    /// The kernel module's version (`"535.104.05"`), when known.
    pub kernel_driver: Option<String>,
    /// The compat directory as the build sees it, when compat was chosen.
    pub compat_dir: Option<String>,
    /// The driver link directory the build sees (`/run/opengl-driver/lib`), when exposed.
    pub driver_link_lib: Option<String>,
    /// One sentence: why this driver.
    pub reason: String,
}

/// One MIG compute instance: the parent GPU (`/dev/nvidia<gpu>`), its GPU instance and the
/// compute instance in it, as the driver numbers them in
/// `/proc/driver/nvidia/capabilities/gpu<gpu>/mig/gi<gi>/ci<ci>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInstance {
    /// The parent GPU.
    pub gpu: u32,
    /// The GPU instance.
    pub gi: u32,
    /// The compute instance.
    pub ci: u32,
    /// The instance's UUID (`MIG-…`), when known. The hook reads only the driver's `/proc`
    /// files, which do not give it (NVML does), so it writes `None`: the runner then checks
    /// that CUDA sees one MIG device, without comparing UUIDs.
    #[serde(default)]
    pub uuid: Option<String>,
}

/// Everything the runner needs to check a build's GPU exposure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Schema version ([`MANIFEST_VERSION`]).
    pub version: u32,
    /// The derivation built.
    pub derivation: String,
    /// The sandbox root the manifest belongs to (used to clean stale manifests).
    pub chroot: String,
    /// The rules that matched.
    pub rules: Vec<String>,
    /// The derivation's required features.
    pub features: Vec<String>,
    /// Device nodes exposed (inside paths).
    pub devices: Vec<String>,
    /// The GPUs (`/dev/nvidiaN` numbers) leased to this build alone when the hook gives each
    /// build its own GPUs (`gpus_per_build`); empty when every build gets every GPU. The CUDA
    /// device count inside must equal its length.
    #[serde(default)]
    pub leased_gpus: Vec<u32>,
    /// The MIG instance leased to this build, when its GPU is split into MIG instances and
    /// the hook leases one per build; `None` otherwise.
    #[serde(default)]
    pub mig: Option<MigInstance>,
    /// The driver chosen.
    pub driver: DriverManifest,
}

/// A CUDA version field, whose error names the field: serde's own errors name the position
/// only, and "driver.cuda_version: bad CUDA version \"twelve\"" says what to fix.
fn version_field<'de, D: Deserializer<'de>>(
    d: D,
    field: &str,
) -> Result<Option<CudaVersion>, D::Error> {
    let text = <Option<std::borrow::Cow<'de, str>>>::deserialize(d)?;
    text.map(|t| CudaVersion::parse(&t))
        .transpose()
        .map_err(|e| serde::de::Error::custom(format!("driver.{field}: {e}")))
}

fn cuda_version_field<'de, D: Deserializer<'de>>(d: D) -> Result<Option<CudaVersion>, D::Error> {
    version_field(d, "cuda_version")
}

fn host_cuda_version_field<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<CudaVersion>, D::Error> {
    version_field(d, "host_cuda_version")
}

impl DriverManifest {
    /// No driver: nothing for the runner to compare the loaded libcuda with, and why.
    pub fn none(reason: impl Into<String>) -> DriverManifest {
        DriverManifest {
            reason: reason.into(),
            ..DriverManifest::default()
        }
    }
}

impl Manifest {
    /// Reads a manifest file.
    pub fn read(path: &Path) -> Result<Manifest, String> {
        let text =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let m: Manifest = serde_json::from_slice(&text)
            .map_err(|e| format!("{} is not a cuda-sandbox manifest: {e}", path.display()))?;
        if m.version != MANIFEST_VERSION {
            return Err(format!(
                "{} has manifest version {}, this program reads {MANIFEST_VERSION}",
                path.display(),
                m.version
            ));
        }
        Ok(m)
    }

    /// The manifest as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a manifest is plain data")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let m = Manifest {
            version: MANIFEST_VERSION,
            derivation: "/nix/store/x.drv".into(),
            chroot: "/nix/store/x.drv.chroot".into(),
            rules: vec!["nvidia".into()],
            features: vec!["cuda".into()],
            devices: vec!["/dev/nvidia0".into()],
            leased_gpus: vec![0],
            mig: None,
            driver: DriverManifest {
                kind: DriverKind::Compat,
                libcuda: vec!["/nix/store/c/compat/libcuda.so.1".into()],
                cuda_version: Some(CudaVersion(12020)),
                host_cuda_version: Some(CudaVersion(11040)),
                kernel_driver: Some("470.82.01".into()),
                compat_dir: Some("/nix/store/c/compat".into()),
                driver_link_lib: Some("/run/opengl-driver/lib".into()),
                reason: "r".into(),
            },
        };
        let t = std::env::temp_dir().join(format!("manifest-test-{}.json", std::process::id()));
        std::fs::write(&t, m.to_json()).unwrap();
        assert_eq!(Manifest::read(&t).unwrap(), m);
        assert!(m.to_json().contains("\"kind\": \"compat\""));
        // CUDA versions are written as text, as before they were typed.
        assert!(m.to_json().contains("\"cuda_version\": \"12.2\""));
        assert!(m.to_json().contains("\"host_cuda_version\": \"11.4\""));
        // Manifests written before leases existed still read, with no leased GPU.
        let old = m.to_json().replace("\"leased_gpus\": [\n    0\n  ],", "");
        assert!(!old.contains("leased_gpus"), "{old}");
        std::fs::write(&t, old).unwrap();
        assert!(Manifest::read(&t).unwrap().leased_gpus.is_empty());
        std::fs::write(&t, "{}").unwrap();
        assert!(Manifest::read(&t).is_err());
        // A version that does not parse makes the manifest unreadable, naming the field.
        let bad = m.to_json().replace("\"11.4\"", "\"eleven\"");
        std::fs::write(&t, bad).unwrap();
        let e = Manifest::read(&t).unwrap_err();
        assert!(
            e.contains("driver.host_cuda_version: bad CUDA version \"eleven\""),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        let null = m.to_json().replace("\"11.4\"", "null");
        std::fs::write(&t, null).unwrap();
        assert_eq!(Manifest::read(&t).unwrap().driver.host_cuda_version, None);
        std::fs::remove_file(&t).unwrap();
    }
}
