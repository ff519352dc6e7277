//! The fake libcuda's own contract, called directly: anything but the saxpy PTX is refused
//! with 218 and a JIT log, and versioned lookup answers as the real driver does (statuses for
//! unknown symbols and too-low versions, the newest variant above the driver's version).

mod common;

use std::ffi::{c_char, c_int, c_uint, c_void};

use common::FakeDriver;
use fake_driver::Sidecar;
use libloading::Library;

type Init = unsafe extern "C" fn(c_uint) -> c_int;
type Retain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
type SetCurrent = unsafe extern "C" fn(*mut c_void) -> c_int;
type LoadEx = unsafe extern "C" fn(
    *mut *mut c_void,
    *const c_void,
    c_uint,
    *mut c_int,
    *mut *mut c_void,
) -> c_int;
type GetProc =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;

#[test]
fn other_ptx_is_refused_with_a_jit_log_and_unknown_symbols_with_500() {
    let driver = FakeDriver::driver(&Sidecar::default());
    // SAFETY: the fake's exports have these cuda.h signatures; pointers are to live locals.
    unsafe {
        let lib = Library::new(driver.dir.join("libcuda.so.1")).unwrap();
        assert_eq!(lib.get::<Init>(b"cuInit\0").unwrap()(0), 0);
        let mut context = std::ptr::null_mut();
        assert_eq!(
            lib.get::<Retain>(b"cuDevicePrimaryCtxRetain\0").unwrap()(&mut context, 0),
            0
        );
        assert_eq!(
            lib.get::<SetCurrent>(b"cuCtxSetCurrent\0").unwrap()(context),
            0
        );

        let ptx =
            c".version 6.0\n.target sm_50\n.address_size 64\n.visible .entry daxpy()\n{ ret; }\n";
        let mut log = vec![0u8; 1024];
        let mut options = [5, 6];
        let mut values = [log.as_mut_ptr().cast::<c_void>(), log.len() as *mut c_void];
        let mut module = std::ptr::null_mut();
        let code = lib.get::<LoadEx>(b"cuModuleLoadDataEx\0").unwrap()(
            &mut module,
            ptx.as_ptr().cast(),
            2,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        );
        assert_eq!(code, 218);
        let written = values[1] as usize;
        let text = String::from_utf8_lossy(&log[..written - 1]);
        assert!(text.contains("only the saxpy kernel"), "{text}");

        let get = lib.get::<GetProc>(b"cuGetProcAddress_v2\0").unwrap();
        let mut pointer = std::ptr::null_mut();
        let mut status = -1;
        assert_eq!(
            get(
                c"cuNoSuchThing".as_ptr(),
                &mut pointer,
                12020,
                0,
                &mut status
            ),
            0,
            "the real _v2 answers an unknown symbol with CUDA_SUCCESS and a status"
        );
        assert_eq!(status, 1, "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND");
        assert!(pointer.is_null());
        assert_eq!(
            get(
                c"cuLaunchKernel".as_ptr(),
                &mut pointer,
                3020,
                0,
                &mut status
            ),
            0
        );
        assert_eq!(status, 2, "CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT");
        // Above the driver's own version (12.2) the real driver answers with its newest
        // variant instead of refusing.
        assert_eq!(
            get(c"cuMemAlloc".as_ptr(), &mut pointer, 12030, 0, &mut status),
            0
        );
        assert_eq!(status, 0);
        assert_eq!(
            pointer,
            *lib.get::<*mut c_void>(b"cuMemAlloc_v2\0").unwrap()
        );
    }
}

#[test]
fn a_missing_sidecar_makes_every_call_fail_loudly() {
    let driver = FakeDriver::driver(&Sidecar::default());
    std::fs::remove_file(driver.dir.join(fake_driver::SIDECAR_NAME)).unwrap();
    // SAFETY: cuInit has this signature.
    unsafe {
        let lib = Library::new(driver.dir.join("libcuda.so.1")).unwrap();
        assert_eq!(lib.get::<Init>(b"cuInit\0").unwrap()(0), 999);
    }
}
