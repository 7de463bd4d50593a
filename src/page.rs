//! The status page served at `GET /`: the `status` report as one self-contained HTML document
//! (inline CSS, no scripts, no external assets) that reloads itself every [`REFRESH_SECONDS`]:
//! a freeze banner and tiles on top (`summary`), then the watches (`watches`), app images
//! (`images`), open actions, deploys (`deploys`), Git write-back (`gitops`), the registries
//! (`registries`), each watch's folded history, and dead letters.

mod deploys;
mod gitops;
mod html;
mod images;
mod registries;
mod summary;
mod watches;

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::ledger::{ActionState, OpenAction};
use crate::status::{BuilderStatus, Status};
use builder_monitor_core::plan::ActionKind;
use html::{STYLE, Shortened, Text, ago_at, span, time_element};

/// How often the page reloads itself.
pub const REFRESH_SECONDS: u32 = 30;

/// The page loads nothing and runs nothing; only its own inline style applies.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The whole page for `status`, as of `now`; `config` supplies schedules and the runner.
pub fn render(status: &Status, config: &Config, now: DateTime<Utc>) -> String {
    render_noted(status, config, now, &[])
}

/// [`render`] with `notes` (what the daemon's state says, e.g. `vulnerability data: 5 h old`)
/// under the freeze banner.
pub fn render_noted(status: &Status, config: &Config, now: DateTime<Utc>, notes: &[String]) -> String {
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
    summary::banner(&mut out, status, now);
    for note in notes {
        let _ = writeln!(out, "<div class=\"banner\" role=\"status\">{}</div>", html::Text(note));
    }
    // A registry several watches failed to reach: said once, not in every row.
    let unreachable = crate::status::unreachable_registries(status.builders.iter().chain(&status.run_images));
    for (host, (watches, sample)) in &unreachable {
        let _ = writeln!(
            out,
            "<div class=\"banner\" role=\"status\" data-unreachable=\"{}\">registry <code>{}</code> unreachable: the last checks of {watches} watches failed to reach it: {}</div>",
            html::Text(host),
            html::Text(host),
            html::Breakable(sample)
        );
    }
    summary::tiles(&mut out, status, failing);

    section(&mut out, "builders", "Builders", Some(status.builders.len()));
    watches::table(&mut out, &status.builders, config, now, false, &unreachable);
    if !status.run_images.is_empty() {
        section(&mut out, "run-images", "Run images", Some(status.run_images.len()));
        watches::table(&mut out, &status.run_images, config, now, true, &unreachable);
    }

    if !status.images.is_empty() {
        section(&mut out, "images", "App images", Some(status.images.len()));
        images::table(&mut out, status, config, now);
    }

    section(&mut out, "actions", "Open actions", Some(status.pending.len()));
    actions(&mut out, status, config, now);

    if !status.deploys.is_empty() {
        section(&mut out, "deploys", "Deploys", Some(status.deploys.len()));
        deploys::table(&mut out, &status.deploys, now);
    }

    if !status.gitops.is_empty() {
        section(&mut out, "gitops", "Git write-back", Some(status.gitops.len()));
        gitops::table(&mut out, &status.gitops, now);
    }

    if !status.registries.is_empty() {
        section(&mut out, "registries", "Registries", Some(status.registries.len()));
        registries::table(&mut out, &status.registries, now);
    }

    section(&mut out, "history", "History", None);
    let watched: Vec<&BuilderStatus> = status.builders.iter().chain(&status.run_images).collect();
    watches::history(&mut out, &watched, now);

    section(&mut out, "dead-letters", "Dead letters", Some(status.dead_letters.len()));
    dead_letters(&mut out, status, now);

    let _ = write!(
        out,
        "<footer>The same data as <code>builder-monitor status</code> (<code>--json</code> for machines); \
         the read API serves the builders and run images (<code>/api/v1/builders</code>) and their changes \
         (<code>/api/v1/changes</code>).</footer>\n\
         </main>\n</body>\n</html>\n"
    );
    out
}

fn section(out: &mut String, id: &str, title: &str, count: Option<usize>) {
    let count = count.map(|n| format!(" <span class=\"count\">{n}</span>")).unwrap_or_default();
    let _ = writeln!(out, "<h2 id=\"{id}\">{title}{count}</h2>");
}

fn actions(out: &mut String, status: &Status, config: &Config, now: DateTime<Utc>) {
    out.push_str("<div class=\"card\">");
    // The gates that hold every action, above the list they hold.
    if let Some(f) = &status.rollout.frozen {
        let reason = f.reason.as_deref().map(|r| format!(": {}", Text(r))).unwrap_or_default();
        // `ago_at` is already a `<time>` element: it goes in as markup, not as text.
        let _ = writeln!(
            out,
            "<p class=\"empty\"><span class=\"pill warn\">frozen</span> since {} by {}{reason}; \
             {} until <code>builder-monitor unfreeze</code> (<a href=\"#frozen\">the freeze</a>).</p>",
            ago_at(f.since, now),
            Text(&f.by),
            builder_monitor_core::rollout::FREEZE_STOPS
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
    out.push_str(
        "<table class=\"actions\"><thead><tr><th>Image</th><th>Action</th><th>State</th><th>Why it waits</th><th>Change</th></tr></thead><tbody>\n",
    );
    for a in &status.pending {
        let state = if a.shown_state() == "running" { "ok" } else { "warn" };
        let _ = writeln!(
            out,
            "<tr class=\"action\"><td data-label=\"Image\"><span class=\"name\">{}</span></td><td data-label=\"Action\">{}</td>\
             <td data-label=\"State\"><span class=\"pill {state}\">{}</span><span class=\"sub\">{}</span></td>\
             <td data-label=\"Why it waits\">{}</td><td data-label=\"Change\"><code>{}</code></td></tr>",
            Text(&a.image),
            Text(a.action.as_str()),
            Text(a.shown_state()),
            if a.attempts == 0 { "not tried yet".to_string() } else { attempts(a.attempts) },
            why_waiting(a, status, config, now),
            Text(&a.change)
        );
    }
    out.push_str("</tbody></table></div>\n");
}

/// What an open action waits for: the runner, its turn, or a retry after a failed attempt.
fn why_waiting(a: &OpenAction, status: &Status, config: &Config, now: DateTime<Utc>) -> String {
    let max_attempts = config.runner.max_attempts;
    if a.state == ActionState::Running {
        let pool = a.placed.as_ref().map(|p| format!(" in pool <code>{}</code>", Text(&p.pool))).unwrap_or_default();
        if a.placed.as_ref().is_some_and(|p| p.queued) {
            return format!(
                "queued{pool}: Kueue admits it when the queue has quota (attempt {} of {max_attempts})",
                a.attempts
            );
        }
        return format!("running attempt {} of {max_attempts}{pool}", a.attempts);
    }
    if let Some(why) = &a.waiting_for {
        return Shortened(why).to_string();
    }
    if !config.runner.carried_out(a.action) {
        return format!("runner <code>{}</code> records actions and never runs them", config.runner.kind.as_str());
    }
    let when = match a.next_attempt {
        t if t > now => format!("at {}", time_element(t, &format!("in {}", span((t - now).num_seconds())))),
        _ => {
            // Registry rebases have slots of their own (`max_registry_rebases`).
            let registry = |action: ActionKind| config.runner.in_registry(action);
            let mine = registry(a.action);
            let running =
                status.pending.iter().filter(|o| o.state == ActionState::Running && registry(o.action) == mine).count();
            let (slot, max) = match mine {
                true => ("registry rebase slot", config.runner.max_registry_rebases),
                false => ("runner slot", config.runner.max_concurrent),
            };
            format!("now, for a free {slot} ({running} of {max} busy)")
        }
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
        detail.map(|d| format!(": {}", Shortened(d))).unwrap_or_default()
    )
}

fn attempts(n: u32) -> String {
    builder_monitor_core::text::count(n, "attempt")
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
            Shortened(d.last_status.as_deref().unwrap_or("no response"))
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
    use crate::status::{ImageAction, ImageStatus};
    use builder_monitor_core::cnb::ChangeKind;
    use builder_monitor_core::schedule::parse_timestamp;
    use html::{Breakable, short, span};

    pub(super) const HOSTILE: &str = "<script>alert(\"x\")</script>\u{1b}[31m'&\u{202e}";

    pub(super) fn config(runner: &str) -> Config {
        let text = format!(
            "[monitor]\nstate = \"x.db\"\ninterval = \"10m\"\njitter = \"30s\"\n\n[[builders]]\nname = \"jammy\"\n\
             image = \"registry.example.com/paketo/builder:latest\"\n\n[[builders]]\nname = \"heroku\"\n\
             image = \"registry.example.com/heroku/builder:24\"\nschedule = \"0 0 * * * *\"\n\n{runner}"
        );
        Config::parse(std::path::Path::new("/config.toml"), &text).unwrap()
    }

    pub(super) fn now() -> DateTime<Utc> {
        parse_timestamp("2025-03-04T12:00:00Z").unwrap()
    }

    pub(super) fn digest(fill: char) -> String {
        format!("sha256:{}", fill.to_string().repeat(64))
    }

    pub(super) fn watch(name: &str, image: &str) -> BuilderStatus {
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

    pub(super) fn change(
        id: &str,
        time: &str,
        previous: char,
        current: char,
        kind: ChangeKind,
        details: &str,
    ) -> ChangeSummary {
        ChangeSummary {
            id: id.into(),
            time: time.into(),
            previous: digest(previous),
            current: digest(current),
            kind,
            reasons: Vec::new(),
            summary: format!("{}: {details}", kind.as_str()),
            rollback: false,
            run_image: None,
            packages: None,
            packages_note: None,
            fixes: None,
            fixes_note: None,
            fixes_unknown: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub(super) fn empty(builders: Vec<BuilderStatus>) -> Status {
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
            gitops: Vec::new(),
            registries: Vec::new(),
            vulnerability_download: None,
            missing_rights: Vec::new(),
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
            action: builder_monitor_core::plan::ActionKind::Rebuild,
            state: ActionState::Pending,
            attempts: 1,
            next_attempt: parse_timestamp("2025-03-04T12:05:00.000Z").unwrap(),
            key: "k".into(),
            wave: 1,
            detail: None,
            waiting_for: None,
            gate: None,
            placed: None,
        });
        status.actions.push(
            ActionRecord {
                key: "k".into(),
                change: HOSTILE.into(),
                image: HOSTILE.into(),
                action: builder_monitor_core::plan::ActionKind::Rebuild,
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
                expedited: Default::default(),
            }
            .into(),
        );
        status.dead_letters.push(DeadLetter {
            event: HOSTILE.into(),
            event_type: "builder.changed".into(),
            alert: HOSTILE.into(),
            attempts: 5,
            last_status: Some(HOSTILE.into()),
            time: parse_timestamp("2025-03-04T11:30:00Z").unwrap(),
        });
        status.rollout.frozen = Some(builder_monitor_core::rollout::Freeze {
            since: parse_timestamp("2025-03-04T11:00:00Z").unwrap(),
            reason: Some(HOSTILE.into()),
            by: HOSTILE.into(),
        });
        status.images.push(ImageStatus {
            name: HOSTILE.into(),
            image: format!("registry.example.com/{HOSTILE}:latest"),
            digest: Some(digest('c')),
            previous: None,
            moves: Vec::new(),
            signed: None,
            unsigned: false,
            signature: None,
            attestation: None,
            last_action: Some(ImageAction {
                key: "k2".into(),
                change: HOSTILE.into(),
                action: "deploy".into(),
                state: ActionState::Rejected,
                shown: "rejected",
                updated: parse_timestamp("2025-03-04T11:30:00Z").unwrap(),
                detail: Some(format!("{HOSTILE}@{}", digest('d'))),
                decided_by: Some(HOSTILE.into()),
                holds: true,
                pool: None,
            }),
        });
        let html = render(
            &status,
            &config("[runner]\ntype = \"exec\"\n[runner.exec]\nrebuild = [\"true\"]\nrebase = [\"true\"]\n"),
            now(),
        );

        // Only the page's own elements: nothing the registry sent became markup.
        let allowed = [
            "html", "head", "meta", "title", "style", "body", "main", "header", "h1", "h2", "h3", "div", "b", "span",
            "p", "table", "thead", "tbody", "tr", "th", "td", "code", "time", "footer", "wbr", "details", "summary",
            "a",
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
        // The banner (who froze and why), the app image row (name, tag, change, detail, who
        // rejected it), and ids and links made of names, with every other byte written out.
        assert!(html.contains(&format!("<b>Frozen</b> by <span class=\"name\">{escaped}</span>")), "{html}");
        assert!(html.contains(&format!("<span class=\"reason\">{escaped}</span>")), "{html}");
        assert!(
            html.contains(&format!("<tr class=\"image\" data-name=\"{escaped}\" data-state=\"rejected\">")),
            "{html}"
        );
        assert!(html.contains(&format!("rejected by {escaped}")), "{html}");
        // The digest in the detail is cut short; the word around it is its tooltip.
        let shortened = format!(
            "<span class=\"digest\" title=\"&amp;\\u{{202e}}@{}\">&amp;\\u{{202e}}<wbr>@sha256:dddddddddddd</span>",
            digest('d')
        );
        assert!(html.contains(&shortened), "{html}");
        let id = "watch-_3cscript_3ealert_28_22x_22_29_3c/script_3e_1b_5b31m_27_26_e2_80_ae";
        assert!(html.contains(&format!("id=\"{id}\"")), "{html}");
        assert!(html.contains(&format!("href=\"#{id}\"")), "the failing tile links the row:\n{html}");
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
        assert!(
            html.contains("<span class=\"pill warn\">frozen</span> since <time datetime=\"2025-03-04T11:00:00Z\""),
            "{html}"
        );
        assert!(!html.contains("&lt;time"), "a <time> element went in as text:\n{html}");
        assert!(html.contains("the next opens Mon 09:00 Europe/Berlin."), "{html}");
        assert!(!html.contains(HOSTILE), "the reason is escaped");
        // Above everything: the banner says who, since when, why and how to lift it; a tile too.
        let banner = &html[html.find("<div class=\"banner\" id=\"frozen\"").expect("a banner")..];
        assert!(html.find("id=\"frozen\"") < html.find("<div class=\"tiles\">"), "{html}");
        assert!(
            banner.contains(
                "since <time datetime=\"2025-03-04T11:00:00Z\" title=\"2025-03-04 11:00:00 UTC\">1h ago</time>"
            ),
            "{banner}"
        );
        assert!(banner.contains("until <code>builder-monitor unfreeze</code> lifts it"), "{banner}");
        assert!(
            html.contains(
                "<a class=\"tile warn\" data-tile=\"frozen\" href=\"#frozen\"><b>yes</b><span>frozen</span></a>"
            ),
            "{html}"
        );

        status.rollout.frozen = None;
        let html = render(&status, &config(""), now());
        assert!(html.contains("<div class=\"tile\" data-tile=\"frozen\"><b>no</b><span>frozen</span></div>"), "{html}");
        assert!(!html.contains("class=\"banner\""), "{html}");
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
            action: builder_monitor_core::plan::ActionKind::Rebase,
            state,
            attempts,
            next_attempt: parse_timestamp(next).unwrap(),
            key: "k".into(),
            wave: 1,
            detail: None,
            waiting_for: None,
            gate: None,
            placed: None,
        };
        let in_pool = |mut a: OpenAction, queued| {
            a.placed = Some(builder_monitor_core::pool::BuildProgress { pool: "linux".into(), queued, platform: None });
            a
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

        // A build Kueue holds is queued, in its pool; one it admitted runs there.
        let mut pools = status.clone();
        pools.pending = vec![
            in_pool(open("web", ActionState::Running, 1, "2025-03-04T11:00:00.000Z"), true),
            in_pool(open("api", ActionState::Running, 1, "2025-03-04T11:00:00.000Z"), false),
        ];
        let html = render(&pools, &config(runner), now());
        assert!(html.contains("<span class=\"pill warn\">queued</span>"), "{html}");
        assert!(
            html.contains(
                "queued in pool <code>linux</code>: Kueue admits it when the queue has quota (attempt 1 of 3)"
            ),
            "{html}"
        );
        assert!(html.contains("<span class=\"pill ok\">running</span>"), "{html}");
        assert!(html.contains("running attempt 1 of 3 in pool <code>linux</code>"), "{html}");

        let recorded = render(&status, &config(""), now());
        assert!(recorded.contains("runner <code>none</code> records actions and never runs them"));
        // With rebases in the daemon, runner `none` still carries them out; only a rebuild waits for good.
        let in_daemon = config("[runner]\nrebase = \"registry\"\n");
        let html = render(&status, &in_daemon, now());
        // In slots of their own: `max_registry_rebases`, 16 by default.
        let waits = "runs now, for a free registry rebase slot (1 of 16 busy)";
        assert!(!html.contains("never runs them") && html.contains(waits), "{html}");
        status.pending[1].action = builder_monitor_core::plan::ActionKind::Rebuild;
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
