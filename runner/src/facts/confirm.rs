//! `cuda-sandbox-check gpu-confirm [--cudart LIB] [FILE...]`: on a GPU, what the rules predict
//! beside what the driver and the runtime do, so that the verdicts a GPU can confirm are
//! confirmed on one (`tests-gpu/device-check` runs it):
//!
//! 1. with `--cudart`, the modules `--register` names (hand-built by
//!    [`crate::facts::module_images`]) are registered with the runtime before a saxpy module,
//!    as a program linked with them registers them, and saxpy is launched through the runtime:
//!    `kernelless`, a module nothing can launch (an sm_52 cubin with no kernel, as NVIDIA's
//!    cuFFT 11.4 ships one); `sm80-only`, a module whose one kernel has SASS for sm_80 alone;
//!    `managed`, a module of one managed variable with SASS for sm_52 alone. Under
//!    `CUDA_MODULE_LOADING=EAGER` (every registered module loaded when the context is made) a
//!    runtime that trips on a module fails the first call; under `LAZY` only a launch from it
//!    would, except for modules with managed variables, which load at start in both modes. The
//!    rules say the first two leave the rest running (listed, or "runs, partly"): saxpy must run
//!    in both modes. For `managed` they say "unknown": the answer is reported, not compared.
//! 2. for each FILE, the verdict for GPU 0 and the loaded driver, and each module the file's
//!    verdict rests on loaded with `cuModuleLoadDataEx`: the driver's CUresult beside the
//!    rules' prediction (SASS or JIT: 0; no kernel image: 209; PTX too new: 222). Modules of
//!    PTX alone are skipped (counted); other modules to JIT are loaded up to `--jit-limit`
//!    (compiling them takes time); modules listed and not judged (neither a kernel nor a
//!    managed variable) are loaded too and their answer shown, not compared.
//!
//! Exit status: 0 every prediction held and the runtime ran saxpy, 101 one did not, 2 no GPU
//! or bad usage. The report is one JSON document on stdout.

use std::path::{Path, PathBuf};

use clap::Parser;
use cuda_sandbox_elfkit::fatbin::rules::{Driver as RulesDriver, Load};
use cuda_sandbox_elfkit::fatbin::verdict::FileVerdict;
use cuda_sandbox_elfkit::fatbin::{EntryKind, Purpose};
use cuda_sandbox_elfkit::map::Mapped;
use cuda_sandbox_manifest::versions::{cuda_for_driver, kernel_module_version};
use serde::Serialize;

use crate::cuda::devices;
use crate::cuda::driver::Driver;
use crate::cuda::gpu::{GpuError, Module, PrimaryContext};
use crate::cuda::registration::{register_and_launch, Registered, RegistrationRun};
use crate::facts::access::KERNEL_MODULE_FILE;
use crate::facts::gpu_code::{judge_all, runtime_uses, Rule, Target};
use crate::facts::module_images::{
    kernelless_sm52_fatbin, managed_sm52_fatbin, saxpy_fatbin, sm80_only_fatbin,
};
use crate::facts::package_under_test::STORE_DIR;
use crate::facts::provenance::Provenance;
use crate::facts::runtime_scan::gpu_code_and_runtime;

/// `cuda-sandbox-check gpu-confirm`.
#[derive(Debug, Parser)]
#[command(
    name = "cuda-sandbox-check gpu-confirm",
    about = "On a GPU: registers a module with no kernel before a saxpy module with the CUDA \
             runtime given and launches saxpy (run it under CUDA_MODULE_LOADING=EAGER and \
             LAZY), then loads the modules of each FILE with the driver and compares the \
             answers with the rules' verdict for this GPU and driver.",
    after_help = "Exit status: 0 every prediction held, 101 one did not, 2 no GPU or bad usage."
)]
pub struct ConfirmCli {
    /// Files whose GPU code to load (their verdict for this GPU is what is confirmed).
    #[arg(value_name = "FILE")]
    pub(crate) files: Vec<PathBuf>,

    /// A CUDA runtime (libcudart.so) to register the hand-built modules with.
    #[arg(long, value_name = "LIB")]
    pub(crate) cudart: Option<PathBuf>,

    /// Load at most this many modules that need JIT per file (the driver compiles each: one
    /// of libcusparseLt.so.0's took 100 s on an H200; 0 loads none).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub(crate) jit_limit: usize,

    /// A hand-built module to register before saxpy (repeatable; default: kernelless).
    #[arg(long = "register", value_name = "MODULE", value_enum)]
    pub(crate) register: Vec<HandBuilt>,
}

/// The hand-built modules `--register` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HandBuilt {
    /// No kernel, no data: an sm_52 cubin as NVIDIA's cuFFT 11.4 ships one.
    Kernelless,
    /// One kernel with SASS for sm_80 alone.
    Sm80Only,
    /// One managed variable, SASS for sm_52 alone.
    Managed,
}

impl HandBuilt {
    /// The module, as the runtime is handed it.
    fn registered(self) -> Registered {
        use crate::facts::module_images::{MANAGED_VARIABLE, SM80_KERNEL};
        let name = |n: &str| -> &'static std::ffi::CStr {
            let owned = std::ffi::CString::new(n).expect("a name without NUL");
            Box::leak(owned.into_boxed_c_str())
        };
        let (image, kernel, managed) = match self {
            HandBuilt::Kernelless => (kernelless_sm52_fatbin(), None, None),
            HandBuilt::Sm80Only => (sm80_only_fatbin(), Some(name(SM80_KERNEL)), None),
            HandBuilt::Managed => (
                managed_sm52_fatbin(),
                None,
                Some((name(MANAGED_VARIABLE), 4)),
            ),
        };
        Registered {
            image,
            kernel,
            managed,
        }
    }
}

/// One module loaded by the driver.
#[derive(Debug, Clone, Serialize)]
pub struct LoadedModule {
    /// Its index in the file (from 0, as the JSON of `lint` numbers them).
    pub(crate) module: usize,
    /// What the rules predict: `sass`, `jit`, `209`, `222`, `unpack`, or `not judged`.
    pub(crate) predicted: &'static str,
    /// The CUresult of `cuModuleLoadDataEx`.
    pub(crate) driver: i32,
    /// Whether they agree (`None` for a module not judged).
    pub(crate) agrees: Option<bool>,
}

/// One file: its verdict here, and the modules loaded.
#[derive(Debug, Clone, Serialize)]
pub struct ConfirmedFile {
    /// The file.
    pub(crate) file: PathBuf,
    /// The verdict for this GPU and driver.
    pub(crate) verdict: FileVerdict,
    /// Its rule.
    pub(crate) rule: Rule,
    /// In words.
    pub(crate) reason: String,
    /// Every module loaded.
    pub(crate) modules: Vec<LoadedModule>,
    /// Modules to JIT not loaded (over `--jit-limit`).
    pub(crate) jit_not_loaded: usize,
    /// Modules of PTX alone, not loaded.
    pub(crate) ptx_only_skipped: usize,
}

/// The report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ConfirmReport {
    /// GPU 0 and the loaded driver, as the rules judge them; `None` without a GPU.
    pub(crate) target: Option<Target>,
    /// Why there is no GPU to confirm on, when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) no_gpu: Option<String>,
    /// The hand-built modules registered before saxpy.
    pub(crate) registered: Vec<HandBuilt>,
    /// The runtime run, with `--cudart`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) registration: Option<RegistrationRun>,
    /// Why the runtime given could not be used at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) registration_error: Option<String>,
    /// Each file.
    pub(crate) files: Vec<ConfirmedFile>,
    /// Predictions the driver or the runtime did not bear out.
    pub(crate) disagreements: Vec<String>,
}

impl ConfirmReport {
    /// What `gpu-confirm` found, as its exit status: 0 every prediction held, 101 one did not
    /// (listed in the report), 2 there is no GPU to confirm on (the runtime's part may have
    /// run).
    pub fn status(&self) -> u8 {
        match (&self.no_gpu, self.disagreements.is_empty()) {
            (Some(_), _) => 2,
            (None, true) => 0,
            (None, false) => 101,
        }
    }
}

/// GPU 0's capability and the loaded driver (its kernel module's CUDA version from
/// `/proc/driver/nvidia/version`), with GPU 0's primary context.
fn this_gpu(driver: &Driver) -> Result<(Target, PrimaryContext<'_>), String> {
    driver.init().map_err(|e| e.to_string())?;
    let list = devices::list(driver).map_err(|e| e.to_string())?;
    let first = list.first().ok_or("the driver reports no GPU")?;
    let device = first.compute_capability;
    let cuda = driver.version().map_err(|e| e.to_string())?;
    let kernel = std::fs::read_to_string(KERNEL_MODULE_FILE)
        .ok()
        .and_then(|t| kernel_module_version(&t))
        .and_then(|v| cuda_for_driver(&v))
        .unwrap_or(cuda);
    let context = PrimaryContext::retain(driver, 0).map_err(|e| e.to_string())?;
    let driver = RulesDriver {
        cuda,
        kernel,
        version: None,
    };
    Ok((Target::new(device, driver, false), context))
}

/// Runs `gpu-confirm`: the report ([`ConfirmReport::status`] says what it found). An error is
/// a FILE that cannot be read.
pub fn confirm(cli: &ConfirmCli) -> Result<ConfirmReport, String> {
    let mut disagreements = Vec::new();
    let registered = if cli.register.is_empty() {
        vec![HandBuilt::Kernelless]
    } else {
        cli.register.clone()
    };
    // The rules predict saxpy runs beside modules without code for the GPU, except where one
    // holds a managed variable: then they say "unknown", and the answer is only reported.
    let predicted = !registered.contains(&HandBuilt::Managed);
    let mut report = ConfirmReport {
        registered,
        ..ConfirmReport::default()
    };
    // The runtime first, before this process touches the driver itself.
    if let Some(cudart) = &cli.cudart {
        let modules = report.registered.iter().map(|m| m.registered()).collect();
        match register_and_launch(cudart, modules, saxpy_fatbin()) {
            Ok(run) => {
                let ok = run.first_call == 0
                    && run.launch == Some(0)
                    && run.synchronize == Some(0)
                    && run.wrong_elements == Some(0);
                if !ok && predicted {
                    disagreements.push(format!(
                        "the runtime did not run saxpy beside registered modules without code \
                         for this GPU ({:?}, CUDA_MODULE_LOADING={}): {run:?}; the rules' \
                         \"runs, partly\" (and listing of modules with no kernel) does not \
                         hold there",
                        report.registered,
                        run.module_loading.as_deref().unwrap_or("unset")
                    ));
                }
                report.registration = Some(run);
            }
            Err(why) => {
                disagreements.push(format!("the runtime could not be used: {why}"));
                report.registration_error = Some(why);
            }
        }
    }
    let driver = Driver::load().map_err(|e| e.to_string());
    let (target, context) = match driver.as_ref().map_err(Clone::clone).and_then(this_gpu) {
        Ok(found) => found,
        // Without a GPU, the runtime's part alone (its disagreements are not reported).
        Err(why) => {
            report.no_gpu = Some(why);
            return Ok(report);
        }
    };
    for path in &cli.files {
        let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let map = Mapped::of(&file).map_err(|e| format!("{}: {e}", path.display()))?;
        let data = map.bytes();
        let (code, runtime) = gpu_code_and_runtime(path, data);
        let code = code.map_err(|e| format!("{}: {e}", path.display()))?;
        let dynamic = cuda_sandbox_elfkit::dynamic_info(data).ok().flatten();
        let uses = runtime_uses(dynamic.as_ref(), runtime.as_ref());
        let soname = dynamic.as_ref().and_then(|d| d.soname.as_deref());
        let provenance = Provenance::of(path, soname, Path::new(STORE_DIR));
        let Some(verdict) = judge_all(&code, data, &uses, provenance, &[target]).pop() else {
            continue; // one verdict per target: never
        };
        let mut modules = Vec::new();
        let mut jits = 0;
        let mut ptx_only_skipped = 0;
        for (i, c) in code.containers.iter().enumerate() {
            if c.purpose != Purpose::Loadable {
                continue;
            }
            if !c.entries.iter().any(|e| e.kind == EntryKind::Sass) {
                ptx_only_skipped += 1;
                continue;
            }
            let image = &data[c.offset as usize..(c.offset + c.size) as usize];
            let judged = verdict.judgement.modules.iter().find(|m| m.module == i);
            // What the rules predict, and the CUresult that bears it out.
            let (predicted, wanted) = match judged.map(|m| &m.load) {
                None => ("not judged", None),
                Some(Load::Sass { .. }) => ("sass", Some(0)),
                Some(Load::Jit { .. }) => ("jit", Some(0)),
                Some(Load::NoBinaryForGpu) => ("209", Some(209)),
                Some(Load::UnsupportedPtx { .. }) => ("222", Some(222)),
                Some(Load::CompressionTooNew { .. }) => ("unpack", None),
                Some(_) => ("unknown", None),
            };
            if predicted == "jit" {
                jits += 1;
                if jits > cli.jit_limit {
                    continue;
                }
            }
            let got = match Module::load_image(&context, image) {
                Ok(_) => 0,
                Err(GpuError::Driver(crate::cuda::driver::DriverError::Call(e))) => e.code,
                Err(_) => -1,
            };
            let agrees = wanted.map(|w| w == got);
            if agrees == Some(false) {
                disagreements.push(format!(
                    "{} module {i}: the rules predict {predicted}, the driver answered {got}",
                    path.display()
                ));
            }
            modules.push(LoadedModule {
                module: i,
                predicted,
                driver: got,
                agrees,
            });
        }
        report.files.push(ConfirmedFile {
            file: path.clone(),
            verdict: verdict.verdict,
            rule: verdict.rule,
            reason: verdict.reason,
            modules,
            jit_not_loaded: jits.saturating_sub(cli.jit_limit),
            ptx_only_skipped,
        });
    }
    report.target = Some(target);
    report.disagreements = disagreements;
    Ok(report)
}
