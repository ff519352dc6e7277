//! What the ELF lint ([`crate::facts::elf_lint`]) reports: its findings and notes, the JSON
//! document, the text and the exit status, in one place.

use serde::Serialize;
use std::path::PathBuf;

use crate::facts::gpu_code::{FileGpuCode, Target, TargetVerdict};
use crate::facts::runtime_scan::FoundRuntime;
use crate::facts::stub_libcuda::FoundStub;

/// What is wrong with one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// Needs libcuda but does not search the driver link.
    NoDriverLink,
    /// Searches the driver link before the compat directory.
    CompatAfterDriverLink,
    /// Searches the driver link but not the compat directory.
    CompatMissing,
    /// Searches a directory holding NVIDIA's stub libcuda (by its fingerprint, whatever the
    /// directory is called).
    StubsInSearchPath,
    /// A static CUDA library in the package or its closure.
    StaticCudaArchive,
    /// CUDA runtimes of different versions that one process would load (one dependency graph).
    MixedCudaRuntimes,
    /// GPU code with no kernel image for the target GPU (CUDA_ERROR_NO_BINARY_FOR_GPU, 209).
    NoKernelImage,
    /// GPU code whose only way onto the target GPU is PTX newer than the driver
    /// (CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222).
    PtxTooNew,
    /// GPU code whose image for the target is compressed in a way the driver cannot unpack.
    CompressionTooNew,
    /// GPU code whose cubin for the target comes from a toolkit of a newer major.
    CubinTooNew,
    /// A target GPU the driver's kernel module does not drive (too old a branch, or one that
    /// dropped it).
    GpuNotDriven,
    /// A file with GPU code whose CUDA runtime the driver cannot serve (35, or below the
    /// major's minimum driver).
    RuntimeTooNew,
    /// GPU code the rules cannot judge for the target (an ISA, GPU or floor beyond them).
    GpuCodeUnknown,
    /// A file that could not be read or parsed.
    Unreadable,
    /// A path given that cannot be judged: missing, empty, not ELF, or an archive the lint does
    /// not read (inside a directory such files are counted, not judged).
    CannotJudge,
}

/// One problem: the file, its kind, and one line of cause and fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The file concerned.
    pub(crate) file: PathBuf,
    /// What kind of problem.
    pub(crate) kind: FindingKind,
    /// One line: what is wrong and what to change.
    pub(crate) message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.message)
    }
}

/// The version of the lint's JSON document (`schema`; runner/README.md describes it). 2: the
/// schema, targets and driver echoed, versions as `"12.9"`, modules numbered from 1. 3:
/// `stub_libcuda`, the files that are NVIDIA's stub libcuda. 4: the `runs-partly` verdict, what
/// a module that cannot load `holds`, `loaded_by_the_program` for the `excuse` it replaces;
/// `notes` (`no-driver-link` outside the store), the `cannot-judge` finding, `targets_given`,
/// wheel members.
pub(crate) const LINT_SCHEMA: u32 = 4;

/// The lint's result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LintReport {
    /// [`LINT_SCHEMA`].
    pub(crate) schema: u32,
    /// The GPUs and driver the GPU code was judged for (none: listed, not judged).
    pub(crate) targets: Vec<Target>,
    /// The targets as given (`--target sm_90a` is judged as the 9.0 GPU of `targets`).
    pub targets_given: Vec<String>,
    /// Regular files looked at (a wheel's members counted one by one).
    pub(crate) files: usize,
    /// Symlinks not followed: they lead out of the paths given and the Nix store.
    pub(crate) links_not_followed: usize,
    /// ELF files among them.
    pub(crate) elf_files: usize,
    /// ELF files that load libcuda (DT_NEEDED, or a static CUDA runtime's `dlopen`) or search
    /// the driver link (the ones checked).
    pub(crate) libcuda_users: Vec<PathBuf>,
    /// Store paths whose runtime closure was searched for static archives.
    pub(crate) closure_of: Vec<PathBuf>,
    /// Every CUDA runtime found: shared libraries, archives, static copies in other ELF files.
    pub cuda_runtimes: Vec<FoundRuntime>,
    /// The files that are NVIDIA's stub libcuda, by its fingerprint (whatever they are called).
    pub stub_libcuda: Vec<FoundStub>,
    /// The GPU code of every file that has fat binaries, judged when a target was given.
    pub gpu_code: Vec<FileGpuCode>,
    /// Every problem found, in path order.
    pub findings: Vec<Finding>,
    /// What is worth knowing but changes no answer: `no-driver-link` outside the Nix store
    /// (and outside the package under test).
    pub notes: Vec<Finding>,
}

/// What a lint run answers, as its exit status. This is the one mapping: `lint --help`, the
/// README and runner/README.md list it. 101 and 134 stay Rust's panic and abort, so that no
/// answer can be taken for a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LintStatus {
    /// It runs on every target (or none was given), with nothing to fix; notes may be printed.
    Runs = 0,
    /// It runs, with findings: a packaging problem that matters (a stub libcuda in the search
    /// path, no driver link in a store path, a static CUDA archive, mixed runtimes, a file
    /// that cannot be read).
    Findings = 1,
    /// A path given cannot be judged (missing, empty, not ELF, an archive the lint does not
    /// read); bad usage exits 2 too.
    CannotJudge = 2,
    /// The rules cannot judge a file for a target (a GPU, ISA or driver beyond their tables):
    /// not a pass.
    Unknown = 3,
    /// A file cannot run on a target; this wins over every other answer.
    CannotRun = 4,
}

impl LintStatus {
    /// The exit status.
    pub fn code(self) -> u8 {
        self as u8
    }
}

impl LintReport {
    /// The run's answer from the files' verdicts and the findings: a file that cannot run on a
    /// target first, then a path that cannot be judged, then what the rules cannot judge, then
    /// any other finding. Notes change nothing.
    pub fn status(&self) -> LintStatus {
        let verdicts = || self.gpu_code.iter().flat_map(|code| &code.verdicts);
        if verdicts().any(TargetVerdict::fails) {
            LintStatus::CannotRun
        } else if self.cannot_judge().next().is_some() {
            LintStatus::CannotJudge
        } else if verdicts().any(TargetVerdict::unknown) {
            LintStatus::Unknown
        } else if self.findings.is_empty() {
            LintStatus::Runs
        } else {
            LintStatus::Findings
        }
    }

    /// One line summarising the run; with targets it restates how many files cannot run.
    pub fn summary(&self) -> String {
        let verdict = if self.targets.is_empty() {
            String::new()
        } else {
            let given = match self.targets_given.as_slice() {
                [] => String::new(),
                given => format!(" (--target {})", given.join(",")),
            };
            let cannot_run = self
                .gpu_code
                .iter()
                .filter(|f| f.verdicts.iter().any(TargetVerdict::fails));
            format!(
                "; {} file(s) cannot run on a target{given}",
                cannot_run.count()
            )
        };
        let notes = match self.notes.len() {
            0 => String::new(),
            n => format!(", {n} note(s)"),
        };
        let links = match self.links_not_followed {
            0 => String::new(),
            n => format!("; {n} symlink(s) out of the paths given and the store not followed"),
        };
        format!(
            "{} file(s), {} ELF, {} using libcuda, {} CUDA runtime(s), {} with GPU code; {} \
             finding(s){notes}{verdict}{links}",
            self.files,
            self.elf_files,
            self.libcuda_users.len(),
            self.cuda_runtimes.len(),
            self.gpu_code
                .iter()
                .filter(|f| !f.modules.is_empty())
                .count(),
            self.findings.len()
        )
    }

    /// The paths given that cannot be judged (`cannot-judge`): each is one line on stderr.
    pub fn cannot_judge(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.kind == FindingKind::CannotJudge)
    }

    /// The report as `lint` prints it: one line per file and target (the
    /// answer and its reason), the GPU code, runtimes and stubs found, the findings (but those
    /// of [`LintReport::cannot_judge`], which go to stderr), the notes, and the summary.
    pub fn write_text(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        for code in &self.gpu_code {
            let name = code.file.file_name().unwrap_or(code.file.as_os_str());
            if code.verdicts.is_empty() {
                writeln!(out, "{}: {}", name.to_string_lossy(), code.summary)?;
            }
            for v in &code.verdicts {
                writeln!(out, "{}: {}", name.to_string_lossy(), v.reason)?;
            }
        }
        for code in &self.gpu_code {
            writeln!(out, "gpu code: {}: {}", code.file.display(), code.summary)?;
        }
        for runtime in &self.cuda_runtimes {
            writeln!(
                out,
                "cuda runtime: {} ({}, {})",
                runtime.file.display(),
                runtime.form.name(),
                runtime.version_text()
            )?;
        }
        for stub in &self.stub_libcuda {
            writeln!(out, "stub libcuda: {}: {}", stub.file.display(), stub.stub)?;
        }
        for finding in &self.findings {
            if finding.kind != FindingKind::CannotJudge {
                writeln!(out, "{finding}")?;
            }
        }
        for note in &self.notes {
            writeln!(out, "note: {note}")?;
        }
        writeln!(out, "lint: {}", self.summary())
    }
}
