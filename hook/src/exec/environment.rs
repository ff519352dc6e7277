//! The command's environment: Nix's sandbox base, plus what `--env` names, never exec's own.

use super::ExecError;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The environment every command starts with, as in Nix's sandbox: a build's temporary
/// directory, a home and a `PATH` that lead nowhere, and the store (`NIX_STORE`, from the
/// configuration's `store_dir`, is added). Nothing of exec's own environment is passed unless
/// `--env` names it.
pub const BASE_ENVIRONMENT: &[(&str, &str)] = &[
    ("HOME", "/homeless-shelter"),
    ("NIX_BUILD_TOP", "/build"),
    ("PATH", "/path-not-set"),
    ("PWD", "/build"),
    ("TEMP", "/build"),
    ("TEMPDIR", "/build"),
    ("TERM", "xterm-256color"),
    ("TMP", "/build"),
    ("TMPDIR", "/build"),
];

/// The command's environment: [`BASE_ENVIRONMENT`], `NIX_STORE=store_dir`, then each `--env`
/// in order (`NAME=VALUE` sets, replacing what was there; `NAME` passes `host(NAME)` when it
/// is set and is skipped otherwise, as `docker run -e NAME` does).
pub fn environment(
    settings: &[OsString],
    store_dir: &Path,
    host: impl Fn(&OsStr) -> Option<OsString>,
) -> Result<Vec<(OsString, OsString)>, ExecError> {
    let mut env: Vec<(OsString, OsString)> = BASE_ENVIRONMENT
        .iter()
        .map(|(n, v)| (OsString::from(n), OsString::from(v)))
        .collect();
    env.push(("NIX_STORE".into(), store_dir.as_os_str().to_owned()));
    for setting in settings {
        let bytes = setting.as_bytes();
        let mut parts = bytes.splitn(2, |b| *b == b'=');
        let name = OsStr::from_bytes(parts.next().unwrap_or_default()).to_owned();
        let value = parts.next().map(|v| OsStr::from_bytes(v).to_owned());
        if name.is_empty() || bytes.contains(&0) {
            return Err(ExecError::BadEnv(setting.to_string_lossy().into_owned()));
        }
        let Some(value) = value.or_else(|| host(&name)) else {
            continue;
        };
        env.retain(|(n, _)| *n != name);
        env.push((name, value));
    }
    env.sort();
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_is_the_documented_base_plus_what_env_gives() {
        let host = |n: &std::ffi::OsStr| (n == "FROM_HOST").then(|| OsString::from("h"));
        let args = ["FROM_HOST", "UNSET", "PATH=/bin", "EMPTY=", "A=b=c"].map(OsString::from);
        let env = environment(&args, Path::new("/nix/store"), host).unwrap();
        let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        assert_eq!(get("FROM_HOST"), Some("h".into()));
        assert_eq!(get("UNSET"), None);
        assert_eq!(get("PATH"), Some("/bin".into()), "--env replaces the base");
        assert_eq!(get("EMPTY"), Some("".into()));
        assert_eq!(get("A"), Some("b=c".into()));
        assert_eq!(get("NIX_STORE"), Some("/nix/store".into()));
        assert_eq!(get("HOME"), Some("/homeless-shelter".into()));
        assert_eq!(env.len(), BASE_ENVIRONMENT.len() + 4, "{env:?}"); // NIX_STORE, 3 new
        assert!(environment(&["=x".into()], Path::new("/nix/store"), host).is_err());
    }
}
