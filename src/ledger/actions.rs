//! Actions: the rebases and rebuilds planned with a change, as runners take them on and finish
//! them and as people approve, reject and release them; the roll-out gates over their rows; and
//! the contract both backends keep for them ([`Actions`]).

use builder_monitor_core::rollout::Expedited;
use std::future::Future;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{DeliveryKey, LedgerError, TagMove, time};
use builder_monitor_core::event::Event;
use builder_monitor_core::plan::{ActionKind, ActionPlan, ActionTarget};
use builder_monitor_core::pool::BuildProgress;
use builder_monitor_core::progress::Progress;
use builder_monitor_core::rollout::{GateAction, Rollout};
pub(in crate::ledger) use gates::{Gated, ImageLocks, gate_rows, next_start};

mod gates;

/// Where an action is; it lives in the core, where the roll-out gate reads it.
pub use builder_monitor_core::rollout::ActionState;

/// A set of action kinds: those a runner claims (the kinds its backends take).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kinds(u8);

impl Kinds {
    pub const ALL: Kinds = Kinds((1 << ActionKind::ALL.len()) - 1);
    pub const NONE: Kinds = Kinds(0);

    /// One bit per kind, by its place in [`ActionKind::ALL`] (the set lives in memory only).
    fn bit(kind: ActionKind) -> u8 {
        1 << kind as u8
    }

    pub fn with(self, kind: ActionKind) -> Kinds {
        Kinds(self.0 | Self::bit(kind))
    }

    pub fn without(self, kind: ActionKind) -> Kinds {
        Kinds(self.0 & !Self::bit(kind))
    }

    pub fn contains(self, kind: ActionKind) -> bool {
        self.0 & Self::bit(kind) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The one kind in the set, when it holds exactly one.
    pub fn single(self) -> Option<ActionKind> {
        ActionKind::ALL.into_iter().find(|k| Self::bit(*k) == self.0)
    }
}

impl From<Option<ActionKind>> for Kinds {
    /// `None`: every kind.
    fn from(kind: Option<ActionKind>) -> Self {
        kind.map_or(Kinds::ALL, |k| Kinds::NONE.with(k))
    }
}

impl From<ActionKind> for Kinds {
    fn from(kind: ActionKind) -> Self {
        Kinds::NONE.with(kind)
    }
}

/// An action planned with a change.
#[derive(Debug, Clone)]
pub struct NewAction {
    /// Idempotency key, derived from the change id and the image name; names runner objects.
    pub key: String,
    pub change_id: String,
    /// The `[[images]]` name.
    pub image: String,
    pub kind: ActionKind,
    /// What to build: references, source, environment (the runner's input).
    pub target: ActionTarget,
    /// Its roll-out wave (`[[images]] wave`): it starts once the change's lower waves succeeded.
    pub wave: u32,
    /// Recorded as `awaiting_approval`: it starts only once a person approves it.
    pub needs_approval: bool,
    /// What let it skip the soak and the windows (`[rollout] expedite`): the records and the
    /// data's source; empty: not expedited.
    pub expedited: Expedited,
    /// `[[gitops]] batch`: it waits this long after the first action of its subject that it
    /// supersedes (or after it arrives), and its plan takes along theirs (one commit for all).
    pub batch: Option<std::time::Duration>,
}

impl NewAction {
    /// An action to record for `target`, in wave 1, not waiting for a person.
    pub fn new(key: String, change_id: String, image: String, kind: ActionKind, target: ActionTarget) -> Self {
        NewAction {
            key,
            change_id,
            image,
            kind,
            target,
            wave: 1,
            needs_approval: false,
            expedited: Expedited::default(),
            batch: None,
        }
    }

    /// The state it is recorded in: `held` when its change's lower wave failed before it arrived,
    /// else waiting for a person or pending.
    pub(super) fn arrival_state(&self, held: bool) -> ActionState {
        match (held, self.needs_approval) {
            (true, _) => ActionState::Held,
            (false, true) => ActionState::AwaitingApproval,
            (false, false) => ActionState::Pending,
        }
    }

    /// The same action in roll-out `wave`, waiting for a person when `needs_approval`.
    pub fn gated(self, wave: u32, needs_approval: bool) -> Self {
        NewAction { wave, needs_approval, ..self }
    }

    /// The same action, batched over `window` (`[[gitops]] batch`; none: not batched).
    pub fn batched(self, window: Option<std::time::Duration>) -> Self {
        NewAction { batch: window, ..self }
    }

    /// When it may start, recorded at `now` superseding `older` (`(change, target, next
    /// attempt)` of the actions of its subject that yield to it): now, or for a batched gitops
    /// action the first one's deadline, its plan taking along theirs.
    pub(super) fn arrival(
        &self,
        now: DateTime<Utc>,
        older: &[(String, ActionTarget, DateTime<Utc>)],
    ) -> (ActionTarget, DateTime<Utc>) {
        let (Some(window), ActionPlan::Gitops(_)) = (self.batch, &self.target.plan) else {
            return (self.target.clone(), now);
        };
        let mut target = self.target.clone();
        if let ActionPlan::Gitops(plan) = &mut target.plan {
            for (change, theirs, _) in older {
                if let ActionPlan::Gitops(older_plan) = &theirs.plan {
                    plan.absorb(&self.change_id, change, older_plan);
                }
            }
        }
        let due = builder_monitor_core::gitops::deadline(now, window, older.iter().map(|(_, _, at)| *at));
        (target, due)
    }

    /// The same action, expedited by `expedited` (empty: not expedited).
    pub fn expedited(self, expedited: Expedited) -> Self {
        NewAction { expedited, ..self }
    }
}

/// The JSON a backend stores for an action's target: through a value, whose maps are sorted, as
/// the ledger has always written it.
pub(super) fn target_json(target: &ActionTarget) -> Result<serde_json::Value, LedgerError> {
    serde_json::to_value(target).map_err(|error| LedgerError::Encode { what: "action target", error })
}

/// A stored target that does not read as an [`ActionTarget`]: what reading it said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unreadable(pub String);

/// An action's target from the JSON a backend stored; a value that is not a target is the
/// runner's to fail (see [`ClaimedAction::target`]).
pub(super) fn read_target(json: serde_json::Value) -> Result<ActionTarget, Unreadable> {
    serde_json::from_value(json).map_err(|e| Unreadable(e.to_string()))
}

/// The end of an action's attempt, as `finish_action` records it.
#[derive(Debug, Clone)]
pub struct ActionEnd<'a> {
    pub key: &'a str,
    pub outcome: ActionOutcome,
    pub detail: String,
    /// The end of the command's output, scrubbed.
    pub output_tail: String,
    /// The watch the attempt's events are recorded under (the builder).
    pub watch: &'a str,
    pub events: Vec<Event>,
    /// The outbox rows of the events above.
    pub deliveries: Vec<DeliveryKey>,
    /// Events kept for the watch.
    pub history: usize,
    /// When the attempt ended (the caller's clock).
    pub now: DateTime<Utc>,
    /// How the attempt moved the app image's tag, when it did (recorded in the same write).
    pub tag_move: Option<TagMove>,
    /// The later waves of the change this failure holds (recorded in the same write).
    pub hold: Option<Hold>,
    /// The attempt could not tell whether its tag write landed: its intent stays open for the next
    /// attempt to settle (otherwise the attempt's end closes it).
    pub keep_intent: bool,
    /// Actions that follow a success (the deploy after a rebase or rebuild that moved the tag),
    /// recorded in the same write when the action ends `succeeded` and no newer change has an
    /// action for its image.
    pub follow: Vec<NewAction>,
    /// The action holds its image from now on (a failed deploy): no action of the image recorded
    /// before it starts until a newer change or `release`.
    pub hold_image: bool,
}

/// A finished deploy found overridden (its workload's image changed by someone else): it holds
/// its image from now on, with `detail` as the reason, and its events are recorded in the same
/// write.
#[derive(Debug, Clone)]
pub struct ImageHold<'a> {
    pub key: &'a str,
    pub detail: String,
    pub watch: &'a str,
    pub events: Vec<Event>,
    pub deliveries: Vec<DeliveryKey>,
    pub history: usize,
    pub now: DateTime<Utc>,
}

/// Actions a failure in a lower wave holds: each goes from `pending` or `awaiting_approval` to
/// `held` (a row already in another state is left as it is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub keys: Vec<String>,
    /// Why, for `status` (`held: canary petclinic failed`).
    pub detail: String,
}

/// What a person (or the API on one's behalf) decides about a change's actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// `awaiting_approval` → `pending` (a held one stays held, approved).
    Approve,
    /// `awaiting_approval` (or held and not approved yet) → `rejected`.
    Reject,
    /// `held` → `pending` (or `awaiting_approval` when not approved yet); the change's later waves
    /// no longer wait for its lower ones.
    Release,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Approve => "approve",
            Verdict::Reject => "reject",
            Verdict::Release => "release",
        }
    }

    /// The state the verdict moves `action` to; `None`: it does not concern that action.
    pub fn next_state(self, action: &ActionRecord) -> Option<ActionState> {
        let undecided = action.needs_approval && action.decided_by.is_none();
        match (self, action.state) {
            (Verdict::Approve, ActionState::AwaitingApproval) => Some(ActionState::Pending),
            (Verdict::Approve, ActionState::Held) if undecided => Some(ActionState::Held),
            (Verdict::Reject, ActionState::AwaitingApproval) => Some(ActionState::Rejected),
            (Verdict::Reject, ActionState::Held) if undecided => Some(ActionState::Rejected),
            (Verdict::Release, ActionState::Held) if undecided => Some(ActionState::AwaitingApproval),
            (Verdict::Release, ActionState::Held) => Some(ActionState::Pending),
            _ => None,
        }
    }
}

/// An action a verdict moved, and the state it is in now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decided {
    pub key: String,
    pub image: String,
    pub kind: ActionKind,
    pub state: ActionState,
}

/// An action a runner took on (now `running`).
#[derive(Debug, Clone)]
pub struct ClaimedAction {
    pub key: String,
    pub change_id: String,
    pub image: String,
    pub kind: ActionKind,
    /// 1 for the first try.
    pub attempt: u32,
    /// What to build; an error when the stored target does not read as one (the runner fails
    /// such an action rather than leave it running).
    pub target: Result<ActionTarget, Unreadable>,
    /// The local command's process group, once the exec runner started it.
    pub process: Option<ProcessGroup>,
    /// What an earlier attempt recorded of its progress (a deploy's previous images and writes).
    pub progress: Option<Progress>,
    /// When it was planned: what it signs is dated by this, so every attempt writes the same bytes.
    pub created: DateTime<Utc>,
    /// The fixes that let it skip the soak and the windows (`[rollout] expedite`): the deploy that
    /// follows an expedited rebase or rebuild carries them on.
    pub expedited: Expedited,
}

/// A local command's process group: its id (the leader's pid) and the leader's start time, so a
/// later process can tell that group from a new one that reuses the number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ProcessGroup {
    pub id: u32,
    /// Clock ticks after boot (`/proc/PID/stat` field 22).
    pub started: u64,
}

/// Where an attempt leaves an action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionOutcome {
    Succeeded,
    /// Failed; tried again at this time (kept to the millisecond).
    Retry {
        next_attempt: DateTime<Utc>,
    },
    /// Failed for good.
    Failed,
    /// Nothing to do (a deploy to workloads a GitOps tool owns).
    Skipped,
    /// A newer change has an action for the same image: this one ended without writing (the
    /// newer change's id).
    Superseded {
        by: String,
    },
}

/// An action as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActionRecord {
    pub key: String,
    pub change: String,
    pub image: String,
    pub action: ActionKind,
    pub state: ActionState,
    pub attempts: u32,
    #[serde(with = "time::millis")]
    pub next_attempt: DateTime<Utc>,
    pub detail: Option<String>,
    pub output_tail: Option<String>,
    #[serde(with = "time::millis")]
    pub updated: DateTime<Utc>,
    pub wave: u32,
    pub needs_approval: bool,
    /// `release` let it go regardless of its change's lower waves.
    pub released: bool,
    /// Who approved or rejected it (`user@host (cli)`, `api`), and when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    #[serde(with = "time::seconds_opt", skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<DateTime<Utc>>,
    #[serde(with = "time::millis")]
    pub created: DateTime<Utc>,
    /// What the action recorded of its progress (a deploy: each workload's previous and written
    /// images, and its health).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// It holds its image (a failed or overridden deploy) until a newer change or `release`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub holds: bool,
    /// The fixes that let it skip the soak and the windows (`[rollout] expedite`).
    #[serde(skip_serializing_if = "Expedited::is_empty")]
    pub expedited: Expedited,
}

impl ActionRecord {
    /// As the roll-out gates see it.
    pub fn gate_action(&self) -> GateAction {
        GateAction {
            key: self.key.clone(),
            image: self.image.clone(),
            wave: self.wave,
            state: self.state,
            released: self.released,
            created: self.created,
            deploy: self.action == ActionKind::Deploy,
            updated: self.updated,
            expedited: !self.expedited.is_empty(),
        }
    }
}

/// An image's newest action of a kind ([`Actions::latest_actions`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LatestAction {
    pub record: ActionRecord,
    /// What it carries out; none when the stored target does not read (`status` shows the action
    /// all the same, without its digest).
    pub target: Option<ActionTarget>,
}

/// An action still to run or running (`status`'s `pending`). Shown with the state `waiting` when
/// it is pending and a roll-out gate keeps it back, with the reason in `waiting_for`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAction {
    pub key: String,
    pub change: String,
    pub image: String,
    pub action: ActionKind,
    pub state: ActionState,
    pub attempts: u32,
    pub next_attempt: DateTime<Utc>,
    pub wave: u32,
    /// Why it is held (`held: …`), when it is.
    pub detail: Option<String>,
    /// Why it does not start now (`wave 1 waits for wave 0: petclinic running`); set by `status`.
    pub waiting_for: Option<String>,
    /// What keeps it: `frozen`, `window`, `wave`, `in_flight`, `approval`, `held` or `cluster`
    /// (the Kubernetes cluster it runs on cannot be configured or does not answer); set by `status`.
    pub gate: Option<&'static str>,
    /// Where a build runs (its pool) and whether Kueue holds it, as the runner recorded.
    pub placed: Option<BuildProgress>,
}

impl OpenAction {
    /// The state people see: `waiting` for a pending action a gate keeps back, `queued` for a
    /// running build whose Job Kueue holds.
    pub fn shown_state(&self) -> &'static str {
        shown_state(self.state, self.gate.is_some(), self.placed.as_ref().is_some_and(|p| p.queued))
    }
}

/// The one state people see of an action, in every view (`status` text and JSON, the page, the
/// metrics): `waiting` for a pending action a roll-out gate keeps back, `queued` for a running
/// build whose Job Kueue holds, else the ledger's state.
pub fn shown_state(state: ActionState, gated: bool, queued: bool) -> &'static str {
    match state {
        ActionState::Pending if gated => "waiting",
        ActionState::Running if queued => "queued",
        state => state.as_str(),
    }
}

impl ActionRecord {
    /// Its state as shown ([`shown_state`]), where `gated` says whether a gate keeps it back now.
    pub fn shown_state(&self, gated: bool) -> &'static str {
        shown_state(self.state, gated, placed(self.progress.as_ref()).is_some_and(|p| p.queued))
    }
}

/// A build's recorded placement, from its action's `progress` (a deploy's progress is not one).
pub fn placed(progress: Option<&Progress>) -> Option<BuildProgress> {
    progress.and_then(Progress::build).cloned()
}

/// A stored progress record of an action of `kind` (none: its stored name is no kind's); one that
/// does not read as that kind's record is read as none (it is a record of what was written, never a
/// reason to stop an action: a deploy reads its workloads again).
pub(super) fn read_progress(kind: Option<ActionKind>, value: Option<serde_json::Value>) -> Option<Progress> {
    kind.zip(value).and_then(|(kind, value)| Progress::read(kind, value))
}

impl Serialize for OpenAction {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Shown<'a> {
            key: &'a str,
            change: &'a str,
            image: &'a str,
            action: &'a str,
            state: &'a str,
            attempts: u32,
            next_attempt: String,
            wave: u32,
            #[serde(skip_serializing_if = "Option::is_none")]
            detail: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            waiting_for: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            gate: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            pool: Option<&'a str>,
        }
        Shown {
            key: &self.key,
            change: &self.change,
            image: &self.image,
            action: self.action.as_str(),
            state: self.shown_state(),
            attempts: self.attempts,
            next_attempt: builder_monitor_core::schedule::timestamp_millis(self.next_attempt),
            wave: self.wave,
            detail: self.detail.as_deref(),
            waiting_for: self.waiting_for.as_deref(),
            gate: self.gate,
            pool: self.placed.as_ref().map(|p| p.pool.as_str()),
        }
        .serialize(s)
    }
}

/// The actions contract: how actions are taken on, ended, requeued and decided, and what readers
/// see of them. The roll-out gates (the freeze, windows, waves, approval, one action per app image
/// at a time) are the core's, applied to the rows by `gate_rows`.
pub trait Actions {
    /// Takes up to `limit` due pending actions (of `kinds` only) that the roll-out gates
    /// let start, with the gates read in the same write where the backend has one: each becomes
    /// `running` with one more attempt, its process group forgotten. A stored target that does not
    /// read is taken on all the same, with the error as its target (see [`ClaimedAction::target`]).
    fn claim_actions(
        &self,
        now: DateTime<Utc>,
        limit: usize,
        kinds: Kinds,
        rollout: &Rollout,
    ) -> impl Future<Output = Result<Vec<ClaimedAction>, LedgerError>> + Send;

    /// Records the process group a `running` action's command runs in (nothing otherwise).
    fn record_process(&self, key: &str, group: ProcessGroup) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// Records a `running` action's progress (nothing otherwise): what a deploy is about to write
    /// and what the fields held before, before it writes. Answers whether it was recorded.
    fn record_progress(&self, key: &str, progress: Progress) -> impl Future<Output = Result<bool, LedgerError>> + Send;

    /// Marks a finished action as holding its image ([`ImageHold`]), with its events, in one
    /// write. Answers whether it did (not when the action is unknown or released).
    fn hold_image(&self, hold: ImageHold<'_>) -> impl Future<Output = Result<bool, LedgerError>> + Send;

    /// Records actions outside a check's commit, as a change's are (older actions of the image
    /// that have not started yield; one recorded already stays as it is): the first of a change's
    /// planned actions, ahead of its commit, and those asked for by hand (a `deploy` of a chosen
    /// digest). A ledger that keeps actions per watch puts them in `entry`'s (the moved watch's,
    /// with the rest of its change), or by hand in their builder's.
    fn record_actions(
        &self,
        entry: Option<&str>,
        actions: Vec<NewAction>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// Records an attempt's end in one write, if the action is still `running`: its state, detail
    /// and output tail (a retry also its next attempt), its events and their outbox rows, its tag
    /// move, and the hold of the change's later waves; its tag intent is closed unless
    /// `keep_intent`. A retry re-checks first: once a newer change has an action for the image,
    /// it ends `superseded` (`superseded by change …: detail`), not `pending`. Answers the state
    /// recorded; `None`: the action was not running (its events and tag move are still recorded).
    fn finish_action(
        &self,
        end: ActionEnd<'_>,
    ) -> impl Future<Output = Result<Option<ActionState>, LedgerError>> + Send;

    /// When the next pending action (of `kinds`) may start by the roll-out gates: none
    /// while frozen or while every action waits for a lower wave, the next window's opening while
    /// all windows are closed.
    fn next_action_at(
        &self,
        kinds: Kinds,
        rollout: &Rollout,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Option<DateTime<Utc>>, LedgerError>> + Send;

    /// Actions `running` now (a cluster may be carrying them out for us), with their targets (as
    /// [`Actions::claim_actions`] reads them) and process groups.
    fn running_actions(&self) -> impl Future<Output = Result<Vec<ClaimedAction>, LedgerError>> + Send;

    /// Every `running` action back to `pending` (its attempt stays counted): those a process that
    /// died left. Answers their keys.
    fn requeue_running(&self) -> impl Future<Output = Result<Vec<String>, LedgerError>> + Send;

    /// These actions, if still `running`, back to `pending` (their attempts stay counted).
    fn requeue_actions(&self, keys: Vec<String>) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// The most recently updated actions, any state, at most `limit`.
    fn actions(&self, limit: usize) -> impl Future<Output = Result<Vec<ActionRecord>, LedgerError>> + Send;

    /// The newest action (by creation) of `kind` of each image, any state, with its target: what
    /// `status` shows of each image's deploys, however long ago the last one was. By image.
    fn latest_actions(&self, kind: ActionKind) -> impl Future<Output = Result<Vec<LatestAction>, LedgerError>> + Send;

    /// Actions not finished yet (pending, running, held, awaiting approval), oldest first (then by
    /// wave and key); `detail` only on held ones.
    fn open_actions(&self) -> impl Future<Output = Result<Vec<OpenAction>, LedgerError>> + Send;

    /// Every action of one change, any state, by wave (then age and key).
    fn change_actions(&self, change_id: &str) -> impl Future<Output = Result<Vec<ActionRecord>, LedgerError>> + Send;

    /// Every action of one change as the roll-out gates see it ([`ActionRecord::gate_action`]),
    /// in [`Actions::change_actions`]' order: what `status` and the open-actions metric read of a
    /// change each time, without each action's detail, output and progress (a fleet's change holds
    /// thousands of actions).
    fn change_gates(&self, change_id: &str) -> impl Future<Output = Result<Vec<GateAction>, LedgerError>> + Send;

    /// Applies `verdict` to a change's actions (one image's only, with `image`) in one write: each
    /// it concerns moves to [`Verdict::next_state`]; an approval or rejection records `by` and when
    /// (to the second); a release marks every action of the change released, whatever its state,
    /// so the later waves stop waiting for them. Answers the actions it moved.
    fn decide(
        &self,
        change_id: &str,
        image: Option<&str>,
        verdict: Verdict,
        by: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<Decided>, LedgerError>> + Send;

    /// The target of the newest succeeded action of `kind` for `image` (what the app was last built
    /// or rebased with); one that does not read is [`LedgerError::Corrupt`].
    fn last_succeeded_target(
        &self,
        image: &str,
        kind: ActionKind,
    ) -> impl Future<Output = Result<Option<ActionTarget>, LedgerError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn action(state: ActionState, needs_approval: bool, decided_by: Option<&str>) -> ActionRecord {
        let t = builder_monitor_core::schedule::parse_timestamp("2026-12-01T09:00:00Z").unwrap();
        ActionRecord {
            key: "k".into(),
            change: "c".into(),
            image: "app".into(),
            action: builder_monitor_core::plan::ActionKind::Rebuild,
            state,
            attempts: 0,
            next_attempt: t,
            detail: None,
            output_tail: None,
            updated: t,
            wave: 1,
            needs_approval,
            released: false,
            decided_by: decided_by.map(str::to_string),
            decided_at: None,
            created: t,
            progress: None,
            holds: false,
            expedited: Expedited::default(),
        }
    }

    /// Each verdict moves only the states it is about; a held action keeps its approval question.
    #[test]
    fn verdicts_move_only_the_states_they_concern() {
        use ActionState::*;
        use Verdict::*;
        let cases = [
            (Approve, action(AwaitingApproval, true, None), Some(Pending)),
            (Approve, action(Held, true, None), Some(Held)),
            (Approve, action(Held, true, Some("bob")), None),
            (Approve, action(Held, false, None), None),
            (Approve, action(Pending, false, None), None),
            (Approve, action(Rejected, true, Some("bob")), None),
            (Reject, action(AwaitingApproval, true, None), Some(Rejected)),
            (Reject, action(Held, true, None), Some(Rejected)),
            (Reject, action(Held, false, None), None),
            (Reject, action(Running, false, None), None),
            (Release, action(Held, false, None), Some(Pending)),
            (Release, action(Held, true, None), Some(AwaitingApproval)),
            (Release, action(Held, true, Some("bob")), Some(Pending)),
            (Release, action(AwaitingApproval, true, None), None),
            (Release, action(Failed, false, None), None),
        ];
        for (verdict, a, expected) in cases {
            assert_eq!(
                verdict.next_state(&a),
                expected,
                "{} on {} (approval {}, decided {:?})",
                verdict.as_str(),
                a.state,
                a.needs_approval,
                a.decided_by
            );
        }
    }
}
