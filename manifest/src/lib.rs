//! The manifest: what the hook exposed to one tagged build and which driver it chose, written by
//! `cuda-sandbox-hook` and read by `cuda-sandbox-check` inside the sandbox.
//!
//! One schema in one place, so the two sides cannot drift. The hook writes it outside the
//! chroot (a runtime directory) and exposes it read-only at [`MANIFEST_PATH`] inside.

pub mod versions;

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Where a build finds its manifest.
pub const MANIFEST_PATH: &str = "/run/cuda-sandbox/manifest.json";
/// The schema version written in [`Manifest::version`].
pub const MANIFEST_VERSION: u32 = 1;

/// Which user-space driver the build should load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriverKind {
    /// The host's own driver (the NixOS driver link or the host's libraries).
    Host,
    /// A newer `cuda_compat` driver running on the host's older kernel module.
    Compat,
    /// No driver was found or configured.
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverManifest {
    /// Host or compat.
    pub kind: DriverKind,
    /// Paths (as the build sees them) any of which is the right `libcuda.so.1` once resolved:
    /// the chosen library's name, each symlink hop, and its real path.
    pub libcuda: Vec<String>,
    /// The CUDA version the chosen driver provides (`"12.2"`), when known.
    pub cuda_version: Option<String>,
    /// The host driver's CUDA version, when known.
    pub host_cuda_version: Option<String>,
    /// The kernel module's version (`"535.104.05"`), when known.
    pub kernel_driver: Option<String>,
    /// The compat directory as the build sees it, when compat was chosen.
    pub compat_dir: Option<String>,
    /// The driver link directory the build sees (`/run/opengl-driver/lib`), when exposed.
    pub driver_link_lib: Option<String>,
    /// One sentence: why this driver.
    pub reason: String,
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
    /// The driver chosen.
    pub driver: DriverManifest,
}

impl DriverManifest {
    /// No driver: nothing for the runner to compare the loaded libcuda with, and why.
    pub fn none(reason: impl Into<String>) -> DriverManifest {
        DriverManifest {
            kind: DriverKind::None,
            libcuda: Vec::new(),
            cuda_version: None,
            host_cuda_version: None,
            kernel_driver: None,
            compat_dir: None,
            driver_link_lib: None,
            reason: reason.into(),
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
            driver: DriverManifest {
                kind: DriverKind::Compat,
                libcuda: vec!["/nix/store/c/compat/libcuda.so.1".into()],
                cuda_version: Some("12.2".into()),
                host_cuda_version: Some("11.4".into()),
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
        // Manifests written before leases existed still read, with no leased GPU.
        let old = m.to_json().replace("\"leased_gpus\": [\n    0\n  ],", "");
        assert!(!old.contains("leased_gpus"), "{old}");
        std::fs::write(&t, old).unwrap();
        assert!(Manifest::read(&t).unwrap().leased_gpus.is_empty());
        std::fs::write(&t, "{}").unwrap();
        assert!(Manifest::read(&t).is_err());
        std::fs::remove_file(&t).unwrap();
    }
}
