//! An action's arrival ([`Actions::record_actions`](crate::ledger::Actions::record_actions), a
//! check's commit): the state it is recorded in and what it carries over from its change as the
//! change's first actions left it — released, or held by a lower wave's failure — so an action
//! planned in a later batch starts as the first ones would have. (What yields to it is
//! `supersede`'s; when a batched one is due is `NewAction::arrival`.)
//!
//! Who does what: Kubernetes reads the change's rows in the entry it writes ([`ChangeSoFar::of`]);
//! SQLite asks its transaction whether any row of the change is released and, when none is, for
//! the first failed row of a lower wave (`ORDER BY wave, image LIMIT 1`), once per change.

use super::ActionFacts;
use super::hold::held_on_arrival;
use crate::ledger::{ActionState, NewAction};

/// What an arriving action reads of its change's rows recorded so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(in crate::ledger) struct ChangeSoFar {
    /// `release` let the change go (any of its rows is marked released).
    pub released: bool,
    /// Its failed actions, `(wave, image)` (a backend may give only the first of the lower waves).
    pub failed: Vec<(u32, String)>,
}

impl ChangeSoFar {
    /// From every row of the change.
    pub fn of<'a, R: ActionFacts + 'a>(rows: impl IntoIterator<Item = &'a R>) -> Self {
        let mut change = ChangeSoFar::default();
        for r in rows {
            change.released |= r.released();
            if r.state() == ActionState::Failed {
                change.failed.push((r.wave(), r.image().to_string()));
            }
        }
        change
    }
}

/// What an action is recorded with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::ledger) struct Arrival {
    /// `held` when a lower wave of its change failed, else waiting for a person or pending.
    pub state: ActionState,
    /// Why it is held (`held: wave 1 petclinic failed`).
    pub detail: Option<String>,
    /// Released with its change.
    pub released: bool,
}

/// How `a` arrives in `change`: a released change holds nothing.
pub(in crate::ledger) fn arrive(a: &NewAction, change: &ChangeSoFar) -> Arrival {
    let held = if change.released {
        None
    } else {
        held_on_arrival(change.failed.iter().map(|(w, i)| (*w, i.as_str())), a.wave)
    };
    Arrival { state: a.arrival_state(held.is_some()), detail: held, released: change.released }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{row, target};
    use super::*;
    use crate::ledger::ActionRecord;
    use ActionState::*;
    use builder_monitor_core::plan::ActionKind;
    use builder_monitor_core::rollout::failure_reason;

    fn arriving(wave: u32, needs_approval: bool) -> NewAction {
        NewAction::new("k".into(), "c1".into(), "app".into(), ActionKind::Rebuild, target()).gated(wave, needs_approval)
    }

    #[test]
    fn an_arrival_takes_its_changes_hold_or_release() {
        let failed_canary = ActionRecord { wave: 1, ..row("canary", "c1", "web", Failed) };
        let done = ActionRecord { wave: 1, ..row("other", "c1", "api", Succeeded) };
        let held = ChangeSoFar::of([&failed_canary, &done]);
        assert_eq!(held, ChangeSoFar { released: false, failed: vec![(1, "web".into())] });
        let released = ChangeSoFar::of([&ActionRecord { released: true, ..failed_canary.clone() }]);
        let reason = Some(format!("held: {}", failure_reason(1, "web")));
        let cases = [
            (arriving(2, false), &held, Held, reason.clone(), false),
            (arriving(2, true), &held, Held, reason, false),
            (arriving(1, false), &held, Pending, None, false),
            (arriving(1, true), &held, AwaitingApproval, None, false),
            (arriving(2, false), &released, Pending, None, true),
            (arriving(2, true), &released, AwaitingApproval, None, true),
            (arriving(2, false), &ChangeSoFar::default(), Pending, None, false),
        ];
        for (n, (a, change, state, detail, released)) in cases.into_iter().enumerate() {
            assert_eq!(arrive(&a, change), Arrival { state, detail, released }, "case {n}");
        }
    }
}
