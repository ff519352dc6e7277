//! The CUDA runtimes inside a package: shared `libcudart` files and static copies linked into
//! other ELF files (any ELF that is not libcudart but defines `cudaGetDriverEntryPoint`), with
//! their versions where a name gives them. Two runtimes of different versions in one package
//! are the version-mixing hazard: each resolves driver entry points at its own version.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol};
use serde::Serialize;

use crate::cuda::version::CudaVersion;

/// How a runtime is present in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuntimeForm {
    /// A `libcudart.so*` shared library.
    Shared,
    /// `libcudart_static.a` (or another archive of it).
    Archive,
    /// Linked statically into another ELF file.
    StaticCopy,
}

/// One CUDA runtime found in a package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FoundRuntime {
    /// The file holding it.
    pub file: PathBuf,
    /// Shared, archive, or a static copy inside another ELF file.
    pub form: RuntimeForm,
    /// `12.9`, `12.x` (major only), or `None` when nothing names it.
    pub version: Option<String>,
}

/// The CUDA version a path names: `libcudart.so.12.9.79` → 12.9; a store path such as
/// `/nix/store/…-cuda_cudart-12.9.79-lib/…` → 12.9; `libcudart.so.12` → `12.x`.
pub fn version_named_by(path: &Path) -> Option<String> {
    let text = path.to_string_lossy();
    let after = |marker: &str| -> Option<CudaVersion> {
        let start = text.find(marker)? + marker.len();
        let rest = &text[start..];
        let mut parts = rest.split(|c: char| !c.is_ascii_digit());
        let major: i32 = parts.next()?.parse().ok()?;
        let minor: i32 = parts.next()?.parse().ok()?;
        (rest[major.to_string().len()..].starts_with('.')).then_some(())?;
        Some(CudaVersion(major * 1000 + minor * 10))
    };
    let name = path.file_name()?.to_string_lossy().into_owned();
    if let Some(rest) = name.strip_prefix("libcudart.so.") {
        if rest != "11.0" && rest.contains('.') {
            return after("libcudart.so.").map(|v| v.to_string());
        }
    }
    if let Some(v) = after("cuda_cudart-").or_else(|| after("cudart-")) {
        return Some(v.to_string());
    }
    let major = name
        .strip_prefix("libcudart.so.")?
        .split('.')
        .next()?
        .to_owned();
    major.parse::<u32>().ok().map(|m| format!("{m}.x"))
}

/// Whether `data` (an ELF file's bytes) defines `cudaGetDriverEntryPoint` in its symbol
/// tables: the CUDA runtime is linked into it.
pub fn defines_runtime(data: &[u8]) -> bool {
    let Ok(file) = object::File::parse(data) else {
        return false;
    };
    file.symbols()
        .chain(file.dynamic_symbols())
        .any(|s| s.name() == Ok("cudaGetDriverEntryPoint") && s.is_definition())
}

/// Classifies one file; `data` is its bytes when it is an ELF file.
pub fn runtime_in(path: &Path, data: Option<&[u8]>) -> Option<FoundRuntime> {
    let name = path.file_name()?.to_string_lossy();
    let form = if name.starts_with("libcudart.so") {
        RuntimeForm::Shared
    } else if name.starts_with("libcudart_static") && name.ends_with(".a") {
        RuntimeForm::Archive
    } else if data.is_some_and(defines_runtime) {
        RuntimeForm::StaticCopy
    } else {
        return None;
    };
    Some(FoundRuntime {
        file: path.to_path_buf(),
        form,
        version: version_named_by(path),
    })
}

/// The distinct versions among `runtimes` that are exact (`12.9`, not `12.x`), when more than
/// one: mixed CUDA runtimes.
pub fn mixed_versions(runtimes: &[FoundRuntime]) -> Option<Vec<String>> {
    let mut versions: Vec<String> = runtimes
        .iter()
        .filter(|r| r.form != RuntimeForm::Archive)
        .filter_map(|r| r.version.clone())
        .filter(|v| !v.ends_with(".x"))
        .collect();
    versions.sort();
    versions.dedup();
    (versions.len() > 1).then_some(versions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_give_versions() {
        let v = |p: &str| version_named_by(Path::new(p));
        assert_eq!(v("/x/lib/libcudart.so.12.9.79").as_deref(), Some("12.9"));
        assert_eq!(v("/x/lib/libcudart.so.12").as_deref(), Some("12.x"));
        assert_eq!(v("/x/lib/libcudart.so.11.0").as_deref(), Some("11.x"));
        assert_eq!(
            v("/nix/store/abc-cuda_cudart-12.4.127-lib/lib/libcudart.so.12").as_deref(),
            Some("12.4")
        );
        assert_eq!(v("/x/bin/app"), None);
    }

    #[test]
    fn mixing_needs_two_exact_versions() {
        let r = |v: &str| FoundRuntime {
            file: PathBuf::from("f"),
            form: RuntimeForm::Shared,
            version: Some(v.into()),
        };
        assert_eq!(mixed_versions(&[r("12.9"), r("12.x")]), None);
        assert_eq!(
            mixed_versions(&[r("12.9"), r("11.8")]),
            Some(vec!["11.8".into(), "12.9".into()])
        );
    }
}
