//! The status report: pins, last checks, recent changes, open actions and dead letters, as the
//! stable JSON of DESIGN.md or as text for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::builder::ChangeKind;
use crate::config::Config;
use crate::store::{DeadLetter, Ledger, LedgerError, OpenAction, WatchRecord};

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub builders: Vec<BuilderStatus>,
    pub pending: Vec<OpenAction>,
    pub dead_letters: Vec<DeadLetter>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BuilderStatus {
    pub name: String,
    pub image: String,
    pub pinned: Option<PinnedStatus>,
    pub platforms: BTreeMap<String, String>,
    pub last_check: Option<LastCheck>,
    pub last_change: Option<String>,
    pub consecutive_failures: u32,
    /// A new digest waiting out `settle`.
    pub settling: Option<Settling>,
    pub changes: Vec<ChangeSummary>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PinnedStatus {
    pub digest: String,
    pub reference: String,
    pub since: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct LastCheck {
    pub time: String,
    pub result: &'static str,
    pub error: Option<String>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Settling {
    pub digest: String,
    pub since: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChangeSummary {
    pub id: String,
    pub time: String,
    pub previous: String,
    pub current: String,
    pub kind: ChangeKind,
    pub rollback: bool,
}

/// Builds the report for the builders in `config`, with up to `recent` changes each.
pub async fn collect(config: &Config, ledger: &Ledger, recent: usize) -> Result<Status, LedgerError> {
    let mut builders = Vec::new();
    for b in &config.builders {
        let image = b.image.to_string();
        let record = ledger.watch(&b.name).await?.filter(|r| r.image == image);
        let changes = match &record {
            Some(_) => ledger.changes(Some(&b.name), recent).await?,
            None => Vec::new(),
        };
        builders.push(builder_status(&b.name, &image, record.as_ref(), changes));
    }
    Ok(Status { builders, pending: ledger.open_actions().await?, dead_letters: ledger.dead_letters().await? })
}

fn builder_status(
    name: &str,
    image: &str,
    record: Option<&WatchRecord>,
    changes: Vec<crate::store::ChangeRecord>,
) -> BuilderStatus {
    let pin = record.and_then(|r| r.pin.as_ref());
    BuilderStatus {
        name: name.to_string(),
        image: image.to_string(),
        pinned: pin.map(|p| PinnedStatus {
            digest: p.digest.clone(),
            reference: p.reference.clone(),
            since: p.since.clone(),
        }),
        platforms: pin.map(|p| p.platforms.clone()).unwrap_or_default(),
        last_check: record.and_then(|r| {
            Some(LastCheck {
                time: r.last_check.clone()?,
                result: if r.last_ok == Some(true) { "ok" } else { "error" },
                error: r.last_error.clone(),
                reason: r.last_error_reason.clone(),
            })
        }),
        last_change: record.and_then(|r| r.last_change.clone()),
        consecutive_failures: record.map_or(0, |r| r.consecutive_failures),
        settling: record.and_then(|r| r.pending.clone()).map(|(digest, since)| Settling { digest, since }),
        changes: changes
            .into_iter()
            .map(|c| ChangeSummary {
                id: c.id,
                time: c.detected,
                previous: c.previous,
                current: c.current,
                kind: c.change.kind,
                rollback: c.rollback,
            })
            .collect(),
    }
}

fn short(digest: &str) -> &str {
    let end = digest.len().min("sha256:".len() + 12);
    &digest[..end]
}

/// The report for a terminal.
pub fn render_text(status: &Status) -> String {
    let mut out = String::new();
    for b in &status.builders {
        let _ = writeln!(out, "{}  {}", b.name, b.image);
        match &b.pinned {
            Some(p) => {
                let _ = writeln!(out, "  pinned:     {} (since {})", p.reference, p.since);
            }
            None => {
                let _ = writeln!(out, "  pinned:     - (not checked successfully yet)");
            }
        }
        for (platform, digest) in &b.platforms {
            let _ = writeln!(out, "  {:<11} {}", format!("{platform}:"), digest);
        }
        match &b.last_check {
            Some(c) if c.result == "ok" => {
                let _ = writeln!(out, "  last check: {} ok", c.time);
            }
            Some(c) => {
                let _ = writeln!(
                    out,
                    "  last check: {} error ({} in a row): {}",
                    c.time,
                    b.consecutive_failures,
                    c.error.as_deref().unwrap_or("?")
                );
            }
            None => {
                let _ = writeln!(out, "  last check: never");
            }
        }
        if let Some(s) = &b.settling {
            let _ = writeln!(out, "  settling:   {} seen since {}", short(&s.digest), s.since);
        }
        if b.changes.is_empty() {
            let _ = writeln!(out, "  changes:    none");
        } else {
            let _ = writeln!(out, "  changes:");
            for c in &b.changes {
                let _ = writeln!(
                    out,
                    "    {}  {} → {}  {}{}  id {}",
                    c.time,
                    short(&c.previous),
                    short(&c.current),
                    c.kind.as_str(),
                    if c.rollback { " (rollback)" } else { "" },
                    c.id
                );
            }
        }
    }
    if status.builders.is_empty() {
        let _ = writeln!(out, "no builders configured");
    }
    if !status.pending.is_empty() {
        let _ = writeln!(out, "pending actions:");
        for a in &status.pending {
            let _ = writeln!(
                out,
                "  {} {} for change {} ({}, {} attempts, next {})",
                a.action, a.image, a.change, a.state, a.attempts, a.next_attempt
            );
        }
    }
    if !status.dead_letters.is_empty() {
        let _ = writeln!(out, "dead letters:");
        for d in &status.dead_letters {
            let _ = writeln!(
                out,
                "  {} {} to {}: gave up after {} attempts ({})",
                d.event_type,
                d.event,
                d.alert,
                d.attempts,
                d.last_status.as_deref().unwrap_or("no response")
            );
        }
    }
    out
}
