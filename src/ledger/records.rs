//! The ledger's records: what a check, an action and a delivery put in and what readers get back.
//! Times are `DateTime<Utc>`; each backend turns them into text where it stores them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{LedgerError, time};
use builder_monitor_core::cnb::{Change, ChangeKind, PinnedMetadata};
use builder_monitor_core::event::Event;
use builder_monitor_core::plan::{ActionKind, ActionTarget};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchKind {
    Builder,
    RunImage,
}

impl WatchKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchKind::Builder => "builder",
            WatchKind::RunImage => "run_image",
        }
    }
}

/// The current pin of a watch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PinRecord {
    pub digest: String,
    pub reference: String,
    pub media_type: String,
    pub platforms: BTreeMap<String, String>,
    #[serde(with = "time::seconds")]
    pub since: DateTime<Utc>,
}

/// Everything the ledger knows about one watch.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct WatchRecord {
    pub name: String,
    pub kind: WatchKind,
    pub image: String,
    pub pin: Option<PinRecord>,
    pub metadata: Option<serde_json::Value>,
    #[serde(with = "time::seconds")]
    pub first_seen: DateTime<Utc>,
    #[serde(default, with = "time::seconds_opt")]
    pub last_check: Option<DateTime<Utc>>,
    pub last_ok: Option<bool>,
    pub last_error_reason: Option<String>,
    pub last_error: Option<String>,
    #[serde(default, with = "time::seconds_opt")]
    pub last_change: Option<DateTime<Utc>>,
    pub consecutive_failures: u32,
    #[serde(default, with = "time::seconds_opt")]
    pub failing_since: Option<DateTime<Utc>>,
    /// A new digest held back by `settle`.
    pub pending: Option<HeldDigest>,
    /// Accepted moves so far; the next change's sequence number is this plus one.
    pub moves: u64,
    /// Runs of failed checks of this image so far (a failure after a success starts one): the
    /// current or last run's number, which its `check.failed` and `check.recovered` ids name.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failure_runs: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl WatchRecord {
    /// The CNB metadata recorded with the pin, if any could be read.
    pub fn pinned_metadata(&self) -> Option<PinnedMetadata> {
        // From the value in place: no copy of it first.
        PinnedMetadata::deserialize(self.metadata.as_ref()?).ok()
    }
}

/// A new pin to record.
#[derive(Debug, Clone)]
pub struct PinUpdate {
    pub digest: String,
    pub reference: String,
    pub media_type: String,
    pub platforms: BTreeMap<String, String>,
    pub metadata: Option<serde_json::Value>,
}

/// An accepted move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ChangeRecord {
    pub id: String,
    pub watch: String,
    pub seq: u64,
    pub previous: String,
    pub current: String,
    pub previous_reference: String,
    pub current_reference: String,
    pub change: Change,
    pub rollback: bool,
    #[serde(with = "time::seconds")]
    pub detected: DateTime<Utc>,
}

/// Why a check failed: its reason code (`tag_missing`, …) and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckFailure {
    pub reason: String,
    pub message: String,
}

/// A new digest held back by `settle`, and since when it has been seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldDigest {
    pub digest: String,
    pub since: DateTime<Utc>,
}

/// Stored as the pair `[digest, since]` the Kubernetes ledger has always kept.
impl Serialize for HeldDigest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (&self.digest, builder_monitor_core::schedule::timestamp(self.since)).serialize(s)
    }
}

impl<'de> Deserialize<'de> for HeldDigest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (digest, since) = <(String, String)>::deserialize(d)?;
        let since = builder_monitor_core::schedule::parse_timestamp(&since)
            .ok_or_else(|| serde::de::Error::custom(format!("not an RFC 3339 time: {since:?}")))?;
        Ok(HeldDigest { digest, since })
    }
}

/// One row of the alert outbox: an event and an alert it goes to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeliveryKey {
    pub event: String,
    pub alert: String,
}

impl DeliveryKey {
    pub fn new(event: impl Into<String>, alert: impl Into<String>) -> Self {
        DeliveryKey { event: event.into(), alert: alert.into() }
    }
}

/// A digest a watch was pinned to, and when it was first seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedDigest {
    pub digest: String,
    pub first_seen: DateTime<Utc>,
    /// The digests of its platform manifests (an index's; empty for a single manifest, and for
    /// pins recorded before the ledger kept them).
    pub platforms: Vec<String>,
}

/// Where an action is; it lives in the core, where the roll-out gate reads it.
pub use builder_monitor_core::rollout::ActionState;

/// Where an alert delivery is; stored as its snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    Pending,
    Sent,
    /// Given up on (a dead letter).
    Dead,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Sent => "sent",
            DeliveryState::Dead => "dead",
        }
    }
}

/// The outcome of one check, committed atomically.
#[derive(Debug, Clone)]
pub struct CheckRecord {
    pub watch: String,
    pub kind: WatchKind,
    pub image: String,
    /// When the check ran, to the second (as events and `status` show it).
    pub time: DateTime<Utc>,
    pub outcome: Result<(), CheckFailure>,
    pub pin: Option<PinUpdate>,
    /// Digest held back by `settle`; `None` clears it.
    pub pending: Option<HeldDigest>,
    pub change: Option<ChangeRecord>,
    pub events: Vec<Event>,
    /// The outbox rows of the events above.
    pub deliveries: Vec<DeliveryKey>,
    /// Rebases and rebuilds planned for the change above.
    pub actions: Vec<NewAction>,
    /// Changes (and pinned digests) kept for this watch.
    pub history: usize,
}

impl CheckRecord {
    /// Whether committing this record over `before` (the watch's entry) would change nothing but
    /// its `last_check`: a successful check that found what the ledger holds. Such a check is kept
    /// as a [`Touch`] and written with the next batch, not at once.
    pub fn only_moves_time(&self, before: Option<&WatchRecord>) -> bool {
        let Some(b) = before else { return false };
        self.is_quiet()
            && b.kind == self.kind
            && b.image == self.image
            && b.last_check.is_some()
            && b.last_ok == Some(true)
            && b.consecutive_failures == 0
            && b.failing_since.is_none()
            && b.last_error_reason.is_none()
            && b.last_error.is_none()
            && b.pending == self.pending
    }

    /// A successful check that adds nothing: no pin, change, event, delivery or action.
    pub fn is_quiet(&self) -> bool {
        self.outcome.is_ok()
            && self.pin.is_none()
            && self.change.is_none()
            && self.events.is_empty()
            && self.deliveries.is_empty()
            && self.actions.is_empty()
    }
}

/// The time of a successful check that changed nothing else, not yet written: the ledger keeps
/// these in memory and writes them in batches (see `Ledger::flush_touches`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Touch {
    pub watch: String,
    /// The watch's image when checked: a touch never lands on an entry of another image.
    pub image: String,
    pub time: DateTime<Utc>,
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
    pub target: serde_json::Value,
    /// Its roll-out wave (`[[images]] wave`): it starts once the change's lower waves succeeded.
    pub wave: u32,
    /// Recorded as `awaiting_approval`: it starts only once a person approves it.
    pub needs_approval: bool,
}

impl NewAction {
    /// An action to record for `target`: a target that cannot be encoded is an error here, never
    /// a null in the ledger.
    pub fn new(
        key: String,
        change_id: String,
        image: String,
        kind: ActionKind,
        target: &ActionTarget,
    ) -> Result<Self, LedgerError> {
        let target =
            serde_json::to_value(target).map_err(|error| LedgerError::Encode { what: "action target", error })?;
        Ok(NewAction { key, change_id, image, kind, target, wave: 1, needs_approval: false })
    }

    /// The same action in roll-out `wave`, waiting for a person when `needs_approval`.
    pub fn gated(self, wave: u32, needs_approval: bool) -> Self {
        NewAction { wave, needs_approval, ..self }
    }
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
}

impl Verdict {
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

/// What moved an app image's tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TagMoveKind {
    Rebase,
    Rebuild,
    /// `builder-monitor rollback`.
    Rollback,
}

impl TagMoveKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TagMoveKind::Rebase => "rebase",
            TagMoveKind::Rebuild => "rebuild",
            TagMoveKind::Rollback => "rollback",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Rebase, Self::Rebuild, Self::Rollback].into_iter().find(|k| k.as_str() == text)
    }
}

impl From<ActionKind> for TagMoveKind {
    fn from(kind: ActionKind) -> Self {
        match kind {
            ActionKind::Rebase => TagMoveKind::Rebase,
            ActionKind::Rebuild => TagMoveKind::Rebuild,
        }
    }
}

/// One move of an app image's tag: the digest before and after, so `rollback` can put it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagMove {
    /// The `[[images]]` name.
    pub image: String,
    /// The tag, `registry/repository:tag`.
    pub reference: String,
    pub kind: TagMoveKind,
    /// The action's key; none for a rollback.
    pub action: Option<String>,
    /// None when the tag did not exist before, or could not be read.
    pub before: Option<String>,
    /// None when it could not be read after (a runner's push that the daemon did not see).
    pub after: Option<String>,
    #[serde(with = "time::millis")]
    pub time: DateTime<Utc>,
}

/// A tag write announced before it happens (write-ahead): what the tag should hold now and what
/// it will hold after, so a crash between the write and its record is completed or retried from
/// here, never forgotten. One per app image at a time (its key), since one action per image runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagIntent {
    /// The `[[images]]` name.
    pub image: String,
    /// The tag, `registry/repository:tag`.
    pub reference: String,
    pub kind: TagMoveKind,
    /// The action's key; none for a rollback.
    pub action: Option<String>,
    /// The digest the tag holds before the write; `None` when it did not exist (or could not be read).
    pub expected: Option<String>,
    /// The digest the write puts there; `None` when a runner's command writes it (a build), whose
    /// digest is only known once it has written.
    pub new: Option<String>,
    #[serde(with = "time::millis")]
    pub time: DateTime<Utc>,
}

impl TagIntent {
    /// The move this intent makes once the tag is seen holding `after`.
    pub fn completed(&self, after: Option<String>, time: DateTime<Utc>) -> TagMove {
        TagMove {
            image: self.image.clone(),
            reference: self.reference.clone(),
            kind: self.kind,
            action: self.action.clone(),
            before: self.expected.clone(),
            after,
            time,
        }
    }
}

/// Whether a tag write may go ahead (`begin_tag_write`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteGrant {
    /// The intent is recorded: write.
    Granted,
    /// A newer change has an action for the same image: this one must not write (the change's id).
    Superseded { by: String },
    /// The action is no longer `running` (it was requeued or finished elsewhere): nothing written.
    NotRunning,
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
    pub target: serde_json::Value,
    /// The local command's process group, once the exec runner started it.
    pub process: Option<ProcessGroup>,
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
    pub action: String,
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
}

impl ActionRecord {
    /// As the roll-out gates see it.
    pub fn gate_action(&self) -> builder_monitor_core::rollout::GateAction {
        builder_monitor_core::rollout::GateAction {
            key: self.key.clone(),
            image: self.image.clone(),
            wave: self.wave,
            state: self.state,
            released: self.released,
            created: self.created,
        }
    }
}

/// An action still to run or running (`status`'s `pending`). Shown with the state `waiting` when
/// it is pending and a roll-out gate keeps it back, with the reason in `waiting_for`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAction {
    pub key: String,
    pub change: String,
    pub image: String,
    pub action: String,
    pub state: ActionState,
    pub attempts: u32,
    pub next_attempt: DateTime<Utc>,
    pub wave: u32,
    /// Why it is held (`held: …`), when it is.
    pub detail: Option<String>,
    /// Why it does not start now (`wave 1 waits for wave 0: petclinic running`); set by `status`.
    pub waiting_for: Option<String>,
    /// What keeps it: `frozen`, `window`, `wave`, `in_flight`, `approval` or `held`; set by `status`.
    pub gate: Option<&'static str>,
}

impl OpenAction {
    /// The state people see: `waiting` for a pending action a gate keeps back.
    pub fn shown_state(&self) -> &'static str {
        match (self.state, &self.gate) {
            (ActionState::Pending, Some(_)) => "waiting",
            (state, _) => state.as_str(),
        }
    }
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
        }
        Shown {
            key: &self.key,
            change: &self.change,
            image: &self.image,
            action: &self.action,
            state: self.shown_state(),
            attempts: self.attempts,
            next_attempt: builder_monitor_core::schedule::timestamp_millis(self.next_attempt),
            wave: self.wave,
            detail: self.detail.as_deref(),
            waiting_for: self.waiting_for.as_deref(),
            gate: self.gate,
        }
        .serialize(s)
    }
}

/// A delivery to attempt now.
#[derive(Debug, Clone)]
pub struct DueDelivery {
    pub event: Event,
    pub alert: String,
    pub attempts: u32,
    pub created: DateTime<Utc>,
    /// Its lane's subject ([`subject_key`](builder_monitor_core::event::subject_key) of the event):
    /// one send at a time per alert and subject.
    pub subject: String,
}

/// What an attempt did to a delivery.
#[derive(Debug, Clone)]
pub enum DeliveryUpdate {
    Sent { status: String },
    Retry { next_attempt: DateTime<Utc>, status: String },
    Dead { status: String },
}

/// A delivery not made yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingDelivery {
    pub event: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub alert: String,
    pub attempts: u32,
    #[serde(with = "time::millis")]
    pub next_attempt: DateTime<Utc>,
    pub last_status: Option<String>,
}

/// A delivery given up on (`status`'s `dead_letters`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetter {
    pub event: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub alert: String,
    pub attempts: u32,
    pub last_status: Option<String>,
    #[serde(with = "time::millis")]
    pub time: DateTime<Utc>,
}

/// A recorded event with its position in the ledger.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub seq: i64,
    pub event: Event,
}

/// Parses a change kind read back from the ledger.
pub fn parse_kind(text: &str) -> ChangeKind {
    ChangeKind::parse(text).unwrap_or(ChangeKind::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(state: ActionState, needs_approval: bool, decided_by: Option<&str>) -> ActionRecord {
        let t = builder_monitor_core::schedule::parse_timestamp("2026-12-01T09:00:00Z").unwrap();
        ActionRecord {
            key: "k".into(),
            change: "c".into(),
            image: "app".into(),
            action: "rebuild".into(),
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
