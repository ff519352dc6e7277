//! The guard a YAML spec passes before it is deserialised: its events, scanned once with
//! `yaml-rust2`'s streaming parser, hold no anchor and no alias, and are at most
//! [`MAX_EVENTS`].
//!
//! An alias replays the node its anchor names, so a small text can stand for a huge document
//! (one 100 KB list aliased 2,500 times is 60 million strings): `serde_norway`'s own limit
//! counts the aliases followed, not the events they replay. CDI specs never need anchors (the
//! tools that write them, `nvidia-ctk cdi generate` and NixOS's toolkit module, write none),
//! so the guard refuses them outright rather than bounding what they expand to. The cap
//! bounds what the deserialiser holds: it keeps every event of the document before it builds
//! the spec.

use yaml_rust2::parser::{Event, Parser};

/// The most YAML events a spec may have: far more than any spec needs (the `nvidia-ctk`-shaped
/// spec of a GPU host in `hook/tests/cdi/` has 187), and few enough for the deserialiser to
/// hold at once (`explain` on a spec just under the cap peaks at 20 MiB of RSS).
pub(crate) const MAX_EVENTS: usize = 65_536;

/// Why a YAML text is refused before it is deserialised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum YamlError {
    /// The text anchors a node (`&name`) or aliases one (`*name`): `an anchor` or `an alias`,
    /// its line and its column (from 1).
    #[error(
        "YAML {0} at line {1}, column {2}: anchors and aliases are not allowed in a CDI spec \
         (write the value out in full)"
    )]
    Anchor(&'static str, usize, usize),
    /// The text has more events than any spec.
    #[error("more than {MAX_EVENTS} YAML events: no CDI spec is this large")]
    TooManyEvents,
    /// The text is no YAML.
    #[error("{0}")]
    Syntax(String),
}

/// Scans `text`'s events, in time linear in its length and memory bounded by its longest
/// scalar: `Ok` when it holds no anchor or alias and at most [`MAX_EVENTS`] events.
pub(crate) fn check(text: &str) -> Result<(), YamlError> {
    let mut parser = Parser::new_from_str(text);
    for _ in 0..MAX_EVENTS {
        let (event, mark) = parser
            .next_token()
            .map_err(|e| YamlError::Syntax(e.to_string()))?;
        let what = match event {
            Event::StreamEnd => return Ok(()),
            Event::Alias(_) => "an alias",
            Event::Scalar(_, _, anchor, _)
            | Event::SequenceStart(anchor, _)
            | Event::MappingStart(anchor, _)
                if anchor > 0 =>
            {
                "an anchor"
            }
            _ => continue,
        };
        return Err(YamlError::Anchor(what, mark.line(), mark.col() + 1));
    }
    Err(YamlError::TooManyEvents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_and_aliases_anywhere_are_refused_with_their_place() {
        for (text, what, line) in [
            ("a: &x 1\nb: *x\n", "an anchor", 1),
            ("a: &x [1, 2]\n", "an anchor", 1),
            ("a: &x {b: 1}\n", "an anchor", 1),
            ("a:\n  - 1\n  - &x\n    b: 1\n", "an anchor", 4),
            ("a: !!str &x 1\n", "an anchor", 1),
            ("a: &x\nb: 1\n", "an anchor", 2),
            ("? &x k\n: v\n", "an anchor", 1),
            ("[&x a, b]\n", "an anchor", 1),
        ] {
            match check(text) {
                Err(YamlError::Anchor(w, l, _)) => {
                    assert_eq!((w, l), (what, line), "{text:?}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
        // An alias of an anchor never defined: the parser refuses it too.
        assert!(check("a: *x\n").is_err());
        let shown = check("x: 1\ny: &a 2\n").unwrap_err().to_string();
        assert!(
            shown.contains("line 2") && shown.contains("anchors and aliases are not allowed"),
            "{shown}"
        );
    }

    #[test]
    fn ampersands_and_asterisks_in_values_are_no_anchors() {
        for text in [
            "a: \"&x\"\nb: '*x'\n",
            "a: x&y\nb: x*y\n",
            "a: |\n  &x\n  *x\n",
            "env: [\"A=*\", B=&]\n",
            "# &x *x\na: 1\n",
        ] {
            check(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        }
    }

    #[test]
    fn the_events_are_capped() {
        // A list of `items` scalars is that many events and six more: the stream, the
        // document and the sequence each start and end.
        let list = |items: usize| format!("[{}x]\n", "x,".repeat(items - 1));
        check(&list(MAX_EVENTS - 6)).unwrap();
        assert_eq!(check(&list(MAX_EVENTS - 5)), Err(YamlError::TooManyEvents));
        assert!(check(&list(MAX_EVENTS - 5))
            .unwrap_err()
            .to_string()
            .contains("more than 65536 YAML events"));
    }
}
