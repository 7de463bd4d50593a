//! Reads a config a top-level table at a time: splits the text at its table headers, so that a
//! fleet's 10,000 `[[builders]]` tables are parsed one by one, not as one tree (~28 bytes per byte).
//!
//! Soundness: a line that looks like a header but sits inside a multi-line string or array ends
//! the piece before it in the middle of that string or array, so that piece fails to parse and the
//! caller falls back to the whole document. Pieces that all parse are therefore exactly the
//! document's own tables, each holding the keys of one top-level name (checked by the caller).

use std::ops::Range;

use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::Validator;

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

/// A top-level value with the offset in the text its spans count from.
pub(super) type Located<'a> = (usize, Spanned<DeValue<'a>>);

/// A piece of the text turned out to hold more than one array element's tables: the config is
/// read again as one document.
pub(super) struct NotAlone;

/// The config's top-level values (with their pieces' offsets), and the `[[builders]]` and
/// `[[images]]` elements still to parse, a piece each.
#[derive(Default)]
pub(super) struct Sections<'a> {
    pub(super) values: Vec<(usize, Spanned<toml::de::DeString<'a>>, Spanned<DeValue<'a>>)>,
    pub(super) builder_pieces: Vec<Range<usize>>,
    pub(super) image_pieces: Vec<Range<usize>>,
}

impl<'a> Sections<'a> {
    pub(super) fn whole(root: DeTable<'a>) -> Self {
        Sections { values: root.into_iter().map(|(key, value)| (0, key, value)).collect(), ..Default::default() }
    }
}

/// The tables of an `[[section]]` array: one value (possibly absent), or pieces of the text.
pub(super) enum Elements<'a> {
    Value(Option<Located<'a>>),
    Pieces(Vec<Range<usize>>),
}

impl<'a> Validator<'a> {
    /// The top-level values of every piece but the array elements, which stay text until read.
    /// `None` when a piece does not parse or two pieces name the same section.
    pub(super) fn sections_in_pieces(&self) -> Option<Sections<'a>> {
        let mut sections = Sections::default();
        for piece in split(self.text) {
            if let Some(array) = piece.element_of {
                let pieces =
                    if array == "builders" { &mut sections.builder_pieces } else { &mut sections.image_pieces };
                pieces.push(piece.range);
                continue;
            }
            let root = DeTable::parse(&self.text[piece.range.clone()]).ok()?.into_inner();
            for (key, value) in root {
                if sections.values.iter().any(|(_, k, _)| k.get_ref() == key.get_ref()) {
                    return None;
                }
                sections.values.push((piece.range.start, key, value));
            }
        }
        let pieced = |name: &str| {
            !sections.builder_pieces.is_empty() && name == "builders"
                || !sections.image_pieces.is_empty() && name == "images"
        };
        if sections.values.iter().any(|(_, key, _)| pieced(key.get_ref())) {
            return None;
        }
        Some(sections)
    }

    /// Runs `f` on a top-level value with the offset its spans count from.
    pub(super) fn at<T>(
        &mut self,
        located: Option<Located<'a>>,
        f: impl FnOnce(&mut Self, Option<Spanned<DeValue<'a>>>) -> T,
    ) -> T {
        let (offset, value) = match located {
            Some((offset, value)) => (offset, Some(value)),
            None => (0, None),
        };
        self.offset = offset;
        let out = f(self, value);
        self.offset = 0;
        out
    }

    /// Calls `f` on each table of an `[[section]]` array, deserialized on its own (one bad entry
    /// does not hide the others' problems), with `offset` set for its spans; false when any table
    /// or call failed. Pieces are parsed one at a time and dropped before the next.
    pub(super) fn each_element<T: DeserializeOwned>(
        &mut self,
        elements: Elements<'a>,
        section: &str,
        mut f: impl FnMut(&mut Self, T) -> bool,
    ) -> Result<bool, NotAlone> {
        let mut ok = true;
        match elements {
            Elements::Value(located) => {
                let (offset, value) = match located {
                    Some(located) => located,
                    None => return Ok(true),
                };
                self.offset = offset;
                let span = value.span();
                match value.into_inner() {
                    DeValue::Array(array) => {
                        for value in array {
                            match self.entry::<T>(value) {
                                Some(t) => ok &= f(self, t),
                                None => ok = false,
                            }
                        }
                    }
                    _ => {
                        self.error(
                            span,
                            format!("`{section}` must be an array of tables: write each one as [[{section}]]"),
                        );
                        ok = false;
                    }
                }
            }
            Elements::Pieces(ranges) => {
                for range in ranges {
                    let text = &self.text[range.clone()];
                    let root = DeTable::parse(text).map_err(|_| NotAlone)?.into_inner();
                    let mut keys = root.into_iter();
                    let (Some((key, value)), None) = (keys.next(), keys.next()) else { return Err(NotAlone) };
                    let DeValue::Array(array) = value.into_inner() else { return Err(NotAlone) };
                    if key.get_ref() != section {
                        return Err(NotAlone);
                    }
                    self.offset = range.start;
                    for value in array {
                        match self.entry::<T>(value) {
                            Some(t) => ok &= f(self, t),
                            None => ok = false,
                        }
                    }
                }
            }
        }
        self.offset = 0;
        Ok(ok)
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::super::{Config, Secrets};
    use super::*;

    /// The config and the diagnostics of `text` read in pieces (`None`: the pieces fell back to the
    /// whole document) and read as one document.
    fn both_ways(text: &str) -> (Option<String>, String) {
        let path = Path::new("/etc/bm/config.toml");
        let validator = || Validator {
            text,
            offset: 0,
            base: PathBuf::from("/etc/bm"),
            state_dir: None,
            diagnostics: Vec::new(),
            pools: Vec::new(),
            secrets: Secrets::Resolve,
            signed_images: Vec::new(),
            resolved: Default::default(),
        };
        let outcome = |v: &Validator, config: Option<Config>| format!("{config:?}\n{:?}", v.diagnostics);
        let mut pieces = validator();
        let in_pieces = pieces
            .sections_in_pieces()
            .and_then(|sections| pieces.validate(path, sections).ok())
            .map(|config| outcome(&pieces, config));
        let mut whole = validator();
        let config = whole.whole_document(path);
        (in_pieces, outcome(&whole, config))
    }

    #[test]
    fn a_config_read_in_pieces_is_the_config_read_whole() {
        let fleet: String = (0..300)
            .map(|i| {
                format!(
                    "[[builders]]\nname = \"b{i}\"\nimage = \"r.io/b:{i}\"\n\n[[images]]\nname = \"app{i}\"\nbuilder = \"b{i}\"\nimage = \"r.io/app{i}:1\"\n"
                )
            })
            .collect();
        let with_errors = r#"[monitor]
interval = "1m"
[[builders]]
name = "a"
image = "r.io/a:1"
[[builders]] # again
name = "a"
image = "r.io/A"
[builders.oops]
x = 1
[[images]]
name = "i"
builder = "nope"
image = "r.io/i:1"
wave = -1
[[images]]
name = "i"
builder = "a"
image = "r.io/j:1"
[runner]
type = "exec"
"#;
        let example = include_str!("../../config.example.toml");
        for (what, text) in [("fleet", fleet.as_str()), ("errors", with_errors), ("example", example)] {
            let (in_pieces, whole) = both_ways(text);
            let in_pieces = in_pieces.unwrap_or_else(|| panic!("{what}: read whole, not in pieces"));
            assert_eq!(in_pieces, whole, "{what}");
        }
        let (_, whole) = both_ways(with_errors);
        for want in [
            r#"line: 9, column: 11, message: "unknown field `oops`"#,
            r#"line: 15, column: 8, message: "wave must be"#,
            r#"line: 17, column: 8, message: "duplicate image name \"i\" (first defined on line 12)"#,
        ] {
            assert!(whole.contains(want), "{want}: {whole}");
        }
    }

    #[test]
    fn layouts_that_pieces_cannot_hold_are_read_whole() {
        let builder = "[[builders]]\nname = \"a\"\nimage = \"r.io/a:1\"\n";
        for text in [
            // A header line inside a multi-line string: the piece before it does not parse.
            format!(
                "[runner]\ntype = \"exec\"\n[[images]]\nname = \"i\"\nbuilder = \"a\"\nimage = \"r.io/i:1\"\nrebuild = [\"sh\", \"-c\", '''\n[[builders]]\n''']\n{builder}"
            ),
            // A quoted first key is no cut: its table lands in the builder's piece.
            format!("{builder}[\"server\"]\nlisten = \"127.0.0.1:9464\"\n"),
            // The same section in two pieces.
            format!("[monitor]\ninterval = \"1m\"\n{builder}[monitor.x]\ny = 1\n"),
            // A syntax error.
            format!("{builder}[[builders]]\nname = \"b\nimage = 1\n"),
        ] {
            let (in_pieces, whole) = both_ways(&text);
            assert!(in_pieces.is_none(), "read in pieces: {text}");
            // The reading that falls back gives what the whole document gives.
            let mut v = Validator {
                text: &text,
                offset: 0,
                base: "/etc/bm".into(),
                state_dir: None,
                diagnostics: vec![],
                pools: Vec::new(),
                secrets: Secrets::Resolve,
                signed_images: Vec::new(),
                resolved: Default::default(),
            };
            let config = v.document(Path::new("/etc/bm/config.toml"));
            assert_eq!(format!("{config:?}\n{:?}", v.diagnostics), whole, "{text}");
        }
    }

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
