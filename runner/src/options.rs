//! The runner's own flags, beside libtest's (which `libtest_mimic::Arguments` parses).

use std::path::PathBuf;

use clap::{Args, Parser};

use crate::cuda::version::CudaVersion;
use cuda_sandbox_cuda_facts::releases;
use cuda_sandbox_cuda_facts::Arch;
use cuda_sandbox_elfkit::fatbin::rules::{Driver, DriverVersion};

/// Which driver the runner must find loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpectDriver {
    /// The host's own driver: the loaded libcuda's CUDA version is not above the kernel driver's.
    Host,
    /// A cuda_compat driver: the loaded libcuda's CUDA version is above the kernel driver's.
    Compat,
    /// The loaded `libcuda.so.1` (its path or real path) lies under this directory.
    PathPrefix(PathBuf),
}

impl ExpectDriver {
    /// Parses `host`, `compat`, or an absolute path prefix.
    pub(crate) fn parse(text: &str) -> Result<ExpectDriver, String> {
        match text {
            "host" => Ok(ExpectDriver::Host),
            "compat" => Ok(ExpectDriver::Compat),
            path if path.starts_with('/') => Ok(ExpectDriver::PathPrefix(PathBuf::from(path))),
            other => Err(format!(
                "want host, compat or an absolute path prefix, got {other:?}"
            )),
        }
    }

    /// The spelling used in messages and the report.
    pub(crate) fn describe(&self) -> String {
        match self {
            ExpectDriver::Host => "host".to_owned(),
            ExpectDriver::Compat => "compat".to_owned(),
            ExpectDriver::PathPrefix(path) => path.display().to_string(),
        }
    }
}

/// A kernel name glob for `--expect-missing`.
fn parse_glob(text: &str) -> Result<glob::Pattern, String> {
    glob::Pattern::new(text).map_err(|e| format!("{text:?} is not a glob: {e}"))
}

/// `--driver-cuda`: a CUDA release as users write it (`12.2`, or the encoded `12020`). A
/// driver branch (`535`) or version (`535.104.05`) is refused naming its CUDA version and
/// `--driver`; a version inside the known range that was never released (12.7) is refused
/// naming the nearest releases; one above the known range is taken, and the rules answer
/// "cannot be judged" for it ([`releases::newest_release`]).
pub(crate) fn parse_driver_cuda(text: &str) -> Result<CudaVersion, String> {
    let text = text.trim();
    let words: Vec<&str> = text.split('.').collect();
    let leading: Option<u32> = words[0].parse().ok();
    if let Some(branch) = leading.filter(|b| (100..1000).contains(b)) {
        let cuda = releases::cuda_for_branch(branch)
            .map(|c| format!("CUDA {c}"))
            .unwrap_or_else(|| "a branch the driver table does not know".into());
        let what = if words.len() > 1 { "version" } else { "branch" };
        return Err(format!(
            "{text} is a driver {what}: {cuda}; give the driver's CUDA version (--driver-cuda \
             X.Y) or its version (--driver {text})"
        ));
    }
    let cuda = CudaVersion::parse(text)?;
    if releases::is_release(cuda) || cuda > releases::newest_release() {
        return Ok(cuda);
    }
    let name = |v: Option<CudaVersion>| v.map(|v| v.to_string());
    let (below, above) = releases::nearest_releases(cuda);
    let nearest: Vec<String> = [name(below), name(above)].into_iter().flatten().collect();
    let reports = releases::table()
        .branches
        .iter()
        .find(|(_, c)| *c == cuda)
        .map(|(b, _)| {
            format!("; an R{b} driver reports CUDA {cuda}: give its version with --driver")
        })
        .unwrap_or_default();
    Err(format!(
        "CUDA {cuda} was never released (nearest releases: {}){reports}",
        nearest.join(" and ")
    ))
}

/// `--driver`: a driver's version (`535.104.05`, or its branch `535`), of a branch the
/// driver table knows.
pub(crate) fn parse_driver(text: &str) -> Result<DriverVersion, String> {
    let version = DriverVersion::parse(text).map_err(|e| e.to_string())?;
    if releases::cuda_for_branch(version.branch).is_none() {
        let branches = &releases::table().branches;
        return Err(format!(
            "driver {text} is of a branch the driver table does not know (it knows R{} to R{}): \
             give its CUDA version with --driver-cuda X.Y",
            branches[0].0,
            branches[branches.len() - 1].0
        ));
    }
    Ok(version)
}

/// Default number of saxpy elements: 2^24 (192 MiB moved by the kernel).
pub(crate) const DEFAULT_SAXPY_ELEMENTS: u32 = 1 << 24;

/// What to check and what to expect (the runner's flags).
#[derive(Debug, Clone, Args)]
pub struct Options {
    /// Driver the loaded libcuda.so.1 must be: `host`, `compat`, or an absolute path
    /// prefix it must lie under (e.g. /run/opengl-driver/lib).
    #[arg(long, value_name = "host|compat|PREFIX", value_parser = ExpectDriver::parse)]
    pub(crate) expect_driver: Option<ExpectDriver>,

    /// Lowest acceptable CUDA version of the loaded driver (12.2 or 12020).
    #[arg(long, value_name = "VERSION", value_parser = CudaVersion::parse)]
    pub(crate) min_cuda_version: Option<CudaVersion>,

    /// The API version a program would ask cuGetProcAddress at (default: min(driver, runtime),
    /// or the driver's version when no CUDA runtime is loadable); every ABI boundary is
    /// probed as well.
    #[arg(long, value_name = "VERSION", value_parser = CudaVersion::parse)]
    pub(crate) api_version: Option<CudaVersion>,

    /// CUDA runtime to check; repeat it for a package that ships several (default: every
    /// libcudart this process can load, in the loader's search order).
    #[arg(long, value_name = "PATH")]
    pub(crate) cudart: Vec<PathBuf>,

    /// Number of saxpy elements (each moves 12 bytes).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SAXPY_ELEMENTS,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) saxpy_elements: u32,

    /// Write the JSON report here. Default: $out when run as a Nix builder
    /// (both $out and $NIX_BUILD_TOP set); otherwise no report.
    #[arg(long, value_name = "PATH")]
    pub(crate) report: Option<PathBuf>,

    /// Directory holding the device nodes (testing aid: point it at a fake tree).
    #[arg(long, value_name = "DIR", default_value = "/dev")]
    pub(crate) dev_root: PathBuf,

    /// The hook's manifest to check the loaded driver against (default:
    /// /run/cuda-sandbox/manifest.json when it exists).
    #[arg(long, value_name = "PATH", conflicts_with = "no_manifest")]
    pub(crate) manifest: Option<PathBuf>,

    /// Ignore the hook's manifest: check only what the flags ask.
    #[arg(long)]
    pub(crate) no_manifest: bool,

    /// The package under test (a store path or directory; repeatable): run the `package::*`
    /// checks on its runtime closure: its GPU code on these GPUs with this driver, its CUDA
    /// runtimes, and the libcuda.so.1 each of its objects would load.
    #[arg(long = "package", value_name = "PATH")]
    pub(crate) packages: Vec<PathBuf>,

    /// The package's runtime closure, as `exportReferencesGraph` or Nixpkgs' `closureInfo`
    /// (`store-paths`) write it (inside a Nix build, where `nix-store` cannot answer; default:
    /// `nix-store --query --requisites`).
    #[arg(long, value_name = "FILE", requires = "packages")]
    pub(crate) package_closure: Option<PathBuf>,

    /// `package::gpu_code` fails a file of the package itself (under a `--package` path, not
    /// a dependency) that runs only partly: some module with kernels has no code that loads
    /// on a GPU judged, except kernels `--expect-missing` lists.
    #[arg(long, requires = "packages")]
    pub(crate) strict_modules: bool,

    /// With `--strict-modules`: a kernel name glob (`*`, `?`, `[...]`; repeatable) the package
    /// expects to have no code for some GPU, as built on purpose (e.g. `*_sm90a_*`).
    #[arg(long, value_name = "GLOB", requires = "strict_modules", value_parser = parse_glob)]
    pub(crate) expect_missing: Vec<glob::Pattern>,

    /// Also run the `lint::elf` check on these files or directories (repeatable).
    #[arg(long = "lint", value_name = "PATH")]
    pub(crate) lint_paths: Vec<PathBuf>,

    /// The negative check instead of the GPU checks: pass only when no GPU device, driver
    /// library, driver link or manifest is visible (for an untagged derivation).
    #[arg(long)]
    pub(crate) expect_no_gpu: bool,

    /// Pass a run whose filter selects no check (by default it fails: nothing checked is not
    /// a pass).
    #[arg(long)]
    pub allow_no_checks: bool,

    /// What the ELF lint expects.
    #[command(flatten)]
    pub(crate) lint: LintOptions,
}

/// The driver directory nixpkgs binaries carry in DT_RUNPATH (`autoAddDriverRunpath`).
pub(crate) const DEFAULT_DRIVER_LINK: &str = "/run/opengl-driver/lib";

/// What the ELF lint expects of the files it reads (shared by `--lint` and `lint`).
#[derive(Debug, Clone, Args)]
pub struct LintOptions {
    /// The driver link every libcuda user must carry in DT_RUNPATH.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DRIVER_LINK)]
    pub(crate) driver_link: PathBuf,

    /// A cuda_compat directory that must come before the driver link in DT_RUNPATH
    /// (default: the manifest's, when the hook chose compat).
    #[arg(long, value_name = "DIR")]
    pub(crate) compat_dir: Option<PathBuf>,

    /// Also look for static CUDA archives in the runtime closure (`nix-store --query
    /// --requisites`) of the store paths given.
    #[arg(long)]
    pub(crate) closure: bool,

    /// Judge the files' GPU code (fat binaries) for GPUs of these compute capabilities, each
    /// apart: sm_90, 9.0 or 90; several as sm_90,sm_120 or by repeating the flag (a fleet).
    /// Without it the GPU code is listed, not judged. sm_90a or sm_100f names the GPU of that
    /// capability (a GPU has no variant; its code does), and is echoed as written.
    #[arg(long, value_name = "sm_XY,...", value_parser = Arch::parse, value_delimiter = ',')]
    pub(crate) target: Vec<Arch>,

    /// Judge the GPU code for ZLUDA (the CUDA driver API on AMD GPUs) instead: a module runs
    /// when it carries PTX, which ZLUDA compiles for the GPU, and cannot with SASS alone. The
    /// GPU is ZLUDA's reported capability: 8.8 (ZLUDA v4, as Nixpkgs builds it, and v6), or
    /// each --target given (ZLUDA_CC sets it).
    #[arg(long)]
    pub(crate) zluda: bool,

    /// The CUDA version of the driver that will load the GPU code, a CUDA release (12.2 for
    /// a 535 driver), for --target (default: the hook's manifest's driver, when there is one).
    #[arg(long, value_name = "X.Y", value_parser = parse_driver_cuda, requires = "target",
          conflicts_with = "driver")]
    pub(crate) driver_cuda: Option<CudaVersion>,

    /// The version of the driver that will load the GPU code (535.104.05), for --target: its
    /// branch gives its CUDA version, and its version decides minor-version compatibility.
    #[arg(long, value_name = "VERSION", value_parser = parse_driver, requires = "target")]
    pub(crate) driver: Option<DriverVersion>,
}

impl LintOptions {
    /// The driver `--driver-cuda` or `--driver` names: libcuda and kernel module alike.
    pub(crate) fn given_driver(&self) -> Option<Driver> {
        if let Some(cuda) = self.driver_cuda {
            return Some(Driver::of(cuda));
        }
        let version = self.driver?;
        // parse_driver took only branches the table knows.
        let cuda = releases::cuda_for_branch(version.branch)?;
        Some(Driver {
            version: Some(version),
            ..Driver::of(cuda)
        })
    }
}

impl Options {
    /// Where the report goes: `--report`, else `$out` inside a Nix build.
    pub fn report_path(&self, env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
        self.report
            .clone()
            .or_else(|| match (env("out"), env("NIX_BUILD_TOP")) {
                (Some(out), Some(_)) if !out.is_empty() => Some(PathBuf::from(out)),
                _ => None,
            })
    }
}

/// The commands, one line each, as `--help` lists them after the usage.
pub const COMMANDS_HELP: &str = "\
Commands (each with its own --help):
  lint PATH...   judge a package's ELF files and wheels; with --target, whether its GPU code runs
  features       print this builder's Nix system features (cuda, cuda-sm-*)
  inventory      write the GPU inventory the hook reads (cuda-sm-* leases)
  gpu-confirm    on a GPU: load files' modules with the driver, compare with the rules' verdict
  container-binds
                 the systemd-nspawn binds giving a NixOS test container this build's GPU";

/// The whole command line: the runner's flags, then libtest's.
#[derive(Debug, Parser)]
#[command(
    name = "cuda-sandbox-check",
    version,
    about = "Checks, inside a Nix build sandbox or anywhere, that the NVIDIA GPU and CUDA \
             driver exposed to this process work."
)]
pub struct Cli {
    /// The runner's flags.
    #[command(flatten)]
    pub options: Options,
    /// libtest's flags, under their own heading after the runner's.
    #[command(flatten, next_help_heading = "libtest's flags (as in `cargo test`)")]
    pub libtest: libtest_mimic::Arguments,
}

impl Cli {
    /// The clap command, with the help layout and `--version` that libtest-mimic's
    /// flattened arguments would otherwise replace: usage, then the commands
    /// ([`COMMANDS_HELP`]), then the runner's flags, then libtest's.
    pub fn command_line() -> clap::Command {
        <Cli as clap::CommandFactory>::command()
            .help_template(
                "{name} {version}\n{about}\n\n{usage-heading} {usage}\n\n{before-help}\n\
                 {all-args}\n\n{after-help}",
            )
            .override_usage(
                "cuda-sandbox-check [OPTIONS] [FILTER]     run the checks (a libtest harness)\n       \
                 cuda-sandbox-check COMMAND [ARGS...]       one of the commands below",
            )
            .before_help(COMMANDS_HELP)
            .disable_version_flag(false)
    }
}

/// `cuda-sandbox-check lint PATH...`: the ELF RUNPATH and static-archive lint on its own.
#[derive(Debug, Parser)]
#[command(
    name = "cuda-sandbox-check lint",
    version,
    about = "Checks a package's ELF files: every libcuda user carries the driver link in \
             DT_RUNPATH, a cuda_compat directory comes before it, no directory there holds \
             NVIDIA's stub libcuda (recognised by what it is); and no static CUDA archive \
             ships in the package (or its closure). Lists \
             the GPU code (fat binaries) each file carries and, with --target, judges whether \
             it runs on that GPU with that driver.",
    after_help = "GPU code: with --target sm_XY[,sm_XY...] (and --driver-cuda X.Y, or the \
                  hook's manifest), a file that cannot run on a target is a finding: a driver \
                  that does not drive that GPU, a CUDA runtime newer than the driver (35), no \
                  kernel image for the GPU (209), PTX newer than the driver (222), an image \
                  the driver cannot unpack, a cubin of a newer CUDA major. Modules holding only \
                  arch- or family-specific images for other GPUs, and modules the program \
                  loads itself (byte arrays found by their magic), are reported, not failed, \
                  while another module of the file loads; modules with no kernel and no device \
                  data, and link input (__nv_relfatbin, objects, archives), are listed, not \
                  judged. --json lists every entry and each target's verdict and rule. \
                  no-driver-link is a finding in the Nix store; elsewhere a note.\n\
                  Exit status: 0 it runs on every target (fully or partly), nothing to fix; 1 \
                  it runs, with findings (a stub libcuda in DT_RUNPATH, no driver link in a \
                  store path, a static archive, mixed runtimes); 2 bad usage, or a path given \
                  that cannot be judged (missing, empty, not ELF, an archive it does not read); \
                  3 the rules cannot judge a file (a GPU, ISA or driver beyond their tables: \
                  not a pass); 4 a file cannot run on a target (wins over all the others)."
)]
pub struct LintCli {
    /// Files, directories or wheels (.whl, read without unzipping) to check. A path given is
    /// followed wherever it points; inside a directory, symlinks are followed into the Nix
    /// store or within the paths given, and others are counted, not followed.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,

    /// What the lint expects.
    #[command(flatten)]
    pub lint: LintOptions,

    /// The hook's manifest, for the compat directory (default: the standard path, when it
    /// exists).
    #[arg(long, value_name = "PATH", conflicts_with = "no_manifest")]
    pub manifest: Option<PathBuf>,

    /// Ignore the hook's manifest.
    #[arg(long)]
    pub no_manifest: bool,

    /// Print the findings as one JSON document.
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(args: &[&str]) -> Cli {
        let argv = std::iter::once("cuda-sandbox-check").chain(args.iter().copied());
        let matches = Cli::command_line().try_get_matches_from(argv).unwrap();
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap()
    }

    #[test]
    fn runner_and_libtest_flags_mix() {
        let cli = parse(&[
            "--expect-driver",
            "compat",
            "--exact",
            "driver::version",
            "--min-cuda-version",
            "12.2",
        ]);
        assert_eq!(cli.options.expect_driver, Some(ExpectDriver::Compat));
        assert_eq!(cli.options.min_cuda_version, Some(CudaVersion(12020)));
        assert!(cli.libtest.exact);
        assert_eq!(cli.libtest.filter.as_deref(), Some("driver::version"));
    }

    #[test]
    fn report_defaults_to_out_only_inside_a_nix_build() {
        let cli = parse(&[]);
        let nix = |k: &str| match k {
            "out" => Some("/nix/store/x-gpu-check".to_owned()),
            "NIX_BUILD_TOP" => Some("/build".to_owned()),
            _ => None,
        };
        assert_eq!(
            cli.options.report_path(nix),
            Some(PathBuf::from("/nix/store/x-gpu-check"))
        );
        let shell = |k: &str| (k == "out").then(|| "/tmp/out".to_owned());
        assert_eq!(cli.options.report_path(shell), None);
        let explicit = parse(&["--report", "/tmp/r.json"]);
        assert_eq!(
            explicit.options.report_path(nix),
            Some(PathBuf::from("/tmp/r.json"))
        );
    }

    #[test]
    fn manifest_and_lint_flags_parse() {
        let cli = parse(&[
            "--no-manifest",
            "--lint",
            "/a",
            "--lint",
            "/b",
            "--compat-dir",
            "/c",
        ]);
        assert!(cli.options.no_manifest);
        assert_eq!(
            cli.options.lint_paths,
            [PathBuf::from("/a"), PathBuf::from("/b")]
        );
        assert_eq!(cli.options.lint.driver_link, Path::new(DEFAULT_DRIVER_LINK));
        assert_eq!(
            cli.options.lint.compat_dir.as_deref(),
            Some(Path::new("/c"))
        );
        let argv = ["cuda-sandbox-check", "--no-manifest", "--manifest", "/m"];
        assert!(Cli::command_line().try_get_matches_from(argv).is_err());
        let lint =
            LintCli::try_parse_from(["lint", "--closure", "/nix/store/x", "--json"]).unwrap();
        assert!(lint.lint.closure && lint.json);
        assert!(LintCli::try_parse_from(["lint"]).is_err());
    }

    /// Issue 34: `--driver-cuda 535` was read as CUDA 535.0 and `99.9` judged "runs".
    #[test]
    fn driver_cuda_takes_releases_and_refuses_branches_versions_and_gaps() {
        assert_eq!(parse_driver_cuda("12.2"), Ok(CudaVersion(12020)));
        assert_eq!(parse_driver_cuda("12020"), Ok(CudaVersion(12020)));
        let branch = parse_driver_cuda("535").unwrap_err();
        assert!(
            branch.starts_with("535 is a driver branch: CUDA 12.2;")
                && branch.contains("--driver 535"),
            "{branch}"
        );
        let version = parse_driver_cuda("535.104.05").unwrap_err();
        assert!(
            version.starts_with("535.104.05 is a driver version: CUDA 12.2;"),
            "{version}"
        );
        let gap = parse_driver_cuda("12.7").unwrap_err();
        assert!(
            gap.starts_with("CUDA 12.7 was never released (nearest releases: 12.6 and 12.8)")
                && gap.contains("R565"),
            "{gap}"
        );
        assert!(parse_driver_cuda("12.10").is_err());
        // Above the known range: taken, and the rules answer "cannot be judged".
        assert_eq!(parse_driver_cuda("99.9"), Ok(CudaVersion(99090)));
        let argv = ["lint", "--target", "sm_90", "--driver-cuda", "535", "/x"];
        assert!(LintCli::try_parse_from(argv).is_err());
    }

    #[test]
    fn driver_takes_a_driver_version_and_judges_by_its_branch() {
        let lint =
            LintCli::try_parse_from(["lint", "--target", "sm_90", "--driver", "535.104.05", "/x"])
                .unwrap();
        let driver = lint.lint.given_driver().unwrap();
        assert_eq!(
            (driver.cuda, driver.kernel),
            (CudaVersion(12020), CudaVersion(12020))
        );
        assert_eq!(driver.version, Some(DriverVersion::new(535, 104, 5)));
        assert!(parse_driver("1000.1").is_err());
        let both = [
            "lint",
            "--target",
            "sm_90",
            "--driver",
            "535.104.05",
            "--driver-cuda",
            "12.2",
            "/x",
        ];
        assert!(LintCli::try_parse_from(both).is_err());
    }

    #[test]
    fn expectations_refuse_relative_paths() {
        assert!(ExpectDriver::parse("lib").is_err());
        assert_eq!(
            ExpectDriver::parse("/run/opengl-driver/lib"),
            Ok(ExpectDriver::PathPrefix("/run/opengl-driver/lib".into()))
        );
    }
}
