//! The ledger's rules, written once for both backends: what a write does to the rows it concerns
//! (an action's end, an older action yielding to a newer change, a hold, a verdict, a claim, an
//! arrival, a delivery's attempt, a freeze). Each rule is a synchronous function over typed rows
//! that answers a change set — what to write — and does no I/O: no SQL, no Kubernetes, no clock.
//!
//! The layering: a backend (`sqlite/`, `kubernetes/`) loads the rows a rule needs, asks the rule,
//! and applies the change set it answers atomically (SQLite in its one transaction; Kubernetes in
//! the ConfigMap write that compares the entry's resourceVersion). Where SQLite selects rows in SQL
//! for speed over a fleet's thousands, it takes the rule's states and texts into its statement
//! instead of loading the rows; each rule's docs say which backend does what.
//!
//! A new rule is one file here, with its tests: its change set, the function that answers it, and
//! table-style tests in memory. The rows a rule reads are [`ActionFacts`] (both backends' action
//! rows are one) or the contract's own types (`ActionRecord`, `DeliveryUpdate`, `Freeze`).

mod arrival;
mod claim;
mod decide;
mod delivery;
mod finish;
mod freeze;
mod hold;
mod supersede;

pub(in crate::ledger) use arrival::{ChangeSoFar, arrive};
pub(in crate::ledger) use claim::{due_keys, requeue, take};
pub(in crate::ledger) use decide::decide;
pub(in crate::ledger) use delivery::attempted;
pub(in crate::ledger) use finish::{asks_newer, finish};
pub(in crate::ledger) use freeze::freeze;
pub(in crate::ledger) use hold::{HOLDABLE, hold_image, holdable};
pub(in crate::ledger) use supersede::{YIELDING, newer_change, superseded_by, yields};

use chrono::{DateTime, Utc};

use super::{ActionRecord, LedgerError};
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::rollout::ActionState;

/// An action row as the rules read it: the Kubernetes entry's rows and the [`ActionRecord`]s
/// SQLite reads are both one.
pub(in crate::ledger) trait ActionFacts {
    fn key(&self) -> &str;
    fn change(&self) -> &str;
    fn image(&self) -> &str;
    fn state(&self) -> ActionState;
    fn wave(&self) -> u32;
    fn released(&self) -> bool;
    fn created(&self) -> DateTime<Utc>;
}

impl ActionFacts for ActionRecord {
    fn key(&self) -> &str {
        &self.key
    }
    fn change(&self) -> &str {
        &self.change
    }
    fn image(&self) -> &str {
        &self.image
    }
    fn state(&self) -> ActionState {
        self.state
    }
    fn wave(&self) -> u32 {
        self.wave
    }
    fn released(&self) -> bool {
        self.released
    }
    fn created(&self) -> DateTime<Utc> {
        self.created
    }
}

/// A stored action kind, read at the boundary: a name no kind has is [`LedgerError::Corrupt`]
/// (`key` names the row).
pub(in crate::ledger) fn action_kind(key: &str, kind: &str) -> Result<ActionKind, LedgerError> {
    ActionKind::parse(kind)
        .ok_or_else(|| LedgerError::Corrupt { what: "action kind", detail: format!("{key}: {kind}") })
}

/// `'a', 'b'`: states as an SQL list, for a backend that selects a rule's rows in SQL (the names
/// are the states' own, never input).
pub(in crate::ledger) fn sql_states(states: &[ActionState]) -> String {
    states.iter().map(|s| format!("'{}'", s.as_str())).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
pub(in crate::ledger) mod tests {
    use super::*;
    use builder_monitor_core::rollout::Expedited;

    /// A time on 2026-12-01 (`09:00:00`, `09:00:00.123`).
    pub(in crate::ledger) fn at(time: &str) -> DateTime<Utc> {
        builder_monitor_core::schedule::parse_timestamp(&format!("2026-12-01T{time}Z")).unwrap()
    }

    /// A row of `change` for `image`, in `state`, wave 1, created at 09:00.
    pub(in crate::ledger) fn row(key: &str, change: &str, image: &str, state: ActionState) -> ActionRecord {
        ActionRecord {
            key: key.into(),
            change: change.into(),
            image: image.into(),
            action: builder_monitor_core::plan::ActionKind::Rebuild,
            state,
            attempts: 0,
            next_attempt: at("09:00:00"),
            detail: None,
            output_tail: None,
            updated: at("09:00:00"),
            wave: 1,
            needs_approval: false,
            released: false,
            decided_by: None,
            decided_at: None,
            created: at("09:00:00"),
            progress: None,
            holds: false,
            expedited: Expedited::default(),
        }
    }

    /// A rebuild's target for `r/app`.
    pub(in crate::ledger) fn target() -> builder_monitor_core::plan::ActionTarget {
        let json = serde_json::json!({"image": "r/app", "builder_name": "b", "builder": "r/b@sha256:x", "why": "test"});
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_stored_kind_reads_by_name_and_an_unknown_one_is_corrupt() {
        assert_eq!(action_kind("k", "deploy").unwrap(), ActionKind::Deploy);
        let err = action_kind("k", "deploys").unwrap_err();
        assert_eq!(err.to_string(), "ledger holds an unreadable action kind: k: deploys");
    }

    #[test]
    fn states_are_listed_for_sql_by_their_names() {
        assert_eq!(
            sql_states(&[ActionState::Pending, ActionState::AwaitingApproval]),
            "'pending', 'awaiting_approval'"
        );
    }
}
