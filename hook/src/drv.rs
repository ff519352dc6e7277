//! Reading Nix derivations (`.drv` files, ATerm syntax) straight from bytes.
//!
//! The format is `Derive([outputs],[inputDrvs],[inputSrcs],"system","builder",[args],[env])`
//! (docs/architecture.md, `.drv` formats). Strings are byte strings, not UTF-8: Nix accepts latin-1 and cp1252 in
//! attribute values, so every string here is a `Cow<[u8]>` that borrows from the input unless it
//! held an escape. Escapes follow Nix's own reader exactly: `\n`, `\r`, `\t` are control
//! characters and a backslash before any other byte stands for that byte.
//!
//! Every malformed input yields a [`DrvError`] carrying the byte offset of the problem; the
//! parser never panics and never reads past the input.

use serde::Deserialize as _;
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
    /// Environment of the builder, in file order (Nix writes it sorted by name).
    pub env: Vec<(DrvStr<'a>, DrvStr<'a>)>,
}

/// Why a `.drv` could not be read, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrvError {
    /// Byte offset in the file at which the problem was found.
    pub offset: usize,
    /// What was wrong there.
    pub message: String,
}

impl fmt::Display for DrvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "malformed derivation at byte {}: {}",
            self.offset, self.message
        )
    }
}

impl std::error::Error for DrvError {}

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

const ENV_FEATURES: &[u8] = b"requiredSystemFeatures";
const ENV_STRUCTURED: &[u8] = b"__json";

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

    /// The value of environment variable `name`, if set.
    pub fn env_var(&self, name: &[u8]) -> Option<&[u8]> {
        self.env
            .iter()
            .find(|(k, _)| k.as_ref() == name)
            .map(|(_, v)| v.as_ref())
    }

    /// The derivation's `requiredSystemFeatures`, read the way Nix reads them: from the
    /// `__json` structured attributes when present, else from the whitespace-separated env
    /// entry. Fails (with the offset 0, as the JSON lives in one value) when `__json` is not a
    /// JSON object or its `requiredSystemFeatures` is not a list of strings.
    pub fn required_features(&self) -> Result<RequiredFeatures<'_>, DrvError> {
        if let Some(json) = self.env_var(ENV_STRUCTURED) {
            return structured_features(json).map(|features| RequiredFeatures {
                features,
                structured: true,
            });
        }
        let features = match self.env_var(ENV_FEATURES) {
            Some(value) => value
                .split(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
                .filter(|token| !token.is_empty())
                .map(Cow::Borrowed)
                .collect(),
            None => Vec::new(),
        };
        Ok(RequiredFeatures {
            features,
            structured: false,
        })
    }
}

/// The required features of a derivation given as JSON (what some Nix variants pass to the hook
/// in `NIX_DERIVATION_V4`, or on `DRV_ATERM_FD`, when the `.drv` is not on disk): see
/// [`JsonDerivation::parse`] for the shapes read. Features come from `structuredAttrs`, else
/// `env.__json`, else the whitespace-separated `env.requiredSystemFeatures`, as for `.drv` files.
pub fn features_from_json(json: &[u8]) -> Result<RequiredFeatures<'static>, DrvError> {
    JsonDerivation::parse(json)?.required_features()
}

/// The derivation attribute asking for a number of GPUs (see [`crate::lease`]).
pub const GPUS_ATTR: &str = "cudaSandboxGpus";

impl Derivation<'_> {
    /// The derivation's [`GPUS_ATTR`] as text: with structured attrs the `__json` member (a
    /// string or a number), else the plain env entry. `None` when unset or unreadable. Only
    /// that member is kept in memory: the rest of `__json` is skipped, not built.
    pub fn gpus_attr(&self) -> Option<String> {
        if let Some(json) = self.env_var(ENV_STRUCTURED) {
            return gpus_in_attrs(json);
        }
        self.env_var(GPUS_ATTR.as_bytes())
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }
}

/// [`GPUS_ATTR`] of a structured-attrs object (`__json`), reading only that key.
fn gpus_in_attrs(json: &[u8]) -> Option<String> {
    let attrs: GpusAttrs = serde_json::from_slice(json).ok()?;
    attrs.gpus.map(|v| v.0)
}

/// [`GPUS_ATTR`] of a derivation given as JSON (`NIX_DERIVATION_V4`): from `structuredAttrs`,
/// `env.__json` or `env`, found as [`features_from_json`] finds the features.
pub fn gpus_attr_from_json(json: &[u8]) -> Option<String> {
    JsonDerivation::parse(json).ok()?.gpus_attr()
}

/// What the hook reads of a derivation given as JSON, and nothing more: typed readers keep the
/// features, the GPU count and `env.__json`, and skip every other value unbuilt (serde's
/// `IgnoredAny`), so memory stays near the JSON's size and time linear in it.
#[derive(Debug, Default)]
pub struct JsonDerivation {
    env: Option<JsonEnv>,
    /// `Some(None)`: `"structuredAttrs": null`, which means none.
    structured_attrs: Option<Option<StructuredAttrs>>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct JsonEnv {
    #[serde(rename = "__json", default)]
    json: Option<Lenient>,
    #[serde(rename = "requiredSystemFeatures", default)]
    features: Option<Lenient>,
    #[serde(rename = "cudaSandboxGpus", default, deserialize_with = "present")]
    gpus: Option<AttrText>,
}

#[derive(Debug, serde::Deserialize)]
struct StructuredAttrs {
    // Absent means none; anything but a list of strings is an error, as in Nix.
    #[serde(
        rename = "requiredSystemFeatures",
        default,
        deserialize_with = "present_list"
    )]
    features: Option<Vec<String>>,
    #[serde(rename = "cudaSandboxGpus", default, deserialize_with = "present")]
    gpus: Option<AttrText>,
}

/// A JSON value read as a string when it is one; any other value is skipped, not built.
#[derive(Debug)]
enum Lenient {
    Str(String),
    Other,
}

impl<'de> serde::Deserialize<'de> for Lenient {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match AttrText::deserialize(d)? {
            AttrText(s, true) => Ok(Lenient::Str(s)),
            _ => Ok(Lenient::Other),
        }
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

/// A present member is read as itself, `null` included (absent is `None` by `default`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<AttrText>, D::Error> {
    AttrText::deserialize(d).map(Some)
}

/// A present list of strings, read as itself (`null` is an error: absent is `None`).
fn present_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    Vec::<String>::deserialize(d).map(Some)
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
/// members read as a [`Candidate`] in case the object is a wrapper around the derivation.
struct ReadObject {
    derivation: JsonDerivation,
    /// Whether `env` or `structuredAttrs` was a member: then this object is the derivation.
    is_derivation: bool,
    members: usize,
    /// The single member, if there was exactly one, or the `derivation` member.
    inner: Option<Candidate>,
    wrapped: Option<Candidate>,
}

fn read_derivation_object<'de, A: serde::de::MapAccess<'de>>(
    mut map: A,
) -> Result<ReadObject, A::Error> {
    let mut read = ReadObject {
        derivation: JsonDerivation::default(),
        is_derivation: false,
        members: 0,
        inner: None,
        wrapped: None,
    };
    while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
        read.members += 1;
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
            _ if read.members == 1 => read.inner = Some(map.next_value()?),
            _ => {
                read.inner = None;
                map.next_value::<serde::de::IgnoredAny>()?;
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
        let bad = |message: String| DrvError { offset: 0, message };
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
        let chosen = match (read.members, read.inner, read.wrapped) {
            (1, Some(inner), _) => inner,
            (_, _, Some(wrapped)) => wrapped,
            _ => return Err(bad("derivation JSON holds no single derivation".into())),
        };
        match chosen {
            Candidate::Derivation(d) => Ok(d),
            Candidate::NotAnObject => Err(bad("derivation JSON holds no derivation object".into())),
        }
    }

    /// The derivation's required features (as [`features_from_json`]).
    pub fn required_features(&self) -> Result<RequiredFeatures<'static>, DrvError> {
        let bad = |message: &str| DrvError {
            offset: 0,
            message: message.to_owned(),
        };
        if let Some(Some(attrs)) = &self.structured_attrs {
            return Ok(RequiredFeatures {
                features: attrs
                    .features
                    .iter()
                    .flatten()
                    .map(|s| Cow::Owned(s.as_bytes().to_vec()))
                    .collect(),
                structured: true,
            });
        }
        let env = self.env.as_ref();
        if let Some(Lenient::Str(json)) = env.and_then(|e| e.json.as_ref()) {
            return Ok(RequiredFeatures {
                features: structured_features(json.as_bytes())?,
                structured: true,
            });
        }
        let features = match env.and_then(|e| e.features.as_ref()) {
            None => Vec::new(),
            Some(Lenient::Str(s)) => s
                .split([' ', '\t', '\n', '\r'])
                .filter(|t| !t.is_empty())
                .map(|t| Cow::Owned(t.as_bytes().to_vec()))
                .collect(),
            Some(Lenient::Other) => return Err(bad("env.requiredSystemFeatures is not a string")),
        };
        Ok(RequiredFeatures {
            features,
            structured: false,
        })
    }

    /// The derivation's [`GPUS_ATTR`] (as [`gpus_attr_from_json`]).
    pub fn gpus_attr(&self) -> Option<String> {
        if let Some(Some(attrs)) = &self.structured_attrs {
            return attrs.gpus.as_ref().map(|v| v.0.clone());
        }
        let env = self.env.as_ref()?;
        if let Some(Lenient::Str(json)) = &env.json {
            return gpus_in_attrs(json.as_bytes());
        }
        env.gpus.as_ref().map(|v| v.0.clone())
    }
}

/// The structured attributes the hook reads; every other key is skipped unread (serde's
/// `IgnoredAny`), so a huge `__json` is never built in memory.
#[derive(serde::Deserialize)]
struct FeatureAttrs {
    // Absent means none; `null` (like any other non-list) is an error, as in Nix.
    #[serde(rename = "requiredSystemFeatures", default)]
    required_system_features: Vec<String>,
}

#[derive(serde::Deserialize)]
struct GpusAttrs {
    // A repeated key is an error, as for requiredSystemFeatures.
    #[serde(rename = "cudaSandboxGpus", default, deserialize_with = "present")]
    gpus: Option<AttrText>,
}

fn structured_features(json: &[u8]) -> Result<Vec<DrvStr<'static>>, DrvError> {
    structured_features_from(serde_json::from_slice(json))
}

fn structured_features_from(
    parsed: Result<FeatureAttrs, serde_json::Error>,
) -> Result<Vec<DrvStr<'static>>, DrvError> {
    let attrs = parsed.map_err(|e| DrvError {
        offset: 0,
        message: format!("structured attrs (__json) are not valid: {e}"),
    })?;
    Ok(attrs
        .required_system_features
        .into_iter()
        .map(|s| Cow::Owned(s.into_bytes()))
        .collect())
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

    /// Whether the string, unescaped, is `name`: compared in place, never copied (a key may be
    /// huge and full of escapes).
    fn is(&self, name: &[u8]) -> bool {
        if !self.escaped {
            return self.raw == name;
        }
        // Each escape is two bytes for one: longer than twice `name`, it cannot be `name`.
        if self.raw.len() > 2 * name.len() + 1 {
            return false;
        }
        self.unescape().as_ref() == name
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
/// [`Derivation::parse`] checks it, but no string is copied; only the few values the hook
/// needs are ever unescaped, and `__json` is parsed straight from the file's bytes. So the
/// memory the hook needs stays near the file's size whatever the derivation holds.
#[derive(Debug, Clone)]
pub struct DrvEnv<'a> {
    env: Vec<(RawStr<'a>, RawStr<'a>)>,
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

    fn get(&self, name: &[u8]) -> Option<RawStr<'a>> {
        self.env.iter().find(|(k, _)| k.is(name)).map(|(_, v)| *v)
    }

    /// As [`Derivation::required_features`].
    pub fn required_features(&self) -> Result<RequiredFeatures<'a>, DrvError> {
        if let Some(json) = self.get(ENV_STRUCTURED) {
            return structured_features_from(serde_json::from_reader(json.reader())).map(
                |features| RequiredFeatures {
                    features,
                    structured: true,
                },
            );
        }
        let features = match self.get(ENV_FEATURES).map(|v| v.unescape()) {
            Some(value) => value
                .split(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
                .filter(|token| !token.is_empty())
                .map(|t| Cow::Owned(t.to_vec()))
                .collect(),
            None => Vec::new(),
        };
        Ok(RequiredFeatures {
            features,
            structured: false,
        })
    }

    /// As [`Derivation::gpus_attr`].
    pub fn gpus_attr(&self) -> Option<String> {
        if let Some(json) = self.get(ENV_STRUCTURED) {
            let attrs: GpusAttrs = serde_json::from_reader(json.reader()).ok()?;
            return attrs.gpus.map(|v| v.0);
        }
        self.get(GPUS_ATTR.as_bytes())
            .map(|v| String::from_utf8_lossy(&v.unescape()).into_owned())
    }
}

struct Parser<'a> {
    input: &'a [u8],
    pos: usize,
}

impl<'a> Parser<'a> {
    fn error(&self, message: impl Into<String>) -> DrvError {
        DrvError {
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
    fn env_only(&mut self) -> Result<Vec<(RawStr<'a>, RawStr<'a>)>, DrvError> {
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
        let env = self.list(|p| {
            p.expect(b"(")?;
            let key = p.raw_string()?;
            p.expect(b",")?;
            let value = p.raw_string()?;
            p.expect(b")")?;
            Ok((key, value))
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
            let next = crate::bytes::find2(b'"', b'\\', &self.input[at..]).ok_or(DrvError {
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
                return Err(DrvError {
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
        let unterminated = |offset| DrvError {
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
            .message
            .contains("single"));
        assert!(features_from_json(br#"{"/nix/store/a.drv":3}"#)
            .unwrap_err()
            .message
            .contains("no derivation object"));
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
            let err = Derivation::parse(&SIMPLE[..end]).unwrap_err();
            assert!(
                err.offset <= end,
                "offset {} beyond input {end}",
                err.offset
            );
        }
    }

    #[test]
    fn errors_carry_the_offset() {
        let err = Derivation::parse(br#"Derive([],[],[] "s","b",[],[])"#).unwrap_err();
        assert_eq!(err.offset, 15);
        assert!(err.to_string().contains("byte 15"), "{err}");
        let err = Derivation::parse(b"DrvWithVersion(\"xp-dyn-drv\",[])").unwrap_err();
        assert!(err.message.contains("newer Nix"));
        let err = Derivation::parse(br#"Derive([],[],[],"s","b",[],[])x"#).unwrap_err();
        assert!(err.message.contains("after the end"));
    }

    #[test]
    fn the_hooks_lean_reader_agrees_with_the_full_parser() {
        let samples: [&[u8]; 4] = [
            br#"Derive([("out","/nix/store/a-x","","")],[("/nix/store/b.drv",["out"])],["/nix/store/c"],"x86_64-linux","/bin/sh",["-e","a\"b"],[("cudaSandboxGpus","2"),("out","/nix/store/a-x"),("requiredSystemFeatures","big-parallel\tcuda")])"#,
            br#"Derive([("out","/nix/store/a-x","","")],[],[],"x86_64-linux","/bin/sh",[],[("__json","{\"big\":\"a\\nb\\\"c\",\"cudaSandboxGpus\":3,\"requiredSystemFeatures\":[\"cuda\",\"kvm\"]}"),("out","/nix/store/a-x")])"#,
            br#"Derive([],[],[],"","",[],[("__json","{\"requiredSystemFeatures\":null}")])"#,
            br#"Derive([],[],[],"","",[],[("re\quiredSystemFeatures","x\ny")])"#,
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
                    (Ok(d), Ok(e)) => {
                        let a = d.required_features().map(|f| f.features);
                        let b = e.required_features().map(|f| f.features);
                        assert_eq!(a.is_ok(), b.is_ok(), "{}", String::from_utf8_lossy(&input));
                        if let (Ok(a), Ok(b)) = (a, b) {
                            assert_eq!(a, b, "{}", String::from_utf8_lossy(&input));
                        }
                        assert_eq!(d.gpus_attr(), e.gpus_attr());
                    }
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
