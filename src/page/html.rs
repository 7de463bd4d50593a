//! The status page's HTML pieces: escaped text, short digests (also inside errors and details),
//! row anchors, times as `<time>` elements with their exact value in the tooltip, change and state
//! badges, and the page's inline style.

use std::fmt::{self, Write as _};

use chrono::{DateTime, Utc};

use crate::status::ChangeSummary;
use builder_monitor_core::cnb::ChangeKind;
use builder_monitor_core::schedule::parse_timestamp;

/// Text for HTML content and quoted attribute values. Names, summaries and errors come from
/// registries and runners, so markup characters are escaped and control characters (terminal
/// escapes, bidi overrides that reorder what is shown) are written out as codes (`\x1b`,
/// `\u{202e}`), exactly as text output and text logs write them.
pub(super) struct Text<'a>(pub(super) &'a str);

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match c {
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '&' => f.write_str("&amp;")?,
                '"' => f.write_str("&quot;")?,
                '\'' => f.write_str("&#39;")?,
                // Line breaks in error output read as spaces in a table cell.
                '\n' | '\t' => f.write_char(' ')?,
                c if builder_monitor_core::text::is_unsafe(c) => builder_monitor_core::text::write_escaped(f, c)?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// [`Text`] that may wrap after each `/` and before each `@`: image references and error
/// messages are long words that would otherwise widen their column or break at random letters.
/// Digests in it are shortened as [`Shortened`] does.
pub(super) struct Breakable<'a>(pub(super) &'a str);

impl fmt::Display for Breakable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_shortened(f, self.0, write_breakable)
    }
}

/// [`Text`] with each full digest (`sha256:` and 64 hex digits) cut to the first 12 digits, the
/// word holding it (`repo@sha256:…`, the full reference) in its tooltip: a 71-character word in
/// an error or a detail would otherwise set the width of its whole column.
pub(super) struct Shortened<'a>(pub(super) &'a str);

impl fmt::Display for Shortened<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_shortened(f, self.0, |f, text| write!(f, "{}", Text(text)))
    }
}

const SHA256: &str = "sha256:";

/// Where the next full digest in `text` starts, and where it ends.
fn next_digest(text: &str) -> Option<(usize, usize)> {
    let mut from = 0;
    while let Some(i) = text[from..].find(SHA256).map(|i| i + from) {
        let hex = &text.as_bytes()[i + SHA256.len()..];
        let digits = hex.iter().take_while(|b| b.is_ascii_hexdigit()).count();
        if digits == 64 {
            return Some((i, i + SHA256.len() + 64));
        }
        from = i + SHA256.len();
    }
    None
}

/// `text` through `plain`, each full digest shortened inside a `<span class="digest">` whose
/// title is the word around it (from the last space or quote before it).
fn write_shortened(
    f: &mut fmt::Formatter<'_>,
    text: &str,
    plain: impl Fn(&mut fmt::Formatter<'_>, &str) -> fmt::Result,
) -> fmt::Result {
    let mut rest = text;
    while let Some((start, end)) = next_digest(rest) {
        let word = rest[..start]
            .rfind(|c: char| c.is_whitespace() || "\"'(<[,;=".contains(c))
            .map_or(0, |i| i + rest[i..].chars().next().map_or(1, char::len_utf8));
        plain(f, &rest[..word])?;
        write!(f, "<span class=\"digest\" title=\"{}\">", Text(&rest[word..end]))?;
        plain(f, &rest[word..start + SHA256.len() + 12])?;
        f.write_str("</span>")?;
        rest = &rest[end..];
    }
    plain(f, rest)
}

fn write_breakable(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    let mut rest = text;
    while let Some(i) = rest.find(['/', '@']) {
        let (head, tail) = rest.split_at(i);
        if tail.starts_with('/') {
            write!(f, "{}/<wbr>", Text(head))?;
        } else {
            write!(f, "{}<wbr>@", Text(head))?;
        }
        rest = &tail[1..];
    }
    write!(f, "{}", Text(rest))
}

/// An `id` (and URL fragment) for one row: `prefix-name`, where letters, digits and `-.:/@` of the
/// name stay as they are (a run image watch reads `watch-run:registry/repo:tag`) and every other
/// byte is written `_xx`, so two names never share an id and none needs escaping.
pub(super) fn anchor(prefix: &str, name: &str) -> String {
    let mut id = format!("{prefix}-");
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-.:/@".contains(&b) {
            id.push(b as char);
        } else {
            let _ = write!(id, "_{b:02x}");
        }
    }
    id
}

/// The reference of `digest` in the repository of `tag` (`r.io/apps/app:latest` →
/// `r.io/apps/app@sha256:…`), for a tooltip.
pub(super) fn at_digest(tag: &str, digest: &str) -> String {
    let repository = tag.split_once('@').map_or(tag, |(r, _)| r);
    let name_start = repository.rfind('/').map_or(0, |i| i + 1);
    let repository = match repository[name_start..].rfind(':') {
        Some(i) => &repository[..name_start + i],
        None => repository,
    };
    format!("{repository}@{digest}")
}

/// `sha256:` and the first 12 hex digits, as `status` prints digests.
pub(super) fn short(digest: &str) -> &str {
    let end = digest.char_indices().nth("sha256:".len() + 12).map_or(digest.len(), |(i, _)| i);
    &digest[..end]
}

/// A duration in its two largest units: `45s`, `5m 10s`, `3h 5m`, `2d 4h`.
pub(super) fn span(seconds: i64) -> String {
    let s = seconds.max(0);
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{sec}s"),
        (0, 0, _) if sec == 0 => format!("{m}m"),
        (0, 0, _) => format!("{m}m {sec}s"),
        (0, _, 0) => format!("{h}h"),
        (0, _, _) => format!("{h}h {m}m"),
        (_, 0, _) => format!("{d}d"),
        _ => format!("{d}d {h}h"),
    }
}

/// How long before `now` a ledger time was, inside a `<time>` whose tooltip is the exact time.
pub(super) fn ago(text: &str, now: DateTime<Utc>) -> String {
    match parse_timestamp(text) {
        Some(t) => ago_at(t, now),
        None => format!("{}", Text(text)),
    }
}

pub(super) fn ago_at(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if (now - t).num_seconds() < 5 {
        time_element(t, "just now")
    } else {
        time_element(t, &format!("{} ago", span((now - t).num_seconds())))
    }
}

pub(super) fn time_element(t: DateTime<Utc>, shown: &str) -> String {
    format!(
        "<time datetime=\"{}\" title=\"{}\">{}</time>",
        t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        t.format("%Y-%m-%d %H:%M:%S UTC"),
        Text(shown)
    )
}

pub(super) fn kind_badge(kind: ChangeKind) -> String {
    format!("<span class=\"kind kind-{0}\">{0}</span>", kind.as_str())
}

/// The whole references the summary shortens, for its tooltip (`title=""` when there are none).
pub(super) fn full_references(change: &ChangeSummary) -> String {
    match &change.run_image {
        Some(r) => format!("run image {} → {}", r.from.as_deref().unwrap_or("?"), r.to.as_deref().unwrap_or("?")),
        None => String::new(),
    }
}

/// What a change fixes, under its row: each notice with its priority and CVEs (`data-fixes` holds
/// the ids), `fixes no known notice`, or why nothing could be matched; empty without vulnerability
/// data.
pub(super) fn fixes(change: &ChangeSummary) -> String {
    match (&change.fixes, &change.fixes_note) {
        (Some(fixes), _) if fixes.is_empty() => "<span class=\"sub fixes\">fixes no known notice</span>".into(),
        (Some(fixes), _) => {
            let ids: Vec<&str> = fixes.iter().map(|f| f.id.as_str()).collect();
            let lines: Vec<String> = fixes.iter().map(builder_monitor_core::cnb::fix_line).collect();
            format!(
                "<span class=\"sub fixes\" data-fixes=\"{}\">fixes {}</span>",
                Text(&ids.join(" ")),
                Text(&lines.join("; "))
            )
        }
        (None, Some(note)) => format!("<span class=\"sub muted\">fixes: {}</span>", Text(note)),
        (None, None) => String::new(),
    }
}

/// The summary without its leading `kind: `, which the badge beside it already says.
pub(super) fn details(change: &ChangeSummary) -> &str {
    change
        .summary
        .strip_prefix(change.kind.as_str())
        .and_then(|rest| rest.strip_prefix(": "))
        .unwrap_or(&change.summary)
}

pub(super) const STYLE: &str = r#"
:root{color-scheme:light dark;--bg:#f5f6f8;--fg:#1c2230;--muted:#606a7b;--card:#fff;--line:#e2e5ea;--head:#fafbfc;
--ok:#1a7f37;--ok-bg:#dafbe1;--err:#b42318;--err-bg:#fee4e2;--warn:#9a6700;--warn-bg:#fff4d4;
--rebase:#0969da;--rebuild:#c2410c;--unknown:#7c3aed;--none:#6e7781;--link:#0969da}
@media (prefers-color-scheme:dark){:root{--bg:#0e1117;--fg:#e6e9ef;--muted:#9aa4b5;--card:#161b22;--line:#2b323d;--head:#1b2129;
--ok:#3fb950;--ok-bg:#12361f;--err:#ff7b72;--err-bg:#3d1518;--warn:#d29922;--warn-bg:#3a2a0c;
--rebase:#4493f8;--rebuild:#f0883e;--unknown:#a371f7;--none:#8b949e;--link:#4493f8}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","Helvetica Neue",Arial,sans-serif;-webkit-text-size-adjust:100%}
main{max-width:1240px;margin:0 auto;padding:28px 20px 56px}
header{display:flex;flex-wrap:wrap;align-items:baseline;justify-content:space-between;gap:4px 24px;margin-bottom:20px}
h1{font-size:1.55rem;margin:0;letter-spacing:-.01em}
h2{font-size:1.1rem;margin:34px 0 10px;display:flex;align-items:baseline;gap:10px}
h2 .count{font-size:.8rem;font-weight:600;color:var(--muted);background:var(--line);border-radius:999px;padding:0 8px}
h3{font-size:.95rem;margin:22px 0 8px}
.meta{color:var(--muted);font-size:.85rem}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:12px}
.tile{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:12px 16px}
.tile b{display:block;font-size:1.6rem;line-height:1.2;font-variant-numeric:tabular-nums}
.tile span{color:var(--muted);font-size:.8rem;text-transform:uppercase;letter-spacing:.05em}
.tile.bad b{color:var(--err)}
.tile.warn b{color:var(--warn)}
a{color:var(--link)}
a.tile{color:inherit;text-decoration:none}
a.tile:hover,a.tile:focus-visible{border-color:var(--muted)}
.banner{background:var(--warn-bg);border:1px solid var(--warn);border-left-width:6px;border-radius:10px;padding:12px 16px;margin:0 0 16px}
.banner b{color:var(--warn)}
.banner .reason{font-weight:600}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;overflow-x:auto}
table{width:100%;border-collapse:collapse}
th{text-align:left;font-size:.72rem;font-weight:600;text-transform:uppercase;letter-spacing:.05em;color:var(--muted);background:var(--head);padding:9px 14px;border-bottom:1px solid var(--line);white-space:nowrap}
td{padding:10px 14px;border-top:1px solid var(--line);vertical-align:top;overflow-wrap:anywhere}
time,.nowrap,code.digest,.history code,span.digest{white-space:nowrap}
td:target,tr:has(>td:target)>td{background:var(--warn-bg)}
tr[data-state=failed]>td:first-child,tr[data-state=rejected]>td:first-child,tr[data-state=held]>td:first-child{box-shadow:inset 4px 0 var(--err)}
details.history{background:var(--card);border:1px solid var(--line);border-radius:10px;margin:0 0 10px}
details.history>summary{cursor:pointer;padding:10px 14px;overflow-wrap:anywhere}
details.history>summary .name{white-space:normal}
details.history>.card{border:0;border-top:1px solid var(--line);border-radius:0 0 10px 10px}
tbody tr:first-child td{border-top:0}
code{font-family:ui-monospace,SFMono-Regular,"SF Mono",Menlo,Consolas,"Liberation Mono",monospace;font-size:.84em}
.name{font-weight:600}
.sub{display:block;color:var(--muted);font-size:.8rem;margin-top:2px}
.muted{color:var(--muted)}
.empty{padding:14px 16px;color:var(--muted)}
.kind,.pill{display:inline-block;border-radius:999px;padding:0 9px;font-size:.75rem;font-weight:600;line-height:1.6;white-space:nowrap;vertical-align:1px}
.kind{color:#fff;background:var(--k)}
.kind-rebase{--k:var(--rebase)}.kind-rebuild{--k:var(--rebuild)}.kind-unknown{--k:var(--unknown)}.kind-none{--k:var(--none)}
.ok{color:var(--ok);background:var(--ok-bg)}.err{color:var(--err);background:var(--err-bg)}.warn{color:var(--warn);background:var(--warn-bg)}
.streak{font-weight:700;color:var(--err);font-variant-numeric:tabular-nums}
.arrow{color:var(--muted);padding:0 4px}
footer{margin-top:40px;color:var(--muted);font-size:.8rem}
.quiet{color:var(--muted);font-size:.85rem;margin:14px 2px 0}
.quiet .name{color:var(--fg);font-weight:500;white-space:normal;overflow-wrap:anywhere}
span.name{white-space:nowrap}
@media (max-width:760px){
main{padding:18px 12px 40px}
.tiles{grid-template-columns:repeat(auto-fit,minmax(105px,1fr));gap:8px}
.tile{padding:8px 12px}
.tile b{font-size:1.3rem}
.tile span{font-size:.7rem}
table,tbody,td{display:block}
thead{display:none}
tbody tr{display:grid;grid-template-columns:repeat(auto-fill,minmax(140px,1fr));gap:8px 14px;padding:12px 14px;border-top:1px solid var(--line)}
tbody tr:first-child{border-top:0}
td{border:0;padding:0}
td:first-child{grid-column:1/-1}
table:not(.history) td:first-child::before{display:none}
td[data-label]::before{content:attr(data-label);display:block;font-size:.66rem;font-weight:600;text-transform:uppercase;letter-spacing:.05em;color:var(--muted)}
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// Full digests in running text are cut to 12 digits; the word holding one (the reference)
    /// is the tooltip. Anything shorter or longer is no digest and stays as it is.
    #[test]
    fn digests_in_text_are_shortened_with_the_reference_as_tooltip() {
        let d = format!("sha256:{}", "0123456789abcdef".repeat(4));
        let text = format!("manifest unknown: r.io/a/b@{d}, retry (was {d})");
        assert_eq!(
            Shortened(&text).to_string(),
            format!(
                "manifest unknown: <span class=\"digest\" title=\"r.io/a/b@{d}\">r.io/a/b@sha256:0123456789ab</span>, \
                 retry (was <span class=\"digest\" title=\"{d}\">sha256:0123456789ab</span>)"
            )
        );
        assert_eq!(
            Breakable(&format!("r.io/a@{d}")).to_string(),
            format!("<span class=\"digest\" title=\"r.io/a@{d}\">r.io/<wbr>a<wbr>@sha256:0123456789ab</span>")
        );
        for not_one in ["sha256:abc".to_string(), format!("{d}0"), d[..70].to_string()] {
            assert_eq!(Shortened(&not_one).to_string(), not_one);
        }
        assert_eq!(
            Shortened(&format!("<{d}>")).to_string(),
            format!("&lt;<span class=\"digest\" title=\"{d}\">sha256:0123456789ab</span>&gt;")
        );
    }

    #[test]
    fn anchors_and_references_at_a_digest() {
        assert_eq!(anchor("watch", "paketo-jammy-base"), "watch-paketo-jammy-base");
        assert_eq!(anchor("watch", "run:r.io:5000/paketo/run:latest"), "watch-run:r.io:5000/paketo/run:latest");
        assert_eq!(anchor("image", "a_b c\"<é"), "image-a_5fb_20c_22_3c_c3_a9");
        let d = "sha256:0123";
        assert_eq!(at_digest("r.io:5000/apps/app:latest", d), "r.io:5000/apps/app@sha256:0123");
        assert_eq!(at_digest("r.io:5000/apps/app", d), "r.io:5000/apps/app@sha256:0123");
        assert_eq!(at_digest("r.io/apps/app:1@sha256:old", d), "r.io/apps/app@sha256:0123");
    }
}
