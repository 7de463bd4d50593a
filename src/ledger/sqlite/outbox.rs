//! Events and the alert outbox in SQLite: the `events` of each watch, and one `deliveries` row
//! per (event, alert), in lanes — the deliveries to one alert about one subject ([`subject_key`])
//! — each sent in the order its events were recorded.
//!
//! A delivery row keeps its lane's subject and its event's `seq` (the events table's order), so
//! the head of every lane — its oldest pending delivery — is one indexed look-up.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};

use super::{SqliteLedger, Time, all, exec, row};
use crate::ledger::rules;
use crate::ledger::{
    DeadLetter, DeliveryKey, DeliveryUpdate, DueDelivery, LedgerError, Outbox, PendingDelivery, StoredEvent,
};
use builder_monitor_core::event::{Event, subject_key};
use builder_monitor_core::schedule::timestamp_millis;

/// Whether delivery `d` heads its lane: no pending delivery to the same alert about the same
/// subject has an older event.
const HEADS: &str = "NOT EXISTS (SELECT 1 FROM deliveries o WHERE o.alert = d.alert AND o.subject = d.subject
                         AND o.state = 'pending' AND o.event_seq < d.event_seq)";

impl Outbox for SqliteLedger {
    async fn record_events(
        &self,
        watch: &str,
        events: Vec<Event>,
        deliveries: Vec<DeliveryKey>,
        history: usize,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        let watch = watch.to_string();
        self.with(move |conn| {
            let tx = conn.transaction()?;
            insert_events(&tx, &watch, now, &events, None, &deliveries, history)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn events_after(&self, after_seq: i64, limit: usize) -> Result<Vec<StoredEvent>, LedgerError> {
        self.with(move |conn| {
            all(
                conn,
                "SELECT seq, document FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2",
                params![after_seq, limit as i64],
                stored_event,
            )
        })
        .await
    }

    async fn latest_events(&self, types: Vec<String>, limit: usize) -> Result<Vec<StoredEvent>, LedgerError> {
        self.with(move |conn| {
            let mut out = Vec::new();
            for t in &types {
                out.extend(all(
                    conn,
                    "SELECT seq, document FROM events WHERE type = ?1 ORDER BY seq DESC LIMIT ?2",
                    params![t, limit as i64],
                    stored_event,
                )?);
            }
            out.sort_by_key(|e| std::cmp::Reverse(e.seq));
            out.truncate(limit);
            Ok(out)
        })
        .await
    }

    async fn deliveries_of(&self, events: Vec<String>) -> Result<Vec<DeliveryKey>, LedgerError> {
        self.with(move |conn| {
            let mut out = Vec::new();
            for event in &events {
                out.extend(all(
                    conn,
                    "SELECT event, alert FROM deliveries WHERE event = ?1 ORDER BY alert",
                    [event],
                    |r| Ok(DeliveryKey { event: r.get("event")?, alert: r.get("alert")? }),
                )?);
            }
            Ok(out)
        })
        .await
    }

    async fn due_deliveries(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<DueDelivery>, LedgerError> {
        let now = timestamp_millis(now);
        self.with(move |conn| {
            let sql = format!(
                "SELECT d.alert AS alert, d.attempts AS attempts, d.created AS created, d.subject AS subject,
                        e.document AS document
                 FROM deliveries d JOIN events e ON e.id = d.event
                 WHERE d.state = 'pending' AND d.next_attempt <= ?1 AND {HEADS}
                 ORDER BY d.next_attempt, d.event_seq LIMIT ?2"
            );
            all(conn, &sql, params![now, limit as i64], |r| {
                let document: String = r.get("document")?;
                let event: Event = serde_json::from_str(&document)
                    .map_err(|e| LedgerError::Corrupt { what: "event", detail: e.to_string() })?;
                let subject = r.get::<_, Option<String>>("subject")?.unwrap_or_else(|| subject_key(&event));
                Ok(DueDelivery {
                    event,
                    alert: r.get("alert")?,
                    attempts: r.get("attempts")?,
                    created: r.get::<_, Time>("created")?.0,
                    subject,
                })
            })
        })
        .await
    }

    async fn next_delivery_at(&self, exclude: &[DeliveryKey]) -> Result<Option<DateTime<Utc>>, LedgerError> {
        let exclude = exclude.to_vec();
        self.with(move |conn| {
            let mut busy = HashSet::new();
            for key in &exclude {
                let subject: Option<Option<String>> = row(
                    conn,
                    "SELECT subject FROM deliveries WHERE event = ?1 AND alert = ?2",
                    params![key.event, key.alert],
                    |r| r.get("subject"),
                )
                .optional()?;
                busy.insert((key.alert.clone(), subject.flatten()));
            }
            let sql = format!(
                "SELECT d.alert AS alert, d.subject AS subject, d.next_attempt AS next_attempt FROM deliveries d
                 WHERE d.state = 'pending' AND {HEADS} ORDER BY d.next_attempt"
            );
            let mut stmt = conn.prepare_cached(&sql)?;
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                let lane = (r.get::<_, String>("alert")?, r.get::<_, Option<String>>("subject")?);
                if !busy.contains(&lane) {
                    return Ok(Some(r.get::<_, Time>("next_attempt")?.0));
                }
            }
            Ok(None)
        })
        .await
    }

    async fn update_delivery(
        &self,
        event: &str,
        alert: &str,
        update: DeliveryUpdate,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        let (event, alert) = (event.to_string(), alert.to_string());
        self.with(move |conn| {
            let attempted = rules::attempted(&update, now);
            exec(
                conn,
                "UPDATE deliveries SET state = ?3, attempts = attempts + 1, next_attempt = COALESCE(?4, next_attempt),
                     last_status = ?5, updated = ?6
                 WHERE event = ?1 AND alert = ?2 AND state = 'pending'",
                params![
                    event,
                    alert,
                    attempted.state,
                    attempted.next_attempt.map(timestamp_millis),
                    attempted.last_status,
                    timestamp_millis(attempted.updated)
                ],
            )?;
            Ok(())
        })
        .await
    }

    async fn pending_deliveries(&self) -> Result<Vec<PendingDelivery>, LedgerError> {
        self.with(|conn| {
            all(
                conn,
                "SELECT d.event AS event, e.type AS type, d.alert AS alert, d.attempts AS attempts,
                        d.next_attempt AS next_attempt, d.last_status AS last_status
                 FROM deliveries d JOIN events e ON e.id = d.event
                 WHERE d.state = 'pending' ORDER BY d.next_attempt, d.event_seq",
                [],
                |r| {
                    Ok(PendingDelivery {
                        event: r.get("event")?,
                        event_type: r.get("type")?,
                        alert: r.get("alert")?,
                        attempts: r.get("attempts")?,
                        next_attempt: r.get::<_, Time>("next_attempt")?.0,
                        last_status: r.get("last_status")?,
                    })
                },
            )
        })
        .await
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, LedgerError> {
        self.with(|conn| {
            all(
                conn,
                "SELECT d.event AS event, e.type AS type, d.alert AS alert, d.attempts AS attempts,
                        d.last_status AS last_status, d.updated AS updated
                 FROM deliveries d JOIN events e ON e.id = d.event
                 WHERE d.state = 'dead' ORDER BY d.updated",
                [],
                |r| {
                    Ok(DeadLetter {
                        event: r.get("event")?,
                        event_type: r.get("type")?,
                        alert: r.get("alert")?,
                        attempts: r.get("attempts")?,
                        last_status: r.get("last_status")?,
                        time: r.get::<_, Time>("updated")?.0,
                    })
                },
            )
        })
        .await
    }
}

/// A [`StoredEvent`] from a row of `events` (its `seq` and `document`).
fn stored_event(r: &Row<'_>) -> Result<StoredEvent, LedgerError> {
    let seq: i64 = r.get("seq")?;
    let document: String = r.get("document")?;
    let event = serde_json::from_str(&document)
        .map_err(|e| LedgerError::Corrupt { what: "event", detail: format!("#{seq}: {e}") })?;
    Ok(StoredEvent { seq, event })
}

/// Records events and their outbox rows, then prunes the watch's old events (never one that still
/// has a delivery to make).
pub(super) fn insert_events(
    tx: &Transaction<'_>,
    watch: &str,
    now: DateTime<Utc>,
    events: &[Event],
    change_id: Option<&str>,
    deliveries: &[DeliveryKey],
    history: usize,
) -> Result<(), LedgerError> {
    for event in events {
        let document = serde_json::to_string(event).unwrap_or_default();
        let change = change_id.filter(|c| *c == event.id);
        exec(
            tx,
            "INSERT INTO events (id, type, watch, change_id, time, document) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (id) DO NOTHING",
            params![event.id, event.event_type.as_str(), watch, change, event.time, document],
        )?;
    }
    insert_deliveries(tx, events, deliveries, now)?;
    if !events.is_empty() {
        exec(
            tx,
            "DELETE FROM events WHERE watch = ?1
               AND seq NOT IN (SELECT seq FROM events WHERE watch = ?1 ORDER BY seq DESC LIMIT ?2)
               AND id NOT IN (SELECT event FROM deliveries WHERE state = 'pending')",
            params![watch, (history * 2) as i64],
        )?;
    }
    Ok(())
}

/// Adds outbox rows (`events` are the ones just recorded; a delivery may also name an event
/// recorded before, e.g. a `check.failed` an alert hears of at its threshold). Each row takes its
/// event's subject and place in the events' order.
fn insert_deliveries(
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
        row(conn, "SELECT document FROM events WHERE id = ?1", params![event], |r| r.get("document")).optional()?;
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
    let events: Vec<String> =
        all(tx, "SELECT DISTINCT event FROM deliveries WHERE state = 'pending' AND subject IS NULL", [], |r| {
            Ok(r.get("event")?)
        })?;
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
    use crate::ledger::{FreezeEvents, RolloutControl};
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
