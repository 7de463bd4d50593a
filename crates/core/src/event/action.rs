//! What an action's events (`build.*`, `rebase.*`, `deploy.*`, `gitops.*`) say of it.

use serde::{Deserialize, Serialize};

use crate::deploy::WorkloadProgress;
use crate::kind::ActionKind;
use crate::signing::SignatureInfo;

/// The action an action event (`build.*`, `rebase.*`, `deploy.*`, `gitops.*`) is about. In JSON its
/// kind's facts ([`ActionResult`]) are optional fields beside the shared ones, as events have
/// always carried them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "ActionInfoWire", into = "ActionInfoWire")]
pub struct ActionInfo {
    /// The action's idempotency key (also the name of runner objects).
    pub key: String,
    /// The `[[images]]` name.
    pub image: String,
    /// The app image tag.
    pub reference: String,
    pub kind: ActionKind,
    /// The change it reacts to.
    pub change: String,
    pub attempt: u32,
    pub max_attempts: u32,
    pub detail: Option<String>,
    pub output_tail: Option<String>,
    /// The app image's digest before the action, when known.
    pub previous: Option<String>,
    /// The app image's digest after it, when known (equal to `previous`: nothing needed writing).
    pub digest: Option<String>,
    /// What its kind alone says.
    pub result: ActionResult,
    /// What it verified before acting and signed after (`action.signature`); none when neither.
    pub signature: Option<SignatureInfo>,
}

/// What an action event says that only its kind has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionResult {
    /// A rebuild or a rebase.
    Build(BuildInfo),
    /// A deploy's workloads: each one's containers, the images before and written, its state.
    Deploy(Vec<WorkloadProgress>),
    /// A gitops action's commit.
    Gitops(Option<CommitInfo>),
}

impl ActionResult {
    /// Nothing said yet, for an action of `kind`.
    pub fn empty(kind: ActionKind) -> Self {
        match kind {
            ActionKind::Rebase | ActionKind::Rebuild => ActionResult::Build(BuildInfo::default()),
            ActionKind::Deploy => ActionResult::Deploy(Vec::new()),
            ActionKind::Gitops => ActionResult::Gitops(None),
        }
    }

    pub fn build(&self) -> Option<&BuildInfo> {
        match self {
            ActionResult::Build(b) => Some(b),
            _ => None,
        }
    }

    pub fn workloads(&self) -> &[WorkloadProgress] {
        match self {
            ActionResult::Deploy(w) => w,
            _ => &[],
        }
    }

    pub fn commit(&self) -> Option<&CommitInfo> {
        match self {
            ActionResult::Gitops(c) => c.as_ref(),
            _ => None,
        }
    }
}

/// What a rebuild's or a rebase's events say of it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BuildInfo {
    /// Where a rebase ran: `registry` (in the daemon) or `runner`.
    pub path: Option<String>,
    /// `tag_race`: the digest another writer put on the tag right behind this action's write
    /// (found by the HEAD after the PUT); the action failed and the tag holds that digest.
    pub tag_race: Option<String>,
    /// The pool a build ran in (the `kubernetes` and `kpack` runners).
    pub pool: Option<String>,
}

impl From<ActionInfoWire> for ActionInfo {
    /// The kind says which facts are its own; an event of today's writers never carries another
    /// kind's.
    fn from(w: ActionInfoWire) -> Self {
        let result = match ActionResult::empty(w.kind) {
            ActionResult::Build(_) => {
                ActionResult::Build(BuildInfo { path: w.path, tag_race: w.tag_race, pool: w.pool })
            }
            ActionResult::Deploy(_) => ActionResult::Deploy(w.workloads),
            ActionResult::Gitops(_) => ActionResult::Gitops(w.commit),
        };
        ActionInfo {
            key: w.key,
            image: w.image,
            reference: w.reference,
            kind: w.kind,
            change: w.change,
            attempt: w.attempt,
            max_attempts: w.max_attempts,
            detail: w.detail,
            output_tail: w.output_tail,
            previous: w.previous,
            digest: w.digest,
            result,
            signature: w.signature,
        }
    }
}

impl From<ActionInfo> for ActionInfoWire {
    fn from(a: ActionInfo) -> Self {
        let mut w = ActionInfoWire {
            key: a.key,
            image: a.image,
            reference: a.reference,
            kind: a.kind,
            change: a.change,
            attempt: a.attempt,
            max_attempts: a.max_attempts,
            detail: a.detail,
            output_tail: a.output_tail,
            previous: a.previous,
            digest: a.digest,
            path: None,
            tag_race: None,
            workloads: Vec::new(),
            pool: None,
            commit: None,
            signature: a.signature,
        };
        match a.result {
            ActionResult::Build(b) => (w.path, w.tag_race, w.pool) = (b.path, b.tag_race, b.pool),
            ActionResult::Deploy(workloads) => w.workloads = workloads,
            ActionResult::Gitops(commit) => w.commit = commit,
        }
        w
    }
}

/// [`ActionInfo`] as events carry it: one optional field per kind's fact, as always.
#[derive(Serialize, Deserialize)]
struct ActionInfoWire {
    /// The action's idempotency key (also the name of runner objects).
    key: String,
    /// The `[[images]]` name.
    image: String,
    /// The app image tag.
    reference: String,
    /// Its stored name (`rebase`, `rebuild`, `deploy`, `gitops`).
    kind: ActionKind,
    /// The change it reacts to.
    change: String,
    attempt: u32,
    max_attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output_tail: Option<String>,
    /// The app image's digest before the action, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous: Option<String>,
    /// The app image's digest after it, when known (equal to `previous`: nothing needed writing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    digest: Option<String>,
    /// Where a rebase ran: `registry` (in the daemon) or `runner`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    /// `tag_race`: the digest another writer put on the tag right behind this action's write
    /// (found by the HEAD after the PUT); the action failed and the tag holds that digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tag_race: Option<String>,
    /// A deploy's workloads: each one's containers, the images before and written, its state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    workloads: Vec<WorkloadProgress>,
    /// The pool a build ran in (the `kubernetes` and `kpack` runners).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pool: Option<String>,
    /// A gitops action's commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    commit: Option<CommitInfo>,
    /// What it verified before acting and signed after; last, so older events read the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signature: Option<SignatureInfo>,
}

/// What a gitops action committed (or, failing, would have): where, and which files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitInfo {
    /// The `[[gitops]]` name.
    pub target: String,
    /// The commit id; `None` when nothing was pushed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The branch pushed to.
    pub branch: String,
    /// The files written, relative to the repository.
    #[serde(default)]
    pub files: Vec<String>,
}
