//! CUDA facts as data, with their sources: the GPU architectures ([`gpus`], `gpus.txt`), the
//! CUDA releases and the driver branches that provide them ([`releases`], `releases.txt`), the
//! compute capability and architecture types, and Nixpkgs' `cuda-sm-*` feature convention
//! ([`features`]). To add a GPU (sm_130) or a release, add a row to a table; the loading rules
//! (elfkit's `fatbin::rules`), the hook, the runner and the NixOS module read them from here.

pub mod features;
pub mod gpus;
pub mod releases;
pub mod table;

use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

/// A CUDA version as the driver API encodes it (`cuDriverGetVersion`): `1000 * major + 10 *
/// minor` (`12020` is 12.2). Prints and serializes as `12.2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CudaVersion(pub i32);

impl CudaVersion {
    /// Parses `12.2`, `13` (a major version) or the encoded `12020`.
    pub fn parse(text: &str) -> Result<CudaVersion, String> {
        let bad = || format!("bad CUDA version {text:?}: write 12.2 or 12020");
        let text = text.trim();
        let value = match text.split_once('.') {
            Some((major, minor)) => match (major.parse::<i32>(), minor.parse::<i32>()) {
                (Ok(major @ 0..=999), Ok(minor @ 0..=99)) => 1000 * major + 10 * minor,
                _ => return Err(bad()),
            },
            None => match text.parse::<i32>().map_err(|_| bad())? {
                major @ 1..=999 => 1000 * major,
                encoded => encoded,
            },
        };
        (value > 0).then_some(CudaVersion(value)).ok_or_else(bad)
    }

    /// The major version (`12` for 12.2): runtimes of a newer major need a newer driver.
    pub fn major(self) -> i32 {
        self.0 / 1000
    }
}

impl fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0 / 1000, (self.0 % 1000) / 10)
    }
}

/// `impl Serialize` for types that serialize as the text they display (`"12.2"`, `"sm_90a"`):
/// the one way this crate's values, and elfkit's and the manifest's, become JSON strings.
#[macro_export]
macro_rules! serialize_as_display {
    ($($t:ty),+) => {$(
        impl ::serde::Serialize for $t {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    )+};
}

serialize_as_display!(CudaVersion, Capability, Arch);

/// Read from the text [`CudaVersion::parse`] reads (the manifest writes `"12.2"`); anything
/// else is an error that quotes it.
impl<'de> Deserialize<'de> for CudaVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        CudaVersion::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// The arch-specific and family-specific variants of an architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// `sm_90`: forward compatible within its major version (SASS) or upwards (PTX).
    Plain,
    /// `sm_90a`: only on exactly that compute capability.
    ArchSpecific,
    /// `sm_100f`: within its family (same major, minor at least its own).
    Family,
}

impl Variant {
    /// The suffix NVIDIA's tools write: ``, `a`, `f`.
    pub fn suffix(self) -> &'static str {
        match self {
            Variant::Plain => "",
            Variant::ArchSpecific => "a",
            Variant::Family => "f",
        }
    }
}

/// Why a compute capability, an architecture or a driver version written as text was refused;
/// each holds the text and renders as one line saying how to write it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// Not a compute capability ([`Capability::parse`]).
    #[error("bad compute capability {0:?}: write 9.0, 90 or sm_90")]
    Capability(String),
    /// Not an architecture ([`Arch::parse`]).
    #[error("bad architecture {0:?}: write sm_90, sm_90a or 9.0")]
    Arch(String),
    /// Not a driver version (`DriverVersion::parse` in elfkit's `fatbin::rules`).
    #[error("bad driver version {0:?}: write 550.54.14")]
    DriverVersion(String),
}

/// A compute capability, as `major.minor` (9.0) or the `sm_90` number (90).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Capability {
    /// 9 for 9.0.
    pub major: u32,
    /// 0 for 9.0.
    pub minor: u32,
}

impl Capability {
    /// The capability of an `sm_XY` number: 90 → 9.0, 121 → 12.1.
    pub fn from_sm(number: u32) -> Capability {
        Capability {
            major: number / 10,
            minor: number % 10,
        }
    }

    /// The `sm_XY` number: 9.0 → 90.
    pub fn sm(self) -> u32 {
        self.major * 10 + self.minor
    }

    /// Parses `9.0`, `90`, `sm_90` or `compute_90` (no variant suffix).
    pub fn parse(text: &str) -> Result<Capability, ValueError> {
        let bad = || ValueError::Capability(text.to_owned());
        let t = text.trim();
        if let Some((major, minor)) = t.split_once('.') {
            return match (major.parse(), minor.parse()) {
                (Ok(major), Ok(minor @ 0..=9)) => Ok(Capability { major, minor }),
                _ => Err(bad()),
            };
        }
        let digits = t
            .strip_prefix("sm_")
            .or_else(|| t.strip_prefix("compute_"))
            .unwrap_or(t);
        match digits.parse() {
            Ok(number @ 10..1000) => Ok(Capability::from_sm(number)),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A GPU's capability, as [`features::parse_gpu`] reads it (no variant suffix).
impl<'de> Deserialize<'de> for Capability {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        features::parse_gpu(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// The architecture an entry was built for: `sm_90a` is 9.0, arch-specific.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Arch {
    /// The compute capability.
    pub capability: Capability,
    /// Plain, 'a' or 'f'.
    pub variant: Variant,
}

impl Arch {
    /// `sm_90a`, as NVIDIA's tools name a real architecture.
    pub fn sm_name(self) -> String {
        format!("sm_{}{}", self.capability.sm(), self.variant.suffix())
    }

    /// `compute_90a`, as NVIDIA's tools name a virtual architecture (PTX).
    pub fn compute_name(self) -> String {
        format!("compute_{}{}", self.capability.sm(), self.variant.suffix())
    }

    /// Parses `sm_90a`, `compute_100f`, `90`, `9.0`.
    pub fn parse(text: &str) -> Result<Arch, ValueError> {
        let t = text.trim();
        let (body, variant) = match t.as_bytes().last() {
            Some(b'a') => (&t[..t.len() - 1], Variant::ArchSpecific),
            Some(b'f') => (&t[..t.len() - 1], Variant::Family),
            _ => (t, Variant::Plain),
        };
        Ok(Arch {
            capability: Capability::parse(body).map_err(|_| ValueError::Arch(text.to_owned()))?,
            variant,
        })
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.sm_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_and_architectures_parse_or_say_how_to_write_them() {
        assert_eq!(Capability::parse("sm_90"), Ok(Capability::from_sm(90)));
        assert_eq!(Capability::parse(" 12.1 "), Ok(Capability::from_sm(121)));
        for bad in ["9.10", "nine", "5", "sm_90a", ""] {
            assert_eq!(
                Capability::parse(bad),
                Err(ValueError::Capability(bad.into()))
            );
        }
        assert_eq!(
            Arch::parse("compute_100f").map(Arch::sm_name),
            Ok("sm_100f".into())
        );
        for bad in ["sm_9x", "a", "9.0b"] {
            assert_eq!(Arch::parse(bad), Err(ValueError::Arch(bad.into())));
        }
        assert_eq!(
            ValueError::Capability("nine".into()).to_string(),
            r#"bad compute capability "nine": write 9.0, 90 or sm_90"#
        );
        assert_eq!(
            ValueError::Arch("a".into()).to_string(),
            r#"bad architecture "a": write sm_90, sm_90a or 9.0"#
        );
    }

    #[test]
    fn capabilities_and_architectures_serialize_as_nvidias_tools_write_them() {
        let arch = Arch::parse("sm_90a").unwrap();
        assert_eq!(
            serde_json::to_string(&(arch.capability, arch)).unwrap(),
            r#"["9.0","sm_90a"]"#
        );
    }

    #[test]
    fn versions_parse_and_print_both_ways() {
        assert_eq!(CudaVersion::parse("12.2"), Ok(CudaVersion(12020)));
        assert_eq!(CudaVersion::parse("11040"), Ok(CudaVersion(11040)));
        assert_eq!(CudaVersion::parse("13"), Ok(CudaVersion(13000)));
        assert!(CudaVersion::parse("12.x").is_err());
        assert!(CudaVersion::parse("0").is_err());
        assert_eq!(CudaVersion(12090).to_string(), "12.9");
        assert_eq!(CudaVersion(12020).major(), 12);
    }

    #[test]
    fn versions_are_json_strings_both_ways() {
        assert_eq!(
            serde_json::to_string(&CudaVersion(12020)).unwrap(),
            "\"12.2\""
        );
        let v: CudaVersion = serde_json::from_str("\"12.2\"").unwrap();
        assert_eq!(v, CudaVersion(12020));
        let e = serde_json::from_str::<CudaVersion>("\"twelve\"").unwrap_err();
        assert!(e.to_string().contains("bad CUDA version \"twelve\""), "{e}");
        assert!(serde_json::from_str::<CudaVersion>("12020").is_err());
    }
}
