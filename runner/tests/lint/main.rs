//! The ELF lint on real ELF files made here with the C compiler and linker flags (`-rpath`):
//! a libcuda user with the compat directory before the driver link passes; the driver link
//! first, a directory holding NVIDIA's stub libcuda in DT_RUNPATH (the real stub, from the
//! cache scripts/nvidia-userspace fills; under CI=true its absence fails), or no driver link
//! at all each fail, explained; a static CUDA archive in the package is reported. Needs `cc`
//! (and `ar`).

#[path = "../common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::RUNNER;
use cuda_sandbox_manifest::versions::CudaVersion;
use cuda_sandbox_manifest::{DriverKind, DriverManifest, Manifest, MANIFEST_VERSION};
use cuda_sandbox_testkit::cc;
use cuda_sandbox_testkit::real_nvidia::{Branch, RealNvidia};

const LINK: &str = "/run/opengl-driver/lib";
const COMPAT: &str = "/nix/store/00000000000000000000000000000000-fake-cuda-compat/compat";

/// A package tree of real ELF files, one per situation, each in its own directory.
struct Package {
    _temp: tempfile::TempDir,
    root: PathBuf,
    stubs: PathBuf,
}

impl Package {
    fn new() -> Package {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().join("pkg");
        let stubs = temp.path().join("toolkit/lib/stubs");
        std::fs::create_dir_all(&stubs).unwrap();
        // The toolkit's stub libcuda, to link against (as a real build does).
        let src = temp.path().join("stub.c");
        std::fs::write(&src, "int cuInit(unsigned int flags) { return 34; }\n").unwrap();
        let stub = stubs.join("libcuda.so");
        cc(&[
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcuda.so.1",
            "-o",
            stub.to_str().unwrap(),
            src.to_str().unwrap(),
        ]);
        let user = temp.path().join("user.c");
        std::fs::write(
            &user,
            "int cuInit(unsigned int);\nint use_gpu(void) { return cuInit(0); }\n",
        )
        .unwrap();
        let package = Package {
            _temp: temp,
            root,
            stubs,
        };
        let stubs = package.stubs.display().to_string();
        package.library("right", Some(&format!("{COMPAT}:{LINK}")), &user, true);
        package.library("wrong", Some(&format!("{LINK}:{COMPAT}")), &user, true);
        package.library(
            "stubs",
            Some(&format!("{COMPAT}:{LINK}:{stubs}")),
            &user,
            true,
        );
        package.library("nolink", Some("/nix/store/x-cuda/lib"), &user, true);
        package.library("plain", Some("/nix/store/x-zlib/lib"), &user, false);
        package
    }

    /// Builds `<root>/<name>/lib/lib<name>.so` with `runpath`, needing libcuda when `cuda`.
    fn library(&self, name: &str, runpath: Option<&str>, src: &Path, cuda: bool) {
        let dir = self.root.join(name).join("lib");
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join(format!("lib{name}.so"));
        let mut args: Vec<String> = vec!["-shared".into(), "-fPIC".into(), "-o".into()];
        args.push(out.display().to_string());
        args.push(src.display().to_string());
        if let Some(runpath) = runpath {
            args.push(format!("-Wl,--enable-new-dtags,-rpath,{runpath}"));
        }
        if cuda {
            args.push(format!("-L{}", self.stubs.display()));
            args.push("-lcuda".into());
        } else {
            args.push("-Wl,--unresolved-symbols=ignore-all".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cc(&args);
    }

    fn dir(&self, name: &str) -> String {
        self.root.join(name).display().to_string()
    }
}

/// `lint`'s exit status for findings (a packaging problem that matters).
const FINDINGS: i32 = 1;

/// `lint`'s exit status for a path given that cannot be judged.
const CANNOT_JUDGE: i32 = 2;

struct Lint {
    code: i32,
    stdout: String,
}

fn lint(args: &[&str]) -> Lint {
    let output = Command::new(RUNNER)
        .arg("lint")
        .arg("--no-manifest")
        .args(args)
        .output()
        .unwrap();
    Lint {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr),
    }
}

// The tests, one module per tier (docs/testing.md).
mod cli;
