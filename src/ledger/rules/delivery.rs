//! A delivery's attempt ([`Outbox::update_delivery`](crate::ledger::Outbox::update_delivery)):
//! one more attempt, and sent, due again at a later time (the dispatcher's backoff), or dead (the
//! dispatcher gave up), with the attempt's status. Only a pending delivery moves.
//!
//! Who does what: Kubernetes applies [`attempted`] to the pending row in the entry of its event.
//! SQLite writes [`Attempted`]'s state, next attempt and status in one UPDATE of the pending row,
//! counting the attempt there (`attempts + 1`), without reading it first.

use chrono::{DateTime, SubsecRound, Utc};

use crate::ledger::{DeliveryState, DeliveryUpdate};

/// What an attempt writes on a pending delivery (besides one more attempt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::ledger) struct Attempted {
    pub state: DeliveryState,
    /// When it is due again, kept to the millisecond; none: the row keeps its own.
    pub next_attempt: Option<DateTime<Utc>>,
    pub last_status: String,
    /// Kept to the millisecond.
    pub updated: DateTime<Utc>,
}

/// The change set of an attempt that ended at `now` with `update`.
pub(in crate::ledger) fn attempted(update: &DeliveryUpdate, now: DateTime<Utc>) -> Attempted {
    let (state, next_attempt, status) = match update {
        DeliveryUpdate::Sent { status } => (DeliveryState::Sent, None, status),
        DeliveryUpdate::Retry { next_attempt, status } => {
            (DeliveryState::Pending, Some(next_attempt.trunc_subsecs(3)), status)
        }
        DeliveryUpdate::Dead { status } => (DeliveryState::Dead, None, status),
    };
    Attempted { state, next_attempt, last_status: status.clone(), updated: now.trunc_subsecs(3) }
}

#[cfg(test)]
mod tests {
    use super::super::tests::at;
    use super::*;

    #[test]
    fn an_attempt_sends_retries_or_gives_up_with_its_status() {
        let now = at("09:00:00.1239");
        let cases = [
            (DeliveryUpdate::Sent { status: "HTTP 200".into() }, DeliveryState::Sent, None),
            (
                DeliveryUpdate::Retry { next_attempt: at("09:01:00.9999"), status: "HTTP 503".into() },
                DeliveryState::Pending,
                Some(at("09:01:00.999")),
            ),
            (DeliveryUpdate::Dead { status: "HTTP 400".into() }, DeliveryState::Dead, None),
        ];
        for (update, state, next) in cases {
            let a = attempted(&update, now);
            assert_eq!((a.state, a.next_attempt, a.updated), (state, next, at("09:00:00.123")), "{update:?}");
            assert!(a.last_status.starts_with("HTTP "));
        }
    }
}
