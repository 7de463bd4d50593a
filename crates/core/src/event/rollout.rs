//! What the roll-out's events (`action.*`, `rollout.*`) say: the actions that wait, or the freeze;
//! and what a person's rollback of an app image's tag (`image.rolled_back`) says.

use serde::{Deserialize, Serialize};

/// What a roll-out event is about: the actions of one change that wait (`action.*`), or the
/// freeze (`rollout.*`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RolloutInfo {
    /// The change whose actions wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<WaitingAction>,
    /// Why: the failure that holds them (`canary petclinic failed`), or the freeze's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who froze or unfroze.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// When the freeze began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// What let the actions skip the soak and the windows (`action.expedited`): the records (id,
    /// priority, file) and the data's source (URL, ETag, SHA-256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expedited: Option<crate::vulns::Expedited>,
}

/// One action a roll-out event names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingAction {
    pub key: String,
    /// The `[[images]]` name.
    pub image: String,
    pub kind: crate::kind::ActionKind,
    pub wave: u32,
}

/// A person's rollback of an app image's tag (`image.rolled_back`); the digests before and after
/// are the event's `previous` and `current`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRollback {
    /// The `[[images]]` name.
    pub image: String,
    /// The tag moved back.
    pub reference: String,
    /// Who asked (`user@host (cli)`, `NAME (api)`).
    pub by: String,
    /// The recorded move it undid (`rebase`, `rebuild`) and its action's key; none with `--to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undone: Option<String>,
}
