//! Supersession: only the newest target of an image is built, so an older change's action that
//! has not started yields to a newer change's action for its image, and one that is running ends
//! `superseded` instead of retrying once a newer change has one.
//!
//! Who does what: Kubernetes applies [`yields`] to the rows of every entry that holds actions of
//! the image, and finds the newer change with [`newer_change`] (by creation time) over every
//! entry's rows. SQLite selects the same rows in SQL — `state IN` [`YIELDING`], the image, another
//! change — and finds the newer change by insertion order (rowid), its order of recording; both
//! write [`superseded_by`]'s detail.

use super::ActionFacts;
use builder_monitor_core::rollout::ActionState;

/// The states of an action that has not started: it yields to a newer change's action.
pub(in crate::ledger) const YIELDING: [ActionState; 3] =
    [ActionState::Pending, ActionState::Held, ActionState::AwaitingApproval];

/// Whether `row` yields to an action of `newer_change` recorded for its image: it has not started
/// and is of another change.
pub(in crate::ledger) fn yields(row: &impl ActionFacts, newer_change: &str) -> bool {
    YIELDING.contains(&row.state()) && row.change() != newer_change
}

/// The detail an action that yields to `change` is left with (`superseded by change c2`); an
/// attempt's end adds its own detail after a colon.
pub(in crate::ledger) fn superseded_by(change: &str) -> String {
    format!("superseded by change {change}")
}

/// The change of the newest row for `key`'s image created after it, of another change: the change
/// that supersedes it (its own change's deploy follows it, and does not).
pub(in crate::ledger) fn newer_change<R: ActionFacts>(rows: &[R], key: &str) -> Option<String> {
    let mine = rows.iter().find(|a| a.key() == key)?;
    rows.iter()
        .filter(|a| a.image() == mine.image() && a.change() != mine.change() && a.created() > mine.created())
        .max_by_key(|a| a.created())
        .map(|a| a.change().to_string())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{at, row};
    use super::*;
    use crate::ledger::ActionRecord;
    use ActionState::*;

    #[test]
    fn only_another_changes_actions_that_have_not_started_yield() {
        let cases = [
            (Pending, "c1", true),
            (Held, "c1", true),
            (AwaitingApproval, "c1", true),
            (Running, "c1", false),
            (Succeeded, "c1", false),
            (Failed, "c1", false),
            (Superseded, "c1", false),
            (Skipped, "c1", false),
            (Pending, "c2", false),
        ];
        for (state, change, expected) in cases {
            assert_eq!(yields(&row("k", change, "app", state), "c2"), expected, "{state} of {change}");
        }
    }

    #[test]
    fn the_detail_names_the_newer_change() {
        assert_eq!(superseded_by("c2"), "superseded by change c2");
    }

    #[test]
    fn the_newer_change_is_the_newest_of_another_change_for_the_image_created_after() {
        let made = |key: &str, change: &str, image: &str, time: &str| ActionRecord {
            created: at(time),
            ..row(key, change, image, Pending)
        };
        let rows = [
            made("mine", "c1", "app", "09:00:00"),
            made("older", "c0", "app", "08:00:00"),
            made("deploy", "c1", "app", "09:30:00"),
            made("newer", "c2", "app", "10:00:00"),
            made("newest", "c3", "app", "11:00:00"),
            made("other", "c4", "api", "12:00:00"),
        ];
        assert_eq!(newer_change(&rows, "mine").as_deref(), Some("c3"));
        assert_eq!(newer_change(&rows, "newest"), None, "nothing after it");
        assert_eq!(newer_change(&rows[..3], "mine"), None, "its own change's deploy does not supersede it");
        assert_eq!(newer_change(&rows, "unknown"), None);
    }
}
