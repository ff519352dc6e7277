//! The runner's own flags, beside libtest's (which `libtest_mimic::Arguments` parses).

use std::path::PathBuf;

use clap::{Args, Parser};

use crate::cuda::version::CudaVersion;

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
    pub fn parse(text: &str) -> Result<ExpectDriver, String> {
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
    pub fn describe(&self) -> String {
        match self {
            ExpectDriver::Host => "host".to_owned(),
            ExpectDriver::Compat => "compat".to_owned(),
            ExpectDriver::PathPrefix(path) => path.display().to_string(),
        }
    }
}

fn parse_cuda_version(text: &str) -> Result<CudaVersion, String> {
    CudaVersion::parse(text)
}

/// Default number of saxpy elements: 2^24 (192 MiB moved by the kernel).
pub const DEFAULT_SAXPY_ELEMENTS: u32 = 1 << 24;

/// What to check and what to expect (the runner's flags).
#[derive(Debug, Clone, Args)]
pub struct Options {
    /// Driver the loaded libcuda.so.1 must be: `host`, `compat`, or an absolute path
    /// prefix it must lie under (e.g. /run/opengl-driver/lib).
    #[arg(long, value_name = "host|compat|PREFIX", value_parser = ExpectDriver::parse)]
    pub expect_driver: Option<ExpectDriver>,

    /// Lowest acceptable CUDA version of the loaded driver (12.2 or 12020).
    #[arg(long, value_name = "VERSION", value_parser = parse_cuda_version)]
    pub min_cuda_version: Option<CudaVersion>,

    /// API version for cuGetProcAddress checks (default: min(driver, runtime), or the
    /// driver's version when no CUDA runtime is loadable).
    #[arg(long, value_name = "VERSION", value_parser = parse_cuda_version)]
    pub api_version: Option<CudaVersion>,

    /// CUDA runtime to check (default: the first libcudart.so* the loader finds).
    #[arg(long, value_name = "PATH")]
    pub cudart: Option<PathBuf>,

    /// Number of saxpy elements (each moves 12 bytes).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SAXPY_ELEMENTS,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub saxpy_elements: u32,

    /// Write the JSON report here. Default: $out when run as a Nix builder
    /// (both $out and $NIX_BUILD_TOP set); otherwise no report.
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,

    /// Directory holding the device nodes (testing aid: point it at a fake tree).
    #[arg(long, value_name = "DIR", default_value = "/dev")]
    pub dev_root: PathBuf,
}

impl Options {
    /// Where the report goes: `--report`, else `$out` inside a Nix build.
    pub fn report_path(&self, env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
        if let Some(path) = &self.report {
            return Some(path.clone());
        }
        match (env("out"), env("NIX_BUILD_TOP")) {
            (Some(out), Some(_)) if !out.is_empty() => Some(PathBuf::from(out)),
            _ => None,
        }
    }
}

/// Listed after the flags in `--help`.
const AFTER_HELP: &str = "\
Checks: devices::nodes, driver::library, driver::version, driver::entry_points,
runtime::entry_points, kernel::saxpy, nvml::consistency. libtest flags (--list, --exact,
FILTER, --skip, --format, --test-threads, ...) behave as in `cargo test`.
Exit status: 0 all passed (or skipped), 101 a check failed.
As a Nix builder: builder = <this program>; args = [ ... ]; the report goes to $out.";

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
    /// libtest's flags.
    #[command(flatten)]
    pub libtest: libtest_mimic::Arguments,
}

impl Cli {
    /// The clap command, with the help layout and `--version` that libtest-mimic's
    /// flattened arguments would otherwise replace.
    pub fn command_line() -> clap::Command {
        <Cli as clap::CommandFactory>::command()
            .help_template(
                "{name} {version}\n{about}\n\n{usage-heading} {usage}\n\n{all-args}\n\n{after-help}",
            )
            .disable_version_flag(false)
            .after_help(AFTER_HELP)
    }

    /// Parses `std::env::args`; exits with clap's message on bad flags, `--help`, `--version`.
    pub fn from_env() -> Cli {
        let matches = Cli::command_line().get_matches();
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn expectations_refuse_relative_paths() {
        assert!(ExpectDriver::parse("lib").is_err());
        assert_eq!(
            ExpectDriver::parse("/run/opengl-driver/lib"),
            Ok(ExpectDriver::PathPrefix("/run/opengl-driver/lib".into()))
        );
    }
}
