//! Actions in SQLite: one `actions` row per (change, image, kind), moved forward in transactions that
//! read the roll-out gates' inputs (every action of the changes concerned, the freeze) themselves.
//! What each write does to the rows is the ledger's rules (`ledger::rules`): this file loads the
//! rows a rule needs (or selects them in SQL, with the rule's states) and applies its change set.

use builder_monitor_core::rollout::Expedited;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};

use super::{Kind, SqliteLedger, State, Time, all, claims, exec, first, outbox, row, tags};
use crate::ledger::actions::{
    Gated, ImageLocks, Kinds, gate_rows, next_start, read_progress, read_target, target_json,
};
use crate::ledger::rules::{self, ChangeSoFar, action_kind, sql_states};
use crate::ledger::{
    ActionEnd, ActionRecord, ActionState, Actions, ClaimedAction, Decided, ImageHold, LatestAction, LedgerError,
    NewAction, OpenAction, ProcessGroup, Verdict,
};
use builder_monitor_core::plan::{ActionKind, ActionTarget};
use builder_monitor_core::progress::Progress;
use builder_monitor_core::rollout::{Freeze, GateAction, Rollout};
use builder_monitor_core::schedule::{parse_timestamp, timestamp, timestamp_millis};

/// The columns [`action_record`] reads.
const ACTION_COLUMNS: &str = "key, change_id, image, kind, state, attempts, next_attempt, detail, output_tail, updated,
     wave, needs_approval, released, decided_by, decided_at, created, progress, holds, expedited";

/// The columns [`claimed_action`] reads.
const CLAIMED_COLUMNS: &str =
    "key, change_id, image, kind, attempts, target, process_group, process_started, progress, created, expedited";

impl Actions for SqliteLedger {
    async fn claim_actions(
        &self,
        now: DateTime<Utc>,
        limit: usize,
        kinds: Kinds,
        rollout: &Rollout,
    ) -> Result<Vec<ClaimedAction>, LedgerError> {
        let rollout = rollout.clone();
        self.with(move |conn| {
            let tx = conn.transaction()?;
            let freeze = super::rollout::read_freeze(&tx)?;
            let keys: Vec<String> = if claims::streams(&rollout, freeze.as_ref(), now) {
                let locks = image_locks(&tx)?;
                claims::first_startable(&tx, kinds, &locks, Some(now), limit)?.into_iter().map(|(key, _)| key).collect()
            } else {
                rules::due_keys(gated_pending(&tx, kinds, &rollout, freeze.as_ref(), now)?, now, limit)
            };
            let mut claimed = Vec::new();
            let sql = format!("SELECT {CLAIMED_COLUMNS} FROM actions WHERE key = ?1");
            for key in keys {
                let Some(mut action) = first(&tx, &sql, params![key], claimed_action)? else { continue };
                let taken = rules::take(action.attempt, now);
                exec(
                    &tx,
                    "UPDATE actions SET state = ?2, attempts = ?3, updated = ?4,
                         process_group = NULL, process_started = NULL WHERE key = ?1",
                    params![key, taken.state.as_str(), taken.attempts, timestamp_millis(taken.updated)],
                )?;
                (action.attempt, action.process) = (taken.attempts, None);
                claimed.push(action);
            }
            tx.commit()?;
            Ok(claimed)
        })
        .await
    }

    async fn record_process(&self, key: &str, group: ProcessGroup) -> Result<(), LedgerError> {
        let key = key.to_string();
        self.with(move |conn| {
            exec(
                conn,
                "UPDATE actions SET process_group = ?2, process_started = ?3 WHERE key = ?1 AND state = 'running'",
                params![key, group.id, group.started as i64],
            )?;
            Ok(())
        })
        .await
    }

    async fn record_progress(&self, key: &str, progress: Progress) -> Result<bool, LedgerError> {
        let (key, progress) = (key.to_string(), progress.to_value());
        self.with(move |conn| {
            let n = exec(
                conn,
                "UPDATE actions SET progress = ?2 WHERE key = ?1 AND state = 'running'",
                params![key, progress.to_string()],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn hold_image(&self, hold: ImageHold<'_>) -> Result<bool, LedgerError> {
        let ImageHold { key, detail, watch, events, deliveries, history, now } = hold;
        let (key, watch) = (key.to_string(), watch.to_string());
        self.with(move |conn| {
            let tx = conn.transaction()?;
            let sql = format!("SELECT {ACTION_COLUMNS} FROM actions WHERE key = ?1");
            let action = first(&tx, &sql, params![key], action_record)?;
            let Some(held) = action.and_then(|a| rules::hold_image(&a, &detail, now)) else { return Ok(false) };
            exec(
                &tx,
                "UPDATE actions SET holds = 1, detail = ?2, updated = ?3 WHERE key = ?1",
                params![key, held.detail, timestamp_millis(held.updated)],
            )?;
            outbox::insert_events(&tx, &watch, now, &events, None, &deliveries, history)?;
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    async fn record_actions(
        &self,
        _entry: Option<&str>,
        actions: Vec<NewAction>,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        self.with(move |conn| {
            let tx = conn.transaction()?;
            insert_actions(&tx, &actions, timestamp_millis(now))?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn finish_action(&self, end: ActionEnd<'_>) -> Result<Option<ActionState>, LedgerError> {
        let (key, watch, end) = detach(end);
        self.with(move |conn| {
            let end = ActionEnd { key: &key, watch: &watch, ..end };
            let tx = conn.transaction()?;
            let state = row(&tx, "SELECT state FROM actions WHERE key = ?1", params![key], |r| r.get::<_, State>(0))
                .optional()?;
            let newer = match rules::asks_newer(&end.outcome, !end.follow.is_empty()) {
                true => tags::newer_change(&tx, &key)?,
                false => None,
            };
            let finish = rules::finish(&end, state.is_some_and(|s| s.0 == ActionState::Running), newer.as_deref());
            if finish.close_intent {
                tags::clear_action_intent(&tx, &key)?;
            }
            if let Some(ended) = &finish.row {
                exec(
                    &tx,
                    "UPDATE actions SET state = ?2, next_attempt = COALESCE(?3, next_attempt), detail = ?4,
                         output_tail = ?5, updated = ?6, holds = CASE WHEN ?7 THEN 1 ELSE holds END
                     WHERE key = ?1 AND state = 'running'",
                    params![
                        key,
                        ended.state.as_str(),
                        ended.next_attempt.map(timestamp_millis),
                        ended.detail,
                        ended.output_tail,
                        timestamp_millis(ended.updated),
                        ended.holds
                    ],
                )?;
            }
            let now = timestamp_millis(end.now);
            if finish.follow {
                insert_actions(&tx, &end.follow, now.clone())?;
                // What follows a released action is released with it: its change's lower waves
                // were let go for it too.
                for f in &end.follow {
                    exec(
                        &tx,
                        "UPDATE actions SET released = (SELECT released FROM actions WHERE key = ?2) WHERE key = ?1",
                        params![f.key, key],
                    )?;
                }
            }
            outbox::insert_events(&tx, &watch, end.now, &end.events, None, &end.deliveries, end.history)?;
            if let Some(m) = &end.tag_move {
                tags::insert_tag_move(&tx, m, end.history)?;
            }
            hold_later_waves(&tx, end.hold.as_ref(), &now)?;
            tx.commit()?;
            Ok(finish.row.map(|r| r.state))
        })
        .await
    }

    async fn next_action_at(
        &self,
        kinds: Kinds,
        rollout: &Rollout,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, LedgerError> {
        let rollout = rollout.clone();
        self.with(move |conn| {
            let freeze = super::rollout::read_freeze(conn)?;
            if claims::streams(&rollout, freeze.as_ref(), now) {
                // `next_start` with nothing frozen, a window open and no soak: the first that may start.
                let locks = image_locks(conn)?;
                return Ok(claims::first_startable(conn, kinds, &locks, None, 1)?.first().map(|(_, due)| *due));
            }
            let gated = gated_pending(conn, kinds, &rollout, freeze.as_ref(), now)?;
            Ok(next_start(gated, &rollout, freeze.as_ref(), now))
        })
        .await
    }

    async fn running_actions(&self) -> Result<Vec<ClaimedAction>, LedgerError> {
        self.with(|conn| {
            let sql = format!("SELECT {CLAIMED_COLUMNS} FROM actions WHERE state = 'running' ORDER BY updated");
            all(conn, &sql, [], claimed_action)
        })
        .await
    }

    async fn requeue_running(&self) -> Result<Vec<String>, LedgerError> {
        self.with(|conn| {
            let keys = all(conn, "SELECT key FROM actions WHERE state = 'running'", [], |r| Ok(r.get("key")?))?;
            exec(conn, "UPDATE actions SET state = 'pending' WHERE state = 'running'", [])?;
            Ok(keys)
        })
        .await
    }

    async fn requeue_actions(&self, keys: Vec<String>) -> Result<(), LedgerError> {
        self.with(move |conn| {
            let tx = conn.transaction()?;
            for key in &keys {
                exec(&tx, "UPDATE actions SET state = 'pending' WHERE key = ?1 AND state = 'running'", params![key])?;
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn actions(&self, limit: usize) -> Result<Vec<ActionRecord>, LedgerError> {
        self.with(move |conn| {
            let sql = format!("SELECT {ACTION_COLUMNS} FROM actions ORDER BY updated DESC, key LIMIT ?1");
            all(conn, &sql, params![limit as i64], action_record)
        })
        .await
    }

    async fn latest_actions(&self, kind: ActionKind) -> Result<Vec<LatestAction>, LedgerError> {
        self.with(move |conn| {
            // Of two created in the same millisecond, the one inserted last.
            let sql = format!(
                "SELECT {ACTION_COLUMNS}, target FROM actions a WHERE kind = ?1 AND NOT EXISTS
                     (SELECT 1 FROM actions b WHERE b.image = a.image AND b.kind = a.kind
                      AND (b.created > a.created OR (b.created = a.created AND b.rowid > a.rowid)))
                 ORDER BY image"
            );
            all(conn, &sql, params![kind.as_str()], |r| {
                let record = action_record(r)?;
                let text: String = r.get("target")?;
                let target = serde_json::from_str(&text).ok().and_then(|v| read_target(v).ok());
                Ok(LatestAction { record, target })
            })
        })
        .await
    }

    async fn open_actions(&self) -> Result<Vec<OpenAction>, LedgerError> {
        self.with(|conn| {
            all(
                conn,
                "SELECT key, change_id, image, kind, state, attempts, next_attempt, wave, detail, progress FROM actions
                 WHERE state IN ('pending', 'running', 'held', 'awaiting_approval') ORDER BY created, wave, key",
                [],
                |r| {
                    let state = r.get::<_, State>("state")?.0;
                    Ok(OpenAction {
                        key: r.get("key")?,
                        change: r.get("change_id")?,
                        image: r.get("image")?,
                        action: r.get::<_, Kind>("kind")?.0,
                        state,
                        attempts: r.get("attempts")?,
                        next_attempt: r.get::<_, Time>("next_attempt")?.0,
                        wave: r.get("wave")?,
                        detail: if state == ActionState::Held { r.get("detail")? } else { None },
                        waiting_for: None,
                        gate: None,
                        placed: {
                            let kind = ActionKind::parse(&r.get::<_, String>("kind")?);
                            crate::ledger::placed(progress(kind, r.get("progress")?).as_ref())
                        },
                    })
                },
            )
        })
        .await
    }

    async fn change_actions(&self, change_id: &str) -> Result<Vec<ActionRecord>, LedgerError> {
        let change_id = change_id.to_string();
        self.with(move |conn| change_rows(conn, &change_id)).await
    }

    async fn change_gates(&self, change_id: &str) -> Result<Vec<GateAction>, LedgerError> {
        let change_id = change_id.to_string();
        self.with(move |conn| {
            all(
                conn,
                "SELECT key, image, wave, state, released, created, kind, updated, expedited FROM actions
                 WHERE change_id = ?1 ORDER BY wave, created, key",
                params![change_id],
                |r| {
                    Ok(GateAction {
                        key: r.get("key")?,
                        image: r.get("image")?,
                        wave: r.get("wave")?,
                        state: r.get::<_, State>("state")?.0,
                        released: r.get("released")?,
                        created: r.get::<_, Time>("created")?.0,
                        deploy: ActionKind::parse(&r.get::<_, String>("kind")?) == Some(ActionKind::Deploy),
                        updated: r.get::<_, Time>("updated")?.0,
                        expedited: !expedited_of(r.get("expedited")?).is_empty(),
                    })
                },
            )
        })
        .await
    }

    async fn decide(
        &self,
        change_id: &str,
        image: Option<&str>,
        verdict: Verdict,
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<Decided>, LedgerError> {
        let (change_id, image, by) = (change_id.to_string(), image.map(str::to_string), by.to_string());
        self.with(move |conn| {
            let tx = conn.transaction()?;
            let rows = change_rows(&tx, &change_id)?;
            let decision = rules::decide(&rows, image.as_deref(), verdict, &by, now)?;
            for m in &decision.moves {
                let (by, at) = m.decided.as_ref().map(|(by, at)| (by, timestamp(*at))).unzip();
                exec(
                    &tx,
                    "UPDATE actions SET state = ?2, updated = ?3, decided_by = COALESCE(?4, decided_by),
                         decided_at = COALESCE(?5, decided_at)
                     WHERE key = ?1",
                    params![m.key, m.state.as_str(), timestamp_millis(decision.updated), by, at],
                )?;
            }
            if decision.release {
                // Rows that stay as they are (running, finished) are marked released too, so the
                // change's later waves stop waiting for them.
                exec(&tx, "UPDATE actions SET released = 1 WHERE change_id = ?1", params![change_id])?;
            }
            tx.commit()?;
            Ok(decision.answer())
        })
        .await
    }

    async fn last_succeeded_target(&self, image: &str, kind: ActionKind) -> Result<Option<ActionTarget>, LedgerError> {
        let image = image.to_string();
        self.with(move |conn| {
            let text: Option<String> = row(
                conn,
                "SELECT target FROM actions WHERE image = ?1 AND kind = ?2 AND state = 'succeeded'
                 ORDER BY updated DESC, rowid DESC LIMIT 1",
                params![image, kind.as_str()],
                |r| r.get("target"),
            )
            .optional()?;
            let Some(text) = text else { return Ok(None) };
            let target = read_target(target_value(&image, &text)?)
                .map_err(|e| LedgerError::Corrupt { what: "action target", detail: format!("{image}: {e}") })?;
            Ok(Some(target))
        })
        .await
    }
}

/// Records `actions` at `now`; the image's older actions that have not started yield to each one
/// added (`rules::yields`, selected here in SQL). An action recorded already stays as it is, and
/// nothing yields to it: a check that stopped after recording its first actions plans the same move
/// again, and an action of a newer change recorded since is the newer one. An action that arrives
/// after its change's first ones (planning in batches) finds the change as they left it: held by a
/// lower wave's failure, or released (`rules::arrive`).
pub(super) fn insert_actions(tx: &Transaction<'_>, actions: &[NewAction], now: String) -> Result<(), LedgerError> {
    let supersede = format!(
        "UPDATE actions SET state = '{}', detail = ?3, updated = ?4
         WHERE image = ?1 AND state IN ({}) AND change_id != ?2",
        ActionState::Superseded.as_str(),
        sql_states(&rules::YIELDING)
    );
    // Whether each change was released, read once per change: a fleet's change has thousands.
    let mut released_changes: std::collections::HashMap<&str, bool> = Default::default();
    for a in actions {
        let released = match released_changes.get(a.change_id.as_str()) {
            Some(r) => *r,
            None => {
                let r = row(
                    tx,
                    "SELECT EXISTS (SELECT 1 FROM actions WHERE change_id = ?1 AND released = 1)",
                    params![a.change_id],
                    |r| r.get::<_, bool>(0),
                )?;
                released_changes.insert(&a.change_id, r);
                r
            }
        };
        let failed = if released { Vec::new() } else { failed_below(tx, a)? };
        let change = ChangeSoFar { released, failed };
        let arrival = rules::arrive(a, &change);
        let (target, due) = arrival_target(tx, a, &now)?;
        let added = exec(
            tx,
            "INSERT INTO actions (change_id, image, key, kind, state, attempts, next_attempt, target, created, updated,
                                  wave, needs_approval, detail, released, expedited)
             VALUES (?1, ?2, ?3, ?4, ?7, 0, ?13, ?6, ?5, ?5, ?8, ?9, ?10, ?11, ?12)
             ON CONFLICT (change_id, image, kind) DO NOTHING",
            params![
                a.change_id,
                a.image,
                a.key,
                a.kind.as_str(),
                now,
                target_json(&target)?.to_string(),
                arrival.state.as_str(),
                a.wave,
                a.needs_approval,
                arrival.detail,
                arrival.released,
                expedited_json(&a.expedited),
                due
            ],
        )?;
        if added == 1 {
            exec(tx, &supersede, params![a.image, a.change_id, rules::superseded_by(&a.change_id), now])?;
        }
    }
    Ok(())
}

/// What `a` is recorded with and when it may start (`NewAction::arrival`): a batched one reads
/// the actions of its subject that yield to it, in the same transaction.
fn arrival_target(tx: &Transaction<'_>, a: &NewAction, now: &str) -> Result<(ActionTarget, String), LedgerError> {
    let Some(at) = a.batch.and(parse_timestamp(now)) else {
        return Ok((a.target.clone(), now.to_string()));
    };
    let sql = format!(
        "SELECT change_id, target, next_attempt FROM actions
         WHERE image = ?1 AND state IN ({}) AND change_id != ?2
         ORDER BY created, rowid",
        sql_states(&rules::YIELDING)
    );
    let older = all(tx, &sql, params![a.image, a.change_id], |r| {
        let change: String = r.get("change_id")?;
        let text: String = r.get("target")?;
        let target = read_target(target_value(&a.image, &text)?)
            .map_err(|e| LedgerError::Corrupt { what: "action target", detail: format!("{}: {e}", a.image) })?;
        Ok((change, target, r.get::<_, Time>("next_attempt")?.0))
    })?;
    let (target, due) = a.arrival(at, &older);
    Ok((target, timestamp_millis(due)))
}

/// The first failed action of `a`'s change in a lower wave, `(wave, image)`, if any: the one
/// `rules::held_on_arrival` words the arrival's hold by, selected here by an indexed look-up.
fn failed_below(tx: &Transaction<'_>, a: &NewAction) -> Result<Vec<(u32, String)>, LedgerError> {
    let failed = row(
        tx,
        "SELECT wave, image FROM actions WHERE change_id = ?1 AND state = 'failed' AND wave < ?2
         ORDER BY wave, image LIMIT 1",
        params![a.change_id, a.wave],
        |r| Ok((r.get::<_, u32>("wave")?, r.get::<_, String>("image")?)),
    )
    .optional()?;
    Ok(failed.into_iter().collect())
}

/// Holds the later waves a failure named ([`rules::HOLDABLE`] ones only), at `now`.
fn hold_later_waves(tx: &Transaction<'_>, hold: Option<&crate::ledger::Hold>, now: &str) -> Result<(), LedgerError> {
    let Some(hold) = hold else { return Ok(()) };
    let sql = format!(
        "UPDATE actions SET state = '{}', detail = ?2, updated = ?3 WHERE key = ?1 AND state IN ({})",
        ActionState::Held.as_str(),
        sql_states(&rules::HOLDABLE)
    );
    for key in &hold.keys {
        exec(tx, &sql, params![key, hold.detail, now])?;
    }
    Ok(())
}

/// An attempt's end as the connection's thread takes it: its key and watch owned, the rest moved.
fn detach(end: ActionEnd<'_>) -> (String, String, ActionEnd<'static>) {
    let ActionEnd {
        key,
        outcome,
        detail,
        output_tail,
        watch,
        events,
        deliveries,
        history,
        now,
        tag_move,
        hold,
        keep_intent,
        follow,
        hold_image,
    } = end;
    let rest = ActionEnd {
        key: "",
        outcome,
        detail,
        output_tail,
        watch: "",
        events,
        deliveries,
        history,
        now,
        tag_move,
        hold,
        keep_intent,
        follow,
        hold_image,
    };
    (key.to_string(), watch.to_string(), rest)
}

/// An [`ActionRecord`] from a row of [`ACTION_COLUMNS`].
fn action_record(r: &Row<'_>) -> Result<ActionRecord, LedgerError> {
    Ok(ActionRecord {
        key: r.get(col!(ACTION_COLUMNS, "key"))?,
        change: r.get(col!(ACTION_COLUMNS, "change_id"))?,
        image: r.get(col!(ACTION_COLUMNS, "image"))?,
        action: r.get::<_, Kind>(col!(ACTION_COLUMNS, "kind"))?.0,
        state: r.get::<_, State>(col!(ACTION_COLUMNS, "state"))?.0,
        attempts: r.get(col!(ACTION_COLUMNS, "attempts"))?,
        next_attempt: r.get::<_, Time>(col!(ACTION_COLUMNS, "next_attempt"))?.0,
        detail: r.get(col!(ACTION_COLUMNS, "detail"))?,
        output_tail: r.get(col!(ACTION_COLUMNS, "output_tail"))?,
        updated: r.get::<_, Time>(col!(ACTION_COLUMNS, "updated"))?.0,
        wave: r.get(col!(ACTION_COLUMNS, "wave"))?,
        needs_approval: r.get(col!(ACTION_COLUMNS, "needs_approval"))?,
        released: r.get(col!(ACTION_COLUMNS, "released"))?,
        decided_by: r.get(col!(ACTION_COLUMNS, "decided_by"))?,
        decided_at: r.get::<_, Option<Time>>(col!(ACTION_COLUMNS, "decided_at"))?.map(|t| t.0),
        created: r.get::<_, Time>(col!(ACTION_COLUMNS, "created"))?.0,
        progress: progress(
            ActionKind::parse(&r.get::<_, String>(col!(ACTION_COLUMNS, "kind"))?),
            r.get(col!(ACTION_COLUMNS, "progress"))?,
        ),
        holds: r.get(col!(ACTION_COLUMNS, "holds"))?,
        expedited: expedited_of(r.get(col!(ACTION_COLUMNS, "expedited"))?),
    })
}

/// What the `expedited` column holds: `{records, source}`, or (written before sources were) a
/// list of ids; NULL or text that is neither: not expedited.
fn expedited_of(text: Option<String>) -> Expedited {
    text.and_then(|text| serde_json::from_str(&text).ok()).unwrap_or_default()
}

/// The `expedited` column: `{records, source}` as JSON, NULL for none.
fn expedited_json(expedited: &Expedited) -> Option<String> {
    (!expedited.is_empty()).then(|| serde_json::to_string(expedited).unwrap_or_default())
}

/// A [`ClaimedAction`] from a row of [`CLAIMED_COLUMNS`]: a target that is not JSON is
/// [`LedgerError::Corrupt`], one that is JSON but no target is the runner's to fail.
fn claimed_action(r: &Row<'_>) -> Result<ClaimedAction, LedgerError> {
    let key: String = r.get(col!(CLAIMED_COLUMNS, "key"))?;
    let kind = action_kind(&key, &r.get::<_, String>(col!(CLAIMED_COLUMNS, "kind"))?)?;
    let target: String = r.get(col!(CLAIMED_COLUMNS, "target"))?;
    let group: Option<u32> = r.get(col!(CLAIMED_COLUMNS, "process_group"))?;
    let started: Option<i64> = r.get(col!(CLAIMED_COLUMNS, "process_started"))?;
    Ok(ClaimedAction {
        change_id: r.get(col!(CLAIMED_COLUMNS, "change_id"))?,
        image: r.get(col!(CLAIMED_COLUMNS, "image"))?,
        kind,
        attempt: r.get(col!(CLAIMED_COLUMNS, "attempts"))?,
        target: read_target(target_value(&key, &target)?),
        process: group.zip(started).map(|(id, started)| ProcessGroup { id, started: started.max(0) as u64 }),
        progress: progress(Some(kind), r.get(col!(CLAIMED_COLUMNS, "progress"))?),
        created: r.get::<_, Time>(col!(CLAIMED_COLUMNS, "created"))?.0,
        expedited: expedited_of(r.get(col!(CLAIMED_COLUMNS, "expedited"))?),
        key,
    })
}

/// A stored progress record of an action of `kind` (as read from its row: none when its name is no
/// kind's); one that is not JSON, or not that kind's record, is read as none ([`read_progress`]).
fn progress(kind: Option<ActionKind>, text: Option<String>) -> Option<Progress> {
    read_progress(kind, text.and_then(|t| serde_json::from_str(&t).ok()))
}

/// A stored target as JSON (`of`: its action's key or image, for the error).
fn target_value(of: &str, text: &str) -> Result<serde_json::Value, LedgerError> {
    serde_json::from_str(text).map_err(|e| LedgerError::Corrupt { what: "action target", detail: format!("{of}: {e}") })
}

fn change_rows(conn: &Connection, change_id: &str) -> Result<Vec<ActionRecord>, LedgerError> {
    let sql = format!("SELECT {ACTION_COLUMNS} FROM actions WHERE change_id = ?1 ORDER BY wave, created, key");
    all(conn, &sql, params![change_id], action_record)
}

/// The verdict of the roll-out gates on every pending action (of `kind`, when given): for each,
/// its key, when it is due and whether it may start now.
pub(super) fn gated_pending(
    conn: &Connection,
    kinds: Kinds,
    rollout: &Rollout,
    freeze: Option<&Freeze>,
    now: DateTime<Utc>,
) -> Result<Vec<Gated>, LedgerError> {
    // One kind is filtered here; several are filtered by `gate_rows`.
    let only = kinds.single().map(ActionKind::as_str);
    let sql = format!(
        "SELECT {ACTION_COLUMNS} FROM actions WHERE change_id IN
             (SELECT change_id FROM actions WHERE state = 'pending' AND (?1 IS NULL OR kind = ?1))
         ORDER BY change_id, wave, created, key"
    );
    let rows = all(conn, &sql, params![only], action_record)?;
    Ok(gate_rows(&rows, kinds, rollout, freeze, now, &image_locks(conn)?))
}

/// Every running action's image, and every unreleased hold on one.
pub(super) fn image_locks(conn: &Connection) -> Result<ImageLocks, LedgerError> {
    let locking =
        format!("SELECT {ACTION_COLUMNS} FROM actions WHERE state = 'running' OR (holds = 1 AND released = 0)");
    Ok(ImageLocks::of(&all(conn, &locking, [], action_record)?))
}
