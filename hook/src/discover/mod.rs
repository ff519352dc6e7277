//! Discovery helpers, all read-only: compat drivers and their ELF notes,
//! driver and CUDA versions, the host's driver libraries, and the choice between host and
//! compat driver (pure). [`crate::scan`] calls them to build the host view.

pub(crate) mod choice;
pub(crate) mod compat;
pub(crate) mod host;
pub(crate) mod versions;
