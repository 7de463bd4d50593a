//! The status page's Git write-back section: each `[[gitops]]` target, its last pushed commit and
//! its newest action (`status`'s `gitops`).

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::html::{Breakable, Text, ago};
use crate::status::GitopsStatus;

/// The section's table (the caller writes its heading).
pub(super) fn table(out: &mut String, targets: &[GitopsStatus], now: DateTime<Utc>) {
    out.push_str("<div class=\"card\">");
    out.push_str(
        "<table class=\"gitops\"><thead><tr><th>Target</th><th>Last commit</th><th>Newest action</th></tr></thead><tbody>\n",
    );
    for t in targets {
        let commit = match (&t.commit, &t.since) {
            (Some(c), Some(since)) => format!(
                "<code class=\"digest\" title=\"{}\">{}</code> on <code>{}</code><span class=\"sub\">change <code>{}</code>, {}</span>",
                Text(c),
                Text(&c[..c.len().min(12)]),
                Text(&t.branch),
                Text(t.change.as_deref().unwrap_or("?")),
                ago(since, now)
            ),
            _ => format!("<span class=\"muted\">no commit yet</span> (to <code>{}</code>)", Text(&t.branch)),
        };
        let tone = match t.state.as_str() {
            "succeeded" | "skipped" => "ok",
            "failed" | "held" | "rejected" => "err",
            "none" => "muted",
            _ => "warn",
        };
        let mut state = format!("<span class=\"pill {tone}\">{}</span>", Text(&t.state));
        if let Some(detail) = &t.detail {
            let _ = write!(state, "<span class=\"sub\">{}</span>", Breakable(detail));
        }
        let _ = writeln!(
            out,
            "<tr class=\"gitops-target\" data-target=\"{}\"><td data-label=\"Target\"><span class=\"name\">{}</span><span class=\"sub\">{}</span></td>\
             <td data-label=\"Last commit\">{commit}</td><td data-label=\"Newest action\">{state}</td></tr>",
            Text(&t.name),
            Text(&t.name),
            Breakable(&t.repo),
        );
    }
    out.push_str("</tbody></table></div>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_target_shows_its_last_commit_and_newest_action() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z").unwrap().with_timezone(&Utc);
        let targets = vec![
            GitopsStatus {
                name: "fleet".into(),
                repo: "https://git.example.com/shop/fleet.git".into(),
                branch: "main".into(),
                commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
                change: Some("run-abc-2".into()),
                since: Some("2026-12-01T09:58:00.000Z".into()),
                state: "skipped".into(),
                detail: Some("nothing to commit".into()),
                batch: None,
            },
            GitopsStatus {
                name: "review".into(),
                repo: "file:///srv/git/<review>.git".into(),
                branch: "builder-monitor/updates".into(),
                commit: None,
                change: None,
                since: None,
                state: "failed".into(),
                detail: Some("git fetch: refused the credentials".into()),
                batch: None,
            },
        ];
        let mut html = String::new();
        table(&mut html, &targets, now);
        assert_eq!(html.matches("<tr class=\"gitops-target\"").count(), 2);
        assert!(html.contains("<code class=\"digest\" title=\"0123456789abcdef0123456789abcdef01234567\">0123456789ab</code> on <code>main</code>"), "{html}");
        assert!(html.contains("change <code>run-abc-2</code>"), "{html}");
        assert!(html.contains("<span class=\"pill ok\">skipped</span>"), "{html}");
        assert!(html.contains("no commit yet</span> (to <code>builder-monitor/updates</code>)"), "{html}");
        assert!(html.contains("<span class=\"pill err\">failed</span>"), "{html}");
        assert!(html.contains("&lt;review&gt;"), "escaped: {html}");
    }
}
