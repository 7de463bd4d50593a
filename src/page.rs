//! The status page served at `GET /`: the `status` report as one self-contained HTML document
//! (inline CSS, no scripts, no external assets) that reloads itself every [`REFRESH_SECONDS`].

mod deploys;
mod html;

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::ledger::{ActionState, OpenAction};
use crate::status::{BuilderStatus, Status};
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::schedule::{Schedule, parse_timestamp};
use html::{Breakable, STYLE, Text, ago, ago_at, details, kind_badge, short, span, time_element};

/// How often the page reloads itself.
pub const REFRESH_SECONDS: u32 = 30;

/// The page loads nothing and runs nothing; only its own inline style applies.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The whole page for `status`, as of `now`; `config` supplies schedules and the runner.
pub fn render(status: &Status, config: &Config, now: DateTime<Utc>) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let failing = status.builders.iter().chain(&status.run_images).filter(|w| w.consecutive_failures > 0).count();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\n\
         <title>builder-monitor{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n\
         <header><h1>builder-monitor</h1><div class=\"meta\">as of {} · reloads every {REFRESH_SECONDS} s</div></header>\n",
        if failing > 0 { format!(" ({failing} failing)") } else { String::new() },
        time_element(now, &now.format("%Y-%m-%d %H:%M:%S UTC").to_string()),
    );
    tiles(&mut out, status, failing);

    section(&mut out, "builders", "Builders", Some(status.builders.len()));
    watch_table(&mut out, &status.builders, config, now, false);
    if !status.run_images.is_empty() {
        section(&mut out, "run-images", "Run images", Some(status.run_images.len()));
        watch_table(&mut out, &status.run_images, config, now, true);
    }

    section(&mut out, "history", "History", None);
    let (moved, quiet): (Vec<&BuilderStatus>, Vec<&BuilderStatus>) =
        status.builders.iter().chain(&status.run_images).partition(|w| !w.changes.is_empty());
    for w in &moved {
        history(&mut out, w, now);
    }
    if moved.is_empty() {
        out.push_str("<div class=\"card\"><p class=\"empty\">No changes recorded yet.</p></div>\n");
    }
    if !quiet.is_empty() && !moved.is_empty() {
        let names: Vec<String> =
            quiet.iter().map(|w| format!("<span class=\"name\">{}</span>", Text(title(w)))).collect();
        let _ = writeln!(out, "<p class=\"quiet\">No changes recorded for {}.</p>", names.join(", "));
    }

    section(&mut out, "actions", "Open actions", Some(status.pending.len()));
    actions(&mut out, status, config, now);

    if !status.deploys.is_empty() {
        section(&mut out, "deploys", "Deploys", Some(status.deploys.len()));
        deploys::table(&mut out, &status.deploys, now);
    }

    section(&mut out, "dead-letters", "Dead letters", Some(status.dead_letters.len()));
    dead_letters(&mut out, status, now);

    let _ = write!(
        out,
        "<footer>The same data as <code>builder-monitor status</code> and <code>/api/v1/builders</code>.</footer>\n\
         </main>\n</body>\n</html>\n"
    );
    out
}

fn tiles(out: &mut String, status: &Status, failing: usize) {
    let tile = |out: &mut String, n: usize, label: &str, bad: bool| {
        let class = if bad && n > 0 { "tile bad" } else { "tile" };
        let _ = write!(out, "<div class=\"{class}\"><b>{n}</b><span>{label}</span></div>");
    };
    out.push_str("<div class=\"tiles\">");
    tile(out, status.builders.len(), "builders", false);
    tile(out, status.run_images.len(), "run images", false);
    tile(out, failing, "failing", true);
    tile(out, status.pending.len(), "open actions", false);
    tile(out, status.dead_letters.len(), "dead letters", true);
    out.push_str("</div>\n");
}

fn section(out: &mut String, id: &str, title: &str, count: Option<usize>) {
    let count = count.map(|n| format!(" <span class=\"count\">{n}</span>")).unwrap_or_default();
    let _ = writeln!(out, "<h2 id=\"{id}\">{title}{count}</h2>");
}

fn watch_table(out: &mut String, watches: &[BuilderStatus], config: &Config, now: DateTime<Utc>, run_images: bool) {
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
    for w in watches {
        let id = if run_images { "run" } else { "builder" };
        let _ = write!(out, "<tr class=\"{id}\" data-name=\"{}\">", Text(&w.name));
        // Name and image.
        if run_images {
            let _ = write!(
                out,
                "<td data-label=\"{first}\"><code class=\"name\">{}</code><span class=\"sub\">for {}</span></td>",
                Breakable(&w.image),
                Text(&w.builders.join(", "))
            );
        } else {
            let _ = write!(
                out,
                "<td data-label=\"{first}\"><span class=\"name\">{}</span><span class=\"sub\"><code>{}</code></span></td>",
                Text(&w.name),
                Breakable(&w.image)
            );
        }
        // Pin.
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
        // Last check.
        out.push_str("<td data-label=\"Last check\">");
        match &w.last_check {
            Some(c) if c.result == "ok" => {
                let _ = write!(out, "<span class=\"pill ok\">ok</span> {}", ago(&c.time, now));
            }
            Some(c) => {
                let _ = write!(
                    out,
                    "<span class=\"pill err\">{}</span> {}<span class=\"sub\">{}</span>",
                    Text(c.reason.as_deref().unwrap_or("error")),
                    ago(&c.time, now),
                    Breakable(c.error.as_deref().unwrap_or(""))
                );
            }
            None => out.push_str("<span class=\"muted\">never</span>"),
        }
        out.push_str("</td>");
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
                    "{} {}<span class=\"sub\">{}</span>",
                    kind_badge(c.kind),
                    ago(&c.time, now),
                    Text(details(c))
                );
            }
            None => out.push_str("<span class=\"muted\">none recorded</span>"),
        }
        out.push_str("</td></tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
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

fn history(out: &mut String, w: &BuilderStatus, now: DateTime<Utc>) {
    let _ = writeln!(out, "<h3>{}</h3>", Text(title(w)));
    out.push_str("<div class=\"card\">");
    out.push_str(
        "<table class=\"history\"><thead><tr><th>Detected</th><th>Kind</th><th>Digests</th><th>What moved</th></tr></thead><tbody>\n",
    );
    for c in &w.changes {
        let _ = writeln!(
            out,
            "<tr class=\"change\"><td data-label=\"Detected\">{}</td><td data-label=\"Kind\">{}{}</td>\
             <td data-label=\"Digests\"><code title=\"{}\">{}</code><span class=\"arrow\">→</span><code title=\"{}\">{}</code></td>\
             <td data-label=\"What moved\">{}<span class=\"sub\">id <code>{}</code></span></td></tr>",
            ago(&c.time, now),
            kind_badge(c.kind),
            if c.rollback { " <span class=\"pill warn\">rollback</span>" } else { "" },
            Text(&c.previous),
            Text(short(&c.previous)),
            Text(&c.current),
            Text(short(&c.current)),
            Text(details(c)),
            Text(&c.id)
        );
    }
    out.push_str("</tbody></table></div>\n");
}

fn actions(out: &mut String, status: &Status, config: &Config, now: DateTime<Utc>) {
    out.push_str("<div class=\"card\">");
    // The gates that hold every action, above the list they hold.
    if let Some(f) = &status.rollout.frozen {
        let reason = f.reason.as_deref().map(|r| format!(": {}", Text(r))).unwrap_or_default();
        let _ = writeln!(
            out,
            "<p class=\"empty\" id=\"frozen\"><span class=\"pill warn\">frozen</span> since {} by {}{reason}; \
             no rebase or rebuild starts until <code>builder-monitor unfreeze</code>.</p>",
            time_element(f.since, &ago_at(f.since, now)),
            Text(&f.by)
        );
    }
    if let Some(next) = &status.rollout.next_window {
        let _ = writeln!(
            out,
            "<p class=\"empty\" id=\"window\">Outside the roll-out windows: the next opens {}.</p>",
            Text(next)
        );
    }
    if status.pending.is_empty() {
        out.push_str("<p class=\"empty\">No rebases or rebuilds waiting.</p></div>\n");
        return;
    }
    let running = status.pending.iter().filter(|a| a.state == ActionState::Running).count();
    out.push_str(
        "<table class=\"actions\"><thead><tr><th>Image</th><th>Action</th><th>State</th><th>Why it waits</th><th>Change</th></tr></thead><tbody>\n",
    );
    for a in &status.pending {
        let state = if a.state == ActionState::Running { "ok" } else { "warn" };
        let _ = writeln!(
            out,
            "<tr class=\"action\"><td data-label=\"Image\"><span class=\"name\">{}</span></td><td data-label=\"Action\">{}</td>\
             <td data-label=\"State\"><span class=\"pill {state}\">{}</span><span class=\"sub\">{}</span></td>\
             <td data-label=\"Why it waits\">{}</td><td data-label=\"Change\"><code>{}</code></td></tr>",
            Text(&a.image),
            Text(&a.action),
            Text(a.shown_state()),
            if a.attempts == 0 { "not tried yet".to_string() } else { attempts(a.attempts) },
            why_waiting(a, status, config, running, now),
            Text(&a.change)
        );
    }
    out.push_str("</tbody></table></div>\n");
}

/// What an open action waits for: the runner, its turn, or a retry after a failed attempt.
fn why_waiting(a: &OpenAction, status: &Status, config: &Config, running: usize, now: DateTime<Utc>) -> String {
    let max_attempts = config.runner.max_attempts;
    if a.state == ActionState::Running {
        return format!("running attempt {} of {max_attempts}", a.attempts);
    }
    if let Some(why) = &a.waiting_for {
        return Text(why).to_string();
    }
    if ActionKind::parse(&a.action).is_some_and(|kind| !crate::runner::backend::carried_out(&config.runner, kind)) {
        return format!("runner <code>{}</code> records actions and never runs them", config.runner.kind.as_str());
    }
    let when = match a.next_attempt {
        t if t > now => format!("at {}", time_element(t, &format!("in {}", span((t - now).num_seconds())))),
        _ => format!("now, for a free runner slot ({running} of {} busy)", config.runner.max_concurrent),
    };
    if a.attempts == 0 {
        return format!("runs {when}");
    }
    let detail = status
        .actions
        .iter()
        .find(|r| r.change == a.change && r.image == a.image && r.action == a.action)
        .and_then(|r| r.detail.as_deref());
    format!(
        "attempt {} of {max_attempts} failed{}; retries {when}",
        a.attempts,
        detail.map(|d| format!(": {}", Text(d))).unwrap_or_default()
    )
}

fn attempts(n: u32) -> String {
    format!("{n} attempt{}", if n == 1 { "" } else { "s" })
}

fn dead_letters(out: &mut String, status: &Status, now: DateTime<Utc>) {
    out.push_str("<div class=\"card\">");
    if status.dead_letters.is_empty() {
        out.push_str("<p class=\"empty\">Every alert was delivered or is still being retried.</p></div>\n");
        return;
    }
    out.push_str(
        "<table class=\"dead-letters\"><thead><tr><th>Event</th><th>Alert</th><th>Gave up</th><th>Last answer</th></tr></thead><tbody>\n",
    );
    for d in &status.dead_letters {
        let _ = writeln!(
            out,
            "<tr class=\"dead-letter\"><td data-label=\"Event\"><span class=\"name\">{}</span><span class=\"sub\"><code>{}</code></span></td>\
             <td data-label=\"Alert\">{}</td><td data-label=\"Gave up\">{}<span class=\"sub\">after {}</span></td>\
             <td data-label=\"Last answer\">{}</td></tr>",
            Text(&d.event_type),
            Text(&d.event),
            Text(&d.alert),
            ago_at(d.time, now),
            attempts(d.attempts),
            Text(d.last_status.as_deref().unwrap_or("no response"))
        );
    }
    out.push_str("</tbody></table></div>\n");
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ledger::{ActionRecord, DeadLetter};
    use crate::status::{ChangeSummary, LastCheck, PinnedStatus};
    use builder_monitor_core::cnb::ChangeKind;

    const HOSTILE: &str = "<script>alert(\"x\")</script>\u{1b}[31m'&\u{202e}";

    fn config(runner: &str) -> Config {
        let text = format!(
            "[monitor]\nstate = \"x.db\"\ninterval = \"10m\"\njitter = \"30s\"\n\n[[builders]]\nname = \"jammy\"\n\
             image = \"registry.example.com/paketo/builder:latest\"\n\n[[builders]]\nname = \"heroku\"\n\
             image = \"registry.example.com/heroku/builder:24\"\nschedule = \"0 0 * * * *\"\n\n{runner}"
        );
        Config::parse(std::path::Path::new("/config.toml"), &text).unwrap()
    }

    fn now() -> DateTime<Utc> {
        parse_timestamp("2025-03-04T12:00:00Z").unwrap()
    }

    fn digest(fill: char) -> String {
        format!("sha256:{}", fill.to_string().repeat(64))
    }

    fn watch(name: &str, image: &str) -> BuilderStatus {
        BuilderStatus {
            name: name.into(),
            image: image.into(),
            pinned: None,
            platforms: BTreeMap::new(),
            last_check: None,
            next_check: None,
            last_change: None,
            consecutive_failures: 0,
            settling: None,
            run_image: None,
            builders: Vec::new(),
            changes: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn change(id: &str, time: &str, previous: char, current: char, kind: ChangeKind, details: &str) -> ChangeSummary {
        ChangeSummary {
            id: id.into(),
            time: time.into(),
            previous: digest(previous),
            current: digest(current),
            kind,
            reasons: Vec::new(),
            summary: format!("{}: {details}", kind.as_str()),
            rollback: false,
            packages: None,
        }
    }

    fn empty(builders: Vec<BuilderStatus>) -> Status {
        Status {
            builders,
            run_images: Vec::new(),
            images: Vec::new(),
            pending: Vec::new(),
            rollout: Default::default(),
            actions: Vec::new(),
            deliveries: Vec::new(),
            dead_letters: Vec::new(),
            deploys: Vec::new(),
        }
    }

    /// Every tag the page opens, by name (`<td` → `td`).
    fn tags(html: &str) -> Vec<String> {
        html.split('<')
            .skip(1)
            .filter(|t| !t.starts_with('/') && !t.starts_with('!'))
            .map(|t| t.split(|c: char| !c.is_ascii_alphanumeric()).next().unwrap().to_ascii_lowercase())
            .collect()
    }

    #[test]
    fn registry_text_is_escaped_everywhere() {
        let mut jammy = watch(HOSTILE, &format!("registry.example.com/{HOSTILE}:latest"));
        jammy.pinned = Some(PinnedStatus {
            digest: digest('a'),
            reference: format!("x@{HOSTILE}"),
            since: "2025-03-04T11:00:00Z".into(),
        });
        jammy.last_check = Some(LastCheck {
            time: "2025-03-04T11:59:00Z".into(),
            result: "error",
            error: Some(format!("registry said {HOSTILE}")),
            reason: Some("invalid_response".into()),
        });
        jammy.consecutive_failures = 2;
        jammy.changes = vec![change(HOSTILE, "2025-03-04T11:00:00Z", 'b', 'a', ChangeKind::Rebuild, HOSTILE)];
        let mut status = empty(vec![jammy]);
        status.pending.push(OpenAction {
            change: HOSTILE.into(),
            image: HOSTILE.into(),
            action: "rebuild".into(),
            state: ActionState::Pending,
            attempts: 1,
            next_attempt: parse_timestamp("2025-03-04T12:05:00.000Z").unwrap(),
            key: "k".into(),
            wave: 1,
            detail: None,
            waiting_for: None,
            gate: None,
        });
        status.actions.push(ActionRecord {
            key: "k".into(),
            change: HOSTILE.into(),
            image: HOSTILE.into(),
            action: "rebuild".into(),
            state: ActionState::Pending,
            attempts: 1,
            next_attempt: parse_timestamp("2025-03-04T12:05:00.000Z").unwrap(),
            detail: Some(format!("exit 1: {HOSTILE}")),
            output_tail: None,
            updated: parse_timestamp("2025-03-04T11:59:00Z").unwrap(),
            wave: 1,
            needs_approval: false,
            released: false,
            decided_by: None,
            decided_at: None,
            created: parse_timestamp("2025-03-04T11:00:00Z").unwrap(),
            progress: None,
            holds: false,
        });
        status.dead_letters.push(DeadLetter {
            event: HOSTILE.into(),
            event_type: "builder.changed".into(),
            alert: HOSTILE.into(),
            attempts: 5,
            last_status: Some(HOSTILE.into()),
            time: parse_timestamp("2025-03-04T11:30:00Z").unwrap(),
        });
        let html = render(
            &status,
            &config("[runner]\ntype = \"exec\"\n[runner.exec]\nrebuild = [\"true\"]\nrebase = [\"true\"]\n"),
            now(),
        );

        // Only the page's own elements: nothing the registry sent became markup.
        let allowed = [
            "html", "head", "meta", "title", "style", "body", "main", "header", "h1", "h2", "h3", "div", "b", "span",
            "p", "table", "thead", "tbody", "tr", "th", "td", "code", "time", "footer", "wbr",
        ];
        for tag in tags(&html) {
            assert!(allowed.contains(&tag.as_str()), "unexpected <{tag}> in:\n{html}");
        }
        assert!(!html.to_ascii_lowercase().contains("<script"));
        let escaped = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;\\x1b[31m&#39;&amp;\\u{202e}";
        // Name, image, reference, error, summary, change id, action, detail, alert, answer.
        assert!(html.matches(escaped).count() >= 12, "{html}");
        assert!(html.contains(&format!("data-name=\"{escaped}\"")), "attribute values stay quoted");
        assert!(!html.chars().any(|c| c != '\n' && builder_monitor_core::text::is_unsafe(c)), "raw control characters");
        assert!(html.contains(&format!("exit 1: {escaped}; retries at")), "{html}");
    }

    #[test]
    fn an_empty_ledger_says_so() {
        let status = empty(vec![
            watch("jammy", "registry.example.com/paketo/builder:latest"),
            watch("heroku", "registry.example.com/heroku/builder:24"),
        ]);
        let html = render(&status, &config(""), now());
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains(&format!("<meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">")));
        assert_eq!(html.matches("<tr class=\"builder\"").count(), 2);
        assert_eq!(html.matches("not pinned yet").count(), 2);
        assert_eq!(html.matches(">never<").count(), 2);
        assert!(html.contains("No changes recorded yet."));
        assert!(html.contains("No rebases or rebuilds waiting."));
        assert!(html.contains("Every alert was delivered or is still being retried."));
        assert!(!html.contains("id=\"run-images\""), "no run image section without run images");
        assert!(!html.contains("<tr class=\"change\"") && !html.contains("<tr class=\"action\""));
        assert!(html.contains("soon<span class=\"sub\">first check; every 10m</span>"), "{html}");

        let none = render(&empty(Vec::new()), &config(""), now());
        assert!(none.contains("No builders configured."));
        assert!(!html.contains("id=\"frozen\"") && !html.contains("id=\"window\""));
    }

    /// A freeze and a closed window are said above the actions they hold, the reason escaped.
    #[test]
    fn a_freeze_and_a_closed_window_are_shown() {
        let mut status = empty(vec![watch("jammy", "registry.example.com/paketo/builder:latest")]);
        status.rollout.frozen = Some(builder_monitor_core::rollout::Freeze {
            since: parse_timestamp("2025-03-04T11:00:00Z").unwrap(),
            reason: Some(HOSTILE.into()),
            by: HOSTILE.into(),
        });
        status.rollout.next_window = Some("Mon 09:00 Europe/Berlin".into());
        let html = render(&status, &config(""), now());
        assert!(html.contains("<span class=\"pill warn\">frozen</span> since"), "{html}");
        assert!(html.contains("the next opens Mon 09:00 Europe/Berlin."), "{html}");
        assert!(!html.contains(HOSTILE), "the reason is escaped");
    }

    #[test]
    fn rows_show_pins_checks_history_actions_and_dead_letters() {
        let mut jammy = watch("jammy", "registry.example.com/paketo/builder:latest");
        jammy.pinned = Some(PinnedStatus {
            digest: digest('a'),
            reference: format!("registry.example.com/paketo/builder@{}", digest('a')),
            since: "2025-03-02T10:00:00Z".into(),
        });
        jammy.last_check =
            Some(LastCheck { time: "2025-03-04T11:58:00Z".into(), result: "ok", error: None, reason: None });
        jammy.changes = vec![
            change("jammy-2", "2025-03-02T10:00:00Z", 'b', 'a', ChangeKind::Rebase, "run image moved"),
            change(
                "jammy-1",
                "2025-03-01T09:00:00Z",
                'c',
                'b',
                ChangeKind::Rebuild,
                "paketo-buildpacks/java 18.1.0 → 18.2.0",
            ),
        ];
        let mut heroku = watch("heroku", "registry.example.com/heroku/builder:24");
        heroku.last_check = Some(LastCheck {
            time: "2025-03-04T11:00:05Z".into(),
            result: "error",
            error: Some("connection refused".into()),
            reason: Some("unreachable".into()),
        });
        heroku.consecutive_failures = 4;
        let mut run = watch("run-abc", "registry.example.com/paketo/run:latest");
        run.builders = vec!["jammy".into()];
        run.pinned =
            Some(PinnedStatus { digest: digest('d'), reference: "r".into(), since: "2025-03-04T09:00:00Z".into() });
        let mut status = empty(vec![jammy, heroku]);
        status.run_images.push(run);
        let open = |image: &str, state, attempts, next: &str| OpenAction {
            change: "jammy-2".into(),
            image: image.into(),
            action: "rebase".into(),
            state,
            attempts,
            next_attempt: parse_timestamp(next).unwrap(),
            key: "k".into(),
            wave: 1,
            detail: None,
            waiting_for: None,
            gate: None,
        };
        status.pending = vec![
            open("petclinic", ActionState::Running, 1, "2025-03-04T11:00:00.000Z"),
            open("orders", ActionState::Pending, 0, "2025-03-04T11:00:00.000Z"),
            open("billing", ActionState::Pending, 2, "2025-03-04T12:10:00.000Z"),
        ];
        status.dead_letters.push(DeadLetter {
            event: "evt-1".into(),
            event_type: "builder.changed".into(),
            alert: "platform-team".into(),
            attempts: 1,
            last_status: Some("HTTP 400".into()),
            time: parse_timestamp("2025-03-03T12:00:00Z").unwrap(),
        });
        let runner = "[runner]\ntype = \"exec\"\nmax_concurrent = 1\nmax_attempts = 3\n[runner.exec]\nrebuild = [\"true\"]\nrebase = [\"true\"]\n";
        let html = render(&status, &config(runner), now());

        assert_eq!(html.matches("<tr class=\"builder\"").count(), 2);
        assert_eq!(html.matches("<tr class=\"run\"").count(), 1);
        assert!(html.contains(&format!("<code class=\"digest\" title=\"registry.example.com/paketo/builder@{0}\">sha256:aaaaaaaaaaaa</code><span class=\"sub\">since <time datetime=\"2025-03-02T10:00:00Z\" title=\"2025-03-02 10:00:00 UTC\">2d 2h ago</time>", digest('a'))), "{html}");
        // Interval: last check + 10m; cron: the next full hour after the last check.
        assert!(html.contains(">in 8m</time><span class=\"sub\">every 10m + up to 30s jitter</span>"), "{html}");
        assert!(
            html.contains(">due now</time><span class=\"sub\">cron <code class=\"nowrap\">0 0 * * * *</code>"),
            "{html}"
        );
        assert!(html.contains("<span class=\"pill err\">unreachable</span>"));
        assert!(html.contains("<span class=\"streak\">4</span>"));
        assert!(html.contains("<span class=\"pill ok\">ok</span> <time datetime=\"2025-03-04T11:58:00Z\""));
        // The last change in the builder row, every change in the history, newest first.
        assert!(html.contains("<span class=\"kind kind-rebase\">rebase</span> <time"));
        assert_eq!(html.matches("<tr class=\"change\"").count(), 2);
        let rebase = html.find("jammy-2</code>").unwrap();
        assert!(rebase < html.find("jammy-1</code>").unwrap());
        assert!(html.contains("<code title=\"sha256:cccc"));
        assert!(html.contains("paketo-buildpacks/java 18.1.0 → 18.2.0<span class=\"sub\">"));
        assert!(html.contains("<span class=\"kind kind-rebuild\">rebuild</span>"));
        assert!(
            html.contains("No changes recorded for <span class=\"name\">heroku</span>, <span class=\"name\">registry.example.com/paketo/run:latest</span>."),
            "{html}"
        );
        // Why each action waits.
        assert_eq!(html.matches("<tr class=\"action\"").count(), 3);
        assert!(html.contains("running attempt 1 of 3"));
        assert!(html.contains("runs now, for a free runner slot (1 of 1 busy)"));
        assert!(html.contains("attempt 2 of 3 failed; retries at <time datetime=\"2025-03-04T12:10:00Z\""), "{html}");
        assert_eq!(html.matches("<tr class=\"dead-letter\"").count(), 1);
        assert!(html.contains("HTTP 400"));
        assert!(html.contains("<title>builder-monitor (1 failing)</title>"));

        let recorded = render(&status, &config(""), now());
        assert!(recorded.contains("runner <code>none</code> records actions and never runs them"));
        // With rebases in the daemon, runner `none` still carries them out; only a rebuild waits for good.
        let in_daemon = config("[runner]\nrebase = \"registry\"\n");
        let html = render(&status, &in_daemon, now());
        assert!(!html.contains("never runs them") && html.contains("runs now, for a free runner slot"), "{html}");
        status.pending[1].action = "rebuild".into();
        let html = render(&status, &in_daemon, now());
        assert_eq!(html.matches("runner <code>none</code> records actions and never runs them").count(), 1);
    }

    #[test]
    fn spans_and_short_digests() {
        assert_eq!(span(-3), "0s");
        assert_eq!(span(45), "45s");
        assert_eq!(span(300), "5m");
        assert_eq!(span(310), "5m 10s");
        assert_eq!(span(3 * 3600 + 300 + 9), "3h 5m");
        assert_eq!(span(7200), "2h");
        assert_eq!(span(2 * 86_400 + 4 * 3600 + 60), "2d 4h");
        assert_eq!(short(&digest('a')), "sha256:aaaaaaaaaaaa");
        assert_eq!(Breakable("r.io/a/<b>@sha256:1").to_string(), "r.io/<wbr>a/<wbr>&lt;b&gt;<wbr>@sha256:1");
        assert_eq!(short("sha256:ab"), "sha256:ab");
        assert_eq!(short("ä".repeat(30).as_str()).chars().count(), 19, "cut on a character boundary");
    }
}
