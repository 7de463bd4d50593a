//! What planning answers for a move: the move as planning reads it ([`Moved`]), and the
//! decisions and actions planned for it ([`Planned`]), with what the check's commit still needs of
//! the actions an earlier batch recorded.

use crate::ledger::{NewAction, WatchKind};
use builder_monitor_core::cnb::{Change, PinnedMetadata};
use builder_monitor_core::event::{Pin, WaitingAction};
use builder_monitor_core::plan::Decision;
use builder_monitor_core::rollout::Expedite;

/// The move a check accepted, as planning needs it.
pub struct Moved<'a> {
    /// The moved watch, whose change the actions belong to.
    pub watch: &'a str,
    pub kind: WatchKind,
    /// The builders whose app images the move concerns.
    pub builders: &'a [String],
    pub change_id: &'a str,
    pub change: &'a Change,
    pub current: &'a Pin,
    /// The builder's new metadata (builder moves).
    pub metadata: Option<&'a PinnedMetadata>,
    /// The check's time: the actions' creation.
    pub now: chrono::DateTime<chrono::Utc>,
}

/// The reaction planned for a move: a decision per app image concerned, and the actions to record.
#[derive(Debug, Default)]
pub struct Planned {
    pub decisions: Vec<Decision>,
    /// The actions the check's commit records.
    pub actions: Vec<NewAction>,
    /// Whether the move's actions are expedited (`[rollout] expedite`), or why not though its
    /// fixes are that high: the commit's `action.expedited` event and log line say it.
    pub expedite: Expedite,
    /// The actions an earlier batch recorded already (`Ledger::record_planned`) that the commit's
    /// events and the gitops actions need, as much of them as they need: all of them when a gitops
    /// target is configured, else those awaiting approval. A fleet's actions are not all held in
    /// memory until the commit, nor written a second time by it.
    pub recorded: Vec<RecordedAction>,
}

/// What the check's commit still needs of an action an earlier batch recorded.
#[derive(Debug, Clone)]
pub struct RecordedAction {
    pub summary: WaitingAction,
    pub needs_approval: bool,
}

impl RecordedAction {
    pub(super) fn of(action: &NewAction) -> Self {
        RecordedAction { summary: waiting(action), needs_approval: action.needs_approval }
    }
}

fn waiting(action: &NewAction) -> WaitingAction {
    WaitingAction { key: action.key.clone(), image: action.image.clone(), kind: action.kind, wave: action.wave }
}

impl Planned {
    /// Every action's image and wave, recorded already or not.
    pub(super) fn images_and_waves(&self) -> impl Iterator<Item = (&str, u32)> {
        let recorded = self.recorded.iter().map(|a| (a.summary.image.as_str(), a.summary.wave));
        recorded.chain(self.actions.iter().map(|a| (a.image.as_str(), a.wave)))
    }

    /// Every action, recorded already or not, in the order they were planned.
    pub fn all_actions(&self) -> Vec<WaitingAction> {
        let recorded = self.recorded.iter().map(|a| a.summary.clone());
        recorded.chain(self.actions.iter().map(waiting)).collect()
    }

    /// The actions waiting for a person, recorded already or not, in the order they were planned.
    pub fn awaiting_approval(&self) -> Vec<WaitingAction> {
        let recorded = self.recorded.iter().filter(|a| a.needs_approval).map(|a| a.summary.clone());
        recorded.chain(self.actions.iter().filter(|a| a.needs_approval).map(waiting)).collect()
    }
}
