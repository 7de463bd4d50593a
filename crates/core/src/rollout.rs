//! STUB (replaced by the rollout-core branch): the roll-out gates' types.
//! Pure: no I/O.
use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::plan::ActionKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionState {
    Pending,
    Running,
    Succeeded,
    Failed,
    Superseded,
    Held,
    AwaitingApproval,
    Rejected,
}

impl ActionState {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionState::Pending => "pending",
            ActionState::Running => "running",
            ActionState::Succeeded => "succeeded",
            ActionState::Failed => "failed",
            ActionState::Superseded => "superseded",
            ActionState::Held => "held",
            ActionState::AwaitingApproval => "awaiting_approval",
            ActionState::Rejected => "rejected",
        }
    }
    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Running,
            Self::Succeeded,
            Self::Failed,
            Self::Superseded,
            Self::Held,
            Self::AwaitingApproval,
            Self::Rejected,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
    pub fn is_open(self) -> bool {
        matches!(self, Self::Pending | Self::Running | Self::Held | Self::AwaitingApproval)
    }
}

impl std::fmt::Display for ActionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Default)]
pub struct Windows(pub Vec<()>);
impl Windows {
    pub fn is_open(&self, _now: DateTime<Utc>) -> bool {
        true
    }
    pub fn next_open(&self, _now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        None
    }
    pub fn describe_next(&self, _now: DateTime<Utc>) -> Option<String> {
        None
    }
}

#[derive(Debug, Clone, Default)]
pub struct Rollout {
    pub windows: Windows,
    pub max_in_flight: Option<usize>,
    pub approve: BTreeSet<ActionKind>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Freeze {
    pub since: DateTime<Utc>,
    pub reason: Option<String>,
    pub by: String,
}

#[derive(Debug, Clone)]
pub struct GateAction {
    pub key: String,
    pub image: String,
    pub wave: u32,
    pub state: ActionState,
    pub released: bool,
    pub created: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    Frozen { since: DateTime<Utc>, reason: Option<String> },
    Window { next: Option<String> },
    Wave { wave: u32, lower: u32, blocking: Vec<(String, ActionState)> },
    InFlight { max: usize },
}

impl Wait {
    pub fn code(&self) -> &'static str {
        match self {
            Wait::Frozen { .. } => "frozen",
            Wait::Window { .. } => "window",
            Wait::Wave { .. } => "wave",
            Wait::InFlight { .. } => "in_flight",
        }
    }
}

impl std::fmt::Display for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.code())
    }
}

pub fn gate(
    actions: &[GateAction],
    _rollout: &Rollout,
    _freeze: Option<&Freeze>,
    _now: DateTime<Utc>,
) -> BTreeMap<String, Result<(), Wait>> {
    actions.iter().filter(|a| a.state == ActionState::Pending).map(|a| (a.key.clone(), Ok(()))).collect()
}

pub fn held_by_failure(_actions: &[GateAction], _failed_key: &str) -> Vec<String> {
    Vec::new()
}
