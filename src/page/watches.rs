//! The status page's Builders and Run images tables (failing watches first) and the History
//! section (each watch's changes folded).

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::html::{
    Breakable, Text, ago, anchor, details, fixes, full_references, kind_badge, short, span, time_element,
};
use crate::config::Config;
use crate::status::BuilderStatus;
use builder_monitor_core::schedule::{Schedule, parse_timestamp};

/// Whether the watch's last check failed.
pub(super) fn failing(w: &BuilderStatus) -> bool {
    w.last_check.as_ref().is_some_and(|c| c.result != "ok")
}

/// `watches` with those whose last check failed first, each group in its own order.
pub(super) fn failing_first(watches: &[BuilderStatus]) -> Vec<&BuilderStatus> {
    let mut sorted: Vec<&BuilderStatus> = watches.iter().collect();
    sorted.sort_by_key(|w| !failing(w));
    sorted
}

/// The Builders or the Run images table: one row per watch, those whose last check failed first,
/// each with an id (`watch-NAME`) that a link can point at.
pub(super) fn table(
    out: &mut String,
    watches: &[BuilderStatus],
    config: &Config,
    now: DateTime<Utc>,
    run_images: bool,
    unreachable: &crate::status::Unreachable,
) {
    out.push_str("<div class=\"card\">");
    if watches.is_empty() {
        out.push_str("<p class=\"empty\">No builders configured.</p></div>\n");
        return;
    }
    let first = if run_images { "Run image" } else { "Builder" };
    let _ = writeln!(
        out,
        "<table><thead><tr><th>{first}</th><th>Pinned</th><th>Last check</th><th>Next check</th>\
         <th>Failing</th><th>Last change</th></tr></thead><tbody>"
    );
    for w in failing_first(watches) {
        let class = if run_images { "run" } else { "builder" };
        // The id is on the first cell: the row's own attributes are what scripts and tests match.
        let _ = write!(out, "<tr class=\"{class}\" data-name=\"{}\">", Text(&w.name));
        let id = anchor("watch", &w.name);
        // Name and image.
        if run_images {
            let _ = write!(
                out,
                "<td data-label=\"{first}\" id=\"{id}\"><code class=\"name\">{}</code><span class=\"sub\">for {}</span></td>",
                Breakable(&w.image),
                Text(&w.builders.join(", "))
            );
        } else {
            let _ = write!(
                out,
                "<td data-label=\"{first}\" id=\"{id}\"><span class=\"name\">{}</span><span class=\"sub\"><code>{}</code></span></td>",
                Text(&w.name),
                Breakable(&w.image)
            );
        }
        pinned_cell(out, w, now);
        last_check_cell(out, w, now, unreachable);
        let _ = write!(out, "<td data-label=\"Next check\">{}</td>", next_check(w, config, now, run_images));
        // Failing streak.
        if w.consecutive_failures > 0 {
            let _ = write!(
                out,
                "<td data-label=\"Failing\" class=\"nowrap\"><span class=\"streak\">{}</span> <span class=\"muted\">in a row</span></td>",
                w.consecutive_failures
            );
        } else {
            out.push_str("<td data-label=\"Failing\"><span class=\"muted\">–</span></td>");
        }
        // Last change.
        out.push_str("<td data-label=\"Last change\">");
        match w.changes.first() {
            Some(c) => {
                let _ = write!(
                    out,
                    "{} {}<span class=\"sub\" title=\"{}\">{}</span><span class=\"sub\"><a href=\"#{}\">history ({})</a></span>",
                    kind_badge(c.kind),
                    ago(&c.time, now),
                    Text(&full_references(c)),
                    Text(details(c)),
                    anchor("history", &w.name),
                    w.changes.len()
                );
            }
            None => out.push_str("<span class=\"muted\">none recorded</span>"),
        }
        out.push_str("</td></tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
}

/// The Pinned cell: the pin and since when, and a digest settling.
fn pinned_cell(out: &mut String, w: &BuilderStatus, now: DateTime<Utc>) {
    out.push_str("<td data-label=\"Pinned\">");
    match &w.pinned {
        Some(p) => {
            let _ = write!(
                out,
                "<code class=\"digest\" title=\"{}\">{}</code><span class=\"sub\">since {}</span>",
                Text(&p.reference),
                Text(short(&p.digest)),
                ago(&p.since, now)
            );
        }
        None => out.push_str("<span class=\"muted\">not pinned yet</span>"),
    }
    if let Some(s) = &w.settling {
        let _ = write!(
            out,
            "<span class=\"sub\"><span class=\"pill warn\">settling</span> <code>{}</code> seen {}</span>",
            Text(short(&s.digest)),
            ago(&s.since, now)
        );
    }
    out.push_str("</td>");
}

/// The Last check cell: ok, or its reason and error (a registry unreachable named above instead).
fn last_check_cell(out: &mut String, w: &BuilderStatus, now: DateTime<Utc>, unreachable: &crate::status::Unreachable) {
    out.push_str("<td data-label=\"Last check\">");
    match &w.last_check {
        Some(c) if c.result == "ok" => {
            let _ = write!(out, "<span class=\"pill ok\">ok</span> {}", ago(&c.time, now));
        }
        Some(c) => {
            let _ = write!(
                out,
                "<span class=\"pill err\">{}</span> {}",
                Text(c.reason.as_deref().unwrap_or("error")),
                ago(&c.time, now)
            );
            match crate::status::unreachable_host(w, unreachable)
                .filter(|_| c.reason.as_deref() == Some("registry_unavailable"))
            {
                Some(host) => {
                    let _ = write!(
                        out,
                        "<span class=\"sub\">registry <code>{}</code> unreachable (above)</span>",
                        Text(host)
                    );
                }
                None => {
                    let _ = write!(out, "<span class=\"sub\">{}</span>", Breakable(c.error.as_deref().unwrap_or("")));
                }
            }
        }
        None => out.push_str("<span class=\"muted\">never</span>"),
    }
    out.push_str("</td>");
}

/// When the watch is next checked: its schedule after the last check (a run image follows the
/// schedule of the first builder naming it, as the monitor does), before jitter.
fn next_check(w: &BuilderStatus, config: &Config, now: DateTime<Utc>, run_image: bool) -> String {
    let owner = if run_image { w.builders.first().map(String::as_str) } else { Some(w.name.as_str()) };
    let Some(settings) = owner.and_then(|name| config.builder(name)) else {
        return "<span class=\"muted\">–</span>".into();
    };
    // Already escaped: the cron expression stays on one line.
    let how = match &settings.schedule {
        Schedule::Interval(_) => Text(&settings.schedule.to_string()).to_string(),
        Schedule::Cron { expression, .. } => format!("cron <code class=\"nowrap\">{}</code>", Text(expression)),
    };
    let jitter = if settings.jitter.is_zero() {
        String::new()
    } else {
        format!(" + up to {} jitter", humantime::format_duration(settings.jitter))
    };
    let Some(last) = w.last_check.as_ref().and_then(|c| parse_timestamp(&c.time)) else {
        return format!("soon<span class=\"sub\">first check; {how}</span>");
    };
    let Some(delay) = settings.schedule.delay_after(last) else {
        return format!(
            "<span class=\"muted\">only when woken</span><span class=\"sub\">{how} never fires again</span>"
        );
    };
    let Some(next) = chrono::Duration::from_std(delay).ok().and_then(|d| last.checked_add_signed(d)) else {
        return format!("<span class=\"muted\">not in this era</span><span class=\"sub\">{how}</span>");
    };
    let shown = if next <= now { "due now".to_string() } else { format!("in {}", span((next - now).num_seconds())) };
    format!("{}<span class=\"sub\">{how}{jitter}</span>", time_element(next, &shown))
}

/// A builder by its name, a run image by its reference.
fn title(w: &BuilderStatus) -> &str {
    if w.builders.is_empty() { &w.name } else { &w.image }
}

/// The History section: each watch's changes folded in a `<details>` (closed: the rows above
/// already show the newest change), whose summary says how many there are, of which kind the
/// newest was and when.
pub(super) fn history(out: &mut String, watches: &[&BuilderStatus], now: DateTime<Utc>) {
    let (moved, quiet): (Vec<&BuilderStatus>, Vec<&BuilderStatus>) =
        watches.iter().copied().partition(|w| !w.changes.is_empty());
    for w in &moved {
        changes(out, w, now);
    }
    if moved.is_empty() {
        out.push_str("<div class=\"card\"><p class=\"empty\">No changes recorded yet.</p></div>\n");
    }
    if !quiet.is_empty() && !moved.is_empty() {
        let names: Vec<String> =
            quiet.iter().map(|w| format!("<span class=\"name\">{}</span>", Text(title(w)))).collect();
        let _ = writeln!(out, "<p class=\"quiet\">No changes recorded for {}.</p>", names.join(", "));
    }
}

fn changes(out: &mut String, w: &BuilderStatus, now: DateTime<Utc>) {
    let Some(newest) = w.changes.first() else { return };
    let n = w.changes.len();
    let _ = writeln!(
        out,
        "<details class=\"history\" id=\"{}\"><summary><span class=\"name\">{}</span> · {n} change{}, \
         the newest {} {}</summary>",
        anchor("history", &w.name),
        Text(title(w)),
        if n == 1 { "" } else { "s" },
        kind_badge(newest.kind),
        ago(&newest.time, now)
    );
    out.push_str("<div class=\"card\">");
    out.push_str(
        "<table class=\"history\"><thead><tr><th>Detected</th><th>Kind</th><th>Digests</th><th>What moved</th></tr></thead><tbody>\n",
    );
    for c in &w.changes {
        let _ = writeln!(
            out,
            "<tr class=\"change\"><td data-label=\"Detected\">{}</td><td data-label=\"Kind\">{}{}</td>\
             <td data-label=\"Digests\"><code title=\"{}\">{}</code><span class=\"arrow\">→</span><code title=\"{}\">{}</code></td>\
             <td data-label=\"What moved\">{}{}<span class=\"sub\">id <code>{}</code></span></td></tr>",
            ago(&c.time, now),
            kind_badge(c.kind),
            if c.rollback { " <span class=\"pill warn\">rollback</span>" } else { "" },
            Text(&c.previous),
            Text(short(&c.previous)),
            Text(&c.current),
            Text(short(&c.current)),
            Text(details(c)),
            fixes(c),
            Text(&c.id)
        );
    }
    out.push_str("</tbody></table></div></details>\n");
}

#[cfg(test)]
mod tests {
    use super::super::tests::{change, config, now, watch};
    use super::*;
    use crate::status::LastCheck;
    use builder_monitor_core::cnb::ChangeKind;

    /// Watches that failed to reach one registry: the page says so once, in a banner above the
    /// tables, and each of their rows points at it instead of repeating the error.
    #[test]
    fn a_registry_several_watches_failed_to_reach_is_said_once() {
        let unreachable = |name: &str| {
            let mut w = checked(name, 2);
            let error = format!("registry.example.com: unavailable: HEAD cnb/{name}/manifests/latest: dns error");
            w.last_check.as_mut().unwrap().reason = Some("registry_unavailable".into());
            w.last_check.as_mut().unwrap().error = Some(error);
            w
        };
        let mut status = super::super::tests::empty(vec![unreachable("a"), unreachable("b"), checked("c", 0)]);
        status.run_images = vec![unreachable("run")];
        let html = super::super::render(&status, &config(""), now());
        let banner =
            "registry <code>registry.example.com</code> unreachable: the last checks of 3 watches failed to reach it: ";
        assert_eq!(html.matches(banner).count(), 1, "{html}");
        assert_eq!(html.matches("dns error").count(), 1, "the error once: {html}");
        let pointer = "<span class=\"sub\">registry <code>registry.example.com</code> unreachable (above)</span>";
        assert_eq!(html.matches(pointer).count(), 3, "{html}");
        // One watch alone keeps its own error in its row.
        let alone = super::super::render(&super::super::tests::empty(vec![unreachable("a")]), &config(""), now());
        assert!(!alone.contains("unreachable (above)") && alone.contains("dns error"), "{alone}");
    }

    fn checked(name: &str, failures: u32) -> BuilderStatus {
        let mut w = watch(name, &format!("registry.example.com/cnb/{name}:latest"));
        w.last_check = Some(LastCheck {
            time: "2025-03-04T11:58:00Z".into(),
            result: if failures == 0 { "ok" } else { "error" },
            error: (failures > 0).then(|| "connection refused".into()),
            reason: (failures > 0).then(|| "unreachable".into()),
        });
        w.consecutive_failures = failures;
        w
    }

    /// Failing watches lead; within each group the configured order holds. Each row carries its
    /// id on its first cell.
    #[test]
    fn failing_watches_come_first_in_their_own_order() {
        let watches = vec![
            checked("a", 0),
            checked("b", 1),
            watch("never", "registry.example.com/cnb/never:latest"),
            checked("d", 3),
            checked("e", 0),
        ];
        let order: Vec<&str> = failing_first(&watches).iter().map(|w| w.name.as_str()).collect();
        assert_eq!(order, ["b", "d", "a", "never", "e"]);

        let mut html = String::new();
        table(&mut html, &watches, &config(""), now(), false, &Default::default());
        let at = |name: &str| html.find(&format!("data-name=\"{name}\"")).unwrap();
        assert!(at("b") < at("d") && at("d") < at("a") && at("a") < at("never") && at("never") < at("e"), "{html}");
        assert!(
            html.contains("<tr class=\"builder\" data-name=\"d\"><td data-label=\"Builder\" id=\"watch-d\">"),
            "{html}"
        );
    }

    /// A run image move's summary shows 12 hex digits of each digest, the repository once; its
    /// tooltip the whole references.
    #[test]
    fn a_moves_references_are_short_with_the_whole_in_the_tooltip() {
        let full = |c: char| format!("registry.example.com/cnb/run@sha256:{}", c.to_string().repeat(64));
        let mut moved = builder_monitor_core::cnb::Change::run_image_moved(full('a'), full('b'));
        moved.platforms.clear();
        let mut c = change("jammy-2", "2025-03-04T10:00:00Z", 'b', 'a', ChangeKind::Rebase, "");
        c.summary = moved.summary();
        c.run_image = moved.run_image.clone();
        let mut jammy = watch("jammy", "registry.example.com/paketo/builder:latest");
        jammy.changes = vec![c];
        let mut html = String::new();
        table(&mut html, &[jammy], &config(""), now(), false, &Default::default());
        let short = |c: char| format!("sha256:{}…", c.to_string().repeat(12));
        let repo = "registry.example.com/cnb/run";
        assert!(html.contains(&format!("run image {} → {} ({repo})</span>", short('a'), short('b'))), "{html}");
        assert!(html.contains(&format!("title=\"run image {} → {}\"", full('a'), full('b'))), "{html}");
    }

    /// Each watch's history is a closed `<details>` whose summary names the newest change; the
    /// watch's row links to it.
    #[test]
    fn history_is_folded_under_its_newest_change() {
        let mut jammy = watch("jammy", "registry.example.com/paketo/builder:latest");
        jammy.changes = vec![
            change("jammy-2", "2025-03-04T10:00:00Z", 'b', 'a', ChangeKind::Rebase, "run image moved"),
            change("jammy-1", "2025-03-01T09:00:00Z", 'c', 'b', ChangeKind::Rebuild, "java 18.1.0 → 18.2.0"),
        ];
        let quiet = watch("heroku", "registry.example.com/heroku/builder:24");
        let mut html = String::new();
        history(&mut html, &[&jammy, &quiet], now());
        assert!(
            html.starts_with(
                "<details class=\"history\" id=\"history-jammy\"><summary><span class=\"name\">jammy</span> · \
                 2 changes, the newest <span class=\"kind kind-rebase\">rebase</span> <time datetime=\"2025-03-04T10:00:00Z\""
            ),
            "{html}"
        );
        assert!(!html.contains(" open"), "closed by default:\n{html}");
        assert_eq!(html.matches("<tr class=\"change\">").count(), 2, "{html}");
        assert!(html.contains("No changes recorded for <span class=\"name\">heroku</span>."), "{html}");

        let mut row = String::new();
        table(&mut row, &[jammy], &config(""), now(), false, &Default::default());
        assert!(row.contains("<a href=\"#history-jammy\">history (2)</a>"), "{row}");
    }

    /// A change's row lists what it fixes (ids in `data-fixes`), says `fixes no known notice` for
    /// `[]`, why nothing matched with a note, and nothing without vulnerability data.
    #[test]
    fn a_change_row_lists_its_fixes() {
        use builder_monitor_core::vulns::{Fix, Priority};
        let mut jammy = watch("jammy", "registry.example.com/paketo/builder:latest");
        let mut fixed = change("jammy-3", "2025-03-05T10:00:00Z", 'a', 'd', ChangeKind::Rebase, "run image moved");
        fixed.fixes = Some(vec![Fix {
            id: "USN-7000-1".into(),
            cves: vec!["CVE-2026-1111".into()],
            priority: Some(Priority::High),
            ..Fix::default()
        }]);
        let mut none = change("jammy-2", "2025-03-04T10:00:00Z", 'b', 'a', ChangeKind::Rebase, "run image moved");
        none.fixes = Some(vec![]);
        let mut names = change("jammy-1", "2025-03-03T10:00:00Z", 'c', 'b', ChangeKind::Rebase, "run image moved");
        names.fixes_note = Some("the new image's package list has names only, no versions".into());
        let plain = change("jammy-0", "2025-03-02T10:00:00Z", 'e', 'c', ChangeKind::Rebase, "run image moved");
        jammy.changes = vec![fixed, none, names, plain];
        let mut html = String::new();
        history(&mut html, &[&jammy], now());
        assert!(
            html.contains(
                "<span class=\"sub fixes\" data-fixes=\"USN-7000-1\">fixes USN-7000-1 (high): CVE-2026-1111</span>"
            ),
            "{html}"
        );
        assert!(html.contains("<span class=\"sub fixes\">fixes no known notice</span>"), "{html}");
        assert!(html.contains("fixes: the new image&#39;s package list has names only, no versions"), "{html}");
        let bare = "run image moved<span class=\"sub\">id <code>jammy-0</code>";
        assert!(html.contains(bare), "without vulnerability data, nothing: {html}");
    }
}
