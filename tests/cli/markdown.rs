//! The README and docs/ render as written: every table line belongs to a table a CommonMark +
//! tables parser (GitHub's dialect) reads as one, and every relative link and `#anchor` reaches a
//! file and a heading that exist.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// The README and every Markdown file under docs/ (the benchmark reports too).
fn markdown_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn options() -> Options {
    Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_FOOTNOTES
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// The lines of `text` that start a table row (`|` first) outside every table and code block the
/// parser found: rows a blank line or a missing delimiter row cut off, shown as text.
fn stray_table_lines(text: &str) -> Vec<usize> {
    let mut covered: Vec<Range<usize>> = Vec::new();
    for (event, range) in Parser::new_ext(text, options()).into_offset_iter() {
        if let Event::Start(Tag::Table(_) | Tag::CodeBlock(_) | Tag::HtmlBlock) = event {
            covered.push(range);
        }
    }
    let mut stray = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with('|') && !covered.iter().any(|r| r.contains(&offset)) {
            stray.push(line_of(text, offset));
        }
        offset += line.len();
    }
    stray
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`;
/// a repeated one gets `-1`, `-2`, ….
fn anchors(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut heading: Option<String> = None;
    for event in Parser::new_ext(text, options()) {
        match event {
            Event::Start(Tag::Heading { level, .. }) if level <= HeadingLevel::H6 => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) if heading.is_some() => heading.as_mut().unwrap().push_str(&t),
            Event::End(TagEnd::Heading(_)) => {
                let title = heading.take().unwrap_or_default();
                let slug: String = title
                    .to_lowercase()
                    .chars()
                    .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
                    .map(|c| if c == ' ' { '-' } else { c })
                    .collect();
                let n = seen.entry(slug.clone()).or_insert(0);
                out.push(if *n == 0 { slug.clone() } else { format!("{slug}-{n}") });
                *n += 1;
            }
            _ => {}
        }
    }
    out
}

/// Every link and image destination of `text` with its line.
fn links(text: &str) -> Vec<(usize, String)> {
    Parser::new_ext(text, options())
        .into_offset_iter()
        .filter_map(|(event, range)| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                Some((line_of(text, range.start), dest_url.to_string()))
            }
            _ => None,
        })
        .collect()
}

/// What is wrong with relative link `dest` of `file`, if anything.
fn broken(file: &Path, dest: &str) -> Option<String> {
    if dest.contains("://") || dest.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match dest.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (dest, None),
    };
    let target = if path.is_empty() { file.to_path_buf() } else { file.parent().unwrap().join(path) };
    if !target.exists() {
        return Some(format!("{} does not exist", target.display()));
    }
    let anchor = anchor.filter(|a| !a.is_empty())?;
    if target.extension().is_none_or(|e| e != "md") {
        return Some(format!("an anchor into {}, which is not Markdown", target.display()));
    }
    let text = std::fs::read_to_string(&target).unwrap();
    let known = anchors(&text);
    (!known.iter().any(|a| a == anchor)).then(|| format!("no heading #{anchor} in {}", target.display()))
}

#[test]
fn every_table_parses_as_one_table() {
    let mut stray = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in stray_table_lines(&text) {
            stray.push(format!("{}:{line}", file.display()));
        }
    }
    assert!(stray.is_empty(), "table rows that render as text (a blank line or no delimiter row?): {stray:#?}");
}

#[test]
fn a_blank_line_inside_a_table_is_found() {
    let split = "| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n| 5 | 6 |\n";
    assert_eq!(stray_table_lines(split), [5, 6]);
    let whole = "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n\n```\n| not a table |\n```\n";
    assert!(stray_table_lines(whole).is_empty());
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut bad = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, dest) in links(&text) {
            if let Some(why) = broken(&file, &dest) {
                bad.push(format!("{}:{line}: {dest}: {why}", file.display()));
            }
        }
    }
    assert!(bad.is_empty(), "links that lead nowhere: {bad:#?}");
}

#[test]
fn anchors_are_github_s() {
    let text = "# The `[server]` table\n## Pools: where each app builds\n## Logs\n## Logs\n";
    assert_eq!(anchors(text), ["the-server-table", "pools-where-each-app-builds", "logs", "logs-1"]);
}

#[test]
fn a_missing_file_or_heading_is_found() {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    assert_eq!(broken(&readme, "docs/configuration.md"), None);
    assert_eq!(broken(&readme, "https://example.com/x#y"), None);
    assert!(broken(&readme, "docs/nowhere.md").unwrap().ends_with("does not exist"));
    let no_heading = broken(&readme, "docs/configuration.md#no-such-heading").unwrap();
    assert!(no_heading.starts_with("no heading #no-such-heading in "), "{no_heading}");
}
