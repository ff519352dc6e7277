//! The driver's MIG files, parsed in one linear pass over bounded input.
//!
//! - A capability file (`…/gpu0/mig/gi1/access`), per NVIDIA's MIG user guide ("Device Nodes
//!   and Capabilities"): `Key: value` lines, `DeviceFileMinor: 12`, `DeviceFileMode: 292`,
//!   `DeviceFileModify: 1`. Only `DeviceFileMinor` is used, and it must appear once.
//! - `/proc/driver/nvidia-caps/mig-minors`: one `<capability> <minor>` line per capability the
//!   driver can publish, the capability `config`, `monitor`, `gpu<N>/gi<G>/access` or
//!   `gpu<N>/gi<G>/ci<C>/access` (the same guide; the NVIDIA container toolkit's
//!   `internal/nvcaps` reads it so). Lines naming another capability are passed over, as the
//!   toolkit does.
//! - `/proc/devices`: the `Character devices:` section's `<major> <name>` lines; the
//!   capability nodes' major is the one named `nvidia-caps`.

use super::{Capability, InstanceId};
use std::collections::BTreeMap;

/// The most bytes read of a capability file (a few short lines in practice).
pub(crate) const ACCESS_MAX: u64 = 4096;
/// The most bytes read of `mig-minors` (32 GPUs × 15 GIs × 9 capabilities of ~25 bytes each
/// is about 110 KB).
pub(crate) const MIG_MINORS_MAX: u64 = 1 << 20;
/// The most bytes read of `/proc/devices`.
pub(crate) const PROC_DEVICES_MAX: u64 = 64 << 10;

/// Why a MIG file could not be used. Renders as one line (the caller names the file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FormatError {
    /// The file is larger than any the driver writes (the bound).
    #[error("larger than {0} bytes")]
    TooLarge(u64),
    /// A line is not of the documented form.
    /// The 1-based line number, and what is wrong.
    #[error("line {0}: {1}")]
    Line(usize, &'static str),
    /// A capability file without its `DeviceFileMinor` line.
    #[error("no DeviceFileMinor line")]
    NoMinor,
}

/// Every capability `mig-minors` lists, with its minor.
pub(crate) type MigMinors = BTreeMap<Capability, u32>;

/// The `DeviceFileMinor` of a capability file's text.
pub(crate) fn access_minor(text: &[u8]) -> Result<u32, FormatError> {
    let mut minor = None;
    for (i, line) in lines(text, ACCESS_MAX)? {
        let Some((key, value)) = line.split_once(':') else {
            return Err(FormatError::Line(i, "not a `Key: value` line"));
        };
        if key.trim() != "DeviceFileMinor" {
            continue;
        }
        if minor.is_some() {
            return Err(FormatError::Line(i, "a second DeviceFileMinor"));
        }
        minor = Some(
            number(value.trim()).ok_or(FormatError::Line(i, "DeviceFileMinor is not a number"))?,
        );
    }
    minor.ok_or(FormatError::NoMinor)
}

/// The capabilities and minors `mig-minors` lists.
pub(crate) fn mig_minors(text: &[u8]) -> Result<MigMinors, FormatError> {
    let mut minors = MigMinors::new();
    for (i, line) in lines(text, MIG_MINORS_MAX)? {
        let mut fields = line.split_ascii_whitespace();
        let (Some(name), Some(minor), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(FormatError::Line(i, "not a `<capability> <minor>` line"));
        };
        let Some(capability) = capability(name) else {
            continue;
        };
        let minor = number(minor).ok_or(FormatError::Line(i, "the minor is not a number"))?;
        if minors.insert(capability, minor).is_some() {
            return Err(FormatError::Line(i, "a capability listed twice"));
        }
    }
    Ok(minors)
}

/// The `nvidia-caps` character-device major in `/proc/devices`, if it is listed.
pub(crate) fn caps_major(text: &[u8]) -> Result<Option<u32>, FormatError> {
    let mut in_char = false;
    for (i, line) in lines(text, PROC_DEVICES_MAX)? {
        if line.ends_with(':') {
            in_char = line == "Character devices:";
            continue;
        }
        if !in_char {
            continue;
        }
        let mut fields = line.split_ascii_whitespace();
        let (Some(major), Some(name), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(FormatError::Line(i, "not a `<major> <name>` line"));
        };
        if name == "nvidia-caps" {
            return number(major)
                .map(Some)
                .ok_or(FormatError::Line(i, "the major is not a number"));
        }
    }
    Ok(None)
}

/// The capability a `mig-minors` name stands for.
fn capability(name: &str) -> Option<Capability> {
    match name {
        "config" => return Some(Capability::Config),
        "monitor" => return Some(Capability::Monitor),
        _ => {}
    }
    let rest = name.strip_prefix("gpu")?.strip_suffix("/access")?;
    let (gpu, rest) = rest.split_once("/gi")?;
    let gpu = number(gpu)?;
    match rest.split_once("/ci") {
        None => Some(Capability::Gi {
            gpu,
            gi: number(rest)?,
        }),
        Some((gi, ci)) => Some(Capability::Ci(InstanceId {
            gpu,
            gi: number(gi)?,
            ci: number(ci)?,
        })),
    }
}

/// A decimal `u32` of digits only (no sign, no spaces).
pub(crate) fn number(text: &str) -> Option<u32> {
    if text.is_empty() || text.len() > 10 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The non-empty lines of `text`, numbered from 1, trimmed, once `text` is within `limit`
/// bytes; bytes that are not UTF-8 make their line fail to match anything.
fn lines(text: &[u8], limit: u64) -> Result<impl Iterator<Item = (usize, &str)>, FormatError> {
    if text.len() as u64 > limit {
        return Err(FormatError::TooLarge(limit));
    }
    Ok(text
        .split(|b| *b == b'\n')
        .enumerate()
        .map(|(i, l)| (i + 1, std::str::from_utf8(l).unwrap_or("\u{fffd}").trim()))
        .filter(|(_, l)| !l.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capability_file_gives_its_minor() {
        // As NVIDIA's MIG user guide shows it.
        let text = b"DeviceFileMinor: 12\nDeviceFileMode: 292\nDeviceFileModify: 1\n";
        assert_eq!(access_minor(text), Ok(12));
        assert_eq!(
            access_minor(b"DeviceFileMode: 292\n"),
            Err(FormatError::NoMinor)
        );
        assert!(access_minor(b"DeviceFileMinor: x\n").is_err());
        assert!(access_minor(b"DeviceFileMinor: -1\n").is_err());
        assert!(access_minor(b"DeviceFileMinor: 1\nDeviceFileMinor: 2\n").is_err());
        assert!(access_minor(b"garbage\n").is_err());
        assert_eq!(
            access_minor(&[b'x'; 5000]),
            Err(FormatError::TooLarge(ACCESS_MAX))
        );
    }

    #[test]
    fn mig_minors_lists_every_capability() {
        let text = b"config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n\
                     gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu1/gi14/ci7/access 434\n\
                     fabric-imex-mgmt 9999\n";
        let m = mig_minors(text).unwrap();
        assert_eq!(m[&Capability::Config], 1);
        assert_eq!(m[&Capability::Monitor], 2);
        assert_eq!(m[&Capability::Gi { gpu: 0, gi: 1 }], 12);
        let ci = InstanceId {
            gpu: 1,
            gi: 14,
            ci: 7,
        };
        assert_eq!(m[&Capability::Ci(ci)], 434);
        assert_eq!(m.len(), 7, "the unknown capability is passed over");
        for bad in [
            &b"config\n"[..],
            b"config 1 2\n",
            b"gpu0/gi1/access x\n",
            b"config 1\nconfig 2\n",
        ] {
            assert!(
                mig_minors(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn the_caps_major_is_read_from_the_character_devices() {
        let text = b"Character devices:\n  1 mem\n195 nvidia\n237 nvidia-caps\n511 nvidia-uvm\n\n\
                     Block devices:\n  7 loop\n";
        assert_eq!(caps_major(text), Ok(Some(237)));
        let block_only = b"Character devices:\n  1 mem\n\nBlock devices:\n237 nvidia-caps\n";
        assert_eq!(caps_major(block_only), Ok(None));
    }

    #[test]
    fn names_parse_strictly() {
        assert_eq!(
            capability("gpu0/gi1/access"),
            Some(Capability::Gi { gpu: 0, gi: 1 })
        );
        for bad in [
            "gpu/gi1/access",
            "gpu0/gi1",
            "gpu0/gi+1/access",
            "gpu0/gi1/ci/access",
        ] {
            assert_eq!(capability(bad), None, "{bad}");
        }
    }
}
