//! `cuda_compat` drivers: finding them and reading their `.note.cuda.fwd_compatibility` note.
//!
//! Recent compat `libcuda.so` files carry an ELF note (owner `NVIDIA Corporation`) whose
//! descriptor is JSON such as `{"Format":1,"CUDA Version":"12.9","Driver":[535,550],…}`
//! (docs/architecture.md, the NVIDIA driver). The note is found by the shared ELF crate (`cuda_sandbox_elfkit`), with
//! bounds checks, so a damaged file is an error, not a panic; its JSON is read here.

use super::host::{self, COMPAT_LIBRARIES};
use super::versions::{self, CudaVersion};
use cuda_sandbox_elfkit::ElfError;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What a compat driver's note says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CompatNote {
    /// `"CUDA Version"`: the CUDA version this compat driver provides.
    pub cuda_version: Option<CudaVersion>,
    /// `"Driver"`: kernel driver branches it runs on; `None` when the note has no list.
    pub drivers: Option<Vec<u32>>,
    /// The note's JSON, verbatim.
    pub json: String,
}

/// A compat driver found on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CompatDriver {
    /// The directory holding it (`…/compat`), as the build sees it.
    pub dir: PathBuf,
    /// Where that directory is on the host.
    pub dir_outside: PathBuf,
    /// The compat `libcuda.so.<version>` file name.
    pub libcuda: String,
    /// The note, when the library has one.
    pub note: Option<CompatNote>,
    /// The CUDA version: from the note, else from the file name's driver branch.
    pub cuda_version: Option<CudaVersion>,
    /// The names of the compat libraries in the directory (libcuda, the JIT compiler, …),
    /// sorted.
    #[serde(skip)]
    pub libraries: Vec<String>,
}

/// Why a compat library's note cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NoteError {
    /// The library is not an ELF file whose note section can be walked.
    #[error(transparent)]
    Elf(#[from] ElfError),
    /// The note's descriptor is not UTF-8.
    #[error("compat note is not UTF-8")]
    NotUtf8,
    /// The note is not JSON (the parser's one line).
    #[error("compat note is not JSON: {0}")]
    NotJson(String),
    /// `Driver` holds something other than driver branches.
    #[error("compat note's Driver list holds something other than driver branches")]
    DriverEntry,
    /// `Driver` is not a list.
    #[error("compat note's Driver is not a list")]
    DriverNotList,
}

/// Why a compat directory cannot be looked at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CompatError {
    /// The directory cannot be listed, or its libcuda read: `list` or `read`, the directory or
    /// library (as the host sees it), and the I/O error's one line.
    #[error("cannot {0} {path}: {2}", path = .1.display())]
    Io(&'static str, PathBuf, String),
    /// Its libcuda's note cannot be read: the library (as the host sees it), and why.
    #[error("{path}: {1}", path = .0.display())]
    Note(PathBuf, NoteError),
}

/// Reads the compat note of an ELF file's bytes. `Ok(None)`: a valid ELF without the note.
pub(crate) fn read_note(elf: &[u8]) -> Result<Option<CompatNote>, NoteError> {
    cuda_sandbox_elfkit::compat_note(elf)?
        .map(parse_note_json)
        .transpose()
}

fn parse_note_json(desc: &[u8]) -> Result<CompatNote, NoteError> {
    let json = std::str::from_utf8(desc).map_err(|_| NoteError::NotUtf8)?;
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| NoteError::NotJson(e.to_string()))?;
    let cuda_version = value
        .get("CUDA Version")
        .and_then(|v| v.as_str())
        .and_then(|v| CudaVersion::parse(v).ok());
    let drivers = match value.get("Driver") {
        None => None,
        Some(serde_json::Value::Array(items)) => Some(
            items
                .iter()
                .map(|d| match d {
                    serde_json::Value::Number(n) => n.as_u64().map(|n| n as u32),
                    serde_json::Value::String(s) => versions::driver_branch(s),
                    _ => None,
                })
                .collect::<Option<Vec<u32>>>()
                .ok_or(NoteError::DriverEntry)?,
        ),
        Some(_) => return Err(NoteError::DriverNotList),
    };
    Ok(CompatNote {
        cuda_version,
        drivers,
        json: json.to_string(),
    })
}

/// Looks at a candidate compat directory: the `libcuda.so.<version>` in it and its note.
/// `Ok(None)` when the directory holds no compat libcuda.
pub(crate) fn inspect_dir(
    dir: &Path,
    dir_outside: &Path,
) -> Result<Option<CompatDriver>, CompatError> {
    let entries = match std::fs::read_dir(dir_outside) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        listed => listed.map_err(|e| CompatError::Io("list", dir_outside.into(), e.to_string()))?,
    };
    let mut libraries: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| host::driver_library_stem(n).is_some_and(|s| COMPAT_LIBRARIES.contains(&s)))
        .collect();
    libraries.sort();
    // Prefer the versioned file (`libcuda.so.550.54.15`) over `libcuda.so.1` (each
    // `libcuda.so.*` is a compat library).
    let Some(libcuda) = libraries
        .iter()
        .filter(|n| n.starts_with("libcuda.so."))
        .min_by_key(|n| (versions::version_in_file_name(n, "libcuda").is_none(), *n))
        .cloned()
    else {
        return Ok(None);
    };
    let path = dir_outside.join(&libcuda);
    let bytes =
        std::fs::read(&path).map_err(|e| CompatError::Io("read", path.clone(), e.to_string()))?;
    let note = read_note(&bytes).map_err(|error| CompatError::Note(path.clone(), error))?;
    let cuda_version = note.as_ref().and_then(|n| n.cuda_version).or_else(|| {
        versions::version_in_file_name(&libcuda, "libcuda")
            .and_then(|v| versions::driver_branch(&v))
            .and_then(versions::cuda_for_branch)
    });
    Ok(Some(CompatDriver {
        dir: dir.to_path_buf(),
        dir_outside: dir_outside.to_path_buf(),
        libcuda,
        note,
        cuda_version,
        libraries,
    }))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A real shared library named `name` in `dir`, with the compat note when `json` is given.
    pub(crate) fn compat_library(dir: &Path, name: &str, json: Option<&str>) -> PathBuf {
        let out = dir.join(name);
        cuda_sandbox_testkit::shared_library(&out, Some("libcuda.so.1")).unwrap();
        if let Some(json) = json {
            cuda_sandbox_testkit::add_compat_note(&out, json).unwrap();
        }
        out
    }

    #[test]
    fn reads_the_note_of_a_real_elf() {
        let t = tempfile::tempdir().unwrap();
        let lib = compat_library(
            t.path(),
            "libcuda.so.535.104.05",
            Some(r#"{"Format":1,"CUDA Version":"12.2","Driver":[470,525],"Device":[]}"#),
        );
        let note = read_note(&std::fs::read(&lib).unwrap()).unwrap().unwrap();
        assert_eq!(note.cuda_version, Some(CudaVersion(12020)));
        assert_eq!(note.drivers, Some(vec![470, 525]));
        let found = inspect_dir(Path::new("/compat"), t.path())
            .unwrap()
            .unwrap();
        assert_eq!(found.libcuda, "libcuda.so.535.104.05");
        assert_eq!(found.cuda_version, Some(CudaVersion(12020)));
    }

    #[test]
    fn no_note_means_version_from_the_file_name() {
        let t = tempfile::tempdir().unwrap();
        compat_library(t.path(), "libcuda.so.550.54.15", None);
        let found = inspect_dir(Path::new("/c"), t.path()).unwrap().unwrap();
        assert_eq!(found.note, None);
        assert_eq!(found.cuda_version, Some(CudaVersion(12040)));
        assert!(inspect_dir(Path::new("/c"), &t.path().join("absent"))
            .unwrap()
            .is_none());
    }

    #[test]
    fn damaged_notes_and_files_are_errors() {
        assert!(matches!(
            read_note(b"not an elf"),
            Err(NoteError::Elf(ElfError::Headers(_)))
        ));
        assert_eq!(
            parse_note_json(b"{\"Driver\": 3}"),
            Err(NoteError::DriverNotList)
        );
        assert_eq!(
            parse_note_json(b"{\"Driver\": [\"x\"]}"),
            Err(NoteError::DriverEntry)
        );
        assert!(matches!(
            parse_note_json(b"nope"),
            Err(NoteError::NotJson(_))
        ));
        assert_eq!(parse_note_json(b"\xff"), Err(NoteError::NotUtf8));
        let n = parse_note_json(br#"{"CUDA Version":"12.9"}"#).unwrap();
        assert_eq!(n.drivers, None);
    }
}
