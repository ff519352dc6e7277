//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn a_package_without_its_gpus_architecture_fails_with_209_or_222_and_the_fix() {
    let Some(real) = RealNvidia::find(
        "a_package_without_its_gpus_architecture_fails_with_209_or_222_and_the_fix",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (ampere, turing) = packages(&real, dir.path());

    // Its own SASS within the major: sm_80 runs on an 8.6 GPU with a 535 driver.
    let ok = lint(&["--target", "sm_86", "--driver-cuda", "12.2"], &[&ampere]);
    assert_eq!(ok.code, 0, "{}", ok.out);
    assert!(
        ok.out.contains("runs on sm_86 (driver CUDA 12.2) by SASS"),
        "{}",
        ok.out
    );

    // Hopper with a 535 driver: only the PTX fits, and ISA 8.8 needs CUDA 12.9.
    let ptx = lint(&["--target", "sm_90", "--driver-cuda", "12.2"], &[&ampere]);
    ptx.says(
        101,
        &[
            "cannot run on sm_90 (driver CUDA 12.2)",
            "ISA 8.8, which needs a driver of CUDA 12.9 (R575)",
            "JITs PTX up to ISA 8.2",
            "CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222",
            "cudaCapabilities = [ \"9.0\" ]",
            "libampere.so",
        ],
    );

    // With a 12.9 driver the same PTX JITs: it runs, and the first launch compiles.
    let jit = lint(&["--target", "9.0", "--driver-cuda", "12.9"], &[&ampere]);
    assert_eq!(jit.code, 0, "{}", jit.out);
    assert!(jit.out.contains("by JIT"), "{}", jit.out);

    // SASS for Turing alone, no PTX: no kernel image for Ampere.
    let none = lint(&["--target", "sm_80", "--driver-cuda", "13.0"], &[&turing]);
    none.says(
        101,
        &[
            "no kernel image for a 8.0 GPU",
            "CUDA_ERROR_NO_BINARY_FOR_GPU, 209",
            "SASS sm_80, or PTX for compute_80 or older",
            "carries SASS sm_75",
        ],
    );

    // Without a target the GPU code is listed, not judged.
    let listed = lint(&[], &[&ampere, &turing]);
    assert_eq!(listed.code, 0, "{}", listed.out);
    assert!(
        listed
            .out
            .contains("1 module(s): SASS sm_80, PTX compute_80 (ISA 8.8)"),
        "{}",
        listed.out
    );
    assert!(!listed.out.contains("runs on"), "{}", listed.out);

    // --target without a driver version (and no manifest) is bad usage, saying what to add.
    let usage = lint(&["--target", "sm_90"], &[&ampere]);
    assert_eq!(usage.code, 2, "{}", usage.out);
    assert!(usage.out.contains("--driver-cuda"), "{}", usage.out);
}

#[test]
fn lint_json_names_every_entry_and_the_verdict_for_the_target() {
    let Some(real) = RealNvidia::find("lint_json_names_every_entry_and_the_verdict_for_the_target")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (ampere, _) = packages(&real, dir.path());
    let out = lint(
        &["--json", "--target", "sm_90", "--driver-cuda", "12.2"],
        &[&ampere],
    );
    assert_eq!(out.code, 101, "{}", out.out);
    let json: serde_json::Value = serde_json::from_str(&out.out).unwrap();
    let file = &json["gpu_code"][0];
    let entries = &file["modules"][0]["entries"];
    assert_eq!(entries[0]["kind"], "sass");
    assert_eq!(entries[0]["arch"], "sm_80");
    assert_eq!(entries[1]["kind"], "ptx");
    assert_eq!(entries[1]["arch"], "sm_80");
    assert_eq!(entries[1]["ptx_isa"], "8.8");
    let verdict = &file["verdicts"][0];
    assert_eq!(verdict["verdict"], "fails");
    assert_eq!(verdict["rule"], "ptx-too-new");
    assert_eq!(verdict["target"]["device"], "9.0");
    assert_eq!(
        verdict["judgement"]["modules"][0]["load"],
        "unsupported-ptx"
    );
    assert_eq!(json["findings"][0]["kind"], "ptx-too-new");
    // Issue 34: the schema and what was judged are echoed, versions are "12.9", modules
    // are numbered from 1 as the text does.
    assert_eq!(json["schema"], 3);
    assert_eq!(json["targets"][0]["device"], "9.0");
    assert_eq!(json["targets"][0]["driver"]["cuda"], "12.2");
    let module = &verdict["judgement"]["modules"][0];
    assert_eq!(module["module"], 1);
    assert_eq!(module["needs"], "12.9");
    // The text: one line per file first, with the answer; the closing line restates it.
    let text = lint(&["--target", "sm_90", "--driver-cuda", "12.2"], &[&ampere]);
    let first = text.out.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("libampere.so: cannot run on sm_90 (driver CUDA 12.2): module 1 of 1"),
        "{}",
        text.out
    );
    let last = text.out.lines().last().unwrap_or_default();
    assert!(
        last.ends_with("; 1 file(s) cannot run on a target"),
        "{}",
        text.out
    );
}

#[test]
fn curand_runs_on_every_gpu_it_supports_and_not_on_older_ones() {
    let Some(real) = RealNvidia::find("curand_runs_on_every_gpu_it_supports_and_not_on_older_ones")
    else {
        return;
    };
    // cuRAND 10.4 (CUDA 13.x, PTX ISA 9.4) carries SASS sm_75 to sm_120 and PTX from
    // compute_75: every GPU from Turing on runs it with a driver of its own CUDA version.
    let curand = real.curand();
    let every = "7.5,8.0,8.6,8.7,8.9,9.0,10.0,10.3,11.0,12.0,12.1";
    let out = lint(&["--target", every, "--driver-cuda", "13.5"], &[&curand]);
    assert_eq!(out.code, 0, "{}", out.out);
    let per_file = out
        .out
        .lines()
        .filter(|l| l.starts_with("libcurand.so.10: runs on"));
    assert_eq!(per_file.count(), 11, "{}", out.out);
    // Volta and Pascal have no image, JIT or SASS: 209, on a 580 driver (CUDA 13.0), the last
    // branch that drives them.
    let older = lint(
        &["--target", "7.0,6.1", "--driver-cuda", "13.0"],
        &[&curand],
    );
    older.says(
        101,
        &[
            "cannot run on sm_70 (driver CUDA 13.0): module 1 of",
            "cannot run on sm_61 (driver CUDA 13.0): module 1 of",
            "CUDA_ERROR_NO_BINARY_FOR_GPU, 209",
        ],
    );
    // NVIDIA built cuRAND: the fix is a release of it for this GPU, not cudaCapabilities
    // (issue 34: a fix that only applies to what Nixpkgs compiles).
    assert!(
        older.out.contains("NVIDIA built this file"),
        "{}",
        older.out
    );
    assert!(!older.out.contains("cudaCapabilities"), "{}", older.out);
    // A newer driver does not drive them at all (NVIDIA: R580 is their last branch).
    let dropped = lint(&["--target", "7.0", "--driver-cuda", "13.1"], &[&curand]);
    dropped.says(
        101,
        &["compute capability 7.0 (Volta) is driven up to CUDA 13.0 (R580)"],
    );
}

/// Rule: a module with no kernel (no `STO_CUDA_ENTRY` symbol) and no device data cannot be
/// launched or read, so it is listed, not judged (NVIDIA's cuFFT 11.4 ships one: an sm_52
/// cubin with `.nv.callgraph` and `.nv.rel.action` only). One with `__device__` data must load
/// (host code may `cudaMemcpyToSymbol` it), so it is judged.
#[test]
fn modules_nothing_can_launch_or_read_are_listed_not_judged() {
    let Some(real) = RealNvidia::find("modules_nothing_can_launch_or_read_are_listed_not_judged")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let empty = kernelless_library(&real, dir.path(), "libempty", false);
    let data = kernelless_library(&real, dir.path(), "libdata", true);
    let out = lint(&["--target", "sm_90", "--driver-cuda", "12.9"], &[&empty]);
    out.says(
        0,
        &[
            "nothing the driver loads on sm_90 (driver CUDA 12.9)",
            "1 module(s) with no kernel and no device data",
        ],
    );
    let out = lint(&["--target", "sm_90", "--driver-cuda", "12.9"], &[&data]);
    out.says(
        101,
        &[
            "cannot run on sm_90",
            "CUDA_ERROR_NO_BINARY_FOR_GPU, 209",
            "SASS sm_52",
        ],
    );
    // On its own GPU the module loads (by SASS): it is judged, and runs.
    let out = lint(&["--target", "sm_52", "--driver-cuda", "12.9"], &[&empty]);
    out.says(0, &["runs on sm_52 (driver CUDA 12.9) by SASS"]);
}

/// Rule: `__nv_relfatbin` in a linked shared object is input for device linking (the driver is
/// handed `.nv_fatbin` alone, through the registration wrappers): listed, never judged. An
/// object or archive is input for a link, judged where it is linked.
#[test]
fn link_input_is_listed_and_never_judged_as_loadable() {
    let Some(real) = RealNvidia::find("link_input_is_listed_and_never_judged_as_loadable") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fixtures = cuda_sandbox_testkit::fatbin_fixtures::build(&real, dir.path());
    let path = |name: &str| {
        fixtures
            .iter()
            .find(|f| f.path.file_name().unwrap() == name)
            .unwrap()
            .path
            .clone()
    };
    let mixed = lint(
        &["--target", "sm_90", "--driver-cuda", "13.5"],
        &[&path("exec-and-rel.so")],
    );
    mixed.says(
        0,
        &[
            "runs on sm_90 (driver CUDA 13.5)",
            "1 relocatable module(s) in __nv_relfatbin, input for device linking, which the \
             driver never loads",
        ],
    );
    // An archive's members are link input too (a_static_archive_is_listed_per_member...).
    let object = lint(
        &["--target", "sm_86", "--driver-cuda", "12.2"],
        &[&path("rel1.o")],
    );
    object.says(
        0,
        &["for the link, not loaded as it is", "0 file(s) cannot run"],
    );
    assert_eq!(
        object.out.matches("cannot run").count(),
        1,
        "{}",
        object.out
    );
}

/// Rule: an image the driver would load that is Zstandard-compressed needs a libcuda of R550
/// (CUDA 12.4) or newer (rapids-cmake's `rapids_cuda_enable_fatbin_compression`: "CUDA 12
/// Requires Driver Version: 550.54.14+"; NVIDIA states none). fatbinary 13.5 compresses PTX
/// with Zstandard by default.
#[test]
fn an_image_the_driver_cannot_unpack_fails_naming_the_fix() {
    let Some(real) = RealNvidia::find("an_image_the_driver_cannot_unpack_fails_naming_the_fix")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ptx_only = gpu_library_of(
        &real,
        "12.9",
        dir.path(),
        "libptx",
        &[],
        &[("compute_80", "8.0")],
        &[],
    );
    let old = lint(
        &["--target", "sm_90", "--driver-cuda", "12.2"],
        &[&ptx_only],
    );
    old.says(
        101,
        &[
            "cannot run on sm_90 (driver CUDA 12.2)",
            "is Zstandard-compressed, which libcuda unpacks from CUDA 12.4 (R550, 550.54.14) on",
            "--compress-mode=speed",
        ],
    );
    let json = lint(
        &["--json", "--target", "sm_90", "--driver-cuda", "12.2"],
        &[&ptx_only],
    );
    let v: serde_json::Value = serde_json::from_str(&json.out).unwrap();
    assert_eq!(
        v["findings"][0]["kind"], "compression-too-new",
        "{}",
        json.out
    );
    let new = lint(
        &["--target", "sm_90", "--driver-cuda", "12.4"],
        &[&ptx_only],
    );
    new.says(0, &["runs on sm_90 (driver CUDA 12.4) by JIT"]);
}

/// A fleet: `--target` takes several capabilities and each gets its verdict; a GPU the rules
/// do not know is "cannot be judged", with an exit status of its own (3), distinct from
/// "cannot run" (101).
#[test]
fn a_fleet_gets_a_verdict_per_target_and_unknown_has_its_own_exit_status() {
    let Some(real) =
        RealNvidia::find("a_fleet_gets_a_verdict_per_target_and_unknown_has_its_own_exit_status")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (ampere, _) = packages(&real, dir.path());
    let both = lint(
        &[
            "--json",
            "--target",
            "sm_80,sm_86",
            "--target",
            "9.0",
            "--driver-cuda",
            "12.9",
        ],
        &[&ampere],
    );
    assert_eq!(both.code, 0, "{}", both.out);
    let v: serde_json::Value = serde_json::from_str(&both.out).unwrap();
    let verdicts = v["gpu_code"][0]["verdicts"].as_array().unwrap();
    let got: Vec<(&str, &str)> = verdicts
        .iter()
        .map(|v| {
            (
                v["target"]["device"].as_str().unwrap(),
                v["rule"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [("8.0", "sass"), ("8.6", "sass"), ("9.0", "jit")]);
    let unknown = lint(&["--target", "9.5", "--driver-cuda", "12.9"], &[&ampere]);
    unknown.says(
        3,
        &[
            "cannot be judged for sm_95",
            "not one the rules' architecture table knows",
        ],
    );
    let mixed = lint(
        &["--target", "9.5,9.0", "--driver-cuda", "12.2"],
        &[&ampere],
    );
    mixed.says(101, &["cannot be judged for sm_95", "cannot run on sm_90"]);
}

/// Issue 34: `--driver-cuda 535` was read as CUDA 535.0 and passed, `99.9` judged "runs", and
/// messages named CUDA 12.7, which was never released. Driver versions are taken as users
/// write them: a release, or a driver's version with `--driver`.
#[test]
fn driver_versions_are_taken_as_users_write_them() {
    let Some(real) = RealNvidia::find("driver_versions_are_taken_as_users_write_them") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (ampere, _) = packages(&real, dir.path());
    let branch = lint(&["--target", "sm_80", "--driver-cuda", "535"], &[&ampere]);
    branch.says(2, &["535 is a driver branch: CUDA 12.2", "--driver 535"]);
    let gap = lint(&["--target", "sm_80", "--driver-cuda", "12.7"], &[&ampere]);
    gap.says(
        2,
        &["CUDA 12.7 was never released (nearest releases: 12.6 and 12.8)"],
    );
    // The driver's own version: its branch's CUDA (12.2), so ISA 8.8 PTX cannot JIT.
    let driver = lint(&["--target", "sm_90", "--driver", "535.104.05"], &[&ampere]);
    driver.says(101, &["cannot run on sm_90 (driver CUDA 12.2)", "ISA 8.8"]);
    // Above the newest release the rules know: cannot be judged, never "runs".
    let future = lint(&["--target", "sm_80", "--driver-cuda", "99.9"], &[&ampere]);
    future.says(
        3,
        &["cannot be judged for sm_80 (driver CUDA 99.9): the driver is newer than the newest CUDA release the rules know (13.5)"],
    );
    assert!(!future.out.contains("runs on"), "{}", future.out);
    // ISA 8.6 is CUDA 12.7 in NVIDIA's ISA table; the message names the release users can
    // install, 12.8, and the driver-only branch that reports 12.7.
    let isa86 = gpu_library_of(
        &real,
        "12.9",
        dir.path(),
        "libisa86",
        &[],
        &[("compute_80", "8.6")],
        &[],
    );
    let old = lint(&["--target", "sm_90", "--driver-cuda", "12.6"], &[&isa86]);
    old.says(
        101,
        &["ISA 8.6, which needs a driver of CUDA 12.8 (R570; or an R565 driver, which reports CUDA 12.7)"],
    );
    assert!(!old.out.contains("needs a CUDA 12.7"), "{}", old.out);
}

/// Issue 34: `lint FILE.a` lists the GPU code of each member, as NVIDIA's cuobjdump 13.5 lists
/// it (`--all-fatbin --list-elf --list-ptx`), on NVIDIA's `libcudadevrt.a` of CUDA 12.9 and
/// 13.0 and on an archive of two members built here; the text names each member, and an
/// archive is link input, never judged as loadable.
#[test]
fn a_static_archive_is_listed_per_member_as_cuobjdump_lists_it() {
    use cuda_sandbox_testkit::fatbin_fixtures::{cuobjdump_list, ListedKind};
    use cuda_sandbox_testkit::real_nvidia::Cudart;
    let Some(real) =
        RealNvidia::find("a_static_archive_is_listed_per_member_as_cuobjdump_lists_it")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fixtures = cuda_sandbox_testkit::fatbin_fixtures::build(&real, dir.path());
    let librel = fixtures
        .iter()
        .find(|f| f.path.file_name().unwrap() == "librel.a")
        .unwrap()
        .path
        .clone();
    let archives = [
        real.cudadevrt(Cudart::V12_9),
        real.cudadevrt(Cudart::V13_0),
        librel.clone(),
    ];
    for archive in &archives {
        let theirs: Vec<String> = cuobjdump_list(&real, archive)
            .into_iter()
            .map(|l| {
                let kind = match l.kind {
                    ListedKind::Elf => "elf",
                    ListedKind::Ptx => "ptx",
                };
                format!("{} {kind} {}", l.member.as_deref().unwrap_or("-"), l.arch)
            })
            .collect();
        assert!(
            !theirs.is_empty(),
            "cuobjdump lists nothing in {}",
            archive.display()
        );
        assert_eq!(lint_listing(archive), theirs, "{}", archive.display());
    }
    let devrt = lint(&[], &[&archives[0]]);
    devrt.says(
        101,
        &[
            "libcudadevrt.a: 1 module(s): 1 member(s): cuda_device_runtime.o [SASS sm_50",
            "static CUDA library in the package",
        ],
    );
    let rel = lint(&["--target", "sm_90", "--driver-cuda", "12.2"], &[&librel]);
    rel.says(
        0,
        &[
            "2 member(s): rel1.o [",
            "], rel2.o [",
            "librel.a: for the link, not loaded as it is",
            "0 file(s) cannot run",
        ],
    );
}

/// `lint --zluda`: ZLUDA compiles PTX and loads no SASS, so a library of SASS alone cannot
/// run on it, whatever GPU it was built for, while one with PTX runs by compiling it, at
/// ZLUDA's reported capability (8.8) or the one `--target` gives (`ZLUDA_CC`); cuRAND, which
/// carries PTX from compute_75, runs too.
#[test]
fn zluda_runs_ptx_and_no_sass() {
    let Some(real) = RealNvidia::find("zluda_runs_ptx_and_no_sass") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (ampere, turing) = packages(&real, dir.path());
    // SASS for the very capability ZLUDA reports (ptxas 13.x knows sm_88) runs no better.
    let sass_for_zludas_own = cuda_sandbox_testkit::gpu_library::gpu_library(
        &real,
        dir.path(),
        "libsm88",
        &["sm_88"],
        &[],
        &[],
    );
    let out = lint(&["--zluda"], &[&turing, &sass_for_zludas_own]);
    out.says(
        101,
        &[
            "libturing.so: cannot run on ZLUDA on AMD (reporting sm_88): module 1 of 1",
            "libsm88.so: cannot run on ZLUDA on AMD (reporting sm_88)",
            "SASS only, and ZLUDA loads no SASS",
        ],
    );
    let out = lint(&["--zluda", "--target", "8.5"], &[&ampere]);
    out.says(
        0,
        &["libampere.so: runs on ZLUDA on AMD (reporting sm_85) by compiling its PTX"],
    );
    let json = lint(&["--zluda", "--json"], &[&ampere, &turing]);
    let v: serde_json::Value = serde_json::from_str(&json.out).unwrap();
    assert_eq!(
        v["gpu_code"][0]["verdicts"][0]["verdict"], "runs-by-jit",
        "{}",
        json.out
    );
    assert_eq!(v["gpu_code"][0]["verdicts"][0]["rule"], "jit");
    assert_eq!(v["gpu_code"][0]["verdicts"][0]["target"]["device"], "8.8");
    assert_eq!(v["gpu_code"][1]["verdicts"][0]["verdict"], "fails");
    assert_eq!(
        v["gpu_code"][1]["verdicts"][0]["rule"],
        "sass-only-on-zluda"
    );
    assert_eq!(v["findings"][0]["kind"], "no-kernel-image");
    let curand = real.curand();
    lint(&["--zluda"], &[&curand]).says(0, &["libcurand.so.10: runs on ZLUDA on AMD"]);
}
