//! The check's decision, pure: from a watch, what the ledger holds for it and what the registry
//! showed, the record to commit (pin, pending digest, change, events) and the check's outcome.

use std::collections::BTreeMap;

use chrono::{DateTime, SubsecRound, Utc};

use super::{CheckOutcome, Watch};
use crate::config::Platform;
use crate::inspect::Observation;
use crate::ledger::{
    ChangeRecord, CheckFailure, CheckRecord, HeldDigest, PinMetadata, PinRecord, PinUpdate, WatchKind, WatchRecord,
};
use crate::registry::RegistryError;
use builder_monitor_core::cnb::{self, Change, PinnedMetadata};
use builder_monitor_core::event::{self, CheckError, Event, EventType, Pin, Subject};
use builder_monitor_core::schedule::{self, Settle, timestamp};

/// What the registry showed for a watch (`observe`).
#[derive(Debug)]
pub enum Observed {
    /// The tag still names the pin.
    Unchanged,
    /// A new digest that the settle rule holds back; not inspected, so a held tag costs one HEAD.
    Head { digest: String },
    /// A new digest, inspected; `rollback` when the watch was pinned to it before.
    Moved { observation: Observation, metadata: Option<Box<PinnedMetadata>>, rollback: bool },
}

/// A decided check: the record to commit and what happened.
#[derive(Debug)]
pub struct Decided {
    pub commit: CheckRecord,
    pub outcome: CheckOutcome,
}

/// Whether the settle rule holds `digest` back at `now` (for a watch with a pin).
pub fn holds(watch: &Watch, record: Option<&WatchRecord>, digest: &str, now: DateTime<Utc>) -> bool {
    let Some(record) = record.filter(|r| r.pin.is_some()) else { return false };
    let pending = record.pending.as_ref().map(|p| (p.digest.as_str(), p.since));
    matches!(schedule::settle(watch.settle, pending, digest, now), Settle::Hold { .. })
}

/// Whether a move leaves every platform the watch filters for where the pin had it.
pub fn platforms_unchanged(watch: &Watch, pin: Option<&PinRecord>, observation: &Observation) -> bool {
    let (Some(filter), Some(pin)) = (watch.platforms.as_deref(), pin) else { return false };
    selected(pin, filter) == observation.selected(Some(filter))
}

fn selected(pin: &PinRecord, filter: &[Platform]) -> BTreeMap<String, String> {
    Observation {
        digest: pin.digest.clone(),
        media_type: pin.media_type.clone(),
        platforms: pin.platforms.clone(),
        single_config: None,
        single_layers: Vec::new(),
        notes: Vec::new(),
    }
    .selected(Some(filter))
}

/// The id of a watch's `check.failed` for its failure run number `run`, which started at `since`.
pub fn failed_event_id(watch: &str, since: &str, run: u64) -> String {
    event::failure_event_id(watch, EventType::CheckFailed, since, run)
}

pub fn pin_of(p: &PinRecord) -> Pin {
    Pin { digest: p.digest.clone(), reference: p.reference.clone(), platforms: p.platforms.clone() }
}

/// An event about `watch`, about `subjects` (the builder, or the builders naming a run image).
pub fn new_event(watch: &Watch, subjects: &[Subject], id: String, event_type: EventType, time: &str) -> Event {
    let first = subjects
        .first()
        .cloned()
        .unwrap_or_else(|| Subject { name: watch.name.clone(), image: watch.image.to_string() });
    let mut e = Event::new(id, event_type, time.to_string(), first);
    if watch.kind == WatchKind::RunImage {
        e.builders = subjects.to_vec();
        e.run_image = Some(watch.image.to_string());
    }
    e
}

/// Decides one check. `record` is the ledger's entry for the watch (for the same image), `now` the
/// check's time. A change's event lists no images yet: the reaction adds them with its actions.
pub fn decide(
    watch: &Watch,
    subjects: &[Subject],
    record: Option<&WatchRecord>,
    observed: Result<Observed, RegistryError>,
    now: DateTime<Utc>,
) -> Decided {
    // To the second, as the events and `status` say it.
    let now = now.trunc_subsecs(0);
    let time = timestamp(now);
    let mut commit = CheckRecord {
        watch: watch.name.clone(),
        kind: watch.kind,
        image: watch.image.to_string(),
        time: now,
        outcome: Ok(()),
        pin: None,
        pending: None,
        change: None,
        events: Vec::new(),
        deliveries: Vec::new(),
        actions: Vec::new(),
        history: 0,
    };
    let event = |id: String, event_type: EventType| new_event(watch, subjects, id, event_type, &time);
    let observed = match observed {
        Err(err) => {
            if record.is_none_or(|r| r.consecutive_failures == 0) {
                let since = timestamp(record.and_then(|r| r.failing_since).unwrap_or(now));
                // A new run: the ledger counts it when it records this check.
                let run = record.map_or(0, |r| r.failure_runs) + 1;
                let mut e = event(failed_event_id(&watch.name, &since, run), EventType::CheckFailed);
                e.current = record.and_then(|r| r.pin.as_ref()).map(pin_of);
                e.error = Some(CheckError {
                    reason: err.reason().to_string(),
                    message: err.to_string(),
                    consecutive_failures: 1,
                    since,
                });
                commit.events.push(e);
            }
            commit.outcome = Err(CheckFailure { reason: err.reason().to_string(), message: err.to_string() });
            commit.pending = record.and_then(|r| r.pending.clone());
            return Decided { commit, outcome: CheckOutcome::Failed(err) };
        }
        Ok(observed) => observed,
    };
    if let Some(r) = record.filter(|r| r.consecutive_failures > 0) {
        let since = r.failing_since.map(timestamp).unwrap_or_default();
        let mut e = event(
            event::failure_event_id(&watch.name, EventType::CheckRecovered, &since, r.failure_runs),
            EventType::CheckRecovered,
        );
        e.current = r.pin.as_ref().map(pin_of);
        e.error = Some(CheckError {
            reason: r.last_error_reason.clone().unwrap_or_default(),
            message: r.last_error.clone().unwrap_or_default(),
            consecutive_failures: r.consecutive_failures,
            since,
        });
        commit.events.push(e);
    }
    let (observation, metadata, rollback) = match observed {
        Observed::Unchanged => return Decided { commit, outcome: CheckOutcome::Unchanged },
        Observed::Head { digest } => {
            // Held since it was first seen, unless the tag moved on meanwhile (the clock restarts).
            let since = match record.and_then(|r| r.pending.as_ref()) {
                Some(pending) if pending.digest == digest => pending.since,
                _ => now,
            };
            commit.pending = Some(HeldDigest { digest: digest.clone(), since });
            return Decided { commit, outcome: CheckOutcome::Held { digest } };
        }
        Observed::Moved { observation, metadata, rollback } => (observation, metadata, rollback),
    };
    let previous = record.and_then(|r| r.pin.as_ref());
    if platforms_unchanged(watch, previous, &observation) {
        commit.pin = Some(PinUpdate {
            reference: watch.image.pinned(&observation.digest),
            digest: observation.digest.clone(),
            media_type: observation.media_type,
            platforms: observation.platforms,
            metadata: record.and_then(|r| r.metadata.clone()),
        });
        return Decided { commit, outcome: CheckOutcome::PlatformsUnchanged { digest: observation.digest } };
    }
    let current = Pin {
        digest: observation.digest.clone(),
        reference: watch.image.pinned(&observation.digest),
        platforms: observation.platforms.clone(),
    };
    commit.pin = Some(PinUpdate {
        digest: current.digest.clone(),
        reference: current.reference.clone(),
        media_type: observation.media_type.clone(),
        platforms: observation.platforms.clone(),
        metadata: metadata.as_deref().cloned().map(PinMetadata::from),
    });
    let (Some(record), Some(previous)) = (record, previous) else {
        if watch.kind == WatchKind::Builder {
            let mut e = event(
                event::stable_id(&[&watch.name, EventType::BuilderPinned.as_str(), &current.digest]),
                EventType::BuilderPinned,
            );
            e.current = Some(current.clone());
            commit.events.push(e);
        }
        return Decided { commit, outcome: CheckOutcome::Pinned { digest: current.digest } };
    };
    let seq = record.moves + 1;
    let id = event::change_id(&watch.name, seq, &previous.digest, &current.digest);
    let (event_type, change) = match (watch.kind, &metadata, record.pinned_metadata()) {
        (WatchKind::RunImage, _, before) => {
            let moved = Change::run_image_moved(previous.reference.clone(), current.reference.clone());
            let before = before.map(|m| m.packages).unwrap_or_default();
            let after = metadata.as_ref().map(|m| m.packages.clone()).unwrap_or_default();
            (EventType::RunImageChanged, moved.with_packages(&before, &after))
        }
        (WatchKind::Builder, Some(now), Some(before)) => (EventType::BuilderChanged, cnb::classify(&before, now)),
        (WatchKind::Builder, _, _) => {
            (EventType::BuilderChanged, Change::unknown("no CNB metadata was recorded for the previous pin"))
        }
    };
    let mut e = event(id.clone(), event_type);
    e.previous = Some(pin_of(previous));
    e.current = Some(current.clone());
    e.change = Some(change.clone());
    e.rollback = Some(rollback);
    e.images = Some(Vec::new());
    commit.events.push(e);
    commit.change = Some(ChangeRecord {
        id: id.clone(),
        watch: watch.name.clone(),
        seq,
        previous: previous.digest.clone(),
        current: current.digest.clone(),
        previous_reference: previous.reference.clone(),
        current_reference: current.reference.clone(),
        change: change.clone(),
        rollback,
        detected: now,
    });
    Decided {
        commit,
        outcome: CheckOutcome::Changed {
            id,
            previous: previous.digest.clone(),
            current: current.digest,
            change: Box::new(change),
        },
    }
}

#[cfg(test)]
mod tests;
