//! An attempt's end ([`Actions::finish_action`](crate::ledger::Actions::finish_action)): what its
//! running row becomes — succeeded, skipped, failed, pending again for a retry, or superseded when
//! a newer change has an action for its image — with which detail and next attempt, and whether
//! the actions that follow a success are recorded.
//!
//! Who does what: each backend finds the newer change when [`asks_newer`] says to (Kubernetes over
//! every entry's rows, by creation; SQLite in SQL, by insertion order: see `supersede`), reads
//! whether the row is running, and writes the [`Finish`] in its one write with the end's events,
//! tag move and holds.

use chrono::{DateTime, SubsecRound, Utc};

use super::supersede::superseded_by;
use crate::ledger::{ActionEnd, ActionOutcome, ActionState};

/// What an attempt's end writes on its row (`running` until now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::ledger) struct Ended {
    pub state: ActionState,
    /// The attempt's detail; a superseded one's says by which change first.
    pub detail: String,
    /// A retry's next attempt, kept to the millisecond; none: the row keeps its own.
    pub next_attempt: Option<DateTime<Utc>>,
    pub output_tail: String,
    /// Kept to the millisecond.
    pub updated: DateTime<Utc>,
    /// It holds its image from now on (otherwise the row keeps what it had).
    pub holds: bool,
}

/// An attempt's end as a change set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::ledger) struct Finish {
    /// What its row becomes; none when it was not running (nothing on it is written, the end's
    /// events and tag move still are).
    pub row: Option<Ended>,
    /// Record the actions that follow (released with it when it is released): it succeeded, has
    /// some, and no newer change has an action for its image.
    pub follow: bool,
    /// Close its tag intent: the attempt's writes are recorded in the same write (kept open when
    /// the attempt could not tell whether its tag write landed).
    pub close_intent: bool,
}

/// Whether the end must know the newer change of its image first: a retry re-checks (it ends
/// superseded instead), and a success's followers are recorded only when there is none.
pub(in crate::ledger) fn asks_newer(outcome: &ActionOutcome, follows: bool) -> bool {
    match outcome {
        ActionOutcome::Retry { .. } => true,
        ActionOutcome::Succeeded => follows,
        _ => false,
    }
}

/// The change set of `end` on a row that is `running` (or not), `newer` the change of the newest
/// action of another change for its image, when [`asks_newer`] said to look for one.
pub(in crate::ledger) fn finish(end: &ActionEnd<'_>, running: bool, newer: Option<&str>) -> Finish {
    let row = running.then(|| ended(end, newer));
    let follow =
        !end.follow.is_empty() && newer.is_none() && row.as_ref().is_some_and(|r| r.state == ActionState::Succeeded);
    Finish { row, follow, close_intent: !end.keep_intent }
}

fn ended(end: &ActionEnd<'_>, newer: Option<&str>) -> Ended {
    let superseded = match &end.outcome {
        ActionOutcome::Retry { .. } => newer,
        ActionOutcome::Superseded { by } => Some(by.as_str()),
        _ => None,
    };
    let (state, next_attempt) = match (&end.outcome, superseded) {
        (_, Some(_)) => (ActionState::Superseded, None),
        (ActionOutcome::Succeeded, None) => (ActionState::Succeeded, None),
        (ActionOutcome::Skipped, None) => (ActionState::Skipped, None),
        (ActionOutcome::Retry { next_attempt }, None) => (ActionState::Pending, Some(next_attempt.trunc_subsecs(3))),
        (_, None) => (ActionState::Failed, None),
    };
    let detail = match superseded {
        Some(by) => format!("{}: {}", superseded_by(by), end.detail),
        None => end.detail.clone(),
    };
    Ended {
        state,
        detail,
        next_attempt,
        output_tail: end.output_tail.clone(),
        updated: end.now.trunc_subsecs(3),
        holds: end.hold_image,
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::at;
    use super::*;
    use crate::ledger::NewAction;
    use ActionOutcome as O;
    use ActionState::*;

    fn end(outcome: ActionOutcome) -> ActionEnd<'static> {
        ActionEnd {
            key: "k",
            outcome,
            detail: "exit 1".into(),
            output_tail: "tail".into(),
            watch: "b",
            events: Vec::new(),
            deliveries: Vec::new(),
            history: 10,
            now: at("09:00:00.1239"),
            tag_move: None,
            hold: None,
            keep_intent: false,
            follow: Vec::new(),
            hold_image: false,
        }
    }

    fn retry() -> ActionOutcome {
        O::Retry { next_attempt: at("09:05:00.4567") }
    }

    /// Each outcome, with and without a newer change: the state, detail and next attempt written.
    #[test]
    fn an_end_writes_its_state_detail_and_next_attempt() {
        let superseded = |by: &str| O::Superseded { by: by.into() };
        let cases = [
            (O::Succeeded, None::<&str>, Succeeded, "exit 1", None::<DateTime<Utc>>),
            (O::Succeeded, Some("c9"), Succeeded, "exit 1", None),
            (O::Skipped, None, Skipped, "exit 1", None),
            (O::Skipped, Some("c9"), Skipped, "exit 1", None),
            (O::Failed, None, Failed, "exit 1", None),
            (O::Failed, Some("c9"), Failed, "exit 1", None),
            (retry(), None, Pending, "exit 1", Some(at("09:05:00.456"))),
            (retry(), Some("c9"), Superseded, "superseded by change c9: exit 1", None),
            (superseded("c2"), None, Superseded, "superseded by change c2: exit 1", None),
            (superseded("c2"), Some("c9"), Superseded, "superseded by change c2: exit 1", None),
        ];
        for (outcome, newer, state, detail, next) in cases {
            let what = format!("{outcome:?} (newer {newer:?})");
            let row = finish(&end(outcome), true, newer).row.expect("a running row ends");
            assert_eq!((row.state, row.detail.as_str(), row.next_attempt), (state, detail, next), "{what}");
            assert_eq!((row.output_tail.as_str(), row.updated, row.holds), ("tail", at("09:00:00.123"), false));
        }
    }

    #[test]
    fn only_a_retry_and_a_success_with_followers_ask_for_the_newer_change() {
        let cases = [
            (retry(), false, true),
            (retry(), true, true),
            (O::Succeeded, true, true),
            (O::Succeeded, false, false),
            (O::Failed, true, false),
            (O::Skipped, true, false),
            (O::Superseded { by: "c2".into() }, true, false),
        ];
        for (outcome, follows, expected) in cases {
            assert_eq!(asks_newer(&outcome, follows), expected, "{outcome:?} follows {follows}");
        }
    }

    /// Followers are recorded after a success of a running row with no newer change only.
    #[test]
    fn followers_come_after_a_success_that_nothing_newer_supersedes() {
        let follower = NewAction::new(
            "d".into(),
            "c1".into(),
            "app".into(),
            builder_monitor_core::plan::ActionKind::Deploy,
            super::super::tests::target(),
        );
        let with = |outcome| ActionEnd { follow: vec![follower.clone()], ..end(outcome) };
        let cases = [
            (with(O::Succeeded), true, None, true),
            (with(O::Succeeded), true, Some("c9"), false),
            (with(O::Succeeded), false, None, false),
            (with(O::Failed), true, None, false),
            (end(O::Succeeded), true, None, false),
        ];
        for (n, (end, running, newer, expected)) in cases.into_iter().enumerate() {
            assert_eq!(finish(&end, running, newer).follow, expected, "case {n}");
        }
    }

    #[test]
    fn a_row_not_running_is_left_and_the_intent_closes_unless_kept() {
        let done = finish(&end(O::Failed), false, None);
        assert_eq!(done, Finish { row: None, follow: false, close_intent: true });
        let kept = finish(&ActionEnd { keep_intent: true, hold_image: true, ..end(O::Failed) }, true, None);
        assert!(!kept.close_intent);
        assert!(kept.row.unwrap().holds);
    }
}
