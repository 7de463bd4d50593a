//! The check's state machine, case by case, in memory.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::ledger::{CheckFailure, HeldDigest, WatchKind};
use builder_monitor_core::cnb::ChangeKind;
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::schedule::{Schedule, parse_timestamp};

const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const C: &str = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";
const T0: &str = "2026-11-30T12:00:00Z";
const T1: &str = "2026-11-30T12:10:00Z";

fn at(text: &str) -> DateTime<Utc> {
    parse_timestamp(text).unwrap()
}

fn held(digest: &str, since: &str) -> Option<HeldDigest> {
    Some(HeldDigest { digest: digest.into(), since: at(since) })
}

fn watch(kind: WatchKind) -> Watch {
    let (name, image) = match kind {
        WatchKind::Builder => ("jammy", "registry.example.com/cnb/builder:latest"),
        WatchKind::RunImage => ("run:registry.example.com/cnb/run:latest", "registry.example.com/cnb/run:latest"),
    };
    Watch {
        name: name.into(),
        kind,
        image: ImageRef::parse(image).unwrap(),
        schedule: Schedule::Interval(Duration::from_secs(300)),
        jitter: Duration::ZERO,
        platforms: None,
        settle: None,
    }
}

fn subjects() -> Vec<Subject> {
    vec![Subject { name: "jammy".into(), image: "registry.example.com/cnb/builder:latest".into() }]
}

fn platforms(amd64: &str, arm64: &str) -> BTreeMap<String, String> {
    [("linux/amd64".to_string(), amd64.to_string()), ("linux/arm64".to_string(), arm64.to_string())].into()
}

/// The ledger's entry for a watch pinned to `digest`.
fn pinned(w: &Watch, digest: &str) -> WatchRecord {
    WatchRecord {
        name: w.name.clone(),
        kind: w.kind,
        image: w.image.to_string(),
        pin: Some(PinRecord {
            digest: digest.into(),
            reference: w.image.pinned(digest),
            media_type: "application/vnd.oci.image.index.v1+json".into(),
            platforms: platforms("sha256:amd64-1", "sha256:arm64-1"),
            since: at(T0),
        }),
        metadata: Some(PinnedMetadata::default().into()),
        first_seen: at(T0),
        last_check: Some(at(T0)),
        last_ok: Some(true),
        last_error_reason: None,
        last_error: None,
        last_change: None,
        consecutive_failures: 0,
        failing_since: None,
        pending: None,
        moves: 2,
        failure_runs: 0,
    }
}

fn moved(digest: &str, rollback: bool) -> Observed {
    Observed::Moved {
        observation: Observation {
            digest: digest.into(),
            media_type: "application/vnd.oci.image.index.v1+json".into(),
            platforms: platforms("sha256:amd64-2", "sha256:arm64-2"),
            single_config: None,
            single_layers: Vec::new(),
            notes: Vec::new(),
        },
        metadata: None,
        rollback,
    }
}

fn unavailable() -> RegistryError {
    RegistryError::Unavailable { registry: "registry.example.com".into(), detail: "connection refused".into() }
}

/// A check decided as the monitor decides it, for a move without any app image to act on.
fn decide(
    w: &Watch,
    subjects: &[Subject],
    record: Option<&WatchRecord>,
    observed: Result<Observed, RegistryError>,
    now: DateTime<Utc>,
) -> Decided {
    super::decide(w, subjects, record, found(w, record, observed), Planned::default(), now, 10)
}

fn types(d: &Decided) -> Vec<EventType> {
    d.commit.events.iter().map(|e| e.event_type).collect()
}

#[test]
fn first_sight_pins_and_announces_the_pin() {
    let w = watch(WatchKind::Builder);
    let d = decide(&w, &subjects(), None, Ok(moved(A, false)), at(T1));
    assert!(matches!(&d.outcome, CheckOutcome::Pinned { digest } if digest == A));
    let pin = d.commit.pin.as_ref().unwrap();
    assert_eq!((pin.digest.as_str(), pin.reference.as_str()), (A, w.image.pinned(A).as_str()));
    assert_eq!(types(&d), [EventType::BuilderPinned]);
    assert_eq!(d.commit.events[0].current.as_ref().unwrap().digest, A);
    assert!(d.commit.change.is_none() && d.commit.outcome.is_ok());
    assert_eq!(d.commit.time, at(T1));
}

#[test]
fn a_run_image_is_pinned_without_an_event() {
    let w = watch(WatchKind::RunImage);
    let d = decide(&w, &subjects(), None, Ok(moved(A, false)), at(T1));
    assert!(matches!(d.outcome, CheckOutcome::Pinned { .. }));
    assert!(d.commit.events.is_empty() && d.commit.pin.is_some());
}

#[test]
fn an_unchanged_tag_records_only_the_check() {
    let w = watch(WatchKind::Builder);
    let mut record = pinned(&w, A);
    record.pending = held(B, T0);
    let d = decide(&w, &subjects(), Some(&record), Ok(Observed::Unchanged), at(T1));
    assert!(matches!(d.outcome, CheckOutcome::Unchanged));
    assert!(d.commit.pin.is_none() && d.commit.change.is_none() && d.commit.events.is_empty());
    assert_eq!(d.commit.pending, None, "back on the pin: a held digest is forgotten");
}

#[test]
fn a_move_is_a_change_with_the_next_sequence_number() {
    let w = watch(WatchKind::Builder);
    let record = pinned(&w, A);
    let d = decide(&w, &subjects(), Some(&record), Ok(moved(B, false)), at(T1));
    let id = event::change_id("jammy", 3, A, B);
    assert!(
        matches!(&d.outcome, CheckOutcome::Changed { id: i, previous, current, .. } if *i == id && previous == A && current == B)
    );
    let change = d.commit.change.as_ref().unwrap();
    assert_eq!((change.seq, change.previous.as_str(), change.current.as_str()), (3, A, B));
    assert!(!change.rollback);
    assert_eq!(change.change.kind, ChangeKind::Unknown, "no metadata on either side");
    assert_eq!(types(&d), [EventType::BuilderChanged]);
    let e = &d.commit.events[0];
    assert_eq!((e.id.as_str(), e.rollback, e.images.as_deref()), (id.as_str(), Some(false), Some(&[][..])));
    assert_eq!(e.previous.as_ref().unwrap().digest, A);
    assert_eq!(d.commit.pin.as_ref().unwrap().digest, B);
}

#[test]
fn a_run_image_move_concerns_the_builders_naming_it() {
    let w = watch(WatchKind::RunImage);
    let record = pinned(&w, A);
    let d = decide(&w, &subjects(), Some(&record), Ok(moved(B, false)), at(T1));
    assert!(matches!(d.outcome, CheckOutcome::Changed { .. }));
    let e = &d.commit.events[0];
    assert_eq!(e.event_type, EventType::RunImageChanged);
    assert_eq!((e.builder.name.as_str(), e.builders.len()), ("jammy", 1));
    assert_eq!(e.run_image.as_deref(), Some("registry.example.com/cnb/run:latest"));
    let change = &d.commit.change.as_ref().unwrap().change;
    assert_eq!(change.run_image.as_ref().unwrap().to.as_deref(), Some(w.image.pinned(B).as_str()));
}

#[test]
fn a_return_to_an_earlier_digest_is_a_rollback_with_a_new_id() {
    let w = watch(WatchKind::Builder);
    let mut record = pinned(&w, B);
    record.moves = 3;
    let d = decide(&w, &subjects(), Some(&record), Ok(moved(A, true)), at(T1));
    let change = d.commit.change.as_ref().unwrap();
    assert!(change.rollback);
    assert_eq!(change.id, event::change_id("jammy", 4, B, A));
    assert_ne!(change.id, event::change_id("jammy", 3, A, B));
    assert_eq!(d.commit.events[0].rollback, Some(true));
}

#[test]
fn settle_holds_a_new_digest_keeps_its_start_and_restarts_when_the_tag_moves_on() {
    let w = watch(WatchKind::Builder);
    let mut record = pinned(&w, A);
    // Settling: first sight of B.
    let d = decide(&w, &subjects(), Some(&record), Ok(Observed::Head { digest: B.into() }), at(T0));
    assert!(matches!(&d.outcome, CheckOutcome::Held { digest } if digest == B));
    assert_eq!(d.commit.pending, held(B, T0));
    assert!(d.commit.pin.is_none() && d.commit.events.is_empty() && d.commit.change.is_none());
    // Held: B again, still counted from its first sight.
    record.pending = d.commit.pending.clone();
    let d = decide(&w, &subjects(), Some(&record), Ok(Observed::Head { digest: B.into() }), at(T1));
    assert_eq!(d.commit.pending, held(B, T0));
    // Reset: the tag moved on to C; its clock starts now.
    let d = decide(&w, &subjects(), Some(&record), Ok(Observed::Head { digest: C.into() }), at(T1));
    assert_eq!(d.commit.pending, held(C, T1));
    // Settled: observe inspected it, so it is a move and the pending digest is cleared.
    let d = decide(&w, &subjects(), Some(&record), Ok(moved(B, false)), at(T1));
    assert!(matches!(d.outcome, CheckOutcome::Changed { .. }));
    assert_eq!(d.commit.pending, None);
}

#[test]
fn settle_decides_what_observe_inspects() {
    let mut w = watch(WatchKind::Builder);
    w.settle = Some(Duration::from_secs(1800));
    let mut record = pinned(&w, A);
    assert!(!holds(&w, None, B, at(T0)), "nothing to hold against before the first pin");
    assert!(holds(&w, Some(&record), B, at(T0)));
    record.pending = held(B, T0);
    assert!(holds(&w, Some(&record), B, at("2026-11-30T12:29:59Z")));
    assert!(!holds(&w, Some(&record), B, at("2026-11-30T12:30:00Z")));
    assert!(holds(&w, Some(&record), C, at("2026-11-30T12:30:00Z")), "another digest starts over");
    w.settle = None;
    assert!(!holds(&w, Some(&record), C, at(T0)));
}

#[test]
fn an_index_move_that_leaves_the_watched_platforms_advances_the_pin_without_a_change() {
    let mut w = watch(WatchKind::Builder);
    w.platforms = Some(vec![crate::config::Platform::parse("linux/amd64").unwrap()]);
    let record = pinned(&w, A);
    let only_arm64 = Observed::Moved {
        observation: Observation {
            digest: B.into(),
            media_type: "application/vnd.oci.image.index.v1+json".into(),
            platforms: platforms("sha256:amd64-1", "sha256:arm64-2"),
            single_config: None,
            single_layers: Vec::new(),
            notes: Vec::new(),
        },
        metadata: None,
        rollback: false,
    };
    let d = decide(&w, &subjects(), Some(&record), Ok(only_arm64), at(T1));
    assert!(matches!(&d.outcome, CheckOutcome::PlatformsUnchanged { digest } if digest == B));
    let pin = d.commit.pin.as_ref().unwrap();
    assert_eq!(pin.digest, B);
    assert_eq!(pin.metadata, record.metadata, "the pin keeps its metadata");
    assert!(d.commit.change.is_none() && d.commit.events.is_empty());
    // The watched platform moving is a change.
    let d = decide(&w, &subjects(), Some(&record), Ok(moved(B, false)), at(T1));
    assert!(matches!(d.outcome, CheckOutcome::Changed { .. }));
}

#[test]
fn the_first_failure_is_an_event_and_later_ones_of_the_streak_are_not() {
    let w = watch(WatchKind::Builder);
    let mut record = pinned(&w, A);
    record.pending = held(B, T0);
    let d = decide(&w, &subjects(), Some(&record), Err(unavailable()), at(T1));
    assert!(matches!(d.outcome, CheckOutcome::Failed(RegistryError::Unavailable { .. })));
    assert_eq!(
        d.commit.outcome,
        Err(CheckFailure { reason: "registry_unavailable".into(), message: unavailable().to_string() })
    );
    assert!(d.commit.pin.is_none() && d.commit.change.is_none());
    assert_eq!(d.commit.pending, record.pending, "a failure keeps a held digest");
    assert_eq!(types(&d), [EventType::CheckFailed]);
    let e = &d.commit.events[0];
    assert_eq!(e.id, failed_event_id("jammy", T1, 1), "the watch's first run of failures");
    let error = e.error.as_ref().unwrap();
    assert_eq!((error.consecutive_failures, error.since.as_str()), (1, T1));
    assert_eq!(e.current.as_ref().unwrap().digest, A, "the pin is kept");

    record.consecutive_failures = 2;
    record.failing_since = Some(at(T0));
    let d = decide(&w, &subjects(), Some(&record), Err(unavailable()), at(T1));
    assert!(matches!(d.outcome, CheckOutcome::Failed(_)));
    assert!(d.commit.events.is_empty(), "one event per streak");
    assert!(d.commit.outcome.is_err());
}

#[test]
fn a_success_after_failures_is_a_recovery() {
    let w = watch(WatchKind::Builder);
    let mut record = pinned(&w, A);
    record.consecutive_failures = 3;
    record.failing_since = Some(at(T0));
    record.last_error_reason = Some("registry_unavailable".into());
    record.last_error = Some("connection refused".into());
    let d = decide(&w, &subjects(), Some(&record), Ok(Observed::Unchanged), at(T1));
    assert!(matches!(d.outcome, CheckOutcome::Unchanged));
    assert_eq!(types(&d), [EventType::CheckRecovered]);
    let e = &d.commit.events[0];
    assert_eq!(e.id, event::stable_id(&["jammy", EventType::CheckRecovered.as_str(), T0]));
    let error = e.error.as_ref().unwrap();
    assert_eq!(
        (error.consecutive_failures, error.reason.as_str(), error.since.as_str()),
        (3, "registry_unavailable", T0)
    );
    // Recovering onto a move records both.
    let d = decide(&w, &subjects(), Some(&record), Ok(moved(B, false)), at(T1));
    assert_eq!(types(&d), [EventType::CheckRecovered, EventType::BuilderChanged]);
}

#[test]
fn a_move_lists_the_actions_its_reaction_planned_in_its_one_event() {
    use builder_monitor_core::plan::{ActionKind, Decision};
    let w = watch(WatchKind::Builder);
    let record = pinned(&w, A);
    let planned = Planned {
        decisions: vec![
            Decision { image: "petclinic".into(), action: Some(ActionKind::Rebase), why: "run image moved".into() },
            Decision { image: "manual".into(), action: None, why: "policy is manual".into() },
        ],
        actions: Vec::new(),
        ..Default::default()
    };
    let found = found(&w, Some(&record), Ok(moved(B, false)));
    assert!(matches!(&found, Found::Moved(m) if m.seq == 3 && m.current.digest == B));
    let d = super::decide(&w, &subjects(), Some(&record), found, planned, at(T1), 10);
    assert_eq!(types(&d), [EventType::BuilderChanged], "no approval to wait for");
    let images = d.commit.events[0].images.as_deref().unwrap();
    assert_eq!(images.len(), 1);
    assert_eq!((images[0].name.as_str(), images[0].action.as_str()), ("petclinic", "rebase"));
    assert_eq!(d.commit.history, 10);
}
