//! What the hook decides on, read once for every form of derivation: the keys that decide
//! ([`DecidingKey`]), collected from an env with a repeat of one recorded ([`Deciding`]), then
//! the features and the GPU count read from them as Nix reads them ([`attrs_of_env`]), from
//! the structured attrs (`__json`, [`StructuredAttrs`]) when there are some.

use super::{DrvError, DrvStr};
use std::borrow::Cow;
use std::fmt;

/// The derivation attribute asking for a number of GPUs (see [`crate::lease`]).
pub(crate) const GPUS_ATTR: &str = "cudaSandboxGpus";

/// A key of a derivation that decides what the hook exposes: a repeat of one is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidingKey {
    /// `requiredSystemFeatures`.
    Features,
    /// `__json`, the structured attrs (an env key only).
    StructuredAttrs,
    /// [`GPUS_ATTR`].
    Gpus,
    /// `outputHash`: a fixed-output derivation.
    OutputHash,
    /// `__impure`: an impure derivation.
    Impure,
}

impl DecidingKey {
    /// The key as the derivation writes it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            DecidingKey::Features => "requiredSystemFeatures",
            DecidingKey::StructuredAttrs => "__json",
            DecidingKey::Gpus => GPUS_ATTR,
            DecidingKey::OutputHash => "outputHash",
            DecidingKey::Impure => "__impure",
        }
    }

    /// The deciding key `name` is, if any.
    pub(super) fn of(name: &[u8]) -> Option<DecidingKey> {
        [
            DecidingKey::Features,
            DecidingKey::StructuredAttrs,
            DecidingKey::Gpus,
            DecidingKey::OutputHash,
            DecidingKey::Impure,
        ]
        .into_iter()
        .find(|k| k.name().as_bytes() == name)
    }

    /// The length of the longest name, for a cheap check before unescaping a key.
    pub(super) const LONGEST: usize = 22;
}

impl fmt::Display for DecidingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", self.name())
    }
}

/// Where a [`DecidingKey`] was repeated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Within {
    /// The derivation's env (the ATerm's env list, or `env` of the JSON).
    Env,
    /// The structured attrs (`__json`, or `structuredAttrs` of the JSON).
    StructuredAttrs,
}

impl fmt::Display for Within {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Within::Env => "env",
            Within::StructuredAttrs => "structured attrs (__json)",
        })
    }
}

/// The system features a derivation requires, and where they were found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequiredFeatures<'a> {
    /// Each feature as bytes, in the order the derivation lists them (duplicates kept).
    pub features: Vec<DrvStr<'a>>,
    /// True when the list came from structured attrs (`__json`), false for the plain env entry.
    pub structured: bool,
}

impl RequiredFeatures<'_> {
    /// Whether `feature` is among the required features.
    pub fn contains(&self, feature: &[u8]) -> bool {
        self.features.iter().any(|f| f.as_ref() == feature)
    }
}

/// What the hook decides on, read from a derivation as Nix reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DrvAttrs<'a> {
    /// `requiredSystemFeatures`.
    pub features: RequiredFeatures<'a>,
    /// [`GPUS_ATTR`] as text: a string as itself, another JSON value as [`AttrText`] shows it;
    /// `None` when unset.
    pub gpus: Option<String>,
    /// Why Nix builds the derivation without a network namespace of its own, if it does.
    pub unsandboxed: Option<Unsandboxed>,
}

/// What makes a derivation fixed-output or impure: Nix runs its builder in the host's network
/// namespace (`DerivationType::isSandboxed` in Nix's `derivations.cc`, on 2.8, 2.26 and 2.34),
/// where it shares the host's abstract Unix sockets and can hand an open GPU to any host
/// process (`SCM_RIGHTS`, unix(7)). Checked in every form; the first found is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsandboxed {
    /// `outputHash` or `__impure` is set, in the env or the structured attrs.
    Attr(DecidingKey, Within),
    /// An output has a hash: fixed (its expected hash) or impure (`impure`), as the `.drv`
    /// writes it.
    HashedOutput(String),
}

impl fmt::Display for Unsandboxed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unsandboxed::Attr(key, within) => write!(f, "it sets {key} in its {within}"),
            Unsandboxed::HashedOutput(name) => write!(f, "its output \"{name}\" has a hash"),
        }
    }
}

impl DrvAttrs<'_> {
    /// Adds an output with a hash (`name`) as the reason the derivation is unsandboxed, unless
    /// an attribute gave one already.
    pub(super) fn with_hashed_output(mut self, name: Option<String>) -> Self {
        self.unsandboxed = self.unsandboxed.or(name.map(Unsandboxed::HashedOutput));
        self
    }
}

/// The values of the [`DecidingKey`]s of one env, each kept the first time it is set; a second
/// time is recorded in `repeated` (the first such key) and its value dropped. So a reader holds
/// three values, whatever the derivation repeats.
#[derive(Debug, Clone, Default)]
pub(super) struct Deciding<V> {
    features: Option<V>,
    structured_attrs: Option<V>,
    gpus: Option<V>,
    output_hash: Option<V>,
    impure: Option<V>,
    repeated: Option<DecidingKey>,
}

impl<V> Deciding<V> {
    fn slot(&mut self, key: DecidingKey) -> &mut Option<V> {
        match key {
            DecidingKey::Features => &mut self.features,
            DecidingKey::StructuredAttrs => &mut self.structured_attrs,
            DecidingKey::Gpus => &mut self.gpus,
            DecidingKey::OutputHash => &mut self.output_hash,
            DecidingKey::Impure => &mut self.impure,
        }
    }

    /// Whether `key` is set already: then a new value of it is a repeat (recorded, so that a
    /// reader can skip the value unread).
    pub(super) fn repeats(&mut self, key: DecidingKey) -> bool {
        let repeated = self.slot(key).is_some();
        if repeated {
            self.repeated.get_or_insert(key);
        }
        repeated
    }

    /// Keeps `value` for `key`, or records the repeat.
    pub(super) fn set(&mut self, key: DecidingKey, value: V) {
        if !self.repeats(key) {
            *self.slot(key) = Some(value);
        }
    }

    /// The first of `outputHash` and `__impure` set in this env, whatever its value.
    pub(super) fn unsandboxed(&self) -> Option<Unsandboxed> {
        let key = match (&self.output_hash, &self.impure) {
            (Some(_), _) => DecidingKey::OutputHash,
            (None, Some(_)) => DecidingKey::Impure,
            (None, None) => return None,
        };
        Some(Unsandboxed::Attr(key, Within::Env))
    }

    /// An error for the first repeat, if any.
    pub(super) fn unrepeated(&self) -> Result<(), DrvError> {
        unrepeated(self.repeated, Within::Env)
    }
}

/// An error for `repeated`, the first [`DecidingKey`] repeated `within`, if any.
fn unrepeated(repeated: Option<DecidingKey>, within: Within) -> Result<(), DrvError> {
    match repeated {
        Some(key) => Err(DrvError::Repeated { key, within }),
        None => Ok(()),
    }
}

/// An env value as one form of derivation holds it: the ATerm's bytes (unescaped, or raw with
/// escapes), or a JSON value.
pub(super) trait EnvValue<'a> {
    /// The value read as structured attrs (the `__json` entry).
    fn structured_attrs(&self) -> Result<StructuredAttrs, DrvError>;
    /// The value's bytes, when it is a string.
    fn string(&self) -> Option<DrvStr<'a>>;
    /// The value as the text [`DrvAttrs::gpus`] holds.
    fn text(&self) -> String;
}

/// The one reading of what the hook decides on, for every form: refuses a repeated
/// [`DecidingKey`]; reads the structured attrs when `__json` is set, else the
/// whitespace-separated `requiredSystemFeatures` and [`GPUS_ATTR`] of the env.
pub(super) fn attrs_of_env<'a, V: EnvValue<'a>>(
    env: &Deciding<V>,
) -> Result<DrvAttrs<'a>, DrvError> {
    env.unrepeated()?;
    if let Some(json) = &env.structured_attrs {
        let mut attrs = json.structured_attrs()?.attrs()?;
        attrs.unsandboxed = env.unsandboxed().or(attrs.unsandboxed);
        return Ok(attrs);
    }
    let features = match &env.features {
        None => Vec::new(),
        Some(value) => split_features(
            value
                .string()
                .ok_or_else(|| DrvError::json("env.requiredSystemFeatures is not a string"))?,
        ),
    };
    Ok(DrvAttrs {
        features: RequiredFeatures {
            features,
            structured: false,
        },
        gpus: env.gpus.as_ref().map(EnvValue::text),
        unsandboxed: env.unsandboxed(),
    })
}

/// A whitespace-separated feature list, split as Nix splits it (" \t\n\r"), borrowing where
/// the value does.
fn split_features(value: DrvStr<'_>) -> Vec<DrvStr<'_>> {
    fn words(v: &[u8]) -> impl Iterator<Item = &[u8]> {
        v.split(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            .filter(|t| !t.is_empty())
    }
    match value {
        Cow::Borrowed(v) => words(v).map(Cow::Borrowed).collect(),
        Cow::Owned(v) => words(&v).map(|t| Cow::Owned(t.to_vec())).collect(),
    }
}

/// A structured-attrs object (`__json`, or `structuredAttrs` of the JSON) as the hook reads
/// it: the features and the GPU count, a repeat of either recorded; every other member is
/// skipped unbuilt (serde's `IgnoredAny`), so a huge one is never held in memory.
#[derive(Debug, Default)]
pub(super) struct StructuredAttrs {
    features: Option<Vec<String>>,
    gpus: Option<AttrText>,
    /// The first of `outputHash` and `__impure` set, whatever its value.
    unsandboxed: Option<DecidingKey>,
    repeated: Option<DecidingKey>,
}

impl StructuredAttrs {
    /// The attrs `serde_json` read, or why they are not valid.
    pub(super) fn parsed(
        read: Result<StructuredAttrs, serde_json::Error>,
    ) -> Result<Self, DrvError> {
        read.map_err(|e| DrvError::json(format!("structured attrs (__json) are not valid: {e}")))
    }

    /// What the hook decides on; a repeat is refused.
    pub(super) fn attrs(&self) -> Result<DrvAttrs<'static>, DrvError> {
        unrepeated(self.repeated, Within::StructuredAttrs)?;
        Ok(DrvAttrs {
            features: RequiredFeatures {
                features: self
                    .features
                    .iter()
                    .flatten()
                    .map(|s| Cow::Owned(s.as_bytes().to_vec()))
                    .collect(),
                structured: true,
            },
            gpus: self.gpus.as_ref().map(|t| t.text.clone()),
            unsandboxed: self
                .unsandboxed
                .map(|key| Unsandboxed::Attr(key, Within::StructuredAttrs)),
        })
    }
}

impl<'de> serde::Deserialize<'de> for StructuredAttrs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = StructuredAttrs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<StructuredAttrs, A::Error> {
                let mut attrs = StructuredAttrs::default();
                while let Some(JsonKey(key)) = map.next_key()? {
                    match key {
                        // Anything but a list of strings (`null` too) is an error, as in Nix.
                        Some(DecidingKey::Features) if attrs.features.is_none() => {
                            attrs.features = Some(map.next_value()?);
                        }
                        Some(DecidingKey::Gpus) if attrs.gpus.is_none() => {
                            attrs.gpus = Some(map.next_value()?);
                        }
                        Some(key @ (DecidingKey::OutputHash | DecidingKey::Impure)) => {
                            attrs.unsandboxed.get_or_insert(key);
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                        repeat => {
                            if let Some(key @ (DecidingKey::Features | DecidingKey::Gpus)) = repeat
                            {
                                attrs.repeated.get_or_insert(key);
                            }
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(attrs)
            }
        }
        d.deserialize_map(Object)
    }
}

/// A JSON object's key, read as the [`DecidingKey`] it is, if any, without copying it.
pub(super) struct JsonKey(pub(super) Option<DecidingKey>);

impl<'de> serde::Deserialize<'de> for JsonKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = JsonKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E>(self, v: &str) -> Result<JsonKey, E> {
                Ok(JsonKey(DecidingKey::of(v.as_bytes())))
            }
        }
        d.deserialize_identifier(Name)
    }
}

/// A JSON value as text, the way messages show it: a string as itself, a number, boolean or
/// `null` as JSON writes it, a list or object as `[…]` or `{…}` (skipped, never built, so a
/// hostile value costs no memory).
#[derive(Debug, Clone, Default)]
pub(super) struct AttrText {
    /// The text.
    pub(super) text: String,
    /// Whether the value was a string.
    pub(super) string: bool,
}

impl AttrText {
    fn other(text: impl Into<String>) -> AttrText {
        AttrText {
            text: text.into(),
            string: false,
        }
    }
}

impl<'de> serde::Deserialize<'de> for AttrText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> serde::de::Visitor<'de> for Text {
            type Value = AttrText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E>(self, v: &str) -> Result<AttrText, E> {
                Ok(AttrText {
                    text: v.to_owned(),
                    string: true,
                })
            }
            fn visit_bool<E>(self, v: bool) -> Result<AttrText, E> {
                Ok(AttrText::other(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<AttrText, E> {
                Ok(AttrText::other(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<AttrText, E> {
                Ok(AttrText::other(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<AttrText, E> {
                let text = serde_json::Number::from_f64(v)
                    .map_or_else(|| v.to_string(), |n| n.to_string());
                Ok(AttrText::other(text))
            }
            fn visit_unit<E>(self) -> Result<AttrText, E> {
                Ok(AttrText::other("null"))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<AttrText, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(AttrText::other("[…]"))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<AttrText, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(AttrText::other("{…}"))
            }
        }
        d.deserialize_any(Text)
    }
}
