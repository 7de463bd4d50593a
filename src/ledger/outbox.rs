//! Events and the alert outbox: the events recorded under each watch, one delivery per (event,
//! alert), and the contract both backends keep for them ([`Outbox`]).

use std::future::Future;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{LedgerError, time};
use builder_monitor_core::event::Event;

/// One row of the alert outbox: an event and an alert it goes to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeliveryKey {
    pub event: String,
    pub alert: String,
}

impl DeliveryKey {
    pub fn new(event: impl Into<String>, alert: impl Into<String>) -> Self {
        DeliveryKey { event: event.into(), alert: alert.into() }
    }
}

/// Where an alert delivery is; stored as its snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    Pending,
    Sent,
    /// Given up on (a dead letter).
    Dead,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Sent => "sent",
            DeliveryState::Dead => "dead",
        }
    }
}

/// A delivery to attempt now.
#[derive(Debug, Clone)]
pub struct DueDelivery {
    pub event: Event,
    pub alert: String,
    pub attempts: u32,
    pub created: DateTime<Utc>,
    /// Its lane's subject ([`subject_key`](builder_monitor_core::event::subject_key) of the event):
    /// one send at a time per alert and subject.
    pub subject: String,
}

/// What an attempt did to a delivery.
#[derive(Debug, Clone)]
pub enum DeliveryUpdate {
    Sent { status: String },
    Retry { next_attempt: DateTime<Utc>, status: String },
    Dead { status: String },
}

/// A delivery not made yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingDelivery {
    pub event: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub alert: String,
    pub attempts: u32,
    #[serde(with = "time::millis")]
    pub next_attempt: DateTime<Utc>,
    pub last_status: Option<String>,
}

/// A delivery given up on (`status`'s `dead_letters`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetter {
    pub event: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub alert: String,
    pub attempts: u32,
    pub last_status: Option<String>,
    #[serde(with = "time::millis")]
    pub time: DateTime<Utc>,
}

/// A recorded event with its position in the ledger.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub seq: i64,
    pub event: Event,
}

/// The events-and-outbox contract. Deliveries go out in lanes — the deliveries to one alert about
/// one subject ([`subject_key`](builder_monitor_core::event::subject_key) of the event) — each
/// lane in the order its events were recorded.
pub trait Outbox {
    /// Records `events` under `watch` (each id once) and their outbox rows (each (event, alert)
    /// once, pending, due at `now`; a delivery may also name an event recorded before, e.g. a
    /// `check.failed` an alert hears of at its threshold), in one write; then the watch keeps its
    /// newest `2 × history` events, and every event with a delivery still to make.
    fn record_events(
        &self,
        watch: &str,
        events: Vec<Event>,
        deliveries: Vec<DeliveryKey>,
        history: usize,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// Events recorded after `after_seq`, oldest first, at most `limit`.
    fn events_after(
        &self,
        after_seq: i64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<StoredEvent>, LedgerError>> + Send;

    /// The newest events of these types (`check.failed`, …), newest first, at most `limit` in all.
    fn latest_events(
        &self,
        types: Vec<String>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<StoredEvent>, LedgerError>> + Send;

    /// The alerts each of these events has a delivery for, in any state.
    fn deliveries_of(&self, events: Vec<String>) -> impl Future<Output = Result<Vec<DeliveryKey>, LedgerError>> + Send;

    /// The deliveries due at `now` that head their lanes, soonest due first, at most `limit`, with
    /// their events: a later delivery of a lane waits until the one before it is sent or dead.
    fn due_deliveries(
        &self,
        now: DateTime<Utc>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<DueDelivery>, LedgerError>> + Send;

    /// When the next lane head is due, of the lanes none of `exclude` (those in flight) is in: a
    /// lane with a send in flight has nothing due until that send is recorded.
    fn next_delivery_at(
        &self,
        exclude: &[DeliveryKey],
    ) -> impl Future<Output = Result<Option<DateTime<Utc>>, LedgerError>> + Send;

    /// Moves a pending delivery forward after an attempt that ended at `now`: one more attempt,
    /// and sent, due again at a later time, or dead, with the attempt's status.
    fn update_delivery(
        &self,
        event: &str,
        alert: &str,
        update: DeliveryUpdate,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// Deliveries still to make, soonest due first (`status`).
    fn pending_deliveries(&self) -> impl Future<Output = Result<Vec<PendingDelivery>, LedgerError>> + Send;

    /// Deliveries that were given up on, oldest first.
    fn dead_letters(&self) -> impl Future<Output = Result<Vec<DeadLetter>, LedgerError>> + Send;
}
