//! The CUDA driver and runtime as the runner sees them: dlopen'd function tables,
//! CUresult names and explanations, versions, devices.

pub mod devices;
pub mod driver;
pub mod loaded;
pub mod result;
pub mod runtime;
pub mod symbols;
pub mod version;
