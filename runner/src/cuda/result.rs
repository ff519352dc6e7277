//! CUresult codes: their names, and a one-line cause-and-fix for each that matters here.

/// A failed driver call: which call, and the CUresult it returned. Its text:
/// `cuInit failed with 100 CUDA_ERROR_NO_DEVICE: <cause and fix>`, one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed with {code} {}: {}", name(*code), explanation(*code))]
pub(crate) struct CuError {
    /// The driver function that failed, e.g. `cuInit`.
    pub call: &'static str,
    /// The CUresult it returned (never 0).
    pub code: i32,
}

impl CuError {
    /// `Ok(())` for CUDA_SUCCESS, else the error of `call`.
    pub(crate) fn check(call: &'static str, code: i32) -> Result<(), CuError> {
        match code {
            0 => Ok(()),
            code => Err(CuError { call, code }),
        }
    }
}

/// The driver API's (`CUresult`) CUDA_ERROR_NO_DEVICE: its cause is named by
/// [`crate::facts::access::Access`], not by this table. The runtime API's cudaErrorNoDevice is another
/// enum with the same number ([`crate::cuda::cudart::CUDART_ERROR_NO_DEVICE`]).
pub(crate) const CUDA_ERROR_NO_DEVICE: i32 = 100;
/// CUDA_ERROR_NOT_FOUND.
pub(crate) const CUDA_ERROR_NOT_FOUND: i32 = 500;
/// CUDA_ERROR_NOT_SUPPORTED: what ZLUDA's exports of the functions it does not implement
/// return (its release build's `unimplemented()`).
pub(crate) const CUDA_ERROR_NOT_SUPPORTED: i32 = 801;

macro_rules! cu_results {
    ($( $code:literal $name:ident $(=> $explanation:expr)? ),* $(,)?) => {
        /// The `cuda.h` name of a CUresult.
        pub(crate) fn name(code: i32) -> &'static str {
            match code {
                $( $code => stringify!($name), )*
                _ => "CUDA_ERROR_(unlisted)",
            }
        }

        /// One line naming the likely cause and the fix.
        pub(crate) fn explanation(code: i32) -> &'static str {
            match code {
                $( $( $code => $explanation, )? )*
                _ => "see cuda.h for this CUresult",
            }
        }
    };
}

/// CUDA_ERROR_INVALID_IMAGE and CUDA_ERROR_NO_BINARY_FOR_GPU: the cause and fix.
const NO_CODE_FOR_GPU: &str = "the driver cannot use this code for this GPU; the PTX must target \
     an architecture the driver can JIT for";
/// CUDA_ERROR_ILLEGAL_ADDRESS and CUDA_ERROR_LAUNCH_FAILED: the cause and fix.
const FAULTED: &str = "the kernel faulted on the GPU; the driver or the GPU is unhealthy";

// Each CUresult the runner names: its `cuda.h` name, and its cause and fix where one is known.
cu_results! {
    0 CUDA_SUCCESS,
    1 CUDA_ERROR_INVALID_VALUE => "the driver refused an argument",
    2 CUDA_ERROR_OUT_OF_MEMORY => "the GPU is out of memory; free memory or use fewer \
        --saxpy-elements",
    3 CUDA_ERROR_NOT_INITIALIZED => "cuInit has not succeeded; see the driver::version check",
    4 CUDA_ERROR_DEINITIALIZED,
    34 CUDA_ERROR_STUB_LIBRARY => "the CUDA toolkit's stub libcuda.so was loaded instead of the \
        driver: the real driver's libcuda.so.1 is not on the library path; remove .../stubs from \
        LD_LIBRARY_PATH/RUNPATH and expose the driver (cuda-sandbox-hook puts it at \
        /run/opengl-driver/lib)",
    46 CUDA_ERROR_DEVICE_UNAVAILABLE => "the GPU is in exclusive-process mode and busy, or \
        unavailable; retry when it is free",
    100 CUDA_ERROR_NO_DEVICE => "no CUDA device is usable: the device nodes are not exposed, the \
        nvidia kernel module is not loaded, or there is no GPU (the checks name which)",
    101 CUDA_ERROR_INVALID_DEVICE => "the device ordinal does not exist (fewer GPUs visible than \
        expected)",
    200 CUDA_ERROR_INVALID_IMAGE => NO_CODE_FOR_GPU,
    201 CUDA_ERROR_INVALID_CONTEXT => "no usable CUDA context on this thread",
    209 CUDA_ERROR_NO_BINARY_FOR_GPU => NO_CODE_FOR_GPU,
    218 CUDA_ERROR_INVALID_PTX => "the driver's JIT rejected the PTX; see the JIT error log",
    221 CUDA_ERROR_JIT_COMPILER_NOT_FOUND => "libnvidia-ptxjitcompiler.so.1 is not exposed next to \
        libcuda.so.1, so the driver cannot JIT-compile PTX; expose the driver's whole compute \
        library set",
    222 CUDA_ERROR_UNSUPPORTED_PTX_VERSION => "the PTX ISA version is newer than this driver's JIT \
        supports; use a newer driver or cuda_compat",
    304 CUDA_ERROR_OPERATING_SYSTEM => "the driver could not talk to the kernel module (device \
        nodes inaccessible?)",
    400 CUDA_ERROR_INVALID_HANDLE,
    500 CUDA_ERROR_NOT_FOUND => "the driver does not know this symbol at this API version",
    600 CUDA_ERROR_NOT_READY,
    700 CUDA_ERROR_ILLEGAL_ADDRESS => FAULTED,
    719 CUDA_ERROR_LAUNCH_FAILED => FAULTED,
    801 CUDA_ERROR_NOT_SUPPORTED => "the operation is not supported by this driver or GPU",
    803 CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => "the cuda_compat libcuda does not support the host's \
        kernel driver: expose the host driver, or a compat package whose fwd_compatibility note \
        lists this kernel driver branch",
    804 CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE => "cuda_compat works only on data-center GPUs \
        and Jetson, not this GPU: expose the host driver instead of the compat one",
    999 CUDA_ERROR_UNKNOWN => "unknown driver error; often /dev/nvidia-uvm is missing or not \
        accessible",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_print_one_line_with_name_and_fix() {
        let error = CuError {
            call: "cuInit",
            code: 34,
        };
        let text = error.to_string();
        assert!(text.starts_with("cuInit failed with 34 CUDA_ERROR_STUB_LIBRARY: "));
        assert!(text.contains("stub"));
        assert!(!text.contains('\n'));
    }

    #[test]
    fn every_named_code_has_a_specific_explanation() {
        for code in [
            1, 3, 34, 100, 101, 200, 209, 218, 221, 222, 500, 719, 803, 804, 999,
        ] {
            assert_ne!(name(code), "CUDA_ERROR_(unlisted)", "{code}");
            assert_ne!(explanation(code), "see cuda.h for this CUresult", "{code}");
        }
    }
}
