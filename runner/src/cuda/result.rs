//! CUresult codes: their names, and a one-line cause-and-fix for each that matters here.

use std::fmt;

/// A failed driver call: which call, and the CUresult it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CuError {
    /// The driver function that failed, e.g. `cuInit`.
    pub call: &'static str,
    /// The CUresult it returned (never 0).
    pub code: i32,
}

impl CuError {
    /// `Ok(())` for CUDA_SUCCESS, else the error of `call`.
    pub(crate) fn check(call: &'static str, code: i32) -> Result<(), CuError> {
        if code == 0 {
            Ok(())
        } else {
            Err(CuError { call, code })
        }
    }
}

impl std::error::Error for CuError {}

impl fmt::Display for CuError {
    /// `cuInit failed with 100 CUDA_ERROR_NO_DEVICE: <cause and fix>`, one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed with {} {}: {}",
            self.call,
            self.code,
            name(self.code),
            explanation(self.code)
        )
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

/// The `cuda.h` name of a CUresult.
pub(crate) fn name(code: i32) -> &'static str {
    match code {
        0 => "CUDA_SUCCESS",
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        4 => "CUDA_ERROR_DEINITIALIZED",
        34 => "CUDA_ERROR_STUB_LIBRARY",
        46 => "CUDA_ERROR_DEVICE_UNAVAILABLE",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        200 => "CUDA_ERROR_INVALID_IMAGE",
        201 => "CUDA_ERROR_INVALID_CONTEXT",
        209 => "CUDA_ERROR_NO_BINARY_FOR_GPU",
        218 => "CUDA_ERROR_INVALID_PTX",
        221 => "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
        222 => "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        304 => "CUDA_ERROR_OPERATING_SYSTEM",
        400 => "CUDA_ERROR_INVALID_HANDLE",
        500 => "CUDA_ERROR_NOT_FOUND",
        600 => "CUDA_ERROR_NOT_READY",
        700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
        719 => "CUDA_ERROR_LAUNCH_FAILED",
        801 => "CUDA_ERROR_NOT_SUPPORTED",
        803 => "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        804 => "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => "CUDA_ERROR_(unlisted)",
    }
}

/// One line naming the likely cause and the fix.
pub(crate) fn explanation(code: i32) -> &'static str {
    match code {
        1 => "the driver refused an argument",
        2 => "the GPU is out of memory; free memory or use fewer --saxpy-elements",
        3 => "cuInit has not succeeded; see the driver::version check",
        34 => {
            "the CUDA toolkit's stub libcuda.so was loaded instead of the driver: the real \
               driver's libcuda.so.1 is not on the library path; remove .../stubs from \
               LD_LIBRARY_PATH/RUNPATH and expose the driver (cuda-sandbox-hook puts it at \
               /run/opengl-driver/lib)"
        }
        46 => {
            "the GPU is in exclusive-process mode and busy, or unavailable; retry when it is free"
        }
        100 => {
            "no CUDA device is usable: the device nodes are not exposed, the nvidia kernel \
                module is not loaded, or there is no GPU (the checks name which)"
        }
        101 => "the device ordinal does not exist (fewer GPUs visible than expected)",
        200 | 209 => {
            "the driver cannot use this code for this GPU; the PTX must target an \
                      architecture the driver can JIT for"
        }
        201 => "no usable CUDA context on this thread",
        218 => "the driver's JIT rejected the PTX; see the JIT error log",
        221 => {
            "libnvidia-ptxjitcompiler.so.1 is not exposed next to libcuda.so.1, so the \
                driver cannot JIT-compile PTX; expose the driver's whole compute library set"
        }
        222 => {
            "the PTX ISA version is newer than this driver's JIT supports; use a newer \
                driver or cuda_compat"
        }
        304 => "the driver could not talk to the kernel module (device nodes inaccessible?)",
        500 => "the driver does not know this symbol at this API version",
        700 | 719 => "the kernel faulted on the GPU; the driver or the GPU is unhealthy",
        801 => "the operation is not supported by this driver or GPU",
        803 => {
            "the cuda_compat libcuda does not support the host's kernel driver: \
                expose the host driver, or a compat package whose \
                fwd_compatibility note lists this kernel driver branch"
        }
        804 => {
            "cuda_compat works only on data-center GPUs and Jetson, not this GPU: \
                expose the host driver instead of the \
                compat one"
        }
        999 => "unknown driver error; often /dev/nvidia-uvm is missing or not accessible",
        _ => "see cuda.h for this CUresult",
    }
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
