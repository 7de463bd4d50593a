//! Just enough YAML to find one scalar in a block mapping or list and rewrite it in place: keys,
//! indentation, comments and the three scalar styles on a single line. Anything richer (flow
//! collections, block scalars, anchors, multi-line values) at the place we edit is refused with
//! the line, never guessed at: a wrong guess would commit a broken manifest.

use super::lines::{Edits, Line, split};
use super::{Edit, EditError, shown};
use crate::deploy::names_repository;
use crate::reference::ImageRef;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Plain,
    Single,
    Double,
}

/// What follows a key's colon on its line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    /// Nothing, or only a comment: null, or a block on the lines below.
    Empty,
    /// A scalar at bytes `start..end` of the line (quotes included); `value` is its text.
    Scalar { start: usize, end: usize, style: Style, value: String },
    /// A flow collection opening with `[` or `{`.
    Flow(char),
    /// What we do not edit, said as "holds …".
    Other(&'static str),
}

/// Spaces before the text; YAML indents with spaces only.
fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// Whether a line holds YAML content: not blank, not only a comment, not a document marker.
fn is_content(line: &str) -> bool {
    let t = line.trim_start_matches([' ', '\t']);
    let marker = |m: &str| line.strip_prefix(m).is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']));
    !(t.is_empty() || t.starts_with('#') || marker("---") || marker("..."))
}

/// A `---` (a document starts) or `...` (one ends) line.
fn is_document_marker(line: &str) -> bool {
    ["---", "..."]
        .iter()
        .any(|m| line.strip_prefix(m).is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t'])))
}

/// What this reader does not take at all, said before it would mislead: a byte order mark (the
/// first key would not be `images`), a tab before a line's text (no key would be found at any
/// indentation), a second document (its keys would read as duplicates of the first's).
fn check_stream(text: &str, lines: &[Line]) -> Result<(), EditError> {
    if text.starts_with('\u{feff}') {
        return Err(EditError::ByteOrderMark);
    }
    let mut content = false;
    let mut ended = None;
    for (i, line) in lines.iter().enumerate() {
        let t = line.text;
        if is_document_marker(t) {
            if content {
                ended = Some(i);
            }
            continue;
        }
        if !is_content(t) {
            continue;
        }
        if t.starts_with('\t') {
            return Err(EditError::TabIndent { line: i + 1 });
        }
        if let Some(marker) = ended {
            return Err(EditError::SeveralDocuments { line: marker + 1 });
        }
        content = true;
    }
    Ok(())
}

/// A list item at column `col`: `-` then a space or the end of the line.
fn is_dash(line: &str, col: usize) -> bool {
    line[col..].strip_prefix('-').is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
}

fn skip_blanks(line: &str, at: usize) -> usize {
    at + (line[at..].len() - line[at..].trim_start_matches([' ', '\t']).len())
}

/// A quoted scalar at the start of `s`: its text and the length taken, closing quote included;
/// None when it does not close on the line. Double-quoted escapes other than `\\` and `\"` are
/// kept as written: we compare such text, never rewrite it.
fn quoted(s: &str) -> Option<(String, usize)> {
    let quote = s.chars().next()?;
    let mut out = String::new();
    let mut chars = s.char_indices().skip(1).peekable();
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            ('\'', '\'') if chars.peek().is_some_and(|&(_, c)| c == '\'') => {
                chars.next();
                out.push('\'');
            }
            ('\'', '\'') | ('"', '"') => return Some((out, i + 1)),
            ('"', '\\') => match chars.next() {
                Some((_, e @ ('\\' | '"'))) => out.push(e),
                Some((_, e)) => {
                    out.push('\\');
                    out.push(e);
                }
                None => return None,
            },
            _ => out.push(c),
        }
    }
    None
}

/// The key of `key: …` starting at byte `at`, and the byte after its colon.
fn key_at(line: &str, at: usize) -> Option<(String, usize)> {
    let rest = &line[at..];
    let (key, colon) = if rest.starts_with(['"', '\'']) {
        let (key, len) = quoted(rest)?;
        (key, at + skip_blanks(rest, len))
    } else {
        if rest.starts_with(['[', '{', '#', '&', '*', '!', '|', '>', '?']) || is_dash(rest, 0) {
            return None;
        }
        let bytes = rest.as_bytes();
        let mut colon = None;
        for (i, &b) in bytes.iter().enumerate() {
            let blank_before = i > 0 && matches!(bytes[i - 1], b' ' | b'\t');
            if b == b'#' && blank_before {
                return None;
            }
            if b == b':' && bytes.get(i + 1).is_none_or(|n| matches!(n, b' ' | b'\t')) {
                colon = Some(i);
                break;
            }
        }
        let colon = colon?;
        (rest[..colon].trim_end().to_string(), at + colon)
    };
    if key.is_empty() || line.as_bytes().get(colon) != Some(&b':') {
        return None;
    }
    let after = colon + 1;
    (after == line.len() || line[after..].starts_with([' ', '\t'])).then_some((key, after))
}

/// What follows the colon that ends at byte `at`.
fn value_at(line: &str, at: usize) -> Value {
    let start = skip_blanks(line, at);
    let rest = &line[start..];
    match rest.chars().next() {
        None | Some('#') => Value::Empty,
        Some(c @ ('[' | '{')) => Value::Flow(c),
        Some('|' | '>') => Value::Other("a block scalar (| or >)"),
        Some('&' | '*' | '!') => Value::Other("an anchor, alias or tag"),
        Some(q @ ('"' | '\'')) => {
            let Some((value, len)) = quoted(rest) else {
                return Value::Other("a quoted value that goes on past the line");
            };
            let after = skip_blanks(rest, len);
            if after < rest.len() && (after == len || !rest[after..].starts_with('#')) {
                return Value::Other("text after a quoted value");
            }
            let style = if q == '"' { Style::Double } else { Style::Single };
            Value::Scalar { start, end: start + len, style, value }
        }
        Some(_) => {
            let b = rest.as_bytes();
            let comment = (1..b.len()).find(|&i| b[i] == b'#' && matches!(b[i - 1], b' ' | b'\t'));
            let value = rest[..comment.unwrap_or(rest.len())].trim_end_matches([' ', '\t']);
            Value::Scalar { start, end: start + value.len(), style: Style::Plain, value: value.to_string() }
        }
    }
}

/// The line after the block below line `from` whose text starts at `col`: the first content line
/// indented `col` or less (a list item at `col` still belongs: `images:` then `- name: …`).
fn block_end(lines: &[Line], from: usize, col: usize) -> usize {
    (from + 1..lines.len())
        .find(|&i| {
            let t = lines[i].text;
            is_content(t) && (indent(t) < col || (indent(t) == col && !is_dash(t, col)))
        })
        .unwrap_or(lines.len())
}

fn first_content(lines: &[Line], from: usize, to: usize) -> Option<usize> {
    (from..to).find(|&i| is_content(lines[i].text))
}

/// A key of a block mapping, on line `line` (0-based) at column `col`.
#[derive(Debug, Clone)]
struct Key {
    name: String,
    line: usize,
    col: usize,
    after_colon: usize,
    /// The key's last line: later, deeper lines (a multi-line value, a block) belong to it.
    last: usize,
}

impl Key {
    fn value(&self, lines: &[Line]) -> Value {
        value_at(lines[self.line].text, self.after_colon)
    }
}

/// What the lines `from..to` hold.
enum Shape {
    Null,
    Mapping(Vec<Key>),
    /// A list or a scalar starting on this line.
    Sequence(usize),
    Scalar(usize),
}

/// The block mapping (or other shape) on lines `from..to`: its keys are the content lines at the
/// first content line's indentation; deeper lines, and list items of a compact list under a key,
/// belong to the key above them.
fn shape(lines: &[Line], from: usize, to: usize) -> Shape {
    let Some(first) = first_content(lines, from, to) else { return Shape::Null };
    let col = indent(lines[first].text);
    if is_dash(lines[first].text, col) {
        return Shape::Sequence(first);
    }
    let mut keys: Vec<Key> = Vec::new();
    for (i, line) in lines.iter().enumerate().take(to).skip(first) {
        let t = line.text;
        if !is_content(t) {
            continue;
        }
        if indent(t) == col && !is_dash(t, col) {
            match key_at(t, col) {
                Some((name, after_colon)) => keys.push(Key { name, line: i, col, after_colon, last: i }),
                None if keys.is_empty() => return Shape::Scalar(first),
                None => {}
            }
        } else if let Some(key) = keys.last_mut() {
            key.last = i;
        }
    }
    Shape::Mapping(keys)
}

fn one_line(key: &Key, path: &str) -> Result<(), EditError> {
    if key.last > key.line {
        return Err(EditError::Unsupported {
            line: key.line + 1,
            what: format!("{path} continues on the lines below it: write its value on the key's line"),
        });
    }
    Ok(())
}

/// `value` as a scalar of `style`; a plain one is double-quoted when YAML would read it as
/// something other than that string (a number, a bool, null) or not as a scalar at all.
fn render(style: Style, value: &str) -> String {
    let plain_ok = || {
        let lower = value.to_ascii_lowercase();
        let typed = matches!(
            lower.as_str(),
            "" | "~" | "null" | "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | ".inf" | ".nan"
        );
        let numeric = value.trim_start_matches(['+', '-', '.']).starts_with(|c: char| c.is_ascii_digit());
        !typed && !numeric && !value.starts_with(|c: char| "-?:,[]{}#&*!|>'\"%@`".contains(c)) && !value.ends_with(':')
    };
    match style {
        Style::Plain if plain_ok() => value.to_string(),
        Style::Single => format!("'{}'", value.replace('\'', "''")),
        _ => format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\"")),
    }
}

/// Sets the scalar after `key`'s colon to `value` in its own style; returns what it held.
fn set_scalar(
    edits: &mut Edits,
    lines: &[Line],
    key: &Key,
    value: &str,
    path: &str,
) -> Result<Option<String>, EditError> {
    let text = lines[key.line].text;
    match key.value(lines) {
        Value::Scalar { start, end, style, value: old } => {
            if old != value {
                edits.replace(key.line, format!("{}{}{}", &text[..start], render(style, value), &text[end..]));
            }
            let null = style == Style::Plain && matches!(old.as_str(), "~" | "null" | "Null" | "NULL");
            Ok((!old.is_empty() && !null).then_some(old))
        }
        Value::Empty => {
            let at = key.after_colon;
            edits.replace(key.line, format!("{} {}{}", &text[..at], render(Style::Plain, value), &text[at..]));
            Ok(None)
        }
        Value::Flow(_) => {
            Err(EditError::NotAScalar { key: path.to_string(), line: key.line + 1, holds: "a flow collection".into() })
        }
        Value::Other(what) => Err(EditError::Unsupported {
            line: key.line + 1,
            what: format!("{path} holds {what}: write a plain or quoted value on the key's line"),
        }),
    }
}

fn the_one<'k>(keys: &'k [Key], name: &str, path: &str) -> Result<Option<&'k Key>, EditError> {
    let found: Vec<&Key> = keys.iter().filter(|k| k.name == name).collect();
    if found.len() > 1 {
        return Err(EditError::DuplicateKey { key: shown(path), lines: found.iter().map(|k| k.line + 1).collect() });
    }
    Ok(found.first().copied())
}

fn finish(text: &str, edits: Edits, previous: Option<String>) -> Edit {
    let new = edits.finish(text);
    Edit { changed: new != text, text: new, previous }
}

pub(super) fn helm_values(text: &str, path: &str, value: &str) -> Result<Edit, EditError> {
    let segments: Vec<&str> = path.split('.').collect();
    let lines = split(text);
    check_stream(text, &lines)?;
    let (mut from, mut to) = (0, lines.len());
    let mut parent = String::from("the top level");
    for (depth, segment) in segments.iter().enumerate() {
        let here = segments[..=depth].join(".");
        let keys = match shape(&lines, from, to) {
            Shape::Null => Vec::new(),
            Shape::Mapping(keys) => keys,
            Shape::Sequence(line) | Shape::Scalar(line) if depth == 0 => {
                return Err(EditError::NotAMapping { key: "the file".into(), line: line + 1 });
            }
            Shape::Sequence(line) | Shape::Scalar(line) => {
                return Err(EditError::NotAMapping { key: parent, line: line + 1 });
            }
        };
        let Some(key) = the_one(&keys, segment, &here)? else {
            return Err(EditError::KeyNotFound {
                key: path.to_string(),
                parent,
                has: keys.iter().map(|k| shown(&k.name)).collect(),
            });
        };
        let end = block_end(&lines, key.line, key.col);
        if depth + 1 == segments.len() {
            if key.value(&lines) == Value::Empty && first_content(&lines, key.line + 1, end).is_some() {
                return Err(EditError::NotAScalar { key: here, line: key.line + 1, holds: "a block".into() });
            }
            one_line(key, &here)?;
            let mut edits = Edits::new(&lines);
            let previous = set_scalar(&mut edits, &lines, key, value, &here)?;
            return Ok(finish(text, edits, previous));
        }
        match key.value(&lines) {
            Value::Empty => (from, to) = (key.line + 1, end),
            Value::Flow('{') => {
                return Err(EditError::FlowStyle {
                    what: here,
                    line: key.line + 1,
                    brackets: "{...}",
                    block: "block mapping",
                });
            }
            Value::Other(what) => {
                return Err(EditError::Unsupported {
                    line: key.line + 1,
                    what: format!("{here} holds {what}: write it as a block mapping"),
                });
            }
            _ => return Err(EditError::NotAMapping { key: here, line: key.line + 1 }),
        }
        parent = here;
    }
    unreachable!("a path has at least one segment")
}

/// One `- …` entry of the images list: its dash line and its keys.
struct Entry {
    dash: usize,
    keys: Vec<Key>,
}

impl Entry {
    fn scalar(&self, lines: &[Line], name: &str) -> Option<String> {
        match self.keys.iter().find(|k| k.name == name)?.value(lines) {
            Value::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }
}

/// The entries of the block list on lines `from..to`, each a block mapping.
fn entries(lines: &[Line], from: usize, to: usize) -> Result<Vec<Entry>, EditError> {
    let unsupported = |i: usize, what: &str| EditError::Unsupported { line: i + 1, what: what.to_string() };
    let mut entries: Vec<Entry> = Vec::new();
    let mut dash_col = None;
    let mut key_col = None;
    for (i, line) in lines.iter().enumerate().take(to).skip(from) {
        let t = line.text;
        if !is_content(t) {
            continue;
        }
        let col = indent(t);
        let dash = *dash_col.get_or_insert(col);
        if col == dash && is_dash(t, col) {
            entries.push(Entry { dash: i, keys: Vec::new() });
            key_col = None;
            let at = skip_blanks(t, col + 1);
            if at == t.len() || t[at..].starts_with('#') {
                continue;
            }
            if t[at..].starts_with('{') {
                return Err(EditError::FlowStyle {
                    what: "the images: entry".into(),
                    line: i + 1,
                    brackets: "{...}",
                    block: "block mapping",
                });
            }
            let Some((name, after_colon)) = key_at(t, at) else {
                return Err(unsupported(i, "an images: entry is not a mapping: write - name: REPOSITORY"));
            };
            key_col = Some(at);
            entries.last_mut().expect("pushed").keys.push(Key { name, line: i, col: at, after_colon, last: i });
        } else if col <= dash {
            return Err(unsupported(i, "expected an images: entry (- name: REPOSITORY) at this indentation"));
        } else {
            let Some(entry) = entries.last_mut() else {
                return Err(unsupported(i, "images: holds no list: write its entries as - name: REPOSITORY"));
            };
            let kc = *key_col.get_or_insert(col);
            if col == kc {
                let Some((name, after_colon)) = key_at(t, col) else {
                    return Err(unsupported(i, "expected a key of the images: entry (name:, newName:, digest:)"));
                };
                entry.keys.push(Key { name, line: i, col, after_colon, last: i });
            } else if col > kc
                && let Some(key) = entry.keys.last_mut()
            {
                key.last = i;
            } else {
                return Err(unsupported(i, "indented less than the keys of its images: entry above"));
            }
        }
    }
    Ok(entries)
}

pub(super) fn kustomize(text: &str, repository: &str, digest: &str) -> Result<Edit, EditError> {
    let lines = split(text);
    check_stream(text, &lines)?;
    let top = match shape(&lines, 0, lines.len()) {
        Shape::Mapping(keys) => keys,
        _ => Vec::new(),
    };
    let Some(images) = the_one(&top, "images", "images:")? else {
        return Err(EditError::NoImagesList);
    };
    match images.value(&lines) {
        Value::Empty => {}
        Value::Flow(c) => {
            let list = c == '[';
            return Err(EditError::FlowStyle {
                what: "images:".into(),
                line: images.line + 1,
                brackets: if list { "[...]" } else { "{...}" },
                block: "block list",
            });
        }
        Value::Scalar { .. } => return Err(EditError::NotAList { line: images.line + 1 }),
        Value::Other(what) => {
            return Err(EditError::Unsupported {
                line: images.line + 1,
                what: format!("images: holds {what}: write it as a block list"),
            });
        }
    }
    let entries = entries(&lines, images.line + 1, block_end(&lines, images.line, images.col))?;
    let wanted = ImageRef::parse(repository).ok();
    let names = |value: Option<String>| {
        value.is_some_and(|v| v == repository || wanted.as_ref().is_some_and(|w| names_repository(&v, w)))
    };
    let matching: Vec<&Entry> =
        entries.iter().filter(|e| names(e.scalar(&lines, "name")) || names(e.scalar(&lines, "newName"))).collect();
    let entry = match matching[..] {
        [entry] => entry,
        [] => {
            return Err(EditError::NoEntry {
                repository: shown(repository),
                names: entries.iter().filter_map(|e| e.scalar(&lines, "name")).map(|n| shown(&n)).collect(),
            });
        }
        _ => {
            return Err(EditError::AmbiguousEntry {
                repository: shown(repository),
                lines: matching.iter().map(|e| e.dash + 1).collect(),
            });
        }
    };
    let digest_key = the_one(&entry.keys, "digest", "digest:")?;
    let tag_key = the_one(&entry.keys, "newTag", "newTag:")?;
    let mut edits = Edits::new(&lines);
    let mut previous = None;
    if let Some(key) = digest_key {
        one_line(key, "digest:")?;
        previous = set_scalar(&mut edits, &lines, key, digest, "digest:")?;
    }
    let mut placed = digest_key.is_some();
    if let Some(tag) = tag_key {
        for i in tag.line + 1..=tag.last {
            edits.remove(i);
        }
        let t = lines[tag.line].text;
        if tag.line != entry.dash {
            edits.remove(tag.line);
        } else if placed {
            // `- newTag: 1.2` with the digest below: the item's keys all start on the next lines.
            edits.replace(tag.line, t[..tag.col].trim_end().to_string());
        } else {
            // The digest takes the tag's place at the head of the entry.
            edits.replace(tag.line, format!("{}digest: {digest}", &t[..tag.col]));
            placed = true;
        }
    }
    if !placed {
        // After the entry's last key (and the lines that belong to it), at the entry's key column.
        let after = entry.keys.iter().filter(|k| k.name != "newTag").max_by_key(|k| k.last).expect("a key matched");
        edits.insert_after(after.last, format!("{}digest: {digest}", " ".repeat(after.col)));
    }
    Ok(finish(text, edits, previous))
}
