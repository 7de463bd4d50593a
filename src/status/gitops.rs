//! `status`'s gitops targets: each `[[gitops]]` entry with its last pushed commit, what its
//! newest gitops action is doing, and the batch waiting to commit (`[[gitops]] batch`).

use std::fmt::Write as _;

use serde::Serialize;

use crate::config::{Config, gitops_subject};
use crate::ledger::{ActionRecord, ActionState, LatestAction};
use builder_monitor_core::plan::BatchedChange;
use builder_monitor_core::schedule::timestamp_millis;
use builder_monitor_core::text::escape;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GitopsStatus {
    pub name: String,
    pub repo: String,
    /// The branch commits go to.
    pub branch: String,
    /// The last commit pushed (`null`: none yet among the recent actions).
    pub commit: Option<String>,
    /// The change that commit carried.
    pub change: Option<String>,
    /// When it was pushed.
    pub since: Option<String>,
    /// The newest gitops action's state (`none`: no action yet) and what it said.
    pub state: String,
    pub detail: Option<String>,
    /// The commit waiting out `[[gitops]] batch` (`null`: none waits).
    pub batch: Option<PendingBatch>,
}

/// A batched gitops action still to commit: the changes it holds and when it commits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingBatch {
    /// Every change its one commit will list, oldest first (its own last), each with its fixes.
    pub changes: Vec<BatchedChange>,
    /// When its window ends and it commits (or tries again, after a failed attempt).
    pub commits_at: String,
}

/// Each target, from `recent` actions (newest first or not: ordered here by time).
pub fn targets(config: &Config, recent: &[ActionRecord]) -> Vec<GitopsStatus> {
    config
        .gitops
        .iter()
        .map(|t| {
            let subject = gitops_subject(&t.name);
            let mut mine: Vec<&ActionRecord> = recent.iter().filter(|a| a.image == subject).collect();
            mine.sort_by_key(|a| (a.created, a.updated));
            let newest = mine.last();
            let pushed = mine.iter().rev().find_map(|a| {
                let progress = a.progress.as_ref()?.gitops()?;
                (a.state == ActionState::Succeeded).then_some((a, progress.commit.clone()?))
            });
            GitopsStatus {
                name: t.name.clone(),
                repo: t.repo.clone(),
                branch: t.push_branch.clone(),
                commit: pushed.as_ref().map(|(_, c)| c.clone()),
                change: pushed.as_ref().map(|(a, _)| a.change.clone()),
                since: pushed.as_ref().map(|(a, _)| timestamp_millis(a.updated)),
                state: newest.map_or("none", |a| a.state.as_str()).to_string(),
                detail: newest.and_then(|a| a.detail.clone()),
                batch: None,
            }
        })
        .collect()
}

/// Sets each target's `batch` from `latest` (each subject's newest gitops action, with its plan):
/// a pending action of a target with `batch`, or one that took earlier changes along.
pub fn pending_batches(config: &Config, targets: &mut [GitopsStatus], latest: &[LatestAction]) {
    for t in targets {
        let subject = gitops_subject(&t.name);
        let batched = config.gitops.iter().any(|g| g.name == t.name && g.batch.is_some());
        let pending = latest.iter().find(|a| a.record.image == subject && a.record.state == ActionState::Pending);
        let Some((record, plan)) = pending.and_then(|a| Some((&a.record, a.target.as_ref()?.plan.gitops()?))) else {
            continue;
        };
        if !batched && plan.batch.is_empty() {
            continue;
        }
        let mut changes = plan.batch.clone();
        changes.push(BatchedChange {
            change_id: record.change.clone(),
            summary: plan.summary.clone(),
            fixes: plan.fixes.clone(),
        });
        t.batch = Some(PendingBatch { changes, commits_at: timestamp_millis(record.next_attempt) });
    }
}

/// `gitops:` in `status`'s text: one line per target.
pub(super) fn render_text(out: &mut String, targets: &[GitopsStatus]) {
    if targets.is_empty() {
        return;
    }
    let _ = writeln!(out, "gitops:");
    for t in targets {
        let commit = match (&t.commit, &t.since) {
            (Some(c), Some(since)) => {
                format!(
                    "commit {} (change {}) since {since}",
                    &c[..c.len().min(12)],
                    t.change.as_deref().unwrap_or("?")
                )
            }
            _ => "no commit yet".to_string(),
        };
        let detail = t.detail.as_deref().map(|d| format!(": {}", escape(d))).unwrap_or_default();
        let _ =
            writeln!(out, "  {}  {} {}  {commit}; last action {}{detail}", t.name, escape(&t.repo), t.branch, t.state);
        if let Some(batch) = &t.batch {
            let n = batch.changes.len();
            let changes = if n == 1 { "1 change" } else { &format!("{n} changes") };
            let _ = writeln!(out, "    batch of {changes} commits at {}:", batch.commits_at);
            // A change's summary says what it fixes already (`…; fixes USN-… (high)`).
            for c in &batch.changes {
                let _ = writeln!(out, "      {}: {}", c.change_id, escape(&c.summary));
            }
        }
    }
}
