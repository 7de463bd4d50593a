//! Actions on Kubernetes: the rows of a change live in the entry that planned them (the
//! builder's, or the run image's for a rebase), so deciding on a change is one write; taking an
//! action on reads every entry for the gates, then writes its own entry, with the gates read again
//! there.

use builder_monitor_core::rollout::Expedited;
use std::collections::BTreeMap;

use chrono::SubsecRound;
use serde::{Deserialize, Serialize};

use super::{KubeLedger, WatchDoc};
use crate::ledger::actions::{ImageLocks, Kinds, gate_rows, next_start, read_target, target_json};
use crate::ledger::time;
use crate::ledger::{
    ActionEnd, ActionOutcome, ActionRecord, ActionState, Actions, ClaimedAction, Decided, ImageHold, LatestAction,
    LedgerError, NewAction, OpenAction, Outbox, ProcessGroup, TagWrites, Verdict,
};
use builder_monitor_core::plan::{ActionKind, ActionTarget};
use builder_monitor_core::progress::Progress;
use builder_monitor_core::rollout::{GateAction, Rollout, failure_reason};
use chrono::{DateTime, Utc};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ActionRow {
    pub(super) key: String,
    pub(super) change_id: String,
    pub(super) image: String,
    pub(super) kind: ActionKind,
    pub(super) state: ActionState,
    pub(super) attempts: u32,
    #[serde(with = "time::millis")]
    pub(super) next_attempt: DateTime<Utc>,
    /// Kept as the JSON it was written as: an entry whose target no longer reads still loads.
    pub(super) target: serde_json::Value,
    pub(super) detail: Option<String>,
    pub(super) output_tail: Option<String>,
    /// The local command's process group while `running` (exec runner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) process: Option<ProcessGroup>,
    #[serde(with = "time::millis")]
    pub(super) created: DateTime<Utc>,
    #[serde(with = "time::millis")]
    pub(super) updated: DateTime<Utc>,
    #[serde(default = "first_wave", skip_serializing_if = "is_first_wave")]
    pub(super) wave: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) needs_approval: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) released: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) decided_by: Option<String>,
    #[serde(default, with = "time::seconds_opt", skip_serializing_if = "Option::is_none")]
    pub(super) decided_at: Option<DateTime<Utc>>,
    /// What the action recorded of its progress (a deploy's previous and written images).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) progress: Option<serde_json::Value>,
    /// It holds its image (a failed or overridden deploy).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) holds: bool,
    /// The fixes that let it skip the soak and the windows (`[rollout] expedite`).
    #[serde(default, skip_serializing_if = "Expedited::is_empty")]
    pub(super) expedited: Expedited,
}

/// The wave of an action written before waves existed.
fn first_wave() -> u32 {
    1
}

fn is_first_wave(wave: &u32) -> bool {
    *wave == 1
}

/// An action of another change that a newer one for the same image replaces: one not started yet.
pub(super) fn supersedable(action: &ActionRow, newer_change: &str) -> bool {
    matches!(action.state, ActionState::Pending | ActionState::Held | ActionState::AwaitingApproval)
        && action.change_id != newer_change
}

impl WatchDoc {
    /// Records the actions planned with a change at `now`: only the newest target of an image is
    /// built, so this entry's older actions for it that have not started yield. An action recorded
    /// already stays as it is, and nothing yields to it: a check that stopped after recording its
    /// first actions plans the same move again, and an action of a newer change recorded since is
    /// the newer one. Answers the `(image, change)` of each action added.
    pub(super) fn add_actions(
        &mut self,
        actions: &[NewAction],
        now: DateTime<Utc>,
    ) -> Result<Vec<(String, String)>, LedgerError> {
        let mut added = Vec::new();
        for a in actions {
            if self.actions.iter().any(|o| o.change_id == a.change_id && o.image == a.image && o.kind == a.kind) {
                continue;
            }
            // A batched gitops action takes along what yields to it in this entry, in this write.
            let mut older = Vec::new();
            if a.batch.is_some() {
                for o in self.actions.iter().filter(|o| o.image == a.image && supersedable(o, &a.change_id)) {
                    let target = read_target(o.target.clone()).map_err(|e| LedgerError::Corrupt {
                        what: "action target",
                        detail: format!("{}: {e}", o.key),
                    })?;
                    older.push((o.change_id.clone(), target, o.next_attempt));
                }
            }
            let (target, due) = a.arrival(now, &older);
            for old in self.actions.iter_mut().filter(|o| o.image == a.image && supersedable(o, &a.change_id)) {
                old.state = ActionState::Superseded;
                old.detail = Some(format!("superseded by change {}", a.change_id));
                old.updated = now;
            }
            // The change as its first actions left it (the SQLite ledger's `insert_actions` rule).
            let change: Vec<&ActionRow> = self.actions.iter().filter(|o| o.change_id == a.change_id).collect();
            let released = change.iter().any(|o| o.released);
            let held = change
                .iter()
                .filter(|o| !released && o.wave < a.wave && o.state == ActionState::Failed)
                .min_by(|x, y| (x.wave, &x.image).cmp(&(y.wave, &y.image)))
                .map(|o| format!("held: {}", failure_reason(o.wave, &o.image)));
            let state = a.arrival_state(held.is_some());
            {
                self.actions.push(ActionRow {
                    key: a.key.clone(),
                    change_id: a.change_id.clone(),
                    image: a.image.clone(),
                    kind: a.kind,
                    state,
                    attempts: 0,
                    next_attempt: due,
                    target: target_json(&target)?,
                    detail: held,
                    output_tail: None,
                    process: None,
                    created: now,
                    updated: now,
                    wave: a.wave,
                    needs_approval: a.needs_approval,
                    released,
                    decided_by: None,
                    decided_at: None,
                    progress: None,
                    holds: false,
                    expedited: a.expedited.clone(),
                });
                added.push((a.image.clone(), a.change_id.clone()));
            }
        }
        Ok(added)
    }
}

impl KubeLedger {
    /// Actions for an image may sit in another watch's entry (a rebuild from the builder, a
    /// rebase from its run image): those that have not started yield to the ones `added` to
    /// `watch`'s too. A crash between the writes leaves an older action pending; it runs before
    /// the newer one, which still runs last.
    pub(super) async fn supersede_elsewhere(
        &self,
        watch: &str,
        added: &[(String, String)],
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        if added.is_empty() {
            return Ok(());
        }
        let yields = |doc: &WatchDoc| {
            added.iter().any(|(image, change)| doc.actions.iter().any(|o| &o.image == image && supersedable(o, change)))
        };
        for (_, doc) in self.all().await? {
            let Some(other) = doc.watch.as_ref().map(|w| w.name.clone()).filter(|n| n != watch) else { continue };
            if !yields(&doc) {
                continue;
            }
            self.modify(&other, |d| {
                for (image, change) in added {
                    for old in d.actions.iter_mut().filter(|o| &o.image == image && supersedable(o, change)) {
                        old.state = ActionState::Superseded;
                        old.detail = Some(format!("superseded by change {change}"));
                        old.updated = now;
                    }
                }
                Ok(())
            })
            .await?;
        }
        Ok(())
    }
}

impl Actions for KubeLedger {
    async fn claim_actions(
        &self,
        now: DateTime<Utc>,
        limit: usize,
        kinds: Kinds,
        rollout: &Rollout,
    ) -> Result<Vec<ClaimedAction>, LedgerError> {
        let now = now.trunc_subsecs(3);
        let docs = self.all().await?;
        let freeze = docs.iter().find_map(|(_, d)| d.freeze.clone());
        let mut holders = BTreeMap::new();
        let mut rows = Vec::new();
        for (_, doc) in docs {
            let Some(watch) = doc.watch.as_ref().map(|w| w.name.clone()) else { continue };
            for a in doc.actions {
                holders.insert(a.key.clone(), watch.clone());
                rows.push(record(a));
            }
        }
        let locks = ImageLocks::of(&rows);
        let due: Vec<String> = gate_rows(&rows, kinds, rollout, freeze.as_ref(), now, &locks)
            .into_iter()
            .filter(|g| g.verdict.is_ok() && g.due <= now)
            .take(limit)
            .map(|g| g.key)
            .collect();
        let mut claimed = Vec::new();
        for key in due {
            let Some(watch) = holders.get(&key) else { continue };
            let taken = self
                .modify(watch, |doc| {
                    // The gates again, on the entry as written now (its change's rows all live here).
                    let Some(change) = doc.actions.iter().find(|a| a.key == key).map(|a| a.change_id.clone()) else {
                        return Ok(None);
                    };
                    let view: Vec<ActionRecord> =
                        doc.actions.iter().filter(|a| a.change_id == change).cloned().map(record).collect();
                    let open = gate_rows(&view, kinds, rollout, freeze.as_ref(), now, &locks)
                        .into_iter()
                        .any(|g| g.key == key && g.verdict.is_ok());
                    Ok(doc.actions.iter_mut().find(|a| open && a.key == key && a.state == ActionState::Pending).map(
                        |a| {
                            a.state = ActionState::Running;
                            a.attempts += 1;
                            a.updated = now;
                            a.process = None;
                            ClaimedAction {
                                key: a.key.clone(),
                                change_id: a.change_id.clone(),
                                image: a.image.clone(),
                                kind: a.kind,
                                attempt: a.attempts,
                                target: read_target(a.target.clone()),
                                process: None,
                                progress: a.progress.clone().and_then(|v| Progress::read(a.kind, v)),
                                created: a.created,
                                expedited: a.expedited.clone(),
                            }
                        },
                    ))
                })
                .await?;
            claimed.extend(taken);
        }
        Ok(claimed)
    }

    async fn record_process(&self, key: &str, group: ProcessGroup) -> Result<(), LedgerError> {
        let Some(holder) = self.holder(|d| d.actions.iter().any(|a| a.key == key)).await? else {
            return Ok(());
        };
        self.modify(&holder, |doc| {
            if let Some(a) = doc.actions.iter_mut().find(|a| a.key == key && a.state == ActionState::Running) {
                a.process = Some(group);
            }
            Ok(())
        })
        .await
    }

    async fn record_progress(&self, key: &str, progress: Progress) -> Result<bool, LedgerError> {
        let progress = progress.to_value();
        let Some(holder) = self.holder(|d| d.actions.iter().any(|a| a.key == key)).await? else {
            return Ok(false);
        };
        self.modify(&holder, |doc| {
            Ok(doc
                .actions
                .iter_mut()
                .find(|a| a.key == key && a.state == ActionState::Running)
                .map(|a| a.progress = Some(progress.clone()))
                .is_some())
        })
        .await
    }

    async fn hold_image(&self, hold: ImageHold<'_>) -> Result<bool, LedgerError> {
        let ImageHold { key, detail, watch, events, deliveries, history, now } = hold;
        let Some(holder) = self.holder(|d| d.actions.iter().any(|a| a.key == key)).await? else {
            return Ok(false);
        };
        let now = now.trunc_subsecs(3);
        let seq = self.seq.clone();
        let same = holder == watch;
        let held = self
            .modify(&holder, |doc| {
                let Some(a) = doc.actions.iter_mut().find(|a| a.key == key && !a.released) else { return Ok(false) };
                a.holds = true;
                a.detail = Some(detail.clone());
                a.updated = now;
                if same {
                    doc.add_events(&events, &deliveries, now, history, &seq);
                }
                Ok(true)
            })
            .await?;
        if held && !same {
            self.record_events(watch, events, deliveries, history, now).await?;
        }
        Ok(held)
    }

    async fn record_actions(
        &self,
        entry: Option<&str>,
        actions: Vec<NewAction>,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        // A change's rows live in one entry, its watch's: those asked for by hand go to their
        // builder's.
        let now = now.trunc_subsecs(3);
        let mut by_watch: BTreeMap<String, Vec<NewAction>> = BTreeMap::new();
        for a in actions {
            let watch = entry.map_or_else(|| a.target.builder_name.clone(), str::to_string);
            by_watch.entry(watch).or_default().push(a);
        }
        for (watch, actions) in by_watch {
            let added = self.modify(&watch, |doc| doc.add_actions(&actions, now)).await?;
            self.supersede_elsewhere(&watch, &added, now).await?;
        }
        Ok(())
    }

    async fn finish_action(&self, end: ActionEnd<'_>) -> Result<Option<ActionState>, LedgerError> {
        let ActionEnd {
            key,
            outcome,
            detail,
            output_tail,
            watch,
            events,
            deliveries,
            history,
            now: at,
            tag_move,
            hold,
            keep_intent,
            follow,
            hold_image,
        } = end;
        let holder = self.holder(|d| d.actions.iter().any(|a| a.key == key)).await?;
        let newer = match &outcome {
            ActionOutcome::Retry { .. } => self.newer_change(key).await?,
            ActionOutcome::Succeeded if !follow.is_empty() => self.newer_change(key).await?,
            _ => None,
        };
        let now = at.trunc_subsecs(3);
        let seq = self.seq.clone();
        let same = holder.as_deref() == Some(watch) || holder.is_none();
        let mut ended = None;
        if let Some(holder) = &holder {
            ended = self
                .modify(holder, |doc| {
                    let mut ended = None;
                    if !keep_intent {
                        doc.tag_intents.retain(|i| i.action.as_deref() != Some(key));
                    }
                    if let Some(a) = doc.actions.iter_mut().find(|a| a.key == key && a.state == ActionState::Running) {
                        a.detail = Some(detail.clone());
                        // A retry re-checks first (see `Actions::finish_action`).
                        let superseded = match &outcome {
                            ActionOutcome::Retry { .. } => newer.clone(),
                            ActionOutcome::Succeeded => None,
                            ActionOutcome::Superseded { by } => Some(by.clone()),
                            _ => None,
                        };
                        match (&outcome, superseded) {
                            (_, Some(by)) => {
                                a.state = ActionState::Superseded;
                                a.detail = Some(format!("superseded by change {by}: {detail}"));
                            }
                            (ActionOutcome::Succeeded, None) => a.state = ActionState::Succeeded,
                            (ActionOutcome::Skipped, None) => a.state = ActionState::Skipped,
                            (ActionOutcome::Retry { next_attempt }, None) => {
                                a.state = ActionState::Pending;
                                a.next_attempt = next_attempt.trunc_subsecs(3);
                            }
                            (_, None) => a.state = ActionState::Failed,
                        }
                        a.output_tail = Some(output_tail.clone());
                        a.updated = now;
                        a.holds |= hold_image;
                        ended = Some(a.state);
                    }
                    if ended == Some(ActionState::Succeeded) && newer.is_none() && !follow.is_empty() {
                        doc.add_actions(&follow, now)?;
                        // What follows a released action is released with it.
                        let released = doc.actions.iter().any(|a| a.key == key && a.released);
                        for a in doc.actions.iter_mut().filter(|a| follow.iter().any(|f| f.key == a.key)) {
                            a.released |= released;
                        }
                    }
                    for held in hold.iter().flat_map(|h| h.keys.iter().map(move |k| (k, &h.detail))) {
                        // The change's rows all live in this entry.
                        if let Some(a) = doc.actions.iter_mut().find(|a| {
                            &a.key == held.0 && matches!(a.state, ActionState::Pending | ActionState::AwaitingApproval)
                        }) {
                            a.state = ActionState::Held;
                            a.detail = Some(held.1.clone());
                            a.updated = now;
                        }
                    }
                    if same {
                        doc.add_events(&events, &deliveries, now, history, &seq);
                    }
                    if let Some(m) = &tag_move {
                        doc.add_tag_move(m, history, &seq);
                    }
                    Ok(ended)
                })
                .await?;
        }
        if !same {
            self.record_events(watch, events, deliveries, history, at).await?;
        }
        if let (None, Some(m)) = (&holder, tag_move) {
            self.record_tag_move(watch, m, history).await?;
        }
        Ok(ended)
    }

    async fn next_action_at(
        &self,
        kinds: Kinds,
        rollout: &Rollout,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, LedgerError> {
        let docs = self.all().await?;
        let freeze = docs.iter().find_map(|(_, d)| d.freeze.clone());
        let rows: Vec<ActionRecord> = docs.into_iter().flat_map(|(_, d)| d.actions).map(record).collect();
        let locks = ImageLocks::of(&rows);
        Ok(next_start(gate_rows(&rows, kinds, rollout, freeze.as_ref(), now, &locks), rollout, freeze.as_ref(), now))
    }

    async fn running_actions(&self) -> Result<Vec<ClaimedAction>, LedgerError> {
        let mut out = Vec::new();
        for (_, doc) in self.all().await? {
            for a in doc.actions.into_iter().filter(|a| a.state == ActionState::Running) {
                out.push(ClaimedAction {
                    key: a.key,
                    change_id: a.change_id,
                    image: a.image,
                    kind: a.kind,
                    attempt: a.attempts,
                    target: read_target(a.target),
                    process: a.process,
                    progress: a.progress.and_then(|v| Progress::read(a.kind, v)),
                    created: a.created,
                    expedited: a.expedited,
                });
            }
        }
        Ok(out)
    }

    async fn requeue_running(&self) -> Result<Vec<String>, LedgerError> {
        let mut keys = Vec::new();
        for (_, doc) in self.all().await? {
            let Some(watch) = doc.watch.as_ref().map(|w| w.name.clone()) else { continue };
            if doc.actions.iter().any(|a| a.state == ActionState::Running) {
                let requeued = self
                    .modify(&watch, |d| {
                        let mut keys = Vec::new();
                        for a in d.actions.iter_mut().filter(|a| a.state == ActionState::Running) {
                            a.state = ActionState::Pending;
                            keys.push(a.key.clone());
                        }
                        Ok(keys)
                    })
                    .await?;
                keys.extend(requeued);
            }
        }
        Ok(keys)
    }

    async fn requeue_actions(&self, keys: Vec<String>) -> Result<(), LedgerError> {
        for (_, doc) in self.all().await? {
            let Some(watch) = doc.watch.as_ref().map(|w| w.name.clone()) else { continue };
            if doc.actions.iter().any(|a| a.state == ActionState::Running && keys.contains(&a.key)) {
                self.modify(&watch, |d| {
                    for a in d.actions.iter_mut().filter(|a| a.state == ActionState::Running && keys.contains(&a.key)) {
                        a.state = ActionState::Pending;
                    }
                    Ok(())
                })
                .await?;
            }
        }
        Ok(())
    }

    async fn actions(&self, limit: usize) -> Result<Vec<ActionRecord>, LedgerError> {
        let mut out: Vec<ActionRecord> =
            self.all().await?.into_iter().flat_map(|(_, d)| d.actions).map(record).collect();
        out.sort_by(|a, b| b.updated.cmp(&a.updated).then(a.key.cmp(&b.key)));
        out.truncate(limit);
        Ok(out)
    }

    async fn latest_actions(&self, kind: ActionKind) -> Result<Vec<LatestAction>, LedgerError> {
        let mut newest: BTreeMap<String, ActionRow> = BTreeMap::new();
        for a in self.all().await?.into_iter().flat_map(|(_, d)| d.actions).filter(|a| a.kind == kind) {
            // Of two created in the same millisecond, the one updated last.
            let newer = |b: &ActionRow| (a.created, a.updated, &a.key) > (b.created, b.updated, &b.key);
            if newest.get(&a.image).is_none_or(newer) {
                newest.insert(a.image.clone(), a);
            }
        }
        Ok(newest
            .into_values()
            .map(|a| {
                let target = read_target(a.target.clone()).ok();
                LatestAction { record: record(a), target }
            })
            .collect())
    }

    async fn open_actions(&self) -> Result<Vec<OpenAction>, LedgerError> {
        let mut rows: Vec<ActionRow> =
            self.all().await?.into_iter().flat_map(|(_, d)| d.actions).filter(|a| a.state.is_open()).collect();
        rows.sort_by(|a, b| (a.created, a.wave, a.key.as_str()).cmp(&(b.created, b.wave, b.key.as_str())));
        Ok(rows
            .into_iter()
            .map(|a| OpenAction {
                key: a.key,
                change: a.change_id,
                image: a.image,
                action: a.kind.as_str().into(),
                state: a.state,
                attempts: a.attempts,
                next_attempt: a.next_attempt,
                wave: a.wave,
                placed: crate::ledger::placed(a.progress.clone().and_then(|v| Progress::read(a.kind, v)).as_ref()),
                detail: if a.state == ActionState::Held { a.detail } else { None },
                waiting_for: None,
                gate: None,
            })
            .collect())
    }

    async fn change_gates(&self, change_id: &str) -> Result<Vec<GateAction>, LedgerError> {
        // The records are read whole from the API either way; only the answer is smaller.
        Ok(self.change_actions(change_id).await?.iter().map(ActionRecord::gate_action).collect())
    }

    async fn change_actions(&self, change_id: &str) -> Result<Vec<ActionRecord>, LedgerError> {
        let mut rows: Vec<ActionRecord> = self
            .all()
            .await?
            .into_iter()
            .flat_map(|(_, d)| d.actions)
            .filter(|a| a.change_id == change_id)
            .map(record)
            .collect();
        rows.sort_by(|a, b| (a.wave, a.created, &a.key).cmp(&(b.wave, b.created, &b.key)));
        Ok(rows)
    }

    async fn decide(
        &self,
        change_id: &str,
        image: Option<&str>,
        verdict: Verdict,
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<Decided>, LedgerError> {
        let Some(holder) = self.holder(|d| d.actions.iter().any(|a| a.change_id == change_id)).await? else {
            return Ok(Vec::new());
        };
        let now = now.trunc_subsecs(3);
        self.modify(&holder, |doc| {
            let mut out = Vec::new();
            for a in doc.actions.iter_mut().filter(|a| a.change_id == change_id) {
                if verdict == Verdict::Release {
                    a.released = true;
                }
                if image.is_some_and(|i| a.image != i) {
                    continue;
                }
                let Some(state) = verdict.next_state(&record(a.clone())) else { continue };
                a.state = state;
                a.updated = now;
                if matches!(verdict, Verdict::Approve | Verdict::Reject) {
                    a.decided_by = Some(by.to_string());
                    a.decided_at = Some(now.trunc_subsecs(0));
                }
                out.push(Decided { key: a.key.clone(), image: a.image.clone(), kind: a.kind, state });
            }
            Ok(out)
        })
        .await
    }

    async fn last_succeeded_target(&self, image: &str, kind: ActionKind) -> Result<Option<ActionTarget>, LedgerError> {
        let rows = self.all().await?.into_iter().flat_map(|(_, d)| d.actions);
        let last = rows
            .filter(|a| a.image == image && a.kind == kind && a.state == ActionState::Succeeded)
            .max_by_key(|a| a.updated);
        last.map(|a| {
            read_target(a.target)
                .map_err(|e| LedgerError::Corrupt { what: "action target", detail: format!("{image}: {e}") })
        })
        .transpose()
    }
}

pub(super) fn record(a: ActionRow) -> ActionRecord {
    ActionRecord {
        key: a.key,
        change: a.change_id,
        image: a.image,
        action: a.kind.as_str().into(),
        state: a.state,
        attempts: a.attempts,
        next_attempt: a.next_attempt,
        detail: a.detail,
        output_tail: a.output_tail,
        updated: a.updated,
        wave: a.wave,
        needs_approval: a.needs_approval,
        released: a.released,
        decided_by: a.decided_by,
        decided_at: a.decided_at,
        created: a.created,
        progress: a.progress.and_then(|v| Progress::read(a.kind, v)),
        holds: a.holds,
        expedited: a.expedited,
    }
}
