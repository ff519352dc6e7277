//! JSON exactly as `serde_json::to_string_pretty` writes it (two-space indentation), with each
//! line break and its indentation written at once: serde_json's own pretty printer writes the
//! indentation two bytes per level, one write each, which was most of what rendering
//! cuFFT's listing (24,454 modules, 12 MB, seven levels deep) cost.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::Formatter;

/// `,\n` and the deepest indentation written at once; deeper levels add spaces in pieces.
const LINE: &[u8] = b",\n                                                                ";

/// serde_json's `PrettyFormatter` with an indentation of two spaces, the same bytes.
#[derive(Default)]
struct Pretty {
    level: usize,
    has_value: bool,
}

impl Pretty {
    /// A line break (after a comma when `comma`) and the indentation of the current level.
    fn line<W: ?Sized + Write>(&self, w: &mut W, comma: bool) -> io::Result<()> {
        let from = usize::from(!comma);
        let spaces = 2 * self.level;
        let room = LINE.len() - 2;
        w.write_all(&LINE[from..2 + spaces.min(room)])?;
        let mut left = spaces.saturating_sub(room);
        while left > 0 {
            let n = left.min(room);
            w.write_all(&LINE[2..2 + n])?;
            left -= n;
        }
        Ok(())
    }

    fn open<W: ?Sized + Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.level += 1;
        self.has_value = false;
        w.write_all(bracket)
    }

    fn close<W: ?Sized + Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.level -= 1;
        if self.has_value {
            self.line(w, false)?;
        }
        w.write_all(bracket)
    }
}

impl Formatter for Pretty {
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"[")
    }

    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"]")
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.line(w, !first)
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"{")
    }

    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"}")
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.line(w, !first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// Writes `value` to `writer` as `serde_json::to_writer_pretty` would.
pub fn to_writer_pretty<W: Write, T: ?Sized + Serialize>(writer: W, value: &T) -> io::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(writer, Pretty::default());
    value.serialize(&mut ser).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ours(value: &serde_json::Value) -> String {
        let mut out = Vec::new();
        to_writer_pretty(&mut out, value).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_bytes_are_serde_jsons_pretty_ones() {
        let mut deep = json!({"leaf": [1, {}, [], "a\"b\n"]});
        for i in 0..40 {
            deep = json!({ format!("k{i}"): [deep, {"x": null, "y": [true, false]}], "e": [] });
        }
        for value in [
            json!(null),
            json!([]),
            json!({}),
            json!([[], {}, [[]], {"a": {}}]),
            json!({"files": 1, "gpu_code": [{"modules": [{"entries": [{"kind": "sass"}]}]}]}),
            deep,
        ] {
            assert_eq!(ours(&value), serde_json::to_string_pretty(&value).unwrap());
        }
    }
}
