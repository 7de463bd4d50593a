//! GitOps edits: the text changes that write an image's new digest into a file of a Git
//! repository, for the Argo CD and Flux users whose cluster follows the repository rather than
//! builder-monitor's own writes. Three formats:
//!
//! - `kustomize`: the `images:` entry of a kustomization gets `digest:` (and loses `newTag:`);
//! - `helm-values`: one scalar of a values file, named by a dotted key (`image.digest`);
//! - `marker`: any text file, on the lines carrying `# {"builder-monitor": "NAME"}`.
//!
//! Flux users know YAML tools that re-serialise a file and lose its comments, quoting and layout;
//! so we never re-serialise. Each edit changes the few lines it must, in place, and every other
//! byte stays (comments, quoting, indentation, CRLF line endings, a missing final newline). Also
//! here: the commit message of a change and the change ids its trailers name. Pure: text in, text
//! out; the caller reads, commits and pushes.

mod batch;
mod lines;
mod yaml;

pub use batch::{BatchedChange, absorb, batch_message, deadline, union_fixes};

use std::fmt::Write as _;

use crate::reference::{ImageRef, is_sha256_digest};
use crate::text;
use crate::vulns::Fix;

/// The largest file we edit. A GitOps file is a few KiB; anything near this is the wrong file,
/// and the bound keeps the work per edit small.
pub const MAX_TEXT: usize = 4 << 20;

/// What an edit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// The file's new text (== the input when nothing changed).
    pub text: String,
    /// Whether anything changed (false: the file already holds the value: no commit needed).
    pub changed: bool,
    /// What the edited place held before: the digest (`sha256:…`) for kustomize (for
    /// helm-values, the old value of the key, whatever it was), the whole reference for a marker;
    /// None when it held none (a kustomize entry with only newTag, an empty or null value).
    pub previous: Option<String>,
}

/// Why a file cannot be edited. Each names the line (1-based) when there is one and says what to
/// change; text taken from the file is shown with control characters escaped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    #[error(
        "the file is {bytes} bytes, over the {} MiB builder-monitor edits: point it at the file that holds the image",
        MAX_TEXT >> 20
    )]
    TooLarge { bytes: usize },
    #[error("digest {0:?} is not sha256: and 64 lowercase hex digits: pass the manifest digest the registry returned")]
    BadDigest(String),
    #[error("reference {reference:?} {reason}")]
    BadReference { reference: String, reason: String },
    #[error("value {value:?} {reason}")]
    BadValue { value: String, reason: String },
    #[error("key {key:?} is not a dotted path of keys: write it like image.digest")]
    BadKey { key: String },
    #[error("marker name {0:?} is empty or has control characters: name the image as the marker does")]
    BadName(String),
    #[error("no top-level images: list: add one (images:, then - name: REPOSITORY)")]
    NoImagesList,
    #[error("images: on line {line} holds a value, not a list: write it as a block list of - name: REPOSITORY entries")]
    NotAList { line: usize },
    /// `what` is the place ("images:", "image"), `brackets` `[...]` or `{...}`, `block` the form
    /// to write instead ("block list", "block mapping").
    #[error(
        "{what} is in flow style ({brackets}) on line {line}: write it as a {block} to let builder-monitor edit it"
    )]
    FlowStyle { what: String, line: usize, brackets: &'static str, block: &'static str },
    #[error("no images: entry named {repository} ({})", names_here(.names))]
    NoEntry { repository: String, names: Vec<String> },
    #[error("images: entries on lines {} all name {repository}: keep one", and_list(.lines))]
    AmbiguousEntry { repository: String, lines: Vec<usize> },
    #[error("{key} appears on lines {}: a key may appear once in a mapping: remove all but one", and_list(.lines))]
    DuplicateKey { key: String, lines: Vec<usize> },
    /// `parent` is the deepest mapping found ("image", "the top level"), `has` its keys.
    #[error("key {key} not found ({})", has_keys(.parent, .has))]
    KeyNotFound { key: String, parent: String, has: Vec<String> },
    #[error(
        "{key} on line {line} is not a block mapping: builder-monitor edits keys of block mappings (image:, then digest: … indented below)"
    )]
    NotAMapping { key: String, line: usize },
    #[error("{key} on line {line} holds {holds}, not a single value: name the key of the value itself")]
    NotAScalar { key: String, line: usize, holds: String },
    #[error("line {line}: {what}")]
    Unsupported { line: usize, what: String },
    #[error("the file starts with a UTF-8 byte order mark (U+FEFF): save it without one")]
    ByteOrderMark,
    #[error("line {line} is indented with a tab: YAML indents with spaces only; replace the tabs with spaces")]
    TabIndent { line: usize },
    #[error(
        "the file holds more than one YAML document (another begins with the --- on line {line}): builder-monitor edits files of one document; put each document in a file of its own"
    )]
    SeveralDocuments { line: usize },
    #[error("no line marks {{\"builder-monitor\": {}}}", serde_json::Value::from(.name.as_str()))]
    NoMarker { name: String },
    #[error("line {line} marks {name} but holds no image reference")]
    NoReference { line: usize, name: String },
}

fn names_here(names: &[String]) -> String {
    if names.is_empty() { "images: has no named entries".into() } else { format!("names here: {}", names.join(", ")) }
}

fn has_keys(parent: &str, has: &[String]) -> String {
    if has.is_empty() { format!("{parent} has no keys") } else { format!("{parent} has: {}", has.join(", ")) }
}

/// `3 and 9`, `3, 5 and 9`.
fn and_list(lines: &[usize]) -> String {
    let text: Vec<String> = lines.iter().map(usize::to_string).collect();
    match text.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => text.join(""),
    }
}

/// Text from a file or a caller, safe on one line of an error message.
fn shown(text: &str) -> String {
    text::escape(text).into_owned()
}

fn check_size(text: &str) -> Result<(), EditError> {
    if text.len() > MAX_TEXT {
        return Err(EditError::TooLarge { bytes: text.len() });
    }
    Ok(())
}

fn check_digest(digest: &str) -> Result<(), EditError> {
    if !is_sha256_digest(digest) {
        return Err(EditError::BadDigest(digest.to_string()));
    }
    Ok(())
}

/// The characters of an image reference as we write and find them. Brackets (IPv6 registries)
/// are left out: in YAML they would open a flow list.
fn is_reference_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ':' | '@')
}

/// A reference we may write: reference characters only (no whitespace, quotes or `#` to break
/// the line it goes into), parsed, and pinned by a sha256 digest.
fn check_reference(reference: &str) -> Result<ImageRef, EditError> {
    let bad = |reason: String| EditError::BadReference { reference: reference.to_string(), reason };
    if reference.is_empty() || !reference.chars().all(is_reference_char) {
        return Err(bad(
            "is not one token of letters, digits and . _ - / : @ (whitespace, quotes and # would break the line)"
                .into(),
        ));
    }
    let parsed = ImageRef::parse(reference).map_err(|e| bad(format!("does not parse: {e}")))?;
    if !parsed.digest().is_some_and(is_sha256_digest) {
        return Err(bad("is not pinned: write repository@sha256:… or repository:tag@sha256:…".into()));
    }
    Ok(parsed)
}

/// kustomize: in the top-level `images:` block list, the entry whose `name:` equals `repository`
/// (a full repository like `registry.example.com/shop/petclinic`; also match when the entry's
/// `newName:` equals it, since kustomize renames by name) gets `digest: <digest>`; its `newTag:`
/// line is removed (digest wins over newTag in kustomize, and a stale tag misleads readers).
/// The digest line goes where the old one was, else right after the entry's last key, with the
/// entry's own key indentation (when `newTag` is the entry's first key, on the `- ` line, the
/// digest takes its place there). Entry keys may come in any order; values may be quoted
/// ('…' "…") or plain; comments after values are kept. Names compare as written or as Docker
/// normalises them (`nginx` is `docker.io/library/nginx`); two entries naming the repository
/// are an error, as is a duplicate key in the entry.
pub fn kustomize(text: &str, repository: &str, digest: &str) -> Result<Edit, EditError> {
    check_size(text)?;
    check_digest(digest)?;
    yaml::kustomize(text, repository, digest)
}

/// helm-values: the scalar at dotted `key` (block mappings only; `image.digest`) set to `value`
/// (the caller passes `sha256:…`); the key must exist (its parents too); quoting style of the
/// existing value kept (plain stays plain unless YAML would read the value as a number, bool or
/// null; `sha256:…` stays plain: `digest: sha256:abc` is the string "sha256:abc"); trailing
/// comment kept. An empty (null) value is filled in. `value` must be one token of reference
/// characters, and a `sha256:` one a whole digest.
pub fn helm_values(text: &str, key: &str, value: &str) -> Result<Edit, EditError> {
    check_size(text)?;
    if key.split('.').any(|s| s.is_empty() || s.chars().any(char::is_control)) {
        return Err(EditError::BadKey { key: key.to_string() });
    }
    let bad = |reason: &str| EditError::BadValue { value: value.to_string(), reason: reason.to_string() };
    if value.is_empty() || !value.chars().all(is_reference_char) {
        return Err(bad("is not one token of letters, digits and . _ - / : @"));
    }
    if value.starts_with("sha256:") {
        check_digest(value)?;
    }
    yaml::helm_values(text, key, value)
}

/// The marker on a line: the byte where its `#` starts and the name it carries. The `#` starts a
/// comment (line start or after a blank), and what follows is exactly one JSON object with the
/// one key `builder-monitor` and a string value.
fn marker_on(line: &str) -> Option<(usize, String)> {
    let b = line.as_bytes();
    line.match_indices('#').find_map(|(i, _)| {
        if i > 0 && !matches!(b[i - 1], b' ' | b'\t') {
            return None;
        }
        let rest = line[i + 1..].trim_start_matches([' ', '\t']);
        if !rest.starts_with('{') {
            return None;
        }
        let mut stream =
            serde_json::Deserializer::from_str(rest).into_iter::<serde_json::Map<String, serde_json::Value>>();
        match stream.next()?.ok()? {
            map if map.len() == 1 => map.get("builder-monitor")?.as_str().map(|name| (i, name.to_string())),
            _ => None,
        }
    })
}

/// The last token of `before` that reads as an image reference with a tag or a digest: its byte
/// range and what it parses to.
fn last_reference(before: &str) -> Option<(usize, usize, ImageRef)> {
    let b = before.as_bytes();
    let is_ref = |i: usize| is_reference_char(b[i] as char);
    let mut end = b.len();
    loop {
        while end > 0 && !is_ref(end - 1) {
            end -= 1;
        }
        if end == 0 {
            return None;
        }
        let mut start = end;
        while start > 0 && is_ref(start - 1) {
            start -= 1;
        }
        let token = &before[start..end];
        let name_end = token.rfind('/').map_or(0, |i| i + 1);
        if (token.contains('@') || token[name_end..].contains(':'))
            && let Ok(parsed) = ImageRef::parse(token)
        {
            return Some((start, end, parsed));
        }
        end = start;
    }
}

/// marker: every line carrying the marker comment `# {"builder-monitor": "NAME"}` (exactly that
/// JSON object, whitespace inside it tolerated) has its image reference replaced by `reference`
/// (`repo:tag@sha256:…` or `repo@sha256:…`), written as given. The reference on the line is the
/// last token before the marker that parses as an image reference with a digest or tag (it may be
/// inside quotes, after `image: `, after `--builder=`, etc.). All marked lines for NAME are
/// edited; zero is an error. Lines of other names untouched. `previous`: the first marked line's
/// old reference.
pub fn marker(text: &str, name: &str, reference: &str) -> Result<Edit, EditError> {
    marker_with(text, name, reference, false)
}

/// `marker`, and when `keep_tag` is true and `reference` has no tag, a line whose reference carried
/// a tag keeps it: `repo:1.2@sha256:old` becomes `repo:1.2@sha256:new`, not `repo@sha256:new`.
pub fn marker_with(text: &str, name: &str, reference: &str, keep_tag: bool) -> Result<Edit, EditError> {
    check_size(text)?;
    if name.is_empty() || name.chars().any(char::is_control) {
        return Err(EditError::BadName(name.to_string()));
    }
    let new = check_reference(reference)?;
    let lines = lines::split(text);
    let mut edits = lines::Edits::new(&lines);
    let mut previous = None;
    let mut marked = 0;
    for (i, line) in lines.iter().enumerate() {
        let Some((at, marks)) = marker_on(line.text) else { continue };
        if marks != name {
            continue;
        }
        marked += 1;
        let Some((start, end, old)) = last_reference(&line.text[..at]) else {
            return Err(EditError::NoReference { line: i + 1, name: shown(name) });
        };
        let written = match (keep_tag, new.tag(), old.tag()) {
            (true, None, Some(tag)) => {
                let (repo, digest) = reference.split_once('@').expect("a pinned reference has @");
                format!("{repo}:{tag}@{digest}")
            }
            _ => reference.to_string(),
        };
        previous.get_or_insert_with(|| line.text[start..end].to_string());
        if line.text[start..end] != written {
            edits.replace(i, format!("{}{written}{}", &line.text[..start], &line.text[end..]));
        }
    }
    if marked == 0 {
        return Err(EditError::NoMarker { name: name.to_string() });
    }
    let new_text = edits.finish(text);
    Ok(Edit { changed: new_text != text, text: new_text, previous })
}

const CHANGE_TRAILER: &str = "Builder-Monitor-Change";
const REASONS_TRAILER: &str = "Builder-Monitor-Reasons";
const FIXES_TRAILER: &str = "Builder-Monitor-Fixes";

/// The commit message of one change: `summary` (one line, trimmed to 72 chars), a blank line, one
/// line per image `NAME: reference`, a blank line, then the trailers
/// `Builder-Monitor-Change: <change id>` and `Builder-Monitor-Reasons: a, b` (reasons joined; the
/// trailer omitted when none). With `fixes`, a paragraph `Fixes:` lists each notice with its
/// CVEs (`- USN-7000-1 (high): CVE-2026-1111`) before the trailers, and `Builder-Monitor-Fixes:
/// USN-…, USN-…` ends them. Every part is kept to its line (line breaks and control characters
/// escaped), so no name or reason can end a paragraph early or forge a trailer.
pub fn commit_message(
    summary: &str,
    images: &[(String, String)],
    change_id: &str,
    reasons: &[String],
    fixes: &[Fix],
) -> String {
    message(summary, &[(change_id, "")], images, reasons, fixes)
}

/// A commit message of `changes` (`(id, summary)`): with more than one, a `Changes:` paragraph
/// lists each (`- summary (id)`) after the subject, and a `Builder-Monitor-Change` trailer names
/// each; otherwise as [`commit_message`].
fn message(
    summary: &str,
    changes: &[(&str, &str)],
    images: &[(String, String)],
    reasons: &[String],
    fixes: &[Fix],
) -> String {
    let one_line = |s: &str| shown(&s.split_whitespace().collect::<Vec<_>>().join(" "));
    let summary = one_line(summary);
    // clip marks a cut with " …": two characters over its limit.
    let summary =
        if summary.is_empty() { "Pin new image digests".into() } else { text::clip(&summary, 70).into_owned() };
    let mut message = format!("{summary}\n\n");
    if changes.len() > 1 {
        message.push_str("Changes:\n");
        for (id, what) in changes {
            let _ = writeln!(message, "- {} ({})", one_line(what), one_line(id));
        }
        message.push('\n');
    }
    for (name, reference) in images {
        let _ = writeln!(message, "{}: {}", one_line(name), one_line(reference));
    }
    if !images.is_empty() {
        message.push('\n');
    }
    if !fixes.is_empty() {
        message.push_str("Fixes:\n");
        for fix in fixes {
            let _ = writeln!(message, "- {}", one_line(&crate::cnb::fix_line(fix)));
        }
        message.push('\n');
    }
    for (id, _) in changes {
        let _ = writeln!(message, "{CHANGE_TRAILER}: {}", one_line(id));
    }
    if !reasons.is_empty() {
        let reasons: Vec<String> = reasons.iter().map(|r| one_line(r)).collect();
        let _ = writeln!(message, "{REASONS_TRAILER}: {}", reasons.join(", "));
    }
    if !fixes.is_empty() {
        let ids: Vec<String> = fixes.iter().map(|f| one_line(&text::escape(&f.id))).collect();
        let _ = writeln!(message, "{FIXES_TRAILER}: {}", ids.join(", "));
    }
    message
}

/// A git trailer line `Key: value` (the key letters, digits and dashes), or the line git's
/// cherry-pick appends, which git counts with the trailers.
fn is_trailer(line: &str) -> bool {
    line.starts_with("(cherry picked from commit ")
        || line.split_once(':').is_some_and(|(key, _)| {
            let key = key.trim_end();
            !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// The change ids a commit message's trailers name (Builder-Monitor-Change lines in its last
/// paragraph; git trailer rules: `Key: value` lines at the end, keys case-insensitive, the
/// subject paragraph never trailers). A last paragraph with any line that is neither a trailer
/// nor a continuation (indented) is prose, and names none.
pub fn changes_in(message: &str) -> Vec<String> {
    let lines: Vec<&str> = message.lines().collect();
    let blank = |l: &&str| l.trim().is_empty();
    let Some(first) = lines.iter().position(|l| !blank(l)) else { return Vec::new() };
    let end = lines.iter().rposition(|l| !blank(l)).map_or(0, |i| i + 1);
    let start = lines[..end].iter().rposition(blank).map_or(0, |i| i + 1);
    if start <= first {
        return Vec::new();
    }
    let block = &lines[start..end];
    let trailers = block.iter().enumerate().all(|(i, l)| is_trailer(l) || (i > 0 && l.starts_with([' ', '\t'])));
    if !trailers {
        return Vec::new();
    }
    block
        .iter()
        .filter_map(|l| l.split_once(':'))
        .filter(|(key, _)| key.trim_end().eq_ignore_ascii_case(CHANGE_TRAILER))
        .map(|(_, value)| value.trim().to_string())
        .filter(|value| !value.is_empty())
        .collect()
}

/// What a gitops action records, before it pushes (and keeps after): the commit, where it goes,
/// and the value it wrote for each name (an image, or `builder:NAME`), which the next action
/// compares the files with to see a person's change.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommitProgress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The commit `commit` was made on: where a later attempt's search for it starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    pub branch: String,
    #[serde(default)]
    pub files: Vec<String>,
    /// `path#name` → what that file holds for the name after this commit (a digest, or a marker's
    /// whole reference).
    #[serde(default)]
    pub written: std::collections::BTreeMap<String, String>,
}

#[cfg(test)]
mod tests;
