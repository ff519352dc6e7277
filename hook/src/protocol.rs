//! The plan rendered as Nix's pre-build-hook answer (the protocol: docs/architecture.md).
//!
//! `extra-sandbox-paths`, one `inside=outside` (or `path`) line per exposure, then an empty line.
//! There is no escaping in this protocol, so a path holding a newline or `=` cannot be said: it
//! is refused, never printed. An empty plan prints nothing, which Nix accepts.

use crate::plan::Exposure;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A path the protocol cannot express: the offending path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "path {0:?} holds a newline or '=', which Nix's pre-build-hook protocol cannot express; \
     rename it or leave it out of the config"
)]
pub struct Unexpressible(pub(crate) PathBuf);

/// Renders `exposures` as the hook's stdout.
pub(crate) fn render(exposures: &[Exposure]) -> Result<Vec<u8>, Unexpressible> {
    if exposures.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(64 * exposures.len());
    out.extend_from_slice(b"extra-sandbox-paths\n");
    for e in exposures {
        let inside = checked(&e.inside)?;
        let outside = checked(&e.outside)?;
        out.extend_from_slice(inside);
        if inside != outside {
            out.push(b'=');
            out.extend_from_slice(outside);
        }
        out.push(b'\n');
    }
    out.push(b'\n');
    Ok(out)
}

fn checked(path: &Path) -> Result<&[u8], Unexpressible> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.contains(&b'\n') || bytes.contains(&b'=') {
        return Err(Unexpressible(path.to_path_buf()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Reason;

    fn exposure(inside: &str, outside: &str) -> Exposure {
        Exposure {
            inside: inside.into(),
            outside: outside.into(),
            reason: Reason::Mount { rule: "r".into() },
        }
    }

    #[test]
    fn renders_the_grammar() {
        let out = render(&[
            exposure("/dev/nvidia0", "/dev/nvidia0"),
            exposure("/run/opengl-driver/lib", "/opt/drv"),
        ])
        .unwrap();
        assert_eq!(
            out,
            b"extra-sandbox-paths\n/dev/nvidia0\n/run/opengl-driver/lib=/opt/drv\n\n"
        );
        assert!(render(&[]).unwrap().is_empty());
    }

    #[test]
    fn refuses_newline_and_equals() {
        for (i, o) in [("/a\nb", "/a"), ("/a", "/a=b"), ("/x=y", "/x=y")] {
            let e = render(&[exposure(i, o)]).unwrap_err();
            assert!(e.to_string().contains("cannot express"));
        }
    }
}
