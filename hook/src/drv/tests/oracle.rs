//! The whole `.drv`, every field unescaped ([`Derivation`]): the oracle the differential tests
//! hold to `nix show-derivation`, and what benches and fuzzing compare the hook's reader
//! ([`super::DrvEnv`]) with. Read by the same grammar, and its attributes by the same reading;
//! the hook itself never builds one.

use super::aterm::{Parser, Part};
use super::attrs::{attrs_of_env, Deciding, EnvValue, StructuredAttrs};
use super::{DecidingKey, DrvAttrs, DrvError, DrvStr};
use std::borrow::Cow;

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

/// A parsed derivation. Field order follows the ATerm; every string borrows from the input
/// unless it held an escape.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
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

impl<'a> Derivation<'a> {
    /// Parses a `.drv` file as Nix does; bytes after the closing parenthesis are ignored, as
    /// Nix ignores them.
    pub fn parse(input: &'a [u8]) -> Result<Self, DrvError> {
        let mut drv = Derivation::default();
        Parser::whole(input, |part| match part {
            Part::Output([name, path, hash_algo, hash]) => drv.outputs.push(Output {
                name: name.unescape(),
                path: path.unescape(),
                hash_algo: hash_algo.unescape(),
                hash: hash.unescape(),
            }),
            Part::InputDrv(path) => drv.input_drvs.push(InputDrv {
                path: path.unescape(),
                outputs: Vec::new(),
            }),
            Part::InputDrvOutput(name) => {
                if let Some(input) = drv.input_drvs.last_mut() {
                    input.outputs.push(name.unescape());
                }
            }
            Part::InputSrc(path) => drv.input_srcs.push(path.unescape()),
            Part::System(system) => drv.system = system.unescape(),
            Part::Builder(builder) => drv.builder = builder.unescape(),
            Part::Arg(arg) => drv.args.push(arg.unescape()),
            Part::Env(key, value) => drv.env.push((key.unescape(), value.unescape())),
        })?;
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

    /// What the hook decides on, read as the hook reads it ([`super::DrvEnv::attrs`]): from
    /// the `__json` structured attributes when present, else from the env entries. Fails when a
    /// [`DecidingKey`] is repeated, when `__json` is not a JSON object, or when its
    /// `requiredSystemFeatures` is not a list of strings.
    pub fn attrs(&self) -> Result<DrvAttrs<'_>, DrvError> {
        let mut env = Deciding::default();
        for (key, value) in &self.env {
            if let Some(key) = DecidingKey::of(key) {
                env.set(key, value.as_ref());
            }
        }
        let hashed = self.outputs.iter().find(|o| !o.hash.is_empty());
        let name = hashed.map(|o| String::from_utf8_lossy(&o.name).into_owned());
        Ok(attrs_of_env(&env)?.with_hashed_output(name))
    }
}

impl<'a> EnvValue<'a> for &'a [u8] {
    fn structured_attrs(&self) -> Result<StructuredAttrs, DrvError> {
        StructuredAttrs::parsed(serde_json::from_slice(self))
    }
    fn string(&self) -> Option<DrvStr<'a>> {
        Some(Cow::Borrowed(self))
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(self).into_owned()
    }
}
