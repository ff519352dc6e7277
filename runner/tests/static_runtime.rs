//! CUDA runtimes linked statically into programs and libraries, then stripped as Nixpkgs and
//! others strip them, are still found (`runtime_scan::static_runtime_in`: the runtime's own strings,
//! not its symbols), with the version its code holds; the driver and other libraries are not
//! runtimes. Against NVIDIA's real `libcudart_static.a` 12.9.79 and 13.0.96 and the real shared
//! runtimes and drivers (`scripts/nvidia-userspace`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::RUNNER;
use cuda_sandbox_check::facts::runtime_scan::{
    device_ranges, gpu_code_and_runtime, runtime_in, static_runtime_in, FoundRuntime, RuntimeForm,
};
use cuda_sandbox_elfkit::fatbin::read_gpu_code;
use cuda_sandbox_elfkit::map::Mapped;
use cuda_sandbox_testkit::real_nvidia::{Branch, Cudart, RealNvidia};

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
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program} (install gcc and binutils): {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
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

    /// Whether a symbol table survives.
    fn keeps_symbols(self) -> bool {
        matches!(self, Strip::NixpkgsDebug)
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
}

/// The one-pass search agrees with the two passes on NVIDIA's libraries: the corpus (cuRAND
/// with its 1,700 containers in `.data` and a static runtime, cuFFT's 280 MB `.ldata`,
/// nvJPEG), the shared runtimes and the drivers.
#[test]
fn the_one_pass_string_search_finds_what_two_passes_find_on_nvidias_libraries() {
    let test = "the_one_pass_string_search_finds_what_two_passes_find_on_nvidias_libraries";
    let Some(real) = RealNvidia::find(test) else {
        return;
    };
    let mut files: Vec<PathBuf> = [
        ("curand-10.3.10", "libcurand.so.10"),
        ("curand-10.4.4", "libcurand.so.10"),
        ("cufft-11.4.1", "libcufft.so.11"),
        ("cufft-11.4.1", "libcufftw.so.11"),
        ("nvjpeg-12.4.0", "libnvjpeg.so.12"),
        ("nvjpeg-13.2.3", "libnvjpeg.so.13"),
    ]
    .iter()
    .map(|(wheel, file)| real.corpus(wheel, file))
    .collect();
    files.extend(Cudart::ALL.map(|c| real.cudart(c)));
    files.extend(Branch::ALL.map(|b| real.libcuda_file(b)));
    files.push(real.curand());
    for file in files {
        if !real.has(test, &file) {
            return;
        }
        let handle = std::fs::File::open(&file).unwrap();
        let map = Mapped::of(&handle).unwrap();
        assert_one_pass_agrees(&file, map.bytes());
    }
}

/// The version `cudart` reports (`12.9`).
fn version_of(cudart: Cudart) -> String {
    let v = cudart.cuda_version();
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

#[test]
fn stripped_static_copies_are_found_with_their_version() {
    let Some(real) = RealNvidia::find("stripped_static_copies_are_found_with_their_version") else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    for cudart in [Cudart::V12_9, Cudart::V13_0] {
        let version = version_of(cudart);
        let program = build_with(
            temp.path(),
            &real,
            Some(cudart),
            PROGRAM,
            &format!("app-{version}"),
            &[],
        );
        // The runtime runs and says its version: the copy is a working one.
        let out = Command::new(&program).output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("0 {}", cudart.cuda_version())
        );
        let library = build_with(
            temp.path(),
            &real,
            Some(cudart),
            LIBRARY,
            &format!("libapp-{version}.so"),
            &["-shared", "-fPIC"],
        );
        let collected = build_with(
            temp.path(),
            &real,
            Some(cudart),
            PROGRAM,
            &format!("app-gc-{version}"),
            &["-O2", "-ffunction-sections", "-Wl,--gc-sections"],
        );
        for file in [&program, &library, &collected] {
            for strip in Strip::ALL {
                let stripped = strip.copy(file);
                let found = classify(&stripped)
                    .unwrap_or_else(|| panic!("no runtime found in {}", stripped.display()));
                assert_eq!(found.form, RuntimeForm::StaticCopy, "{found:?}");
                assert_eq!(found.version.as_deref(), Some(&*version), "{found:?}");
                let by = if strip.keeps_symbols() {
                    "symbol cudaGetDriverEntryPoint; "
                } else {
                    "strings: "
                };
                assert!(found.evidence.starts_with(by), "{found:?}");
                let constant =
                    format!("cudaRuntimeGetVersion's constant {}", cudart.cuda_version());
                assert!(found.evidence.ends_with(&constant), "{found:?}");
                let data = std::fs::read(&stripped).unwrap();
                let evidence = static_runtime_in(&data).expect("the runtime's strings");
                assert_eq!(evidence.markers.len(), 4, "{evidence:?}");
            }
        }
    }
}

#[test]
fn drivers_and_other_libraries_are_not_runtimes() {
    let Some(real) = RealNvidia::find("drivers_and_other_libraries_are_not_runtimes") else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let control = build(temp.path(), &real, CONTROL, "control", &[]);
    let mut files = vec![control.clone(), Strip::NixpkgsAll.copy(&control)];
    for branch in Branch::ALL {
        let dir = real.driver_dir(branch);
        files.push(real.libcuda_file(branch));
        files.push(std::fs::canonicalize(dir.join("libnvidia-ml.so.1")).unwrap());
        files.push(std::fs::canonicalize(dir.join("libnvidia-ptxjitcompiler.so.1")).unwrap());
    }
    files.push(real.curand());
    files.extend([real.cuobjdump(), real.fatbinary()]);
    for system in [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/x86_64-linux-gnu/libstdc++.so.6",
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/bin/ls",
    ] {
        if Path::new(system).is_file() {
            files.push(std::fs::canonicalize(system).unwrap());
        }
    }
    files.push(PathBuf::from(RUNNER));
    for file in &files {
        let data = std::fs::read(file).unwrap();
        assert_eq!(
            static_runtime_in(&data),
            None,
            "{} holds no CUDA runtime",
            file.display()
        );
        assert_eq!(
            runtime_in(file, Some(&data), &[]),
            None,
            "{}",
            file.display()
        );
    }
}

#[test]
fn shared_runtimes_are_found_with_the_version_in_their_code() {
    let Some(real) = RealNvidia::find("shared_runtimes_are_found_with_the_version_in_their_code")
    else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    for cudart in Cudart::ALL {
        let version = version_of(cudart);
        // In the cache: the directory (`cudart-12.9`) names the version.
        let found = classify(&real.cudart(cudart)).expect("a runtime");
        assert_eq!(found.form, RuntimeForm::Shared);
        assert_eq!(found.version.as_deref(), Some(&*version), "{found:?}");
        // Under its SONAME only (`libcudart.so.12`, or 11.8's `libcudart.so.11.0`), which names
        // the major at most: the code gives the rest.
        let dir = temp.path().join(format!("{cudart:?}"));
        std::fs::create_dir_all(&dir).unwrap();
        let bare = dir.join(cudart.file_name());
        std::fs::copy(real.cudart(cudart), &bare).unwrap();
        let found = classify(&bare).expect("a runtime");
        assert_eq!(found.form, RuntimeForm::Shared);
        assert_eq!(found.version.as_deref(), Some(&*version), "{found:?}");
        assert!(
            found.evidence.contains("cudaRuntimeGetVersion's constant"),
            "{found:?}"
        );
        // Its strings are the runtime's, as in the static copies.
        let data = std::fs::read(&bare).unwrap();
        let evidence = static_runtime_in(&data).expect("the runtime's strings");
        assert_eq!(evidence.markers.len(), 4, "{evidence:?}");
        assert_eq!(
            evidence.version.map(|v| v.version).as_deref(),
            Some(&*version)
        );
    }
}

#[test]
fn lint_lists_a_stripped_static_copy() {
    let Some(real) = RealNvidia::find("lint_lists_a_stripped_static_copy") else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let build_dir = temp.path().join("build");
    let bin = temp.path().join("pkg/bin");
    std::fs::create_dir_all(&build_dir).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    for (cudart, name) in [(Cudart::V12_9, "app12"), (Cudart::V13_0, "app13")] {
        let program = build_with(&build_dir, &real, Some(cudart), PROGRAM, name, &[]);
        std::fs::copy(Strip::NixpkgsAll.copy(&program), bin.join(name)).unwrap();
    }
    let control = build(&build_dir, &real, CONTROL, "control", &[]);
    std::fs::copy(Strip::NixpkgsAll.copy(&control), bin.join("control")).unwrap();
    let out = Command::new(RUNNER)
        .args(["lint", "--no-manifest"])
        .arg(temp.path().join("pkg"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    for (name, version) in [("app12", "12.9"), ("app13", "13.0")] {
        let line = format!(
            "cuda runtime: {} (static-copy, {version})",
            bin.join(name).display()
        );
        assert!(stdout.lines().any(|l| l == line), "{line} in:\n{stdout}");
    }
    assert!(!stdout.contains("control"), "{stdout}");
    assert!(stdout.contains("2 CUDA runtime(s)"), "{stdout}");
    // Two versions in one package, but in two programs, each its own process: no mixing.
    assert!(!stdout.contains("CUDA runtimes of versions"), "{stdout}");
}

/// `lint --json` on `paths`: its findings as `(file name, kind, message)`.
fn lint_findings(paths: &[&Path]) -> Vec<(String, String, String)> {
    let out = Command::new(RUNNER)
        .args(["lint", "--no-manifest", "--json"])
        .args(paths)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    v["findings"]
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

/// Issue 34: a static CUDA runtime `dlopen`s `libcuda.so.1`, and glibc searches the DT_RUNPATH
/// of the object that calls `dlopen`: the file holding the runtime. So a program or library
/// with NVIDIA's `libcudart_static.a` linked in (stripped as Nixpkgs strips) needs the driver
/// link in its own DT_RUNPATH, as a DT_NEEDED user of libcuda does; with it, no finding.
#[test]
fn a_static_runtime_needs_the_driver_link_in_its_own_runpath() {
    let Some(real) = RealNvidia::find("a_static_runtime_needs_the_driver_link_in_its_own_runpath")
    else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let linked = "-Wl,--enable-new-dtags,-rpath,/run/opengl-driver/lib";
    let shared = ["-shared", "-fPIC"];
    let cases = [
        ("libnolink.so", LIBRARY, &shared[..], false),
        ("nolink", PROGRAM, &[][..], false),
        (
            "liblinked.so",
            LIBRARY,
            &["-shared", "-fPIC", linked][..],
            true,
        ),
        ("linked", PROGRAM, &[linked][..], true),
    ];
    for (name, source, flags, has_link) in cases {
        let built = build_with(dir, &real, Some(Cudart::V12_9), source, name, flags);
        let file = Strip::NixpkgsAll.copy(&built);
        let found: Vec<_> = lint_findings(&[&file])
            .into_iter()
            .filter(|(_, kind, _)| kind == "no-driver-link")
            .collect();
        if has_link {
            assert!(found.is_empty(), "{name}: {found:?}");
        } else {
            assert_eq!(found.len(), 1, "{name}: {found:?}");
            assert!(
                found[0]
                    .2
                    .starts_with("holds a static CUDA runtime, which dlopens libcuda.so.1")
                    && found[0]
                        .2
                        .contains("lacks the driver link /run/opengl-driver/lib"),
                "{name}: {found:?}"
            );
        }
    }
}

/// Issue 34: `mixed-cuda-runtimes` is a hazard inside one process only. Two programs, each
/// with its own static runtime (NVIDIA's `libcudart_static.a` 12.9 and 13.0), are two
/// processes: no finding. A program with the 12.9 runtime linked in that needs a library
/// holding the 13.0 one (found through its DT_RUNPATH `$ORIGIN/../lib`) loads both: the finding
/// names that program; the library on its own loads one and is not named.
#[test]
fn mixed_runtimes_are_those_one_process_would_load() {
    let Some(real) = RealNvidia::find("mixed_runtimes_are_those_one_process_would_load") else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let build_dir = temp.path().join("build");
    let separate = temp.path().join("separate/bin");
    let (bin, lib) = (temp.path().join("one/bin"), temp.path().join("one/lib"));
    for d in [&build_dir, &separate, &bin, &lib] {
        std::fs::create_dir_all(d).unwrap();
    }
    for (cudart, name) in [(Cudart::V12_9, "app12"), (Cudart::V13_0, "app13")] {
        let program = build_with(&build_dir, &real, Some(cudart), PROGRAM, name, &[]);
        std::fs::copy(program, separate.join(name)).unwrap();
    }
    let library = build_with(
        &build_dir,
        &real,
        Some(Cudart::V13_0),
        LIBRARY,
        "libruntime13.so",
        &["-shared", "-fPIC", "-Wl,-soname,libruntime13.so"],
    );
    std::fs::copy(&library, lib.join("libruntime13.so")).unwrap();
    let source = build_dir.join("both.c");
    std::fs::write(
        &source,
        "int cudaRuntimeGetVersion(int *version);\nint runtime_version(void);\n\
         int main(void) { int v = 0; cudaRuntimeGetVersion(&v); return v == runtime_version(); }\n",
    )
    .unwrap();
    let both = bin.join("both");
    let cudart_12 = format!("-L{}", real.cudart_dir(Cudart::V12_9).display());
    run(
        "cc",
        &[
            "-o",
            both.to_str().unwrap(),
            source.to_str().unwrap(),
            &cudart_12,
            "-lcudart_static",
            "-lpthread",
            "-ldl",
            "-lrt",
            "-Wl,--no-as-needed,--enable-new-dtags,-rpath,$ORIGIN/../lib",
            lib.join("libruntime13.so").to_str().unwrap(),
        ],
    );
    let mixed = |dir: &Path| -> Vec<(String, String)> {
        lint_findings(&[dir])
            .into_iter()
            .filter(|(_, kind, _)| kind == "mixed-cuda-runtimes")
            .map(|(file, _, message)| (file, message))
            .collect()
    };
    assert_eq!(mixed(&temp.path().join("separate")), []);
    let found = mixed(&temp.path().join("one"));
    assert_eq!(found.len(), 1, "{found:?}");
    let (file, message) = &found[0];
    assert_eq!(file, "both");
    let process = format!("the process of {} would load", both.display());
    assert!(
        message.starts_with(&process) && message.contains("versions 12.9 and 13.0"),
        "{message}"
    );
    assert!(message.contains("libruntime13.so (13.0)"), "{message}");
}
