//! Reading Nix derivations (`.drv` files, ATerm syntax) straight from bytes.
//!
//! The format is `Derive([outputs],[inputDrvs],[inputSrcs],"system","builder",[args],[env])`
//! (docs/architecture.md, `.drv` formats). Strings are byte strings, not UTF-8: Nix accepts latin-1 and cp1252 in
//! attribute values, so every string here is a `Cow<[u8]>` that borrows from the input unless it
//! held an escape. Escapes follow Nix's own reader exactly: `\n`, `\r`, `\t` are control
//! characters and a backslash before any other byte stands for that byte.
//!
//! A key set more than once is read as Nix reads it, the last value counting, except a key the
//! hook decides on ([`DecidingKey`]): a repeat of one, in the env or in the structured attrs, in
//! any form, is [`DrvError::Repeated`], which fails the build.
//!
//! Every malformed input yields a [`DrvError`] (the ATerm's carrying the byte offset of the
//! problem); the parser never panics and never reads past the input.

use std::borrow::Cow;
use std::fmt;

/// A byte string from a derivation, borrowed from the file unless it had escapes.
pub type DrvStr<'a> = Cow<'a, [u8]>;

/// One output of a derivation: `("out","/nix/store/…-name","","")`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output<'a> {
    /// Output name, e.g. `out` or `dev`.
    pub name: DrvStr<'a>,
    /// Store path of the output (empty for content-addressed floating outputs).
    pub path: DrvStr<'a>,
    /// Hash algorithm for fixed-output derivations (e.g. `r:sha256`), else empty.
    pub hash_algo: DrvStr<'a>,
    /// Expected hash for fixed-output derivations, else empty.
    pub hash: DrvStr<'a>,
}

/// One input derivation and the outputs of it that this derivation uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputDrv<'a> {
    /// Store path of the input `.drv`.
    pub path: DrvStr<'a>,
    /// Names of the outputs used.
    pub outputs: Vec<DrvStr<'a>>,
}

/// A parsed derivation. Field order follows the ATerm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derivation<'a> {
    /// The outputs, in file order (Nix writes them sorted by name).
    pub outputs: Vec<Output<'a>>,
    /// Input derivations with the outputs used from each.
    pub input_drvs: Vec<InputDrv<'a>>,
    /// Input sources (store paths that are not derivations).
    pub input_srcs: Vec<DrvStr<'a>>,
    /// The platform, e.g. `x86_64-linux`.
    pub system: DrvStr<'a>,
    /// The builder program.
    pub builder: DrvStr<'a>,
    /// Arguments to the builder.
    pub args: Vec<DrvStr<'a>>,
    /// Environment of the builder, in file order (Nix writes it sorted by name), a repeated key
    /// as often as it is written.
    pub env: Vec<(DrvStr<'a>, DrvStr<'a>)>,
}

/// Why the hook cannot decide on a derivation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DrvError {
    /// The ATerm does not follow the grammar.
    #[error("malformed derivation at byte {offset}: {message}")]
    Malformed {
        /// Byte offset in the file at which the problem was found.
        offset: usize,
        /// What was wrong there.
        message: String,
    },
    /// JSON the hook reads (the derivation as JSON, or its structured attrs) is not what Nix
    /// writes.
    #[error("{0}")]
    Json(String),
    /// A key the hook decides on is set more than once. Nix keeps the last value, a reader that
    /// keeps the first disagrees with it (the hook did), so the build is refused rather than
    /// exposed on either.
    #[error(
        "{key} is set more than once in the {within}, and which value counts depends on who \
         reads it"
    )]
    Repeated {
        /// The key.
        key: DecidingKey,
        /// Where.
        within: Within,
    },
}

impl DrvError {
    fn json(message: impl Into<String>) -> DrvError {
        DrvError::Json(message.into())
    }

    /// The byte offset of a [`DrvError::Malformed`] ATerm's problem.
    pub fn offset(&self) -> Option<usize> {
        match self {
            DrvError::Malformed { offset, .. } => Some(*offset),
            _ => None,
        }
    }
}

/// A key of a derivation that decides what the hook exposes: a repeat of one is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidingKey {
    /// `requiredSystemFeatures`.
    Features,
    /// `__json`, the structured attrs (an env key only).
    StructuredAttrs,
    /// [`GPUS_ATTR`].
    Gpus,
}

impl DecidingKey {
    /// The key as the derivation writes it.
    pub fn name(self) -> &'static str {
        match self {
            DecidingKey::Features => "requiredSystemFeatures",
            DecidingKey::StructuredAttrs => "__json",
            DecidingKey::Gpus => GPUS_ATTR,
        }
    }

    /// The deciding key `name` is, if any.
    fn of(name: &[u8]) -> Option<DecidingKey> {
        [
            DecidingKey::Features,
            DecidingKey::StructuredAttrs,
            DecidingKey::Gpus,
        ]
        .into_iter()
        .find(|k| k.name().as_bytes() == name)
    }

    /// The longest name, for a cheap check before unescaping a key.
    const LONGEST: usize = 22;
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

    /// The features as text, with bytes that are not UTF-8 shown as U+FFFD.
    pub fn lossy(&self) -> Vec<String> {
        self.features
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect()
    }
}

/// The derivation attribute asking for a number of GPUs (see [`crate::lease`]).
pub const GPUS_ATTR: &str = "cudaSandboxGpus";

/// What the hook decides on, read from a derivation as Nix reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DrvAttrs<'a> {
    /// `requiredSystemFeatures`.
    pub features: RequiredFeatures<'a>,
    /// [`GPUS_ATTR`] as text: a string as itself, another JSON value as [`AttrText`] shows it;
    /// `None` when unset.
    pub gpus: Option<String>,
}

/// The values of the [`DecidingKey`]s of one env or structured-attrs object, each kept the
/// first time it is set; a second time is recorded in `repeated` (the first such key), and the
/// value is not kept. So a reader holds three values, whatever the derivation repeats.
#[derive(Debug, Clone)]
struct Deciding<V> {
    features: Option<V>,
    structured_attrs: Option<V>,
    gpus: Option<V>,
    repeated: Option<DecidingKey>,
}

impl<V> Default for Deciding<V> {
    fn default() -> Self {
        Deciding {
            features: None,
            structured_attrs: None,
            gpus: None,
            repeated: None,
        }
    }
}

impl<V> Deciding<V> {
    fn slot(&mut self, key: DecidingKey) -> &mut Option<V> {
        match key {
            DecidingKey::Features => &mut self.features,
            DecidingKey::StructuredAttrs => &mut self.structured_attrs,
            DecidingKey::Gpus => &mut self.gpus,
        }
    }

    /// Whether `key` is set already: then a new value of it is a repeat (recorded), not kept.
    fn repeats(&mut self, key: DecidingKey) -> bool {
        let repeated = self.slot(key).is_some();
        if repeated {
            self.repeated.get_or_insert(key);
        }
        repeated
    }

    /// Keeps `value` for `key`, or records the repeat.
    fn set(&mut self, key: DecidingKey, value: V) {
        if !self.repeats(key) {
            *self.slot(key) = Some(value);
        }
    }

    /// An error for the first repeat, if any.
    fn unrepeated(&self, within: Within) -> Result<(), DrvError> {
        match self.repeated {
            Some(key) => Err(DrvError::Repeated { key, within }),
            None => Ok(()),
        }
    }
}

/// An env value as one form of derivation holds it: the ATerm's bytes (borrowed, or raw with
/// escapes), or a JSON value.
trait EnvValue<'a> {
    /// The value read as structured attrs (the `__json` entry).
    fn structured_attrs(&self) -> Result<StructuredAttrs, DrvError>;
    /// The value's bytes, when it is a string.
    fn string(&self) -> Option<DrvStr<'a>>;
    /// The value as the text [`DrvAttrs::gpus`] holds.
    fn text(&self) -> String;
}

/// The one reading of what the hook decides on, for every form: refuses a repeated
/// [`DecidingKey`]; the structured attrs when `__json` is set, else the whitespace-separated
/// `requiredSystemFeatures` and [`GPUS_ATTR`] of the env.
fn attrs_of_env<'a, V: EnvValue<'a>>(env: &Deciding<V>) -> Result<DrvAttrs<'a>, DrvError> {
    env.unrepeated(Within::Env)?;
    if let Some(json) = &env.structured_attrs {
        return json.structured_attrs()?.to_attrs();
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
    })
}

/// A whitespace-separated feature list, split as Nix splits it (" \t\n\r"), borrowing where
/// the value does.
fn split_features(value: DrvStr<'_>) -> Vec<DrvStr<'_>> {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    match value {
        Cow::Borrowed(v) => v
            .split(is_space)
            .filter(|t| !t.is_empty())
            .map(Cow::Borrowed)
            .collect(),
        Cow::Owned(v) => v
            .split(is_space)
            .filter(|t| !t.is_empty())
            .map(|t| Cow::Owned(t.to_vec()))
            .collect(),
    }
}

impl<'a> EnvValue<'a> for &'a [u8] {
    fn structured_attrs(&self) -> Result<StructuredAttrs, DrvError> {
        StructuredAttrs::read(serde_json::from_slice(self))
    }
    fn string(&self) -> Option<DrvStr<'a>> {
        Some(Cow::Borrowed(self))
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(self).into_owned()
    }
}

impl<'a> EnvValue<'a> for RawStr<'a> {
    fn structured_attrs(&self) -> Result<StructuredAttrs, DrvError> {
        StructuredAttrs::read(serde_json::from_reader(self.reader()))
    }
    fn string(&self) -> Option<DrvStr<'a>> {
        Some(self.unescape())
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.unescape()).into_owned()
    }
}

impl EnvValue<'static> for AttrText {
    fn structured_attrs(&self) -> Result<StructuredAttrs, DrvError> {
        match self {
            AttrText(json, true) => StructuredAttrs::read(serde_json::from_str(json)),
            _ => Err(DrvError::json("env.__json is not a string")),
        }
    }
    fn string(&self) -> Option<DrvStr<'static>> {
        self.1.then(|| Cow::Owned(self.0.as_bytes().to_vec()))
    }
    fn text(&self) -> String {
        self.0.clone()
    }
}

/// A structured-attrs object (`__json`, or `structuredAttrs` of the JSON) as the hook reads
/// it: the features and the GPU count, a repeat of either recorded; every other member is
/// skipped unbuilt (serde's `IgnoredAny`), so a huge one is never held in memory.
#[derive(Debug, Default)]
struct StructuredAttrs {
    features: Option<Vec<String>>,
    gpus: Option<AttrText>,
    repeated: Option<DecidingKey>,
}

impl StructuredAttrs {
    /// The attrs, or why they are not valid.
    fn read(parsed: Result<StructuredAttrs, serde_json::Error>) -> Result<Self, DrvError> {
        parsed.map_err(|e| DrvError::json(format!("structured attrs (__json) are not valid: {e}")))
    }

    fn to_attrs(&self) -> Result<DrvAttrs<'static>, DrvError> {
        if let Some(key) = self.repeated {
            return Err(DrvError::Repeated {
                key,
                within: Within::StructuredAttrs,
            });
        }
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
            gpus: self.gpus.as_ref().map(|t| t.0.clone()),
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
                while let Some(key) = map.next_key::<Key>()? {
                    match key.0 {
                        // Anything but a list of strings (`null` too) is an error, as in Nix.
                        Some(DecidingKey::Features) if attrs.features.is_none() => {
                            attrs.features = Some(map.next_value()?);
                        }
                        Some(DecidingKey::Gpus) if attrs.gpus.is_none() => {
                            attrs.gpus = Some(map.next_value()?);
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
struct Key(Option<DecidingKey>);

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E>(self, v: &str) -> Result<Key, E> {
                Ok(Key(DecidingKey::of(v.as_bytes())))
            }
        }
        d.deserialize_identifier(Name)
    }
}

impl<'a> Derivation<'a> {
    /// Parses a whole `.drv` file. Trailing bytes after the closing parenthesis are an error.
    pub fn parse(input: &'a [u8]) -> Result<Self, DrvError> {
        let mut p = Parser { input, pos: 0 };
        let drv = p.derivation()?;
        if p.pos != input.len() {
            return Err(p.error("unexpected bytes after the end of the derivation"));
        }
        Ok(drv)
    }

    /// The value of environment variable `name`, if set: the last one, as Nix reads a repeat.
    pub fn env_var(&self, name: &[u8]) -> Option<&[u8]> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k.as_ref() == name)
            .map(|(_, v)| v.as_ref())
    }

    /// What the hook decides on, read the way Nix reads it: from the `__json` structured
    /// attributes when present, else from the env entries. Fails when a [`DecidingKey`] is
    /// repeated, when `__json` is not a JSON object, or when its `requiredSystemFeatures` is
    /// not a list of strings.
    pub fn attrs(&self) -> Result<DrvAttrs<'_>, DrvError> {
        let mut env = Deciding::default();
        for (key, value) in &self.env {
            if let Some(key) = DecidingKey::of(key) {
                env.set(key, value.as_ref());
            }
        }
        attrs_of_env(&env)
    }

    /// The derivation's `requiredSystemFeatures` (as [`Derivation::attrs`]).
    pub fn required_features(&self) -> Result<RequiredFeatures<'_>, DrvError> {
        self.attrs().map(|a| a.features)
    }

    /// The derivation's [`GPUS_ATTR`] (as [`Derivation::attrs`]); `None` when unset or when the
    /// attrs cannot be read.
    pub fn gpus_attr(&self) -> Option<String> {
        self.attrs().ok()?.gpus
    }
}

/// The required features of a derivation given as JSON (what some Nix variants pass to the hook
/// in `NIX_DERIVATION_V4`, or on `DRV_ATERM_FD`, when the `.drv` is not on disk): see
/// [`JsonDerivation::parse`] for the shapes read. Features come from `structuredAttrs`, else
/// `env.__json`, else the whitespace-separated `env.requiredSystemFeatures`, as for `.drv` files.
pub fn features_from_json(json: &[u8]) -> Result<RequiredFeatures<'static>, DrvError> {
    JsonDerivation::parse(json)?.attrs().map(|a| a.features)
}

/// [`GPUS_ATTR`] of a derivation given as JSON (`NIX_DERIVATION_V4`): from `structuredAttrs`,
/// `env.__json` or `env`, found as [`features_from_json`] finds the features; `None` when unset
/// or unreadable.
pub fn gpus_attr_from_json(json: &[u8]) -> Option<String> {
    JsonDerivation::parse(json).ok()?.attrs().ok()?.gpus
}

/// What the hook reads of a derivation given as JSON, and nothing more: typed readers keep the
/// features, the GPU count and `env.__json`, and skip every other value unbuilt (serde's
/// `IgnoredAny`), so memory stays near the JSON's size and time linear in it. A repeated member
/// counts as its last, as Nix's JSON library reads it, except a [`DecidingKey`]'s.
#[derive(Debug, Default)]
pub struct JsonDerivation {
    env: Option<JsonEnv>,
    /// `Some(None)`: `"structuredAttrs": null`, which means none.
    structured_attrs: Option<Option<StructuredAttrs>>,
}

/// The `env` object of a derivation given as JSON: its [`DecidingKey`]s.
#[derive(Debug, Default)]
struct JsonEnv(Deciding<AttrText>);

impl<'de> serde::Deserialize<'de> for JsonEnv {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = JsonEnv;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<JsonEnv, A::Error> {
                let mut env = Deciding::default();
                while let Some(key) = map.next_key::<Key>()? {
                    match key.0 {
                        Some(key) if !env.repeats(key) => env.set(key, map.next_value()?),
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(JsonEnv(env))
            }
        }
        d.deserialize_map(Object)
    }
}

/// An attribute's value as text, the way messages show it: a string as itself, a number,
/// boolean or `null` as JSON writes it, a list or object as `[…]` or `{…}` (skipped, never
/// built, so a hostile value costs no memory). The flag: it was a string.
#[derive(Debug)]
struct AttrText(String, bool);

impl<'de> serde::Deserialize<'de> for AttrText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> serde::de::Visitor<'de> for Text {
            type Value = AttrText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E>(self, v: &str) -> Result<AttrText, E> {
                Ok(AttrText(v.to_owned(), true))
            }
            fn visit_string<E>(self, v: String) -> Result<AttrText, E> {
                Ok(AttrText(v, true))
            }
            fn visit_bool<E>(self, v: bool) -> Result<AttrText, E> {
                Ok(AttrText(v.to_string(), false))
            }
            fn visit_u64<E>(self, v: u64) -> Result<AttrText, E> {
                Ok(AttrText(v.to_string(), false))
            }
            fn visit_i64<E>(self, v: i64) -> Result<AttrText, E> {
                Ok(AttrText(v.to_string(), false))
            }
            fn visit_f64<E>(self, v: f64) -> Result<AttrText, E> {
                let text = serde_json::Number::from_f64(v)
                    .map_or_else(|| v.to_string(), |n| n.to_string());
                Ok(AttrText(text, false))
            }
            fn visit_unit<E>(self) -> Result<AttrText, E> {
                Ok(AttrText("null".to_owned(), false))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<AttrText, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(AttrText("[…]".to_owned(), false))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<AttrText, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(AttrText("{…}".to_owned(), false))
            }
        }
        d.deserialize_any(Text)
    }
}

/// A top-level member of a JSON document that may be the derivation (an object) or not.
enum Candidate {
    Derivation(JsonDerivation),
    NotAnObject,
}

impl<'de> serde::Deserialize<'de> for Candidate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Any;
        impl<'de> serde::de::Visitor<'de> for Any {
            type Value = Candidate;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Candidate, A::Error> {
                read_derivation_object(map).map(|d| Candidate::Derivation(d.derivation))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Candidate, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Candidate::NotAnObject)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Candidate, E> {
                Ok(Candidate::NotAnObject)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Candidate, E> {
                Ok(Candidate::NotAnObject)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Candidate, E> {
                Ok(Candidate::NotAnObject)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Candidate, E> {
                Ok(Candidate::NotAnObject)
            }
            fn visit_str<E>(self, _: &str) -> Result<Candidate, E> {
                Ok(Candidate::NotAnObject)
            }
            fn visit_unit<E>(self) -> Result<Candidate, E> {
                Ok(Candidate::NotAnObject)
            }
        }
        d.deserialize_any(Any)
    }
}

/// One JSON object read as a derivation (`env`, `structuredAttrs`), with each of its other
/// members read as a [`Candidate`] in case the object is a wrapper around the derivation. A
/// repeated member counts as its last.
struct ReadObject {
    derivation: JsonDerivation,
    /// Whether `env` or `structuredAttrs` was a member: then this object is the derivation.
    is_derivation: bool,
    /// The `derivation` member.
    wrapped: Option<Candidate>,
    /// The members other than those.
    others: Others,
}

/// The members of a JSON object other than the ones [`ReadObject`] knows.
enum Others {
    None,
    /// One key (perhaps repeated), with its last value.
    One(String, Candidate),
    /// More than one key.
    Several,
}

fn read_derivation_object<'de, A: serde::de::MapAccess<'de>>(
    mut map: A,
) -> Result<ReadObject, A::Error> {
    let mut read = ReadObject {
        derivation: JsonDerivation::default(),
        is_derivation: false,
        wrapped: None,
        others: Others::None,
    };
    while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
        match key.as_ref() {
            "env" => {
                read.is_derivation = true;
                read.derivation.env = Some(map.next_value()?);
            }
            "structuredAttrs" => {
                read.is_derivation = true;
                read.derivation.structured_attrs = Some(map.next_value()?);
            }
            "derivation" => read.wrapped = Some(map.next_value()?),
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
    Ok(read)
}

impl JsonDerivation {
    /// Reads a derivation given as JSON, in one pass: the derivation object itself (it has
    /// `env` or `structuredAttrs`), `{ "<drv path>": { … } }` (`nix show-derivation`), or a
    /// record holding it as `derivation` (the input NixOS/nix#16413 proposes for hooks).
    pub fn parse(json: &[u8]) -> Result<JsonDerivation, DrvError> {
        let bad = DrvError::Json;
        struct Top;
        impl<'de> serde::de::Visitor<'de> for Top {
            type Value = Option<ReadObject>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                read_derivation_object(map).map(Some)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
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
        let mut de = serde_json::Deserializer::from_slice(json);
        let top = serde::Deserializer::deserialize_any(&mut de, Top)
            .and_then(|t| de.end().map(|()| t))
            .map_err(|e| bad(format!("derivation JSON is not valid: {e}")))?;
        let read = top.ok_or_else(|| bad("derivation JSON is not an object".into()))?;
        if read.is_derivation {
            return Ok(read.derivation);
        }
        let chosen = match (read.wrapped, read.others) {
            (Some(wrapped), _) => wrapped,
            (None, Others::One(_, inner)) => inner,
            _ => return Err(bad("derivation JSON holds no single derivation".into())),
        };
        match chosen {
            Candidate::Derivation(d) => Ok(d),
            Candidate::NotAnObject => Err(bad("derivation JSON holds no derivation object".into())),
        }
    }

    /// What the hook decides on (as [`Derivation::attrs`]): from `structuredAttrs`, else as
    /// from a `.drv`'s env. A repeated [`DecidingKey`] in `env` is refused even then.
    pub fn attrs(&self) -> Result<DrvAttrs<'static>, DrvError> {
        let env = self.env.as_ref().map(|e| &e.0);
        if let Some(env) = env {
            env.unrepeated(Within::Env)?;
        }
        if let Some(Some(attrs)) = &self.structured_attrs {
            return attrs.to_attrs();
        }
        attrs_of_env(env.unwrap_or(&Deciding::default()))
    }

    /// The derivation's required features (as [`features_from_json`]).
    pub fn required_features(&self) -> Result<RequiredFeatures<'static>, DrvError> {
        self.attrs().map(|a| a.features)
    }

    /// The derivation's [`GPUS_ATTR`] (as [`gpus_attr_from_json`]).
    pub fn gpus_attr(&self) -> Option<String> {
        self.attrs().ok()?.gpus
    }
}

/// A string of the derivation as written, escapes and all: read without copying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawStr<'a> {
    raw: &'a [u8],
    escaped: bool,
}

impl<'a> RawStr<'a> {
    /// The string's bytes, unescaped (a copy only when it holds an escape).
    pub fn unescape(&self) -> DrvStr<'a> {
        if !self.escaped {
            return Cow::Borrowed(self.raw);
        }
        let mut out = Vec::with_capacity(self.raw.len());
        let mut bytes = self.raw.iter();
        while let Some(b) = bytes.next() {
            out.push(match (b, *b == b'\\') {
                (_, true) => match bytes.next() {
                    Some(b'n') => b'\n',
                    Some(b'r') => b'\r',
                    Some(b't') => b'\t',
                    Some(other) => *other,
                    None => break,
                },
                (b, false) => *b,
            });
        }
        Cow::Owned(out)
    }

    /// The [`DecidingKey`] this key is, unescaped, if any: compared in place (a key may be huge
    /// and full of escapes; one longer than twice the longest name cannot be one).
    fn deciding(&self) -> Option<DecidingKey> {
        if !self.escaped {
            return DecidingKey::of(self.raw);
        }
        if self.raw.len() > 2 * DecidingKey::LONGEST + 1 {
            return None;
        }
        DecidingKey::of(&self.unescape())
    }

    /// A buffered reader of the unescaped bytes, so that a huge value (`__json`) is never
    /// copied whole. `serde_json` reads a byte at a time: the buffer turns that into one
    /// [`Unescape::read`] per 64 KiB.
    fn reader(&self) -> std::io::BufReader<Unescape<'a>> {
        std::io::BufReader::with_capacity(64 << 10, Unescape { rest: self.raw })
    }
}

/// Unescapes an ATerm string body while reading it. Each `read` looks at no more of the input
/// than it can return, so reading the whole body is linear in its length whatever the buffer
/// size (it once searched all the rest for the next `\` on every read, quadratic
/// for a long run without escapes).
struct Unescape<'a> {
    rest: &'a [u8],
}

impl std::io::Read for Unescape<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            let Some(&b) = self.rest.first() else { break };
            if b == b'\\' {
                let Some(&e) = self.rest.get(1) else { break };
                buf[n] = match e {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    other => other,
                };
                self.rest = &self.rest[2..];
                n += 1;
                continue;
            }
            // Copy the run up to the next backslash, within what fits.
            let window = &self.rest[..self.rest.len().min(buf.len() - n)];
            let take = crate::bytes::find(b'\\', window).unwrap_or(window.len());
            buf[n..n + take].copy_from_slice(&window[..take]);
            self.rest = &self.rest[take..];
            n += take;
        }
        Ok(n)
    }
}

/// The environment of a derivation, read for the hook: the whole `.drv` is checked exactly as
/// [`Derivation::parse`] checks it, but no string is copied and only the [`DecidingKey`]s are
/// kept; only their values are ever unescaped, and `__json` is parsed straight from the file's
/// bytes. So the memory the hook needs stays near the file's size whatever the derivation holds.
#[derive(Debug, Clone)]
pub struct DrvEnv<'a> {
    env: Deciding<RawStr<'a>>,
}

impl<'a> DrvEnv<'a> {
    /// Parses a whole `.drv` file (same grammar and errors as [`Derivation::parse`]).
    pub fn parse(input: &'a [u8]) -> Result<Self, DrvError> {
        let mut p = Parser { input, pos: 0 };
        let env = p.env_only()?;
        if p.pos != input.len() {
            return Err(p.error("unexpected bytes after the end of the derivation"));
        }
        Ok(DrvEnv { env })
    }

    /// As [`Derivation::attrs`].
    pub fn attrs(&self) -> Result<DrvAttrs<'a>, DrvError> {
        attrs_of_env(&self.env)
    }

    /// As [`Derivation::required_features`].
    pub fn required_features(&self) -> Result<RequiredFeatures<'a>, DrvError> {
        self.attrs().map(|a| a.features)
    }

    /// As [`Derivation::gpus_attr`].
    pub fn gpus_attr(&self) -> Option<String> {
        self.attrs().ok()?.gpus
    }
}

struct Parser<'a> {
    input: &'a [u8],
    pos: usize,
}

impl<'a> Parser<'a> {
    fn error(&self, message: impl Into<String>) -> DrvError {
        DrvError::Malformed {
            offset: self.pos,
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    fn expect(&mut self, literal: &[u8]) -> Result<(), DrvError> {
        if self.input[self.pos..].starts_with(literal) {
            self.pos += literal.len();
            Ok(())
        } else {
            Err(self.error(format!(
                "expected '{}', found {}",
                String::from_utf8_lossy(literal),
                self.describe_here()
            )))
        }
    }

    fn describe_here(&self) -> String {
        match self.peek() {
            None => "end of file".to_string(),
            Some(b) if b.is_ascii_graphic() || b == b' ' => format!("'{}'", b as char),
            Some(b) => format!("byte 0x{b:02x}"),
        }
    }

    fn derivation(&mut self) -> Result<Derivation<'a>, DrvError> {
        if self.input.starts_with(b"DrvWithVersion(") {
            return Err(self.error(
                "this is a DrvWithVersion derivation from a newer Nix; this hook reads the \
                 classic Derive(...) format only",
            ));
        }
        self.expect(b"Derive(")?;
        let outputs = self.list(|p| {
            p.expect(b"(")?;
            let name = p.string()?;
            p.expect(b",")?;
            let path = p.string()?;
            p.expect(b",")?;
            let hash_algo = p.string()?;
            p.expect(b",")?;
            let hash = p.string()?;
            p.expect(b")")?;
            Ok(Output {
                name,
                path,
                hash_algo,
                hash,
            })
        })?;
        self.expect(b",")?;
        let input_drvs = self.list(|p| {
            p.expect(b"(")?;
            let path = p.string()?;
            p.expect(b",")?;
            let outputs = p.list(Parser::string)?;
            p.expect(b")")?;
            Ok(InputDrv { path, outputs })
        })?;
        self.expect(b",")?;
        let input_srcs = self.list(Parser::string)?;
        self.expect(b",")?;
        let system = self.string()?;
        self.expect(b",")?;
        let builder = self.string()?;
        self.expect(b",")?;
        let args = self.list(Parser::string)?;
        self.expect(b",")?;
        let env = self.list(|p| {
            p.expect(b"(")?;
            let key = p.string()?;
            p.expect(b",")?;
            let value = p.string()?;
            p.expect(b")")?;
            Ok((key, value))
        })?;
        self.expect(b")")?;
        Ok(Derivation {
            outputs,
            input_drvs,
            input_srcs,
            system,
            builder,
            args,
            env,
        })
    }

    /// The grammar of [`Parser::derivation`], keeping only the environment, as raw strings.
    fn env_only(&mut self) -> Result<Deciding<RawStr<'a>>, DrvError> {
        if self.input.starts_with(b"DrvWithVersion(") {
            return Err(self.error(
                "this is a DrvWithVersion derivation from a newer Nix; this hook reads the \
                 classic Derive(...) format only",
            ));
        }
        self.expect(b"Derive(")?;
        self.list(|p| {
            p.expect(b"(")?;
            for last in [false, false, false, true] {
                p.raw_string()?;
                if !last {
                    p.expect(b",")?;
                }
            }
            p.expect(b")")
        })?;
        self.expect(b",")?;
        self.list(|p| {
            p.expect(b"(")?;
            p.raw_string()?;
            p.expect(b",")?;
            p.list(Parser::raw_string)?;
            p.expect(b")")
        })?;
        self.expect(b",")?;
        self.list(Parser::raw_string)?;
        self.expect(b",")?;
        self.raw_string()?;
        self.expect(b",")?;
        self.raw_string()?;
        self.expect(b",")?;
        self.list(Parser::raw_string)?;
        self.expect(b",")?;
        let mut env = Deciding::default();
        self.list(|p| {
            p.expect(b"(")?;
            let key = p.raw_string()?;
            p.expect(b",")?;
            let value = p.raw_string()?;
            p.expect(b")")?;
            if let Some(key) = key.deciding() {
                env.set(key, value);
            }
            Ok(())
        })?;
        self.expect(b")")?;
        Ok(env)
    }

    /// A quoted string as written (checked like [`Parser::string`], never copied).
    fn raw_string(&mut self) -> Result<RawStr<'a>, DrvError> {
        let start = self.pos;
        self.expect(b"\"")?;
        let body = self.pos;
        let mut at = body;
        let mut escaped = false;
        loop {
            let next =
                crate::bytes::find2(b'"', b'\\', &self.input[at..]).ok_or(DrvError::Malformed {
                    offset: start,
                    message: "unterminated string".to_string(),
                })? + at;
            if self.input[next] == b'"' {
                self.pos = next + 1;
                return Ok(RawStr {
                    raw: &self.input[body..next],
                    escaped,
                });
            }
            if next + 1 >= self.input.len() {
                return Err(DrvError::Malformed {
                    offset: start,
                    message: "unterminated string".to_string(),
                });
            }
            escaped = true;
            at = next + 2;
        }
    }

    /// `[` item (`,` item)* `]`, or `[]`.
    fn list<T>(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<T, DrvError>,
    ) -> Result<Vec<T>, DrvError> {
        self.expect(b"[")?;
        let mut items = Vec::new();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(items);
        }
        loop {
            items.push(item(self)?);
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(items);
                }
                _ => {
                    return Err(self.error(format!(
                        "expected ',' or ']' in a list, found {}",
                        self.describe_here()
                    )))
                }
            }
        }
    }

    /// A quoted string. Borrows from the input when it holds no escape.
    fn string(&mut self) -> Result<DrvStr<'a>, DrvError> {
        let start = self.pos;
        self.expect(b"\"")?;
        let body = self.pos;
        let unterminated = |offset| DrvError::Malformed {
            offset,
            message: "unterminated string".to_string(),
        };
        // Fast path: scan to the first quote or backslash.
        let first = crate::bytes::find2(b'"', b'\\', &self.input[body..])
            .ok_or_else(|| unterminated(start))?
            + body;
        if self.input[first] == b'"' {
            self.pos = first + 1;
            return Ok(Cow::Borrowed(&self.input[body..first]));
        }
        let mut owned = Vec::with_capacity(first - body + 16);
        owned.extend_from_slice(&self.input[body..first]);
        let mut at = first;
        loop {
            // `at` is on a backslash or a quote.
            if self.input[at] == b'"' {
                self.pos = at + 1;
                return Ok(Cow::Owned(owned));
            }
            let escaped = *self.input.get(at + 1).ok_or_else(|| unterminated(start))?;
            owned.push(match escaped {
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                other => other,
            });
            let from = at + 2;
            let next = crate::bytes::find2(b'"', b'\\', &self.input[from..])
                .ok_or_else(|| unterminated(start))?
                + from;
            owned.extend_from_slice(&self.input[from..next]);
            at = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIMPLE: &[u8] = br#"Derive([("out","/nix/store/abc-x","","")],[("/nix/store/def-y.drv",["dev","out"])],["/nix/store/ghi-src"],"x86_64-linux","/bin/sh",["-c","echo \"hi\"\n"],[("out","/nix/store/abc-x"),("requiredSystemFeatures","cuda  big-parallel\t")])"#;

    #[test]
    fn parses_every_field() {
        let drv = Derivation::parse(SIMPLE).unwrap();
        assert_eq!(drv.outputs.len(), 1);
        assert_eq!(drv.outputs[0].name.as_ref(), b"out");
        assert_eq!(drv.input_drvs[0].outputs.len(), 2);
        assert_eq!(drv.input_srcs[0].as_ref(), b"/nix/store/ghi-src");
        assert_eq!(drv.system.as_ref(), b"x86_64-linux");
        assert_eq!(drv.args[1].as_ref(), b"echo \"hi\"\n");
        assert!(matches!(drv.args[0], Cow::Borrowed(_)));
        assert!(matches!(drv.args[1], Cow::Owned(_)));
    }

    #[test]
    fn plain_features_split_on_nix_whitespace() {
        let drv = Derivation::parse(SIMPLE).unwrap();
        let f = drv.required_features().unwrap();
        assert!(!f.structured);
        assert_eq!(f.lossy(), vec!["cuda", "big-parallel"]);
        assert!(f.contains(b"cuda"));
        assert!(!f.contains(b"gpu"));
    }

    #[test]
    fn structured_features_come_from_json() {
        let text = br#"Derive([],[],[],"s","b",[],[("__json","{\"requiredSystemFeatures\":[\"cuda\",\"kvm\"],\"x\":{\"y\":[1,2]}}"),("requiredSystemFeatures","ignored")])"#;
        let drv = Derivation::parse(text).unwrap();
        let f = drv.required_features().unwrap();
        assert!(f.structured);
        assert_eq!(f.lossy(), vec!["cuda", "kvm"]);
    }

    #[test]
    fn structured_features_must_be_strings() {
        let text =
            br#"Derive([],[],[],"s","b",[],[("__json","{\"requiredSystemFeatures\":[1]}")])"#;
        let drv = Derivation::parse(text).unwrap();
        assert!(drv.required_features().is_err());
    }

    #[test]
    fn structured_features_null_is_an_error_like_in_nix() {
        // Nix 2.8: "attribute 'requiredSystemFeatures' of derivation … must be a list of strings".
        let text =
            br#"Derive([],[],[],"s","b",[],[("__json","{\"requiredSystemFeatures\":null}")])"#;
        let drv = Derivation::parse(text).unwrap();
        assert!(drv.required_features().is_err());
        let text = br#"Derive([],[],[],"s","b",[],[("__json","{\"other\":null}")])"#;
        let drv = Derivation::parse(text).unwrap();
        assert!(drv.required_features().unwrap().features.is_empty());
    }

    #[test]
    fn json_derivations_give_the_same_features() {
        let plain = br#"{"/nix/store/x.drv":{"env":{"requiredSystemFeatures":" cuda\tkvm "}}}"#;
        assert_eq!(features_from_json(plain).unwrap().lossy(), ["cuda", "kvm"]);
        let bare = br#"{"env":{"out":"/x"}}"#;
        assert!(features_from_json(bare).unwrap().features.is_empty());
        let v4 = br#"{"env":{},"structuredAttrs":{"requiredSystemFeatures":["gpu"]}}"#;
        let f = features_from_json(v4).unwrap();
        assert!(f.structured);
        assert_eq!(f.lossy(), ["gpu"]);
        let json_env = br#"{"env":{"__json":"{\"requiredSystemFeatures\":[\"cuda\"]}"}}"#;
        assert_eq!(features_from_json(json_env).unwrap().lossy(), ["cuda"]);
        for bad in [
            &b"[]"[..],
            b"{",
            b"{\"a\":1,\"b\":2}",
            br#"{"env":{"requiredSystemFeatures":3}}"#,
        ] {
            assert!(
                features_from_json(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn json_derivations_in_every_shape_are_read_with_typed_structs() {
        // The record NixOS/nix#16413 proposes for hooks: the derivation as `derivation`.
        let hook_input = br#"{"derivation":{"env":{"requiredSystemFeatures":"cuda","cudaSandboxGpus":"2"}},"outputs":{"out":"/nix/store/x"}}"#;
        assert_eq!(features_from_json(hook_input).unwrap().lossy(), ["cuda"]);
        assert_eq!(gpus_attr_from_json(hook_input).as_deref(), Some("2"));
        // `structuredAttrs: null` means none: the env is read.
        let null_attrs = br#"{"env":{"requiredSystemFeatures":"kvm"},"structuredAttrs":null}"#;
        let f = features_from_json(null_attrs).unwrap();
        assert!(!f.structured);
        assert_eq!(f.lossy(), ["kvm"]);
        // As in Nix, a `null` list of features is an error, not an empty list.
        let null_list = br#"{"structuredAttrs":{"requiredSystemFeatures":null}}"#;
        assert!(features_from_json(null_list).is_err());
        // A hostile GPU count is shown, never built: a list as `[…]`, numbers as JSON writes them.
        let listed = br#"{"structuredAttrs":{"cudaSandboxGpus":[1,[2,{"a":3}]]}}"#;
        assert_eq!(gpus_attr_from_json(listed).as_deref(), Some("[…]"));
        for (value, text) in [
            ("3", "3"),
            ("3.0", "3.0"),
            ("null", "null"),
            ("true", "true"),
        ] {
            let json = format!(r#"{{"structuredAttrs":{{"cudaSandboxGpus":{value}}}}}"#);
            assert_eq!(gpus_attr_from_json(json.as_bytes()).as_deref(), Some(text));
        }
        // Not one derivation: an error naming the shape.
        let two = br#"{"/nix/store/a.drv":{"env":{}},"/nix/store/b.drv":{"env":{}}}"#;
        assert!(features_from_json(two)
            .unwrap_err()
            .to_string()
            .contains("single"));
        assert!(features_from_json(br#"{"/nix/store/a.drv":3}"#)
            .unwrap_err()
            .to_string()
            .contains("no derivation object"));
    }

    /// An ATerm `.drv` with the env entries `env`.
    fn with_env(env: &str) -> Vec<u8> {
        format!(
            r#"Derive([("out","/nix/store/a-x","","")],[],[],"x86_64-linux","/bin/sh",[],[{env}])"#
        )
        .into_bytes()
    }

    #[test]
    fn a_repeated_deciding_key_is_refused_in_every_form() {
        use DecidingKey::*;
        let repeated = |key, within| Err(DrvError::Repeated { key, within });
        for (env, key, within) in [
            (
                r#"("requiredSystemFeatures","cuda"),("requiredSystemFeatures","")"#,
                Features,
                Within::Env,
            ),
            (
                r#"("re\quiredSystemFeatures","cuda"),("requiredSystemFeatures","")"#,
                Features,
                Within::Env,
            ),
            (
                r#"("__json","{}"),("__json","{}")"#,
                StructuredAttrs,
                Within::Env,
            ),
            (
                r#"("cudaSandboxGpus","1"),("requiredSystemFeatures","cuda"),("cudaSandboxGpus","2")"#,
                Gpus,
                Within::Env,
            ),
            // With structured attrs, the env's features are not read, but still refused.
            (
                r#"("__json","{}"),("requiredSystemFeatures",""),("requiredSystemFeatures","")"#,
                Features,
                Within::Env,
            ),
            (
                r#"("__json","{\"requiredSystemFeatures\":[\"cuda\"],\"requiredSystemFeatures\":[]}")"#,
                Features,
                Within::StructuredAttrs,
            ),
            (
                r#"("__json","{\"requiredSystemFeatures\":[],\"required\\u0053ystemFeatures\":[\"cuda\"]}")"#,
                Features,
                Within::StructuredAttrs,
            ),
            (
                r#"("__json","{\"cudaSandboxGpus\":1,\"cudaSandboxGpus\":[2]}")"#,
                Gpus,
                Within::StructuredAttrs,
            ),
        ] {
            let drv = with_env(env);
            let full = Derivation::parse(&drv).unwrap();
            assert_eq!(full.attrs(), repeated(key, within), "{env}");
            let lean = DrvEnv::parse(&drv).unwrap();
            assert_eq!(lean.attrs(), repeated(key, within), "{env}");
            assert_eq!(lean.gpus_attr(), None, "{env}");
        }
        for (json, key, within) in [
            (
                r#"{"env":{"requiredSystemFeatures":"cuda","requiredSystemFeatures":""}}"#,
                Features,
                Within::Env,
            ),
            (
                r#"{"env":{"__json":"{}","__json":"{}"}}"#,
                StructuredAttrs,
                Within::Env,
            ),
            (
                r#"{"env":{"cudaSandboxGpus":"1","cudaSandboxGpus":"1"},"structuredAttrs":{}}"#,
                Gpus,
                Within::Env,
            ),
            (
                r#"{"env":{"__json":"{\"requiredSystemFeatures\":[],\"requiredSystemFeatures\":[]}"}}"#,
                Features,
                Within::StructuredAttrs,
            ),
            (
                r#"{"structuredAttrs":{"cudaSandboxGpus":1,"requiredSystemFeatures":[],"cudaSandboxGpus":1}}"#,
                Gpus,
                Within::StructuredAttrs,
            ),
            (
                r#"{"derivation":{"structuredAttrs":{"requiredSystemFeatures":[],"requiredSystemFeature\u0073":[]}}}"#,
                Features,
                Within::StructuredAttrs,
            ),
        ] {
            let d = JsonDerivation::parse(json.as_bytes()).unwrap();
            assert_eq!(d.attrs(), repeated(key, within), "{json}");
            let e = features_from_json(json.as_bytes()).unwrap_err();
            assert_eq!(e.to_string().lines().count(), 1);
            assert!(
                e.to_string()
                    .contains(&format!("\"{}\" is set more than once", key.name())),
                "{e}"
            );
        }
    }

    #[test]
    fn every_other_repeat_counts_as_its_last() {
        let drv = with_env(
            r#"("out","/a"),("out","/nix/store/a-x"),("requiredSystemFeatures","kvm"),("x","1"),("x","2")"#,
        );
        let full = Derivation::parse(&drv).unwrap();
        assert_eq!(full.env_var(b"out"), Some(&b"/nix/store/a-x"[..]));
        assert_eq!(full.env_var(b"x"), Some(&b"2"[..]));
        assert_eq!(full.env.len(), 5, "the oracle keeps every entry");
        assert_eq!(full.required_features().unwrap().lossy(), ["kvm"]);
        assert_eq!(
            DrvEnv::parse(&drv)
                .unwrap()
                .required_features()
                .unwrap()
                .lossy(),
            ["kvm"]
        );
        // Inside `__json`, a member the hook does not read.
        let drv = with_env(
            r#"("__json","{\"x\":1,\"x\":{\"requiredSystemFeatures\":[]},\"requiredSystemFeatures\":[\"cuda\"]}")"#,
        );
        assert_eq!(
            DrvEnv::parse(&drv)
                .unwrap()
                .required_features()
                .unwrap()
                .lossy(),
            ["cuda"]
        );
        // JSON: a repeated `env`, `structuredAttrs`, `derivation` or `.drv` path is its last.
        for (json, features) in [
            (
                r#"{"env":{"requiredSystemFeatures":"cuda"},"env":{"requiredSystemFeatures":"kvm"}}"#,
                vec!["kvm"],
            ),
            (
                r#"{"structuredAttrs":{"requiredSystemFeatures":["cuda"]},"structuredAttrs":null,"env":{}}"#,
                vec![],
            ),
            (
                r#"{"derivation":{"env":{}},"derivation":{"env":{"requiredSystemFeatures":"cuda"}}}"#,
                vec!["cuda"],
            ),
            (
                r#"{"/nix/store/a.drv":{"env":{"requiredSystemFeatures":"cuda"}},"/nix/store/a.drv":{"env":{}}}"#,
                vec![],
            ),
            (
                r#"{"/nix/store/a.drv":3,"/nix/store/a.drv":{"env":{"x":"1","x":"2","requiredSystemFeatures":"gpu"}}}"#,
                vec!["gpu"],
            ),
        ] {
            assert_eq!(
                features_from_json(json.as_bytes()).unwrap().lossy(),
                features,
                "{json}"
            );
        }
        let two = br#"{"/nix/store/a.drv":{"env":{}},"/nix/store/b.drv":{"env":{}},"/nix/store/a.drv":{"env":{}}}"#;
        assert!(features_from_json(two)
            .unwrap_err()
            .to_string()
            .contains("single"));
    }

    #[test]
    fn escapes_follow_nix() {
        let text = br#"Derive([],[],[],"a\\b\"c\qd\re","b",[],[])"#;
        let drv = Derivation::parse(text).unwrap();
        assert_eq!(drv.system.as_ref(), b"a\\b\"cqd\re");
    }

    #[test]
    fn non_utf8_bytes_are_kept() {
        let mut text = br#"Derive([],[],[],"caf"#.to_vec();
        text.push(0xe9);
        text.extend_from_slice(br#"","b",[],[])"#);
        let drv = Derivation::parse(&text).unwrap();
        assert_eq!(drv.system.as_ref(), b"caf\xe9");
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        for end in 0..SIMPLE.len() {
            let offset = Derivation::parse(&SIMPLE[..end])
                .unwrap_err()
                .offset()
                .unwrap();
            assert!(offset <= end, "offset {offset} beyond input {end}");
        }
    }

    #[test]
    fn errors_carry_the_offset() {
        let err = Derivation::parse(br#"Derive([],[],[] "s","b",[],[])"#).unwrap_err();
        assert_eq!(err.offset(), Some(15));
        assert!(err.to_string().contains("byte 15"), "{err}");
        let err = Derivation::parse(b"DrvWithVersion(\"xp-dyn-drv\",[])").unwrap_err();
        assert!(err.to_string().contains("newer Nix"));
        let err = Derivation::parse(br#"Derive([],[],[],"s","b",[],[])x"#).unwrap_err();
        assert!(err.to_string().contains("after the end"));
    }

    #[test]
    fn the_hooks_lean_reader_agrees_with_the_full_parser() {
        let samples: [&[u8]; 6] = [
            br#"Derive([("out","/nix/store/a-x","","")],[("/nix/store/b.drv",["out"])],["/nix/store/c"],"x86_64-linux","/bin/sh",["-e","a\"b"],[("cudaSandboxGpus","2"),("out","/nix/store/a-x"),("requiredSystemFeatures","big-parallel\tcuda")])"#,
            br#"Derive([("out","/nix/store/a-x","","")],[],[],"x86_64-linux","/bin/sh",[],[("__json","{\"big\":\"a\\nb\\\"c\",\"cudaSandboxGpus\":3,\"requiredSystemFeatures\":[\"cuda\",\"kvm\"]}"),("out","/nix/store/a-x")])"#,
            br#"Derive([],[],[],"","",[],[("__json","{\"requiredSystemFeatures\":null}")])"#,
            br#"Derive([],[],[],"","",[],[("re\quiredSystemFeatures","x\ny")])"#,
            br#"Derive([],[],[],"","",[],[("cudaSandboxGpus","1"),("requiredSystemFeatures","cuda"),("requiredSystemFeatures","")])"#,
            br#"Derive([],[],[],"","",[],[("__json","{\"cudaSandboxGpus\":1,\"x\":2,\"x\":3,\"cudaSandboxGpus\":2}")])"#,
        ];
        let mut checked = 0;
        for sample in samples {
            let mut inputs: Vec<Vec<u8>> =
                (0..=sample.len()).map(|n| sample[..n].to_vec()).collect();
            for i in 0..sample.len() {
                for b in [b'"', b'\\', b',', b')', b'x'] {
                    let mut v = sample.to_vec();
                    v[i] = b;
                    inputs.push(v);
                }
            }
            for input in inputs {
                let full = Derivation::parse(&input);
                let lean = DrvEnv::parse(&input);
                match (&full, &lean) {
                    (Ok(d), Ok(e)) => match (d.attrs(), e.attrs()) {
                        (Ok(a), Ok(b)) => assert_eq!(a, b, "{}", String::from_utf8_lossy(&input)),
                        (Err(a), Err(b)) => assert_eq!(
                            std::mem::discriminant(&a),
                            std::mem::discriminant(&b),
                            "{}: {a} vs {b}",
                            String::from_utf8_lossy(&input)
                        ),
                        (a, b) => panic!("{}: {a:?} vs {b:?}", String::from_utf8_lossy(&input)),
                    },
                    (Err(a), Err(b)) => assert_eq!(a, b),
                    _ => panic!("{}: {full:?} vs {lean:?}", String::from_utf8_lossy(&input)),
                }
                checked += 1;
            }
        }
        assert!(checked > 1000);
    }

    #[test]
    fn the_gpus_attribute_is_read_plain_and_structured() {
        let plain = br#"Derive([("out","/nix/store/a-x","","")],[],[],"x86_64-linux","/bin/sh",[],[("cudaSandboxGpus","2"),("out","/nix/store/a-x")])"#;
        assert_eq!(
            Derivation::parse(plain).unwrap().gpus_attr().as_deref(),
            Some("2")
        );
        let structured = br#"Derive([("out","/nix/store/a-x","","")],[],[],"x86_64-linux","/bin/sh",[],[("__json","{\"cudaSandboxGpus\":3,\"requiredSystemFeatures\":[\"cuda\"]}"),("out","/nix/store/a-x")])"#;
        assert_eq!(
            DrvEnv::parse(structured).unwrap().gpus_attr().as_deref(),
            Some("3")
        );
        let none = br#"Derive([("out","/nix/store/a-x","","")],[],[],"x86_64-linux","/bin/sh",[],[("out","/nix/store/a-x")])"#;
        assert_eq!(DrvEnv::parse(none).unwrap().gpus_attr(), None);
        assert_eq!(
            gpus_attr_from_json(br#"{"env":{"cudaSandboxGpus":"2"}}"#).as_deref(),
            Some("2")
        );
        assert_eq!(
            gpus_attr_from_json(
                br#"{"/nix/store/x.drv":{"structuredAttrs":{"cudaSandboxGpus":3}}}"#
            )
            .as_deref(),
            Some("3")
        );
        assert_eq!(gpus_attr_from_json(br#"{"env":{}}"#), None);
    }
}
