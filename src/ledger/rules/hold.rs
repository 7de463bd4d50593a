//! Holds: a failed or overridden deploy holding its image ([`hold_image`]), a lower wave's failure
//! holding its change's later waves ([`HOLDABLE`], [`held_on_arrival`]).
//!
//! Who does what: Kubernetes applies them to the rows of the entry that holds the change. SQLite
//! reads the one row an image hold marks; it holds later waves by key with `state IN`
//! [`HOLDABLE`] in SQL, and selects the first failed lower wave of an arriving action's change in
//! SQL (`ORDER BY wave, image LIMIT 1`) for [`held_on_arrival`] to word.

use chrono::{DateTime, SubsecRound, Utc};

use super::ActionFacts;
use builder_monitor_core::rollout::{ActionState, failure_reason};

/// The states a lower wave's failure holds an action in (to `held`); any other stays as it is.
pub(in crate::ledger) const HOLDABLE: [ActionState; 2] = [ActionState::Pending, ActionState::AwaitingApproval];

/// Whether a lower wave's failure holds an action in `state`.
pub(in crate::ledger) fn holdable(state: ActionState) -> bool {
    HOLDABLE.contains(&state)
}

/// What marking an action as holding its image writes on its row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::ledger) struct ImageHeld {
    /// Why (`status` shows it).
    pub detail: String,
    /// Kept to the millisecond.
    pub updated: DateTime<Utc>,
}

/// A finished action found holding its image (a failed or overridden deploy) at `now`: none when it
/// was released (a release lets its image go for good).
pub(in crate::ledger) fn hold_image(row: &impl ActionFacts, detail: &str, now: DateTime<Utc>) -> Option<ImageHeld> {
    (!row.released()).then(|| ImageHeld { detail: detail.to_string(), updated: now.trunc_subsecs(3) })
}

/// The hold an action arriving in `wave` finds on its change: the first of the change's failed
/// actions (`(wave, image)`) in a lower wave, by wave then image (`held: wave 1 petclinic
/// failed`); none when none failed below it. A released change holds nothing (the caller asks
/// only of one that is not).
pub(in crate::ledger) fn held_on_arrival<'a>(
    failed: impl IntoIterator<Item = (u32, &'a str)>,
    wave: u32,
) -> Option<String> {
    failed.into_iter().filter(|(w, _)| *w < wave).min().map(|(w, image)| format!("held: {}", failure_reason(w, image)))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{at, row};
    use super::*;
    use ActionState::*;

    #[test]
    fn a_lower_waves_failure_holds_only_what_has_not_started() {
        for (state, expected) in [
            (Pending, true),
            (AwaitingApproval, true),
            (Held, false),
            (Running, false),
            (Succeeded, false),
            (Failed, false),
            (Rejected, false),
        ] {
            assert_eq!(holdable(state), expected, "{state}");
        }
    }

    #[test]
    fn an_image_hold_is_marked_unless_released() {
        let deploy = row("k", "c1", "app", Failed);
        let held = hold_image(&deploy, "overridden", at("09:00:00.1234")).unwrap();
        assert_eq!(held, ImageHeld { detail: "overridden".into(), updated: at("09:00:00.123") });
        let released = crate::ledger::ActionRecord { released: true, ..deploy };
        assert_eq!(hold_image(&released, "overridden", at("09:00:00")), None);
    }

    #[test]
    fn an_arrival_is_held_by_the_first_failed_lower_wave() {
        let failed = [(2, "zeta"), (1, "web"), (1, "api"), (3, "low")];
        let cases = [
            (3, Some(format!("held: {}", failure_reason(1, "api")))),
            (2, Some(format!("held: {}", failure_reason(1, "api")))),
            (1, None),
            (0, None),
        ];
        for (wave, expected) in cases {
            assert_eq!(held_on_arrival(failed, wave), expected, "wave {wave}");
        }
        assert_eq!(held_on_arrival([], 5), None);
    }
}
