//! Terminal-safe text: control characters in registry-controlled strings (buildpack ids,
//! descriptions, versions, error details) escaped before they reach text output or text logs.

use std::borrow::Cow;

/// Characters that can forge lines, move the cursor, recolour a terminal or reorder what is shown:
/// C0 and C1 controls, DEL, and the Unicode bidirectional overrides.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Writes one unsafe character as its escape: `\n`, `\r`, `\t`, `\x1b`, `\u{202e}`.
pub fn write_escaped(out: &mut impl std::fmt::Write, c: char) -> std::fmt::Result {
    match c {
        '\n' => out.write_str("\\n"),
        '\r' => out.write_str("\\r"),
        '\t' => out.write_str("\\t"),
        c if (c as u32) < 0x100 => write!(out, "\\x{:02x}", c as u32),
        c => write!(out, "\\u{{{:x}}}", c as u32),
    }
}

fn escape_where(text: &str, unsafe_char: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            let _ = write_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// One value on one line: every unsafe character escaped (`\n`, `\x1b`, `\u{202e}`).
pub fn escape(text: &str) -> Cow<'_, str> {
    escape_where(text, is_unsafe)
}

/// A message of several lines we wrote ourselves (config diagnostics): newlines stay, every other
/// unsafe character is escaped.
pub fn escape_keep_newlines(text: &str) -> Cow<'_, str> {
    escape_where(text, |c| c != '\n' && is_unsafe(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_plain_text_borrowed() {
        assert!(matches!(escape("heroku/nodejs 3.2.1 → 3.3.0"), Cow::Borrowed(_)));
        assert_eq!(escape("a\u{1b}[31mred\nFORGED\r\t\u{7f}\u{85}"), "a\\x1b[31mred\\nFORGED\\r\\t\\x7f\\x85");
        assert_eq!(escape("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(escape_keep_newlines("one\ntwo\u{1b}"), "one\ntwo\\x1b");
    }
}
