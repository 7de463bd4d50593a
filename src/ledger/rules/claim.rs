//! Taking actions on ([`Actions::claim_actions`](crate::ledger::Actions::claim_actions)) and
//! handing them back: which gated pending actions a claim takes ([`due_keys`]), what taking one
//! writes ([`take`]), and what a requeue writes ([`requeue`]).
//!
//! Who does what: Kubernetes gates every entry's rows, takes [`due_keys`], and takes each in its
//! entry's write after gating the change's rows there again. SQLite gates in its transaction —
//! by [`due_keys`] over the whole picture, or, when the roll-out lets it, by walking the pending
//! actions in claim order in SQL (`sqlite/claims.rs`), which reads what it takes and not every
//! row of a fleet — then reads each taken row and writes [`take`]'s change set. A requeue is
//! [`requeue`] on each row for Kubernetes, one UPDATE of every running row (to `pending`) for
//! SQLite.

use chrono::{DateTime, SubsecRound, Utc};

use crate::ledger::ActionState;
use crate::ledger::actions::Gated;

/// What taking a pending action on writes on its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::ledger) struct Taken {
    /// `running`.
    pub state: ActionState,
    /// One more than it had: this attempt's number (1 for the first).
    pub attempts: u32,
    /// Kept to the millisecond.
    pub updated: DateTime<Utc>,
    // Its process group is forgotten: the new attempt's command records its own.
}

/// The keys a claim at `now` takes of `gated` (soonest due first): those the gates let start and
/// that are due, at most `limit`.
pub(in crate::ledger) fn due_keys(gated: Vec<Gated>, now: DateTime<Utc>, limit: usize) -> Vec<String> {
    gated.into_iter().filter(|g| g.verdict.is_ok() && g.due <= now).take(limit).map(|g| g.key).collect()
}

/// Taking on, at `now`, a pending action tried `attempts` times so far.
pub(in crate::ledger) fn take(attempts: u32, now: DateTime<Utc>) -> Taken {
    Taken { state: ActionState::Running, attempts: attempts + 1, updated: now.trunc_subsecs(3) }
}

/// The state a requeue leaves an action in `state` in: a running one goes back to `pending`, its
/// attempt still counted; any other stays as it is (none).
pub(in crate::ledger) fn requeue(state: ActionState) -> Option<ActionState> {
    (state == ActionState::Running).then_some(ActionState::Pending)
}

#[cfg(test)]
mod tests {
    use super::super::tests::at;
    use super::*;
    use builder_monitor_core::rollout::Wait;

    fn gated(key: &str, due: &str, open: bool) -> Gated {
        let verdict = if open { Ok(()) } else { Err(Wait::InFlight { max: 1 }) };
        Gated { key: key.into(), due: at(due), verdict }
    }

    #[test]
    fn a_claim_takes_the_due_ones_the_gates_let_start_up_to_its_limit() {
        let all = || {
            vec![
                gated("a", "08:00:00", true),
                gated("shut", "08:30:00", false),
                gated("b", "09:00:00", true),
                gated("later", "10:00:00", true),
            ]
        };
        let cases = [(10, vec!["a", "b"]), (1, vec!["a"]), (0, vec![])];
        for (limit, expected) in cases {
            assert_eq!(due_keys(all(), at("09:00:00"), limit), expected, "limit {limit}");
        }
    }

    #[test]
    fn taking_an_action_on_counts_an_attempt_and_a_requeue_keeps_it() {
        let taken = take(2, at("09:00:00.4567"));
        assert_eq!(taken, Taken { state: ActionState::Running, attempts: 3, updated: at("09:00:00.456") });
        for state in ActionState::ALL {
            let expected = (state == ActionState::Running).then_some(ActionState::Pending);
            assert_eq!(requeue(state), expected, "{state}");
        }
    }
}
