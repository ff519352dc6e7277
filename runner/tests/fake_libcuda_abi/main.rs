//! The fake libcuda's own contract, called directly: anything but the saxpy PTX is refused
//! with 218 and a JIT log, and versioned lookup answers as the real driver does (statuses for
//! unknown symbols and too-low versions, the newest variant above the driver's version).

#[path = "../common/mod.rs"]
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

// The tests, one module per tier (docs/testing.md).
mod pure;
