//! The hook's configuration: which features get which devices and paths.
//!
//! Read from TOML (`/etc/cuda-sandbox/config.toml` unless `--config` or `CUDA_SANDBOX_CONFIG`
//! name another file). With neither the file nor its directory `/etc/cuda-sandbox`,
//! [`Config::builtin`] serves NixOS: the default rule of `hook/default-config.toml`, embedded.
//! A directory without its file is a broken configuration (a deleted config must not turn into
//! the built-in one silently). Unknown keys are errors naming the key with its line and column,
//! so a typo never silently drops a device from every GPU build. A file is used only when
//! it is trusted like sudo's `sudoers` ([`crate::statedir::check_trusted`]).

use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// Default location of the configuration file.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/cuda-sandbox/config.toml";
/// Environment variable naming the configuration file (below `--config`, above the default).
pub const CONFIG_ENV: &str = "CUDA_SANDBOX_CONFIG";
/// The built-in configuration's text (one file in the repository, `hook/default-config.toml`).
pub const BUILTIN_TOML: &str = include_str!("../default-config.toml");
/// The features the built-in configuration answers to.
pub const DEFAULT_FEATURES: [&str; 4] = ["cuda", "gpu", "nvidia-gpu", "opengl"];

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Root under which `[[rule.device]]` globs and `[[rule.path]]` paths are looked up; the
    /// paths are exposed inside the sandbox without this prefix. `/` in production; a fake
    /// root in tests.
    #[serde(default = "default_host_root")]
    pub host_root: PathBuf,
    /// The Nix store directory; paths under it are never re-rooted and get their closure.
    #[serde(default = "default_store_dir")]
    pub store_dir: PathBuf,
    /// Directory holding cached store-path closures.
    #[serde(default = "default_closure_cache")]
    pub closure_cache: PathBuf,
    /// The `nix-store` program used to compute closures: an absolute path to a trusted (root-
    /// owned, not group/other-writable) program. Only the default, `nix-store`, is looked up in
    /// `PATH` (and the file found must be trusted too).
    #[serde(default = "default_nix_store")]
    pub nix_store: PathBuf,
    /// Where symlinks may lead (inside paths, under the host root); the store is always
    /// allowed. A link in an exposed place that leads elsewhere (e.g. to `/etc`) is not followed.
    #[serde(default = "default_symlink_roots")]
    pub symlink_roots: Vec<PathBuf>,
    /// What to do when the `.drv` is not on disk and Nix passed no JSON derivation (remote
    /// builders): `skip` (expose nothing, warn), `expose` (plan for every rule, as on a GPU
    /// builder whose mandatory features include `cuda`), or `fail`.
    #[serde(default)]
    pub missing_drv: MissingDrv,
    /// Directory for per-build manifests (outside every sandbox); stale files are removed.
    #[serde(default = "default_runtime_dir")]
    pub runtime_dir: PathBuf,
    /// GPUs leased to each tagged build for itself alone (`0`: every build gets every GPU).
    /// A derivation may ask for another number with the env attribute `cudaSandboxGpus`.
    /// Leases live in `<runtime_dir>/leases/` (see [`crate::lease`]).
    #[serde(default)]
    pub gpus_per_build: u32,
    /// The most GPUs one build may lease, whatever its `cudaSandboxGpus` asks (`0`: no cap
    /// but the host's GPUs).
    #[serde(default)]
    pub max_gpus_per_build: u32,
    /// How long a tagged build waits for enough free GPUs before failing (`0`: fail at once).
    #[serde(default = "default_lease_wait_seconds")]
    pub lease_wait_seconds: u64,
    /// Where CDI specs are read from, lowest priority first (see [`crate::cdi`]).
    #[serde(default)]
    pub cdi_spec_dirs: crate::cdi::SpecDirs,
    /// The rules, each answering to a set of features.
    #[serde(default, rename = "rule")]
    pub rules: Vec<Rule>,
}

/// The policy for a derivation that is not on disk (see [`Config::missing_drv`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MissingDrv {
    /// Expose nothing, with a warning.
    #[default]
    Skip,
    /// Expose what every rule gives.
    Expose,
    /// Fail the build.
    Fail,
}

/// What a set of features gets inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A name for messages and `explain`.
    pub name: String,
    /// The `requiredSystemFeatures` this rule answers to (any one of them suffices).
    pub features: Vec<String>,
    /// Device nodes, by glob under the host root.
    #[serde(default, rename = "device")]
    pub devices: Vec<DeviceGlob>,
    /// Host paths exposed at the same place inside.
    #[serde(default, rename = "path")]
    pub paths: Vec<HostPath>,
    /// Host paths exposed at another place inside.
    #[serde(default, rename = "mount")]
    pub mounts: Vec<Mount>,
    /// The NVIDIA driver: where to find it and which compat drivers to consider.
    #[serde(default)]
    pub driver: Option<DriverConfig>,
    /// CDI devices (`nvidia.com/gpu=all`) whose specs' device nodes and mounts the build gets
    /// (see [`crate::cdi`]).
    #[serde(default)]
    pub cdi: Vec<crate::cdi::DeviceName>,
}

/// Where the driver comes from, and the `cuda_compat` drivers to consider (DESIGN.md §5–§6).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriverConfig {
    /// The NixOS driver link; used (with its closure) when it exists under the host root.
    #[serde(default = "default_driver_link")]
    pub link: PathBuf,
    /// Without the link: bind the host's driver libraries (from `/etc/ld.so.cache`, then
    /// `library_dirs`) at `<link>/lib/<name>`.
    #[serde(default = "yes")]
    pub host_libraries: bool,
    /// Directories searched for driver libraries after the loader cache.
    #[serde(default = "default_library_dirs")]
    pub library_dirs: Vec<PathBuf>,
    /// Compat driver directories (globs; under the host root unless in the store).
    #[serde(default = "default_compat")]
    pub compat: Vec<String>,
    /// Fail tagged builds when no driver is found.
    #[serde(default = "yes")]
    pub required: bool,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            link: default_driver_link(),
            host_libraries: true,
            library_dirs: default_library_dirs(),
            compat: default_compat(),
            required: true,
        }
    }
}

/// A glob of device nodes, e.g. `/dev/nvidia[0-9]*`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceGlob {
    /// Absolute glob, matched under the host root; only character devices and directories count.
    pub glob: String,
    /// Fail tagged builds when nothing matches.
    #[serde(default)]
    pub required: bool,
    /// What to tell the user when a required glob matches nothing.
    #[serde(default)]
    pub hint: Option<String>,
    /// Only on this kind of host: `tegra` (Jetson) or `discrete`; absent: on every host.
    #[serde(default)]
    pub platform: Option<Platform>,
}

/// The kind of NVIDIA host, for devices that exist on one kind only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    /// Jetson (Tegra): `/etc/nv_tegra_release` or `/sys/devices/soc0/family` = tegra*.
    Tegra,
    /// Any other NVIDIA host (`/dev/nvidiactl` and friends).
    Discrete,
}

/// A host path exposed at the same path inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostPath {
    /// Absolute path, looked up under the host root.
    pub path: PathBuf,
    /// Fail tagged builds when it does not exist.
    #[serde(default)]
    pub required: bool,
    /// What to tell the user when a required path is missing.
    #[serde(default)]
    pub hint: Option<String>,
    /// For a directory: also expose the targets of the symlinks directly inside it (within
    /// `symlink_roots`), as nix-required-mounts' `unsafeFollowSymlinks` does.
    #[serde(default)]
    pub follow_entry_symlinks: bool,
}

/// A host path exposed at a different path inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    /// Where the build sees it.
    pub inside: PathBuf,
    /// The real path on the host (not under the host root).
    pub outside: PathBuf,
    /// Fail tagged builds when `outside` does not exist.
    #[serde(default)]
    pub required: bool,
    /// What to tell the user when a required mount source is missing.
    #[serde(default)]
    pub hint: Option<String>,
    /// For a directory: also expose the targets of the symlinks directly inside it (within
    /// `symlink_roots`), as nix-required-mounts' `unsafeFollowSymlinks` does.
    #[serde(default)]
    pub follow_entry_symlinks: bool,
}

fn default_host_root() -> PathBuf {
    PathBuf::from("/")
}
fn default_store_dir() -> PathBuf {
    PathBuf::from("/nix/store")
}
fn default_closure_cache() -> PathBuf {
    PathBuf::from("/var/cache/cuda-sandbox/closures")
}
fn default_nix_store() -> PathBuf {
    PathBuf::from("nix-store")
}
fn default_symlink_roots() -> Vec<PathBuf> {
    ["/dev", "/run", "/usr", "/lib", "/lib64", "/opt"]
        .iter()
        .map(PathBuf::from)
        .collect()
}
fn default_runtime_dir() -> PathBuf {
    PathBuf::from("/run/cuda-sandbox")
}
fn default_lease_wait_seconds() -> u64 {
    600
}
fn default_driver_link() -> PathBuf {
    PathBuf::from("/run/opengl-driver")
}
fn default_library_dirs() -> Vec<PathBuf> {
    crate::discover::host::USUAL_LIBRARY_DIRS
        .iter()
        .map(PathBuf::from)
        .collect()
}
fn default_compat() -> Vec<String> {
    vec![
        "/usr/local/cuda*/compat".to_string(),
        "/usr/local/cuda*/compat_orin".to_string(),
    ]
}
fn yes() -> bool {
    true
}

/// Why a configuration could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or `built-in`) the problem is in.
    pub source: String,
    /// One-line description, with line and column where known.
    pub message: String,
}

impl fmt::Display for ConfigError {
    /// Always one line: control characters from the file (a `\n` inside a quoted TOML value,
    /// say) are printed escaped, so the error cannot break Nix's one-line log or fake a second
    /// message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("config ")?;
        write_one_line(f, &self.source)?;
        f.write_str(": ")?;
        write_one_line(f, &self.message)
    }
}

/// Writes `text` with every control character escaped (`\n`, `\u{1b}`), everything else as is.
fn write_one_line(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    for c in text.chars() {
        if c.is_control() {
            write!(f, "{}", c.escape_debug())?;
        } else {
            write!(f, "{c}")?;
        }
    }
    Ok(())
}

impl std::error::Error for ConfigError {}

/// Where the configuration was taken from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// A file named by `--config`, the environment, or found at the default path.
    File(PathBuf),
    /// No file: the built-in NixOS default.
    Builtin,
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigSource::File(p) => write!(f, "{}", p.display()),
            ConfigSource::Builtin => write!(f, "built-in default"),
        }
    }
}

/// The configuration file to read: `--config`, else `$CUDA_SANDBOX_CONFIG`, else the default
/// path when it exists, else none (use the built-in default).
pub fn locate(explicit: Option<&Path>) -> ConfigSource {
    let env = std::env::var_os(CONFIG_ENV).filter(|p| !p.is_empty());
    locate_in(
        explicit,
        env.map(PathBuf::from),
        Path::new(DEFAULT_CONFIG_PATH),
    )
}

/// [`locate`] with the environment's value and the default path given.
fn locate_in(explicit: Option<&Path>, env: Option<PathBuf>, default: &Path) -> ConfigSource {
    if let Some(p) = explicit {
        return ConfigSource::File(p.to_path_buf());
    }
    if let Some(p) = env {
        return ConfigSource::File(p);
    }
    // The file, or its directory without it: a deleted file is an error, not the built-in.
    let dir_exists = default
        .parent()
        .is_some_and(|d| d.symlink_metadata().is_ok());
    if dir_exists || default.symlink_metadata().is_ok() {
        ConfigSource::File(default.to_path_buf())
    } else {
        ConfigSource::Builtin
    }
}

impl Config {
    /// Whether the configuration at `source` may have a rule answering one of `features`,
    /// judged from its text alone, without parsing it: `false` only when the text holds no
    /// escape (`\`, so every string in it is written literally) and none of the features
    /// occurs in it. An untagged build asking for other features (`big-parallel`, `kvm`) then
    /// skips the parse. The text is read as [`Config::load`] reads it, trusted first
    /// ([`read_text`]): nothing untrusted is opened. A file that cannot be trusted or read gives
    /// `true`, and the full load reports the problem.
    pub fn may_answer(source: &ConfigSource, features: &[Vec<u8>]) -> bool {
        read_text(source).map_or(true, |text| {
            Config::text_may_answer(text.as_bytes(), features)
        })
    }

    /// [`Config::may_answer`] for the text itself: `false` only when `text` holds no `\` and
    /// none of `features` (an empty feature is in every text). Linear in the text for each
    /// feature (a substring search, not a window scan); more than [`PRECHECK_FEATURES`]
    /// features give `true` (parse instead), so a derivation listing millions of features
    /// cannot make this cost their number times the text.
    pub fn text_may_answer(text: &[u8], features: &[Vec<u8>]) -> bool {
        crate::bytes::find(b'\\', text).is_some()
            || features.len() > PRECHECK_FEATURES
            || features
                .iter()
                .any(|f| f.is_empty() || memchr::memmem::find(text, f).is_some())
    }

    /// Builds the configuration of `source` from its text (as [`read_text`] gave it).
    pub fn from_text(source: &ConfigSource, text: &str) -> Result<Config, ConfigError> {
        match source {
            ConfigSource::Builtin => Ok(Config::builtin()),
            ConfigSource::File(path) => Config::parse(text, &path.display().to_string()),
        }
    }

    /// Loads the configuration from `source`: its text, trusted first ([`read_text`]), parsed
    /// and validated.
    pub fn load(source: &ConfigSource) -> Result<Config, ConfigError> {
        let text = read_text(source)?;
        Config::from_text(source, &text)
    }

    /// Loads the configuration from `source` without the ownership and mode check of
    /// [`Config::load`]: what `check-config --content-only` validates inside a Nix build, where
    /// a store file is owned by an unmapped uid. The hook never uses this.
    pub fn load_content(source: &ConfigSource) -> Result<Config, ConfigError> {
        match source {
            ConfigSource::Builtin => Ok(Config::builtin()),
            ConfigSource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
                    source: path.display().to_string(),
                    message: format!("cannot read it: {e}"),
                })?;
                Config::parse(&text, &path.display().to_string())
            }
        }
    }

    /// Parses and validates TOML text; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError {
            source: source.to_string(),
            message: describe_toml_error(&e, text),
        })?;
        config.validate().map_err(|message| ConfigError {
            source: source.to_string(),
            message,
        })?;
        Ok(config)
    }

    /// The configuration used when no file exists: NixOS, with the driver at
    /// `/run/opengl-driver` and the device nodes of DESIGN.md §5, from the embedded
    /// `hook/default-config.toml`.
    pub fn builtin() -> Config {
        // A unit test parses the embedded file, so this cannot fail in a built hook.
        Config::parse(BUILTIN_TOML, "built-in").expect("hook/default-config.toml is valid")
    }

    /// Settings that have no effect as written, one line each with what to change
    /// (`check-config` prints them): `max_gpus_per_build` without `gpus_per_build`, which
    /// gives every GPU to every build and leases none.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.gpus_per_build == 0 && self.max_gpus_per_build > 0 {
            notes.push(format!(
                "max_gpus_per_build = {} has no effect: gpus_per_build = 0 gives every GPU to \
                 every tagged build and leases none; set gpus_per_build (e.g. 1) to lease GPUs",
                self.max_gpus_per_build
            ));
        }
        notes
    }

    /// The rules that answer to any of `features`, in file order.
    pub fn matching_rules<'c>(&'c self, features: &[&[u8]]) -> Vec<&'c Rule> {
        self.rules
            .iter()
            .filter(|r| r.answers_any(features))
            .collect()
    }

    fn validate(&self) -> Result<(), String> {
        for (name, path) in [
            ("host_root", &self.host_root),
            ("store_dir", &self.store_dir),
            ("closure_cache", &self.closure_cache),
            ("runtime_dir", &self.runtime_dir),
        ] {
            if !path.is_absolute() {
                return Err(format!("{name} must be an absolute path, got {path:?}"));
            }
        }
        if self.nix_store != Path::new("nix-store") && !self.nix_store.is_absolute() {
            return Err(format!(
                "nix_store must be an absolute path to a root-owned program, got {:?}",
                self.nix_store
            ));
        }
        for path in &self.symlink_roots {
            let name = "symlink_roots entry";
            if !path.is_absolute() {
                return Err(format!("{name} must be an absolute path, got {path:?}"));
            }
        }
        // A BTreeSet: a HashSet would ask the kernel for a random seed on every run.
        let mut names = std::collections::BTreeSet::new();
        for rule in &self.rules {
            let at = format!("rule '{}'", rule.name);
            if rule.name.is_empty() {
                return Err("a [[rule]] has an empty name".to_string());
            }
            if !names.insert(&rule.name) {
                return Err(format!("{at} is defined twice"));
            }
            if rule.features.is_empty() {
                return Err(format!("{at} has no features, so it would never apply"));
            }
            for feature in &rule.features {
                if feature.is_empty()
                    || feature.chars().any(|c| c.is_whitespace() || c.is_control())
                {
                    return Err(format!(
                        "{at}: feature {feature:?} is empty or holds whitespace"
                    ));
                }
            }
            for d in &rule.devices {
                check_path(&at, "device glob", Path::new(&d.glob))?;
                glob::Pattern::new(&d.glob).map_err(|e| {
                    format!("{at}: device glob {:?} is not a valid glob: {e}", d.glob)
                })?;
            }
            for p in &rule.paths {
                check_path(&at, "path", &p.path)?;
            }
            for m in &rule.mounts {
                check_path(&at, "mount inside", &m.inside)?;
                check_path(&at, "mount outside", &m.outside)?;
            }
            if let Some(d) = &rule.driver {
                check_path(&at, "driver link", &d.link)?;
                for dir in &d.library_dirs {
                    check_path(&at, "driver library_dirs entry", dir)?;
                }
                for c in &d.compat {
                    check_path(&at, "driver compat glob", Path::new(c))?;
                    glob::Pattern::new(c)
                        .map_err(|e| format!("{at}: compat glob {c:?} is not a valid glob: {e}"))?;
                }
            }
        }
        Ok(())
    }
}

impl Rule {
    /// Whether this rule answers to any of `features`.
    pub fn answers_any(&self, features: &[&[u8]]) -> bool {
        self.features
            .iter()
            .any(|mine| features.contains(&mine.as_bytes()))
    }

    /// The first of `features` this rule answers to, for messages.
    pub fn first_match<'f>(&self, features: &[&'f [u8]]) -> Option<&'f [u8]> {
        features
            .iter()
            .copied()
            .find(|f| self.features.iter().any(|mine| mine.as_bytes() == *f))
    }
}

/// The most bytes a configuration file may hold: far more than any real one (the built-in is
/// 3 KiB), little enough to read whole.
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// At most this many features are looked for in the configuration's text
/// ([`Config::text_may_answer`]); Nix builds a derivation only when the builder has every
/// feature it requires, so real ones list a few.
pub const PRECHECK_FEATURES: usize = 64;

/// The configuration's text: the built-in one, or the file's, read only once it is trusted as
/// sudo trusts `sudoers`. The hook runs as root before every build, so whoever can write its
/// config decides what builds see (and which program root runs). In this order:
/// 1. every component of the path and every symlink target on the way must be owned by root
///    (or by the user running the hook) and not writable by group or others
///    ([`crate::statedir::resolve_trusted`], with `lstat` and `readlink`: nothing is opened);
///    the file found must be a regular file;
/// 2. its trusted parent directory is opened, and the file `openat` from it with `O_NOFOLLOW`
///    and `O_NONBLOCK` (a FIFO or device put there since cannot block or be followed);
/// 3. the opened file must still be a regular file, owned and moded as in 1, at most
///    [`MAX_CONFIG_BYTES`]; then it is read.
pub fn read_text(source: &ConfigSource) -> Result<std::borrow::Cow<'static, str>, ConfigError> {
    let path = match source {
        ConfigSource::Builtin => return Ok(std::borrow::Cow::Borrowed(BUILTIN_TOML)),
        ConfigSource::File(path) => path,
    };
    let fail = |message: String| ConfigError {
        source: path.display().to_string(),
        message,
    };
    let absolute =
        std::path::absolute(path).map_err(|e| fail(format!("cannot inspect it: {e}")))?;
    let (resolved, last) = crate::statedir::resolve_trusted(&absolute).map_err(|e| {
        // `exists` follows links with stat(2): it opens nothing either.
        if absolute.exists() {
            fail(format!("refused: {e}"))
        } else if path == Path::new(DEFAULT_CONFIG_PATH) {
            fail(format!(
                "cannot read it: {e}; restore it, or remove the directory {} to use the \
                 built-in default",
                path.parent().unwrap_or(path).display()
            ))
        } else {
            fail(format!("cannot read it: {e}"))
        }
    })?;
    if !last.is_some_and(|m| m.is_file()) {
        return Err(fail(format!(
            "refused: {} is not a regular file",
            resolved.display()
        )));
    }
    let file = open_in_parent(&resolved).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| fail(format!("cannot inspect it: {e}")))?;
    check_opened(&meta, path).map_err(fail)?;
    let text = crate::statedir::read_sized(&file, meta.len())
        .and_then(|b| String::from_utf8(b).map_err(std::io::Error::other))
        .map_err(|e| fail(format!("cannot read it: {e}")))?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(fail(format!(
            "refused: larger than {MAX_CONFIG_BYTES} bytes"
        )));
    }
    Ok(std::borrow::Cow::Owned(text))
}

/// Opens `path` (absolute, every component trusted and no symlink) for reading: its parent as
/// a directory, then the file from that descriptor, without following a link and without
/// blocking.
fn open_in_parent(path: &Path) -> std::io::Result<std::fs::File> {
    use nix::fcntl::OFlag;
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::fs::OpenOptionsExt;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::other("not a file name"));
    };
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW)
        .open(parent)?;
    let fd = nix::fcntl::openat(
        Some(dir.as_raw_fd()),
        name,
        OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    // SAFETY: `fd` was just returned by openat(2) and is owned by nobody else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// The opened configuration file, checked again from its descriptor: a regular file owned by
/// root (or the hook's user), not writable by group or others, at most [`MAX_CONFIG_BYTES`].
fn check_opened(meta: &std::fs::Metadata, path: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if !meta.is_file() {
        return Err("refused: not a regular file".to_owned());
    }
    if meta.uid() != 0 && meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(format!(
            "refused: owned by uid {}, not by root; run `chown root {}`",
            meta.uid(),
            path.display()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "refused: writable by group or others (mode {:o}); run `chmod go-w {}`",
            meta.mode() & 0o7777,
            path.display()
        ));
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(format!("refused: larger than {MAX_CONFIG_BYTES} bytes"));
    }
    Ok(())
}

fn check_path(at: &str, what: &str, path: &Path) -> Result<(), String> {
    if !path.is_absolute() {
        return Err(format!("{at}: {what} {} must be absolute", path.display()));
    }
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes.contains(&b'\n') || bytes.contains(&b'=') {
        return Err(format!(
            "{at}: {what} {:?} holds a newline or '=', which Nix's hook protocol cannot express",
            path
        ));
    }
    Ok(())
}

/// Turns a TOML error into one line with line and column.
fn describe_toml_error(e: &toml::de::Error, text: &str) -> String {
    let message = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let (line, column) = line_column(text, span.start);
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_config_without_the_features_or_escapes_cannot_answer() {
        let text = BUILTIN_TOML.as_bytes();
        let f = |names: &[&str]| -> Vec<Vec<u8>> {
            names.iter().map(|n| n.as_bytes().to_vec()).collect()
        };
        assert!(!Config::text_may_answer(text, &f(&["big-parallel", "kvm"])));
        assert!(Config::text_may_answer(text, &f(&["kvm", "cuda"])));
        assert!(Config::text_may_answer(text, &f(&[""])));
        let escaped = "[[rule]]\nname = \"r\"\nfeatures = [\"\\u006bvm\"]\n";
        let parsed = Config::parse(escaped, "t").unwrap();
        assert_eq!(parsed.rules[0].features, ["kvm"]);
        assert!(Config::text_may_answer(escaped.as_bytes(), &f(&["kvm"])));
        // Every rule of a parsed config answers its own features.
        for rule in &Config::builtin().rules {
            for feature in &rule.features {
                assert!(Config::text_may_answer(text, &f(&[feature])), "{feature}");
            }
        }
    }

    #[test]
    fn may_answer_never_blocks_or_guesses_on_odd_files() {
        let dir = tempfile::tempdir().unwrap();
        let features = vec![b"big-parallel".to_vec()];
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(Config::may_answer(
            &ConfigSource::File(fifo.clone()),
            &features
        ));
        // Refused from its `lstat`, never opened (an open for reading would block).
        let e = Config::load(&ConfigSource::File(fifo))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let link = dir.path().join("null.toml");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        let e = Config::load(&ConfigSource::File(link))
            .unwrap_err()
            .to_string();
        assert!(e.contains("refused: /dev/null"), "{e}");
        let missing = dir.path().join("missing.toml");
        assert!(Config::may_answer(&ConfigSource::File(missing), &features));
        let big = dir.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        assert!(Config::may_answer(
            &ConfigSource::File(big.clone()),
            &features
        ));
        let e = Config::load(&ConfigSource::File(big))
            .unwrap_err()
            .to_string();
        assert!(e.contains("larger than"), "{e}");
        let plain = dir.path().join("plain.toml");
        std::fs::write(&plain, BUILTIN_TOML).unwrap();
        assert!(!Config::may_answer(&ConfigSource::File(plain), &features));
        assert!(!Config::may_answer(&ConfigSource::Builtin, &features));
    }

    /// Found by the `config_parse` fuzz target: a `\n` escape inside a quoted value was echoed
    /// into the error, which then spanned two lines.
    #[test]
    fn errors_stay_on_one_line_whatever_the_values_hold() {
        for text in [
            "closure_cache = \"arv/cc/ahe/cuda-s\\nd vmap\"",
            "nix_store = \"bin/\\nnix-store\"",
            "symlink_roots = [\"x\\ny\"]",
            "[[rule]]\nname = \"a\\nb\"\nfeatures = []",
            "[[rule]]\nname = \"a\\u001bb\"\nfeatures = [\"cuda\"]\n[[rule]]\nname = \"a\\u001bb\"\nfeatures = [\"cuda\"]",
        ] {
            let e = Config::parse(text, "t\nest").expect_err(text).to_string();
            assert!(!e.contains('\n') && !e.contains('\u{1b}'), "{text:?} gave {e:?}");
            assert!(e.starts_with("config t\\nest: "), "{e}");
        }
    }

    #[test]
    fn the_embedded_default_is_the_reference_builtin() {
        assert_eq!(Config::builtin(), reference_builtin());
    }

    /// The built-in configuration as it was written in Rust before it moved to a TOML file.
    fn reference_builtin() -> Config {
        let on = |platform: Option<Platform>, glob: &str, required: bool| DeviceGlob {
            glob: glob.to_string(),
            required,
            hint: None,
            platform,
        };
        let device = |glob: &str, required: bool| on(None, glob, required);
        let discrete = |glob: &str| on(Some(Platform::Discrete), glob, true);
        let tegra = |glob: &str, required: bool| on(Some(Platform::Tegra), glob, required);
        Config {
            host_root: default_host_root(),
            store_dir: default_store_dir(),
            closure_cache: default_closure_cache(),
            nix_store: default_nix_store(),
            missing_drv: MissingDrv::Skip,
            symlink_roots: default_symlink_roots(),
            runtime_dir: default_runtime_dir(),
            gpus_per_build: 0,
            max_gpus_per_build: 0,
            lease_wait_seconds: default_lease_wait_seconds(),
            cdi_spec_dirs: crate::cdi::SpecDirs::default(),
            rules: vec![Rule {
                name: "nvidia".to_string(),
                features: DEFAULT_FEATURES.iter().map(|f| f.to_string()).collect(),
                devices: vec![
                    discrete("/dev/nvidiactl"),
                    discrete("/dev/nvidia-uvm"),
                    discrete("/dev/nvidia[0-9]*"),
                    device("/dev/nvidia-uvm-tools", false),
                    device("/dev/nvidia-modeset", false),
                    device("/dev/nvidia-caps/nvidia-cap*", false),
                    device("/dev/nvidia-caps-imex-channels/*", false),
                    device("/dev/dri/renderD*", false),
                    device("/dev/dri/card*", false),
                    tegra("/dev/nvmap", true),
                    tegra("/dev/nvhost-*", false),
                    tegra("/dev/nvgpu/igpu0/*", false),
                    tegra("/dev/nvsciipc", false),
                    tegra("/dev/host1x-fence", false),
                ],
                paths: Vec::new(),
                mounts: Vec::new(),
                driver: Some(DriverConfig::default()),
                cdi: Vec::new(),
            }],
        }
    }

    #[test]
    fn builtin_serves_nixos() {
        let c = Config::builtin();
        c.validate().unwrap();
        let rules = c.matching_rules(&[b"big-parallel", b"gpu"]);
        assert_eq!(rules.len(), 1);
        assert!(rules[0]
            .devices
            .iter()
            .any(|d| d.glob == "/dev/nvidia-uvm" && d.required));
        let driver = rules[0].driver.as_ref().unwrap();
        assert_eq!(driver.link, Path::new("/run/opengl-driver"));
        assert!(driver.required && driver.host_libraries);
        assert!(c.matching_rules(&[b"kvm"]).is_empty());
    }

    #[test]
    fn full_file_parses() {
        let text = r#"
host_root = "/tmp/root"
closure_cache = "/tmp/cache"
[[rule]]
name = "nvidia"
features = ["cuda"]
[[rule.device]]
glob = "/dev/nvidia[0-9]*"
required = true
hint = "load the driver"
[[rule.path]]
path = "/run/opengl-driver"
[[rule.mount]]
inside = "/run/opengl-driver/lib"
outside = "/opt/driver"
required = true
"#;
        let c = Config::parse(text, "t").unwrap();
        assert_eq!(c.host_root, Path::new("/tmp/root"));
        assert_eq!(c.store_dir, Path::new("/nix/store"));
        let r = &c.rules[0];
        assert_eq!(r.devices[0].hint.as_deref(), Some("load the driver"));
        assert!(!r.paths[0].required);
        assert!(r.mounts[0].required);
    }

    #[test]
    fn unknown_key_is_named_with_line_and_column() {
        let text = "[[rule]]\nname = \"x\"\nfeatures = [\"cuda\"]\n[[rule.device]]\nglob = \"/dev/x\"\nrequird = true\n";
        let e = Config::parse(text, "f.toml").unwrap_err();
        let s = e.to_string();
        assert!(s.contains("requird"), "{s}");
        assert!(s.contains("line 6, column 1"), "{s}");
        assert!(s.starts_with("config f.toml:"), "{s}");
    }

    #[test]
    fn invalid_values_are_refused() {
        for (text, needle) in [
            ("[[rule]]\nname=\"a\"\nfeatures=[]\n", "no features"),
            ("[[rule]]\nname=\"a\"\nfeatures=[\"c d\"]\n", "whitespace"),
            (
                "[[rule]]\nname=\"a\"\nfeatures=[\"c\"]\n[[rule.path]]\npath=\"rel\"\n",
                "absolute",
            ),
            (
                "[[rule]]\nname=\"a\"\nfeatures=[\"c\"]\n[[rule.path]]\npath=\"/a=b\"\n",
                "'='",
            ),
            (
                "[[rule]]\nname=\"a\"\nfeatures=[\"c\"]\n[[rule.device]]\nglob=\"/dev/[\"\n",
                "valid glob",
            ),
            (
                "[[rule]]\nname=\"a\"\nfeatures=[\"c\"]\n[[rule]]\nname=\"a\"\nfeatures=[\"d\"]\n",
                "twice",
            ),
            ("host_root = \"x\"\n", "absolute"),
            ("[[rule]]\nname = 3\n", "line 2"),
        ] {
            let e = Config::parse(text, "t").unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_deleted_config_is_not_the_builtin() {
        // Issue 12, finding 1: deleting the file silently widened what builds got.
        let t = tempfile::tempdir().unwrap();
        let default = t.path().join("cuda-sandbox/config.toml");
        assert_eq!(locate_in(None, None, &default), ConfigSource::Builtin);
        std::fs::create_dir(t.path().join("cuda-sandbox")).unwrap();
        let located = locate_in(None, None, &default);
        assert_eq!(located, ConfigSource::File(default.clone()));
        assert!(Config::load(&located).is_err());
        std::fs::write(&default, "").unwrap();
        assert!(Config::load(&locate_in(None, None, &default)).is_ok());
    }
}
