//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn lint_passes_compat_before_the_driver_link() {
    let p = Package::new();
    let run = lint(&["--compat-dir", COMPAT, &p.dir("right"), &p.dir("plain")]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("2 ELF, 1 using libcuda, 0 CUDA runtime(s), 0 with GPU code; 0 finding(s)"),
        "{}",
        run.stdout
    );
}

#[test]
fn lint_fails_the_driver_link_before_compat_explained() {
    let p = Package::new();
    let run = lint(&["--compat-dir", COMPAT, &p.dir("wrong")]);
    assert_eq!(run.code, FINDINGS, "{}", run.stdout);
    let line = run.stdout.lines().next().unwrap();
    for needle in [
        "libwrong.so: DT_RUNPATH [/run/opengl-driver/lib:",
        "has the driver link /run/opengl-driver/lib before the compat directory",
        "the compat driver is ignored; put the compat directory first",
    ] {
        assert!(line.contains(needle), "{needle:?} not in {line}");
    }
}

/// NVIDIA's stub libcuda is found by what it is: in the toolkit's `stubs` directory under the
/// name the loader opens, and renamed into a directory of any other name; the fixtures' fake
/// libcuda and the real 535 driver in the same places are not taken for it.
#[test]
fn lint_names_nvidias_stub_libcuda_by_what_it_is_wherever_it_lies() {
    let test = "lint_names_nvidias_stub_libcuda_by_what_it_is_wherever_it_lies";
    let Some(real) = RealNvidia::find(test) else {
        return;
    };
    let (stub_11, stub_12) = (real.stub_libcuda("11.8"), real.stub_libcuda("12.4"));
    if !real.has(test, &stub_11) || !real.has(test, &stub_12) {
        return;
    }
    let p = Package::new();
    // The toolkit's stubs directory as a package may leave it: the stub and a libcuda.so.1
    // link to it (what the loader opens for DT_NEEDED libcuda.so.1).
    std::fs::copy(&stub_11, p.stubs.join("libcuda.so")).unwrap();
    std::os::unix::fs::symlink("libcuda.so", p.stubs.join("libcuda.so.1")).unwrap();
    let run = lint(&["--compat-dir", COMPAT, &p.dir("stubs")]);
    assert_eq!(run.code, FINDINGS, "{}", run.stdout);
    let stubs = p.stubs.display();
    assert!(
        run.stdout.contains(&format!(
            "libstubs.so: DT_RUNPATH entry {stubs} holds {stubs}/libcuda.so.1, NVIDIA's stub \
             libcuda (545 driver entry points, each returning 34, CUDA_ERROR_STUB_LIBRARY): \
             loaded at run time instead of the driver"
        )),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("1 finding(s)"), "{}", run.stdout);

    // The 12.4 stub renamed to libcuda.so.1 beside its user, found through $ORIGIN.
    let user = p.root.join("user.c");
    std::fs::write(
        &user,
        "int cuInit(unsigned int);\nint f(void) { return cuInit(0); }\n",
    )
    .unwrap();
    let runpath = format!("$ORIGIN:{LINK}");
    p.library("renamed", Some(&runpath), &user, true);
    let renamed = p.root.join("renamed/lib/libcuda.so.1");
    std::fs::copy(&stub_12, &renamed).unwrap();
    let run = lint(&[&p.dir("renamed")]);
    assert_eq!(run.code, FINDINGS, "{}", run.stdout);
    for needle in [
        format!(
            "stub libcuda: {}: NVIDIA's stub libcuda (625 driver entry points",
            renamed.display()
        ),
        format!(
            "librenamed.so: DT_RUNPATH entry $ORIGIN holds {}, NVIDIA's stub libcuda (625",
            renamed.display()
        ),
    ] {
        assert!(run.stdout.contains(&needle), "{needle}\n{}", run.stdout);
    }
    let run = lint(&["--json", &p.dir("renamed")]);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["schema"], 4);
    assert_eq!(
        report["stub_libcuda"],
        serde_json::json!([{"file": renamed, "entry_points": 625}]),
        "{report:#}"
    );

    // The fixtures' fake libcuda and Debian's 535 driver, each beside a user the same way.
    let fake = common::artifacts_dir().join("libfake_libcuda.so");
    for (name, libcuda) in [("fake", fake), ("driver", real.libcuda_file(Branch::R535))] {
        p.library(name, Some(&runpath), &user, true);
        std::fs::copy(&libcuda, p.root.join(name).join("lib/libcuda.so.1")).unwrap();
        let run = lint(&[&p.dir(name)]);
        assert_eq!(run.code, 0, "{name}: {}", run.stdout);
        assert!(!run.stdout.contains("stub"), "{name}: {}", run.stdout);
    }
}

/// Issue 49: outside the Nix store a libcuda user without the driver link is a note (pip's
/// `$ORIGIN` search paths are normal there), exit 0; for the package under test (`--lint` in a
/// check run) it is a finding, as in the store (elf_lint's unit tests).
#[test]
fn a_libcuda_user_without_the_driver_link_is_a_note_outside_the_store_a_finding_under_test() {
    let p = Package::new();
    let run = lint(&[&p.dir("nolink")]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout.contains("note: ") && run.stdout.contains("needs libcuda but DT_RUNPATH [/nix/store/x-cuda/lib] lacks the driver link /run/opengl-driver/lib"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("autoAddDriverRunpath"));
    assert!(
        run.stdout.contains("; 0 finding(s), 1 note(s)"),
        "{}",
        run.stdout
    );
    let checked = Command::new(RUNNER)
        .args([
            "--no-manifest",
            "--lint",
            &p.dir("nolink"),
            "--exact",
            "lint::elf",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&checked.stdout);
    assert_eq!(checked.status.code(), Some(101), "{out}");
    assert!(out.contains("lacks the driver link"), "{out}");
}

#[test]
fn lint_reports_static_cuda_archives() {
    let p = Package::new();
    let lib = p.root.join("right/lib");
    let object = lib.join("x.o");
    std::fs::write(lib.join("x.c"), "int x;\n").unwrap();
    cc(&[
        "-c",
        "-o",
        object.to_str().unwrap(),
        lib.join("x.c").to_str().unwrap(),
    ]);
    let archive = lib.join("libcudart_static.a");
    let ar = Command::new("ar")
        .arg("rcs")
        .arg(&archive)
        .arg(&object)
        .status()
        .unwrap();
    assert!(ar.success());
    std::fs::write(lib.join("libz.a"), "!<arch>\n").unwrap();
    let run = lint(&["--compat-dir", COMPAT, &p.dir("right")]);
    assert_eq!(run.code, FINDINGS, "{}", run.stdout);
    assert!(
        run.stdout.contains(&format!(
            "{}: static CUDA library in the package",
            archive.display()
        )),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("libz.a"), "{}", run.stdout);
}

#[test]
fn lint_json_lists_every_finding_with_its_kind() {
    let p = Package::new();
    let run = lint(&[
        "--json",
        "--compat-dir",
        COMPAT,
        &p.root.display().to_string(),
    ]);
    assert_eq!(run.code, FINDINGS, "{}", run.stdout);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let mut kinds: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        // The `stubs` directory holds a stub of this test's own, not NVIDIA's: no finding.
        ["compat-after-driver-link", "compat-missing"],
        "{report:#}"
    );
    // Outside the store, the missing driver link is a note.
    assert_eq!(report["notes"][0]["kind"], "no-driver-link", "{report:#}");
    assert_eq!(report["libcuda_users"].as_array().unwrap().len(), 4);
}

#[test]
fn lint_check_in_the_harness_takes_compat_from_the_manifest() {
    let p = Package::new();
    let temp = tempfile::tempdir().unwrap();
    let manifest = temp.path().join("manifest.json");
    let m = Manifest {
        version: MANIFEST_VERSION,
        derivation: "/nix/store/x.drv".into(),
        chroot: "/nix/store/x.drv.chroot".into(),
        rules: vec!["nvidia".into()],
        features: vec!["cuda".into()],
        devices: Vec::new(),
        leased_gpus: Vec::new(),
        mig: None,
        driver: DriverManifest {
            kind: DriverKind::Compat,
            libcuda: vec![format!("{COMPAT}/libcuda.so.1")],
            cuda_version: Some(CudaVersion(12020)),
            host_cuda_version: Some(CudaVersion(11040)),
            kernel_driver: Some("470.82.01".into()),
            compat_dir: Some(COMPAT.into()),
            driver_link_lib: Some(LINK.into()),
            reason: "compat".into(),
        },
    };
    std::fs::write(&manifest, m.to_json()).unwrap();
    let report = temp.path().join("report.json");
    let run = |dir: &str| {
        let output = Command::new(RUNNER)
            .args(["--manifest", manifest.to_str().unwrap(), "--lint", dir])
            .args(["--report", report.to_str().unwrap(), "--exact", "lint::elf"])
            .output()
            .unwrap();
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        (output.status.code(), report["checks"]["lint::elf"].clone())
    };
    let (code, right) = run(&p.dir("right"));
    assert_eq!(code, Some(0), "{right:#}");
    assert_eq!(right["verdict"], "pass");
    assert_eq!(right["facts"]["compat_dir"], COMPAT);
    let (code, wrong) = run(&p.dir("wrong"));
    assert_eq!(code, Some(101), "{wrong:#}");
    assert!(
        wrong["message"]
            .as_str()
            .unwrap()
            .contains("1 finding(s); first: "),
        "{wrong:#}"
    );

    let listed = Command::new(RUNNER)
        .args(["--no-manifest", "--list", "--lint", "/nonexistent"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&listed.stdout).contains("lint::elf: test"));
    let listed = Command::new(RUNNER)
        .args(["--no-manifest", "--list"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&listed.stdout).contains("lint::elf"));
}

/// Every CUDA runtime of a package is listed, real ones included: shared libraries named as
/// Nixpkgs names them, and a static copy of NVIDIA's real libcudart_static.a linked into a
/// program here; two exact versions one process loads (the program, with the 11.8 runtime in
/// its DT_NEEDED) are flagged as mixed.
#[test]
fn lint_lists_every_cuda_runtime_static_copies_included_and_flags_mixed_versions() {
    use cuda_sandbox_testkit::real_nvidia::{Cudart, RealNvidia};
    let Some(real) = RealNvidia::find("lint_lists_every_cuda_runtime") else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let lib = temp.path().join("pkg/lib");
    let bin = temp.path().join("pkg/bin");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(real.cudart(Cudart::V12_9), lib.join("libcudart.so.12.9.79")).unwrap();
    std::fs::copy(real.cudart(Cudart::V11_8), lib.join("libcudart.so.11.8.89")).unwrap();
    let source = temp.path().join("app.c");
    std::fs::write(
        &source,
        "extern int cudaGetDriverEntryPoint(const char*, void**, unsigned long long, int*);\n\
         int main(void) { void *p; int s; return cudaGetDriverEntryPoint(\"cuInit\", &p, 0, &s); }\n",
    )
    .unwrap();
    let archive = real.cudart_dir(Cudart::V12_9).join("libcudart_static.a");
    let app = bin.join("app");
    cc(&[
        "-o",
        app.to_str().unwrap(),
        source.to_str().unwrap(),
        archive.to_str().unwrap(),
        "-lpthread",
        "-ldl",
        "-lrt",
        "-lstdc++",
        // The 11.8 runtime too, by its soname through $ORIGIN/../lib: one process, two runtimes.
        "-Wl,--no-as-needed,--enable-new-dtags,-rpath,$ORIGIN/../lib",
        lib.join("libcudart.so.11.8.89").to_str().unwrap(),
    ]);
    std::os::unix::fs::symlink("libcudart.so.11.8.89", lib.join("libcudart.so.11.0")).unwrap();
    let out = Command::new(RUNNER)
        .args(["lint", "--no-manifest", "--json"])
        .arg(temp.path().join("pkg"))
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    let runtimes = report["cuda_runtimes"].as_array().unwrap();
    let found: Vec<(String, String, String)> = runtimes
        .iter()
        .map(|r| {
            (
                Path::new(r["file"].as_str().unwrap())
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
                r["form"].as_str().unwrap().to_owned(),
                r["version"].as_str().unwrap_or("unknown").to_owned(),
            )
        })
        .collect();
    assert!(
        found.contains(&("app".into(), "static-copy".into(), "12.9".into())),
        "{found:?}"
    );
    assert!(
        found.contains(&(
            "libcudart.so.12.9.79".into(),
            "shared".into(),
            "12.9".into()
        )),
        "{found:?}"
    );
    assert!(
        // Listed once, by the first path the walk reaches it by (its soname link), with the
        // version its code holds.
        found.contains(&("libcudart.so.11.0".into(), "shared".into(), "11.8".into())),
        "{found:?}"
    );
    let mixed: Vec<&serde_json::Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "mixed-cuda-runtimes")
        .collect();
    assert_eq!(mixed.len(), 1, "{report}");
    let message = mixed[0]["message"].as_str().unwrap();
    assert!(message.contains("11.8 and 12.9"), "{message}");
    // The program that loads both is named; the 12.9 shared runtime nothing loads is not.
    assert_eq!(mixed[0]["file"].as_str().unwrap(), app.to_str().unwrap());
    assert!(!message.contains("libcudart.so.12.9.79"), "{message}");
    assert!(!out.status.success());
}

/// Issue 34: `lint DIR` on a directory of symlinks (symlinkJoin's, buildEnv's output) said
/// `0 file(s)` and exited 0; a relative path and a missing one were not what the user meant.
#[test]
fn lint_follows_links_within_the_paths_given_judges_each_file_once_and_names_missing_paths() {
    let p = Package::new();
    let join = p.root.join("join/lib");
    std::fs::create_dir_all(&join).unwrap();
    let target = p.root.join("nolink/lib/libnolink.so");
    std::os::unix::fs::symlink(&target, join.join("libnolink.so")).unwrap();
    std::os::unix::fs::symlink(&target, join.join("libnolink.so.1")).unwrap();
    let both = lint(&[&p.dir("join"), &p.dir("nolink")]);
    assert_eq!(both.code, 0, "{}", both.stdout);
    assert_eq!(
        both.stdout.matches("lacks the driver link").count(),
        1,
        "{}",
        both.stdout
    );
    assert!(both.stdout.contains("lint: 1 file(s)"), "{}", both.stdout);
    // Alone, the links point outside the paths given (and outside the store): not followed,
    // counted, and a path with nothing to judge cannot be judged (2), saying why.
    let alone = lint(&[&p.dir("join")]);
    assert_eq!(alone.code, CANNOT_JUDGE, "{}", alone.stdout);
    assert!(
        alone.stdout.contains(
            "holds no file to judge (nothing to judge is not a pass): 2 symlink(s) in it lead \
             out of the paths given and the Nix store, and are not followed"
        ),
        "{}",
        alone.stdout
    );
    let missing = lint(&["/does/not/exist"]);
    assert_eq!(missing.code, CANNOT_JUDGE, "{}", missing.stdout);
    assert!(
        missing.stdout.contains("/does/not/exist: cannot be judged"),
        "{}",
        missing.stdout
    );
    // A relative path is relative to the working directory.
    let output = Command::new(RUNNER)
        .args(["lint", "--no-manifest", "./nolink"])
        .current_dir(&p.root)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{out}");
    assert!(
        out.contains(&format!("{}/./nolink/lib/libnolink.so", p.root.display()))
            || out.contains(&format!("{}/nolink/lib/libnolink.so", p.root.display())),
        "{out}"
    );
}

/// Issue 49: a path given that cannot be judged exits 2 with one line on stderr saying why
/// (a missing path, an empty file, a text file, a zip that is not a wheel, a `.whl` that is not
/// a zip); inside a directory such files are counted and skipped.
#[test]
fn paths_that_cannot_be_judged_exit_2_with_one_line_and_are_counted_inside_a_directory() {
    let p = Package::new();
    let odd = p.root.join("odd");
    std::fs::create_dir_all(&odd).unwrap();
    std::fs::write(odd.join("empty"), b"").unwrap();
    std::fs::write(odd.join("notes.txt"), b"not an ELF file\n").unwrap();
    std::fs::write(odd.join("data.zip"), b"PK\x03\x04 not read\n").unwrap();
    std::fs::write(odd.join("broken.whl"), b"not a zip at all\n").unwrap();
    let cases = [
        ("missing", "cannot be judged: No such file or directory"),
        ("empty", "is empty: nothing to judge"),
        (
            "notes.txt",
            "is not an ELF file, a fat binary, an ar archive (.a) or a wheel",
        ),
        ("data.zip", "is a zip file, not a wheel (.whl): unzip it"),
        ("broken.whl", "cannot be read as a wheel (a zip file): "),
    ];
    for (name, why) in cases {
        let path = odd.join(name);
        for target in [&[][..], &["--target", "sm_90", "--driver-cuda", "12.2"][..]] {
            let output = Command::new(RUNNER)
                .args(["lint", "--no-manifest"])
                .args(target)
                .arg(&path)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(CANNOT_JUDGE), "{name}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
            assert!(
                stderr.starts_with(&format!("cuda-sandbox-check lint: {}: ", path.display()))
                    && stderr.contains(why),
                "{name}: {stderr}"
            );
        }
    }
    // In a directory, beside a libcuda user that is right, they are counted: a pass.
    std::fs::copy(
        p.root.join("right/lib/libright.so"),
        odd.join("libright.so"),
    )
    .unwrap();
    let run = lint(&["--compat-dir", COMPAT, &odd.display().to_string()]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("lint: 5 file(s), 1 ELF, 1 using libcuda"),
        "{}",
        run.stdout
    );
}

/// Issue 49: JAX's CUDA plugin wheels, read whole (no unzip): every member counted, the ELF ones
/// judged from inside the wheel, and none of them taken for a CUDA runtime (XLA's
/// cudart_stub.cc). `--target sm_90a` is judged as the 9.0 GPU and echoed as given. The CUDA 13
/// plugin cannot run on a 12.2 driver (status 4), the CUDA 12 one can (0).
#[test]
fn jax_plugin_wheels_are_read_whole_with_no_runtime_in_them_and_sm_90a_echoed() {
    let test = "jax_plugin_wheels_are_read_whole_with_no_runtime_in_them_and_sm_90a_echoed";
    let Some(real) = RealNvidia::find(test) else {
        return;
    };
    for (major, code) in [(12, 0), (13, 4)] {
        let wheel = real.jax_plugin_wheel(major);
        if !real.has(test, &wheel) {
            return;
        }
        let wheel_arg = wheel.display().to_string();
        let target = ["--target", "sm_90a", "--driver-cuda", "12.2"];
        let run = lint(&[&["--json"][..], &target, &[&wheel_arg]].concat());
        assert_eq!(run.code, code, "{}", run.stdout);
        let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(report["files"], 17, "{report:#}");
        assert_eq!(report["elf_files"], 11, "{report:#}");
        assert_eq!(report["cuda_runtimes"], serde_json::json!([]), "{report:#}");
        assert_eq!(report["libcuda_users"], serde_json::json!([]), "{report:#}");
        assert_eq!(report["targets_given"], serde_json::json!(["sm_90a"]));
        assert_eq!(report["targets"][0]["device"], "9.0");
        let linalg = format!("{wheel_arg}/jax_cuda{major}_plugin/_linalg.so");
        assert!(
            report["gpu_code"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["file"] == *linalg),
            "{report:#}"
        );
        let text = lint(&[&target[..], &[&wheel_arg]].concat());
        assert_eq!(text.code, code, "{}", text.stdout);
        assert!(!text.stdout.contains("cuda runtime:"), "{}", text.stdout);
        assert!(!text.stdout.contains("dlopens"), "{}", text.stdout);
        assert!(
            text.stdout
                .contains("cannot run on a target (--target sm_90a)"),
            "{}",
            text.stdout
        );
    }
}

/// Issue 49: `lint … | true` panicked ("failed printing to stdout: Broken pipe"). A closed
/// stdout or stderr now ends the process quietly with the status it would have had, for
/// `lint` (text and JSON) and for a check run (libtest-mimic's output).
#[test]
fn a_closed_stdout_or_stderr_ends_quietly_with_the_status_it_would_have_had() {
    let p = Package::new();
    let cases: [(&[&str], i32); 6] = [
        (
            &[
                "lint",
                "--no-manifest",
                "--compat-dir",
                COMPAT,
                &p.dir("right"),
            ],
            0,
        ),
        (
            &[
                "lint",
                "--no-manifest",
                "--json",
                "--compat-dir",
                COMPAT,
                &p.dir("right"),
            ],
            0,
        ),
        (
            &[
                "lint",
                "--no-manifest",
                "--compat-dir",
                COMPAT,
                &p.dir("wrong"),
            ],
            FINDINGS,
        ),
        (&["lint", "--no-manifest", "/does/not/exist"], CANNOT_JUDGE),
        (
            &[
                "--no-manifest",
                "--lint",
                &p.dir("plain"),
                "--exact",
                "lint::elf",
            ],
            0,
        ),
        (
            &[
                "--no-manifest",
                "--lint",
                &p.dir("wrong"),
                "--compat-dir",
                COMPAT,
                "--exact",
                "lint::elf",
            ],
            101,
        ),
    ];
    for (args, code) in cases {
        let closed_out = Command::new(RUNNER)
            .args(args)
            .stdout(cuda_sandbox_testkit::closed_pipe())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&closed_out.stderr);
        assert_eq!(closed_out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        let both = Command::new(RUNNER)
            .args(args)
            .stdout(cuda_sandbox_testkit::closed_pipe())
            .stderr(cuda_sandbox_testkit::closed_pipe())
            .status()
            .unwrap();
        assert_eq!(
            both.code(),
            Some(code),
            "{args:?}, stdout and stderr closed"
        );
    }
}

/// Issue 49: `lint --help`, the README and runner/README.md give the same exit statuses, and
/// the same account of symlinks.
#[test]
fn lint_help_and_both_readmes_agree_on_exit_statuses_and_symlinks() {
    let squeeze = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let output = Command::new(RUNNER)
        .args(["lint", "--help"])
        .output()
        .unwrap();
    let help = squeeze(&String::from_utf8_lossy(&output.stdout));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = squeeze(&std::fs::read_to_string(root.join("README.md")).unwrap());
    let runner = squeeze(&std::fs::read_to_string(root.join("runner/README.md")).unwrap());
    let statuses = [
        (0, "it runs on every target"),
        (1, "it runs, with findings"),
        (2, "bad usage, or a path given that cannot be judged"),
        (3, "the rules cannot judge"),
        (4, "a file cannot run on a target"),
    ];
    for (code, meaning) in statuses {
        assert!(
            help.contains(&format!("{code} {meaning}")),
            "{code}: {help}"
        );
        for (name, doc) in [("README.md", &readme), ("runner/README.md", &runner)] {
            assert!(
                doc.contains(&format!("`{code}` {meaning}")),
                "{name}: {code}"
            );
        }
    }
    for doc in [&help, &readme, &runner] {
        assert!(doc.contains("wins over"), "{doc}");
    }
    // Symlinks: a path given is followed; inside, links into the store or within the paths
    // given are; others are counted, not followed.
    assert!(
        help.contains("A path given is followed wherever it points")
            && help.contains("others are counted, not followed"),
        "{help}"
    );
    for doc in [&readme, &runner] {
        assert!(
            doc.contains("a path given is followed wherever it points")
                || doc.contains("A path given is followed wherever it points.")
        );
        assert!(doc.contains("not followed"));
    }
}
