//! Safe wrappers over the driver calls a kernel run needs: the device's primary context, a
//! module JIT-compiled from PTX (with the JIT error log), device buffers, timing events, and
//! the saxpy kernel with its typed launch. Each wrapper releases what it holds when dropped,
//! so an early return cleans up; release errors change nothing about a verdict and are ignored.

use std::ffi::{c_int, c_uint, c_void, CStr, CString};

use super::driver::{CuDevice, CuDevicePtr, Driver, DriverError, DriverFunctions, Export, Handle};
use super::result::{CuError, CUDA_ERROR_NOT_SUPPORTED};

/// The saxpy kernel (`y[i] = a * x[i] + y[i]` for `i < n`), as the driver JIT-compiles it:
/// `.version 6.0`, `.target sm_50`, parameters `(u32 n, f32 a, f32* x, f32* y)`.
pub const SAXPY_PTX: &str = include_str!("saxpy.ptx");

/// CU_JIT_ERROR_LOG_BUFFER
const JIT_ERROR_LOG_BUFFER: c_int = 5;
/// CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
const JIT_ERROR_LOG_BUFFER_SIZE_BYTES: c_int = 6;

/// Why a step of a kernel run failed.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum GpuError {
    /// A driver function is missing or failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The JIT refused the PTX (the failed `cuModuleLoadDataEx`); its error log, when it wrote
    /// one (`JIT error log:` and the log's lines).
    #[error("{0}")]
    Jit(CuError, Option<String>),
    /// A launch over more elements than a 32-bit count holds.
    #[error("saxpy takes at most 2^32 - 1 elements")]
    TooManyElements,
    /// The PTX text holds a NUL byte, so the driver cannot take it as a C string.
    #[error("the PTX holds a NUL byte at offset {0}")]
    PtxHasNul(usize),
}

impl From<CuError> for GpuError {
    fn from(error: CuError) -> GpuError {
        GpuError::Driver(DriverError::Call(error))
    }
}

impl GpuError {
    /// Whether the driver answered CUDA_ERROR_NOT_SUPPORTED: ZLUDA's answer for a function it
    /// exports but does not implement.
    pub(crate) fn not_supported(&self) -> bool {
        matches!(self, GpuError::Driver(DriverError::Call(e)) if e.code == CUDA_ERROR_NOT_SUPPORTED)
    }

    /// The JIT error log, when the JIT wrote one.
    pub(crate) fn jit_log(&self) -> Option<&str> {
        match self {
            GpuError::Jit(_, log) => log.as_deref(),
            _ => None,
        }
    }
}

/// A device's primary context, retained and current on this thread until dropped.
pub(crate) struct PrimaryContext<'d> {
    driver: &'d Driver,
    device: CuDevice,
}

impl<'d> PrimaryContext<'d> {
    /// Retains device `ordinal`'s primary context and makes it current.
    pub(crate) fn retain(
        driver: &'d Driver,
        ordinal: c_int,
    ) -> Result<PrimaryContext<'d>, GpuError> {
        let api = &driver.api;
        let device_get = driver.need(api.device_get)?;
        let retain = driver.need(api.primary_ctx_retain)?;
        let set_current = driver.need(api.ctx_set_current)?;
        let mut device: CuDevice = 0;
        // SAFETY: cuda.h signature; valid out-pointer.
        device_get.call(|f| unsafe { f(&mut device, ordinal) })?;
        let mut context: Handle = std::ptr::null_mut();
        // SAFETY: cuda.h signature; valid out-pointer.
        retain.call(|f| unsafe { f(&mut context, device) })?;
        let held = PrimaryContext { driver, device };
        // SAFETY: `context` was just retained by this driver.
        set_current.call(|f| unsafe { f(context) })?;
        Ok(held)
    }

    /// The driver function `export` picks, if this libcuda exports it ([`Driver::need`]).
    fn need<F>(
        &self,
        export: impl FnOnce(&DriverFunctions) -> Export<Option<F>>,
    ) -> Result<Export<F>, DriverError> {
        self.driver.need(export(&self.driver.api))
    }

    /// Waits for all work in the context (`cuCtxSynchronize`).
    pub(crate) fn synchronize(&self) -> Result<(), GpuError> {
        let f = self.need(|api| api.ctx_synchronize)?;
        // SAFETY: cuda.h signature; a context is current.
        Ok(f.call(|f| unsafe { f() })?)
    }
}

impl Drop for PrimaryContext<'_> {
    fn drop(&mut self) {
        let api = &self.driver.api;
        if let Some(release) = api.primary_ctx_release_v2.f.or(api.primary_ctx_release.f) {
            // SAFETY: retained once in `retain`, released once here.
            unsafe { release(self.device) };
        }
    }
}

/// A module JIT-compiled from PTX, unloaded when dropped.
pub(crate) struct Module<'c> {
    context: &'c PrimaryContext<'c>,
    handle: Handle,
}

impl<'c> Module<'c> {
    /// JIT-compiles `ptx` (`cuModuleLoadDataEx`), capturing the JIT error log on failure;
    /// where the driver does not support that call (ZLUDA as Nixpkgs builds it: 801),
    /// `cuModuleLoadData`, which writes no log.
    pub(crate) fn load_ptx(
        context: &'c PrimaryContext<'c>,
        ptx: &str,
    ) -> Result<Module<'c>, GpuError> {
        let load = context.need(|api| api.module_load_data_ex)?;
        let ptx = CString::new(ptx).map_err(|e| GpuError::PtxHasNul(e.nul_position()))?;
        let mut log = vec![0u8; 16 * 1024];
        let mut options = [JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
        let mut values = [log.as_mut_ptr().cast::<c_void>(), log.len() as *mut c_void];
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: cuda.h signature; `ptx` is NUL-terminated; the option values are the log
        // buffer and its size, both live for the call.
        let mut code = unsafe {
            (load.f)(
                &mut handle,
                ptx.as_ptr().cast(),
                options.len() as c_uint,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        if code == CUDA_ERROR_NOT_SUPPORTED {
            if let Ok(load_data) = context.need(|api| api.module_load_data) {
                // SAFETY: cuda.h signature; `ptx` is NUL-terminated and lives for the call.
                code = unsafe { (load_data.f)(&mut handle, ptx.as_ptr().cast()) };
                CuError::check(load_data.name, code)?;
            }
        }
        if let Err(error) = CuError::check(load.name, code) {
            // The driver writes the log's length back into the size option.
            let written = (values[1] as usize).min(log.len());
            let text = String::from_utf8_lossy(&log[..written]);
            let text = text.trim_end_matches('\0').trim();
            let log = (!text.is_empty()).then(|| format!("JIT error log:\n{text}"));
            return Err(GpuError::Jit(error, log));
        }
        Ok(Module { context, handle })
    }

    /// Loads a fat binary or cubin `image` as it is (`cuModuleLoadDataEx` without options):
    /// the driver picks the image for its GPU, or answers why it cannot.
    pub(crate) fn load_image(
        context: &'c PrimaryContext<'c>,
        image: &[u8],
    ) -> Result<Module<'c>, GpuError> {
        let load = context.need(|api| api.module_load_data_ex)?;
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: cuda.h signature; `image` lives for the call (the driver copies what it
        // keeps); no options.
        let code = unsafe {
            (load.f)(
                &mut handle,
                image.as_ptr().cast(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        CuError::check(load.name, code)?;
        Ok(Module { context, handle })
    }

    fn function(&self, name: &CStr) -> Result<Handle, GpuError> {
        let get = self.context.need(|api| api.module_get_function)?;
        let mut function: Handle = std::ptr::null_mut();
        // SAFETY: cuda.h signature; the module is loaded; `name` is NUL-terminated.
        get.call(|f| unsafe { f(&mut function, self.handle, name.as_ptr()) })?;
        Ok(function)
    }
}

impl Drop for Module<'_> {
    fn drop(&mut self) {
        if let Some(unload) = self.context.driver.api.module_unload.f {
            // SAFETY: loaded once in `load_ptx`, unloaded once here.
            unsafe { unload(self.handle) };
        }
    }
}

/// A device buffer of `f32`s, freed when dropped.
pub(crate) struct DeviceBuffer<'c> {
    context: &'c PrimaryContext<'c>,
    pointer: CuDevicePtr,
    len: usize,
}

impl<'c> DeviceBuffer<'c> {
    /// Allocates room for `len` floats and copies `data` in (`cuMemAlloc_v2`, `cuMemcpyHtoD_v2`).
    pub(crate) fn from_host(
        context: &'c PrimaryContext<'c>,
        data: &[f32],
    ) -> Result<DeviceBuffer<'c>, GpuError> {
        let alloc = context.need(|api| api.mem_alloc)?;
        let htod = context.need(|api| api.memcpy_htod)?;
        let bytes = std::mem::size_of_val(data);
        let mut pointer: CuDevicePtr = 0;
        // SAFETY: cuda.h signature; valid out-pointer.
        alloc.call(|f| unsafe { f(&mut pointer, bytes) })?;
        let buffer = DeviceBuffer {
            context,
            pointer,
            len: data.len(),
        };
        // SAFETY: the device buffer and `data` both hold `bytes` bytes.
        htod.call(|f| unsafe { f(pointer, data.as_ptr().cast(), bytes) })?;
        Ok(buffer)
    }

    /// Copies the buffer back (`cuMemcpyDtoH_v2`).
    pub(crate) fn to_host(&self) -> Result<Vec<f32>, GpuError> {
        let dtoh = self.context.need(|api| api.memcpy_dtoh)?;
        let mut data = vec![0f32; self.len];
        // SAFETY: `data` and the device buffer both hold `len` floats.
        dtoh.call(|f| unsafe {
            f(
                data.as_mut_ptr().cast(),
                self.pointer,
                std::mem::size_of_val(data.as_slice()),
            )
        })?;
        Ok(data)
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        if let Some(free) = self.context.driver.api.mem_free.f {
            // SAFETY: allocated once in `from_host`, freed once here.
            unsafe { free(self.pointer) };
        }
    }
}

/// A timing event on the default stream, destroyed when dropped.
pub(crate) struct Event<'c> {
    context: &'c PrimaryContext<'c>,
    handle: Handle,
}

impl<'c> Event<'c> {
    /// Creates an event (`cuEventCreate`, default flags: timing enabled).
    pub(crate) fn new(context: &'c PrimaryContext<'c>) -> Result<Event<'c>, GpuError> {
        let create = context.need(|api| api.event_create)?;
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: cuda.h signature; valid out-pointer.
        create.call(|f| unsafe { f(&mut handle, 0) })?;
        Ok(Event { context, handle })
    }

    /// Records the event on the default stream.
    pub(crate) fn record(&self) -> Result<(), GpuError> {
        let record = self.context.need(|api| api.event_record)?;
        // SAFETY: cuda.h signature; a live event; the null stream is the default stream.
        Ok(record.call(|f| unsafe { f(self.handle, std::ptr::null_mut()) })?)
    }

    /// Milliseconds from `start` to this event, after waiting for this one.
    pub(crate) fn elapsed_since(&self, start: &Event<'_>) -> Result<f32, GpuError> {
        let sync = self.context.need(|api| api.event_synchronize)?;
        let elapsed = self.context.need(|api| api.event_elapsed_time)?;
        // SAFETY: cuda.h signature; a live event.
        sync.call(|f| unsafe { f(self.handle) })?;
        let mut ms = 0f32;
        // SAFETY: cuda.h signature; both events are live; valid out-pointer.
        elapsed.call(|f| unsafe { f(&mut ms, start.handle, self.handle) })?;
        Ok(ms)
    }
}

impl Drop for Event<'_> {
    fn drop(&mut self) {
        if let Some(destroy) = self.context.driver.api.event_destroy.f {
            // SAFETY: created once in `new`, destroyed once here.
            unsafe { destroy(self.handle) };
        }
    }
}

/// The saxpy kernel of [`SAXPY_PTX`], loaded, with a launch typed by its parameters.
pub(crate) struct Saxpy<'c> {
    module: Module<'c>,
    function: Handle,
}

impl<'c> Saxpy<'c> {
    /// Threads per block.
    pub(crate) const BLOCK: u32 = 256;

    /// JIT-compiles [`SAXPY_PTX`] and finds its entry point.
    pub(crate) fn load(context: &'c PrimaryContext<'c>) -> Result<Saxpy<'c>, GpuError> {
        let module = Module::load_ptx(context, SAXPY_PTX)?;
        let function = module.function(c"saxpy")?;
        Ok(Saxpy { module, function })
    }

    /// Launches `y = a * x + y` over every element on the default stream (`cuLaunchKernel`).
    pub(crate) fn launch(
        &self,
        a: f32,
        x: &DeviceBuffer<'_>,
        y: &DeviceBuffer<'_>,
    ) -> Result<(), GpuError> {
        let launch = self.module.context.need(|api| api.launch_kernel)?;
        let n = u32::try_from(x.len.min(y.len)).map_err(|_| GpuError::TooManyElements)?;
        let (mut arg_n, mut arg_a, mut arg_x, mut arg_y) = (n, a, x.pointer, y.pointer);
        let mut params: [*mut c_void; 4] = [
            std::ptr::addr_of_mut!(arg_n).cast(),
            std::ptr::addr_of_mut!(arg_a).cast(),
            std::ptr::addr_of_mut!(arg_x).cast(),
            std::ptr::addr_of_mut!(arg_y).cast(),
        ];
        // SAFETY: cuda.h signature; `params` points at one live local per kernel parameter,
        // in the PTX's order and types (u32, f32, u64, u64), read during the call; both
        // buffers hold at least `n` floats, which bounds every access of the kernel.
        launch.call(|f| unsafe {
            f(
                self.function,
                n.div_ceil(Self::BLOCK),
                1,
                1,
                Self::BLOCK,
                1,
                1,
                0,
                std::ptr::null_mut(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })?;
        Ok(())
    }
}
