//! Where a file meets NVIDIA's stub libcuda, recognised by what it is
//! ([`cuda_sandbox_elfkit::stub`]'s fingerprint), whatever the directory holding it is called:
//! the files of a package that are the stub, and the directories of a file's own search path
//! that hold one under a name it loads libcuda by.

use std::path::{Path, PathBuf};

use cuda_sandbox_elfkit::ldso::{expand_dsts, Loader, RealFs};
use cuda_sandbox_elfkit::map::Mapped;
use cuda_sandbox_elfkit::stub::{stub_libcuda, StubLibcuda};
use cuda_sandbox_elfkit::DynamicInfo;
use serde::Serialize;

/// The name the driver is loaded by at run time (DT_NEEDED, and a CUDA runtime's `dlopen`).
const LIBCUDA: &str = "libcuda.so.1";

/// A file of the package that is NVIDIA's stub libcuda.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FoundStub {
    /// The file.
    pub file: PathBuf,
    /// What the fingerprint found (JSON: its fields beside `file`).
    #[serde(flatten)]
    pub stub: StubLibcuda,
}

/// Whether the regular file at `path` is NVIDIA's stub libcuda (a FIFO, a device, a missing or
/// unreadable file is not).
pub(crate) fn stub_at(path: &Path) -> Option<StubLibcuda> {
    let file = RealFs::open_regular(path).ok()?.ok()?;
    let map = Mapped::of(&file).ok()?;
    stub_libcuda(map.bytes())
}

/// The entries of `info`'s own search path (DT_RUNPATH, else DT_RPATH) that hold NVIDIA's
/// stub libcuda, each as the file writes it (`$ORIGIN/../stubs`) with the stub found through
/// it, under a name `file` loads libcuda by: `libcuda.so.1`, and each `libcuda.so*`
/// of its DT_NEEDED. `$ORIGIN` is `file`'s directory; an entry naming `$LIB` or `$PLATFORM`
/// takes them from the loader that runs `file` as far as it is known ([`Loader::known`]).
pub(crate) fn stubs_in_search_path(
    file: &Path,
    info: &DynamicInfo,
    store_dir: &Path,
) -> Vec<(String, FoundStub)> {
    let (search, _) = info.search_path();
    if search.is_empty() {
        return Vec::new();
    }
    let mut names = vec![LIBCUDA];
    for needed in &info.needed {
        if needed.starts_with("libcuda.so") && !names.contains(&needed.as_str()) {
            names.push(needed);
        }
    }
    let interpreter = info
        .interpreter
        .clone()
        .unwrap_or_else(|| PathBuf::from("/lib64/ld-linux-x86-64.so.2"));
    let loader = Loader::known(&interpreter, store_dir);
    let origin = file.parent().map(|d| d.to_string_lossy().into_owned());
    let mut out = Vec::new();
    for entry in search {
        let Some(dir) = expand_dsts(entry, origin.as_deref(), &loader) else {
            continue;
        };
        if dir.is_empty() {
            continue; // the process's working directory: nothing of the package's to judge
        }
        for name in &names {
            let candidate = Path::new(&dir).join(name);
            if let Some(stub) = stub_at(&candidate) {
                out.push((
                    entry.clone(),
                    FoundStub {
                        file: candidate,
                        stub,
                    },
                ));
                break;
            }
        }
    }
    out
}
