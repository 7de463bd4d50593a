//! Terminal-safe text: control characters in registry-controlled strings (buildpack ids,
//! descriptions, versions, error details) escaped before they reach text output or text logs.

use std::borrow::Cow;

/// `1 attempt`, `2 attempts`: a count with its noun, plural but for one.
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// A reference or digest for people: `repo@sha256:` and 12 hex digits, then `…`
/// (`registry.example/run@sha256:3681a3c4e5f6…`); anything else as it is. JSON keeps the whole.
pub fn short_reference(reference: &str) -> Cow<'_, str> {
    const KEPT: usize = 12;
    let Some(at) = reference.find("sha256:") else { return Cow::Borrowed(reference) };
    let hex = &reference[at + "sha256:".len()..];
    if hex.len() <= KEPT + 1 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Cow::Borrowed(reference);
    }
    Cow::Owned(format!("{}…", &reference[..at + "sha256:".len() + KEPT]))
}

/// The longest line a human view prints (`status`, `plan`, `rollback`, `check`, the tour): longer
/// text goes on lines of its own, digests shortened, and is clipped; `--json` keeps the whole.
pub const LINE: usize = 160;

/// Free text with every full `sha256:` digest in it shortened to 12 hex digits and `…`
/// (`rebased onto run@sha256:3681a3c4e5f6…: sha256:aaaaaaaaaaaa… → sha256:bbbbbbbbbbbb…`).
pub fn short_digests(text: &str) -> Cow<'_, str> {
    const HEX: usize = 64;
    if !text.contains("sha256:") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("sha256:") {
        let start = at + "sha256:".len();
        let hex = rest[start..].bytes().take_while(u8::is_ascii_hexdigit).count();
        if hex == HEX {
            out.push_str(&rest[..start + 12]);
            out.push('…');
        } else {
            out.push_str(&rest[..start + hex]);
        }
        rest = &rest[start + hex..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Registry-controlled text for one line of a human view: escaped, digests shortened, and clipped
/// at word ends to at most `max` characters, ` …` included.
pub fn fit(text: &str, max: usize) -> String {
    clip(&short_digests(&escape(text)), max.saturating_sub(2)).into_owned()
}

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

/// At most `max` characters of `text`, cut at a word boundary and marked with ` …`, so a log line
/// or summary never ends inside a word. A word is cut (marked `…`) only when it is overlong: when
/// it alone runs past half of `max` (a URL, a digest, text without spaces).
pub fn clip(text: &str, max: usize) -> Cow<'_, str> {
    let Some((end, next)) = text.char_indices().nth(max) else { return Cow::Borrowed(text) };
    let head = &text[..end];
    let kept = if next.is_whitespace() {
        Some(head.trim_end())
    } else {
        head.rfind(char::is_whitespace).map(|i| head[..i].trim_end())
    };
    match kept {
        Some(kept) if !kept.is_empty() && kept.chars().count() >= max / 2 => Cow::Owned(format!("{kept} …")),
        _ => Cow::Owned(format!("{head}…")),
    }
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

    #[test]
    fn references_show_twelve_hex_digits() {
        let full = format!("r.example/cnb/run@sha256:{}", "3681a3c4e5f6".repeat(5) + "abcd");
        assert_eq!(short_reference(&full), "r.example/cnb/run@sha256:3681a3c4e5f6…");
        assert_eq!(short_reference(&full[18..]), "sha256:3681a3c4e5f6…");
        for kept in ["r.example/cnb/run:latest", "run@sha256:aaa", "sha256:not-hex-at-all-but-long-enough"] {
            assert_eq!(short_reference(kept), kept);
        }
    }

    #[test]
    fn digests_in_text_are_shortened_and_lines_fit() {
        let (a, b) = ("a".repeat(64), "0123456789ab".repeat(5) + "cdef");
        let detail = format!("rebased in the registry onto r.example/run@sha256:{b}: sha256:{a} → sha256:{b}");
        assert_eq!(
            short_digests(&detail),
            "rebased in the registry onto r.example/run@sha256:0123456789ab…: sha256:aaaaaaaaaaaa… → sha256:0123456789ab…"
        );
        // A prefix already short, or not hex, is left as it is.
        for kept in ["sha256:0123456789ab", "sha256:xyz", "no digest here", "sha256:"] {
            assert_eq!(short_digests(kept), kept);
        }
        let long = format!("{detail}; {}", "connection refused by the peer ".repeat(10));
        let line = fit(&format!("{long}\u{1b}"), LINE);
        assert!(line.chars().count() <= LINE && line.ends_with(" …") && !line.contains('\u{1b}'), "{line}");
    }

    #[test]
    fn counts_are_plural_but_for_one() {
        assert_eq!(count(0u32, "attempt"), "0 attempts");
        assert_eq!(count(1u32, "attempt"), "1 attempt");
        assert_eq!(count(2u64, "attempt"), "2 attempts");
    }

    #[test]
    fn clip_cuts_after_a_whole_word() {
        assert!(matches!(clip("short text", 160), Cow::Borrowed("short text")));
        let error = "GET /v2/demo/b/manifests/latest: error sending request: connection refused by the peer";
        let cut = clip(error, 60);
        assert_eq!(cut, "GET /v2/demo/b/manifests/latest: error sending request: …");
        // Every word kept is whole: the text before the mark is a prefix ending at a word's end.
        let kept = cut.strip_suffix(" …").unwrap();
        assert!(error.starts_with(kept) && error[kept.len()..].starts_with(' '), "{cut}");
        assert!(kept.chars().count() <= 60);
        // The limit falling right after a word keeps that word.
        assert_eq!(clip("alpha beta gamma", 10), "alpha beta …");
        assert_eq!(clip("alpha beta gamma", 11), "alpha beta …");
        // Never inside a word, at any limit of at least twice its longest word (11).
        let words = "the registry answered HTTP 503 Service Unavailable for every request";
        for max in 22..words.len() {
            let cut = clip(words, max);
            let kept = cut.strip_suffix(" …").unwrap_or(&cut);
            assert!(kept.chars().count() <= max, "{max}: {cut}");
            if kept.len() < words.len() {
                assert!(cut.ends_with(" …") && words[kept.len()..].starts_with(' '), "{max}: {cut}");
            }
        }
    }

    #[test]
    fn clip_cuts_an_overlong_word_with_the_mark() {
        let word = "x".repeat(300);
        assert_eq!(clip(&word, 100), format!("{}…", "x".repeat(100)));
        // A word running past half the limit is cut rather than dropped whole.
        let text = format!("error: {}", "y".repeat(300));
        let cut = clip(&text, 100);
        assert!(cut.starts_with("error: yyy") && cut.ends_with("y…") && cut.chars().count() == 101, "{cut}");
    }

    #[test]
    fn clip_never_splits_a_character() {
        let text = "Größe überschritten: 名前空間の容量が不足しています 🚫🚫🚫 ".repeat(10);
        for max in 0..text.chars().count() + 2 {
            let cut = clip(&text, max);
            assert!(cut.chars().count() <= max + 2, "{max}: {cut}");
        }
        assert_eq!(clip("🚫🚫🚫", 2), "🚫🚫…");
        assert_eq!(clip("", 0), "");
    }
}
