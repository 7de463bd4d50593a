//! Events and the alert outbox on Kubernetes: the events of each entry, numbered across writers,
//! and the deliveries of every entry, in lanes — the deliveries to one alert about one subject
//! ([`subject_key`]) — each sent in the order its events were recorded (their sequence numbers).
//!
//! A delivery lives in the entry of its event, which holds the whole event, so its subject is
//! read from there rather than kept.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::SubsecRound;
use serde::{Deserialize, Serialize};

use super::{KubeLedger, WatchDoc};
use crate::ledger::{
    DeadLetter, DeliveryKey, DeliveryState, DeliveryUpdate, DueDelivery, LedgerError, Outbox, PendingDelivery,
    StoredEvent,
};
use crate::ledger::{rules, time};
use builder_monitor_core::event::{Event, subject_key};
use chrono::{DateTime, Utc};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct EventRow {
    pub(super) seq: i64,
    pub(super) event: Event,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct DeliveryRow {
    pub(super) event: String,
    pub(super) alert: String,
    pub(super) state: DeliveryState,
    pub(super) attempts: u32,
    #[serde(with = "time::millis")]
    pub(super) next_attempt: DateTime<Utc>,
    pub(super) last_status: Option<String>,
    #[serde(with = "time::millis")]
    pub(super) created: DateTime<Utc>,
    #[serde(with = "time::millis")]
    pub(super) updated: DateTime<Utc>,
}

impl WatchDoc {
    /// The type of the recorded event `id` (empty when it was pruned).
    fn event_type(&self, id: &str) -> String {
        self.events.iter().find(|e| e.event.id == id).map(|e| e.event.event_type.to_string()).unwrap_or_default()
    }

    /// The sequence number of an event added to this entry now: after every row the entry holds,
    /// whichever process wrote them (each seeds its counter from its own start), and not before
    /// `now`'s microsecond, so the alert outbox sends one subject's events in the order written.
    fn next_event_seq(&self, counter: &AtomicI64, now: DateTime<Utc>) -> i64 {
        let held = self.events.iter().map(|e| e.seq).chain(self.tag_moves.iter().map(|m| m.seq)).max();
        let floor = held.map_or(i64::MIN, |s| s + 1).max(now.timestamp_micros());
        let before = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| Some(c.max(floor) + 1));
        before.unwrap_or_else(|c| c).max(floor)
    }

    pub(super) fn add_events(
        &mut self,
        events: &[Event],
        deliveries: &[DeliveryKey],
        now: DateTime<Utc>,
        history: usize,
        next_seq: &AtomicI64,
    ) {
        for e in events {
            if !self.events.iter().any(|x| x.event.id == e.id) {
                let seq = self.next_event_seq(next_seq, now);
                self.events.push(EventRow { seq, event: e.clone() });
            }
        }
        let now = now.trunc_subsecs(3);
        for DeliveryKey { event, alert } in deliveries {
            if !self.deliveries.iter().any(|d| &d.event == event && &d.alert == alert) {
                self.deliveries.push(DeliveryRow {
                    event: event.clone(),
                    alert: alert.clone(),
                    state: DeliveryState::Pending,
                    attempts: 0,
                    next_attempt: now,
                    last_status: None,
                    created: now,
                    updated: now,
                });
            }
        }
        if !events.is_empty() {
            // Keep the newest events, and any that still has a delivery to make.
            let pending: HashSet<String> =
                self.deliveries.iter().filter(|d| d.state == DeliveryState::Pending).map(|d| d.event.clone()).collect();
            self.events.sort_by_key(|e| e.seq);
            let keep_from = self.events.len().saturating_sub(history * 2);
            let mut n = 0;
            self.events.retain(|e| {
                n += 1;
                n > keep_from || pending.contains(&e.event.id)
            });
            let kept: HashSet<String> = self.events.iter().map(|e| e.event.id.clone()).collect();
            self.deliveries.retain(|d| kept.contains(&d.event));
        }
    }
}

/// An alert and a subject: the deliveries of one lane go out one at a time, in event order.
type Lane = (String, String);

/// The oldest pending delivery of every lane, with its event.
fn heads(docs: &[WatchDoc]) -> BTreeMap<Lane, (&DeliveryRow, &EventRow)> {
    let mut heads: BTreeMap<Lane, (&DeliveryRow, &EventRow)> = BTreeMap::new();
    for doc in docs {
        let events: BTreeMap<&str, &EventRow> = doc.events.iter().map(|e| (e.event.id.as_str(), e)).collect();
        for d in doc.deliveries.iter().filter(|d| d.state == DeliveryState::Pending) {
            let Some(e) = events.get(d.event.as_str()) else { continue };
            let lane = (d.alert.clone(), subject_key(&e.event));
            match heads.get(&lane) {
                Some((_, head)) if head.seq <= e.seq => {}
                _ => {
                    heads.insert(lane, (d, e));
                }
            }
        }
    }
    heads
}

/// The lane of delivery `key`, if it is pending in one of `docs`.
fn lane_of(docs: &[WatchDoc], key: &DeliveryKey) -> Option<Lane> {
    docs.iter().find_map(|doc| {
        doc.deliveries.iter().find(|d| d.event == key.event && d.alert == key.alert)?;
        let e = doc.events.iter().find(|e| e.event.id == key.event)?;
        Some((key.alert.clone(), subject_key(&e.event)))
    })
}

impl KubeLedger {
    async fn docs(&self) -> Result<Vec<WatchDoc>, LedgerError> {
        Ok(self.all().await?.into_iter().map(|(_, d)| d).collect())
    }
}

impl Outbox for KubeLedger {
    async fn events_after(&self, after_seq: i64, limit: usize) -> Result<Vec<StoredEvent>, LedgerError> {
        let mut events: Vec<StoredEvent> = self
            .all()
            .await?
            .into_iter()
            .flat_map(|(_, d)| d.events)
            .filter(|e| e.seq > after_seq)
            .map(|e| StoredEvent { seq: e.seq, event: e.event })
            .collect();
        events.sort_by_key(|e| e.seq);
        events.truncate(limit);
        Ok(events)
    }

    async fn deliveries_of(&self, events: Vec<String>) -> Result<Vec<DeliveryKey>, LedgerError> {
        let wanted: HashSet<String> = events.into_iter().collect();
        let mut out: Vec<DeliveryKey> = self
            .all()
            .await?
            .into_iter()
            .flat_map(|(_, d)| d.deliveries)
            .filter(|d| wanted.contains(&d.event))
            .map(|d| DeliveryKey { event: d.event, alert: d.alert })
            .collect();
        out.sort();
        Ok(out)
    }

    async fn latest_events(&self, types: Vec<String>, limit: usize) -> Result<Vec<StoredEvent>, LedgerError> {
        let mut events: Vec<StoredEvent> = self
            .all()
            .await?
            .into_iter()
            .flat_map(|(_, d)| d.events)
            .filter(|e| types.iter().any(|t| t == e.event.event_type.as_str()))
            .map(|e| StoredEvent { seq: e.seq, event: e.event })
            .collect();
        events.sort_by_key(|e| std::cmp::Reverse(e.seq));
        events.truncate(limit);
        Ok(events)
    }

    async fn record_events(
        &self,
        watch: &str,
        events: Vec<Event>,
        deliveries: Vec<DeliveryKey>,
        history: usize,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        let seq = self.seq.clone();
        self.modify(watch, |doc| {
            doc.add_events(&events, &deliveries, now, history, &seq);
            Ok(())
        })
        .await
    }

    async fn due_deliveries(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<DueDelivery>, LedgerError> {
        let now = now.trunc_subsecs(3);
        let docs = self.docs().await?;
        let mut due: Vec<(DateTime<Utc>, i64, DueDelivery)> = heads(&docs)
            .into_iter()
            .filter(|(_, (d, _))| d.next_attempt <= now)
            .map(|((_, subject), (d, e))| {
                let delivery = DueDelivery {
                    event: e.event.clone(),
                    alert: d.alert.clone(),
                    attempts: d.attempts,
                    created: d.created,
                    subject,
                };
                (d.next_attempt, e.seq, delivery)
            })
            .collect();
        due.sort_by_key(|d| (d.0, d.1));
        Ok(due.into_iter().take(limit).map(|(_, _, d)| d).collect())
    }

    async fn next_delivery_at(&self, exclude: &[DeliveryKey]) -> Result<Option<DateTime<Utc>>, LedgerError> {
        let docs = self.docs().await?;
        let busy: HashSet<Lane> = exclude.iter().filter_map(|k| lane_of(&docs, k)).collect();
        Ok(heads(&docs).into_iter().filter(|(lane, _)| !busy.contains(lane)).map(|(_, (d, _))| d.next_attempt).min())
    }

    async fn update_delivery(
        &self,
        event: &str,
        alert: &str,
        update: DeliveryUpdate,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        let Some(watch) = self.holder(|d| d.deliveries.iter().any(|x| x.event == event && x.alert == alert)).await?
        else {
            return Ok(());
        };
        let attempted = rules::attempted(&update, now);
        self.modify(&watch, |doc| {
            if let Some(d) = doc
                .deliveries
                .iter_mut()
                .find(|d| d.event == event && d.alert == alert && d.state == DeliveryState::Pending)
            {
                (d.attempts, d.state, d.updated) = (d.attempts + 1, attempted.state, attempted.updated);
                d.next_attempt = attempted.next_attempt.unwrap_or(d.next_attempt);
                d.last_status = Some(attempted.last_status.clone());
            }
            Ok(())
        })
        .await
    }

    async fn pending_deliveries(&self) -> Result<Vec<PendingDelivery>, LedgerError> {
        let mut out = Vec::new();
        for doc in self.docs().await? {
            for d in doc.deliveries.iter().filter(|d| d.state == DeliveryState::Pending) {
                let event_type = doc.event_type(&d.event);
                out.push(PendingDelivery {
                    event: d.event.clone(),
                    event_type,
                    alert: d.alert.clone(),
                    attempts: d.attempts,
                    next_attempt: d.next_attempt,
                    last_status: d.last_status.clone(),
                });
            }
        }
        out.sort_by_key(|d| d.next_attempt);
        Ok(out)
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, LedgerError> {
        let mut out = Vec::new();
        for doc in self.docs().await? {
            for d in doc.deliveries.iter().filter(|d| d.state == DeliveryState::Dead) {
                let event_type = doc.event_type(&d.event);
                out.push(DeadLetter {
                    event: d.event.clone(),
                    event_type,
                    alert: d.alert.clone(),
                    attempts: d.attempts,
                    last_status: d.last_status.clone(),
                    time: d.updated,
                });
            }
        }
        out.sort_by_key(|d| d.time);
        Ok(out)
    }
}
