//! The check's decisions, pure. `found`: what the registry showed means for the watch (a failure,
//! nothing new, a held digest, a new pin, or a move to record as a change). `decide`: from that
//! and the reaction planned for a move, the record to commit (pin, pending digest, change, actions)
//! with every event whole, and the check's outcome.

use std::collections::BTreeMap;

use chrono::{DateTime, SubsecRound, Utc};

use super::{CheckOutcome, Watch};
use crate::config::Platform;
use crate::inspect::Observation;
use crate::ledger::{
    ChangeRecord, CheckFailure, CheckRecord, HeldDigest, PinMetadata, PinRecord, PinUpdate, WatchKind, WatchRecord,
};
use crate::reaction::Planned;
use crate::registry::RegistryError;
use builder_monitor_core::cnb::{self, Change, PinnedMetadata};
use builder_monitor_core::event::{self, CheckError, Event, EventType, ImageAction, Pin, Subject};
use builder_monitor_core::schedule::{self, Settle, timestamp};
use builder_monitor_core::vulns::Index;

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

/// What an observation means for the watch ([`found`]), before any reaction.
#[derive(Debug)]
pub enum Found {
    /// The registry could not answer; the pin is kept.
    Failed(RegistryError),
    /// The tag still names the pin.
    Unchanged,
    /// A new digest held back by `settle`.
    Held { digest: String },
    /// The index moved but none of the watched platforms did: the pin advances with the metadata
    /// it had, and there is no change.
    PlatformsUnchanged { observation: Observation, metadata: Option<Box<PinnedMetadata>> },
    /// First sight: the tag gets its first pin.
    Pinned { observation: Observation, metadata: Option<Box<PinnedMetadata>> },
    /// An accepted move, recorded as a change.
    Moved(Box<Move>),
}

/// A move a check records as a change: its id and number, the pins on either side, what changed.
#[derive(Debug)]
pub struct Move {
    pub id: String,
    /// The watch's move number (its moves so far, plus this one).
    pub seq: u64,
    pub event_type: EventType,
    pub change: Change,
    pub previous: PinRecord,
    pub current: Pin,
    pub media_type: String,
    /// The new pin's metadata.
    pub metadata: Option<Box<PinnedMetadata>>,
    pub rollback: bool,
}

/// A decided check: the record to commit, what happened, and the new pin's metadata (typed: the
/// record holds it as the ledger stores it).
#[derive(Debug)]
pub struct Decided {
    pub commit: CheckRecord,
    pub outcome: CheckOutcome,
    pub metadata: Option<Box<PinnedMetadata>>,
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

/// What `observed` means for the watch that `record` is the ledger's entry of (same image).
pub fn found(watch: &Watch, record: Option<&WatchRecord>, observed: Result<Observed, RegistryError>) -> Found {
    let (observation, metadata, rollback) = match observed {
        Err(err) => return Found::Failed(err),
        Ok(Observed::Unchanged) => return Found::Unchanged,
        Ok(Observed::Head { digest }) => return Found::Held { digest },
        Ok(Observed::Moved { observation, metadata, rollback }) => (observation, metadata, rollback),
    };
    let previous = record.and_then(|r| r.pin.as_ref());
    if platforms_unchanged(watch, previous, &observation) {
        let metadata = record.and_then(WatchRecord::pinned_metadata).map(Box::new);
        return Found::PlatformsUnchanged { observation, metadata };
    }
    let (Some(record), Some(previous)) = (record, previous) else {
        return Found::Pinned { observation, metadata };
    };
    let current = Pin {
        digest: observation.digest.clone(),
        reference: watch.image.pinned(&observation.digest),
        platforms: observation.platforms,
    };
    let seq = record.moves + 1;
    let id = event::change_id(&watch.name, seq, &previous.digest, &current.digest);
    let (event_type, change) = match (watch.kind, metadata.as_deref(), record.pinned_metadata()) {
        (WatchKind::RunImage, now, before) => {
            // As `diff` classifies the same two images.
            let (before, after) = (before.unwrap_or_default(), now.cloned().unwrap_or_default());
            let mut change =
                cnb::classify_run_image(previous.reference.clone(), current.reference.clone(), &before, &after);
            // As for a builder's move: what the new pin left out (an index or a list cut).
            change.notes = now.map(|m| m.notes.clone()).unwrap_or_default();
            (EventType::RunImageChanged, change)
        }
        (WatchKind::Builder, Some(now), Some(before)) => (EventType::BuilderChanged, cnb::classify(&before, now)),
        (WatchKind::Builder, _, _) => {
            (EventType::BuilderChanged, Change::unknown("no CNB metadata was recorded for the previous pin"))
        }
    };
    Found::Moved(Box::new(Move {
        id,
        seq,
        event_type,
        change,
        previous: previous.clone(),
        current,
        media_type: observation.media_type,
        metadata,
        rollback,
    }))
}

/// `found` with what its move fixes (`Change::with_fixes`), matched against `vulns` (`None`: no
/// vulnerability data configured, and the change has no `fixes`): each side's lists as pinned.
pub fn with_fixes(found: Found, record: Option<&WatchRecord>, vulns: Option<&Index>) -> Found {
    let Found::Moved(mut moved) = found else { return found };
    if vulns.is_some() {
        let before = record.and_then(WatchRecord::pinned_metadata).unwrap_or_default();
        let after = moved.metadata.as_deref().cloned().unwrap_or_default();
        let change = std::mem::replace(&mut moved.change, Change::unknown(String::new()));
        moved.change = change.with_fixes_of_pins(vulns, &before, &after);
    }
    Found::Moved(moved)
}

/// Decides one check: the record to commit, each of its events whole, and the outcome. `record`
/// is the ledger's entry for the watch (for the same image), `found` what the check found,
/// `planned` the reaction to its move (nothing otherwise), `now` the check's time.
pub fn decide(
    watch: &Watch,
    subjects: &[Subject],
    record: Option<&WatchRecord>,
    found: Found,
    planned: Planned,
    now: DateTime<Utc>,
    history: usize,
) -> Decided {
    // To the second, as the events and `status` say it.
    let now = now.trunc_subsecs(0);
    let check = Deciding { watch, subjects, record, now, time: timestamp(now) };
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
        history,
    };
    if !matches!(found, Found::Failed(_))
        && let Some(recovered) = check.recovered()
    {
        commit.events.push(recovered);
    }
    match found {
        Found::Failed(err) => check.failed(commit, err),
        Found::Unchanged => Decided { commit, outcome: CheckOutcome::Unchanged, metadata: None },
        Found::Held { digest } => {
            // Held since it was first seen, unless the tag moved on meanwhile (the clock restarts).
            let since = match record.and_then(|r| r.pending.as_ref()) {
                Some(pending) if pending.digest == digest => pending.since,
                _ => now,
            };
            commit.pending = Some(HeldDigest { digest: digest.clone(), since });
            Decided { commit, outcome: CheckOutcome::Held { digest }, metadata: None }
        }
        Found::PlatformsUnchanged { observation, metadata } => {
            let digest = observation.digest.clone();
            // The metadata as the ledger holds it, not converted back and forth.
            commit.pin = Some(check.pin_update(observation, record.and_then(|r| r.metadata.clone())));
            // Only the gitops targets' commits of the pin: no change, no app action.
            commit.actions = planned.actions;
            Decided { commit, outcome: CheckOutcome::PlatformsUnchanged { digest }, metadata }
        }
        Found::Pinned { observation, metadata } => check.pinned(commit, observation, metadata, planned),
        Found::Moved(mv) => check.moved(commit, *mv, planned),
    }
}

/// One check being decided: the watch, its subjects and record, and the check's time.
struct Deciding<'a> {
    watch: &'a Watch,
    subjects: &'a [Subject],
    record: Option<&'a WatchRecord>,
    now: DateTime<Utc>,
    /// `now` as events say it.
    time: String,
}

impl Deciding<'_> {
    fn event(&self, id: String, event_type: EventType) -> Event {
        new_event(self.watch, self.subjects, id, event_type, &self.time)
    }

    fn pin_update(&self, observation: Observation, metadata: Option<PinMetadata>) -> PinUpdate {
        PinUpdate {
            reference: self.watch.image.pinned(&observation.digest),
            digest: observation.digest,
            media_type: observation.media_type,
            platforms: observation.platforms,
            metadata,
        }
    }

    /// `check.recovered`, when the watch was failing until this check.
    fn recovered(&self) -> Option<Event> {
        let r = self.record.filter(|r| r.consecutive_failures > 0)?;
        let since = r.failing_since.map(timestamp).unwrap_or_default();
        let mut e = self.event(
            event::failure_event_id(&self.watch.name, EventType::CheckRecovered, &since, r.failure_runs),
            EventType::CheckRecovered,
        );
        e.current = r.pin.as_ref().map(pin_of);
        e.error = Some(CheckError {
            reason: r.last_error_reason.clone().unwrap_or_default(),
            message: r.last_error.clone().unwrap_or_default(),
            consecutive_failures: r.consecutive_failures,
            since,
        });
        Some(e)
    }

    /// A failed check: `check.failed` at the first failure of a run, the held digest kept.
    fn failed(&self, mut commit: CheckRecord, err: RegistryError) -> Decided {
        let record = self.record;
        if record.is_none_or(|r| r.consecutive_failures == 0) {
            let since = timestamp(record.and_then(|r| r.failing_since).unwrap_or(self.now));
            // A new run: the ledger counts it when it records this check.
            let run = record.map_or(0, |r| r.failure_runs) + 1;
            let mut e = self.event(failed_event_id(&self.watch.name, &since, run), EventType::CheckFailed);
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
        Decided { commit, outcome: CheckOutcome::Failed(err), metadata: None }
    }

    /// The first pin of a watch: `builder.pinned` for a builder, the planned gitops commits.
    fn pinned(
        &self,
        mut commit: CheckRecord,
        observation: Observation,
        metadata: Option<Box<PinnedMetadata>>,
        planned: Planned,
    ) -> Decided {
        let digest = observation.digest.clone();
        let current = Pin {
            digest: digest.clone(),
            reference: self.watch.image.pinned(&digest),
            platforms: observation.platforms.clone(),
        };
        commit.pin = Some(self.pin_update(observation, metadata.as_deref().cloned().map(PinMetadata::from)));
        if self.watch.kind == WatchKind::Builder {
            let mut e = self.event(
                event::stable_id(&[&self.watch.name, EventType::BuilderPinned.as_str(), &digest]),
                EventType::BuilderPinned,
            );
            e.current = Some(current);
            commit.events.push(e);
        }
        commit.actions = planned.actions;
        Decided { commit, outcome: CheckOutcome::Pinned { digest }, metadata }
    }

    /// A move: its change event (with the images' planned actions), the roll-out's events, its
    /// change record and actions.
    fn moved(&self, mut commit: CheckRecord, mv: Move, planned: Planned) -> Decided {
        let Move { id, seq, event_type, change, previous, current, media_type, metadata, rollback } = mv;
        commit.pin = Some(PinUpdate {
            digest: current.digest.clone(),
            reference: current.reference.clone(),
            media_type,
            platforms: current.platforms.clone(),
            metadata: metadata.as_deref().cloned().map(PinMetadata::from),
        });
        let mut e = self.event(id.clone(), event_type);
        e.previous = Some(pin_of(&previous));
        e.current = Some(current.clone());
        e.change = Some(change.clone());
        e.rollback = Some(rollback);
        e.images = Some(
            planned
                .decisions
                .iter()
                .filter_map(|d| d.action.map(|a| ImageAction { name: d.image.clone(), action: a.as_str().into() }))
                .collect(),
        );
        commit.events.push(e);
        if let Some(subject) = self.subjects.first() {
            let (subjects, now) = (self.subjects, self.now);
            let awaiting = planned.awaiting_approval();
            commit.events.extend(crate::rollout::awaiting_approval_event(&id, subject, subjects, awaiting, now));
            let all = planned.all_actions();
            commit.events.extend(crate::rollout::expedited_event(&id, subject, subjects, all, &planned.expedite, now));
        }
        commit.actions = planned.actions;
        commit.change = Some(ChangeRecord {
            id: id.clone(),
            watch: self.watch.name.clone(),
            seq,
            previous: previous.digest.clone(),
            current: current.digest.clone(),
            previous_reference: previous.reference.clone(),
            current_reference: current.reference.clone(),
            change: change.clone(),
            rollback,
            detected: self.now,
        });
        let outcome =
            CheckOutcome::Changed { id, previous: previous.digest, current: current.digest, change: Box::new(change) };
        Decided { commit, outcome, metadata }
    }
}

#[cfg(test)]
mod tests;
