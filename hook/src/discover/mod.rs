//! Discovery: what the host has (kernel module, Tegra, driver libraries, the loader cache,
//! compat drivers) and the choice of driver. Discovery only reads; the plan acts on it.

pub mod choice;
pub mod compat;
pub mod host;
pub mod ldcache;
pub mod versions;
