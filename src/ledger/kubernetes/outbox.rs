//! The alert outbox on Kubernetes: the deliveries of every entry, in lanes — the deliveries to
//! one alert about one subject ([`subject_key`]) — each sent in the order its events were
//! recorded (their sequence numbers).
//!
//! A delivery lives in the entry of its event, which holds the whole event, so its subject is
//! read from there rather than kept.

use std::collections::{BTreeMap, HashSet};

use chrono::SubsecRound;

use super::{DeliveryRow, EventRow, KubeLedger, WatchDoc};
use crate::ledger::{
    DeadLetter, DeliveryKey, DeliveryState, DeliveryUpdate, DueDelivery, LedgerError, PendingDelivery,
};
use builder_monitor_core::event::subject_key;
use chrono::{DateTime, Utc};

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

    /// The deliveries due at `now` that head their lanes, soonest due first, with their events.
    pub async fn due_deliveries(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<DueDelivery>, LedgerError> {
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

    /// When the next lane head is due, of the lanes none of `exclude` (those in flight) is in.
    pub async fn next_delivery_at(&self, exclude: &[DeliveryKey]) -> Result<Option<DateTime<Utc>>, LedgerError> {
        let docs = self.docs().await?;
        let busy: HashSet<Lane> = exclude.iter().filter_map(|k| lane_of(&docs, k)).collect();
        Ok(heads(&docs).into_iter().filter(|(lane, _)| !busy.contains(lane)).map(|(_, (d, _))| d.next_attempt).min())
    }

    pub async fn update_delivery(
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
        let now = now.trunc_subsecs(3);
        self.modify(&watch, |doc| {
            if let Some(d) = doc
                .deliveries
                .iter_mut()
                .find(|d| d.event == event && d.alert == alert && d.state == DeliveryState::Pending)
            {
                d.attempts += 1;
                d.updated = now;
                match &update {
                    DeliveryUpdate::Sent { status } => {
                        d.state = DeliveryState::Sent;
                        d.last_status = Some(status.clone());
                    }
                    DeliveryUpdate::Retry { next_attempt, status } => {
                        d.next_attempt = next_attempt.trunc_subsecs(3);
                        d.last_status = Some(status.clone());
                    }
                    DeliveryUpdate::Dead { status } => {
                        d.state = DeliveryState::Dead;
                        d.last_status = Some(status.clone());
                    }
                }
            }
            Ok(())
        })
        .await
    }

    pub async fn pending_deliveries(&self) -> Result<Vec<PendingDelivery>, LedgerError> {
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

    pub async fn dead_letters(&self) -> Result<Vec<DeadLetter>, LedgerError> {
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
