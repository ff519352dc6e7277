//! State shared by the checks of one run: GPU access as it stood before any driver call, and
//! the driver, runtimes and package (loaded once, lazily, by whichever check needs them first).

use std::sync::OnceLock;

use crate::cuda::cudart::{CudartError, Runtime};
use crate::cuda::devices::{self, CudaDevice};
use crate::cuda::driver::{Driver, DriverError, LoadError, LIBCUDA};
use crate::cuda::result::{self, CuError, CUDA_ERROR_NO_DEVICE};
use crate::facts::access::Access;
use crate::facts::amd_nodes::AmdNodes;
use crate::facts::expectations::ManifestState;
use crate::facts::package_under_test::{PackageError, PackageUnderTest};
use crate::facts::zluda::Zluda;
use crate::options::Options;

/// Why a check cannot use the driver or the GPU.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GpuUnavailable {
    /// `libcuda.so.1` cannot be loaded: the driver is not exposed.
    #[error(
        "{LIBCUDA} cannot be loaded ({0}): the driver is not exposed to this process; tag the \
         derivation with requiredSystemFeatures = [ \"cuda\" ] and install cuda-sandbox-hook \
         as Nix's pre-build-hook (it exposes the driver at /run/opengl-driver/lib), or outside \
         Nix put the driver on LD_LIBRARY_PATH"
    )]
    NoDriver(LoadError),
    /// `cuInit` found no device (its error), and the cause with its fix:
    /// [`Access::explain_no_gpu`], told apart from the device nodes and kernel module as they
    /// were before any driver call.
    #[error("{} failed with {CUDA_ERROR_NO_DEVICE} {}: {}", .0.call, result::name(CUDA_ERROR_NO_DEVICE), .1)]
    NoDevice(CuError, String),
    /// Another driver failure (`cuInit`'s other errors, a missing export).
    #[error(transparent)]
    Driver(#[from] DriverError),
}

/// One run of the runner.
pub struct Session {
    /// The runner's flags.
    pub options: Options,
    /// The hook's manifest (or why there is none), read once at the start.
    pub manifest: ManifestState,
    /// Device nodes and kernel module as they were before any driver call.
    pub(crate) access: Access,
    driver: OnceLock<Result<Driver, LoadError>>,
    zluda: OnceLock<Option<Zluda>>,
    init: OnceLock<Result<(), CuError>>,
    devices: OnceLock<Result<Vec<CudaDevice>, DriverError>>,
    runtimes: OnceLock<Result<Vec<Runtime>, CudartError>>,
    package: OnceLock<Result<PackageUnderTest, PackageError>>,
}

impl Session {
    /// A session; the manifest and the device nodes are read now, before any driver call;
    /// nothing is loaded until a check asks.
    pub fn new(options: Options) -> Session {
        let manifest = ManifestState::load(options.manifest.as_deref(), options.no_manifest);
        let access = Access::scan(&options.dev_root, manifest.manifest().is_some());
        Session {
            options,
            manifest,
            access,
            driver: OnceLock::new(),
            zluda: OnceLock::new(),
            init: OnceLock::new(),
            devices: OnceLock::new(),
            runtimes: OnceLock::new(),
            package: OnceLock::new(),
        }
    }

    /// The loaded driver, or why it is not there and what to do.
    pub(crate) fn driver(&self) -> Result<&Driver, GpuUnavailable> {
        self.driver
            .get_or_init(Driver::load)
            .as_ref()
            .map_err(|error| GpuUnavailable::NoDriver(error.clone()))
    }

    /// ZLUDA's marks when the loaded libcuda is ZLUDA (the CUDA driver API on AMD's HIP);
    /// `None` for NVIDIA's driver, or when none is loaded.
    pub(crate) fn zluda(&self) -> Option<&Zluda> {
        self.zluda
            .get_or_init(|| Zluda::recognise(&self.driver().ok()?.file.real_path))
            .as_ref()
    }

    /// The driver after a successful `cuInit(0)`, or why it failed; a "no device" answer names
    /// its true cause (nodes, kernel module or GPU, see [`Access`]).
    pub(crate) fn initialized(&self) -> Result<&Driver, GpuUnavailable> {
        let driver = self.driver()?;
        match self.init.get_or_init(|| driver.init()) {
            Ok(()) => Ok(driver),
            Err(error) if error.code == CUDA_ERROR_NO_DEVICE => {
                Err(GpuUnavailable::NoDevice(*error, self.explain_no_gpu()))
            }
            Err(error) => Err(DriverError::Call(*error).into()),
        }
    }

    /// Why no GPU is usable, and the fix: by [`Access`] for NVIDIA's driver; under ZLUDA by the
    /// AMD nodes its HIP opens ([`AmdNodes`]).
    pub(crate) fn explain_no_gpu(&self) -> String {
        let Some(zluda) = self.zluda() else {
            return self.access.explain_no_gpu();
        };
        AmdNodes::scan(&self.access.nodes.dev_root)
            .problems(None, None)
            .into_iter()
            .next()
            .unwrap_or_else(|| {
                format!(
                    "{}: /dev/kfd and a render node are here, yet HIP finds no usable AMD GPU: \
                     check `rocminfo` on the host",
                    zluda.describe()
                )
            })
    }

    /// The GPUs CUDA reports (needs `cuInit`).
    pub(crate) fn devices(&self) -> Result<&[CudaDevice], GpuUnavailable> {
        let driver = self.initialized()?;
        self.devices
            .get_or_init(|| devices::list(driver))
            .as_ref()
            .map(Vec::as_slice)
            .map_err(|error| error.clone().into())
    }

    /// The CUDA runtimes to check: each `--cudart`, or else every libcudart this process
    /// can load, in the loader's search order. Empty when there is none.
    pub(crate) fn runtimes(&self) -> Result<&[Runtime], CudartError> {
        self.runtimes
            .get_or_init(|| Runtime::load_all(&self.options.cudart))
            .as_deref()
            .map_err(Clone::clone)
    }

    /// The package under test (`--package`), read and scanned once.
    pub(crate) fn package(&self) -> Result<&PackageUnderTest, PackageError> {
        self.package
            .get_or_init(|| PackageUnderTest::read(&self.options))
            .as_ref()
            .map_err(Clone::clone)
    }
}
