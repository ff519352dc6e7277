//! Writing a build's manifest to the runtime directory, and removing stale ones.
//!
//! Files are written atomically (temporary file + rename) with mode 0444, so a concurrent
//! reader never sees a torn manifest and the build (which runs as a build user) cannot change
//! it. A manifest whose sandbox directory no longer exists belongs to a finished build and is
//! removed the next time the hook writes one.

use crate::plan::PlannedManifest;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Writes `m` and removes manifests of builds that are gone.
pub fn write(m: &PlannedManifest, runtime_dir: &Path) -> std::io::Result<()> {
    let dir = m.outside.parent().unwrap_or(runtime_dir);
    std::fs::create_dir_all(dir)?;
    remove_stale(dir);
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(m.content.to_json().as_bytes())?;
    file.write_all(b"\n")?;
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o444))?;
    file.persist(&m.outside).map_err(|e| e.error)?;
    Ok(())
}

/// Removes manifests whose chroot directory no longer exists (and unreadable leftovers).
fn remove_stale(dir: &Path) {
    #[derive(serde::Deserialize)]
    struct Owner {
        chroot: String,
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let stale = match std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Owner>(&b).ok())
        {
            Some(o) => o.chroot.is_empty() || !Path::new(&o.chroot).exists(),
            None => true,
        };
        if stale {
            let _ = std::fs::remove_file(&path);
        }
    }
}
