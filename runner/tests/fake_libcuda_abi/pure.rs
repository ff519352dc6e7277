//! The pure tier of these tests (docs/testing.md).

use super::*;

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
