//! Actions on Kubernetes: the rows of a change live in the entry that planned them (the
//! builder's, or the run image's for a rebase), so deciding on a change is one write; taking an
//! action on reads every entry for the gates, then writes its own entry, with the gates read again
//! there. What each write does to the rows is the ledger's rules (`ledger::rules`); this file
//! finds the entries, reads their rows and applies the change sets in each entry's write.

use builder_monitor_core::rollout::Expedited;
use std::collections::BTreeMap;

use chrono::SubsecRound;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::progress::StoredProgress;
use super::{KubeLedger, WatchDoc};
use crate::ledger::actions::{ImageLocks, Kinds, gate_rows, next_start, read_target, target_json};
use crate::ledger::rules::{self, ActionFacts, ChangeSoFar};
use crate::ledger::time;
use crate::ledger::{
    ActionEnd, ActionRecord, ActionState, Actions, ClaimedAction, Decided, ImageHold, LatestAction, LedgerError,
    NewAction, OpenAction, Outbox, ProcessGroup, TagWrites, Verdict,
};
use builder_monitor_core::plan::{ActionKind, ActionTarget};
use builder_monitor_core::progress::Progress;
use builder_monitor_core::rollout::{GateAction, Rollout};
use chrono::{DateTime, Utc};

/// An action row of an entry. Its serde is derived (`remote = "Self"`, so the trait impls below
/// can wrap it): the progress record is decoded once, after the row is read, by the row's kind.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(remote = "Self")]
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
    pub(super) progress: Option<StoredProgress>,
    /// It holds its image (a failed or overridden deploy).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) holds: bool,
    /// The fixes that let it skip the soak and the windows (`[rollout] expedite`).
    #[serde(default, skip_serializing_if = "Expedited::is_empty")]
    pub(super) expedited: Expedited,
}

impl Serialize for ActionRow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ActionRow::serialize(self, s)
    }
}

impl<'de> Deserialize<'de> for ActionRow {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut row = ActionRow::deserialize(d)?;
        if let Some(progress) = row.progress.as_mut() {
            progress.decode(row.kind);
        }
        Ok(row)
    }
}

impl ActionFacts for ActionRow {
    fn key(&self) -> &str {
        &self.key
    }
    fn change(&self) -> &str {
        &self.change_id
    }
    fn image(&self) -> &str {
        &self.image
    }
    fn state(&self) -> ActionState {
        self.state
    }
    fn wave(&self) -> u32 {
        self.wave
    }
    fn released(&self) -> bool {
        self.released
    }
    fn created(&self) -> DateTime<Utc> {
        self.created
    }
}

impl ActionRow {
    /// Its progress record, as read.
    fn progress(&self) -> Option<Progress> {
        self.progress.as_ref().and_then(StoredProgress::read).cloned()
    }

    /// Whether it yields to an action of `change` recorded for `image` (`rules::yields`).
    fn yields_to(&self, image: &str, change: &str) -> bool {
        self.image == image && rules::yields(self, change)
    }

    /// Yields to `change` at `now`.
    fn supersede(&mut self, change: &str, now: DateTime<Utc>) {
        self.state = ActionState::Superseded;
        self.detail = Some(rules::superseded_by(change));
        self.updated = now;
    }

    /// As a runner takes it on (or finds it running): its target read, its progress as read.
    fn claimed(&self) -> ClaimedAction {
        ClaimedAction {
            key: self.key.clone(),
            change_id: self.change_id.clone(),
            image: self.image.clone(),
            kind: self.kind,
            attempt: self.attempts,
            target: read_target(self.target.clone()),
            process: self.process,
            progress: self.progress(),
            created: self.created,
            expedited: self.expedited.clone(),
        }
    }
}

/// The wave of an action written before waves existed.
fn first_wave() -> u32 {
    1
}

fn is_first_wave(wave: &u32) -> bool {
    *wave == 1
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
                for o in self.actions.iter().filter(|o| o.yields_to(&a.image, &a.change_id)) {
                    let target = read_target(o.target.clone()).map_err(|e| LedgerError::Corrupt {
                        what: "action target",
                        detail: format!("{}: {e}", o.key),
                    })?;
                    older.push((o.change_id.clone(), target, o.next_attempt));
                }
            }
            let (target, due) = a.arrival(now, &older);
            for old in self.actions.iter_mut().filter(|o| o.yields_to(&a.image, &a.change_id)) {
                old.supersede(&a.change_id, now);
            }
            // The change as its first actions left it.
            let arrival =
                rules::arrive(a, &ChangeSoFar::of(self.actions.iter().filter(|o| o.change_id == a.change_id)));
            self.actions.push(ActionRow {
                key: a.key.clone(),
                change_id: a.change_id.clone(),
                image: a.image.clone(),
                kind: a.kind,
                state: arrival.state,
                attempts: 0,
                next_attempt: due,
                target: target_json(&target)?,
                detail: arrival.detail,
                output_tail: None,
                process: None,
                created: now,
                updated: now,
                wave: a.wave,
                needs_approval: a.needs_approval,
                released: arrival.released,
                decided_by: None,
                decided_at: None,
                progress: None,
                holds: false,
                expedited: a.expedited.clone(),
            });
            added.push((a.image.clone(), a.change_id.clone()));
        }
        Ok(added)
    }
}

impl WatchDoc {
    /// Records an attempt's end in this entry, the holder of its action ([`rules::finish`]'s
    /// change set, `newer` the change that supersedes it): its row, the actions that follow, the
    /// hold of the change's later waves, its tag move, and its events when they are this entry's
    /// (`same`). Answers the state recorded (none: the action was not running).
    fn finish(
        &mut self,
        end: &ActionEnd<'_>,
        newer: Option<&str>,
        same: bool,
        seq: &std::sync::atomic::AtomicI64,
    ) -> Result<Option<ActionState>, LedgerError> {
        let now = end.now.trunc_subsecs(3);
        let running = |a: &ActionRow| a.key == end.key && a.state == ActionState::Running;
        let finish = rules::finish(end, self.actions.iter().any(running), newer);
        if finish.close_intent {
            self.tag_intents.retain(|i| i.action.as_deref() != Some(end.key));
        }
        if let Some(row) = &finish.row
            && let Some(a) = self.actions.iter_mut().find(|a| running(a))
        {
            (a.state, a.detail, a.output_tail, a.updated) =
                (row.state, Some(row.detail.clone()), Some(row.output_tail.clone()), row.updated);
            a.next_attempt = row.next_attempt.unwrap_or(a.next_attempt);
            a.holds |= row.holds;
        }
        if finish.follow {
            self.add_actions(&end.follow, now)?;
            // What follows a released action is released with it.
            let released = self.actions.iter().any(|a| a.key == end.key && a.released);
            for a in self.actions.iter_mut().filter(|a| end.follow.iter().any(|f| f.key == a.key)) {
                a.released |= released;
            }
        }
        for (key, detail) in end.hold.iter().flat_map(|h| h.keys.iter().map(move |k| (k, &h.detail))) {
            // The change's rows all live in this entry.
            if let Some(a) = self.actions.iter_mut().find(|a| &a.key == key && rules::holdable(a.state)) {
                (a.state, a.detail, a.updated) = (ActionState::Held, Some(detail.clone()), now);
            }
        }
        if same {
            self.add_events(&end.events, &end.deliveries, now, end.history, seq);
        }
        if let Some(m) = &end.tag_move {
            self.add_tag_move(m, end.history, seq);
        }
        Ok(finish.row.map(|r| r.state))
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
        let yields =
            |doc: &WatchDoc| added.iter().any(|(image, change)| doc.actions.iter().any(|o| o.yields_to(image, change)));
        for (_, doc) in self.all().await? {
            let Some(other) = doc.watch.as_ref().map(|w| w.name.clone()).filter(|n| n != watch) else { continue };
            if !yields(&doc) {
                continue;
            }
            self.modify(&other, |d| {
                for (image, change) in added {
                    for old in d.actions.iter_mut().filter(|o| o.yields_to(image, change)) {
                        old.supersede(change, now);
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
        let due = rules::due_keys(gate_rows(&rows, kinds, rollout, freeze.as_ref(), now, &locks), now, limit);
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
                            let taken = rules::take(a.attempts, now);
                            (a.state, a.attempts, a.updated, a.process) =
                                (taken.state, taken.attempts, taken.updated, None);
                            a.claimed()
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
        let Some(holder) = self.holder(|d| d.actions.iter().any(|a| a.key == key)).await? else {
            return Ok(false);
        };
        self.modify(&holder, |doc| {
            Ok(doc
                .actions
                .iter_mut()
                .find(|a| a.key == key && a.state == ActionState::Running)
                .map(|a| a.progress = Some(StoredProgress::of(a.kind, &progress)))
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
                let Some(a) = doc.actions.iter_mut().find(|a| a.key == key) else { return Ok(false) };
                let Some(held) = rules::hold_image(&*a, &detail, now) else { return Ok(false) };
                (a.holds, a.detail, a.updated) = (true, Some(held.detail), held.updated);
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
        let holder = self.holder(|d| d.actions.iter().any(|a| a.key == end.key)).await?;
        let newer = match rules::asks_newer(&end.outcome, !end.follow.is_empty()) {
            true => self.newer_change(end.key).await?,
            false => None,
        };
        let seq = self.seq.clone();
        let same = holder.as_deref() == Some(end.watch) || holder.is_none();
        let mut ended = None;
        if let Some(holder) = &holder {
            ended = self.modify(holder, |doc| doc.finish(&end, newer.as_deref(), same, &seq)).await?;
        }
        let ActionEnd { watch, events, deliveries, history, now, tag_move, .. } = end;
        if !same {
            self.record_events(watch, events, deliveries, history, now).await?;
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
            out.extend(doc.actions.iter().filter(|a| a.state == ActionState::Running).map(ActionRow::claimed));
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
                        for a in d.actions.iter_mut() {
                            if let Some(state) = rules::requeue(a.state) {
                                a.state = state;
                                keys.push(a.key.clone());
                            }
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
                    for a in d.actions.iter_mut().filter(|a| keys.contains(&a.key)) {
                        a.state = rules::requeue(a.state).unwrap_or(a.state);
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
                placed: crate::ledger::placed(a.progress().as_ref()),
                key: a.key,
                change: a.change_id,
                image: a.image,
                action: a.kind,
                state: a.state,
                attempts: a.attempts,
                next_attempt: a.next_attempt,
                wave: a.wave,
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
        self.modify(&holder, |doc| {
            let rows: Vec<ActionRecord> =
                doc.actions.iter().filter(|a| a.change_id == change_id).cloned().map(record).collect();
            let decision = rules::decide(&rows, image, verdict, by, now)?;
            // The moves come in the rows' order.
            let mut moves = decision.moves.iter().peekable();
            for a in doc.actions.iter_mut().filter(|a| a.change_id == change_id) {
                a.released |= decision.release;
                let Some(m) = moves.next_if(|m| m.key == a.key) else { continue };
                (a.state, a.updated) = (m.state, decision.updated);
                if let Some((by, at)) = &m.decided {
                    (a.decided_by, a.decided_at) = (Some(by.clone()), Some(*at));
                }
            }
            Ok(decision.answer())
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
        action: a.kind,
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
        progress: a.progress.and_then(StoredProgress::into_read),
        holds: a.holds,
        expedited: a.expedited,
    }
}
