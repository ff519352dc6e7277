//! A stale driver: the host's user-space driver is not the loaded kernel module's version.
//!
//! After `nixos-rebuild switch` (or a driver upgrade elsewhere) without a reboot, the driver
//! link holds the new user-space driver while the old kernel module is still loaded; every
//! CUDA program then fails deep inside (`cuInit` 803, NVML "Driver/library version
//! mismatch"). NVIDIA's user-space libraries work only with the kernel module of exactly
//! their version; a `cuda_compat` libcuda is the one exception, and it is judged by its own
//! note ([`crate::discover::choice`]), so only the host's own libcuda is compared here.
//! Jetson's libcuda (`libcuda.so.1.1`) carries no version and Jetson has no
//! `/proc/driver/nvidia/version`: nothing to compare, no problem.

use crate::config::Platform;
use crate::discover::versions;
use crate::scan::{BootedDriver, HostFacts};
use std::path::Path;

/// The host's user-space driver and the loaded kernel module disagree. Display says what is
/// wrong, in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the NVIDIA user-space driver ({user_space}) does not match the loaded kernel module \
     ({kernel_module}, /proc/driver/nvidia/version), so every CUDA call would fail with a \
     version mismatch"
)]
pub(crate) struct StaleDriver {
    /// The user-space version (the host libcuda's real file name).
    pub user_space: String,
    /// The loaded kernel module's version.
    pub kernel_module: String,
    /// Where the user-space driver is: the driver link, or host libraries.
    pub at_link: Option<String>,
    /// The booted system's driver, when it is still in the store and matches the module.
    pub booted: Option<BootedDriver>,
}

impl StaleDriver {
    /// What to do about it, in one line.
    pub(crate) fn fix(&self) -> String {
        let reboot = format!(
            "reboot so that the {} kernel module is loaded",
            self.user_space
        );
        match (&self.at_link, &self.booted) {
            (Some(link), Some(b)) => format!(
                "{reboot} (after nixos-rebuild switch: reboot into the new system), or until then \
                 use the booted system's driver {} (its libcuda is {}; /run/booted-system keeps \
                 it in the store): ln -sfn {} {link}",
                b.driver.display(),
                self.kernel_module,
                b.driver.display()
            ),
            (Some(_), None) => format!(
                "{reboot} (after nixos-rebuild switch: reboot into the new system); the booted \
                 system's driver is not in the store with version {}",
                self.kernel_module
            ),
            (None, _) => format!(
                "{reboot}, or reinstall the user-space driver of version {}",
                self.kernel_module
            ),
        }
    }
}

/// The stale-driver verdict for the host's libcuda real file name `libcuda_file` under the
/// host `facts`; `link` is the driver link when the driver comes from it. `None` when they
/// match or either version is unknown (Jetson, no kernel module, an unversioned libcuda).
pub(crate) fn stale_driver(
    facts: &HostFacts,
    libcuda_file: Option<&str>,
    link: Option<&Path>,
) -> Option<StaleDriver> {
    if facts.platform() == Platform::Tegra {
        return None;
    }
    let kernel_module = facts.kernel_driver.clone()?;
    let user_space = versions::version_in_file_name(libcuda_file?, "libcuda")?;
    if user_space == kernel_module {
        return None;
    }
    let booted = facts
        .booted_driver
        .clone()
        .filter(|b| b.libcuda_version.as_deref() == Some(kernel_module.as_str()));
    Some(StaleDriver {
        user_space,
        kernel_module,
        at_link: link.map(|l| l.display().to_string()),
        booted,
    })
}
