//! Where the configuration comes from, and reading its text once it is trusted.

use super::error::{ConfigError, Problem};
use super::{BUILTIN_TOML, DEFAULT_CONFIG_PATH, MAX_CONFIG_BYTES};
use crate::trust::{self, TrustError};
use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

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

/// The configuration file to read: `explicit` (`--config`), else `from_env` (the value of
/// [`super::CONFIG_ENV`], ignored when empty), else the default path when it or its directory
/// exists, else none (use the built-in default).
pub fn locate(explicit: Option<&Path>, from_env: Option<&OsStr>) -> ConfigSource {
    locate_in(
        explicit,
        from_env.filter(|p| !p.is_empty()),
        Path::new(DEFAULT_CONFIG_PATH),
    )
}

/// [`locate`] with the default path given.
fn locate_in(explicit: Option<&Path>, env: Option<&OsStr>, default: &Path) -> ConfigSource {
    if let Some(p) = explicit.map(Into::into).or_else(|| env.map(Into::into)) {
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

/// The configuration's text: the built-in one, or the file's, read only once it is trusted as
/// sudo trusts `sudoers`. The hook runs as root before every build, so whoever can write its
/// config decides what builds see (and which program root runs). The file is opened by
/// [`trust::open_file`] (every component of its path, and every symlink target on the way,
/// owned by root or the hook's user and not writable by group or others; a regular file,
/// opened without following a link or blocking, and checked again once open), and read only
/// when at most [`MAX_CONFIG_BYTES`].
pub(crate) fn read_text(source: &ConfigSource) -> Result<Cow<'static, str>, ConfigError> {
    let ConfigSource::File(path) = source else {
        return Ok(Cow::Borrowed(BUILTIN_TOML));
    };
    let fail = |problem: Problem| ConfigError {
        file: path.display().to_string(),
        problem,
    };
    let absolute = std::path::absolute(path).map_err(|e| fail(Problem::Inspect(e)))?;
    let (file, meta) =
        trust::open_file(&absolute).map_err(|e| fail(refusal(path, &absolute, e)))?;
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(fail(Problem::TooLarge));
    }
    let bytes =
        crate::statedir::read_sized(&file, meta.len()).map_err(|e| fail(Problem::Unreadable(e)))?;
    let text = String::from_utf8(bytes).map_err(|e| fail(Problem::NotUtf8(e)))?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(fail(Problem::TooLarge));
    }
    Ok(Cow::Owned(text))
}

/// What a failure to open the configuration at `path` (`absolute`) means for the user: a file
/// that exists is refused; one that does not cannot be read (the default one with how to get
/// the built-in back).
fn refusal(path: &Path, absolute: &Path, error: TrustError) -> Problem {
    match error {
        TrustError::Open(_, source) => Problem::Unreadable(source),
        // `exists` follows links with stat(2): it opens nothing either.
        error if absolute.exists() => Problem::Untrusted(error),
        error if path == Path::new(DEFAULT_CONFIG_PATH) => {
            Problem::DefaultMissing(error, path.parent().unwrap_or(path).to_path_buf())
        }
        error => Problem::Missing(error),
    }
}

/// The file's text without any trust check, for `check-config --content-only` (see
/// [`super::Config::load_content`]).
pub(super) fn read_untrusted(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.display().to_string(),
        problem: Problem::Unreadable(e),
    })
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;

    #[test]
    fn a_deleted_config_is_not_the_builtin() {
        // Deleting the file must not silently widen what builds get.
        let t = tempfile::tempdir().unwrap();
        let default = t.path().join("cuda-sandbox/config.toml");
        assert_eq!(locate_in(None, None, &default), ConfigSource::Builtin);
        std::fs::create_dir(t.path().join("cuda-sandbox")).unwrap();
        let located = locate_in(None, None, &default);
        assert_eq!(located, ConfigSource::File(default.clone()));
        assert!(matches!(
            Config::load(&located).unwrap_err().problem,
            Problem::Missing(TrustError::Inspect(..))
        ));
        std::fs::write(&default, "").unwrap();
        assert!(Config::load(&locate_in(None, None, &default)).is_ok());
    }

    #[test]
    fn the_environment_comes_after_the_flag_and_an_empty_one_is_none() {
        let flag = Path::new("/flag.toml");
        let env = OsStr::new("/env.toml");
        assert_eq!(
            locate(Some(flag), Some(env)),
            ConfigSource::File(flag.into())
        );
        assert_eq!(locate(None, Some(env)), ConfigSource::File(env.into()));
        assert_eq!(
            locate(None, Some(OsStr::new(""))),
            locate(None, None),
            "an empty value is no value"
        );
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
        // Refused from the walk's `O_PATH` descriptor, never opened for reading (which would
        // block).
        let e = Config::load(&ConfigSource::File(fifo)).unwrap_err();
        assert!(
            matches!(e.problem, Problem::Untrusted(TrustError::NotRegular(_))),
            "{e:?}"
        );
        assert!(e.to_string().contains("not a regular file"), "{e}");
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
        let e = Config::load(&ConfigSource::File(big)).unwrap_err();
        assert!(matches!(e.problem, Problem::TooLarge), "{e:?}");
        assert!(e.to_string().contains("larger than"), "{e}");
        let plain = dir.path().join("plain.toml");
        std::fs::write(&plain, BUILTIN_TOML).unwrap();
        assert!(!Config::may_answer(&ConfigSource::File(plain), &features));
        assert!(!Config::may_answer(&ConfigSource::Builtin, &features));
    }
}
