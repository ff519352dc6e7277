//! The pre-build-hook itself: `cuda-sandbox-hook <drv-path> <chroot-root>`.
//!
//! Failure policy: a build that asks for no configured feature is never failed, whatever is
//! wrong with the configuration or the host (a warning goes to stderr). A tagged build that
//! cannot get a working GPU fails with one line saying which derivation, which feature, what is
//! missing and how to fix it.

use crate::config::{self, Config, MissingDrv, Rule, DEFAULT_FEATURES};
use crate::drv::{self, Derivation, RequiredFeatures};
use crate::lease;
use crate::plan::{BuildContext, Plan};
use crate::{log, manifest_file, protocol};
use std::path::Path;

/// Why a tagged build must not start; the message is one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFailure(pub String);

impl std::fmt::Display for HookFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Environment variable in which some Nix variants pass the derivation as JSON (Determinate
/// Nix, DeterminateSystems/nix-src#424).
pub const DERIVATION_ENV: &str = "NIX_DERIVATION_V4";

/// Environment variable naming an open file descriptor from which the derivation's ATerm can be
/// read (proposed for upstream Nix in NixOS/nix#16413, not merged). A JSON document there is
/// read like [`DERIVATION_ENV`], in case the proposal settles on JSON.
pub const ATERM_FD_ENV: &str = "DRV_ATERM_FD";

/// The derivation's bytes: the `.drv` file, else the descriptor named by [`ATERM_FD_ENV`]. The
/// second value prefixes parse errors, to say where the bytes came from.
fn read_drv(drv_path: &Path) -> Result<(Vec<u8>, String), std::io::Error> {
    let file_error = match std::fs::read(drv_path) {
        Ok(bytes) => return Ok((bytes, String::new())),
        Err(e) => e,
    };
    let Some(fd) = std::env::var_os(ATERM_FD_ENV) else {
        return Err(file_error);
    };
    let fd = fd.to_string_lossy().into_owned();
    let unusable = |why: String| {
        std::io::Error::new(
            file_error.kind(),
            format!("{file_error}; and {ATERM_FD_ENV}={fd}: {why}"),
        )
    };
    if fd.is_empty() || !fd.bytes().all(|b| b.is_ascii_digit()) {
        return Err(unusable("not a file descriptor number".to_string()));
    }
    // Through /proc: a fresh open file description reads from the start whatever the offset
    // of the one Nix handed over, and needs no unsafe code to adopt a raw descriptor.
    std::fs::read(format!("/proc/self/fd/{fd}"))
        .map(|bytes| (bytes, format!("{ATERM_FD_ENV}: ")))
        .map_err(|e| unusable(e.to_string()))
}

/// Runs the hook for `drv_path` and returns what to print on stdout for Nix.
pub fn pre_build(
    drv_path: &Path,
    chroot: &Path,
    config_arg: Option<&Path>,
) -> Result<Vec<u8>, HookFailure> {
    let name = drv_path.display();
    // Read the derivation once: its features and, for GPU leases, its cudaSandboxGpus. The
    // file first; on a remote builder, where it is absent, what Nix passed instead.
    let (features, gpus_wanted) = match read_drv(drv_path) {
        Ok((bytes, _)) if bytes.trim_ascii_start().starts_with(b"{") => {
            match drv::features_from_json(&bytes) {
                Ok(f) => (
                    owned(Ok(f)).expect("already parsed"),
                    lease::requested_gpus_json(&bytes),
                ),
                Err(e) => {
                    let what = format!("{ATERM_FD_ENV}: {e}");
                    return unreadable(&bytes, drv_path, config_arg, &what);
                }
            }
        }
        Ok((bytes, from)) => match Derivation::parse(&bytes)
            .and_then(|d| Ok((owned(d.required_features())?, lease::requested_gpus(&d))))
        {
            Ok(read) => read,
            Err(e) => return unreadable(&bytes, drv_path, config_arg, &format!("{from}{e}")),
        },
        Err(e) => match std::env::var_os(DERIVATION_ENV) {
            Some(json) => match drv::features_from_json(json.as_encoded_bytes()) {
                Ok(f) => (
                    owned(Ok(f)).expect("already parsed"),
                    lease::requested_gpus_json(json.as_encoded_bytes()),
                ),
                Err(e) => {
                    let what = format!("{DERIVATION_ENV}: {e}");
                    return unreadable(json.as_encoded_bytes(), drv_path, config_arg, &what);
                }
            },
            None => return missing_drv(drv_path, chroot, config_arg, &e.to_string()),
        },
    };
    if features.is_empty() {
        return Ok(Vec::new());
    }
    let features: Vec<&[u8]> = features.iter().map(Vec::as_slice).collect();
    let source = config::locate(config_arg);
    let config = match Config::load(&source) {
        Ok(c) => c,
        Err(e) => {
            if let Some(f) = features
                .iter()
                .find(|f| DEFAULT_FEATURES.iter().any(|d| d.as_bytes() == **f))
            {
                return Err(HookFailure(format!(
                    "{name} requires feature '{}' but the configuration is broken: {e}",
                    String::from_utf8_lossy(f)
                )));
            }
            log::warn(format_args!(
                "{e} (ignored: this build asks for no GPU feature)"
            ));
            return Ok(Vec::new());
        }
    };
    let rules = config.matching_rules(&features);
    if rules.is_empty() {
        return Ok(Vec::new());
    }
    serve(drv_path, chroot, &config, &rules, &features, gpus_wanted)
}

fn owned(f: Result<RequiredFeatures<'_>, drv::DrvError>) -> Result<Vec<Vec<u8>>, drv::DrvError> {
    f.map(|f| f.features.into_iter().map(|x| x.into_owned()).collect())
}

/// Plans for `rules`, writes the manifest and renders the answer; a plan with problems fails
/// the build in one line.
fn serve(
    drv_path: &Path,
    chroot: &Path,
    config: &Config,
    rules: &[&Rule],
    features: &[&[u8]],
    gpus_wanted: Option<String>,
) -> Result<Vec<u8>, HookFailure> {
    let name = drv_path.display();
    let ctx = BuildContext {
        derivation: drv_path.display().to_string(),
        features: features
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect(),
        chroot: Some(chroot.to_path_buf()),
        gpus_wanted,
        take_lease: true,
    };
    let plan = Plan::build(config, rules, &ctx);
    if !plan.problems.is_empty() {
        let feature = rules[0].first_match(features).unwrap_or_default();
        let problems: Vec<String> = plan.problems.iter().map(|p| p.to_string()).collect();
        return Err(HookFailure(format!(
            "{name} requires feature '{}' (rule '{}') but {}",
            String::from_utf8_lossy(feature),
            rules[0].name,
            problems.join("; ")
        )));
    }
    let answer =
        protocol::render(&plan.exposures).map_err(|e| HookFailure(format!("{name}: {e}")))?;
    if let Some(m) = &plan.manifest {
        manifest_file::write(m, &config.runtime_dir).map_err(|e| {
            HookFailure(format!(
                "{name}: cannot write the manifest {}: {e}",
                m.outside.display()
            ))
        })?;
    }
    Ok(answer)
}

/// The `.drv` is not on disk and Nix passed no JSON (remote builders, Nix issue 9272): follow
/// the configured `missing_drv` policy.
fn missing_drv(
    drv_path: &Path,
    chroot: &Path,
    config_arg: Option<&Path>,
    error: &str,
) -> Result<Vec<u8>, HookFailure> {
    let name = drv_path.display();
    let config = match Config::load(&config::locate(config_arg)) {
        Ok(c) => c,
        Err(e) => {
            log::warn(format_args!(
                "cannot read derivation {name} ({error}) and {e}; exposing nothing"
            ));
            return Ok(Vec::new());
        }
    };
    match config.missing_drv {
        MissingDrv::Skip => {
            log::warn(format_args!(
                "cannot read derivation {name} ({error}); exposing nothing (missing_drv = \
                 \"skip\"; on a remote GPU builder that only receives GPU builds, set \
                 missing_drv = \"expose\")"
            ));
            Ok(Vec::new())
        }
        MissingDrv::Fail => Err(HookFailure(format!(
            "cannot read derivation {name} ({error}) and missing_drv = \"fail\""
        ))),
        MissingDrv::Expose => {
            let rules: Vec<&Rule> = config.rules.iter().collect();
            if rules.is_empty() {
                return Ok(Vec::new());
            }
            let all: Vec<&[u8]> = rules
                .iter()
                .flat_map(|r| r.features.iter().map(|f| f.as_bytes()))
                .collect();
            log::warn(format_args!(
                "derivation {name} is not on disk; exposing every rule (missing_drv = \"expose\")"
            ));
            serve(drv_path, chroot, &config, &rules, &all, None)
        }
    }
}

/// A `.drv` we cannot read: fail only when it could be a tagged build, i.e. when the bytes
/// name a feature some rule answers to (with a broken config: a built-in feature).
fn unreadable(
    bytes: &[u8],
    drv_path: &Path,
    config_arg: Option<&Path>,
    error: &str,
) -> Result<Vec<u8>, HookFailure> {
    let names: Vec<String> = match Config::load(&config::locate(config_arg)) {
        Ok(c) => c.rules.iter().flat_map(|r| r.features.clone()).collect(),
        Err(_) => DEFAULT_FEATURES.iter().map(|s| s.to_string()).collect(),
    };
    let may_be_tagged = names
        .iter()
        .any(|n| memchr::memmem::find(bytes, n.as_bytes()).is_some());
    if may_be_tagged {
        Err(HookFailure(format!(
            "cannot read derivation {} ({error}), and it may require a GPU feature",
            drv_path.display()
        )))
    } else {
        log::warn(format_args!(
            "cannot read derivation {} ({error}); it names no GPU feature, so exposing nothing",
            drv_path.display()
        ));
        Ok(Vec::new())
    }
}

/// The features of a derivation file, for `explain`.
pub fn read_features(drv_path: &Path) -> Result<(Vec<String>, bool), String> {
    let bytes = std::fs::read(drv_path)
        .map_err(|e| format!("cannot read derivation {}: {e}", drv_path.display()))?;
    let drv = Derivation::parse(&bytes).map_err(|e| format!("{}: {e}", drv_path.display()))?;
    let f: RequiredFeatures = drv
        .required_features()
        .map_err(|e| format!("{}: {e}", drv_path.display()))?;
    Ok((f.lossy(), f.structured))
}
