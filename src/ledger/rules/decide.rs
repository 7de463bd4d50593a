//! A verdict on a change's actions ([`Actions::decide`](crate::ledger::Actions::decide)): which
//! rows move to which state ([`Verdict::next_state`]), who decided and when, and whether every
//! action of the change is marked released.
//!
//! Who does what: both backends load the change's rows (SQLite by its index on the change,
//! Kubernetes from the entry that holds the change) and write the [`Decision`] in one write.

use chrono::{DateTime, SubsecRound, Utc};

use crate::ledger::{ActionRecord, ActionState, Decided, LedgerError, Verdict};

/// One row a verdict moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::ledger) struct Move {
    pub key: String,
    pub state: ActionState,
    /// Who approved or rejected it, and when (to the second); none for a release.
    pub decided: Option<(String, DateTime<Utc>)>,
    /// What the caller is answered.
    pub answer: Decided,
}

/// A verdict as a change set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::ledger) struct Decision {
    /// Mark every action of the change released, whatever its state or image (a release), so its
    /// later waves stop waiting for them.
    pub release: bool,
    pub moves: Vec<Move>,
    /// Kept to the millisecond: the moved rows' update time.
    pub updated: DateTime<Utc>,
}

impl Decision {
    /// The actions it moved, as the caller is answered.
    pub fn answer(&self) -> Vec<Decided> {
        self.moves.iter().map(|m| m.answer.clone()).collect()
    }
}

/// `verdict` by `by` at `now` on `rows`, every action of one change (one image's only, with
/// `image`); a stored kind that does not read is [`LedgerError::Corrupt`].
pub(in crate::ledger) fn decide(
    rows: &[ActionRecord],
    image: Option<&str>,
    verdict: Verdict,
    by: &str,
    now: DateTime<Utc>,
) -> Result<Decision, LedgerError> {
    let decided = matches!(verdict, Verdict::Approve | Verdict::Reject).then(|| (by.to_string(), now.trunc_subsecs(0)));
    let mut moves = Vec::new();
    for a in rows.iter().filter(|a| image.is_none_or(|i| a.image == i)) {
        let Some(state) = verdict.next_state(a) else { continue };
        let answer = Decided { key: a.key.clone(), image: a.image.clone(), kind: a.action, state };
        moves.push(Move { key: a.key.clone(), state, decided: decided.clone(), answer });
    }
    Ok(Decision { release: verdict == Verdict::Release, moves, updated: now.trunc_subsecs(3) })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{at, row};
    use super::*;
    use ActionState::*;

    fn rows() -> Vec<ActionRecord> {
        vec![
            ActionRecord { needs_approval: true, ..row("a", "c1", "app", AwaitingApproval) },
            ActionRecord { needs_approval: true, ..row("b", "c1", "api", AwaitingApproval) },
            row("h", "c1", "web", Held),
            row("r", "c1", "app", Running),
        ]
    }

    fn moved(d: &Decision) -> Vec<(&str, ActionState, Option<&str>)> {
        d.moves.iter().map(|m| (m.key.as_str(), m.state, m.decided.as_ref().map(|(by, _)| by.as_str()))).collect()
    }

    #[test]
    fn each_verdict_moves_the_rows_it_concerns_and_records_who() {
        let now = at("09:00:00.789");
        let approve = decide(&rows(), None, Verdict::Approve, "bob", now).unwrap();
        assert_eq!(moved(&approve), [("a", Pending, Some("bob")), ("b", Pending, Some("bob"))]);
        assert_eq!(approve.moves[0].decided.as_ref().unwrap().1, at("09:00:00"), "to the second");
        assert_eq!((approve.release, approve.updated), (false, at("09:00:00.789")));
        let reject = decide(&rows(), Some("api"), Verdict::Reject, "bob", now).unwrap();
        assert_eq!(moved(&reject), [("b", Rejected, Some("bob"))]);
        let release = decide(&rows(), Some("app"), Verdict::Release, "bob", now).unwrap();
        assert_eq!(moved(&release), [], "nothing of app is held; the change is released all the same");
        assert!(release.release);
        let release = decide(&rows(), None, Verdict::Release, "bob", now).unwrap();
        assert_eq!(moved(&release), [("h", Pending, None)]);
        let answer = release.answer();
        assert_eq!(
            (answer[0].key.as_str(), answer[0].kind, answer[0].state),
            ("h", builder_monitor_core::plan::ActionKind::Rebuild, Pending)
        );
    }
}
