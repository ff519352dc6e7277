//! What a spec's entry is: a path a build cannot be given, the host's C/C++ runtime, an FHS
//! program, a vendor data file, or the NVIDIA container toolkit's `create-symlinks` hook.

use crate::cdi::spec::Hook;
use std::path::{Path, PathBuf};

/// Why a spec's paths cannot be given to a build: a relative path, or one holding a newline
/// or `=`, which Nix's pre-build-hook protocol cannot express.
pub(super) fn unusable(paths: &[&str]) -> Option<String> {
    paths.iter().find_map(|p| {
        if !p.starts_with('/') {
            Some(format!("{p:?} is not an absolute path"))
        } else if p.contains(['\n', '=']) {
            Some(format!(
                "{p:?} holds a newline or '=', which Nix's pre-build-hook protocol cannot express"
            ))
        } else {
            None
        }
    })
}

/// File names of the host's C and C++ runtime, which must never shadow Nix's.
pub(super) fn is_host_runtime(name: &str) -> bool {
    const RUNTIME: &[&str] = &[
        "libc",
        "libm",
        "libdl",
        "libpthread",
        "librt",
        "libresolv",
        "libutil",
        "libstdc++",
        "libgcc_s",
        "libatomic",
    ];
    name.starts_with("ld-linux")
        || name.starts_with("ld64.so")
        || name
            .split_once(".so")
            .is_some_and(|(stem, _)| RUNTIME.contains(&stem))
}

/// Whether `container_path` is in an FHS program directory.
pub(super) fn is_fhs_program(container_path: &Path) -> bool {
    const BIN: &[&str] = &[
        "/bin",
        "/sbin",
        "/usr/bin",
        "/usr/sbin",
        "/usr/local/bin",
        "/usr/local/sbin",
    ];
    container_path
        .parent()
        .is_some_and(|p| BIN.iter().any(|b| p == Path::new(b)))
}

/// Where a vendor data file goes under the driver link's `share` (`/usr/share/vulkan/icd.d/x`
/// → `vulkan/icd.d/x`), as Nixpkgs' loaders look there.
pub(super) fn data_file_place(container_path: &Path) -> Option<PathBuf> {
    const SHARED: &[&str] = &["vulkan", "glvnd", "egl", "nvidia", "OpenCL"];
    let rel = container_path
        .strip_prefix("/usr/share")
        .or_else(|_| container_path.strip_prefix("/etc"))
        .ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    SHARED.contains(&first).then(|| rel.to_path_buf())
}

/// The links (target, link) of the NVIDIA container toolkit's `create-symlinks` hook
/// (`nvidia-ctk hook create-symlinks --link TARGET::LINK`, or `nvidia-cdi-hook`); `None` for
/// any other hook.
pub(super) fn create_symlinks(h: &Hook) -> Option<Vec<(String, String)>> {
    let position = h.args.iter().position(|a| a == "create-symlinks")?;
    let mut out = Vec::new();
    let mut args = h.args[position + 1..].iter();
    while let Some(a) = args.next() {
        let value = match a.strip_prefix("--link=") {
            Some(v) => v,
            None if a == "--link" => match args.next() {
                Some(v) => v,
                None => break,
            },
            None => continue,
        };
        if let Some((target, link)) = value.split_once("::") {
            out.push((target.to_string(), link.to_string()));
        }
    }
    Some(out)
}

/// The hook's program and subcommand, for messages: `nvidia-cdi-hook update-ldcache`.
pub(super) fn program_of(h: &Hook) -> String {
    let program = Path::new(&h.path)
        .file_name()
        .map_or(h.path.clone(), |n| n.to_string_lossy().into_owned());
    let sub = h
        .args
        .iter()
        .skip(1)
        .find(|a| !a.starts_with('-') && *a != "hook");
    match sub {
        Some(s) => format!("{program} {s}"),
        None => program,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::cdi::CdiEdit;

    #[test]
    fn relative_or_unexpressible_spec_paths_are_refused() {
        assert!(unusable(&["/dev/nvidia0", "/dev/nvidia0"]).is_none());
        for bad in ["dev/nvidia0", "/dev/a=b", "/dev/a\nb"] {
            assert!(unusable(&["/dev/ok", bad]).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn what_never_enters_is_recognised() {
        for name in [
            "libc.so.6",
            "libstdc++.so.6",
            "ld-linux-x86-64.so.2",
            "libgcc_s.so.1",
        ] {
            assert!(is_host_runtime(name), "{name}");
        }
        for name in ["libcuda.so.1", "libcudart.so.12", "libnvidia-ml.so.1"] {
            assert!(!is_host_runtime(name), "{name}");
        }
        assert!(is_fhs_program(Path::new("/usr/bin/nvidia-smi")));
        assert!(!is_fhs_program(Path::new("/usr/bin/x/nvidia-smi")));
    }

    #[test]
    fn create_symlinks_links_are_read_in_both_spellings() {
        let h = Hook {
            hook_name: "createContainer".into(),
            path: "/usr/bin/nvidia-cdi-hook".into(),
            args: [
                "nvidia-cdi-hook",
                "create-symlinks",
                "--link",
                "libcuda.so.1::/usr/lib/x/libcuda.so",
                "--link=a::/b",
            ]
            .map(String::from)
            .to_vec(),
            ..Hook::default()
        };
        assert_eq!(
            create_symlinks(&h).unwrap(),
            [
                (
                    "libcuda.so.1".to_string(),
                    "/usr/lib/x/libcuda.so".to_string()
                ),
                ("a".to_string(), "/b".to_string())
            ]
        );
        assert_eq!(program_of(&h), "nvidia-cdi-hook create-symlinks");
        let ld = Hook {
            args: ["nvidia-ctk", "hook", "update-ldcache"]
                .map(String::from)
                .to_vec(),
            path: "/usr/bin/nvidia-ctk".into(),
            ..Hook::default()
        };
        assert!(create_symlinks(&ld).is_none());
        assert_eq!(program_of(&ld), "nvidia-ctk update-ldcache");
        assert!(CdiEdit::Hook {
            hook_name: "x".into(),
            program: program_of(&ld)
        }
        .why()
        .starts_with("not needed"));
    }
}
