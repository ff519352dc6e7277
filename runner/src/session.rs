//! State shared by the checks of one run: the driver and runtime (loaded once, lazily,
//! from whichever check needs them first) and every check's outcome, for the report.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use crate::checks::Outcome;
use crate::cli::Options;
use crate::cuda::devices::{self, CudaDevice};
use crate::cuda::driver::{Driver, LIBCUDA};
use crate::cuda::runtime::Runtime;
use crate::manifest::ManifestState;

/// One run of the runner.
pub struct Session {
    /// The runner's flags.
    pub options: Options,
    /// The hook's manifest (or why there is none), read once at the start.
    pub manifest: ManifestState,
    driver: OnceLock<Result<Driver, String>>,
    init: OnceLock<Result<(), String>>,
    devices: OnceLock<Result<Vec<CudaDevice>, String>>,
    runtime: OnceLock<Result<Option<Runtime>, String>>,
    outcomes: Mutex<BTreeMap<String, Outcome>>,
}

impl Session {
    /// A session; the manifest is read now, nothing is loaded until a check asks.
    pub fn new(options: Options) -> Session {
        let manifest = ManifestState::load(options.manifest.as_deref(), options.no_manifest);
        Session {
            options,
            manifest,
            driver: OnceLock::new(),
            init: OnceLock::new(),
            devices: OnceLock::new(),
            runtime: OnceLock::new(),
            outcomes: Mutex::new(BTreeMap::new()),
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

    /// The driver after a successful `cuInit(0)`, or the one-line reason it failed.
    pub fn initialized(&self) -> Result<&Driver, String> {
        let driver = self.driver()?;
        self.init
            .get_or_init(|| driver.init())
            .clone()
            .map(|()| driver)
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

    /// The CUDA runtime: `Ok(None)` when none is loadable and `--cudart` was not given.
    pub fn runtime(&self) -> Result<Option<&Runtime>, String> {
        self.runtime
            .get_or_init(|| Runtime::load(self.options.cudart.as_deref()))
            .as_ref()
            .map(Option::as_ref)
            .map_err(Clone::clone)
    }

    /// Records a check's outcome for the report.
    pub fn record(&self, name: &str, outcome: Outcome) {
        let mut outcomes = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
        outcomes.insert(name.to_owned(), outcome);
    }

    /// Every recorded outcome, by check name.
    pub fn outcomes(&self) -> BTreeMap<String, Outcome> {
        self.outcomes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
