//! The `.drv` file: its grammar, once ([`Parser::derivation`]), handing each part over as
//! written ([`Part`], [`RawStr`]: no string copied), and the hook's reader of it ([`DrvEnv`]),
//! which keeps only the [`DecidingKey`]s of the env.

use super::attrs::{attrs_of_env, Deciding, EnvValue, StructuredAttrs};
use super::{DecidingKey, DrvAttrs, DrvError, DrvStr};
use std::borrow::Cow;

/// The environment of a derivation, read for the hook: the whole `.drv` is checked by the
/// grammar every reader shares, but no string is copied and only the [`DecidingKey`]s are kept;
/// only their values are ever unescaped, and `__json` is parsed straight from the file's
/// bytes. So the memory the hook needs stays near the file's size whatever the derivation holds.
#[derive(Debug, Clone)]
pub struct DrvEnv<'a> {
    env: Deciding<RawStr<'a>>,
    /// The name of the first output with a hash (fixed-output or impure).
    hashed_output: Option<RawStr<'a>>,
}

impl<'a> DrvEnv<'a> {
    /// Parses a whole `.drv` file (the grammar and errors of the oracle's `Derivation::parse`).
    pub fn parse(input: &'a [u8]) -> Result<Self, DrvError> {
        let mut env = Deciding::default();
        let mut hashed_output = None;
        Parser::whole(input, |part| match part {
            Part::Env(key, value) => {
                if let Some(key) = key.deciding() {
                    env.set(key, value);
                }
            }
            Part::Output([name, _, _, hash]) if !hash.raw.is_empty() => {
                hashed_output.get_or_insert(name);
            }
            _ => {}
        })?;
        Ok(DrvEnv { env, hashed_output })
    }

    /// What the hook decides on (as the oracle's `Derivation::attrs`).
    pub fn attrs(&self) -> Result<DrvAttrs<'a>, DrvError> {
        let name = self.hashed_output.map(|n| n.text());
        Ok(attrs_of_env(&self.env)?.with_hashed_output(name))
    }
}

impl<'a> EnvValue<'a> for RawStr<'a> {
    fn structured_attrs(&self) -> Result<StructuredAttrs, DrvError> {
        // Unescaped while read, so that a huge value is never copied whole. `serde_json` reads
        // a byte at a time: the buffer turns that into one [`Read::read`](std::io::Read::read)
        // of [`Unescape`] per 64 KiB.
        let reader = std::io::BufReader::with_capacity(64 << 10, Unescape { rest: self.raw });
        StructuredAttrs::parsed(serde_json::from_reader(reader))
    }
    fn string(&self) -> Option<DrvStr<'a>> {
        Some(self.unescape())
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.unescape()).into_owned()
    }
}

/// A string of the derivation as written, escapes and all: read without copying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct RawStr<'a> {
    raw: &'a [u8],
    escaped: bool,
}

impl<'a> RawStr<'a> {
    /// The string's bytes, unescaped (a copy only when it holds an escape).
    pub(super) fn unescape(&self) -> DrvStr<'a> {
        if !self.escaped {
            return Cow::Borrowed(self.raw);
        }
        let mut out = Vec::with_capacity(self.raw.len());
        let mut rest = self.raw;
        // Copy each run up to the next backslash, then the byte it stands for.
        while let Some(at) = crate::bytes::find(b'\\', rest) {
            out.extend_from_slice(&rest[..at]);
            let Some(&escaped) = rest.get(at + 1) else {
                break;
            };
            out.push(unescaped(escaped));
            rest = &rest[at + 2..];
        }
        out.extend_from_slice(rest);
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
}

/// The byte that `\` then `escaped` stands for, as Nix reads it.
fn unescaped(escaped: u8) -> u8 {
    match escaped {
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        other => other,
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
                buf[n] = unescaped(e);
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

/// A part of a derivation, as [`Parser::derivation`] reads it, in file order. The hook reads
/// the outputs and the env; the oracle (`tests/oracle.rs`) reads every part.
#[cfg_attr(not(any(test, feature = "oracle")), allow(dead_code))]
pub(super) enum Part<'a> {
    /// An output: name, path, hash algorithm, hash.
    Output([RawStr<'a>; 4]),
    /// An input derivation's path; its output names follow.
    InputDrv(RawStr<'a>),
    /// An output name of the last input derivation.
    InputDrvOutput(RawStr<'a>),
    /// An input source.
    InputSrc(RawStr<'a>),
    /// The platform.
    System(RawStr<'a>),
    /// The builder.
    Builder(RawStr<'a>),
    /// An argument of the builder.
    Arg(RawStr<'a>),
    /// An env entry: key, value.
    Env(RawStr<'a>, RawStr<'a>),
}

/// The ATerm grammar of a `.drv`, over bytes.
pub(super) struct Parser<'a> {
    input: &'a [u8],
    pos: usize,
}

impl<'a> Parser<'a> {
    /// Reads `input` as a derivation, handing each part to `sink`. Bytes after the closing
    /// parenthesis are ignored, as Nix ignores them (its `parseDerivation` stops there).
    pub(super) fn whole(input: &'a [u8], sink: impl FnMut(Part<'a>)) -> Result<(), DrvError> {
        Parser { input, pos: 0 }.derivation(sink)
    }

    fn error(&self, message: impl Into<String>) -> DrvError {
        DrvError::Malformed(self.pos, message.into())
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

    /// `Derive([outputs],[inputDrvs],[inputSrcs],"system","builder",[args],[env])`, or
    /// `DrvWithVersion("xp-dyn-drv",[outputs],…)`, whose input derivations may name outputs of
    /// outputs ([`Parser::input_drv_outputs`]). As Nix 2.26 and 2.34 read it (`parseDerivation`
    /// in `src/libstore/derivations.cc`; 2.8 knows only `Derive`); no other version exists.
    fn derivation(&mut self, mut sink: impl FnMut(Part<'a>)) -> Result<(), DrvError> {
        let dynamic = self.input.starts_with(b"DrvWithVersion(");
        if dynamic {
            self.pos = b"DrvWithVersion(".len();
            let at = self.pos;
            let version = self.string()?;
            if version.unescape().as_ref() != b"xp-dyn-drv" {
                self.pos = at;
                return Err(self.error(format!(
                    "unknown derivation ATerm format version \"{}\" (Nix knows only \"xp-dyn-drv\")",
                    String::from_utf8_lossy(&version.unescape())
                )));
            }
            self.expect(b",")?;
        } else {
            self.expect(b"Derive(")?;
        }
        self.list(|p| {
            p.expect(b"(")?;
            let name = p.string()?;
            p.expect(b",")?;
            let path = p.string()?;
            p.expect(b",")?;
            let hash_algo = p.string()?;
            p.expect(b",")?;
            let hash = p.string()?;
            p.expect(b")")?;
            sink(Part::Output([name, path, hash_algo, hash]));
            Ok(())
        })?;
        self.expect(b",")?;
        self.list(|p| {
            p.expect(b"(")?;
            sink(Part::InputDrv(p.string()?));
            p.expect(b",")?;
            p.input_drv_outputs(dynamic, |s| sink(Part::InputDrvOutput(s)))?;
            p.expect(b")")
        })?;
        self.expect(b",")?;
        self.list(|p| {
            sink(Part::InputSrc(p.string()?));
            Ok(())
        })?;
        self.expect(b",")?;
        sink(Part::System(self.string()?));
        self.expect(b",")?;
        sink(Part::Builder(self.string()?));
        self.expect(b",")?;
        self.list(|p| {
            sink(Part::Arg(p.string()?));
            Ok(())
        })?;
        self.expect(b",")?;
        self.list(|p| {
            p.expect(b"(")?;
            let key = p.string()?;
            p.expect(b",")?;
            let value = p.string()?;
            p.expect(b")")?;
            sink(Part::Env(key, value));
            Ok(())
        })?;
        self.expect(b")")
    }

    /// A quoted string as written: checked, never copied.
    fn string(&mut self) -> Result<RawStr<'a>, DrvError> {
        let start = self.pos;
        self.expect(b"\"")?;
        let body = self.pos;
        let mut at = body;
        let mut escaped = false;
        let unterminated = || DrvError::Malformed(start, "unterminated string".to_string());
        loop {
            let next =
                crate::bytes::find2(b'"', b'\\', &self.input[at..]).ok_or_else(unterminated)? + at;
            if self.input[next] == b'"' {
                self.pos = next + 1;
                return Ok(RawStr {
                    raw: &self.input[body..next],
                    escaped,
                });
            }
            if next + 1 >= self.input.len() {
                return Err(unterminated());
            }
            escaped = true;
            at = next + 2;
        }
    }

    /// A list as Nix's `endOfList` reads it: `[` (`,`? item)* `]`. A comma before an item is
    /// optional, and so one may lead (`[,"a"]`) or be left out (`["a""b"]`), but never trail
    /// (`["a",]`) or repeat; the same in Nix 2.8, 2.26 and 2.34. Every item consumes a byte or
    /// fails, so a list is read in linear time.
    fn list(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<(), DrvError>,
    ) -> Result<(), DrvError> {
        self.expect(b"[")?;
        while !self.end_of_list() {
            item(self)?;
        }
        Ok(())
    }

    /// Nix's `endOfList`: `]` ends the list (consumed); a `,` is consumed and an item follows;
    /// anything else is an item.
    fn end_of_list(&mut self) -> bool {
        match self.peek() {
            Some(b']') => {
                self.pos += 1;
                true
            }
            Some(b',') => {
                self.pos += 1;
                false
            }
            _ => false,
        }
    }

    /// The outputs used of an input derivation: a list of names, `output` called on each. In a
    /// `DrvWithVersion` derivation also `([names],[("name",outputs),…])`, whose entries name
    /// outputs of the outputs (dynamic derivations), nested to any depth as Nix's
    /// `parseDerivedPathMapNode` reads them: checked, not handed over (only the top names
    /// are), and read with a count of the open nodes instead of recursion, so no depth can
    /// exhaust the stack.
    fn input_drv_outputs(
        &mut self,
        dynamic: bool,
        mut output: impl FnMut(RawStr<'a>),
    ) -> Result<(), DrvError> {
        // The nodes `(` [names] `,[` … opened and not yet closed.
        let mut open = 0usize;
        loop {
            // A node starts here.
            let nested = match self.peek() {
                Some(b'(') if dynamic => true,
                Some(b'[') => false,
                _ if dynamic => {
                    return Err(self.error(format!(
                        "expected '[' or '(' for an input derivation's outputs, found {}",
                        self.describe_here()
                    )))
                }
                _ => false,
            };
            if nested {
                self.pos += 1;
            }
            self.list(|p| {
                let name = p.string()?;
                if open == 0 {
                    output(name);
                }
                Ok(())
            })?;
            if nested {
                self.expect(b",[")?;
                open += 1;
            } else if open == 0 {
                return Ok(());
            } else {
                // The end of a `("name",node)` entry.
                self.expect(b")")?;
            }
            // In the entries of the innermost open node: the next entry, or its end.
            loop {
                if !self.end_of_list() {
                    self.expect(b"(")?;
                    self.string()?;
                    self.expect(b",")?;
                    break;
                }
                self.expect(b")")?;
                open -= 1;
                if open == 0 {
                    return Ok(());
                }
                self.expect(b")")?;
            }
        }
    }
}
