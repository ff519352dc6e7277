//! The stub-libcuda fingerprint (`elfkit::stub`) held to the real files: NVIDIA's stub
//! libcuda of two CUDA releases (Debian's `nvidia-cuda-dev` 11.8 and 12.4) is recognised, and
//! calling its entry points gives 34 as the fingerprint says; the real drivers (Debian's 535
//! and 470 libcuda) and a look-alike built here are not. Needs the real NVIDIA files
//! (scripts/nvidia-userspace); under CI=true their absence fails the tests.

use std::ffi::{c_int, c_uint, CString};
use std::path::Path;
use std::process::Command;

use cuda_sandbox_elfkit::stub::{stub_libcuda, StubLibcuda};
use cuda_sandbox_testkit::real_nvidia::{Branch, RealNvidia};

fn fingerprint(path: &Path) -> Option<StubLibcuda> {
    stub_libcuda(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// What `cuInit(0)` and `cuDriverGetVersion(&v)` return when the library at `path` is loaded
/// with `dlopen` (its own copy: `RTLD_LOCAL`), and the version left in `v`.
fn call_entry_points(path: &Path) -> (c_int, c_int, c_int) {
    let name = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: the file is NVIDIA's stub, which has no constructors and no dependencies; each
    // symbol is looked up by the name of a C function of the driver API and called with the
    // signature `cuda.h` gives it (`CUresult cuInit(unsigned)`, `CUresult
    // cuDriverGetVersion(int *)`).
    unsafe {
        let handle = libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!handle.is_null(), "dlopen {}", path.display());
        let init = libc::dlsym(handle, c"cuInit".as_ptr());
        let version = libc::dlsym(handle, c"cuDriverGetVersion".as_ptr());
        assert!(!init.is_null() && !version.is_null());
        let init: extern "C" fn(c_uint) -> c_int = std::mem::transmute(init);
        let version: extern "C" fn(*mut c_int) -> c_int = std::mem::transmute(version);
        let mut v = -7;
        let result = (init(0), version(&mut v), v);
        libc::dlclose(handle);
        result
    }
}

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
