//! Splits a config's text at its top-level table headers, so that a fleet's 10,000 `[[builders]]`
//! tables are parsed one at a time instead of as one document tree (~28 bytes of tree per byte).
//!
//! Soundness: a line that looks like a header but sits inside a multi-line string or array ends
//! the piece before it in the middle of that string or array, so that piece fails to parse and the
//! caller falls back to the whole document. Pieces that all parse are therefore exactly the
//! document's own tables, each holding the keys of one top-level name (checked by the caller).

use std::ops::Range;

/// The arrays of tables parsed element by element.
pub(super) const ELEMENT_ARRAYS: [&str; 2] = ["builders", "images"];

/// A stretch of the text holding the tables of one top-level name.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Piece {
    pub range: Range<usize>,
    /// `Some(name)`: one element of the `[[name]]` array, name one of [`ELEMENT_ARRAYS`].
    pub element_of: Option<&'static str>,
}

/// Cuts `text` before every `[[builders]]` / `[[images]]` header line and before every header
/// line whose first key differs from the previous header's; the first piece holds what precedes
/// the first header. Header lines with a quoted first key never cut (they stay in the piece
/// before them, whose parse then shows any mix of names).
pub(super) fn split(text: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut current: Option<&str> = None;
    let mut element_of = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if let Some((double, first)) = header(line) {
            let element = if double { ELEMENT_ARRAYS.iter().copied().find(|a| *a == first) } else { None };
            if element.is_some() || current != Some(first) {
                if offset > start || pieces.is_empty() {
                    pieces.push(Piece { range: start..offset, element_of });
                }
                start = offset;
                current = Some(first);
                element_of = element;
            }
        }
        offset += line.len();
    }
    pieces.push(Piece { range: start..text.len(), element_of });
    pieces
}

/// Whether a line is a table header (`[a.b]` or `[[a]]`, blanks and a comment allowed around), and
/// its first key when that key is bare.
fn header(line: &str) -> Option<(bool, &str)> {
    let line = line.trim_start_matches([' ', '\t']);
    let rest = line.strip_prefix('[')?;
    let (double, rest) = match rest.strip_prefix('[') {
        Some(rest) => (true, rest),
        None => (false, rest),
    };
    let rest = rest.trim_start_matches([' ', '\t']);
    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-')).unwrap_or(rest.len());
    let (first, after) = rest.split_at(end);
    if first.is_empty() {
        return None;
    }
    let close = if double { "]]" } else { "]" };
    let after = after.trim_start_matches([' ', '\t']);
    // `[a]`, `[a.b]` or `[a . "b"]`: the first key is `a` either way; anything else is no header we cut at.
    let valid =
        after.starts_with('.') || after.strip_prefix(close).is_some_and(|tail| is_blank_or_comment(tail, double));
    valid.then_some((double, first))
}

fn is_blank_or_comment(tail: &str, double: bool) -> bool {
    let tail = tail.trim_start_matches([' ', '\t']);
    // `[a]]` is not a header; a comment or the line's end is what may follow.
    (!double || !tail.starts_with(']')) && (tail.is_empty() || tail.starts_with('#') || tail.starts_with(['\r', '\n']))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(text: &str) -> Vec<(&str, Option<&str>)> {
        split(text).into_iter().map(|p| (&text[p.range], p.element_of)).collect()
    }

    #[test]
    fn each_builder_and_image_is_a_piece_and_other_sections_group_by_name() {
        let text = "[monitor]\na = 1\n[registries.\"x\"]\nb = 1\n[registries.\"y\"]\n\n[[builders]]\nname = \"a\"\n  [[builders]] # two\nname = \"b\"\n[builders.sub]\nc = 1\n[[images]]\nd = 1\n[server]\ne = 1\n";
        assert_eq!(
            cut(text),
            [
                ("", None),
                ("[monitor]\na = 1\n", None),
                ("[registries.\"x\"]\nb = 1\n[registries.\"y\"]\n\n", None),
                ("[[builders]]\nname = \"a\"\n", Some("builders")),
                ("  [[builders]] # two\nname = \"b\"\n[builders.sub]\nc = 1\n", Some("builders")),
                ("[[images]]\nd = 1\n", Some("images")),
                ("[server]\ne = 1\n", None),
            ]
        );
    }

    #[test]
    fn the_text_is_covered_exactly_once() {
        let text = "# top\nx = 1\n[[builders]]\nname = \"a\"\n[[alerts]]\n[[alerts]]\n[[builders]]";
        let pieces = split(text);
        let mut at = 0;
        for p in &pieces {
            assert_eq!(p.range.start, at);
            at = p.range.end;
        }
        assert_eq!(at, text.len());
        assert_eq!(cut(text)[0], ("# top\nx = 1\n", None));
        assert_eq!(cut(text)[2], ("[[alerts]]\n[[alerts]]\n", None), "other arrays stay whole");
        assert_eq!(cut(text)[3], ("[[builders]]", Some("builders")), "no newline at the end");
    }

    #[test]
    fn lines_that_are_not_headers_never_cut() {
        for line in
            ["[builders]] x\n", "a = [1]\n", "[ ]\n", "[\"builders\"]\n", "[[builders]] extra\n", "[[builders]]]\n"]
        {
            let text = format!("[[builders]]\nname = \"a\"\n{line}");
            assert_eq!(split(&text).len(), 2, "{line:?}");
        }
        assert_eq!(header("[[ builders ]]\r\n"), Some((true, "builders")));
        assert_eq!(header("[registries . \"x\"] # c\n"), Some((false, "registries")));
        assert_eq!(header("[[builders]]\n"), Some((true, "builders")));
    }

    #[test]
    fn a_header_inside_a_multiline_string_still_cuts_and_leaves_an_unterminated_piece() {
        let text = "[monitor]\nnote = '''\n[[builders]]\n'''\n";
        let pieces = cut(text);
        assert_eq!(pieces[1], ("[monitor]\nnote = '''\n", None));
        assert!(toml::de::DeTable::parse(pieces[1].0).is_err(), "the caller falls back on this");
    }
}
