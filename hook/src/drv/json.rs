//! The derivation as JSON, what some Nix variants pass to the hook when the `.drv` is not on
//! disk (`NIX_DERIVATION_V4`): read in one pass by typed visitors
//! that keep the [`DecidingKey`](super::DecidingKey)s of `env` and the structured attrs, and
//! skip every other value unbuilt (serde's `IgnoredAny`), so memory stays near the JSON's size
//! and time linear in it. A repeated member counts as its last, as Nix's JSON library
//! (nlohmann-json) reads it, except a [`DecidingKey`](super::DecidingKey)'s.

use super::attrs::{attrs_of_env, AttrText, Deciding, EnvValue, JsonKey, StructuredAttrs};
use super::{DrvAttrs, DrvError, DrvStr};
use std::borrow::Cow;
use std::fmt;

/// What the hook reads of a derivation given as JSON, and nothing more.
#[derive(Debug, Default)]
pub struct JsonDerivation {
    /// The [`super::DecidingKey`]s of its `env` object.
    env: Option<Deciding<AttrText>>,
    /// `Some(None)`: `"structuredAttrs": null`, which means none.
    structured_attrs: Option<Option<StructuredAttrs>>,
}

impl JsonDerivation {
    /// Reads a derivation given as JSON, in one pass: the derivation object itself (it has
    /// `env` or `structuredAttrs`), or `{ "<drv path>": { … } }` (`nix show-derivation`).
    pub fn parse(json: &[u8]) -> Result<JsonDerivation, DrvError> {
        let mut de = serde_json::Deserializer::from_slice(json);
        let top = serde::Deserializer::deserialize_any(&mut de, AnyObject)
            .and_then(|t| de.end().map(|()| t))
            .map_err(|e| DrvError::json(format!("derivation JSON is not valid: {e}")))?;
        let read = top.ok_or_else(|| DrvError::json("derivation JSON is not an object"))?;
        if read.is_derivation {
            return Ok(read.derivation);
        }
        let Others::One(_, chosen) = read.others else {
            return Err(DrvError::json("derivation JSON holds no single derivation"));
        };
        chosen
            .0
            .ok_or_else(|| DrvError::json("derivation JSON holds no derivation object"))
    }

    /// What the hook decides on (as the oracle's `Derivation::attrs`): from `structuredAttrs`,
    /// else as from a `.drv`'s env. A repeated [`super::DecidingKey`] in `env` is refused
    /// even then.
    pub fn attrs(&self) -> Result<DrvAttrs<'static>, DrvError> {
        let none = Deciding::default();
        let env = self.env.as_ref().unwrap_or(&none);
        env.unrepeated()?;
        if let Some(Some(attrs)) = &self.structured_attrs {
            let mut attrs = attrs.attrs()?;
            attrs.unsandboxed = env.unsandboxed().or(attrs.unsandboxed);
            return Ok(attrs);
        }
        attrs_of_env(env)
    }
}

impl EnvValue<'static> for AttrText {
    fn structured_attrs(&self) -> Result<StructuredAttrs, DrvError> {
        if !self.string {
            return Err(DrvError::json("env.__json is not a string"));
        }
        StructuredAttrs::parsed(serde_json::from_str(&self.text))
    }
    fn string(&self) -> Option<DrvStr<'static>> {
        self.string
            .then(|| Cow::Owned(self.text.as_bytes().to_vec()))
    }
    fn text(&self) -> String {
        self.text.clone()
    }
}

/// The `env` object of a derivation given as JSON, read for its [`super::DecidingKey`]s.
impl<'de> serde::Deserialize<'de> for Deciding<AttrText> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = Deciding<AttrText>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Deciding<AttrText>, A::Error> {
                let mut env = Deciding::default();
                while let Some(JsonKey(key)) = map.next_key()? {
                    match key {
                        Some(key) if !env.repeats(key) => env.set(key, map.next_value()?),
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(env)
            }
        }
        d.deserialize_map(Object)
    }
}

/// A JSON value that may be a derivation object: read as one when it is an object
/// ([`ReadObject`]), skipped unbuilt when it is not.
struct AnyObject;

impl<'de> serde::de::Visitor<'de> for AnyObject {
    type Value = Option<ReadObject>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut read = ReadObject {
            derivation: JsonDerivation::default(),
            is_derivation: false,
            others: Others::None,
        };
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "env" => {
                    read.is_derivation = true;
                    read.derivation.env = Some(map.next_value()?);
                }
                "structuredAttrs" => {
                    read.is_derivation = true;
                    read.derivation.structured_attrs = Some(map.next_value()?);
                }
                other => {
                    read.others = match read.others {
                        Others::None => Others::One(other.to_owned(), map.next_value()?),
                        Others::One(first, _) if first == other => {
                            Others::One(first, map.next_value()?)
                        }
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                            Others::Several
                        }
                    }
                }
            }
        }
        Ok(Some(read))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// A member of a JSON object that may be the derivation the object wraps: the derivation read
/// from it when it is an object, `None` when it is not.
struct Candidate(Option<JsonDerivation>);

impl<'de> serde::Deserialize<'de> for Candidate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(AnyObject)
            .map(|read| Candidate(read.map(|r| r.derivation)))
    }
}

/// One JSON object read as a derivation (`env`, `structuredAttrs`), with each of its other
/// members read as a [`Candidate`] in case the object is a wrapper around the derivation. A
/// repeated member counts as its last.
struct ReadObject {
    derivation: JsonDerivation,
    /// Whether `env` or `structuredAttrs` was a member: then this object is the derivation.
    is_derivation: bool,
    /// The members other than those.
    others: Others,
}

/// The members of a JSON object other than the ones [`ReadObject`] knows.
enum Others {
    None,
    /// One key (perhaps repeated), with its last value.
    One(String, Box<Candidate>),
    /// More than one key.
    Several,
}
