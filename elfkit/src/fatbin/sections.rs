//! The sections NVIDIA's toolchain writes fat binaries and their wrappers to: what
//! [`super::locate`] walks, and what [`super::strings`] leaves out of a search for a program's
//! C strings (device code).

/// The section of linked programs and libraries that holds their containers back to back.
pub const FATBIN_SECTION: &str = ".nv_fatbin";
/// The section of relocatable objects (`nvcc -rdc`) that holds them.
pub const RELFATBIN_SECTION: &str = "__nv_relfatbin";
/// The section of 24-byte wrappers `{u32 0x466243B1, u32 version, u64 address, u64 list}`.
pub const WRAPPER_SECTION: &str = ".nvFatBinSegment";
/// A wrapper's magic.
pub const WRAPPER_MAGIC: u32 = 0x4662_43B1;
