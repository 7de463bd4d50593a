//! What an action's events (`build.*`, `rebase.*`, `deploy.*`, `gitops.*`) say of it.

use serde::{Deserialize, Serialize};

/// The rebase or rebuild a `build.*` / `rebase.*` event is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionInfo {
    /// The action's idempotency key (also the name of runner objects).
    pub key: String,
    /// The `[[images]]` name.
    pub image: String,
    /// The app image tag.
    pub reference: String,
    pub kind: String,
    /// The change it reacts to.
    pub change: String,
    pub attempt: u32,
    pub max_attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<String>,
    /// The app image's digest before the action, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    /// The app image's digest after it, when known (equal to `previous`: nothing needed writing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Where a rebase ran: `registry` (in the daemon) or `runner`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `tag_race`: the digest another writer put on the tag right behind this action's write
    /// (found by the HEAD after the PUT); the action failed and the tag holds that digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag_race: Option<String>,
    /// A deploy's workloads: each one's containers, the images before and written, its state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<crate::deploy::WorkloadProgress>,
    /// The pool a build ran in (the `kubernetes` and `kpack` runners).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// A gitops action's commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<CommitInfo>,
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
