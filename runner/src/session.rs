//! State shared by the checks of one run: GPU access as it stood before any driver call, and
//! the driver, runtimes and package (loaded once, lazily, by whichever check needs them first).

use std::sync::OnceLock;

use crate::access::{Access, KERNEL_MODULE_FILE};
use crate::cli::Options;
use crate::cuda::cudart::Runtime;
use crate::cuda::devices::{self, CudaDevice};
use crate::cuda::driver::{Driver, LIBCUDA};
use crate::cuda::result::{self, CUDA_ERROR_NO_DEVICE};
use crate::expectations::ManifestState;
use crate::package::PackageUnderTest;

/// One run of the runner.
pub struct Session {
    /// The runner's flags.
    pub options: Options,
    /// The hook's manifest (or why there is none), read once at the start.
    pub manifest: ManifestState,
    /// Device nodes and kernel module as they were before any driver call.
    pub access: Access,
    driver: OnceLock<Result<Driver, String>>,
    init: OnceLock<Result<(), (i32, String)>>,
    devices: OnceLock<Result<Vec<CudaDevice>, String>>,
    runtimes: OnceLock<Result<Vec<Runtime>, String>>,
    package: OnceLock<Result<PackageUnderTest, String>>,
}

impl Session {
    /// A session; the manifest and the device nodes are read now, before any driver call;
    /// nothing is loaded until a check asks.
    pub fn new(options: Options) -> Session {
        let manifest = ManifestState::load(options.manifest.as_deref(), options.no_manifest);
        let access = Access::scan(
            &options.dev_root,
            std::path::Path::new(KERNEL_MODULE_FILE),
            manifest.manifest().is_some(),
        );
        Session {
            options,
            manifest,
            access,
            driver: OnceLock::new(),
            init: OnceLock::new(),
            devices: OnceLock::new(),
            runtimes: OnceLock::new(),
            package: OnceLock::new(),
        }
    }

    /// The loaded driver, or one line saying why it is not there and what to do.
    pub fn driver(&self) -> Result<&Driver, String> {
        self.driver
            .get_or_init(|| {
                Driver::load().map_err(|error| {
                    format!(
                        "{LIBCUDA} cannot be loaded ({error}): the driver is not exposed to \
                         this process; tag the derivation with requiredSystemFeatures = \
                         [ \"cuda\" ] and install cuda-sandbox-hook as Nix's pre-build-hook \
                         (it exposes the driver at /run/opengl-driver/lib), or outside Nix \
                         put the driver on LD_LIBRARY_PATH"
                    )
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The driver after a successful `cuInit(0)`, or the one-line reason it failed; a "no
    /// device" answer names its true cause (nodes, kernel module or GPU, see [`Access`]).
    pub fn initialized(&self) -> Result<&Driver, String> {
        let driver = self.driver()?;
        self.init
            .get_or_init(|| {
                driver.init().map_err(|error| match error.code {
                    CUDA_ERROR_NO_DEVICE => (
                        CUDA_ERROR_NO_DEVICE,
                        format!(
                            "{} failed with {CUDA_ERROR_NO_DEVICE} {}: {}",
                            error.call,
                            result::name(CUDA_ERROR_NO_DEVICE),
                            self.access.explain_no_gpu()
                        ),
                    ),
                    code => (code, error.to_string()),
                })
            })
            .as_ref()
            .map(|()| driver)
            .map_err(|(_, why)| why.clone())
    }

    /// `cuInit`'s CUresult once it has run (0 on success); `None` before, or without a driver.
    pub fn init_code(&self) -> Option<i32> {
        self.init
            .get()
            .map(|r| r.as_ref().map_or_else(|(code, _)| *code, |()| 0))
    }

    /// The GPUs CUDA reports (needs `cuInit`).
    pub fn devices(&self) -> Result<&[CudaDevice], String> {
        let driver = self.initialized()?;
        self.devices
            .get_or_init(|| devices::list(driver))
            .as_ref()
            .map(Vec::as_slice)
            .map_err(Clone::clone)
    }

    /// The CUDA runtimes to check: each `--cudart`, or else every libcudart this process
    /// can load, in the loader's search order. Empty when there is none.
    pub fn runtimes(&self) -> Result<&[Runtime], String> {
        self.runtimes
            .get_or_init(|| Runtime::load_all(&self.options.cudart))
            .as_deref()
            .map_err(Clone::clone)
    }

    /// The package under test (`--package`), read and scanned once.
    pub fn package(&self) -> Result<&PackageUnderTest, String> {
        self.package
            .get_or_init(|| {
                PackageUnderTest::read(
                    &self.options.packages,
                    self.options.package_closure.as_deref(),
                )
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}
