//! The cli tier of these tests (docs/testing.md).

use super::*;

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

/// Issue 34: a static CUDA runtime `dlopen`s `libcuda.so.1`, and glibc searches the DT_RUNPATH
/// of the object that calls `dlopen`: the file holding the runtime. So a program or library
/// with NVIDIA's `libcudart_static.a` linked in (stripped as Nixpkgs strips) needs the driver
/// link in its own DT_RUNPATH, as a DT_NEEDED user of libcuda does; with it, no finding.
/// Outside the Nix store (this test's files) it is a note, not a finding (issue 49).
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
        let found: Vec<_> = lint_entries(&[&file], "notes")
            .into_iter()
            .filter(|(_, kind, _)| kind == "no-driver-link")
            .collect();
        assert!(
            lint_findings(&[&file]).is_empty(),
            "{name}: a note outside the store"
        );
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

/// Runtimes outside what is linted count too, and skipping a dependency's read (the largest,
/// when nothing else in the process holds a runtime: `mixing::runtimes_of`) never hides a
/// mix. A program with no runtime of its own needs two libraries outside the linted tree, one
/// with NVIDIA's 12.9 static runtime and one, the process's largest file, with the 13.0:
/// linting the program alone finds the
/// process that loads both; the same program needing only the 13.0 library loads one runtime,
/// and nothing is found.
#[test]
fn mixed_runtimes_outside_the_linted_files_are_found() {
    let Some(real) = RealNvidia::find("mixed_runtimes_outside_the_linted_files_are_found") else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let build_dir = temp.path().join("build");
    let lib = temp.path().join("lib");
    let (two, one) = (temp.path().join("two"), temp.path().join("one"));
    for d in [&build_dir, &lib, &two, &one] {
        std::fs::create_dir_all(d).unwrap();
    }
    let mut libraries = Vec::new();
    for (cudart, name, function) in [
        (Cudart::V12_9, "libruntime12.so", "version12"),
        (Cudart::V13_0, "libruntime13.so", "version13"),
    ] {
        // The 13.0 library padded past libc's size: the largest object of the process, the one
        // a wrong skip would leave unread.
        let padding = if function == "version13" {
            "const char padding[4 << 20] = { 1 };\n"
        } else {
            ""
        };
        let source = LIBRARY.replace("runtime_version", function) + padding;
        let built = build_with(
            &build_dir,
            &real,
            Some(cudart),
            &source,
            name,
            &["-shared", "-fPIC", &format!("-Wl,-soname,{name}")],
        );
        std::fs::copy(&built, lib.join(name)).unwrap();
        libraries.push(lib.join(name));
    }
    // `plain` calls into each library it is given, and holds no runtime itself.
    let link = |out: &Path, needed: &[PathBuf]| {
        let calls: Vec<String> = needed
            .iter()
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy();
                format!("version{}", &name["libruntime".len()..name.len() - 3])
            })
            .collect();
        let source = build_dir.join(format!("plain{}.c", needed.len()));
        let declared: String = calls.iter().map(|c| format!("int {c}(void);\n")).collect();
        let called: Vec<String> = calls.iter().map(|c| format!("{c}()")).collect();
        std::fs::write(
            &source,
            format!(
                "{declared}int main(void) {{ return {}; }}\n",
                called.join(" + ")
            ),
        )
        .unwrap();
        let mut args = vec![
            "-o".to_owned(),
            out.display().to_string(),
            source.display().to_string(),
            "-Wl,--no-as-needed,--enable-new-dtags,-rpath,$ORIGIN/../lib".to_owned(),
        ];
        args.extend(needed.iter().map(|p| p.display().to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run("cc", &args);
    };
    link(&two.join("plain"), &libraries);
    link(&one.join("plain"), &libraries[1..]);
    let mixed = |dir: &Path| -> Vec<(String, String)> {
        lint_findings(&[dir])
            .into_iter()
            .filter(|(_, kind, _)| kind == "mixed-cuda-runtimes")
            .map(|(file, _, message)| (file, message))
            .collect()
    };
    let found = mixed(&two);
    assert_eq!(found.len(), 1, "{found:?}");
    let (file, message) = &found[0];
    assert_eq!(file, "plain");
    assert!(message.contains("versions 12.9 and 13.0"), "{message}");
    for name in ["libruntime12.so (12.9)", "libruntime13.so (13.0)"] {
        assert!(message.contains(name), "{message}");
    }
    assert_eq!(mixed(&one), []);
}
