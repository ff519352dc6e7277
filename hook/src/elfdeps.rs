//! The shared libraries a program needs, resolved on the host the way the dynamic loader would:
//! its interpreter, then each `DT_NEEDED` through `DT_RUNPATH`/`DT_RPATH` (with `$ORIGIN`), the
//! loader cache and the default directories, recursively. `exec` binds them so that a command
//! runs in a root holding nothing else.

use crate::discover::ldcache::{self, CacheEntry};
use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

pub use cuda_sandbox_elfkit::{dynamic_info, DynamicInfo};

const DEFAULT_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// Every file the programs or libraries in `roots` need at run time (the roots excluded),
/// each as the path the loader would open. Names that cannot be found are returned in the
/// second list.
pub fn library_closure(roots: &[PathBuf]) -> (BTreeSet<PathBuf>, Vec<String>) {
    let cache: Vec<CacheEntry> = std::fs::read("/etc/ld.so.cache")
        .ok()
        .and_then(|b| ldcache::parse(&b).ok())
        .unwrap_or_default();
    let native = ldcache::native_flags();
    let mut found = BTreeSet::new();
    let mut missing = Vec::new();
    let mut queue: VecDeque<PathBuf> = roots.iter().cloned().collect();
    let mut seen: BTreeSet<PathBuf> = roots.iter().cloned().collect();
    while let Some(file) = queue.pop_front() {
        let Ok(data) = std::fs::read(&file) else {
            continue;
        };
        let Ok(Some(info)) = dynamic_info(&data) else {
            continue;
        };
        let origin = std::fs::canonicalize(&file)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        let mut next = Vec::new();
        if let Some(interp) = &info.interpreter {
            next.push(interp.clone());
        }
        for name in &info.needed {
            match resolve(name, info.search_path().0, &origin, &cache, native) {
                Some(p) => next.push(p),
                None => missing.push(format!("{name} (needed by {})", file.display())),
            }
        }
        for p in next {
            if seen.insert(p.clone()) {
                found.insert(p.clone());
                queue.push_back(p);
            }
        }
    }
    (found, missing)
}

fn resolve(
    name: &str,
    runpath: &[String],
    origin: &Path,
    cache: &[CacheEntry],
    native: Option<i32>,
) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name)).filter(|p| p.exists());
    }
    let origin = origin.to_string_lossy();
    for dir in runpath {
        let dir = dir
            .replace("$ORIGIN", &origin)
            .replace("${ORIGIN}", &origin);
        let p = Path::new(&dir).join(name);
        if p.exists() {
            return Some(p);
        }
    }
    if let Some(e) = cache
        .iter()
        .find(|e| e.soname == name.as_bytes() && native.is_none_or(|f| e.flags == f))
    {
        return Some(e.path.clone());
    }
    DEFAULT_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_program_needs_libc_and_its_interpreter() {
        // What the file asks for is elfkit's to read (and test); here, that it is found.
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        let (closure, missing) = library_closure(&[sh]);
        assert!(missing.is_empty(), "{missing:?}");
        assert!(closure
            .iter()
            .any(|p| p.to_string_lossy().contains("libc.so")));
    }

    #[test]
    fn runpath_with_origin_is_followed() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        cuda_sandbox_testkit::shared_library(&d.join("libdep.so"), Some("libdep.so")).unwrap();
        let src = d.join("main.c");
        std::fs::write(
            &src,
            "int cuInit(unsigned); int main(void) { return cuInit(0); }\n",
        )
        .unwrap();
        let ok = std::process::Command::new("cc")
            .arg("-o")
            .arg(d.join("main"))
            .arg(&src)
            .arg(format!("-L{}", d.display()))
            .arg("-ldep")
            .arg("-Wl,-rpath,$ORIGIN")
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let info = dynamic_info(&std::fs::read(d.join("main")).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(info.search_path().0, ["$ORIGIN"]);
        let (closure, missing) = library_closure(&[d.join("main")]);
        assert!(missing.is_empty(), "{missing:?}");
        let dep = std::fs::canonicalize(d).unwrap().join("libdep.so");
        assert!(closure.contains(&dep), "{closure:?}");
    }
}
