//! Why `exec` could not run the command. Each renders as one line.

use crate::pipeline::HookFailure;
use crate::plan::Problem;
use crate::request::RequestFailure;
use crate::statedir::StateDirError;
use std::path::PathBuf;

/// Why `exec` could not run the command.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// Namespaces need root.
    #[error("exec needs root for its mount namespace: run it with sudo")]
    NotRoot,
    /// The request fails as a build would.
    #[error(transparent)]
    Refused(RequestFailure),
    /// No configuration could be used: exec keeps its root in the configured runtime
    /// directory, for untagged requests too. The text says why.
    #[error(
        "exec needs a usable configuration (its root is kept in the runtime directory): {0}; \
         `cuda-sandbox-hook check-config` shows what is wrong"
    )]
    NoConfig(String),
    /// The plan has a problem.
    #[error("the hook would refuse this build: {0}")]
    Problem(Box<Problem>),
    /// The hook's answer failed.
    #[error("the hook would refuse this build: {0}")]
    Hook(HookFailure),
    /// An `--env` argument is malformed.
    #[error("--env {0}: give NAME=VALUE or NAME")]
    BadEnv(String),
    /// A `--bind` path cannot be used: the path as given, and why.
    #[error("--bind {path}: {1}", path = .0.display())]
    BadBind(PathBuf, String),
    /// No command was given.
    #[error("exec needs a command after --")]
    NoCommand,
    /// The command cannot be found or is not a program.
    #[error("{0}")]
    Program(String),
    /// A system call failed: what exec was doing, and the error.
    #[error("exec: {0}: {1}")]
    Sys(String, nix::Error),
    /// A file operation failed: the file, and the error.
    #[error("exec: {path}: {1}", path = .0.display())]
    Io(PathBuf, std::io::Error),
    /// An argument, the program path or an `--env` value holds a NUL byte.
    #[error("exec: {0} holds a NUL byte")]
    Nul(&'static str),
    /// The command's standard streams could not be set up.
    #[error("exec: standard streams: {0}")]
    Stdio(std::io::Error),
    /// The staging directory cannot be trusted or made.
    #[error(transparent)]
    Staging(#[from] StateDirError),
}

impl ExecError {
    /// A failed system call while doing `what`.
    pub(crate) fn sys(what: impl Into<String>, errno: nix::Error) -> ExecError {
        ExecError::Sys(what.into(), errno)
    }

    /// A failed file operation on `path`.
    pub(crate) fn io(path: impl Into<PathBuf>, error: std::io::Error) -> ExecError {
        ExecError::Io(path.into(), error)
    }
}
