//! A freeze request ([`RolloutControl::set_freeze`](crate::ledger::RolloutControl::set_freeze)):
//! the freeze in force after it, and whether the state flipped (a flip is counted and its events
//! recorded in the same write).
//!
//! Who does what: Kubernetes reads the roll-out entry's freeze and writes [`Flip`]'s in the same
//! entry; SQLite reads the roll-out row in its transaction and writes [`Flip`]'s freeze (a second
//! freeze only its reason, the rest being the first's).

use builder_monitor_core::rollout::Freeze;

/// A freeze request as a change set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::ledger) struct Flip {
    /// The freeze in force after it.
    pub after: Option<Freeze>,
    /// The state flipped (frozen ↔ not): count it and record its events.
    pub flips: bool,
}

/// Freezing (`Some`) or lifting the freeze (`None`) with `before` in force: a second freeze keeps
/// the first one's time and author, and takes its reason when it gives one.
pub(in crate::ledger) fn freeze(before: Option<&Freeze>, requested: Option<&Freeze>) -> Flip {
    let after = match (before, requested) {
        (Some(old), Some(new)) => Some(Freeze {
            since: old.since,
            by: old.by.clone(),
            reason: new.reason.clone().or_else(|| old.reason.clone()),
        }),
        (_, new) => new.cloned(),
    };
    Flip { after, flips: before.is_some() != requested.is_some() }
}

#[cfg(test)]
mod tests {
    use super::super::tests::at;
    use super::*;

    fn by(who: &str, time: &str, reason: Option<&str>) -> Freeze {
        Freeze { since: at(time), by: who.into(), reason: reason.map(str::to_string) }
    }

    #[test]
    fn a_freeze_flips_only_between_frozen_and_not_and_a_second_keeps_the_first() {
        let first = by("dan", "09:00:00", Some("incident"));
        let cases = [
            (None, Some(first.clone()), Some(first.clone()), true),
            (Some(first.clone()), None, None, true),
            (None, None, None, false),
            (
                Some(first.clone()),
                Some(by("eve", "10:00:00", Some("still"))),
                Some(by("dan", "09:00:00", Some("still"))),
                false,
            ),
            (Some(first.clone()), Some(by("eve", "10:00:00", None)), Some(first.clone()), false),
        ];
        for (n, (before, requested, after, flips)) in cases.into_iter().enumerate() {
            assert_eq!(freeze(before.as_ref(), requested.as_ref()), Flip { after, flips }, "case {n}");
        }
    }
}
