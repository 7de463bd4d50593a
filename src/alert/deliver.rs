//! The outbox worker: sends pending deliveries with bounded concurrency per receiver, retries with
//! backoff and jitter, gives up into dead letters, and after a crash resumes where the ledger says.
//!
//! Deliveries to one alert about one subject (a lane) go out one at a time, in the order their
//! events were recorded: the ledger answers only each lane's oldest pending delivery, and a lane
//! with a send in flight is claimed here until the send's outcome is recorded, so a failing
//! delivery holds back the later ones of its subject — not other subjects' — until it is sent or
//! dead.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{AlertError, SendOutcome, Sender};
use crate::config::AlertSettings;
use crate::ledger::{DeliveryKey, DeliveryUpdate, DueDelivery, Ledger};
use crate::metrics::{DeliveryLabels, Metrics};
use crate::schedule::Clock;
use crate::worker::{self, Work};
use builder_monitor_core::schedule::timestamp_millis;

/// Sends in flight per receiver: a slow receiver holds up only its own deliveries.
const PER_ALERT: usize = 4;
const BATCH: usize = 256;
/// Longest sleep with nothing due (new deliveries wake the worker anyway).
const IDLE: Duration = Duration::from_secs(60);
/// The same on a shared ledger (Kubernetes), whose other writers (the command line's `freeze`,
/// `approve`, …) wake nothing here.
const SHARED_IDLE: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(15 * 60);
const GRACE: Duration = Duration::from_secs(10);

/// An alert and a subject: its deliveries go out one at a time, in the order of their events.
type Lane = (String, String);

pub struct Dispatcher {
    senders: BTreeMap<String, (Arc<Sender>, Arc<Semaphore>)>,
    ledger: Ledger,
    clock: Clock,
    wake: Arc<Notify>,
    /// Claims, by lane (alert, subject): the send started and not yet recorded. A scan skips
    /// claimed lanes, so no two sends of one lane ever overlap.
    in_flight: Mutex<HashMap<Lane, DeliveryKey>>,
    /// Held by a scan from its read of the ledger until it has claimed what it read, and by an
    /// attempt from recording its outcome until it drops its claim: otherwise a scan could read a
    /// delivery as pending just before its send is recorded, see the claim gone, and send it again.
    scan: tokio::sync::Mutex<()>,
    metrics: Arc<Metrics>,
}

/// The outbox as the worker loop runs it.
struct Outbox(Arc<Dispatcher>);

impl Work for Outbox {
    async fn start_due(&mut self, tasks: &mut JoinSet<()>) -> Option<Duration> {
        self.0.start_due(tasks).await;
        Some(self.0.until_next_due().await)
    }

    async fn woken(&mut self) {
        self.0.wake.notified().await
    }
}

impl Dispatcher {
    /// `wake` is notified when new deliveries are recorded.
    pub fn new(
        alerts: &[AlertSettings],
        ledger: Ledger,
        clock: Clock,
        metrics: Arc<Metrics>,
    ) -> Result<Self, AlertError> {
        let wake = ledger.new_deliveries();
        let mut senders = BTreeMap::new();
        for a in alerts {
            senders.insert(a.name.clone(), (Arc::new(Sender::new(a.clone())?), Arc::new(Semaphore::new(PER_ALERT))));
        }
        Ok(Dispatcher {
            senders,
            ledger,
            clock,
            wake,
            in_flight: Mutex::new(HashMap::new()),
            scan: tokio::sync::Mutex::new(()),
            metrics,
        })
    }

    /// Delivers until `shutdown`; sends in flight then get a grace period (an aborted one stays
    /// pending and is sent again after a restart, with the same id).
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        worker::run(Outbox(self), shutdown, GRACE).await;
    }

    /// Attempts every delivery due now, once, and waits for the attempts (`run --once`): a lane's
    /// next delivery is attempted once the one before it was sent or given up, so a lane goes as
    /// far as its receiver takes it.
    pub async fn deliver_due_once(self: &Arc<Self>) -> usize {
        let mut attempted = std::collections::HashSet::new();
        let mut tasks = JoinSet::new();
        loop {
            let started = self.start_due_except(&mut tasks, &attempted).await;
            attempted.extend(started);
            // Each end may let its lane's next delivery go.
            if tasks.join_next().await.is_none() {
                return attempted.len();
            }
        }
    }

    async fn start_due(self: &Arc<Self>, tasks: &mut JoinSet<()>) -> usize {
        self.start_due_except(tasks, &Default::default()).await.len()
    }

    /// Starts the due lane heads that are neither claimed nor in `attempted`; answers their keys.
    async fn start_due_except(
        self: &Arc<Self>,
        tasks: &mut JoinSet<()>,
        attempted: &std::collections::HashSet<DeliveryKey>,
    ) -> Vec<DeliveryKey> {
        let _scan = self.scan.lock().await;
        let due = match self.ledger.due_deliveries(self.clock.now(), BATCH).await {
            Ok(due) => due,
            Err(err) => {
                tracing::error!(error = %err, "cannot read pending deliveries");
                return Vec::new();
            }
        };
        let mut started = Vec::new();
        for delivery in due {
            let key = DeliveryKey::new(delivery.event.id.clone(), delivery.alert.clone());
            if attempted.contains(&key) {
                continue;
            }
            let lane = (delivery.alert.clone(), delivery.subject.clone());
            match self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).entry(lane) {
                std::collections::hash_map::Entry::Occupied(_) => continue,
                std::collections::hash_map::Entry::Vacant(v) => v.insert(key.clone()),
            };
            started.push(key);
            tasks.spawn(self.clone().attempt(delivery));
        }
        started
    }

    /// Time until the earliest pending delivery of a lane with nothing in flight.
    async fn until_next_due(&self) -> Duration {
        let idle = if self.ledger.is_shared() { SHARED_IDLE } else { IDLE };
        let at = match self.ledger.next_delivery_at(&self.in_flight_keys()).await {
            Ok(Some(at)) => at,
            _ => return idle,
        };
        (at - self.clock.now()).to_std().unwrap_or(Duration::ZERO).min(idle)
    }

    fn in_flight_keys(&self) -> Vec<DeliveryKey> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    fn backoff(settings: &AlertSettings, attempts: u32) -> Duration {
        let full = settings.backoff.saturating_mul(1u32 << attempts.min(20)).min(MAX_BACKOFF);
        let half = full / 2;
        half + rand::rng().random_range(Duration::ZERO..=half)
    }

    async fn attempt(self: Arc<Self>, delivery: DueDelivery) {
        let event_id = delivery.event.id.clone();
        let alert = delivery.alert.clone();
        let update = match self.senders.get(&alert) {
            None => DeliveryUpdate::Dead { status: "the alert is no longer configured".into() },
            Some((sender, limit)) => {
                let _permit = limit.acquire().await;
                let outcome = sender.send(&delivery.event).await;
                self.decide(&sender.settings, &delivery, outcome)
            }
        };
        // Recorded first, then logged: a log line never claims what the ledger could still lose.
        {
            let _scan = self.scan.lock().await;
            if let Err(err) = self.ledger.update_delivery(&event_id, &alert, update.clone(), self.clock.now()).await {
                tracing::error!(alert = %alert, event_id = %event_id, error = %err, "cannot record delivery outcome; it will be sent again");
            }
            self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).remove(&(alert.clone(), delivery.subject.clone()));
        }
        let outcome = match &update {
            DeliveryUpdate::Sent { .. } => "sent",
            DeliveryUpdate::Retry { .. } => "retry",
            DeliveryUpdate::Dead { .. } => "dead",
        };
        self.metrics.deliveries.get_or_create(&DeliveryLabels { alert: alert.clone(), outcome: outcome.into() }).inc();
        match &update {
            DeliveryUpdate::Sent { status } => {
                tracing::info!(alert = %alert, event_id = %event_id, event_type = %delivery.event.event_type, status = %status, attempt = delivery.attempts + 1, "alert delivered");
            }
            DeliveryUpdate::Retry { next_attempt, status } => {
                tracing::warn!(alert = %alert, event_id = %event_id, status = %status, next_attempt = %timestamp_millis(*next_attempt), attempt = delivery.attempts + 1, "alert delivery failed; will retry");
            }
            DeliveryUpdate::Dead { status } => {
                tracing::error!(alert = %alert, event_id = %event_id, status = %status, attempt = delivery.attempts + 1, "alert delivery given up (dead letter)");
            }
        }
    }

    fn decide(&self, settings: &AlertSettings, delivery: &DueDelivery, outcome: SendOutcome) -> DeliveryUpdate {
        let status = outcome.describe();
        match outcome {
            SendOutcome::Delivered { .. } => DeliveryUpdate::Sent { status },
            SendOutcome::Rejected { .. } => DeliveryUpdate::Dead { status },
            SendOutcome::Retry { retry_after, .. } => {
                let now = self.clock.now();
                let age = (now - delivery.created).to_std().unwrap_or_default();
                if age >= settings.give_up_after {
                    return DeliveryUpdate::Dead {
                        status: format!(
                            "{status}; gave up after {} over {}",
                            builder_monitor_core::text::count(delivery.attempts + 1, "attempt"),
                            humantime::format_duration(Duration::from_secs(age.as_secs()))
                        ),
                    };
                }
                let wait = Self::backoff(settings, delivery.attempts).max(retry_after.unwrap_or_default());
                let next = now + chrono::Duration::from_std(wait).unwrap_or_default();
                DeliveryUpdate::Retry { next_attempt: next, status }
            }
        }
    }
}
