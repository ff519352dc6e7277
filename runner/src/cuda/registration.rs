//! Fat binaries registered with a CUDA runtime as a program linked with them registers them
//! (`__cudaRegisterFatBinary`, `__cudaRegisterFunction`, `__cudaRegisterManagedVar`,
//! `__cudaRegisterFatBinaryEnd`, what nvcc's host stubs call at start-up), then one kernel
//! launched through the runtime (`cudaLaunchKernel`). `gpu-confirm` uses it to see on a GPU
//! what modules without code for it (one nothing can launch, one whose kernel has SASS for
//! another GPU, one holding a managed variable) do to the runtime under
//! `CUDA_MODULE_LOADING=EAGER` and `LAZY`.
//!
//! The registration ABI is the one nvcc's generated code uses (`crt/host_runtime.h`): the
//! wrapper `{int magic 0x466243B1, int version 1, const void *data, void *filename}` and the
//! handle `void **` it returns. The runtime keeps the pointers it is given, so every image and
//! wrapper registered here lives until the process ends.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::Path;

use libloading::Library;
use serde::Serialize;

/// The wrapper's magic (`__fatBinC_Wrapper_t`, `fatbinary_section.h`).
const WRAPPER_MAGIC: c_int = 0x4662_43B1;

/// `__fatBinC_Wrapper_t`.
#[repr(C)]
struct Wrapper {
    magic: c_int,
    version: c_int,
    data: *const c_void,
    filename_or_fatbins: *mut c_void,
}

/// `dim3`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Dim3 {
    x: c_uint,
    y: c_uint,
    z: c_uint,
}

impl Dim3 {
    /// `x` along x, one along y and z.
    fn x(x: c_uint) -> Dim3 {
        Dim3 { x, y: 1, z: 1 }
    }
}

type RegisterFatBinary = unsafe extern "C" fn(*mut c_void) -> *mut *mut c_void;
type RegisterFatBinaryEnd = unsafe extern "C" fn(*mut *mut c_void);
#[allow(clippy::type_complexity)]
type RegisterFunction = unsafe extern "C" fn(
    *mut *mut c_void,
    *const c_char,
    *mut c_char,
    *const c_char,
    c_int,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_int,
) -> c_int;
type RegisterManagedVar = unsafe extern "C" fn(
    *mut *mut c_void,
    *mut *mut c_void,
    *mut c_char,
    *const c_char,
    c_int,
    usize,
    c_int,
    c_int,
);
type Malloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
type Memcpy = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> c_int;
type Free = unsafe extern "C" fn(*mut c_void) -> c_int;
type Launch =
    unsafe extern "C" fn(*const c_void, Dim3, Dim3, *mut *mut c_void, usize, *mut c_void) -> c_int;
type Synchronize = unsafe extern "C" fn() -> c_int;

/// cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost.
const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;

/// One module registered before saxpy, as a program linked with it registers it.
pub(crate) struct Registered {
    /// The fat binary.
    pub(crate) image: Vec<u8>,
    /// A kernel of it, registered (never launched here).
    pub(crate) kernel: Option<&'static CStr>,
    /// A managed variable of it and its size, registered as `__managed__` ones are.
    pub(crate) managed: Option<(&'static CStr, usize)>,
}

/// What the runtime answered, step by step (each a `cudaError_t`; `None` for a step not
/// reached).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct RegistrationRun {
    /// `CUDA_MODULE_LOADING` as this process has it.
    pub(crate) module_loading: Option<String>,
    /// Fat binaries registered before the first call (the kernel-less one first).
    pub(crate) registered: usize,
    /// `cudaFree(NULL)`: the first call, which creates the context (and, eager, loads every
    /// registered module).
    pub(crate) first_call: c_int,
    /// `cudaLaunchKernel` of saxpy.
    pub(crate) launch: Option<c_int>,
    /// `cudaDeviceSynchronize` after it.
    pub(crate) synchronize: Option<c_int>,
    /// Elements saxpy got wrong (of [`ELEMENTS`]).
    pub(crate) wrong_elements: Option<usize>,
}

/// How many elements the saxpy launch computes.
pub(crate) const ELEMENTS: usize = 4096;

fn symbol<T: Copy>(library: &Library, name: &str) -> Result<T, String> {
    // SAFETY: each caller names a runtime export with the signature `T` it was declared with
    // in NVIDIA's headers.
    unsafe { library.get::<T>(format!("{name}\0").as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("the runtime lacks {name}: {e}"))
}

/// Registers each of `images` (fat binaries, kept alive for the process) with the runtime at
/// `cudart`, the last one with the saxpy kernel (`saxpy_image`'s `.entry saxpy`), then runs
/// saxpy through the runtime. An error is a runtime that cannot be used at all.
pub(crate) fn register_and_launch(
    cudart: &Path,
    modules: Vec<Registered>,
    saxpy_image: Vec<u8>,
) -> Result<RegistrationRun, String> {
    // SAFETY: loading the runtime runs its initialisers, which is what using it means.
    let library =
        unsafe { Library::new(cudart) }.map_err(|e| format!("{}: {e}", cudart.display()))?;
    let register: RegisterFatBinary = symbol(&library, "__cudaRegisterFatBinary")?;
    let register_end: RegisterFatBinaryEnd = symbol(&library, "__cudaRegisterFatBinaryEnd")?;
    let register_function: RegisterFunction = symbol(&library, "__cudaRegisterFunction")?;
    let register_managed: RegisterManagedVar = symbol(&library, "__cudaRegisterManagedVar")?;
    let malloc: Malloc = symbol(&library, "cudaMalloc")?;
    let memcpy: Memcpy = symbol(&library, "cudaMemcpy")?;
    let free: Free = symbol(&library, "cudaFree")?;
    let launch: Launch = symbol(&library, "cudaLaunchKernel")?;
    let synchronize: Synchronize = symbol(&library, "cudaDeviceSynchronize")?;
    let saxpy = Registered {
        image: saxpy_image,
        kernel: Some(c"saxpy"),
        managed: None,
    };
    let registered = modules.len() + 1;
    // The host stub of the last kernel registered: saxpy's, which is launched.
    let mut stub: *const u8 = std::ptr::null();
    for module in modules.into_iter().chain([saxpy]) {
        let image: &'static [u8] = Box::leak(module.image.into_boxed_slice());
        let wrapper: &'static mut Wrapper = Box::leak(Box::new(Wrapper {
            magic: WRAPPER_MAGIC,
            version: 1,
            data: image.as_ptr().cast(),
            filename_or_fatbins: std::ptr::null_mut(),
        }));
        // SAFETY: the wrapper and its image live until the process ends, as the runtime needs.
        let handle = unsafe { register((wrapper as *mut Wrapper).cast()) };
        if let Some(name) = module.kernel {
            // A host stub's address of its own, alive until the process ends.
            stub = Box::leak(Box::new(0u8));
            // SAFETY: a fresh handle; the names are NUL-terminated statics; the optional
            // launch bounds are null, as nvcc passes them for a kernel without any.
            unsafe {
                register_function(
                    handle,
                    stub.cast(),
                    name.as_ptr().cast_mut(),
                    name.as_ptr(),
                    -1,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
        }
        if let Some((name, size)) = module.managed {
            // The host's pointer to the managed memory, which the runtime fills in.
            let pointer: &'static mut *mut c_void = Box::leak(Box::new(std::ptr::null_mut()));
            // SAFETY: host_runtime.h's signature; the pointer lives until the process ends;
            // ext 0, constant 0, global 0 as nvcc registers a `__managed__ int`.
            unsafe {
                register_managed(
                    handle,
                    pointer,
                    name.as_ptr().cast_mut(),
                    name.as_ptr(),
                    0,
                    size,
                    0,
                    0,
                )
            };
        }
        // SAFETY: a handle the runtime just returned.
        unsafe { register_end(handle) };
    }
    let mut run = RegistrationRun {
        module_loading: std::env::var("CUDA_MODULE_LOADING").ok(),
        registered,
        // SAFETY: cudaFree(NULL) is a no-op that initialises the runtime.
        first_call: unsafe { free(std::ptr::null_mut()) },
        ..RegistrationRun::default()
    };
    if run.first_call != 0 {
        return Ok(run);
    }
    let x: Vec<f32> = (0..ELEMENTS).map(|i| (i % 1024) as f32).collect();
    let mut y = vec![1.0f32; ELEMENTS];
    let bytes = ELEMENTS * std::mem::size_of::<f32>();
    let (mut dx, mut dy): (*mut c_void, *mut c_void) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: cuda_runtime_api.h signatures; valid out-pointers; each copy moves `bytes`
    // between buffers of that size.
    let copied = unsafe {
        [
            malloc(&mut dx, bytes),
            malloc(&mut dy, bytes),
            memcpy(dx, x.as_ptr().cast(), bytes, HOST_TO_DEVICE),
            memcpy(dy, y.as_ptr().cast(), bytes, HOST_TO_DEVICE),
        ]
    };
    if let Some(&code) = copied.iter().find(|&&c| c != 0) {
        run.launch = Some(code);
        return Ok(run);
    }
    let mut n = ELEMENTS as c_uint;
    let mut a = 2.0f32;
    let mut args: [*mut c_void; 4] = [
        std::ptr::addr_of_mut!(n).cast(),
        std::ptr::addr_of_mut!(a).cast(),
        std::ptr::addr_of_mut!(dx).cast(),
        std::ptr::addr_of_mut!(dy).cast(),
    ];
    let threads = 256;
    let grid = Dim3::x(ELEMENTS.div_ceil(threads) as c_uint);
    let block = Dim3::x(threads as c_uint);
    // SAFETY: the kernel was registered under this stub; `args` points at four values of the
    // kernel's parameter types (u32, f32, u64, u64), alive for the call.
    run.launch = Some(unsafe {
        launch(
            stub.cast(),
            grid,
            block,
            args.as_mut_ptr(),
            0,
            std::ptr::null_mut(),
        )
    });
    // SAFETY: cuda_runtime_api.h signature.
    run.synchronize = Some(unsafe { synchronize() });
    // SAFETY: `y` and `dy` both hold `bytes` bytes.
    let back = unsafe { memcpy(y.as_mut_ptr().cast(), dy, bytes, DEVICE_TO_HOST) };
    run.wrong_elements = (back == 0).then(|| {
        x.iter()
            .zip(&y)
            .filter(|(x, y)| **y != 2.0 * **x + 1.0)
            .count()
    });
    // SAFETY: allocated above, freed once.
    unsafe {
        free(dx);
        free(dy);
    }
    // The runtime keeps the registered images; it is never unloaded.
    std::mem::forget(library);
    Ok(run)
}
