//! `status`'s gitops targets: each `[[gitops]]` entry with its last pushed commit and what its
//! newest gitops action is doing.

use std::fmt::Write as _;

use serde::Serialize;

use crate::config::{Config, gitops_subject};
use crate::ledger::{ActionRecord, ActionState};
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
            }
        })
        .collect()
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
    }
}
