//! What the hook's manifest makes the checks expect (named apart from the shared manifest crate,
//! which holds the schema): read once per run from `--manifest` (default
//! [`MANIFEST_PATH`]), and the comparisons `driver::library`, `driver::version`,
//! `nvml::consistency` and `devices::nodes` make against it.
//!
//! The schema is [`cuda_sandbox_manifest`]'s, shared with the hook. A missing file at the
//! default path is a fact (the build did not run under the hook, or an older one), not a
//! failure; a missing file named with `--manifest`, or one that does not parse (a CUDA version
//! that is not one included: the error names the field), fails `driver::library` (and the
//! `lint` subcommand).

use std::path::{Path, PathBuf};

use cuda_sandbox_manifest::{DriverKind, DriverManifest, Manifest, MANIFEST_PATH};
use serde_json::{json, Value};

use crate::cuda::loaded::LoadedFile;
use crate::cuda::version::CudaVersion;

/// Where the manifest was looked for and what was found.
#[derive(Debug, Clone)]
pub struct ManifestState {
    /// The file looked at; `None` with `--no-manifest`.
    pub(crate) path: Option<PathBuf>,
    /// What it held.
    pub(crate) status: ManifestStatus,
}

/// The outcome of reading the manifest.
#[derive(Debug, Clone)]
pub enum ManifestStatus {
    /// The manifest, read and understood.
    Loaded(Box<Manifest>),
    /// No manifest to check against; the sentence says why (printed as a fact).
    Absent(String),
    /// A manifest that should be there is missing or unreadable; the checks that use it fail
    /// with this sentence.
    Broken(String),
}

impl ManifestState {
    /// Reads the manifest: `path` when given (`--manifest`), else [`MANIFEST_PATH`] when it
    /// exists; nothing when `disabled` (`--no-manifest`).
    pub fn load(path: Option<&Path>, disabled: bool) -> ManifestState {
        if disabled {
            return ManifestState {
                path: None,
                status: ManifestStatus::Absent(
                    "no manifest: --no-manifest given, the hook's choice is not checked".into(),
                ),
            };
        }
        let explicit = path.is_some();
        let path = path.map_or_else(|| PathBuf::from(MANIFEST_PATH), Path::to_path_buf);
        let status = if !explicit && !path.exists() {
            ManifestStatus::Absent(format!(
                "no manifest: {} does not exist (not built under cuda-sandbox-hook, or a hook \
                 without driver choice), so the checks cannot compare with the hook's choice",
                path.display()
            ))
        } else {
            match Manifest::read(&path) {
                Ok(m) => ManifestStatus::Loaded(Box::new(m)),
                Err(e) => ManifestStatus::Broken(format!(
                    "the hook's manifest is unusable: {e}; rebuild with the same \
                     cuda-sandbox-hook and cuda-sandbox-check versions, or pass --no-manifest"
                )),
            }
        };
        ManifestState {
            path: Some(path),
            status,
        }
    }

    /// The manifest, when one was read.
    pub(crate) fn manifest(&self) -> Option<&Manifest> {
        match &self.status {
            ManifestStatus::Loaded(m) => Some(m),
            _ => None,
        }
    }

    /// The driver section, when a manifest was read.
    pub(crate) fn driver(&self) -> Option<&DriverManifest> {
        self.manifest().map(|m| &m.driver)
    }

    /// Why a check that needs the manifest must fail, if it must.
    pub fn broken(&self) -> Option<&str> {
        match &self.status {
            ManifestStatus::Broken(why) => Some(why),
            _ => None,
        }
    }

    /// A short fact for a check: the path and either the driver chosen or why there is none.
    pub(crate) fn fact(&self) -> Value {
        match &self.status {
            ManifestStatus::Loaded(m) => json!({
                "path": self.path,
                "kind": m.driver.kind,
                "cuda_version": m.driver.cuda_version,
                "kernel_driver": m.driver.kernel_driver,
            }),
            ManifestStatus::Absent(why) | ManifestStatus::Broken(why) => json!(why),
        }
    }

    /// The report's `manifest` section: path, status, and the manifest itself.
    pub(crate) fn report(&self) -> Value {
        let (status, message, content) = match &self.status {
            ManifestStatus::Loaded(m) => ("loaded", None, Some(m)),
            ManifestStatus::Absent(why) => ("absent", Some(why), None),
            ManifestStatus::Broken(why) => ("broken", Some(why), None),
        };
        json!({ "path": self.path, "status": status, "message": message, "content": content })
    }
}

/// Whether `file` is one of the libcuda paths the hook chose: the loader's path or the real
/// path is listed, or a listed path resolves (here, inside the build) to the same real file.
pub(crate) fn is_chosen(file: &LoadedFile, driver: &DriverManifest) -> bool {
    driver.libcuda.iter().any(|listed| {
        let listed = Path::new(listed);
        listed == file.path
            || listed == file.real_path
            || std::fs::canonicalize(listed).is_ok_and(|real| real == file.real_path)
    })
}

/// Which driver a loaded libcuda is, judged against the manifest: under the compat directory
/// is compat, under the driver link is the host's (unless the hook bound the compat driver
/// there), otherwise a CUDA version above the host driver's means compat.
pub(crate) fn kind_of(
    file: &LoadedFile,
    version: Option<CudaVersion>,
    driver: &DriverManifest,
) -> Option<DriverKind> {
    if let Some(dir) = &driver.compat_dir {
        if file.is_under(Path::new(dir)) {
            return Some(DriverKind::Compat);
        }
    }
    if let Some(link) = &driver.driver_link_lib {
        let at_link = file.path.starts_with(link);
        // A compat driver outside the store is bound at the driver link in place of the
        // host's; the manifest then lists link paths among the compat libcuda's.
        let compat_bound_at_link = driver.kind == DriverKind::Compat
            && driver
                .libcuda
                .iter()
                .any(|p| Path::new(p).starts_with(link));
        if at_link && !compat_bound_at_link {
            return Some(DriverKind::Host);
        }
    }
    match (version, driver.host_cuda_version) {
        (Some(v), Some(h)) if v > h => Some(DriverKind::Compat),
        (Some(_), Some(_)) => Some(DriverKind::Host),
        _ => None,
    }
}

/// The libcuda path to name as the hook's choice in messages: `libcuda.so.1` in the compat
/// directory or at the driver link, else the first listed path.
pub(crate) fn chosen_path(driver: &DriverManifest) -> String {
    let dir = match driver.kind {
        DriverKind::Compat => driver.compat_dir.as_deref(),
        _ => driver.driver_link_lib.as_deref(),
    };
    let named = dir.map(|d| format!("{}/libcuda.so.1", d.trim_end_matches('/')));
    match named {
        Some(n) if driver.libcuda.contains(&n) => n,
        _ => driver
            .libcuda
            .first()
            .cloned()
            .or(named)
            .unwrap_or_else(|| "(no libcuda)".into()),
    }
}

/// `"CUDA 12.2"`, or `"CUDA unknown"`.
pub(crate) fn cuda_label(version: Option<CudaVersion>) -> String {
    version.map_or("CUDA unknown".to_string(), |v| format!("CUDA {v}"))
}

/// One line saying why the loaded libcuda is not the one the hook chose, and what to change.
pub(crate) fn library_mismatch(
    file: &LoadedFile,
    version: Option<CudaVersion>,
    driver: &DriverManifest,
) -> String {
    let loaded_kind = kind_of(file, version, driver);
    let loaded_cuda = cuda_label(version);
    let loaded = match loaded_kind {
        Some(kind) => format!("loaded {} ({kind}, {loaded_cuda})", file.path.display()),
        None => format!("loaded {} ({loaded_cuda})", file.path.display()),
    };
    let chosen = format!(
        "the hook chose {} {} ({})",
        driver.kind,
        chosen_path(driver),
        cuda_label(driver.cuda_version)
    );
    let fix = match (loaded_kind, driver.kind) {
        (Some(DriverKind::Host), DriverKind::Compat) => {
            "put the compat directory before the driver link in DT_RUNPATH or LD_LIBRARY_PATH"
                .to_string()
        }
        (Some(DriverKind::Compat), DriverKind::Host) => format!(
            "the compat driver does not support this kernel driver{} (the hook's reason: {}); \
             remove the compat directory from DT_RUNPATH and LD_LIBRARY_PATH",
            driver
                .kernel_driver
                .as_deref()
                .map(|k| format!(" {k}"))
                .unwrap_or_default(),
            driver.reason.trim_end_matches('.')
        ),
        _ => format!(
            "another libcuda.so.1 comes first in LD_LIBRARY_PATH or DT_RUNPATH; remove it or put \
             {} first",
            Path::new(&chosen_path(driver))
                .parent()
                .map_or_else(|| "the chosen driver".into(), |d| d.display().to_string())
        ),
    };
    format!("{loaded} but {chosen}: {fix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn driver(kind: DriverKind) -> DriverManifest {
        DriverManifest {
            kind,
            libcuda: match kind {
                DriverKind::Compat => vec![
                    "/nix/store/c-compat/compat/libcuda.so.1".into(),
                    "/nix/store/c-compat/compat/libcuda.so.535.104.05".into(),
                ],
                _ => vec!["/run/opengl-driver/lib/libcuda.so.1".into()],
            },
            cuda_version: Some(if kind == DriverKind::Compat {
                CudaVersion(12020)
            } else {
                CudaVersion(11040)
            }),
            host_cuda_version: Some(CudaVersion(11040)),
            kernel_driver: Some("470.82.01".into()),
            compat_dir: (kind == DriverKind::Compat).then(|| "/nix/store/c-compat/compat".into()),
            driver_link_lib: Some("/run/opengl-driver/lib".into()),
            reason: "the host driver (CUDA 11.4); compat not used: x".into(),
        }
    }

    fn file(path: &str, real: &str) -> LoadedFile {
        LoadedFile {
            path: path.into(),
            real_path: real.into(),
        }
    }

    #[test]
    fn the_chosen_file_matches_by_path_or_real_path() {
        let d = driver(DriverKind::Compat);
        let real = "/nix/store/c-compat/compat/libcuda.so.535.104.05";
        assert!(is_chosen(
            &file("/nix/store/c-compat/compat/libcuda.so.1", real),
            &d
        ));
        assert!(is_chosen(&file("/elsewhere/libcuda.so.1", real), &d));
        let host = file(
            "/run/opengl-driver/lib/libcuda.so.1",
            "/nix/store/h-driver/lib/libcuda.so.470.82.01",
        );
        assert!(!is_chosen(&host, &d));
    }

    #[test]
    fn host_loaded_where_compat_was_chosen_says_to_reorder_the_search_path() {
        let d = driver(DriverKind::Compat);
        let host = file(
            "/run/opengl-driver/lib/libcuda.so.1",
            "/run/opengl-driver/lib/libcuda.so.1",
        );
        assert_eq!(
            library_mismatch(&host, Some(CudaVersion(11040)), &d),
            "loaded /run/opengl-driver/lib/libcuda.so.1 (host, CUDA 11.4) but the hook chose \
             compat /nix/store/c-compat/compat/libcuda.so.1 (CUDA 12.2): put the compat \
             directory before the driver link in DT_RUNPATH or LD_LIBRARY_PATH"
        );
    }

    #[test]
    fn compat_loaded_where_host_was_chosen_gives_the_hooks_reason() {
        let d = driver(DriverKind::Host);
        let compat = file(
            "/nix/store/c-compat/compat/libcuda.so.1",
            "/nix/store/c-compat/compat/libcuda.so.535.104.05",
        );
        let m = library_mismatch(&compat, Some(CudaVersion(12020)), &d);
        assert!(m.contains("(compat, CUDA 12.2)"), "{m}");
        assert!(
            m.contains("the hook chose host /run/opengl-driver/lib/libcuda.so.1"),
            "{m}"
        );
        assert!(
            m.contains("does not support this kernel driver 470.82.01"),
            "{m}"
        );
        assert!(m.contains("compat not used: x"), "{m}");
        assert!(m.contains("remove the compat directory"), "{m}");
    }

    #[test]
    fn a_missing_default_manifest_is_a_fact_an_explicit_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("manifest.json");
        let explicit = ManifestState::load(Some(&missing), false);
        assert!(explicit.broken().is_some());
        let disabled = ManifestState::load(Some(&missing), true);
        assert!(disabled.broken().is_none() && disabled.manifest().is_none());
        std::fs::write(&missing, "{}").unwrap();
        assert!(ManifestState::load(Some(&missing), false)
            .broken()
            .unwrap()
            .contains("not a cuda-sandbox manifest"));
    }
}
