//! The CUDA driver and runtime as the runner sees them: dlopen'd function tables, safe
//! wrappers for a kernel run ([`gpu`]), CUresult names and explanations, versions, devices.
//! The runner's only `unsafe` code lives here.

pub(crate) mod cudart;
pub(crate) mod devices;
pub(crate) mod driver;
pub(crate) mod gpu;
pub(crate) mod loaded;
pub(crate) mod registration;
pub(crate) mod result;
pub(crate) mod symbols;
pub(crate) mod version;
