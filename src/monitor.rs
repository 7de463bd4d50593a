//! The watch loop: one task per watched tag on its schedule. A check is one HEAD when nothing moved;
//! a move is observed, held back by `settle` if asked, and committed to the ledger with its event.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::builder::Change;
use crate::config::{BuilderSettings, Config};
use crate::event::{self, CheckError, Event, EventType, Pin, Subject};
use crate::inspect::{self, Observation};
use crate::registry::{Registry, RegistryError};
use crate::schedule::{self, Clock, Settle, timestamp};
use crate::store::{
    ChangeRecord, CheckRecord, Ledger, LedgerError, PinUpdate, WatchKind, WatchRecord,
};

/// How long running checks may take to finish after a shutdown signal.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Checks run at the same time by `run --once`.
const ONCE_CONCURRENCY: usize = 16;

/// What one check found.
#[derive(Debug)]
pub enum CheckOutcome {
    /// The tag still points at the pin.
    Unchanged,
    /// First sight: the tag is now pinned.
    Pinned { digest: String },
    /// An accepted move, recorded as a change.
    Changed {
        id: String,
        previous: String,
        current: String,
    },
    /// A new digest held back by `settle`.
    Held { digest: String },
    /// The index moved but none of the watched platforms did: pin advanced, no change.
    PlatformsUnchanged { digest: String },
    /// The registry could not answer; the pin is kept.
    Failed(RegistryError),
}

pub struct Monitor {
    config: Arc<Config>,
    registry: Arc<Registry>,
    ledger: Ledger,
    clock: Clock,
    /// Per builder: wakes its task for an immediate check.
    wake: HashMap<String, Arc<Notify>>,
}

impl Monitor {
    pub fn new(config: Arc<Config>, registry: Arc<Registry>, ledger: Ledger, clock: Clock) -> Self {
        let wake = config
            .builders
            .iter()
            .map(|b| (b.name.clone(), Arc::new(Notify::new())))
            .collect();
        Self {
            config,
            registry,
            ledger,
            clock,
            wake,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Asks a builder's task to check now; false when no such builder is watched.
    pub fn check_now(&self, builder: &str) -> bool {
        match self.wake.get(builder) {
            Some(notify) => {
                notify.notify_one();
                true
            }
            None => false,
        }
    }

    /// Checks every builder once, concurrently. True when every check succeeded.
    pub async fn run_once(self: &Arc<Self>) -> bool {
        let permits = Arc::new(Semaphore::new(ONCE_CONCURRENCY));
        let mut tasks = JoinSet::new();
        for builder in self.config.builders.clone() {
            let monitor = self.clone();
            let permits = permits.clone();
            tasks.spawn(async move {
                let _permit = permits.acquire_owned().await;
                matches!(monitor.check_logged(&builder).await, Some(o) if !matches!(o, CheckOutcome::Failed(_)))
            });
        }
        let mut all_ok = true;
        while let Some(result) = tasks.join_next().await {
            all_ok &= result.unwrap_or(false);
        }
        all_ok
    }

    /// Runs every builder on its schedule until `shutdown`, then gives running checks a grace period.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tasks = JoinSet::new();
        for builder in self.config.builders.clone() {
            let monitor = self.clone();
            let shutdown = shutdown.clone();
            let wake = self.wake[&builder.name].clone();
            tasks.spawn(async move {
                let clock = monitor.clock.clone();
                schedule::run_schedule(
                    &builder.schedule,
                    builder.jitter,
                    &clock,
                    &shutdown,
                    &wake,
                    || {
                        let monitor = monitor.clone();
                        let builder = builder.clone();
                        async move {
                            monitor.check_logged(&builder).await;
                        }
                    },
                )
                .await;
            });
        }
        shutdown.cancelled().await;
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "checks still running after the grace period; aborting them (the ledger is transactional, nothing is half-written)");
            tasks.abort_all();
        }
    }

    /// A check whose ledger failure is logged rather than returned.
    async fn check_logged(&self, builder: &BuilderSettings) -> Option<CheckOutcome> {
        match self.check(builder).await {
            Ok(outcome) => Some(outcome),
            Err(err) => {
                tracing::error!(builder = %builder.name, error = %err, "cannot record check");
                None
            }
        }
    }

    /// One check of one builder, committed to the ledger.
    pub async fn check(&self, builder: &BuilderSettings) -> Result<CheckOutcome, LedgerError> {
        let image = builder.image.to_string();
        // A watch whose configured image changed starts over with a new pin, not a change.
        let record = self
            .ledger
            .watch(&builder.name)
            .await?
            .filter(|r| r.image == image);
        let started = std::time::Instant::now();
        let result = self.observe_move(builder, record.as_ref()).await;
        let now = self.clock.now();
        let time = timestamp(now);
        let subject = Subject {
            name: builder.name.clone(),
            image: image.clone(),
        };
        let mut commit = CheckRecord {
            watch: builder.name.clone(),
            kind: WatchKind::Builder,
            image: image.clone(),
            time: time.clone(),
            outcome: Ok(()),
            pin: None,
            pending: None,
            change: None,
            events: Vec::new(),
            history: self.config.monitor.history,
        };
        let failures = record.as_ref().map_or(0, |r| r.consecutive_failures);

        let outcome = match result {
            Err(err) => {
                let since = record
                    .as_ref()
                    .and_then(|r| r.failing_since.clone())
                    .unwrap_or_else(|| time.clone());
                tracing::warn!(builder = %builder.name, image = %image, reason = err.reason(), error = %err, consecutive_failures = failures + 1, "check failed; pin kept");
                if failures == 0 {
                    let mut e = Event::new(
                        event::stable_id(&[&builder.name, EventType::CheckFailed.as_str(), &since]),
                        EventType::CheckFailed,
                        time.clone(),
                        subject,
                    );
                    e.current = record.as_ref().and_then(|r| r.pin.as_ref()).map(pin_of);
                    e.error = Some(CheckError {
                        reason: err.reason().to_string(),
                        message: err.to_string(),
                        consecutive_failures: 1,
                        since,
                    });
                    commit.events.push(e);
                }
                commit.outcome = Err((err.reason().to_string(), err.to_string()));
                commit.pending = record.as_ref().and_then(|r| r.pending.clone());
                CheckOutcome::Failed(err)
            }
            Ok(found) => {
                if let Some(r) = record.as_ref().filter(|r| r.consecutive_failures > 0) {
                    let since = r.failing_since.clone().unwrap_or_default();
                    let mut e = Event::new(
                        event::stable_id(&[
                            &builder.name,
                            EventType::CheckRecovered.as_str(),
                            &since,
                        ]),
                        EventType::CheckRecovered,
                        time.clone(),
                        subject.clone(),
                    );
                    e.current = r.pin.as_ref().map(pin_of);
                    e.error = Some(CheckError {
                        reason: r.last_error_reason.clone().unwrap_or_default(),
                        message: r.last_error.clone().unwrap_or_default(),
                        consecutive_failures: r.consecutive_failures,
                        since,
                    });
                    tracing::info!(builder = %builder.name, after_failures = r.consecutive_failures, "check recovered");
                    commit.events.push(e);
                }
                self.apply(builder, record.as_ref(), found, &mut commit, subject)
                    .await?
            }
        };
        let events = commit.events.clone();
        self.ledger.commit(commit).await?;
        // Logged once recorded: a log line never announces an event the ledger could still lose.
        for event in &events {
            log_event(event);
        }
        tracing::debug!(builder = %builder.name, elapsed = ?started.elapsed(), outcome = ?outcome, "check done");
        Ok(outcome)
    }

    /// Registry side of a check: the HEAD, and the observation of a new digest when it is needed.
    async fn observe_move(
        &self,
        builder: &BuilderSettings,
        record: Option<&WatchRecord>,
    ) -> Result<Found, RegistryError> {
        let head = self.registry.head_manifest(&builder.image).await?;
        let pin = record.and_then(|r| r.pin.as_ref());
        if pin.is_some_and(|p| p.digest == head.digest) {
            return Ok(Found::Unchanged);
        }
        if let (Some(_), Some(r)) = (pin, record) {
            let pending = r
                .pending
                .as_ref()
                .and_then(|(d, since)| Some((d.as_str(), schedule::parse_timestamp(since)?)));
            if let Settle::Hold { since } =
                schedule::settle(builder.settle, pending, &head.digest, self.clock.now())
            {
                return Ok(Found::Held {
                    digest: head.digest,
                    since: timestamp(since),
                });
            }
        }
        // By digest, not tag: what we fetch is exactly what the HEAD saw, even if the tag moves again.
        let observation = inspect::observe(&self.registry, &builder.image, &head.digest).await?;
        Ok(Found::Moved(observation))
    }

    /// Turns what the registry said into ledger writes and events.
    async fn apply(
        &self,
        builder: &BuilderSettings,
        record: Option<&WatchRecord>,
        found: Found,
        commit: &mut CheckRecord,
        subject: Subject,
    ) -> Result<CheckOutcome, LedgerError> {
        let observation = match found {
            Found::Unchanged => return Ok(CheckOutcome::Unchanged),
            Found::Held { digest, since } => {
                tracing::info!(builder = %builder.name, digest = %digest, since = %since, "new digest held back until it settles");
                commit.pending = Some((digest.clone(), since));
                return Ok(CheckOutcome::Held { digest });
            }
            Found::Moved(observation) => observation,
        };
        let current = Pin {
            digest: observation.digest.clone(),
            reference: builder.image.pinned(&observation.digest),
            platforms: observation.platforms.clone(),
        };
        commit.pin = Some(PinUpdate {
            digest: current.digest.clone(),
            reference: current.reference.clone(),
            media_type: observation.media_type.clone(),
            platforms: observation.platforms.clone(),
            metadata: None,
        });
        let Some((record, previous)) = record.and_then(|r| r.pin.as_ref().map(|p| (r, p))) else {
            let mut e = Event::new(
                event::stable_id(&[
                    &builder.name,
                    EventType::BuilderPinned.as_str(),
                    &current.digest,
                ]),
                EventType::BuilderPinned,
                commit.time.clone(),
                subject,
            );
            e.current = Some(current.clone());
            commit.events.push(e);
            return Ok(CheckOutcome::Pinned {
                digest: current.digest,
            });
        };

        if let Some(filter) = builder.platforms.as_deref() {
            let before = Observation {
                digest: previous.digest.clone(),
                media_type: previous.media_type.clone(),
                platforms: previous.platforms.clone(),
            };
            if before.selected(Some(filter)) == observation.selected(Some(filter)) {
                tracing::info!(builder = %builder.name, digest = %current.digest, "index moved but no watched platform did; pin advanced without a change");
                return Ok(CheckOutcome::PlatformsUnchanged {
                    digest: current.digest,
                });
            }
        }

        let seq = record.moves + 1;
        let id = event::change_id(&builder.name, seq, &previous.digest, &current.digest);
        let rollback = self
            .ledger
            .has_pinned(&builder.name, &current.digest)
            .await?;
        let change = Change::unknown();
        let previous_pin = Pin {
            digest: previous.digest.clone(),
            reference: previous.reference.clone(),
            platforms: previous.platforms.clone(),
        };
        let mut e = Event::new(
            id.clone(),
            EventType::BuilderChanged,
            commit.time.clone(),
            subject,
        );
        e.previous = Some(previous_pin);
        e.current = Some(current.clone());
        e.change = Some(change.clone());
        e.rollback = Some(rollback);
        e.images = Some(Vec::new());
        commit.events.push(e);
        commit.change = Some(ChangeRecord {
            id: id.clone(),
            watch: builder.name.clone(),
            seq,
            previous: previous.digest.clone(),
            current: current.digest.clone(),
            previous_reference: previous.reference.clone(),
            current_reference: current.reference.clone(),
            change,
            rollback,
            detected: commit.time.clone(),
        });
        Ok(CheckOutcome::Changed {
            id,
            previous: previous.digest.clone(),
            current: current.digest,
        })
    }
}

/// What the registry side of a check found.
enum Found {
    Unchanged,
    Held { digest: String, since: String },
    Moved(Observation),
}

fn pin_of(p: &crate::store::PinRecord) -> Pin {
    Pin {
        digest: p.digest.clone(),
        reference: p.reference.clone(),
        platforms: p.platforms.clone(),
    }
}

/// Events are logged as one structured line each, with the whole document.
fn log_event(event: &Event) {
    let document = serde_json::to_string(event).unwrap_or_default();
    tracing::info!(
        target: "builder_monitor::event",
        event_type = event.event_type.as_str(),
        event_id = %event.id,
        builder = %event.builder.name,
        event = %document,
        "{}",
        event.event_type
    );
}
