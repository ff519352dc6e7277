//! `kernel::saxpy`: JIT-compiles the saxpy PTX with `cuModuleLoadDataEx` (capturing the
//! error log), runs it on n elements, verifies every one, reports JIT time, kernel time
//! and effective bandwidth (12·n bytes / kernel time).

use std::ffi::{c_int, c_uint, c_void, CString};
use std::time::Instant;

use crate::checks::Outcome;
use crate::cuda::driver::{CuDevicePtr, Driver, Handle};
use crate::cuda::result::CuError;
use crate::facts;
use crate::session::Session;

/// The kernel, as the driver JIT-compiles it.
pub const SAXPY_PTX: &str = include_str!("saxpy.ptx");

/// CU_JIT_ERROR_LOG_BUFFER
const JIT_ERROR_LOG_BUFFER: c_int = 5;
/// CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
const JIT_ERROR_LOG_BUFFER_SIZE_BYTES: c_int = 6;
/// Threads per block.
const BLOCK: u32 = 256;
/// The scale factor `a`.
const A: f32 = 2.0;

/// Inputs chosen so that `a*x + y` is exact in f32: small integers.
fn x_at(i: usize) -> f32 {
    (i % 1024) as f32
}
const Y0: f32 = 1.0;

/// A driver call that failed, with the JIT log when there is one.
struct Failure {
    message: String,
    log: Option<String>,
}

impl From<CuError> for Failure {
    fn from(error: CuError) -> Failure {
        Failure {
            message: error.to_string(),
            log: None,
        }
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure { message, log: None }
    }
}

/// What a successful run measured.
struct Measured {
    jit_ms: f64,
    kernel_ms: f64,
    mismatches: usize,
    first_mismatch: Option<(usize, f32, f32)>,
}

/// Releases what it holds when dropped, so every early return cleans up.
struct Resources<'a> {
    driver: &'a Driver,
    device: c_int,
    retained: bool,
    module: Handle,
    buffers: Vec<CuDevicePtr>,
    events: Vec<Handle>,
}

impl Drop for Resources<'_> {
    fn drop(&mut self) {
        let api = &self.driver.api;
        // SAFETY: every handle was created by this driver and is released once.
        unsafe {
            // Errors while cleaning up change nothing about the verdict.
            if let Some(destroy) = api.event_destroy {
                for &event in &self.events {
                    destroy(event);
                }
            }
            if let Some(free) = api.mem_free {
                for &buffer in &self.buffers {
                    free(buffer);
                }
            }
            if let (false, Some(unload)) = (self.module.is_null(), api.module_unload) {
                unload(self.module);
            }
            if self.retained {
                if let Some(release) = api.primary_ctx_release_v2.or(api.primary_ctx_release) {
                    release(self.device);
                }
            }
        }
    }
}

fn run(driver: &Driver, n: u32) -> Result<Measured, Failure> {
    let api = &driver.api;
    let device_get = driver.need(api.device_get, "cuDeviceGet")?;
    let retain = driver.need(api.primary_ctx_retain, "cuDevicePrimaryCtxRetain")?;
    let set_current = driver.need(api.ctx_set_current, "cuCtxSetCurrent")?;
    let load = driver.need(api.module_load_data_ex, "cuModuleLoadDataEx")?;
    let get_function = driver.need(api.module_get_function, "cuModuleGetFunction")?;
    let alloc = driver.need(api.mem_alloc, "cuMemAlloc_v2")?;
    let htod = driver.need(api.memcpy_htod, "cuMemcpyHtoD_v2")?;
    let dtoh = driver.need(api.memcpy_dtoh, "cuMemcpyDtoH_v2")?;
    let launch = driver.need(api.launch_kernel, "cuLaunchKernel")?;
    let event_create = driver.need(api.event_create, "cuEventCreate")?;
    let event_record = driver.need(api.event_record, "cuEventRecord")?;
    let event_sync = driver.need(api.event_synchronize, "cuEventSynchronize")?;
    let elapsed = driver.need(api.event_elapsed_time, "cuEventElapsedTime")?;
    let synchronize = driver.need(api.ctx_synchronize, "cuCtxSynchronize")?;

    let mut held = Resources {
        driver,
        device: 0,
        retained: false,
        module: std::ptr::null_mut(),
        buffers: Vec::new(),
        events: Vec::new(),
    };
    let count = n as usize;
    let bytes = count * std::mem::size_of::<f32>();
    let x: Vec<f32> = (0..count).map(x_at).collect();
    let mut y = vec![Y0; count];

    // SAFETY (whole block): cuda.h signatures; every pointer passed points at live memory
    // of the size the call expects; kernel arguments point at locals that outlive the launch.
    unsafe {
        CuError::check("cuDeviceGet", device_get(&mut held.device, 0))?;
        let mut context: Handle = std::ptr::null_mut();
        CuError::check(
            "cuDevicePrimaryCtxRetain",
            retain(&mut context, held.device),
        )?;
        held.retained = true;
        CuError::check("cuCtxSetCurrent", set_current(context))?;

        let ptx = CString::new(SAXPY_PTX).map_err(|e| e.to_string())?;
        let mut log = vec![0u8; 16 * 1024];
        let mut options = [JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
        let mut values = [log.as_mut_ptr().cast::<c_void>(), log.len() as *mut c_void];
        let started = Instant::now();
        let code = load(
            &mut held.module,
            ptx.as_ptr().cast(),
            options.len() as c_uint,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        );
        let jit_ms = started.elapsed().as_secs_f64() * 1e3;
        if let Err(error) = CuError::check("cuModuleLoadDataEx", code) {
            held.module = std::ptr::null_mut();
            let written = (values[1] as usize).min(log.len());
            let text = String::from_utf8_lossy(&log[..written]);
            let text = text.trim_end_matches('\0').trim();
            return Err(Failure {
                message: error.to_string(),
                log: (!text.is_empty()).then(|| format!("JIT error log:\n{text}")),
            });
        }
        let mut function: Handle = std::ptr::null_mut();
        CuError::check(
            "cuModuleGetFunction",
            get_function(&mut function, held.module, c"saxpy".as_ptr()),
        )?;

        let mut buffers = [0 as CuDevicePtr; 2];
        for buffer in &mut buffers {
            CuError::check("cuMemAlloc_v2", alloc(buffer, bytes))?;
            held.buffers.push(*buffer);
        }
        let [dx, dy] = buffers;
        CuError::check("cuMemcpyHtoD_v2", htod(dx, x.as_ptr().cast(), bytes))?;
        CuError::check("cuMemcpyHtoD_v2", htod(dy, y.as_ptr().cast(), bytes))?;

        let mut events = [std::ptr::null_mut(); 2];
        for event in &mut events {
            CuError::check("cuEventCreate", event_create(event, 0))?;
            held.events.push(*event);
        }
        let (mut arg_n, mut arg_a, mut arg_x, mut arg_y) = (n, A, dx, dy);
        let mut params: [*mut c_void; 4] = [
            std::ptr::addr_of_mut!(arg_n).cast(),
            std::ptr::addr_of_mut!(arg_a).cast(),
            std::ptr::addr_of_mut!(arg_x).cast(),
            std::ptr::addr_of_mut!(arg_y).cast(),
        ];
        let grid = n.div_ceil(BLOCK);
        let stream: Handle = std::ptr::null_mut();
        CuError::check("cuEventRecord", event_record(events[0], stream))?;
        CuError::check(
            "cuLaunchKernel",
            launch(
                function,
                grid,
                1,
                1,
                BLOCK,
                1,
                1,
                0,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            ),
        )?;
        CuError::check("cuEventRecord", event_record(events[1], stream))?;
        CuError::check("cuEventSynchronize", event_sync(events[1]))?;
        CuError::check("cuCtxSynchronize", synchronize())?;
        let mut kernel_ms = 0f32;
        CuError::check(
            "cuEventElapsedTime",
            elapsed(&mut kernel_ms, events[0], events[1]),
        )?;
        CuError::check("cuMemcpyDtoH_v2", dtoh(y.as_mut_ptr().cast(), dy, bytes))?;

        let wrong: Vec<usize> = (0..count).filter(|&i| y[i] != A * x_at(i) + Y0).collect();
        Ok(Measured {
            jit_ms,
            kernel_ms: f64::from(kernel_ms),
            mismatches: wrong.len(),
            first_mismatch: wrong.first().map(|&i| (i, y[i], A * x_at(i) + Y0)),
        })
    }
}

/// Runs `kernel::saxpy`.
pub fn saxpy(session: &Session) -> Outcome {
    let n = session.options.saxpy_elements;
    let driver = match session.initialized() {
        Ok(driver) => driver,
        Err(why) => return Outcome::fail(why, facts! { "elements" => n }),
    };
    let device = session.devices().ok().and_then(|d| d.first().cloned());
    match run(driver, n) {
        Err(failure) => {
            let outcome = Outcome::fail(
                failure.message,
                facts! { "elements" => n, "device" => device, "jit_log" => failure.log },
            );
            match failure.log {
                Some(log) => outcome.with_detail(log),
                None => outcome,
            }
        }
        Ok(measured) => {
            let moved = 12.0 * f64::from(n);
            let bandwidth =
                (measured.kernel_ms > 0.0).then(|| moved / (measured.kernel_ms / 1e3) / 1e9);
            let facts = facts! {
                "elements" => n,
                "device" => device,
                "jit_ms" => measured.jit_ms,
                "kernel_ms" => measured.kernel_ms,
                "bytes_moved" => moved,
                "bandwidth_gb_per_s" => bandwidth,
                "wrong_elements" => measured.mismatches,
            };
            if let Some((i, got, want)) = measured.first_mismatch {
                return Outcome::fail(
                    format!(
                        "saxpy computed {} wrong elements of {n} (first: y[{i}] = {got}, want {want}): \
                         the GPU or driver is faulty",
                        measured.mismatches
                    ),
                    facts,
                );
            }
            Outcome::pass(
                format!(
                    "saxpy on {n} elements verified; JIT {:.1} ms, kernel {:.3} ms, {}",
                    measured.jit_ms,
                    measured.kernel_ms,
                    bandwidth.map_or("bandwidth not measurable".to_owned(), |b| format!(
                        "{b:.1} GB/s"
                    ))
                ),
                facts,
            )
        }
    }
}
