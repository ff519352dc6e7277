//! The ELF lint: does a package find the driver the hook exposes?
//!
//! nixpkgs binaries find `libcuda.so.1` through DT_RUNPATH `/run/opengl-driver/lib` (added by
//! `autoAddDriverRunpath`), and on Jetson a `cuda_compat` directory must come *before* that link
//! or the host's older libcuda wins: the loader takes the first `libcuda.so.1` on the search
//! path (ld.so(8)), and NVIDIA's forward compatibility works only when the compat libcuda is the
//! one loaded (CUDA Compatibility guide). For each ELF file that needs `libcuda`, holds a static
//! CUDA runtime (which `dlopen`s `libcuda.so.1`, searching the calling file's own DT_RUNPATH),
//! or carries the driver link in its search path, the lint checks:
//! - the driver link is in DT_RUNPATH (DT_RPATH when the file has no DT_RUNPATH);
//! - with a compat directory, it is there and comes before the driver link;
//! - no directory there holds NVIDIA's stub libcuda, recognised by what it is, whatever the
//!   directory is called ([`crate::facts::stub_libcuda`]; loaded at run time, it makes every driver
//!   call fail with CUDA_ERROR_STUB_LIBRARY, 34). A package's own stub files are listed.
//!
//! With target GPUs and a driver ([`LintConfig::targets`]) it also judges every file's GPU code
//! for each target, by the one judgment `package::gpu_code` makes too ([`crate::facts::gpu_code`]): a
//! file that cannot run there is a finding naming the rule, the module, what it carries, what
//! the GPU needs and the fix; one the rules cannot judge is a finding of its own kind (and its
//! own exit status). Without a target the GPU code is listed, not judged.
//!
//! It also reports static archives of CUDA libraries (`libcudart_static.a`, `libcublas_static.a`,
//! …) shipped in the package, or, with `closure`, anywhere in the runtime closure of the store
//! paths given, and lists the GPU code of each archive member (link input, as cuobjdump lists
//! it). Files are walked by [`crate::facts::walk`] (symlinks into the store or within the paths given followed, each file once); ELF reading, store paths and
//! closures are [`cuda_sandbox_elfkit`]'s, shared with the hook.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cuda_sandbox_elfkit::fatbin::read_gpu_code;
use cuda_sandbox_elfkit::map::Mapped;
use cuda_sandbox_elfkit::stub::stub_libcuda;
use cuda_sandbox_elfkit::{dynamic_info, normalize, requisites, store_path_of};

use crate::facts::gpu_code::{examine, runtime_uses, Rule, Target};
use crate::facts::mixing::{mixed_processes, Root};
use crate::facts::provenance::Provenance;
use crate::facts::runtime_scan::{gpu_code_and_runtime, runtime_in, RuntimeForm};
use crate::facts::stub_libcuda::{stubs_in_search_path, FoundStub};
use crate::facts::walk::{resolve, walk};
use crate::facts::wheel;

/// What the lint expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LintConfig {
    /// The driver link every libcuda user must search (`/run/opengl-driver/lib`).
    pub(crate) driver_link: PathBuf,
    /// A compat directory that must come before the driver link, when compat is in use.
    pub(crate) compat_dir: Option<PathBuf>,
    /// Also look for static CUDA archives in the runtime closure of the store paths given.
    pub(crate) closure: bool,
    /// The Nix store directory (store paths and their closures).
    pub(crate) store_dir: PathBuf,
    /// The GPUs and driver to judge the files' GPU code for; none lists it without judging.
    pub(crate) targets: Vec<Target>,
    /// The paths given are the package under test (`--lint` in a check run): a missing driver
    /// link is a finding wherever they lie. Otherwise it is one only in the Nix store, and a
    /// note elsewhere (a pip wheel's `$ORIGIN` search path is normal outside Nix).
    pub(crate) under_test: bool,
    /// The targets as given (`sm_90a`), echoed in the report.
    pub(crate) targets_given: Vec<String>,
}

impl LintConfig {
    /// The defaults: the NixOS driver link, no compat, no closure walk.
    pub fn new(driver_link: impl Into<PathBuf>) -> LintConfig {
        LintConfig {
            driver_link: driver_link.into(),
            compat_dir: None,
            closure: false,
            store_dir: PathBuf::from("/nix/store"),
            targets: Vec::new(),
            under_test: false,
            targets_given: Vec::new(),
        }
    }
}

pub(crate) use crate::facts::lint_report::LINT_SCHEMA;
pub use crate::facts::lint_report::{Finding, FindingKind, LintReport, LintStatus};

pub(crate) use cuda_sandbox_elfkit::DynamicInfo;

/// Library name prefixes (after `lib`, lower case) of the CUDA toolkit's libraries.
pub(crate) const CUDA_LIBRARY_PREFIXES: &[&str] = &[
    "cuda", // cudart_static, cudadevrt, cuda (the stub)
    "cublas",
    "cufft",
    "curand",
    "cusparse",
    "cusolver",
    "cutensor",
    "cudnn",
    "culibos",
    "cupti",
    "nvrtc",
    "nvjitlink",
    "nvptxcompiler",
    "nvjpeg",
    "npp",
    "nccl",
];

/// Whether `name` is a static archive of a CUDA library (`libcudart_static.a`, `libnppc.a`).
pub(crate) fn is_static_cuda_archive(name: &str) -> bool {
    let Some(stem) = name.strip_prefix("lib").and_then(|n| n.strip_suffix(".a")) else {
        return false;
    };
    let stem = stem.to_ascii_lowercase();
    CUDA_LIBRARY_PREFIXES.iter().any(|p| stem.starts_with(p))
}

/// How an ELF file loads libcuda, when it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LibcudaUse {
    /// `libcuda.so*` in its DT_NEEDED.
    Needed,
    /// It holds a static CUDA runtime, which `dlopen`s `libcuda.so.1`: glibc searches the
    /// DT_RUNPATH of the object that calls `dlopen` (this file), not the program's
    /// (`_dl_map_object` with the caller's link map as loader; ld.so(8)).
    StaticRuntime,
}

impl LibcudaUse {
    /// How `info`'s file loads libcuda: DT_NEEDED first, else through a static runtime it holds.
    pub(crate) fn of(info: &DynamicInfo, holds_static_runtime: bool) -> Option<LibcudaUse> {
        if info.needs_libcuda() {
            Some(LibcudaUse::Needed)
        } else {
            holds_static_runtime.then_some(LibcudaUse::StaticRuntime)
        }
    }
}

/// The findings for one ELF file's dynamic section, given how it loads libcuda; `None` when it
/// neither loads libcuda nor searches the driver link (it is no libcuda user).
pub(crate) fn check_elf(
    file: &Path,
    info: &DynamicInfo,
    uses: Option<LibcudaUse>,
    config: &LintConfig,
) -> Option<Vec<Finding>> {
    let (search, tag) = info.search_path();
    // Search-path entries compare with the driver link or compat directory as directories:
    // absolute entries normalised ([`normalize`]), others (relative, `$ORIGIN/…`) never equal.
    let position = |dir: &Path| {
        let entry_is = |e: &String| Path::new(e).is_absolute() && normalize(Path::new(e)) == dir;
        search.iter().position(entry_is)
    };
    let link = normalize(&config.driver_link);
    let link_at = position(&link);
    if uses.is_none() && link_at.is_none() {
        return None;
    }
    let shown = format!("{tag} [{}]", search.join(":"));
    let finding = |kind, message| finding(file, kind, message);
    let mut out = Vec::new();
    if link_at.is_none() {
        let how = match uses {
            Some(LibcudaUse::StaticRuntime) => {
                "holds a static CUDA runtime, which dlopens libcuda.so.1 through this file's own \
                 search path (glibc searches the calling object's), but"
            }
            _ => "needs libcuda but",
        };
        out.push(finding(
            FindingKind::NoDriverLink,
            format!(
                "{how} {shown} lacks the driver link {}: inside the sandbox (and on NixOS) the \
                 loader cannot find the driver; add it to DT_RUNPATH (nixpkgs: \
                 autoAddDriverRunpath)",
                link.display()
            ),
        ));
    }
    if let Some(compat) = &config.compat_dir {
        let compat = normalize(compat);
        match (position(&compat), link_at) {
            (Some(c), Some(l)) if c > l => out.push(finding(
                FindingKind::CompatAfterDriverLink,
                format!(
                    "{shown} has the driver link {} before the compat directory {}: the host's \
                     older libcuda loads and the compat driver is ignored; put the compat \
                     directory first",
                    link.display(),
                    compat.display()
                ),
            )),
            (None, _) => out.push(finding(
                FindingKind::CompatMissing,
                format!(
                    "{shown} lacks the compat directory {}: the host's older libcuda loads from \
                     the driver link; add the compat directory before {}",
                    compat.display(),
                    link.display()
                ),
            )),
            _ => {}
        }
    }
    for (entry, found) in stubs_in_search_path(file, info, &config.store_dir) {
        out.push(finding(
            FindingKind::StubsInSearchPath,
            format!(
                "{tag} entry {entry} holds {}, {}: loaded at run time instead of the driver, it \
                 makes every driver call fail; it is for linking only, remove {entry} from {tag}",
                found.file.display(),
                found.stub
            ),
        ));
    }
    Some(out)
}

fn archive_finding(file: &Path, closure_of: Option<&Path>) -> Finding {
    let place = match closure_of {
        Some(root) => format!("in the runtime closure of {}", root.display()),
        None => "in the package".to_string(),
    };
    finding(
        file,
        FindingKind::StaticCudaArchive,
        format!(
            "static CUDA library {place}: it is needed only to link, makes the runtime closure \
             carry the toolkit, and binaries linked with it embed their own CUDA version; move \
             it to a separate output (e.g. \"static\") or delete it"
        ),
    )
}

/// What a file is, from its first bytes.
pub(crate) enum Contents {
    /// An ELF file.
    Elf,
    /// A bare fat binary (`.fatbin`), loaded with `cuModuleLoad` at run time.
    Fatbin,
    /// A `.a` archive: its members' GPU code is listed, as input for a link.
    Archive,
    /// A zip file: read when it is a wheel ([`wheel::is_wheel`]).
    Zip,
    /// Anything else.
    Other,
}

impl Contents {
    /// What `bytes` (a file's first bytes) are.
    fn of(bytes: &[u8]) -> Contents {
        match bytes {
            [0x7f, b'E', b'L', b'F', ..] => Contents::Elf,
            [0x50, 0xed, 0x55, 0xba, ..] => Contents::Fatbin,
            [b'!', b'<', b'a', b'r', b'c', b'h', b'>', b'\n', ..] => Contents::Archive,
            [b'P', b'K', 3, 4, ..] => Contents::Zip,
            _ => Contents::Other,
        }
    }
}

/// Maps a file (mapped, not read: GPU code is listed from its header pages alone) and says
/// what it is; an empty file is none of them.
pub(crate) fn map_file(path: &Path) -> std::io::Result<Option<(Mapped, Contents)>> {
    let file = std::fs::File::open(path)?;
    if file.metadata()?.len() < 4 {
        return Ok(None);
    }
    let map = Mapped::of(&file)?;
    let kind = Contents::of(map.bytes());
    Ok(Some((map, kind)))
}

/// Whether `path` lies in the Nix store, by its own path or by its real path.
fn in_store(path: &Path, store_dir: &Path) -> bool {
    store_path_of(path, store_dir).is_some()
        || std::fs::canonicalize(path).is_ok_and(|real| {
            store_path_of(&real, store_dir).is_some()
                || std::fs::canonicalize(store_dir).is_ok_and(|s| real.starts_with(s))
        })
}

/// A finding of `kind` about `file`.
fn finding(file: &Path, kind: FindingKind, message: String) -> Finding {
    Finding {
        file: file.to_path_buf(),
        kind,
        message,
    }
}

/// Lints `paths` (files or directories; symlinks followed as [`crate::facts::walk`] says; wheels
/// read member by member). A path given that cannot be judged is a `cannot-judge` finding.
pub fn lint(paths: &[PathBuf], config: &LintConfig) -> LintReport {
    let mut report = LintReport {
        schema: LINT_SCHEMA,
        targets: config.targets.clone(),
        targets_given: config.targets_given.clone(),
        ..LintReport::default()
    };
    let mut roots = Vec::new();
    for path in paths {
        match resolve(path) {
            Ok(root) => roots.push(root),
            Err(e) => report.findings.push(finding(
                path,
                FindingKind::CannotJudge,
                format!("cannot be judged: {}", e.why),
            )),
        }
    }
    let walked = walk(&roots, &config.store_dir);
    for e in walked.errors {
        report
            .findings
            .push(finding(&e.path, FindingKind::Unreadable, e.why));
    }
    for ((root, n), links) in roots
        .iter()
        .zip(&walked.per_root)
        .zip(&walked.links_not_followed)
    {
        if *n == 0 {
            let links = match links {
                0 => String::new(),
                n => format!(
                    ": {n} symlink(s) in it lead out of the paths given and the Nix store, and \
                     are not followed (name their targets to judge them)"
                ),
            };
            report.findings.push(finding(
                root,
                FindingKind::CannotJudge,
                format!("holds no file to judge (nothing to judge is not a pass){links}"),
            ));
        }
    }
    report.links_not_followed = walked.links_not_followed.iter().sum();
    let mut seen: BTreeSet<PathBuf> = walked.files.iter().cloned().collect();
    let mut graph_roots = Vec::new();
    for file in &walked.files {
        let named = roots.contains(file);
        graph_roots.extend(lint_file(file, named, config, &mut report));
    }
    // With `closure`, the static CUDA archives in the runtime closure of each store path given.
    let stored: BTreeSet<PathBuf> = roots
        .iter()
        .filter(|_| config.closure)
        .filter_map(|p| store_path_of(p, &config.store_dir))
        .collect();
    for root in stored {
        match requisites(Path::new("nix-store"), &root) {
            Ok(members) => {
                let archives = members
                    .iter()
                    .filter(|m| **m != root)
                    .flat_map(|m| walkdir::WalkDir::new(m).sort_by_file_name())
                    .filter_map(Result::ok)
                    .filter(|e| e.file_type().is_file())
                    .filter(|e| is_static_cuda_archive(&e.file_name().to_string_lossy()))
                    .filter(|e| seen.insert(e.path().to_path_buf()))
                    .map(|e| archive_finding(e.path(), Some(&root)));
                report.findings.extend(archives);
            }
            Err(why) => report.findings.push(finding(
                &root,
                FindingKind::Unreadable,
                format!("its runtime closure is unknown: {why}"),
            )),
        }
        report.closure_of.push(root);
    }
    report.findings.extend(mixed_processes(
        &graph_roots,
        &report.cuda_runtimes,
        &config.store_dir,
    ));
    report
}

/// Lints one file into `report` (`named`: a path given, not one found in a directory: what
/// cannot be judged is then a `cannot-judge` finding, not a file counted and skipped); an ELF
/// file with a dynamic section is returned as the root of a dependency graph
/// ([`crate::facts::mixing`]).
fn lint_file(
    path: &Path,
    named: bool,
    config: &LintConfig,
    report: &mut LintReport,
) -> Option<Root> {
    report.files += 1;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let archive = is_static_cuda_archive(&name);
    if archive {
        report.cuda_runtimes.extend(runtime_in(path, None, &[]));
        report.findings.push(archive_finding(path, None));
    }
    // A path given that cannot be judged is a `cannot-judge` finding; inside a directory, a
    // file that cannot be read is `unreadable`, and one the lint does not read is counted only.
    // Such a file is no root of a dependency graph.
    let cannot_judge = |report: &mut LintReport, unreadable: bool, why: String| {
        if named || unreadable {
            let kind = match named {
                true => FindingKind::CannotJudge,
                false => FindingKind::Unreadable,
            };
            report.findings.push(finding(path, kind, why));
        }
        None
    };
    let (map, contents) = match map_file(path) {
        Ok(Some(found)) => found,
        Ok(None) => return cannot_judge(report, false, "is empty: nothing to judge".into()),
        Err(e) => return cannot_judge(report, true, format!("cannot be read: {e}")),
    };
    let why = match contents {
        Contents::Elf | Contents::Fatbin | Contents::Archive => {
            return lint_bytes(path, map.bytes(), contents, config, report)
        }
        Contents::Zip if wheel::is_wheel(path) => {
            report.files -= 1;
            let read = wheel::each_binary_member(path, |member, data| {
                lint_bytes(member, data, Contents::of(data), config, report);
            });
            match read {
                Ok(members) => report.files += members,
                Err(e) => return cannot_judge(report, true, e.to_string()),
            }
            // Its members are not on disk: no dependency graph to follow.
            return None;
        }
        Contents::Zip => "is a zip file, not a wheel (.whl): unzip it and name the directory",
        Contents::Other if wheel::is_wheel(path) => {
            "cannot be read as a wheel (a zip file): it does not start with a zip header"
        }
        Contents::Other if !archive => {
            "is not an ELF file, a fat binary, an ar archive (.a) or a wheel (.whl): nothing to \
             judge (unpack an archive and name the directory)"
        }
        Contents::Other => return None,
    };
    cannot_judge(report, false, why.into())
}

/// Lints the bytes of one ELF file, fat binary or archive (`path`: a file, or a wheel's member)
/// into `report`; an ELF file with a dynamic section is returned as the root of a dependency
/// graph.
fn lint_bytes(
    path: &Path,
    data: &[u8],
    contents: Contents,
    config: &LintConfig,
    report: &mut LintReport,
) -> Option<Root> {
    let (code, runtime, dynamic) = match contents {
        Contents::Elf => {
            report.elf_files += 1;
            // The GPU code and the runtime's strings in one pass, not inside the containers.
            let (code, runtime) = gpu_code_and_runtime(path, data);
            (code, runtime, dynamic_info(data))
        }
        // An archive's members are link input, listed per member as cuobjdump lists them.
        Contents::Fatbin | Contents::Archive => (read_gpu_code(data), None, Ok(None)),
        Contents::Zip | Contents::Other => return None,
    };
    let holds_static_runtime = runtime
        .as_ref()
        .is_some_and(|r| r.form == RuntimeForm::StaticCopy);
    let info = dynamic.as_ref().ok().and_then(Option::as_ref);
    let uses = runtime_uses(info, runtime.as_ref());
    report.cuda_runtimes.extend(runtime);
    let soname = info.and_then(|d| d.soname.as_deref());
    let provenance = Provenance::of(path, soname, &config.store_dir);
    let mut root = None;
    match dynamic {
        Ok(Some(info)) => {
            if info.soname.as_deref() == Some("libcuda.so.1") {
                if let Some(stub) = stub_libcuda(data) {
                    report.stub_libcuda.push(FoundStub {
                        file: path.to_path_buf(),
                        stub,
                    });
                }
            }
            root = Some(Root {
                path: path.to_path_buf(),
                interpreter: info.interpreter.clone(),
            });
            let uses = LibcudaUse::of(&info, holds_static_runtime);
            let findings = check_elf(path, &info, uses, config);
            if findings.is_some() {
                report.libcuda_users.push(path.to_path_buf());
            }
            // Outside the store, no driver link is how pip and others ship (`$ORIGIN`): a note.
            let noted = !config.under_test && !in_store(path, &config.store_dir);
            for f in findings.into_iter().flatten() {
                if noted && f.kind == FindingKind::NoDriverLink {
                    report.notes.push(f);
                } else {
                    report.findings.push(f);
                }
            }
        }
        Ok(None) => {}
        Err(e) => report
            .findings
            .push(finding(path, FindingKind::Unreadable, e.to_string())),
    }
    // The GPU code, judged for each target: a file that cannot run on one, or that the rules
    // cannot judge for one, is a finding (one per target).
    match code.map(|code| examine(path, data, code, &uses, provenance, &config.targets)) {
        Ok(Some(found)) => {
            for v in &found.verdicts {
                if let Some(kind) = finding_kind(v.rule).filter(|_| v.fails() || v.unknown()) {
                    report.findings.push(finding(path, kind, v.reason.clone()));
                }
            }
            report.gpu_code.push(found);
        }
        Ok(None) => {}
        Err(e) => report.findings.push(finding(
            path,
            FindingKind::Unreadable,
            format!("its GPU code cannot be read: {e}"),
        )),
    }
    root
}

/// The finding kind of a verdict's rule, when the verdict is a finding.
fn finding_kind(rule: Rule) -> Option<FindingKind> {
    Some(match rule {
        Rule::NoKernelImage | Rule::SassOnlyOnZluda => FindingKind::NoKernelImage,
        Rule::PtxTooNew => FindingKind::PtxTooNew,
        Rule::CompressionTooNew => FindingKind::CompressionTooNew,
        Rule::CubinTooNew => FindingKind::CubinTooNew,
        Rule::DriverPredatesGpu | Rule::DriverDroppedGpu => FindingKind::GpuNotDriven,
        Rule::RuntimeNewerMajor | Rule::RuntimeBelowFloor => FindingKind::RuntimeTooNew,
        Rule::GpuRenamed
        | Rule::GpuUnknown
        | Rule::DriverUnknown
        | Rule::RuntimeFloorUnknown
        | Rule::ModuleUnknown
        | Rule::MissingModuleUnknown => FindingKind::GpuCodeUnknown,
        Rule::Sass
        | Rule::Jit
        | Rule::SomeModulesDoNotLoad
        | Rule::NothingToLoad
        | Rule::LinkInput => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(needed: &[&str], runpath: Option<&str>) -> DynamicInfo {
        DynamicInfo {
            needed: needed.iter().map(|s| s.to_string()).collect(),
            runpath: runpath.map(|r| r.split(':').map(String::from).collect()),
            ..DynamicInfo::default()
        }
    }

    fn kinds(info: &DynamicInfo, compat: Option<&str>) -> Vec<FindingKind> {
        let mut config = LintConfig::new("/run/opengl-driver/lib");
        config.compat_dir = compat.map(PathBuf::from);
        check_elf(Path::new("f"), info, LibcudaUse::of(info, false), &config)
            .into_iter()
            .flatten()
            .map(|f| f.kind)
            .collect()
    }

    #[test]
    fn libcuda_users_need_the_driver_link() {
        let ok = info(
            &["libcuda.so.1"],
            Some("/run/opengl-driver/lib/:/nix/store/x/lib"),
        );
        assert!(kinds(&ok, None).is_empty());
        let missing = info(&["libcuda.so.1"], Some("/nix/store/x/lib"));
        assert_eq!(kinds(&missing, None), [FindingKind::NoDriverLink]);
        let unrelated = info(&["libm.so.6"], Some("/nix/store/cuda/lib/stubs"));
        assert!(kinds(&unrelated, None).is_empty());
    }

    #[test]
    fn search_path_entries_compare_as_directories() {
        let dotted = info(&["libcuda.so.1"], Some("/run/./opengl-driver//lib/"));
        assert!(kinds(&dotted, None).is_empty());
        // A relative entry is relative to the process's directory, not the driver link.
        let relative = info(&["libcuda.so.1"], Some("run/opengl-driver/lib"));
        assert_eq!(kinds(&relative, None), [FindingKind::NoDriverLink]);
    }

    #[test]
    fn compat_must_come_first() {
        let c = "/nix/store/c-cuda-compat/compat";
        let right = info(
            &["libcuda.so.1"],
            Some(&format!("{c}:/run/opengl-driver/lib")),
        );
        assert!(kinds(&right, Some(c)).is_empty());
        let wrong = info(
            &["libcuda.so.1"],
            Some(&format!("/run/opengl-driver/lib:{c}")),
        );
        assert_eq!(kinds(&wrong, Some(c)), [FindingKind::CompatAfterDriverLink]);
        let absent = info(&["libcuda.so.1"], Some("/run/opengl-driver/lib"));
        assert_eq!(kinds(&absent, Some(c)), [FindingKind::CompatMissing]);
    }

    #[test]
    fn a_directory_named_stubs_is_no_finding_and_rpath_counts_without_runpath() {
        // Only what a directory holds counts (tests/lint/ puts NVIDIA's stub in one).
        let stubs = info(
            &["libcuda.so.1"],
            Some("/nix/store/t-cuda/lib/stubs:/run/opengl-driver/lib"),
        );
        assert!(kinds(&stubs, None).is_empty());
        let mut rpath = info(&["libcuda.so.1"], None);
        rpath.rpath = Some(vec!["/run/opengl-driver/lib".into()]);
        assert!(kinds(&rpath, None).is_empty());
        assert_eq!(rpath.search_path().1, "DT_RPATH");
    }

    /// Issue 49: a libcuda user without the driver link is a finding in the Nix store and for
    /// the package under test, a note that changes no status elsewhere (real ELF files).
    #[test]
    fn no_driver_link_is_a_finding_in_the_store_and_under_test_and_a_note_elsewhere() {
        use cuda_sandbox_testkit::cc;
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("x.c");
        std::fs::write(&source, "int x(void) { return 0; }\n").unwrap();
        let stub = dir.path().join("libcuda.so");
        let s = |p: &Path| p.display().to_string();
        cc(&[
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcuda.so.1",
            "-o",
            &s(&stub),
            &s(&source),
        ]);
        let store = dir.path().join("store");
        let lib = store.join("00000000000000000000000000000000-pkg/lib");
        std::fs::create_dir_all(&lib).unwrap();
        let user = lib.join("libuser.so");
        cc(&[
            "-shared",
            "-fPIC",
            "-o",
            &s(&user),
            &s(&source),
            "-Wl,--no-as-needed",
            &s(&stub),
        ]);
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::copy(&user, outside.join("libuser.so")).unwrap();
        let mut config = LintConfig::new("/run/opengl-driver/lib");
        config.store_dir = store.clone();
        let kinds = |found: &[Finding]| found.iter().map(|f| f.kind).collect::<Vec<_>>();

        let stored = lint(std::slice::from_ref(&lib), &config);
        assert_eq!(
            kinds(&stored.findings),
            [FindingKind::NoDriverLink],
            "{stored:?}"
        );
        assert!(stored.notes.is_empty());
        assert_eq!(stored.status(), LintStatus::Findings);
        assert_eq!(stored.status().code(), 1);

        let elsewhere = lint(std::slice::from_ref(&outside), &config);
        assert!(elsewhere.findings.is_empty(), "{elsewhere:?}");
        assert_eq!(kinds(&elsewhere.notes), [FindingKind::NoDriverLink]);
        assert_eq!(elsewhere.status(), LintStatus::Runs);
        assert_eq!(elsewhere.status().code(), 0);

        config.under_test = true;
        let tested = lint(&[outside], &config);
        assert_eq!(kinds(&tested.findings), [FindingKind::NoDriverLink]);
        assert_eq!(tested.status().code(), 1);
    }

    #[test]
    fn static_cuda_archives_are_recognised_by_name() {
        for yes in [
            "libcudart_static.a",
            "libcublasLt_static.a",
            "libnvJitLink_static.a",
            "libnppc.a",
        ] {
            assert!(is_static_cuda_archive(yes), "{yes}");
        }
        for no in [
            "libcudart.so.12",
            "libm.a",
            "cudart_static.a",
            "libfoo_cuda.a",
            "libcudart_static.a.txt",
        ] {
            assert!(!is_static_cuda_archive(no), "{no}");
        }
    }
}
