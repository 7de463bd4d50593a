//! The kinds of action, and what is fixed about each in one table ([`KindFacts`]): its stored
//! name, whether it builds, whether it acts on an app image, the tag move its tag writes are
//! recorded as. The daemon asks the table (or a predicate on it) instead of matching on the kind,
//! so a new kind is a variant and a row here, plus the code that is its own. Below `event`, whose
//! action events carry the kind (the events a kind's end is told by are `event`'s:
//! `EventType::succeeded` and `EventType::failed`).

use serde::{Deserialize, Serialize};

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
    /// Whether it acts on an app image's digest (what `status` shows as an image's last action
    /// and what a required signature is checked on): a rebase, a rebuild or a deploy; a gitops
    /// action writes Git.
    pub on_app_image: bool,
    /// The name of the tag move its tag writes are recorded as (the ledger's `TagMoveKind`): a
    /// deploy's only tag move is its undo, which puts the tag back as `rollback` does; a gitops
    /// action moves none.
    pub tag_move: &'static str,
}

/// One row per kind, in the order the variants are declared (which is the order the runner
/// routes them, [`ActionKind::ALL`]).
const KINDS: [KindFacts; 4] = [
    KindFacts { kind: ActionKind::Rebase, name: "rebase", builds: true, on_app_image: true, tag_move: "rebase" },
    KindFacts { kind: ActionKind::Rebuild, name: "rebuild", builds: true, on_app_image: true, tag_move: "rebuild" },
    KindFacts { kind: ActionKind::Deploy, name: "deploy", builds: false, on_app_image: true, tag_move: "rollback" },
    KindFacts { kind: ActionKind::Gitops, name: "gitops", builds: false, on_app_image: false, tag_move: "rollback" },
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

    /// Whether it acts on an app image's digest (a rebase, a rebuild or a deploy; a gitops
    /// action writes Git).
    pub fn on_app_image(self) -> bool {
        self.facts().on_app_image
    }
}

/// A kind equals its stored name (`kind == "deploy"`), as the ledger and events write it.
impl PartialEq<str> for ActionKind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ActionKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for ActionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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
