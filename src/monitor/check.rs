//! One check of one watch: `observe` asks the registry (one HEAD when nothing moved), `decide`
//! (pure) turns that into the record to commit, the reaction plans actions for a change, and the
//! failure bookkeeping of `alert::outage` adds its events; then one ledger commit.

use std::collections::BTreeSet;
use std::time::Duration;

use super::decide::{self, Observed};
use super::reaction::Moved;
use super::{CheckOutcome, Monitor, Watch};
use crate::alert::outage;
use crate::inspect;
use crate::ledger::{DeliveryKey, LedgerError, PinMetadata, WatchKind, WatchRecord};
use crate::metrics::{ChangeLabels, RegistryLabels};
use crate::registry::RegistryError;
use builder_monitor_core::cnb::{self, PinnedMetadata, RunImagePin, run_watch_name};
use builder_monitor_core::event::{EventType, ImageAction};
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::schedule::{next_check, timestamp};
use chrono::SubsecRound;

impl Monitor {
    /// A check whose ledger failure is logged rather than returned.
    pub(super) async fn check_logged(&self, watch: &Watch) -> Option<CheckOutcome> {
        match self.check(watch).await {
            Ok(outcome) => Some(outcome),
            Err(err) => {
                tracing::error!(watch = %watch.name, error = %err, "cannot record check");
                None
            }
        }
    }

    /// Checks a builder by name (tests, API).
    pub async fn check_builder(&self, name: &str) -> Option<Result<CheckOutcome, LedgerError>> {
        let builder = self.config.builder(name)?;
        Some(self.check(&Watch::builder(builder)).await)
    }

    /// One check of one watch, committed to the ledger.
    pub async fn check(&self, watch: &Watch) -> Result<CheckOutcome, LedgerError> {
        let image = watch.image.to_string();
        // A watch whose configured image changed starts over with a new pin, not a change.
        let record = self.ledger.watch(&watch.name).await?.filter(|r| r.image == image);
        let started = std::time::Instant::now();
        let mut observed = self.observe(watch, record.as_ref()).await;
        if let Ok(Observed::Moved { observation, rollback, .. }) = &mut observed
            && record.as_ref().is_some_and(|r| r.pin.is_some())
            && !decide::platforms_unchanged(watch, record.as_ref().and_then(|r| r.pin.as_ref()), observation)
        {
            *rollback = self.ledger.has_pinned(&watch.name, &observation.digest).await?;
        }
        let subjects = self.subjects(watch);
        let now = self.clock.now();
        let decide::Decided { mut commit, outcome } = decide::decide(watch, &subjects, record.as_ref(), observed, now);
        commit.history = self.config.monitor.history;
        let failures = record.as_ref().map_or(0, |r| r.consecutive_failures);
        self.log_decision(watch, record.as_ref(), &outcome, now);
        if let CheckOutcome::Changed { id, change, .. } = &outcome
            && let Some(current) = commit.events.last().and_then(|e| e.current.clone())
        {
            let builders: Vec<String> = subjects.iter().map(|s| s.name.clone()).collect();
            let metadata = commit.pin.as_ref().and_then(|p| p.metadata.as_ref()).and_then(PinMetadata::read);
            let mv = Moved {
                kind: watch.kind,
                builders: &builders,
                change_id: id,
                change,
                current: &current,
                metadata: metadata.as_deref().filter(|_| watch.kind == WatchKind::Builder),
            };
            let (decisions, actions) = self.reaction().plan_actions(&mv).await?;
            for d in &decisions {
                tracing::info!(watch = %watch.name, image = %d.image, action = d.action.map_or("none", |a| a.as_str()), why = %d.why, "planned");
            }
            if let Some(e) = commit.events.iter_mut().find(|e| e.id == *id) {
                e.images = Some(
                    decisions
                        .iter()
                        .filter_map(|d| {
                            d.action.map(|a| ImageAction { name: d.image.clone(), action: a.as_str().into() })
                        })
                        .collect(),
                );
            }
            if let Some(subject) = subjects.first()
                && let Some(e) = crate::rollout::awaiting_approval_event(id, subject, &subjects, &actions, now)
            {
                commit.events.push(e);
            }
            commit.actions = actions;
        }
        // Failure events go where `alert::outage` says (thresholds, grouping); the others by routing.
        for event in &commit.events {
            if matches!(event.event_type, EventType::CheckFailed | EventType::CheckRecovered) {
                continue;
            }
            for alert in crate::config::alerts::routes(&self.config.alerts, event) {
                commit.deliveries.push(DeliveryKey::new(event.id.clone(), alert));
            }
        }
        let registry = watch.image.registry().to_string();
        let slot = self.registry_slot(&registry);
        let mut state = slot.lock().await;
        if state.is_none() {
            *state = Some(self.load_registry_state(&registry).await?);
        }
        let decided = match &outcome {
            CheckOutcome::Failed(err) => outage::Outcome::Failed {
                failures: failures + 1,
                since: record.as_ref().and_then(|r| r.failing_since).unwrap_or_else(|| self.clock.now()),
                reason: err.reason().to_string(),
                message: err.to_string(),
                // As `decide` numbers it: a first failure starts the next run.
                run: record.as_ref().map_or(0, |r| r.failure_runs) + u64::from(failures == 0),
            },
            _ => outage::Outcome::Succeeded,
        };
        let audience = |name: &str| {
            let names = self.subject_names(name);
            crate::alert::audiences(&self.config.alerts, &names.iter().map(String::as_str).collect::<Vec<_>>())
        };
        let (notices, next_state) =
            state.as_ref().map(|s| s.decide(&registry, &watch.name, &decided, &audience)).unwrap_or_default();
        // Events recorded by an earlier check, repeated only so their new deliveries have them.
        let mut repeated = BTreeSet::new();
        self.add_notices(watch, record.as_ref(), &registry, &notices, &mut commit, &mut repeated);
        let events = commit.events.clone();
        let new_metadata = commit.pin.as_ref().and_then(|p| p.metadata.clone());
        let pinned = commit.pin.as_ref().map(|p| p.digest.clone()).or_else(|| {
            let failed = matches!(outcome, CheckOutcome::Failed(_));
            record.as_ref().and_then(|r| r.pin.as_ref()).filter(|_| !failed).map(|p| p.digest.clone())
        });
        let change_kind = commit.change.as_ref().map(|c| c.change.kind);
        // An unchanged check is only noted (the ledger writes such times in batches).
        self.ledger.commit_over(commit, record.as_ref()).await?;
        let failing = next_state.failing_count();
        *state = Some(next_state);
        drop(state);
        self.metrics.watches_failing.get_or_create(&RegistryLabels { registry: registry.clone() }).set(failing as i64);
        self.failing.lock().unwrap_or_else(|e| e.into_inner()).insert(registry, failing);
        self.record_metrics(watch, &outcome, started.elapsed(), pinned.as_deref(), change_kind);
        // Logged once recorded: a log line never announces an event the ledger could still lose.
        for event in events.iter().filter(|e| !repeated.contains(&e.id)) {
            crate::event_log::log(event);
        }
        if watch.kind == WatchKind::Builder
            && let Some(metadata) = new_metadata
            && let Some(builder) = self.config.builder(&watch.name)
        {
            let metadata = metadata.read();
            self.run_images.lock().unwrap_or_else(|e| e.into_inner()).note(builder, metadata.as_deref());
        }
        tracing::debug!(watch = %watch.name, elapsed = ?started.elapsed(), outcome = ?outcome, "check done");
        Ok(outcome)
    }

    /// The log line of a decided check (events are logged once committed).
    fn log_decision(
        &self,
        watch: &Watch,
        record: Option<&WatchRecord>,
        outcome: &CheckOutcome,
        now: chrono::DateTime<chrono::Utc>,
    ) {
        if !matches!(outcome, CheckOutcome::Failed(_))
            && let Some(r) = record.filter(|r| r.consecutive_failures > 0)
        {
            tracing::info!(watch = %watch.name, after_failures = r.consecutive_failures, "check recovered");
        }
        match outcome {
            CheckOutcome::Failed(err) => {
                let failures = record.map_or(0, |r| r.consecutive_failures);
                // From the recorded check time, so the log and `status` name the same moment.
                let checked = now.trunc_subsecs(0);
                let next_check = next_check(&watch.schedule, checked);
                tracing::warn!(watch = %watch.name, image = %watch.image, reason = err.reason(), error = %err, consecutive_failures = failures + 1, next_check = next_check.as_deref().unwrap_or("when woken"), jitter = %humantime::format_duration(watch.jitter), "check failed; pin kept");
            }
            CheckOutcome::Held { digest } => {
                let since = record.and_then(|r| r.pending.as_ref()).filter(|p| p.digest == *digest).map(|p| p.since);
                let since = timestamp(since.unwrap_or(now));
                tracing::info!(watch = %watch.name, digest = %digest, since = %since, "new digest held back until it settles");
            }
            CheckOutcome::PlatformsUnchanged { digest } => {
                tracing::info!(watch = %watch.name, digest = %digest, "index moved but no watched platform did; pin advanced without a change");
            }
            CheckOutcome::Changed { change, .. } => {
                tracing::info!(watch = %watch.name, change = %change.summary(), "moved");
            }
            CheckOutcome::Unchanged | CheckOutcome::Pinned { .. } => {}
        }
    }

    fn record_metrics(
        &self,
        watch: &Watch,
        outcome: &CheckOutcome,
        elapsed: Duration,
        pinned: Option<&str>,
        change: Option<cnb::ChangeKind>,
    ) {
        let failed = match outcome {
            CheckOutcome::Failed(err) => Some(err.reason()),
            _ => None,
        };
        let now = self.clock.now();
        let seconds = now.timestamp() as f64 + f64::from(now.timestamp_subsec_millis()) / 1000.0;
        self.metrics.record_check(&watch.name, failed, seconds);
        self.metrics.check_duration.observe(elapsed.as_secs_f64());
        if let Some(digest) = pinned {
            self.metrics.set_pinned(&watch.name, digest);
        }
        if let Some(kind) = change {
            let labels = ChangeLabels { builder: watch.name.clone(), kind: kind.as_str().into() };
            self.metrics.changes.get_or_create(&labels).inc();
        }
        self.unchecked.lock().unwrap_or_else(|e| e.into_inner()).remove(&watch.name);
        self.beat();
    }

    /// Registry side of a check: the HEAD, and what a new digest is when it is needed (not while
    /// the settle rule holds it, not the CNB metadata when no watched platform moved).
    async fn observe(&self, watch: &Watch, record: Option<&WatchRecord>) -> Result<Observed, RegistryError> {
        let head = self.registry.head_manifest(&watch.image).await?;
        let pin = record.and_then(|r| r.pin.as_ref());
        if pin.is_some_and(|p| p.digest == head.digest) {
            return Ok(Observed::Unchanged);
        }
        if decide::holds(watch, record, &head.digest, self.clock.now()) {
            return Ok(Observed::Head { digest: head.digest });
        }
        // By digest, not tag: what we fetch is exactly what the HEAD saw, even if the tag moves again.
        let max_platforms = self.config.monitor.max_platforms;
        let observation = inspect::observe(&self.registry, &watch.image, &head.digest, max_platforms)
            .await
            .map_err(|e| not_served(watch, e))?;
        if decide::platforms_unchanged(watch, pin, &observation) {
            return Ok(Observed::Moved { observation, metadata: None, rollback: false });
        }
        let metadata = match watch.kind {
            // Kept with the pin so the next move diffs against it without refetching.
            WatchKind::RunImage => {
                let metadata =
                    inspect::run_image_packages(&self.registry, &watch.image, &observation, watch.platforms.as_deref())
                        .await;
                Some(metadata).filter(|m| !m.packages.is_empty() || !m.notes.is_empty())
            }
            WatchKind::Builder => {
                let mut metadata =
                    inspect::pin_metadata(&self.registry, &watch.image, &observation, watch.platforms.as_deref())
                        .await
                        .map_err(|e| not_served(watch, e))?;
                metadata.run_image = self.resolve_run_image(watch, &metadata).await;
                // The run image's lists come from its own pin: cut them too if the whole is over.
                metadata.fit(cnb::MAX_PINNED_BYTES);
                Some(metadata)
            }
        };
        // `rollback` is read from the ledger by `check`, whose errors are the ledger's.
        Ok(Observed::Moved { observation, metadata: metadata.map(Box::new), rollback: false })
    }

    /// The immutable reference of the run image a builder names, as of now: the run image watch's
    /// pin when there is one, else one HEAD.
    async fn resolve_run_image(&self, watch: &Watch, metadata: &PinnedMetadata) -> Option<RunImagePin> {
        let name = metadata.preferred()?.run_image()?.to_string();
        let mut packages = Default::default();
        let reference = match ImageRef::parse(&name) {
            Err(_) => None,
            Ok(image) => match image.digest() {
                Some(digest) => Some(image.pinned(digest)),
                None => {
                    let pinned = match self.ledger.watch(&run_watch_name(&image)).await {
                        Ok(Some(r)) if r.image == image.to_string() => {
                            // The run image watch's lists describe exactly its pin.
                            packages = r.pinned_metadata().map(|m| m.packages).unwrap_or_default();
                            r.pin.map(|p| p.reference)
                        }
                        _ => None,
                    };
                    match pinned {
                        Some(reference) => Some(reference),
                        None => match self.run_image_heads.head(&self.registry, &image).await {
                            Ok(digest) => Some(image.pinned(&digest)),
                            Err(err) => {
                                tracing::warn!(watch = %watch.name, run_image = %image, error = %err, "cannot resolve the run image; comparing by name only");
                                None
                            }
                        },
                    }
                }
            },
        };
        Some(RunImagePin { image: name, reference, packages })
    }
}

/// A 404 once the HEAD found the tag: the registry names content it does not serve (a bogus
/// digest header, a manifest without its blobs). The tag is there, so this is not `tag_missing`.
fn not_served(watch: &Watch, err: RegistryError) -> RegistryError {
    match err {
        RegistryError::NotFound { reference } => RegistryError::InvalidResponse {
            registry: watch.image.registry().to_string(),
            detail: format!("the tag {} names {reference}, which the registry does not serve", watch.image),
        },
        other => other,
    }
}
