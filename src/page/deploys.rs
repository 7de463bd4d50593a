//! The status page's Deploys section: each configured workload of an app image, the digest its
//! newest deploy wrote and where that deploy stands (`status`'s `deploys`).

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::html::{Breakable, Text, ago, short};
use crate::status::DeployStatus;

/// The pill of a state: green once healthy, red when failed, held or put back, amber otherwise.
/// The state itself is a class too (`failed`, `held`), for whoever styles or reads the page.
fn pill(d: &DeployStatus) -> String {
    let state = if d.held.is_some() && d.state != "held" { format!("{} held", d.state) } else { d.state.clone() };
    let tone = match d.state.as_str() {
        "healthy" | "succeeded" => "ok",
        "failed" | "held" | "undone" | "rejected" => "err",
        "none" => "muted",
        _ => "warn",
    };
    let tone = if d.held.is_some() { "err" } else { tone };
    format!("<span class=\"pill {tone} {}\">{}</span>", Text(&state), Text(&d.state))
}

/// The section's table (the caller writes its heading).
pub(super) fn table(out: &mut String, deploys: &[DeployStatus], now: DateTime<Utc>) {
    out.push_str("<div class=\"card\">");
    out.push_str(
        "<table class=\"deploys\"><thead><tr><th>Image</th><th>Workload</th><th>Digest</th><th>State</th><th>Since</th></tr></thead><tbody>\n",
    );
    for d in deploys {
        let container = match &d.container {
            Some(c) => format!("container <code>{}</code>", Text(c)),
            None => "the app's containers".to_string(),
        };
        let digest = match &d.digest {
            Some(digest) => format!("<code class=\"digest\" title=\"{}\">{}</code>", Text(digest), Text(short(digest))),
            None => "<span class=\"muted\">–</span>".to_string(),
        };
        let mut state = pill(d);
        if let Some(detail) = &d.detail {
            let _ = write!(state, "<span class=\"sub\">{}</span>", Breakable(detail));
        }
        if let Some(held) = &d.held {
            let _ = write!(state, "<span class=\"sub held\">{}</span>", Breakable(held));
        }
        let since = match &d.since {
            Some(since) => ago(since, now),
            None => "<span class=\"muted\">no deploy yet</span>".to_string(),
        };
        let _ = writeln!(
            out,
            "<tr class=\"deploy\" data-image=\"{}\" data-workload=\"{}/{}\"><td data-label=\"Image\"><span class=\"name\">{}</span></td>\
             <td data-label=\"Workload\">{} <code>{}/{}</code><span class=\"sub\">{container}</span></td>\
             <td data-label=\"Digest\">{digest}</td><td data-label=\"State\">{state}</td><td data-label=\"Since\">{since}</td></tr>",
            Text(&d.image),
            Text(&d.namespace),
            Text(&d.name),
            Text(&d.image),
            d.kind,
            Text(&d.namespace),
            Text(&d.name),
        );
    }
    out.push_str("</tbody></table></div>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use builder_monitor_core::deploy::WorkloadKind;

    /// Names and details from the cluster and the ledger stay text; the state is the pill's
    /// class, with `held` beside it when the deploy holds its image.
    #[test]
    fn rows_escape_their_text_and_class_their_state() {
        let hostile = "<b onclick=\"x\">";
        let d = DeployStatus {
            image: hostile.into(),
            kind: WorkloadKind::StatefulSet,
            namespace: "shop".into(),
            name: hostile.into(),
            container: Some(hostile.into()),
            digest: Some(format!("sha256:{}", "c".repeat(64))),
            state: "failed".into(),
            healthy: false,
            since: Some("2026-12-01T09:00:00.000Z".into()),
            held: Some(format!("held: {hostile}")),
            detail: Some(hostile.into()),
            action: Some("bm-1".into()),
            change: Some("c1".into()),
        };
        let now = builder_monitor_core::schedule::parse_timestamp("2026-12-01T10:00:00Z").unwrap();
        let mut html = String::new();
        table(&mut html, &[d], now);
        assert!(!html.contains(hostile) && html.contains("&lt;b onclick=&quot;x&quot;&gt;"), "{html}");
        assert!(html.contains("<span class=\"pill err failed held\">failed</span>"), "{html}");
        assert!(html.contains(">sha256:cccccccccccc</code>"), "{html}");
        assert!(html.contains(">1h ago</time>"), "{html}");
    }
}
