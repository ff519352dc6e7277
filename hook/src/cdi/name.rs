//! Fully qualified CDI device names, `vendor.com/class=name` (CDI spec, "Fully qualified
//! device name"; the rules of the reference parser, `pkg/parser`).

use serde::Deserialize;
use std::fmt;

/// A fully qualified device name: `nvidia.com/gpu=all`, `nvidia.com/gpu=0:1`,
/// `nvidia.com/gpu=GPU-…`. Checked when the configuration is read.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
pub(crate) struct DeviceName {
    text: String,
    equals: usize,
}

/// Why a text is not a fully qualified device name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NameError {
    /// No `/` between vendor and class, or no `=` before the device.
    #[error("CDI device {0:?} is not of the form vendor.com/class=name")]
    Shape(String),
    /// The vendor part breaks the rules.
    #[error("CDI device {0:?}: the vendor must start with a letter, end with a letter or digit, and hold only letters, digits, '-', '_' and '.'")]
    Vendor(String),
    /// The class part breaks the rules.
    #[error("CDI device {0:?}: the class must start with a letter, end with a letter or digit, and hold only letters, digits, '-' and '_'")]
    Class(String),
    /// The device part breaks the rules.
    #[error("CDI device {0:?}: the device name must start and end with a letter or digit, and hold only letters, digits, '-', '_', '.' and ':'")]
    Device(String),
}

impl DeviceName {
    /// Parses `text` as a fully qualified device name.
    pub(crate) fn parse(text: &str) -> Result<DeviceName, NameError> {
        let shape = || NameError::Shape(text.to_string());
        let equals = text.find('=').ok_or_else(shape)?;
        let slash = text[..equals].find('/').ok_or_else(shape)?;
        let (vendor, class, device) = (
            &text[..slash],
            &text[slash + 1..equals],
            &text[equals + 1..],
        );
        if !valid(vendor, |c| c.is_ascii_alphabetic(), b"-_.") {
            return Err(NameError::Vendor(text.to_string()));
        }
        if !valid(class, |c| c.is_ascii_alphabetic(), b"-_") {
            return Err(NameError::Class(text.to_string()));
        }
        if !valid(device, |c| c.is_ascii_alphanumeric(), b"-_.:") {
            return Err(NameError::Device(text.to_string()));
        }
        Ok(DeviceName {
            text: text.to_string(),
            equals,
        })
    }

    /// The kind, `vendor.com/class`: a spec's `kind`.
    pub(crate) fn kind(&self) -> &str {
        &self.text[..self.equals]
    }

    /// The vendor, `nvidia.com`.
    #[cfg(test)]
    fn vendor(&self) -> &str {
        self.kind().split_once('/').map_or("", |(vendor, _)| vendor)
    }

    /// The device's name within its kind: `all`, `0`, `0:1`, `GPU-…`.
    pub(crate) fn device(&self) -> &str {
        &self.text[self.equals + 1..]
    }

    /// The whole name.
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }
}

/// Whether `part` is non-empty, starts with a character `first` accepts, ends with a letter or
/// digit, and holds only letters, digits and `extra`.
fn valid(part: &str, first: impl Fn(u8) -> bool, extra: &[u8]) -> bool {
    let b = part.as_bytes();
    let allowed = |c: &u8| c.is_ascii_alphanumeric() || extra.contains(c);
    b.first().is_some_and(|&f| first(f))
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter().all(allowed)
}

impl TryFrom<String> for DeviceName {
    type Error = NameError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        DeviceName::parse(&text)
    }
}

impl fmt::Display for DeviceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_ctk_names_parse() {
        for (text, device) in [
            ("nvidia.com/gpu=all", "all"),
            ("nvidia.com/gpu=0", "0"),
            ("nvidia.com/gpu=0:1", "0:1"),
            (
                "nvidia.com/gpu=GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
                "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
            ),
            ("vendor.com/device=myDevice", "myDevice"),
        ] {
            let n = DeviceName::parse(text).unwrap();
            assert_eq!(n.device(), device);
            assert_eq!(n.as_str(), text);
        }
        let n = DeviceName::parse("nvidia.com/gpu=all").unwrap();
        assert_eq!((n.kind(), n.vendor()), ("nvidia.com/gpu", "nvidia.com"));
    }

    #[test]
    fn malformed_names_say_which_part_is_wrong() {
        for (text, want) in [
            ("nvidia.com/gpu", NameError::Shape("nvidia.com/gpu".into())),
            ("gpu=all", NameError::Shape("gpu=all".into())),
            ("/gpu=all", NameError::Vendor("/gpu=all".into())),
            (
                "nvidia.com/=all",
                NameError::Class("nvidia.com/=all".into()),
            ),
            (
                "nvidia.com/g.pu=all",
                NameError::Class("nvidia.com/g.pu=all".into()),
            ),
            (
                "nvidia.com/gpu=",
                NameError::Device("nvidia.com/gpu=".into()),
            ),
            (
                "nvidia.com/gpu=a/b",
                NameError::Device("nvidia.com/gpu=a/b".into()),
            ),
            (
                "nvidia.com/gpu=all\n",
                NameError::Device("nvidia.com/gpu=all\n".into()),
            ),
        ] {
            assert_eq!(DeviceName::parse(text), Err(want), "{text:?}");
        }
    }
}
