//! `kernel::saxpy`: JIT-compiles the saxpy PTX with `cuModuleLoadDataEx` (capturing the
//! error log), runs it on n elements, verifies every one, reports JIT time, kernel time
//! and effective bandwidth (12·n bytes / kernel time). PTX is also what ZLUDA runs (it
//! compiles PTX for the AMD GPU and loads no SASS); where the driver does not support
//! `cuModuleLoadDataEx` or events (ZLUDA as Nixpkgs builds it answers 801), the PTX is loaded
//! with `cuModuleLoadData` and the kernel timed on the host around `cuCtxSynchronize`.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::check::{facts_of, Outcome};
use crate::cuda::devices::CudaDevice;
use crate::cuda::driver::Driver;
use crate::cuda::gpu::{DeviceBuffer, Event, GpuError, PrimaryContext, Saxpy};
use crate::facts;
use crate::session::Session;

/// The kernel, as the driver JIT-compiles it (kept in `cuda/`, beside its typed launch).
pub use crate::cuda::gpu::SAXPY_PTX;

/// What `kernel::saxpy` reports when the kernel ran (the report's `facts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SaxpyFacts {
    /// n, the number of elements.
    pub elements: u32,
    /// The GPU it ran on (CUDA's first).
    pub(crate) device: Option<CudaDevice>,
    /// Time to JIT-compile the PTX, milliseconds.
    pub jit_ms: f64,
    /// Kernel time between two events, milliseconds (launch to `cuCtxSynchronize` on the
    /// host clock when `timed_on_host`).
    pub(crate) kernel_ms: f64,
    /// Whether the driver has no events (801) and the kernel was timed on the host.
    pub(crate) timed_on_host: bool,
    /// 12·n: bytes read and written by the kernel.
    pub bytes_moved: f64,
    /// `bytes_moved` / kernel time, GB/s; `None` when the kernel time reads 0.
    pub bandwidth_gb_per_s: Option<f64>,
    /// Elements whose result is wrong.
    pub wrong_elements: usize,
}

/// The scale factor `a`.
const A: f32 = 2.0;

/// Inputs chosen so that `a*x + y` is exact in f32: small integers.
fn x_at(i: usize) -> f32 {
    (i % 1024) as f32
}
const Y0: f32 = 1.0;

/// What a run measured: its facts, and the first wrong element (index, result, expected).
type Measured = (SaxpyFacts, Option<(usize, f32, f32)>);

/// Runs saxpy on `n` elements on CUDA's first GPU (`device`).
fn run(driver: &Driver, n: u32, device: Option<CudaDevice>) -> Result<Measured, GpuError> {
    let context = PrimaryContext::retain(driver, 0)?;
    let started = Instant::now();
    let saxpy = Saxpy::load(&context)?;
    let jit_ms = started.elapsed().as_secs_f64() * 1e3;

    let count = n as usize;
    let x: Vec<f32> = (0..count).map(x_at).collect();
    let dx = DeviceBuffer::from_host(&context, &x)?;
    let dy = DeviceBuffer::from_host(&context, &vec![Y0; count])?;
    let events = match Event::new(&context) {
        Err(error) if error.not_supported() => None,
        start => Some((start?, Event::new(&context)?)),
    };
    let kernel_ms = match &events {
        Some((start, end)) => {
            start.record()?;
            saxpy.launch(A, &dx, &dy)?;
            end.record()?;
            let ms = end.elapsed_since(start)?;
            context.synchronize()?;
            f64::from(ms)
        }
        None => {
            let started = Instant::now();
            saxpy.launch(A, &dx, &dy)?;
            context.synchronize()?;
            started.elapsed().as_secs_f64() * 1e3
        }
    };
    let y = dy.to_host()?;

    let wrong: Vec<usize> = (0..count).filter(|&i| y[i] != A * x_at(i) + Y0).collect();
    let moved = 12.0 * f64::from(n);
    let facts = SaxpyFacts {
        elements: n,
        device,
        jit_ms,
        kernel_ms,
        timed_on_host: events.is_none(),
        bytes_moved: moved,
        bandwidth_gb_per_s: (kernel_ms > 0.0).then(|| moved / (kernel_ms / 1e3) / 1e9),
        wrong_elements: wrong.len(),
    };
    Ok((facts, wrong.first().map(|&i| (i, y[i], A * x_at(i) + Y0))))
}

/// Runs `kernel::saxpy`.
pub(crate) fn saxpy(session: &Session) -> Result<Outcome, Outcome> {
    let n = session.options.saxpy_elements;
    let driver = session
        .initialized()
        .map_err(|why| Outcome::fail(why, facts! { "elements" => n }))?;
    let device = session.devices().ok().and_then(|d| d.first().cloned());
    Ok(match run(driver, n, device.clone()) {
        // The JIT error log, when there is one, is also the detail.
        Err(failure) => Outcome::fail(
            &failure,
            facts! { "elements" => n, "device" => device, "jit_log" => failure.jit_log() },
        )
        .with_detail_lines(failure.jit_log()),
        Ok((measured, Some((i, got, want)))) => Outcome::fail(
            format!(
                "saxpy computed {} wrong elements of {n} (first: y[{i}] = {got}, want {want}): \
                 the GPU or driver is faulty",
                measured.wrong_elements
            ),
            facts_of(&measured),
        ),
        Ok((measured, None)) => Outcome::pass(
            format!(
                "saxpy on {n} elements verified{}; JIT {:.1} ms, kernel {:.3} ms{}, {}",
                session
                    .zluda()
                    .map_or(String::new(), |z| format!(" through {}", z.describe())),
                measured.jit_ms,
                measured.kernel_ms,
                if measured.timed_on_host {
                    " (host clock: the driver has no events)"
                } else {
                    ""
                },
                measured
                    .bandwidth_gb_per_s
                    .map_or("bandwidth not measurable".to_owned(), |b| format!(
                        "{b:.1} GB/s"
                    ))
            ),
            facts_of(&measured),
        ),
    })
}
