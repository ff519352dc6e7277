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

// The tests, one module per tier (docs/testing.md).
mod pure;
