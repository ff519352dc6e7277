//! Resolve: what is asked for. One function for the hook, `explain` and `exec`.
//!
//! Reads the derivation (the `.drv` file, else the JSON some Nix variants pass in
//! `NIX_DERIVATION_V4`), applies the `missing_drv` policy when neither is there, loads the
//! configuration (with its trust check) only when a feature was found, and yields the
//! features, the matching rules and the verdict. The derivation's attributes are read in
//! [`crate::drv`]; the GPU count only once a rule has matched. Writes nothing.

use crate::config::{self, Config, ConfigSource, MissingDrv, DEFAULT_FEATURES};
use crate::drv::{self, DrvEnv, RequiredFeatures};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Environment variable in which some Nix variants pass the derivation as JSON.
pub const DERIVATION_ENV: &str = "NIX_DERIVATION_V4";

/// Environment variable naming an open file descriptor from which the derivation's ATerm can be
/// read (proposed for upstream Nix in NixOS/nix#16413, not merged). A JSON document there is
/// read like [`DERIVATION_ENV`], in case the proposal settles on JSON.
pub const ATERM_FD_ENV: &str = "DRV_ATERM_FD";

/// What the build is to get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing: no configured feature (or a policy said so). The text says why.
    Nothing(String),
    /// Plan for the matching rules.
    Tagged,
    /// The build must fail, with this one-line message.
    Fail(String),
}

/// Where the request comes from: the derivation and the caller's additions.
#[derive(Debug, Clone, Default)]
pub struct Input<'a> {
    /// The `.drv` path (as Nix passes it, or as given to `explain`/`exec`).
    pub drv: Option<&'a Path>,
    /// The derivation as JSON, when the caller has it (the hook: `$NIX_DERIVATION_V4`).
    pub derivation_json: Option<OsString>,
    /// A file descriptor number holding the derivation, when the `.drv` is absent (the hook:
    /// `$DRV_ATERM_FD`).
    pub aterm_fd: Option<OsString>,
    /// Features added by the caller (`--features`).
    pub extra_features: &'a [String],
    /// Features to use when the derivation and the caller name none (`exec`: `cuda`).
    pub default_features: &'a [&'a str],
    /// `--config`.
    pub config: Option<&'a Path>,
    /// The value of [`config::CONFIG_ENV`], when the caller reads it.
    pub config_env: Option<OsString>,
    /// The sandbox root (the hook's second argument; `exec`'s private root).
    pub chroot: Option<&'a Path>,
    /// Load the configuration even for an untagged request (`explain` shows it).
    pub always_load_config: bool,
}

/// The resolved request.
#[derive(Debug, Clone)]
pub struct Request {
    /// The derivation path, when one was named.
    pub derivation: Option<PathBuf>,
    /// The sandbox root.
    pub chroot: Option<PathBuf>,
    /// The required features (bytes, as in the derivation), plus the caller's.
    pub features: Vec<Vec<u8>>,
    /// Whether the features came from structured attrs.
    pub structured: bool,
    /// Where the configuration comes from.
    pub config_source: ConfigSource,
    /// The configuration, when it was loaded and is usable.
    pub config: Option<Config>,
    /// Indices of the matching rules in `config.rules`.
    pub rules: Vec<usize>,
    /// The derivation's `cudaSandboxGpus`, read only when a rule matched.
    pub gpus_wanted: Option<String>,
    /// What the build gets.
    pub verdict: Verdict,
    /// Things worth a warning on stderr (ignored broken config, missing `.drv`, …).
    pub warnings: Vec<String>,
}

impl Request {
    /// The derivation's name for messages and the manifest.
    pub fn derivation_name(&self) -> String {
        self.derivation
            .as_ref()
            .map(|d| d.display().to_string())
            .unwrap_or_default()
    }

    /// The features as text (bytes that are not UTF-8 shown as U+FFFD).
    pub fn features_lossy(&self) -> Vec<String> {
        self.features
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect()
    }

    /// The configuration and the matching rules, when the verdict is [`Verdict::Tagged`].
    pub fn tagged(&self) -> Option<&Config> {
        match (&self.verdict, &self.config) {
            (Verdict::Tagged, Some(c)) => Some(c),
            _ => None,
        }
    }

    /// The first feature of the first matching rule, for messages.
    pub fn first_match(&self) -> String {
        let Some(config) = &self.config else {
            return String::new();
        };
        let features: Vec<&[u8]> = self.features.iter().map(Vec::as_slice).collect();
        self.rules
            .first()
            .and_then(|i| config.rules[*i].first_match(&features))
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .unwrap_or_default()
    }
}

/// Resolves `input`: derivation → features → configuration → rules → verdict.
pub fn resolve(input: &Input<'_>) -> Request {
    let mut req = Request {
        derivation: input.drv.map(Path::to_path_buf),
        chroot: input.chroot.map(Path::to_path_buf),
        features: Vec::new(),
        structured: false,
        config_source: config::locate(input.config, input.config_env.as_deref()),
        config: None,
        rules: Vec::new(),
        gpus_wanted: None,
        verdict: Verdict::Tagged,
        warnings: Vec::new(),
    };
    let name = req.derivation_name();
    let Some(drv_path) = input.drv else {
        req.with_features(Vec::new(), false, input, || None);
        return req;
    };
    // The file first; on a remote builder, where it is absent, what Nix passed instead.
    match read_drv(drv_path, input.aterm_fd.as_deref()) {
        Ok((bytes, Some(from))) if bytes.trim_ascii_start().starts_with(b"{") => {
            req.with_json_derivation(&bytes, from, &name, input);
        }
        Ok((bytes, from)) => match DrvEnv::parse(&bytes) {
            Ok(d) => match d.required_features() {
                Ok(f) => {
                    let (features, structured) = owned(f);
                    req.with_features(features, structured, input, || d.gpus_attr());
                }
                Err(e) => req.unreadable(&bytes, &name, &prefixed(from, &e)),
            },
            Err(e) => req.unreadable(&bytes, &name, &prefixed(from, &e)),
        },
        Err(e) => match &input.derivation_json {
            Some(json) => {
                req.with_json_derivation(json.as_encoded_bytes(), DERIVATION_ENV, &name, input)
            }
            None => req.missing_drv(&name, &e.to_string()),
        },
    }
    req
}

/// `error`, prefixed with where the bytes came from when not from the `.drv` file.
fn prefixed(from: Option<&str>, error: &dyn std::fmt::Display) -> String {
    match from {
        Some(source) => format!("{source}: {error}"),
        None => error.to_string(),
    }
}

/// The derivation's bytes: the `.drv` file, else the descriptor named by `aterm_fd`
/// ([`ATERM_FD_ENV`], read by [`read_aterm_fd`]), with `Some(ATERM_FD_ENV)` saying they came
/// from there.
fn read_drv(
    drv_path: &Path,
    aterm_fd: Option<&std::ffi::OsStr>,
) -> std::io::Result<(Vec<u8>, Option<&'static str>)> {
    let file_error = match std::fs::read(drv_path) {
        Ok(bytes) => return Ok((bytes, None)),
        Err(e) => e,
    };
    let Some(fd) = aterm_fd else {
        return Err(file_error);
    };
    let fd = fd.to_string_lossy().into_owned();
    read_aterm_fd(&fd, &ATERM_FD_LIMITS)
        .map(|bytes| (bytes, Some(ATERM_FD_ENV)))
        .map_err(|why| {
            std::io::Error::new(
                file_error.kind(),
                format!("{file_error}; and {ATERM_FD_ENV}={fd}: {why}"),
            )
        })
}

/// How much [`read_aterm_fd`] reads, and how long it waits for a pipe.
#[derive(Debug, Clone, Copy)]
pub struct FdLimits {
    /// The most bytes a derivation on the descriptor may have.
    pub max_bytes: u64,
    /// How long a pipe may take to deliver all of it (its writer closing it).
    pub pipe_wait: std::time::Duration,
}

/// The hook's limits on [`ATERM_FD_ENV`]: 256 MiB (Nix itself sets none; the largest
/// derivations in Nixpkgs are a few MiB), and 5 s for a pipe, far more than a writer needs.
pub const ATERM_FD_LIMITS: FdLimits = FdLimits {
    max_bytes: 256 << 20,
    pipe_wait: std::time::Duration::from_secs(5),
};

/// Reads the derivation from descriptor `fd` (its number, as text), as NixOS/nix#16413
/// proposes to hand it over: an anonymous temporary file (`O_TMPFILE` or a memfd), or a pipe.
/// Never blocks past `limits`, never reads more than `limits.max_bytes`:
/// - descriptors 0–2 are refused: they are the hook's own stdin, stdout (its answer to Nix)
///   and stderr, never a derivation;
/// - the descriptor's type is looked at before anything is opened (`stat` of
///   `/proc/self/fd/N` opens nothing): only a regular file (memfds are) or a pipe/FIFO is
///   read; a terminal, `/dev/zero` or any other device, a socket or a directory is refused;
/// - a regular file larger than the cap is refused unread, and read with the cap as bound
///   (it could grow meanwhile);
/// - a pipe is read without blocking (`O_NONBLOCK`, `poll`) until its end, the cap, or
///   `limits.pipe_wait`, whichever comes first: a writer that keeps the pipe open and never
///   writes (or never closes it) makes this fail, never hang. We accept every pipe rather
///   than guess which came from Nix: the bound is what makes any pipe safe.
///
/// The descriptor is reopened through `/proc/self/fd/N`: a fresh open file description reads
/// a file from its start whatever the offset of the one handed over, and no raw descriptor
/// needs adopting (no unsafe code).
pub fn read_aterm_fd(fd: &str, limits: &FdLimits) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let number: u32 = match fd.parse() {
        Ok(n) if !fd.is_empty() && fd.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => return Err("not a file descriptor number".to_owned()),
    };
    if number <= 2 {
        return Err(format!(
            "descriptor {number} is the hook's own {}, not a derivation",
            ["stdin", "stdout", "stderr"][number as usize]
        ));
    }
    let proc = format!("/proc/self/fd/{number}");
    let meta = std::fs::metadata(&proc).map_err(|e| format!("not usable: {e}"))?;
    let kind = meta.file_type();
    let too_big = |size: u64| {
        format!(
            "holds {size} bytes or more, above the cap of {} bytes",
            limits.max_bytes
        )
    };
    if kind.is_file() && meta.len() > limits.max_bytes {
        return Err(too_big(meta.len()));
    }
    if !kind.is_file() && !kind.is_fifo() {
        let what = if kind.is_char_device() {
            "a character device (a terminal, /dev/zero, …)"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "neither a regular file nor a pipe"
        };
        return Err(format!("is {what}: give a file, a memfd or a pipe"));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(&proc)
        .map_err(|e| format!("cannot open it: {e}"))?;
    let mut out = Vec::new();
    if kind.is_file() {
        let mut bounded = file.take(limits.max_bytes + 1);
        bounded
            .read_to_end(&mut out)
            .map_err(|e| format!("cannot read it: {e}"))?;
    } else {
        read_pipe(file, limits, &mut out)?;
    }
    if out.len() as u64 > limits.max_bytes {
        return Err(too_big(out.len() as u64));
    }
    Ok(out)
}

/// Reads a non-blocking pipe into `out` until its end, `limits.max_bytes + 1` bytes, or
/// `limits.pipe_wait`.
fn read_pipe(mut pipe: std::fs::File, limits: &FdLimits, out: &mut Vec<u8>) -> Result<(), String> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::io::Read;
    use std::os::fd::AsFd;
    let deadline = std::time::Instant::now() + limits.pipe_wait;
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                out.extend_from_slice(&chunk[..n]);
                if out.len() as u64 > limits.max_bytes {
                    return Ok(());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
                let mut fds = [PollFd::new(pipe.as_fd(), PollFlags::POLLIN)];
                match poll(&mut fds, timeout) {
                    Ok(0) => {
                        return Err(format!(
                            "a pipe that did not reach its end within {} s ({} bytes read): \
                             its writer keeps it open",
                            limits.pipe_wait.as_secs_f64(),
                            out.len()
                        ))
                    }
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => return Err(format!("cannot wait for it: {e}")),
                }
            }
            Err(e) => return Err(format!("cannot read it: {e}")),
        }
    }
}

fn owned(f: RequiredFeatures<'_>) -> (Vec<Vec<u8>>, bool) {
    (
        f.features.into_iter().map(|x| x.into_owned()).collect(),
        f.structured,
    )
}

impl Request {
    /// The derivation as JSON (from `source`, named in errors): its features, then as
    /// [`Request::with_features`].
    fn with_json_derivation(&mut self, json: &[u8], source: &str, name: &str, input: &Input<'_>) {
        match drv::JsonDerivation::parse(json).and_then(|d| d.required_features().map(|f| (d, f))) {
            Ok((d, f)) => {
                let (features, structured) = owned(f);
                self.with_features(features, structured, input, || d.gpus_attr());
            }
            Err(e) => self.unreadable(json, name, &format!("{source}: {e}")),
        }
    }

    /// The derivation's features are known: add the caller's, load the configuration, match
    /// the rules, and read the GPU count when one matched.
    fn with_features(
        &mut self,
        mut features: Vec<Vec<u8>>,
        structured: bool,
        input: &Input<'_>,
        gpus: impl FnOnce() -> Option<String>,
    ) {
        features.extend(input.extra_features.iter().map(|f| f.as_bytes().to_vec()));
        if features.is_empty() {
            features.extend(input.default_features.iter().map(|f| f.as_bytes().to_vec()));
        }
        self.features = features;
        self.structured = structured;
        if self.features.is_empty() && !input.always_load_config {
            // The fast path: no feature, no configuration read.
            self.verdict = Verdict::Nothing("the derivation requires no system feature".into());
            return;
        }
        let builtin = self.features.iter().find(|f| {
            DEFAULT_FEATURES
                .iter()
                .any(|d| d.as_bytes() == f.as_slice())
        });
        // The next fastest path: features, but none a GPU feature and none anywhere in the
        // configuration's text, so no rule can answer them and the hook parses nothing (nor
        // warns about a broken configuration: tagged builds and `check-config` report that).
        // The text is read once, trusted first; one that cannot be trusted or read is loaded
        // (and so reported) like any other.
        let text = config::read_text(&self.config_source);
        let unanswerable = builtin.is_none()
            && text
                .as_ref()
                .is_ok_and(|t| !Config::text_may_answer(t.as_bytes(), &self.features));
        if unanswerable && !input.always_load_config {
            self.verdict = Verdict::Nothing(
                "untagged: no required feature appears in the configuration, so the hook \
                 exposes nothing"
                    .into(),
            );
            return;
        }
        let config = match text.and_then(|t| Config::from_text(&self.config_source, &t)) {
            Ok(c) => c,
            Err(e) if unanswerable => {
                // `explain`: what the hook does (nothing, silently), and what is wrong.
                self.verdict = Verdict::Nothing(format!(
                    "untagged: no required feature appears in the configuration, so the hook \
                     exposes nothing (and does not read it further; note that it is broken, \
                     which fails tagged builds: {e})"
                ));
                return;
            }
            Err(e) => {
                let name = self.derivation_name();
                self.verdict = match builtin {
                    Some(f) => Verdict::Fail(format!(
                        "{name} requires feature '{}' but the configuration is broken: {e}",
                        String::from_utf8_lossy(f)
                    )),
                    None => {
                        self.warnings
                            .push(format!("{e} (ignored: this build asks for no GPU feature)"));
                        Verdict::Nothing(format!("the configuration is broken: {e}"))
                    }
                };
                return;
            }
        };
        let features: Vec<&[u8]> = self.features.iter().map(Vec::as_slice).collect();
        self.rules = (0..config.rules.len())
            .filter(|i| config.rules[*i].answers_any(&features))
            .collect();
        if self.rules.is_empty() {
            let configured: Vec<&str> = config
                .rules
                .iter()
                .flat_map(|r| r.features.iter().map(String::as_str))
                .collect();
            self.verdict = Verdict::Nothing(format!(
                "untagged: no required feature is one of [{}], so the hook exposes nothing; \
                 tag the derivation with requiredSystemFeatures = [ \"cuda\" ] to get the GPU",
                configured.join(", ")
            ));
        } else {
            self.gpus_wanted = gpus();
            self.verdict = Verdict::Tagged;
        }
        self.config = Some(config);
    }

    /// The `.drv` is not on disk and Nix passed no JSON (remote builders, Nix issue 9272):
    /// follow the configured `missing_drv` policy.
    fn missing_drv(&mut self, name: &str, error: &str) {
        let config = match Config::load(&self.config_source) {
            Ok(c) => c,
            Err(e) => {
                let why =
                    format!("cannot read derivation {name} ({error}) and {e}; exposing nothing");
                self.warnings.push(why.clone());
                self.verdict = Verdict::Nothing(why);
                return;
            }
        };
        match config.missing_drv {
            MissingDrv::Skip => {
                let why = format!(
                    "cannot read derivation {name} ({error}); exposing nothing (missing_drv = \
                     \"skip\"; on a remote GPU builder that only receives GPU builds, set \
                     missing_drv = \"expose\")"
                );
                self.warnings.push(why.clone());
                self.verdict = Verdict::Nothing(why);
            }
            MissingDrv::Fail => {
                self.verdict = Verdict::Fail(format!(
                    "cannot read derivation {name} ({error}) and missing_drv = \"fail\""
                ))
            }
            MissingDrv::Expose => {
                self.rules = (0..config.rules.len()).collect();
                self.features = config
                    .rules
                    .iter()
                    .flat_map(|r| r.features.iter().map(|f| f.as_bytes().to_vec()))
                    .collect();
                if self.rules.is_empty() {
                    self.verdict = Verdict::Nothing("the configuration has no rule".into());
                } else {
                    self.warnings.push(format!(
                        "derivation {name} is not on disk; exposing every rule (missing_drv = \
                         \"expose\")"
                    ));
                    self.verdict = Verdict::Tagged;
                }
            }
        }
        self.config = Some(config);
    }

    /// A derivation we cannot read: fail only when it could be a tagged build, i.e. when the
    /// bytes name a feature some rule answers to (with a broken config: a built-in feature).
    fn unreadable(&mut self, bytes: &[u8], name: &str, error: &str) {
        let loaded = Config::load(&self.config_source);
        let names: Vec<String> = match &loaded {
            Ok(c) => c.rules.iter().flat_map(|r| r.features.clone()).collect(),
            Err(_) => DEFAULT_FEATURES.iter().map(|s| s.to_string()).collect(),
        };
        let may_be_tagged = names
            .iter()
            .any(|n| memchr::memmem::find(bytes, n.as_bytes()).is_some());
        self.verdict = if may_be_tagged {
            Verdict::Fail(format!(
                "cannot read derivation {name} ({error}), and it may require a GPU feature"
            ))
        } else {
            let why = format!(
                "cannot read derivation {name} ({error}); it names no GPU feature, so exposing \
                 nothing"
            );
            self.warnings.push(why.clone());
            Verdict::Nothing(why)
        };
        self.config = loaded.ok();
    }
}
