//! What a builder move means: the `change` object of `builder.changed` events (kind, reasons and
//! the details behind them). Classification from CNB labels builds on these types.

use serde::{Deserialize, Serialize};

/// The cheapest correct reaction to a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// Nothing that affects app images moved.
    None,
    /// Only the run image moved: app images can be rebased.
    Rebase,
    /// Buildpacks, lifecycle, order or stack changed: app images must be rebuilt.
    Rebuild,
    /// Metadata missing or unreadable on either side: policies decide (default rebuild).
    Unknown,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::None => "none",
            ChangeKind::Rebase => "rebase",
            ChangeKind::Rebuild => "rebuild",
            ChangeKind::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "none" => ChangeKind::None,
            "rebase" => ChangeKind::Rebase,
            "rebuild" => ChangeKind::Rebuild,
            "unknown" => ChangeKind::Unknown,
            _ => return None,
        })
    }
}

/// Why a change is what it is, in kpack's vocabulary where it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Reason {
    Stack,
    Buildpack,
    Lifecycle,
    Order,
    StackId,
    RunImage,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildpackChange {
    pub id: String,
    pub from: Option<String>,
    pub to: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FromTo {
    pub from: Option<String>,
    pub to: Option<String>,
}

/// The `change` object of a `builder.changed` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub kind: ChangeKind,
    #[serde(default)]
    pub reasons: Vec<Reason>,
    #[serde(default)]
    pub buildpacks: Vec<BuildpackChange>,
    #[serde(default)]
    pub lifecycle: Option<FromTo>,
    #[serde(default)]
    pub run_image: Option<FromTo>,
}

impl Change {
    /// A move whose meaning is not known (no metadata compared).
    pub fn unknown() -> Self {
        Change {
            kind: ChangeKind::Unknown,
            reasons: Vec::new(),
            buildpacks: Vec::new(),
            lifecycle: None,
            run_image: None,
        }
    }
}
