//! CUDA runtimes linked statically into programs and libraries, then stripped as Nixpkgs and
//! others strip them, are still found (`runtime_scan::static_runtime_in`: the runtime's own strings,
//! not its symbols), with the version its code holds; the driver and other libraries are not
//! runtimes. Against NVIDIA's real `libcudart_static.a` 12.9.79 and 13.0.96 and the real shared
//! runtimes and drivers (`scripts/nvidia-userspace`).

#[path = "../common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::RUNNER;
use cuda_sandbox_check::facts::runtime_scan::{
    device_ranges, gpu_code_and_runtime, runtime_in, runtime_in_dependency, static_runtime_in,
    FoundRuntime, RuntimeForm,
};
use cuda_sandbox_elfkit::fatbin::read_gpu_code;
use cuda_sandbox_elfkit::map::Mapped;
use cuda_sandbox_testkit::real_nvidia::{Branch, Cudart, RealNvidia};
use cuda_sandbox_testkit::run_ok;

/// Calls into the runtime so that the linker keeps it.
const PROGRAM: &str = "#include <stdio.h>\n\
    int cudaRuntimeGetVersion(int *version);\n\
    int main(void) { int v = 0; int r = cudaRuntimeGetVersion(&v); printf(\"%d %d\\n\", r, v); return r; }\n";

/// The same, in a shared library.
const LIBRARY: &str = "int cudaRuntimeGetVersion(int *version);\n\
    int runtime_version(void) { int v = 0; cudaRuntimeGetVersion(&v); return v; }\n";

/// No runtime: loads libraries by name, as a runtime does.
const CONTROL: &str = "#include <stdio.h>\n#include <dlfcn.h>\n\
    int main(void) { printf(\"%p\\n\", dlopen(\"libcuda.so.1\", RTLD_NOW)); return 0; }\n";

fn run(program: &str, args: &[&str]) {
    run_ok(Command::new(program).args(args));
}

/// Compiles `source` into `out` with `flags`, against the static runtime of `cudart` if given.
fn build(dir: &Path, real: &RealNvidia, source: &str, out: &str, flags: &[&str]) -> PathBuf {
    build_with(dir, real, None, source, out, flags)
}

fn build_with(
    dir: &Path,
    real: &RealNvidia,
    cudart: Option<Cudart>,
    source: &str,
    out: &str,
    flags: &[&str],
) -> PathBuf {
    let src = dir.join(format!("{out}.c"));
    std::fs::write(&src, source).unwrap();
    let target = dir.join(out);
    let mut args: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
    args.extend([
        "-o".into(),
        target.display().to_string(),
        src.display().to_string(),
    ]);
    if let Some(cudart) = cudart {
        args.push(format!("-L{}", real.cudart_dir(cudart).display()));
        args.push("-lcudart_static".into());
        args.extend(["-lpthread", "-ldl", "-lrt"].map(String::from));
    } else {
        args.push("-ldl".into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run("cc", &args);
    target
}

/// How a file is stripped.
#[derive(Debug, Clone, Copy)]
enum Strip {
    /// Nixpkgs' default for `stripDebugList` (lib, bin, …): `strip -S -p`; keeps `.symtab`.
    NixpkgsDebug,
    /// Nixpkgs' `stripAllList` default, `strip -s -p`: no symbol table left.
    NixpkgsAll,
    /// `strip --strip-unneeded`.
    Unneeded,
    /// `strip -s`, then the section headers removed too (as `sstrip` does).
    NoSections,
}

impl Strip {
    const ALL: [Strip; 4] = [
        Strip::NixpkgsDebug,
        Strip::NixpkgsAll,
        Strip::Unneeded,
        Strip::NoSections,
    ];

    /// A stripped copy of `file`.
    fn copy(self, file: &Path) -> PathBuf {
        let out = PathBuf::from(format!("{}.{self:?}", file.display()));
        std::fs::copy(file, &out).unwrap();
        let path = out.to_str().unwrap();
        match self {
            Strip::NixpkgsDebug => run("strip", &["-S", "-p", path]),
            Strip::NixpkgsAll => run("strip", &["-s", "-p", path]),
            Strip::Unneeded => run("strip", &["--strip-unneeded", path]),
            Strip::NoSections => {
                run("strip", &["-s", path]);
                let mut data = std::fs::read(&out).unwrap();
                assert_eq!(&data[..5], b"\x7fELF\x02", "a 64-bit ELF file");
                // e_shoff, then e_shnum and e_shstrndx (ELF64 header).
                data[0x28..0x30].fill(0);
                data[0x3c..0x40].fill(0);
                std::fs::write(&out, data).unwrap();
            }
        }
        out
    }
}

/// The runtime in the file at `path`, found by its own search (`runtime_in`), after checking
/// that the one-pass search inside the magic scan (`gpu_code_and_runtime`) finds the same.
fn classify(path: &Path) -> Option<FoundRuntime> {
    let data = std::fs::read(path).unwrap();
    assert_one_pass_agrees(path, &data);
    runtime_in(path, Some(&data), &[])
}

/// `gpu_code_and_runtime` (the runtime's strings looked for as elfkit's magic scan reads the
/// data) against `read_gpu_code` then `runtime_in` over the data outside the containers.
fn assert_one_pass_agrees(path: &Path, data: &[u8]) {
    let code = read_gpu_code(data);
    let device = code.as_ref().map(device_ranges).unwrap_or_default();
    let two_passes = (code, runtime_in(path, Some(data), &device));
    assert_eq!(
        gpu_code_and_runtime(path, data),
        two_passes,
        "{}",
        path.display()
    );
    // As the mixing check reads a dependency: in pieces, never holding the file.
    assert_eq!(
        runtime_in_dependency(path),
        two_passes.1,
        "{} as a dependency",
        path.display()
    );
}

/// The version `cudart` reports (`12.9`).
fn version_of(cudart: Cudart) -> String {
    let v = cudart.cuda_version();
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// `lint --json` on `paths`: its findings as `(file name, kind, message)`.
fn lint_findings(paths: &[&Path]) -> Vec<(String, String, String)> {
    lint_entries(paths, "findings")
}

/// `lint --json`'s list `key` (`findings` or `notes`): (file name, kind, message) each.
fn lint_entries(paths: &[&Path], key: &str) -> Vec<(String, String, String)> {
    let out = Command::new(RUNNER)
        .args(["lint", "--no-manifest", "--json"])
        .args(paths)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let file = PathBuf::from(f["file"].as_str().unwrap());
            (
                file.file_name().unwrap().to_string_lossy().into_owned(),
                f["kind"].as_str().unwrap().to_owned(),
                f["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

// The tests, one module per tier (docs/testing.md).
mod cli;
mod pure;
