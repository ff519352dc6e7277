//! The system features the derivation being built requires, as its build environment says:
//! the variable `requiredSystemFeatures` (space-separated, as Nix exports every attribute of
//! a derivation without structured attrs), or, with `__structuredAttrs = true`, the
//! `requiredSystemFeatures` list of the build's `.attrs.json`.
//!
//! Where `.attrs.json` is: always in the build directory, `$NIX_BUILD_TOP/.attrs.json`.
//! Nix 2.4 added `$NIX_ATTRS_JSON_FILE` (NixOS/nix#4770), but until 2.14 it named the file by
//! its path outside the sandbox (`/tmp/nix-build-…/.attrs.json`), which a sandboxed builder
//! cannot open; Nix 2.15 (NixOS/nix#8053, commit af4cbdafe7) names it inside the sandbox
//! (`/build/.attrs.json`). So the variable is used when it names a file that is there, and
//! `$NIX_BUILD_TOP/.attrs.json` otherwise: the one rule works from 2.4 to today.
//!
//! Outside a build the same variable can be set by hand: `requiredSystemFeatures="cuda
//! cuda-sm-90a" cuda-sandbox-check`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The variable Nix exports for the attribute (without structured attrs).
pub(crate) const VARIABLE: &str = "requiredSystemFeatures";

/// The variable newer Nix sets to the structured attrs' JSON file.
pub(crate) const ATTRS_JSON_VARIABLE: &str = "NIX_ATTRS_JSON_FILE";

/// The build directory's variable, where `.attrs.json` is written.
pub(crate) const BUILD_TOP_VARIABLE: &str = "NIX_BUILD_TOP";

/// Where the features were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// The variable `requiredSystemFeatures`.
    Variable,
    /// A structured attrs file (`requiredSystemFeatures` absent from it reads as none).
    AttrsJson(PathBuf),
}

impl Source {
    /// In words, for a message.
    pub(crate) fn describe(&self) -> String {
        match self {
            Source::Variable => format!("${VARIABLE}"),
            Source::AttrsJson(path) => format!("{}'s {VARIABLE}", path.display()),
        }
    }
}

/// The features a build declares, and where they were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Declared {
    /// Where.
    pub source: Source,
    /// Every required feature, in the order given.
    pub features: Vec<String>,
}

/// Why the declared features cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DeclaredError {
    /// The structured attrs file is there but cannot be read: the file, and the I/O error.
    #[error("cannot read {path}: {1}", path = .0.display())]
    Unreadable(PathBuf, String),
    /// The structured attrs file is not a JSON object, or its `requiredSystemFeatures` is not
    /// a list of strings: the file, and what is wrong.
    #[error("{path} is not structured attrs Nix wrote: {1}", path = .0.display())]
    Malformed(PathBuf, String),
}

/// Reads the declared features from `var` (the process environment in [`from_env`]): `None`
/// when neither the variable nor a structured attrs file is there (not in a Nix build, and
/// not set by hand).
pub(crate) fn read(
    var: impl Fn(&str) -> Option<OsString>,
) -> Result<Option<Declared>, DeclaredError> {
    if let Some(value) = var(VARIABLE) {
        return Ok(Some(Declared {
            source: Source::Variable,
            features: value
                .to_string_lossy()
                .split_ascii_whitespace()
                .map(str::to_owned)
                .collect(),
        }));
    }
    let named = var(ATTRS_JSON_VARIABLE).map(PathBuf::from);
    let in_build_top = var(BUILD_TOP_VARIABLE).map(|top| Path::new(&top).join(".attrs.json"));
    let Some(path) = named
        .into_iter()
        .chain(in_build_top)
        .find(|path| path.is_file())
    else {
        return Ok(None);
    };
    let text =
        std::fs::read(&path).map_err(|e| DeclaredError::Unreadable(path.clone(), e.to_string()))?;
    let features =
        features_of_attrs(&text).map_err(|why| DeclaredError::Malformed(path.clone(), why))?;
    Ok(Some(Declared {
        source: Source::AttrsJson(path),
        features,
    }))
}

/// [`read`] of this process's environment.
pub(crate) fn from_env() -> Result<Option<Declared>, DeclaredError> {
    read(|name| std::env::var_os(name))
}

/// The `requiredSystemFeatures` list of a structured attrs document (absent: none).
fn features_of_attrs(text: &[u8]) -> Result<Vec<String>, String> {
    let attrs: serde_json::Value = serde_json::from_slice(text).map_err(|e| e.to_string())?;
    let object = attrs.as_object().ok_or("not a JSON object")?;
    match object.get(VARIABLE) {
        None => Ok(Vec::new()),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{VARIABLE} holds {item}, not a string"))
            })
            .collect(),
        Some(other) => Err(format!("{VARIABLE} is {other}, not a list of strings")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn the_variable_is_split_on_white_space() {
        let got = read(env(&[(VARIABLE, " cuda  cuda-sm-90a\nbig-parallel ")]))
            .unwrap()
            .unwrap();
        assert_eq!(got.source, Source::Variable);
        assert_eq!(got.features, ["cuda", "cuda-sm-90a", "big-parallel"]);
        assert_eq!(
            read(env(&[(VARIABLE, "")]))
                .unwrap()
                .unwrap()
                .features
                .len(),
            0
        );
    }

    #[test]
    fn nothing_declared_outside_a_build() {
        assert_eq!(read(env(&[])).unwrap(), None);
        let empty = tempfile::tempdir().unwrap();
        let top = empty.path().to_str().unwrap();
        assert_eq!(read(env(&[(BUILD_TOP_VARIABLE, top)])).unwrap(), None);
    }

    /// Nix 2.4 to 2.14 name the file by its path outside the sandbox: it is not there, and
    /// `$NIX_BUILD_TOP/.attrs.json` is read instead.
    #[test]
    fn a_named_file_that_is_not_there_falls_back_to_the_build_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".attrs.json");
        std::fs::write(&file, r#"{"requiredSystemFeatures":["cuda","cuda-sm-89"]}"#).unwrap();
        let top = dir.path().to_str().unwrap();
        let got = read(env(&[
            (ATTRS_JSON_VARIABLE, "/tmp/nix-build-x.drv-0/.attrs.json"),
            (BUILD_TOP_VARIABLE, top),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(got.source, Source::AttrsJson(file.clone()));
        assert_eq!(got.features, ["cuda", "cuda-sm-89"]);
        // Named and there: that file.
        let other = dir.path().join("named.json");
        std::fs::write(&other, r#"{"requiredSystemFeatures":["cuda-sm-100f"]}"#).unwrap();
        let got = read(env(&[
            (ATTRS_JSON_VARIABLE, other.to_str().unwrap()),
            (BUILD_TOP_VARIABLE, top),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(got.source, Source::AttrsJson(other));
        assert_eq!(got.features, ["cuda-sm-100f"]);
    }

    #[test]
    fn structured_attrs_without_the_attribute_require_nothing_and_bad_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("attrs.json");
        let named = |text: &str| {
            std::fs::write(&file, text).unwrap();
            read(env(&[(ATTRS_JSON_VARIABLE, file.to_str().unwrap())]))
        };
        assert_eq!(named(r#"{"name":"x"}"#).unwrap().unwrap().features.len(), 0);
        for (text, why) in [
            ("[1]", "not a JSON object"),
            (
                r#"{"requiredSystemFeatures":"cuda"}"#,
                "not a list of strings",
            ),
            (
                r#"{"requiredSystemFeatures":["cuda",7]}"#,
                "holds 7, not a string",
            ),
            ("{", "EOF"),
        ] {
            let err = named(text).unwrap_err();
            assert!(matches!(err, DeclaredError::Malformed(..)), "{text}: {err}");
            assert!(err.to_string().contains(why), "{text}: {err}");
        }
    }

    /// The variable wins over a structured attrs file, so that it can be set by hand.
    #[test]
    fn the_variable_wins() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("attrs.json");
        std::fs::write(&file, r#"{"requiredSystemFeatures":["cuda-sm-90a"]}"#).unwrap();
        let got = read(env(&[
            (VARIABLE, "cuda"),
            (ATTRS_JSON_VARIABLE, file.to_str().unwrap()),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(got.features, ["cuda"]);
    }
}
