//! The alert outbox in SQLite: one row per (event, alert), in lanes — the deliveries to one alert
//! about one subject ([`subject_key`]) — each sent in the order its events were recorded.
//!
//! A delivery row keeps its lane's subject and its event's `seq` (the events table's order), so
//! the head of every lane — its oldest pending delivery — is one indexed look-up.

use std::collections::HashSet;

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::{SqliteLedger, Time, exec, row};
use crate::ledger::{
    DeadLetter, DeliveryKey, DeliveryState, DeliveryUpdate, DueDelivery, LedgerError, PendingDelivery,
};
use builder_monitor_core::event::{Event, subject_key};
use builder_monitor_core::schedule::timestamp_millis;
use chrono::{DateTime, Utc};

/// Whether delivery `d` heads its lane: no pending delivery to the same alert about the same
/// subject has an older event.
const HEADS: &str = "NOT EXISTS (SELECT 1 FROM deliveries o WHERE o.alert = d.alert AND o.subject = d.subject
                         AND o.state = 'pending' AND o.event_seq < d.event_seq)";

impl SqliteLedger {
    /// Deliveries that were given up on.
    pub async fn dead_letters(&self) -> Result<Vec<DeadLetter>, LedgerError> {
        self.with(|conn| {
            let mut stmt = conn.prepare(
                "SELECT d.event, e.type, d.alert, d.attempts, d.last_status, d.updated FROM deliveries d
                 JOIN events e ON e.id = d.event WHERE d.state = 'dead' ORDER BY d.updated",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(DeadLetter {
                    event: r.get(0)?,
                    event_type: r.get(1)?,
                    alert: r.get(2)?,
                    attempts: r.get(3)?,
                    last_status: r.get(4)?,
                    time: r.get::<_, Time>(5)?.0,
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
    }

    /// The deliveries due at `now` that head their lanes, soonest due first, with their events:
    /// a later delivery of a lane waits until the one before it is sent or dead.
    pub async fn due_deliveries(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<DueDelivery>, LedgerError> {
        let now = timestamp_millis(now);
        self.with(move |conn| {
            let sql = format!(
                "SELECT d.alert, d.attempts, d.created, d.subject, e.document FROM deliveries d
                 JOIN events e ON e.id = d.event
                 WHERE d.state = 'pending' AND d.next_attempt <= ?1 AND {HEADS}
                 ORDER BY d.next_attempt, d.event_seq LIMIT ?2"
            );
            let mut stmt = conn.prepare_cached(&sql)?;
            let rows = stmt.query_map(params![now, limit as i64], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, u32>(1)?,
                    r.get::<_, Time>(2)?.0,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, String>(4)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (alert, attempts, created, subject, document) = row?;
                let event: Event = serde_json::from_str(&document)
                    .map_err(|e| LedgerError::Corrupt { what: "event", detail: e.to_string() })?;
                let subject = subject.unwrap_or_else(|| subject_key(&event));
                out.push(DueDelivery { event, alert, attempts, created, subject });
            }
            Ok(out)
        })
        .await
    }

    /// When the next lane head is due, of the lanes none of `exclude` (those in flight) is in:
    /// a lane with a send in flight has nothing due until that send is recorded.
    pub async fn next_delivery_at(&self, exclude: &[DeliveryKey]) -> Result<Option<DateTime<Utc>>, LedgerError> {
        let exclude = exclude.to_vec();
        self.with(move |conn| {
            let mut busy = HashSet::new();
            for key in &exclude {
                let subject: Option<Option<String>> = row(
                    conn,
                    "SELECT subject FROM deliveries WHERE event = ?1 AND alert = ?2",
                    params![key.event, key.alert],
                    |r| r.get(0),
                )
                .optional()?;
                busy.insert((key.alert.clone(), subject.flatten()));
            }
            let sql = format!(
                "SELECT d.alert, d.subject, d.next_attempt FROM deliveries d
                 WHERE d.state = 'pending' AND {HEADS} ORDER BY d.next_attempt"
            );
            let mut stmt = conn.prepare_cached(&sql)?;
            let rows = stmt.query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?, r.get::<_, Time>(2)?.0))
            })?;
            for row in rows {
                let (alert, subject, next) = row?;
                if !busy.contains(&(alert, subject)) {
                    return Ok(Some(next));
                }
            }
            Ok(None)
        })
        .await
    }

    /// Moves a delivery forward after an attempt.
    pub async fn update_delivery(
        &self,
        event: &str,
        alert: &str,
        update: DeliveryUpdate,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        let (event, alert) = (event.to_string(), alert.to_string());
        self.with(move |conn| {
            let now = timestamp_millis(now);
            let (state, next, status) = match &update {
                DeliveryUpdate::Sent { status } => (DeliveryState::Sent, None, status),
                DeliveryUpdate::Retry { next_attempt, status } => {
                    (DeliveryState::Pending, Some(timestamp_millis(*next_attempt)), status)
                }
                DeliveryUpdate::Dead { status } => (DeliveryState::Dead, None, status),
            };
            exec(
                conn,
                "UPDATE deliveries SET state = ?3, attempts = attempts + 1, next_attempt = COALESCE(?4, next_attempt),
                     last_status = ?5, updated = ?6
                 WHERE event = ?1 AND alert = ?2 AND state = 'pending'",
                params![event, alert, state, next, status, now],
            )?;
            Ok(())
        })
        .await
    }

    /// Deliveries still to make (`status`).
    pub async fn pending_deliveries(&self) -> Result<Vec<PendingDelivery>, LedgerError> {
        self.with(|conn| {
            let mut stmt = conn.prepare(
                "SELECT d.event, e.type, d.alert, d.attempts, d.next_attempt, d.last_status FROM deliveries d
                 JOIN events e ON e.id = d.event WHERE d.state = 'pending' ORDER BY d.next_attempt, d.event_seq",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(PendingDelivery {
                    event: r.get(0)?,
                    event_type: r.get(1)?,
                    alert: r.get(2)?,
                    attempts: r.get(3)?,
                    next_attempt: r.get::<_, Time>(4)?.0,
                    last_status: r.get(5)?,
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
    }
}

/// Adds outbox rows (`events` are the ones just recorded; a delivery may also name an event
/// recorded before, e.g. a `check.failed` an alert hears of at its threshold). Each row takes its
/// event's subject and place in the events' order.
pub(super) fn insert_deliveries(
    tx: &Transaction<'_>,
    events: &[Event],
    deliveries: &[DeliveryKey],
    now: DateTime<Utc>,
) -> Result<(), LedgerError> {
    let now = timestamp_millis(now);
    for DeliveryKey { event, alert } in deliveries {
        let subject = match events.iter().find(|e| &e.id == event) {
            Some(e) => Some(subject_key(e)),
            None => stored_subject(tx, event)?,
        };
        // An event the ledger lacks leaves `event_seq` NULL, and the foreign key refuses the row.
        exec(
            tx,
            "INSERT INTO deliveries (event, alert, state, attempts, next_attempt, created, updated, subject, event_seq)
             VALUES (?1, ?2, 'pending', 0, ?3, ?3, ?3, ?4, (SELECT seq FROM events WHERE id = ?1))
             ON CONFLICT (event, alert) DO NOTHING",
            params![event, alert, now, subject],
        )?;
    }
    Ok(())
}

/// The subject of a recorded event, from its document.
fn stored_subject(conn: &Connection, event: &str) -> Result<Option<String>, LedgerError> {
    let document: Option<String> =
        row(conn, "SELECT document FROM events WHERE id = ?1", params![event], |r| r.get(0)).optional()?;
    document
        .map(|d| {
            serde_json::from_str::<Event>(&d)
                .map(|e| subject_key(&e))
                .map_err(|e| LedgerError::Corrupt { what: "event", detail: format!("{event}: {e}") })
        })
        .transpose()
}

/// Schema 7: the subject of every pending delivery written before lanes existed (finished ones
/// head no lane and keep none), inside the migration's transaction.
pub(super) fn backfill_subjects(tx: &Transaction<'_>) -> Result<(), LedgerError> {
    let events: Vec<String> = tx
        .prepare("SELECT DISTINCT event FROM deliveries WHERE state = 'pending' AND subject IS NULL")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for event in events {
        let subject = stored_subject(tx, &event)?;
        exec(tx, "UPDATE deliveries SET subject = ?2 WHERE event = ?1 AND subject IS NULL", params![event, subject])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::super::{LANES, MIGRATIONS};
    use super::*;
    use crate::ledger::FreezeEvents;
    use builder_monitor_core::event::{EventType, Subject};
    use builder_monitor_core::schedule::parse_timestamp;

    /// A ledger of the schema before lanes — pending deliveries of two subjects, a freeze in
    /// force — opened by this version: its deliveries go in lanes, and the freeze counts as the
    /// first state change.
    #[tokio::test]
    async fn a_ledger_from_before_lanes_gets_them_and_keeps_its_freeze() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        {
            let conn = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..LANES - 1] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", LANES as i64 - 1).unwrap();
            let subject = |name: &str| Subject { name: name.into(), image: String::new() };
            let events = [
                ("b1", EventType::BuilderChanged, "b"),
                ("b2", EventType::CheckFailed, "b"),
                ("r1", EventType::RolloutFrozen, "rollout"),
            ];
            for (id, t, watch) in events {
                let e = Event::new(id.into(), t, "2026-11-30T12:00:00Z".into(), subject(watch));
                conn.execute(
                    "INSERT INTO events (id, type, watch, time, document) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![id, t.as_str(), watch, e.time, serde_json::to_string(&e).unwrap()],
                )
                .unwrap();
                conn.execute(
                    "INSERT INTO deliveries (event, alert, state, next_attempt, created, updated)
                     VALUES (?1, 'hook', 'pending', '2026-11-30T12:00:00.000Z', '2026-11-30T12:00:00.000Z',
                             '2026-11-30T12:00:00.000Z')",
                    params![id],
                )
                .unwrap();
            }
            conn.execute(
                "INSERT INTO rollout (id, frozen_since, reason, frozen_by) VALUES (1, '2026-11-30T11:00:00Z', 'x', 'dan')",
                [],
            )
            .unwrap();
        }
        let ledger = SqliteLedger::open(&path).unwrap();
        let far = parse_timestamp("2099-01-01T00:00:00Z").unwrap();
        let due: Vec<(String, String)> =
            ledger.due_deliveries(far, 10).await.unwrap().into_iter().map(|d| (d.event.id, d.subject)).collect();
        assert_eq!(due, [("b1".to_string(), "builder:b".to_string()), ("r1".into(), "rollout".into())]);
        assert_eq!(ledger.freeze_state().await.unwrap().map(|f| f.by).as_deref(), Some("dan"));

        let counted = Arc::new(Mutex::new(Vec::new()));
        let seen = counted.clone();
        let events: FreezeEvents = Arc::new(move |sequence, _| {
            seen.lock().unwrap().push(sequence);
            (Vec::new(), Vec::new())
        });
        let change = ledger.set_freeze(None, events, 10, far).await.unwrap();
        assert!(change.before.is_some());
        assert_eq!(*counted.lock().unwrap(), [2], "the freeze kept through the migration was the first change");
        assert_eq!(ledger.freeze_state().await.unwrap(), None);
    }
}
