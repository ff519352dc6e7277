//! Text from outside (a derivation, the host, a file's bytes) made safe to print on one line.

use std::borrow::Cow;

/// `text` with every control character (a newline, an escape sequence's ESC) and every
/// bidirectional-text control written as its Rust escape (`\n`, `\u{1b}`, `\u{202e}`), so
/// that text from a derivation or the host cannot break a line, forge one, or drive a terminal.
pub fn one_line(text: &str) -> Cow<'_, str> {
    let hostile =
        |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(hostile) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if hostile(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn hostile_text_stays_on_one_inert_line() {
        assert_eq!(super::one_line("plain, caf\u{e9}"), "plain, caf\u{e9}");
        assert_eq!(
            super::one_line("a\nverdict: x\u{1b}[2J\u{202e}\t"),
            "a\\nverdict: x\\u{1b}[2J\\u{202e}\\t"
        );
    }
}
