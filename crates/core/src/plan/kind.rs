//! The kinds of action, and what is fixed about each in one table ([`KindFacts`]): its stored
//! name, whether it builds, the events its end is told by, the tag move its tag writes are
//! recorded as. The daemon asks the table (or a predicate on it) instead of matching on the kind,
//! so a new kind is a variant and a row here, plus the code that is its own.

use serde::{Deserialize, Serialize};

use crate::event::EventType;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionKind {
    Rebase,
    Rebuild,
    /// The app's new digest into its workloads (after an action that moved the tag, or by hand).
    Deploy,
    /// A change's new digests (and builder pin) committed to a Git repository (`[[gitops]]`).
    Gitops,
}

/// What is fixed about a kind of action, whatever the configuration.
#[derive(Debug, PartialEq, Eq)]
pub struct KindFacts {
    pub kind: ActionKind,
    /// Its stored name (the ledger's `kind` column, events, `[runner.exec]` placeholders).
    pub name: &'static str,
    /// Whether it builds — runs on the configured runner and moves the app tag (a rebase or a
    /// rebuild); a deploy moves workloads, a gitops action writes Git.
    pub builds: bool,
    /// The event its success is told by.
    pub succeeded: EventType,
    /// The event its (final) failure is told by.
    pub failed: EventType,
    /// The name of the tag move its tag writes are recorded as (the ledger's `TagMoveKind`): a
    /// deploy's only tag move is its undo, which puts the tag back as `rollback` does; a gitops
    /// action moves none.
    pub tag_move: &'static str,
    /// Whether `require_signed` gates it: it starts from a digest of the app (a rebase, a rebuild,
    /// a deploy); a gitops action commits what others checked.
    pub signature_gated: bool,
}

/// One row per kind, in the order the variants are declared (which is the order the runner
/// routes them, [`ActionKind::ALL`]).
const KINDS: [KindFacts; 4] = [
    KindFacts {
        kind: ActionKind::Rebase,
        name: "rebase",
        builds: true,
        succeeded: EventType::RebaseSucceeded,
        failed: EventType::RebaseFailed,
        tag_move: "rebase",
        signature_gated: true,
    },
    KindFacts {
        kind: ActionKind::Rebuild,
        name: "rebuild",
        builds: true,
        succeeded: EventType::BuildSucceeded,
        failed: EventType::BuildFailed,
        tag_move: "rebuild",
        signature_gated: true,
    },
    KindFacts {
        kind: ActionKind::Deploy,
        name: "deploy",
        builds: false,
        succeeded: EventType::DeploySucceeded,
        failed: EventType::DeployFailed,
        tag_move: "rollback",
        signature_gated: true,
    },
    KindFacts {
        kind: ActionKind::Gitops,
        name: "gitops",
        builds: false,
        succeeded: EventType::GitopsCommitted,
        failed: EventType::GitopsFailed,
        tag_move: "rollback",
        signature_gated: false,
    },
];

const fn every_kind() -> [ActionKind; KINDS.len()] {
    let mut out = [ActionKind::Rebase; KINDS.len()];
    let mut n = 0;
    while n < KINDS.len() {
        out[n] = KINDS[n].kind;
        n += 1;
    }
    out
}

impl ActionKind {
    /// Every kind, in the order the runner routes them.
    pub const ALL: [ActionKind; KINDS.len()] = every_kind();

    /// Its row of the table.
    pub fn facts(self) -> &'static KindFacts {
        &KINDS[self as usize]
    }

    pub fn as_str(self) -> &'static str {
        self.facts().name
    }

    pub fn parse(text: &str) -> Option<Self> {
        KINDS.iter().find(|f| f.name == text).map(|f| f.kind)
    }

    /// Whether it builds: runs on the configured runner and moves the app tag (a rebase or a
    /// rebuild; a deploy moves workloads, a gitops action writes Git).
    pub fn builds(self) -> bool {
        self.facts().builds
    }

    /// Whether it moves the app tag (a rebase or a rebuild).
    pub fn moves_tag(self) -> bool {
        self.builds()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_row_stands_at_its_variant_and_reads_back_by_name() {
        for (n, kind) in ActionKind::ALL.into_iter().enumerate() {
            assert_eq!(kind as usize, n);
            assert_eq!(kind.facts().kind, kind);
            assert_eq!(ActionKind::parse(kind.as_str()), Some(kind));
            let stored = serde_json::to_value(kind).unwrap();
            assert_eq!(stored, serde_json::Value::from(kind.as_str()), "the serde name is the table's");
        }
        assert_eq!(ActionKind::parse("deploys"), None);
    }
}
