//! Quiet outages in the check: the failing watches of each registry and the outages alerts were
//! told of, restored from the ledger, and the events and deliveries `alert::outage` asks for.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::OwnedMutexGuard;

use super::decide::{failed_event_id, new_event, pin_of};
use super::{CheckOutcome, Monitor, Watch};
use crate::alert::outage::{self, RegistryState};
use crate::ledger::{CheckFailure, CheckRecord, DeliveryKey, LedgerError, WatchRecord};
use crate::metrics::RegistryLabels;
use builder_monitor_core::event::{self, CheckError, Event, EventType, Subject};
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::schedule::{self, timestamp};

/// A check's outage bookkeeping, between its decision and its commit: the registry's failure state,
/// locked until then, and what it becomes once the check is committed.
pub(super) struct Outages {
    registry: String,
    state: OwnedMutexGuard<Option<RegistryState>>,
    next: RegistryState,
    /// Events recorded by an earlier check, repeated only so their new deliveries have them.
    pub repeated: BTreeSet<String>,
}

impl Monitor {
    /// Outage bookkeeping: what `alert::outage` makes of this check, as events and deliveries in
    /// its commit. Holds the registry's state until [`Monitor::committed`].
    pub(super) async fn outages(
        &self,
        watch: &Watch,
        record: Option<&WatchRecord>,
        outcome: &CheckOutcome,
        commit: &mut CheckRecord,
    ) -> Result<Outages, LedgerError> {
        let registry = watch.image.registry().to_string();
        let mut state = self.registry_slot(&registry).lock_owned().await;
        if state.is_none() {
            *state = Some(self.load_registry_state(&registry).await?);
        }
        let failures = record.map_or(0, |r| r.consecutive_failures);
        let decided = match outcome {
            CheckOutcome::Failed(err) => outage::Outcome::Failed {
                failures: failures + 1,
                since: record.and_then(|r| r.failing_since).unwrap_or_else(|| self.handle.clock.now()),
                reason: err.reason().to_string(),
                message: err.to_string(),
                // As `decide` numbers it: a first failure starts the next run.
                run: record.map_or(0, |r| r.failure_runs) + u64::from(failures == 0),
            },
            _ => outage::Outcome::Succeeded,
        };
        let audience = |name: &str| {
            let names = self.subject_names(name);
            crate::alert::audiences(&self.handle.config.alerts, &names.iter().map(String::as_str).collect::<Vec<_>>())
        };
        let (notices, next) =
            state.as_ref().map(|s| s.decide(&registry, &watch.name, &decided, &audience)).unwrap_or_default();
        let mut repeated = BTreeSet::new();
        self.add_notices(watch, record, &registry, &notices, commit, &mut repeated);
        Ok(Outages { registry, state, next, repeated })
    }

    /// The registry's failure state as the check committed it, and its count of failing watches.
    pub(super) fn committed(&self, outages: Outages) {
        let Outages { registry, mut state, next, .. } = outages;
        let failing = next.failing_count();
        *state = Some(next);
        drop(state);
        self.handle
            .metrics
            .watches_failing
            .get_or_create(&RegistryLabels { registry: registry.clone() })
            .set(failing as i64);
        self.handle.failing.lock().unwrap_or_else(|e| e.into_inner()).insert(registry, failing);
    }

    /// Reads a registry's outage state from the ledger again (a new term); on a ledger error it is
    /// left to be read by the registry's next check.
    pub(super) async fn reload_registry_state(&self, registry: &str) {
        let slot = self.registry_slot(registry);
        let mut state = slot.lock().await;
        match self.load_registry_state(registry).await {
            Ok(loaded) => *state = Some(loaded),
            Err(err) => {
                tracing::error!(registry, error = %err, "cannot read the registry's failing watches; read at its next check");
                *state = None;
            }
        }
    }

    /// The lock and state of one registry's failures (`outages`).
    fn registry_slot(&self, registry: &str) -> Arc<tokio::sync::Mutex<Option<RegistryState>>> {
        self.outages.lock().unwrap_or_else(|e| e.into_inner()).entry(registry.to_string()).or_default().clone()
    }

    /// The builders an event about the watch `name` concerns: itself, or the builders naming a run image.
    pub(super) fn subject_names(&self, name: &str) -> Vec<String> {
        if name.starts_with("run:") {
            return self.handle.run_images.lock().unwrap_or_else(|e| e.into_inner()).users(name);
        }
        vec![name.to_string()]
    }

    /// What the ledger says about a registry's failures: its failing watches, which alerts got
    /// each one's `check.failed`, and the outages announced and not yet over.
    async fn load_registry_state(&self, registry: &str) -> Result<RegistryState, LedgerError> {
        let mut state = RegistryState::default();
        let of_registry = |image: &str| ImageRef::parse(image).is_ok_and(|i| i.registry() == registry);
        let failing: Vec<WatchRecord> =
            self.ledger.failing_watches().await?.into_iter().filter(|w| of_registry(&w.image)).collect();
        let failed_ids: Vec<String> = failing
            .iter()
            .map(|w| failed_event_id(&w.name, &w.failing_since.map(timestamp).unwrap_or_default(), w.failure_runs))
            .collect();
        let delivered = self.ledger.deliveries_of(failed_ids.clone()).await?;
        for (w, id) in failing.into_iter().zip(failed_ids) {
            let told = delivered.iter().filter(|d| d.event == id).map(|d| d.alert.clone()).collect();
            let since = w.failing_since.unwrap_or_else(|| self.handle.clock.now());
            state.failing.insert(
                w.name.clone(),
                outage::Failing {
                    since,
                    failures: w.consecutive_failures,
                    reason: w.last_error_reason.clone().unwrap_or_default(),
                    message: w.last_error.clone().unwrap_or_default(),
                    told,
                    run: w.failure_runs,
                },
            );
        }
        let types = [EventType::RegistryUnavailable, EventType::RegistryRecovered].map(|t| t.as_str().to_string());
        let recent = self.ledger.latest_events(types.to_vec(), 1000).await?;
        let ended: BTreeSet<&str> = recent
            .iter()
            .filter(|e| e.event.event_type == EventType::RegistryRecovered)
            .map(|e| e.event.id.as_str())
            .collect();
        let open: Vec<(&Event, &event::Outage)> = recent
            .iter()
            .filter(|e| e.event.event_type == EventType::RegistryUnavailable)
            .filter(|e| !ended.contains(outage::recovered_id(&e.event.id).as_str()))
            .filter_map(|e| e.event.outage.as_ref().filter(|o| o.registry == registry).map(|o| (&e.event, o)))
            .collect();
        let delivered = self.ledger.deliveries_of(open.iter().map(|(e, _)| e.id.clone()).collect()).await?;
        for (e, o) in open {
            let alerts = delivered.iter().filter(|d| d.event == e.id).map(|d| d.alert.clone()).collect();
            let since = schedule::parse_timestamp(&o.since).unwrap_or_else(|| self.handle.clock.now());
            state.open.insert(
                e.id.clone(),
                outage::Outage {
                    id: e.id.clone(),
                    since,
                    watches: o.watches.clone(),
                    reason: o.reason.clone(),
                    message: o.message.clone(),
                    alerts,
                },
            );
        }
        let count = state.failing_count();
        self.handle
            .metrics
            .watches_failing
            .get_or_create(&RegistryLabels { registry: registry.to_string() })
            .set(count as i64);
        self.handle.failing.lock().unwrap_or_else(|e| e.into_inner()).insert(registry.to_string(), count);
        Ok(state)
    }

    /// Adds the events and deliveries `notices` asks for to a check's commit.
    fn add_notices(
        &self,
        watch: &Watch,
        record: Option<&WatchRecord>,
        registry: &str,
        notices: &outage::Notices,
        commit: &mut CheckRecord,
        repeated: &mut BTreeSet<String>,
    ) {
        let by_type =
            |commit: &CheckRecord, t: EventType| commit.events.iter().find(|e| e.event_type == t).map(|e| e.id.clone());
        if !notices.failed.is_empty() {
            let id = match by_type(commit, EventType::CheckFailed) {
                Some(id) => id,
                None => {
                    // Recorded at the first failure; repeated (a no-op for the ledger) so the
                    // deliveries never name an event the ledger lacks.
                    let since = timestamp(record.and_then(|r| r.failing_since).unwrap_or(commit.time));
                    let run = record.map_or(0, |r| r.failure_runs);
                    let id = failed_event_id(&watch.name, &since, run);
                    let mut e = new_event(watch, &self.subjects(watch), id.clone(), EventType::CheckFailed, &since);
                    e.current = record.and_then(|r| r.pin.as_ref()).map(pin_of);
                    if let Err(CheckFailure { reason, message }) = &commit.outcome {
                        e.error = Some(CheckError {
                            reason: reason.clone(),
                            message: message.clone(),
                            consecutive_failures: record.map_or(0, |r| r.consecutive_failures) + 1,
                            since,
                        });
                    }
                    repeated.insert(id.clone());
                    commit.events.push(e);
                    id
                }
            };
            commit.deliveries.extend(notices.failed.iter().map(|a| DeliveryKey::new(id.clone(), a.clone())));
        }
        if let Some(id) = by_type(commit, EventType::CheckRecovered) {
            commit.deliveries.extend(notices.recovered.iter().map(|a| DeliveryKey::new(id.clone(), a.clone())));
        }
        for (o, alerts) in &notices.unavailable {
            let e =
                self.outage_event(registry, o, o.id.clone(), EventType::RegistryUnavailable, &timestamp(commit.time));
            // DEBUG: its event logs it, and `failure_log` the outage whether alerts hear of it or not.
            tracing::debug!(registry, watches = o.watches.len(), since = %timestamp(o.since), reason = %o.reason, "registry unavailable: several watches fail together; alerts get one message for them");
            commit.deliveries.extend(alerts.iter().map(|a| DeliveryKey::new(e.id.clone(), a.clone())));
            commit.events.push(e);
        }
        for (o, alerts) in &notices.ended {
            let e =
                self.outage_event(registry, o, o.recovered_id(), EventType::RegistryRecovered, &timestamp(commit.time));
            tracing::debug!(registry, since = %timestamp(o.since), "registry outage over: none of its watches fails any more");
            commit.deliveries.extend(alerts.iter().map(|a| DeliveryKey::new(e.id.clone(), a.clone())));
            commit.events.push(e);
        }
    }

    /// A `registry.*` event: about the builders of the watches in the outage.
    fn outage_event(&self, registry: &str, o: &outage::Outage, id: String, event_type: EventType, time: &str) -> Event {
        let mut names: Vec<String> = o.watches.iter().flat_map(|w| self.subject_names(w)).collect();
        names.sort();
        names.dedup();
        let subjects: Vec<Subject> = names
            .iter()
            .map(|n| Subject {
                name: n.clone(),
                image: self.handle.config.builder(n).map(|b| b.image.to_string()).unwrap_or_default(),
            })
            .collect();
        let first = subjects
            .first()
            .cloned()
            .unwrap_or_else(|| Subject { name: registry.to_string(), image: registry.to_string() });
        let mut e = Event::new(id, event_type, time.to_string(), first);
        e.builders = subjects;
        e.outage = Some(event::Outage {
            registry: registry.to_string(),
            since: timestamp(o.since),
            watches: o.watches.clone(),
            reason: o.reason.clone(),
            message: o.message.clone(),
        });
        e
    }
}
