//! The CUDA driver and runtime as the runner sees them: dlopen'd function tables, safe
//! wrappers for a kernel run ([`gpu`]), CUresult names and explanations, versions, devices.
//! The runner's only `unsafe` code lives here.

pub mod cudart;
pub mod devices;
pub mod driver;
pub mod gpu;
pub mod loaded;
pub mod registration;
pub mod result;
pub mod symbols;
pub mod version;
