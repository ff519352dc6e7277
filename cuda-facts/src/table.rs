//! What the compiled-in tables (`gpus.txt`, `releases.txt`) may get wrong, and the one reader
//! of a release (`12.8`) both use. Their unit tests parse them, so an error is a defect of this
//! crate's source, never of its input.

use super::{CudaVersion, ValueError};

/// Why a table does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// A line is wrong: the table's file name, the line's number (from 1), what is wrong with
    /// it.
    #[error("{0} line {1}: {2}")]
    Line(&'static str, usize, TableFault),
    /// `releases.txt` has no release or no branch rows.
    #[error("{0}: no releases or no branches")]
    Empty(&'static str),
}

/// What is wrong with one line of a table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableFault {
    /// Not `X.Y` with a positive major and a one-digit minor.
    #[error("{0:?} is not a CUDA release X.Y")]
    Release(String),
    /// `releases.txt`: a release at or below the one before.
    #[error("releases must be in increasing order")]
    ReleaseOrder,
    /// `releases.txt`: a branch that is not a number.
    #[error("bad branch {0:?}")]
    Branch(String),
    /// `releases.txt`: a branch, or its CUDA version, below the one before.
    #[error("branches must be in increasing order")]
    BranchOrder,
    /// `releases.txt`: a row of neither kind.
    #[error("want `release | X.Y | source` or `branch | NNN | X.Y | source`")]
    ReleasesRow,
    /// `gpus.txt`: a second `nixpkgs:` line.
    #[error("a second nixpkgs line")]
    SecondPin,
    /// `gpus.txt`: a `nixpkgs:` line without `owner/name` and 40 hex digits.
    #[error("bad nixpkgs line {0:?}: write nixpkgs: owner/name COMMIT")]
    Pin(String),
    /// `gpus.txt`: a row without its 9 fields.
    #[error("{0} fields, not 9")]
    Fields(usize),
    /// `gpus.txt`: a capability that does not parse.
    #[error(transparent)]
    Capability(#[from] ValueError),
    /// `gpus.txt`: a jetson column other than yes or no.
    #[error("jetson {0:?}: yes or no")]
    Jetson(String),
    /// `gpus.txt`: an until column of neither form.
    #[error("bad until {0:?}: write X.Y dropped or X.Y renamed A.B")]
    Until(String),
    /// `gpus.txt`: a nixpkgs form not among `sm a f -`.
    #[error("nixpkgs form {0:?}: write sm, a, f or -")]
    Form(String),
    /// `gpus.txt`: nixpkgs forms repeated or out of order.
    #[error("nixpkgs forms {0:?}: write them once, as sm a f")]
    FormOrder(String),
    /// `gpus.txt`: a nixpkgs form whose variant column is `-`.
    #[error("nixpkgs names a variant the a or f column does not have")]
    FormWithoutVariant,
    /// `gpus.txt`: a capability at or below the row before.
    #[error("rows must be in increasing capability")]
    RowOrder,
}

/// The rows of a table: each line, trimmed, that is neither blank nor a `#` comment, with what
/// makes a fault on it an error naming the table and the line.
pub(super) fn rows<'a>(
    text: &'a str,
    table: &'static str,
) -> impl Iterator<Item = (&'a str, impl Fn(TableFault) -> TableError + Copy)> {
    let rows = text.lines().map(str::trim).zip(1..);
    rows.filter(|(text, _)| !text.is_empty() && !text.starts_with('#'))
        .map(move |(text, line)| (text, move |fault| TableError::Line(table, line, fault)))
}

/// `12.8` → 12080.
pub(super) fn release(text: &str) -> Result<CudaVersion, TableFault> {
    let bad = || TableFault::Release(text.to_owned());
    let (major, minor) = text.split_once('.').ok_or_else(bad)?;
    match (major.parse::<i32>(), minor.parse::<i32>()) {
        (Ok(major @ 1..), Ok(minor @ 0..=9)) => Ok(CudaVersion(major * 1000 + minor * 10)),
        _ => Err(bad()),
    }
}
