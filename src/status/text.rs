//! The status report as text for people (`status` without `--json`).

use super::*;
use builder_monitor_core::text::{LINE, fit, short_reference};

/// The report for a terminal.
pub fn render_text(status: &Status) -> String {
    let mut out = String::new();
    for right in &status.missing_rights {
        let _ = writeln!(
            out,
            "missing right: {right}: what needs it waits until it is granted (`builder-monitor rbac` prints the rules)"
        );
    }
    let unreachable = unreachable_registries(status.builders.iter().chain(&status.run_images));
    for (host, (watches, sample)) in &unreachable {
        // Two or more by construction: "watches".
        let _ = writeln!(out, "registry {host} unreachable: the last checks of {watches} watches failed to reach it:");
        let _ = writeln!(out, "  {}", fit(sample, LINE - 2));
    }
    for b in &status.builders {
        render_watch(&mut out, &b.name, b, &unreachable);
    }
    for r in &status.run_images {
        render_watch(&mut out, &format!("run image (for {})", r.builders.join(", ")), r, &unreachable);
    }
    if status.builders.is_empty() {
        let _ = writeln!(out, "no builders configured");
    }
    images::render_text(&mut out, &status.images);
    deploys::render_text(&mut out, &status.deploys);
    gitops::render_text(&mut out, &status.gitops);
    for r in &status.registries {
        let answer = r.referrers.map_or_else(|| "null".to_string(), |a| a.to_string());
        let _ = writeln!(out, "registry {}: referrers: {answer}", r.host);
    }
    if let Some(download) = &status.vulnerability_download {
        let _ = writeln!(out, "{}", download.note());
    }
    render_rollout(&mut out, &status.rollout);
    render_actions(&mut out, status);
    render_deliveries(&mut out, status);
    out
}

/// The freeze, and the next window while all are closed.
fn render_rollout(out: &mut String, rollout: &RolloutStatus) {
    if let Some(f) = &rollout.frozen {
        let reason = f.reason.as_deref().map(|r| format!(": {}", escape(r))).unwrap_or_default();
        let _ = writeln!(
            out,
            "FROZEN since {} by {}{reason}:\n  {} until `builder-monitor unfreeze`",
            timestamp(f.since),
            escape(&f.by),
            builder_monitor_core::rollout::FREEZE_STOPS
        );
    }
    if let Some(next) = &rollout.next_window {
        let _ = writeln!(out, "outside the roll-out windows: the next opens {next}");
    }
}

/// Pending actions (each with why it waits) and the recent finished ones.
fn render_actions(out: &mut String, status: &Status) {
    if !status.pending.is_empty() {
        let _ = writeln!(out, "pending actions:");
        for a in &status.pending {
            let pool = a.placed.as_ref().map(|p| format!(" in pool {}", escape(&p.pool))).unwrap_or_default();
            let _ = writeln!(
                out,
                "  {} {} for change {} (wave {}, {}{pool}, {}, next {})",
                a.action,
                a.image,
                a.change,
                a.wave,
                a.shown_state(),
                count(a.attempts, "attempt"),
                timestamp_millis(a.next_attempt)
            );
            // Why it waits, on a line of its own: a wait names other images, windows, fixes.
            if let Some(why) = &a.waiting_for {
                let _ = writeln!(out, "    {}", fit(why, LINE - 4));
            }
        }
    }
    let finished: Vec<&ShownAction> = status.actions.iter().filter(|a| !a.state.is_open()).collect();
    if !finished.is_empty() {
        let _ = writeln!(out, "recent actions:");
        for a in finished.iter().take(10) {
            let _ = writeln!(
                out,
                "  {} {} {} after {} ({}{})",
                timestamp_millis(a.updated),
                a.action,
                a.image,
                count(a.attempts, "attempt"),
                a.state,
                expedited(&a.expedited),
            );
            // The detail (digests, a registry's error) on a line of its own, digests short: the
            // whole of it is in `status --json`.
            if let Some(detail) = &a.detail {
                let _ = writeln!(out, "    {}", fit(detail, LINE - 4));
            }
        }
    }
}

/// Alert deliveries still to go, and those given up on.
fn render_deliveries(out: &mut String, status: &Status) {
    if !status.deliveries.is_empty() {
        let _ = writeln!(out, "alert deliveries pending:");
        for d in &status.deliveries {
            let _ = writeln!(
                out,
                "  {} {} to {}: {}, next {}{}",
                d.event_type,
                d.event,
                d.alert,
                count(d.attempts, "attempt"),
                timestamp_millis(d.next_attempt),
                d.last_status.as_deref().map(|s| format!(" (last: {})", escape(s))).unwrap_or_default()
            );
        }
    }
    if !status.dead_letters.is_empty() {
        let _ = writeln!(out, "dead letters:");
        for d in &status.dead_letters {
            let _ = writeln!(
                out,
                "  {} {} to {}: gave up after {} ({})",
                d.event_type,
                d.event,
                d.alert,
                count(d.attempts, "attempt"),
                escape(d.last_status.as_deref().unwrap_or("no response"))
            );
        }
    }
}

/// `, expedited by USN-…, CVE-…` for an action whose fixes let it skip the soak and the windows.
fn expedited(expedited: &builder_monitor_core::rollout::Expedited) -> String {
    if expedited.is_empty() {
        return String::new();
    }
    let ids: Vec<String> = expedited.records.iter().map(|r| escape(&r.id).into_owned()).collect();
    format!(", expedited by {}", ids.join(", "))
}

fn render_watch(out: &mut String, title: &str, b: &BuilderStatus, unreachable: &Unreachable) {
    let _ = writeln!(out, "{title}  {}", b.image);
    match &b.pinned {
        Some(p) => {
            let _ = writeln!(out, "  pinned:     {} (since {})", short_reference(&p.reference), p.since);
        }
        None => {
            let _ = writeln!(out, "  pinned:     - (not checked successfully yet)");
        }
    }
    for (platform, digest) in &b.platforms {
        let _ = writeln!(out, "  {:<11} {}", format!("{}:", escape(platform)), short_reference(digest));
    }
    if let Some(run) = &b.run_image {
        let _ = writeln!(out, "  run image:  {}", escape(run));
    }
    match &b.last_check {
        Some(c) if c.result == "ok" => {
            let _ = writeln!(out, "  last check: {} ok", c.time);
        }
        Some(c) => {
            match unreachable_host(b, unreachable).filter(|_| c.reason.as_deref() == Some("registry_unavailable")) {
                Some(host) => {
                    let _ = writeln!(
                        out,
                        "  last check: {} error ({} in a row): registry {host} unreachable (above)",
                        c.time, b.consecutive_failures
                    );
                }
                None => {
                    let _ = writeln!(out, "  last check: {} error ({} in a row):", c.time, b.consecutive_failures);
                    let _ = writeln!(out, "    {}", fit(c.error.as_deref().unwrap_or("?"), LINE - 4));
                }
            }
            let _ =
                writeln!(out, "  next check: {}", b.next_check.as_deref().unwrap_or("only when woken (hook or API)"));
        }
        None => {
            let _ = writeln!(out, "  last check: never");
        }
    }
    if let Some(s) = &b.settling {
        let _ = writeln!(out, "  settling:   {} seen since {}", short(&s.digest), s.since);
    }
    for note in &b.notes {
        let _ = writeln!(out, "  note:       {}", escape(note));
    }
    if b.changes.is_empty() {
        let _ = writeln!(out, "  changes:    none");
    } else {
        let _ = writeln!(out, "  changes:");
        for c in &b.changes {
            let _ = writeln!(
                out,
                "    {}  {} → {}{}  id {}\n      {}",
                c.time,
                short(&c.previous),
                short(&c.current),
                if c.rollback { " (rollback)" } else { "" },
                c.id,
                fit(&c.summary, LINE - 6)
            );
        }
    }
}
