//! The pure tier of these tests (docs/testing.md).

use super::*;

#[test]
fn nvidias_stub_libcuda_of_each_release_is_recognised_and_its_entry_points_return_34() {
    let test = "nvidias_stub_libcuda_of_each_release_is_recognised_and_its_entry_points_return_34";
    let Some(real) = RealNvidia::find(test) else {
        return;
    };
    // Counted with `nm -D --defined-only`: 553 and 633 functions, less the 8 cudbg* ones.
    for (release, entry_points) in [("11.8", 545), ("12.4", 625)] {
        let stub = real.stub_libcuda(release);
        if !real.has(test, &stub) {
            return;
        }
        assert_eq!(
            fingerprint(&stub),
            Some(StubLibcuda { entry_points }),
            "{}",
            stub.display()
        );
        // What the fingerprint claims, asked of the file itself: 34, the version untouched.
        assert_eq!(call_entry_points(&stub), (34, 34, -7), "{}", stub.display());
    }
    assert_eq!(
        RealNvidia::STUB_LIBCUDA_RELEASES,
        ["11.8", "12.4"],
        "each release held here"
    );
}

#[test]
fn the_real_drivers_libcuda_is_no_stub() {
    let Some(real) = RealNvidia::find("the_real_drivers_libcuda_is_no_stub") else {
        return;
    };
    for branch in Branch::ALL {
        let libcuda = real.libcuda_file(branch);
        assert_eq!(fingerprint(&libcuda), None, "{}", libcuda.display());
    }
}

#[test]
fn a_look_alike_that_needs_libc_or_lacks_entry_points_is_no_stub() {
    let temp = tempfile::tempdir().unwrap();
    let build = |name: &str, source: &str, flags: &[&str]| {
        let c = temp.path().join(format!("{name}.c"));
        std::fs::write(&c, source).unwrap();
        let out = temp.path().join(format!("{name}.so"));
        let status = Command::new("cc")
            .args(["-O2", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o"])
            .arg(&out)
            .arg(&c)
            .args(flags)
            .status()
            .expect("run cc (install gcc)");
        assert!(status.success());
        out
    };
    let every = "int cuInit(unsigned f) { return 34; }\n\
                 int cuDriverGetVersion(int *v) { return 34; }\n\
                 int cuDeviceGet(int *d, int o) { return 34; }\n\
                 int cuCtxCreate_v2(void **c, unsigned f, int d) { return 34; }\n\
                 int cuModuleLoadData(void **m, const void *i) { return 34; }\n\
                 int cuLaunchKernel(void) { return 34; }\n";
    // Built as NVIDIA builds the stub (no libc): recognised, which shows the rule can match.
    let alike = build("alike", every, &["-nostdlib"]);
    assert_eq!(fingerprint(&alike), Some(StubLibcuda { entry_points: 6 }));
    // Needing libc, as every real libcuda and the fixtures' fake do: not a stub.
    let libc = build("libc", every, &["-Wl,--no-as-needed", "-lc"]);
    assert_eq!(fingerprint(&libc), None);
    // One entry point that does something else: not a stub.
    let other = every.replace(
        "int *v) { return 34; }",
        "int *v) { *v = 12020; return 0; }",
    );
    assert_eq!(fingerprint(&build("other", &other, &["-nostdlib"])), None);
    // Only cuInit: not a stub (the driver API's other required entry points are missing).
    let init = "int cuInit(unsigned f) { return 34; }\n";
    assert_eq!(fingerprint(&build("init", init, &["-nostdlib"])), None);
}
