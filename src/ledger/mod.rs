//! The ledger: pins, digest history, changes, events, deliveries and actions. Two backends keep it
//! — embedded SQLite, or ConfigMaps on Kubernetes — with the same operations and guarantees.

mod kubernetes;
mod lock;
mod sqlite;
pub mod time;

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, broadcast};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use kubernetes::KubeLedger;
pub use lock::WriterLock;
pub use sqlite::SqliteLedger;

use builder_monitor_core::cnb::{Change, ChangeKind, PinnedMetadata};
use builder_monitor_core::event::Event;
use builder_monitor_core::plan::{ActionKind, ActionTarget};

/// Each variant's message includes its cause, which is therefore not also exposed as `source()`:
/// the daemon logs these with `Display`, and a chain printer would show the cause twice.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("cannot encode the {what}: {error}")]
    Encode { what: &'static str, error: serde_json::Error },
    #[error("cannot open the ledger {}: {error}", path.display())]
    Open { path: std::path::PathBuf, error: rusqlite::Error },
    #[error("the ledger {} has schema version {found}, newer than this builder-monitor understands ({supported}); upgrade builder-monitor", path.display())]
    NewerSchema { path: std::path::PathBuf, found: i64, supported: i64 },
    #[error("no ledger at {} yet: the daemon creates it on its first start", path.display())]
    Missing { path: std::path::PathBuf },
    #[error("the ledger {} has schema version {found}, older than this builder-monitor's ({supported}); start the daemon (`run`), which migrates it, then try again", path.display())]
    OlderSchema { path: std::path::PathBuf, found: i64, supported: i64 },
    #[error("the ledger {} is in use by another builder-monitor daemon ({holder}); only one `run` or `run --once` may write a ledger at a time", path.display())]
    Locked { path: std::path::PathBuf, holder: String },
    #[error("cannot lock the ledger: {}: {error}", path.display())]
    Lock { path: std::path::PathBuf, error: std::io::Error },
    #[error("ledger on Kubernetes: {0}")]
    Kubernetes(kube::Error),
    #[error("ledger on Kubernetes: {0} was changed by another writer {1} times in a row; giving up this write")]
    Contended(String, u32),
    #[error("ledger: {0}")]
    Sqlite(rusqlite::Error),
    #[error("ledger holds an unreadable {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
    #[error("ledger worker stopped: {0}")]
    Worker(tokio::task::JoinError),
}

impl From<rusqlite::Error> for LedgerError {
    fn from(error: rusqlite::Error) -> Self {
        LedgerError::Sqlite(error)
    }
}

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
}

impl WatchRecord {
    /// The CNB metadata recorded with the pin, if any could be read.
    pub fn pinned_metadata(&self) -> Option<PinnedMetadata> {
        serde_json::from_value(self.metadata.clone()?).ok()
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
}

/// Where an action is; stored as its snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionState {
    Pending,
    Running,
    Succeeded,
    Failed,
    /// A newer change's action for the same image replaced it before it started.
    Superseded,
}

impl ActionState {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionState::Pending => "pending",
            ActionState::Running => "running",
            ActionState::Succeeded => "succeeded",
            ActionState::Failed => "failed",
            ActionState::Superseded => "superseded",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Pending, Self::Running, Self::Succeeded, Self::Failed, Self::Superseded]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

impl std::fmt::Display for ActionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

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
        Ok(NewAction { key, change_id, image, kind, target })
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
}

/// An action still to run or running (`status`'s `pending`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpenAction {
    pub change: String,
    pub image: String,
    pub action: String,
    pub state: ActionState,
    pub attempts: u32,
    #[serde(with = "time::millis")]
    pub next_attempt: DateTime<Utc>,
}

/// A delivery to attempt now.
#[derive(Debug, Clone)]
pub struct DueDelivery {
    pub event: Event,
    pub alert: String,
    pub attempts: u32,
    pub created: DateTime<Utc>,
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

/// The ledger the daemon writes to: embedded SQLite, or ConfigMaps on Kubernetes. Clones share
/// the backend and the signals of new work.
#[derive(Clone)]
pub struct Ledger {
    backend: Backend,
    signals: Arc<Signals>,
}

#[derive(Clone)]
#[allow(clippy::large_enum_variant)] // one per daemon, cloned rarely; boxing buys nothing
enum Backend {
    Sqlite(SqliteLedger),
    Kubernetes(KubeLedger),
}

/// Notified by the writes that add work, so the workers that do it wake (a notification made
/// while no worker waits is kept for the next wait).
struct Signals {
    deliveries: Arc<Notify>,
    actions: Arc<Notify>,
    /// The name of each watch whose check was committed, in commit order.
    commits: broadcast::Sender<String>,
}

/// Committed checks a subscriber may fall behind by before it is told it lagged.
const COMMITS_KEPT: usize = 1024;

impl Default for Signals {
    fn default() -> Self {
        Signals { deliveries: Arc::default(), actions: Arc::default(), commits: broadcast::channel(COMMITS_KEPT).0 }
    }
}

/// Calls the same method on whichever backend this is.
macro_rules! dispatch {
    ($self:ident, $method:ident ( $($arg:expr),* )) => {
        match &$self.backend {
            Backend::Sqlite(l) => l.$method($($arg),*).await,
            Backend::Kubernetes(l) => l.$method($($arg),*).await,
        }
    };
}

impl Ledger {
    fn with(backend: Backend) -> Self {
        Ledger { backend, signals: Arc::default() }
    }

    /// The embedded SQLite ledger at `path`.
    pub fn open(path: &std::path::Path) -> Result<Self, LedgerError> {
        SqliteLedger::open(path).map(|l| Ledger::with(Backend::Sqlite(l)))
    }

    /// The existing SQLite ledger at `path`, read-only (see [`SqliteLedger::open_read_only`]).
    pub fn open_read_only(path: &std::path::Path) -> Result<Self, LedgerError> {
        SqliteLedger::open_read_only(path).map(|l| Ledger::with(Backend::Sqlite(l)))
    }

    /// The ledger in ConfigMaps of `namespace`.
    /// The ledger in ConfigMaps; `now` (the caller's clock) seeds the event sequence numbers.
    pub fn kubernetes(client: kube::Client, namespace: &str, now: DateTime<Utc>) -> Self {
        Ledger::with(Backend::Kubernetes(KubeLedger::new(client, namespace, now)))
    }

    /// Where the ledger lives, for people.
    pub fn location(&self) -> String {
        match &self.backend {
            Backend::Sqlite(l) => l.path().display().to_string(),
            Backend::Kubernetes(l) => l.location(),
        }
    }

    /// Notified whenever a write added deliveries to the outbox (the alert dispatcher waits on it).
    pub fn new_deliveries(&self) -> Arc<Notify> {
        self.signals.deliveries.clone()
    }

    /// Notified whenever a write added actions (the runner waits on it).
    pub fn new_actions(&self) -> Arc<Notify> {
        self.signals.actions.clone()
    }

    /// The name of each watch whose check is committed from now on (a run image watch: `run:…`).
    /// A receiver that falls behind by more than `COMMITS_KEPT` names gets `Lagged`: names were
    /// dropped, so it re-reads everything it follows.
    pub fn commits(&self) -> broadcast::Receiver<String> {
        self.signals.commits.subscribe()
    }

    fn signal(&self, deliveries: bool, actions: bool) {
        if deliveries {
            self.signals.deliveries.notify_one();
        }
        if actions {
            self.signals.actions.notify_one();
        }
    }

    pub async fn ping(&self) -> Result<(), LedgerError> {
        dispatch!(self, ping())
    }

    pub async fn watch(&self, name: &str) -> Result<Option<WatchRecord>, LedgerError> {
        dispatch!(self, watch(name))
    }

    pub async fn watches(&self) -> Result<Vec<WatchRecord>, LedgerError> {
        dispatch!(self, watches())
    }

    /// Whether `digest` was ever pinned for this watch (within the kept history).
    pub async fn has_pinned(&self, watch: &str, digest: &str) -> Result<bool, LedgerError> {
        dispatch!(self, has_pinned(watch, digest))
    }

    /// The most recently pinned digests of a watch and when each was first seen, newest first.
    pub async fn history(&self, watch: &str, limit: usize) -> Result<Vec<PinnedDigest>, LedgerError> {
        dispatch!(self, history(watch, limit))
    }

    /// Commits a check's outcome — watch state, pin, history, change, events, deliveries and
    /// actions — in one write.
    pub async fn commit(&self, record: CheckRecord) -> Result<(), LedgerError> {
        let (deliveries, actions) = (!record.deliveries.is_empty(), !record.actions.is_empty());
        let watch = record.watch.clone();
        dispatch!(self, commit(record))?;
        self.signal(deliveries, actions);
        // No receiver (no publisher) is no error.
        let _ = self.signals.commits.send(watch);
        Ok(())
    }

    /// Most recent changes first; all watches when `watch` is `None`.
    pub async fn changes(&self, watch: Option<&str>, limit: usize) -> Result<Vec<ChangeRecord>, LedgerError> {
        dispatch!(self, changes(watch, limit))
    }

    /// Events recorded after `after_seq`, oldest first.
    pub async fn events_after(&self, after_seq: i64, limit: usize) -> Result<Vec<StoredEvent>, LedgerError> {
        dispatch!(self, events_after(after_seq, limit))
    }

    /// The alerts each of these events has a delivery for, in any state.
    pub async fn deliveries_of(&self, events: Vec<String>) -> Result<Vec<DeliveryKey>, LedgerError> {
        dispatch!(self, deliveries_of(events))
    }

    /// The newest events of these types (`check.failed`, …), newest first.
    pub async fn latest_events(&self, types: Vec<String>, limit: usize) -> Result<Vec<StoredEvent>, LedgerError> {
        dispatch!(self, latest_events(types, limit))
    }

    /// Records events (and their outbox rows) outside a check, e.g. `build.started`, at `now`.
    pub async fn record_events(
        &self,
        watch: &str,
        events: Vec<Event>,
        deliveries: Vec<DeliveryKey>,
        history: usize,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        let added = !deliveries.is_empty();
        dispatch!(self, record_events(watch, events, deliveries, history, now))?;
        self.signal(added, false);
        Ok(())
    }

    /// Deliveries due at `now`, oldest first, with their events.
    pub async fn due_deliveries(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<DueDelivery>, LedgerError> {
        dispatch!(self, due_deliveries(now, limit))
    }

    /// When the next pending delivery not in `exclude` (those in flight) is due.
    pub async fn next_delivery_at(&self, exclude: &[DeliveryKey]) -> Result<Option<DateTime<Utc>>, LedgerError> {
        dispatch!(self, next_delivery_at(exclude))
    }

    /// Moves a delivery forward after an attempt that ended at `now`.
    pub async fn update_delivery(
        &self,
        event: &str,
        alert: &str,
        update: DeliveryUpdate,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        dispatch!(self, update_delivery(event, alert, update, now))
    }

    /// Deliveries still to make (`status`).
    pub async fn pending_deliveries(&self) -> Result<Vec<PendingDelivery>, LedgerError> {
        dispatch!(self, pending_deliveries())
    }

    /// Deliveries that were given up on.
    pub async fn dead_letters(&self) -> Result<Vec<DeadLetter>, LedgerError> {
        dispatch!(self, dead_letters())
    }

    /// Takes due pending actions: each becomes `running` with one more attempt.
    pub async fn claim_actions(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<ClaimedAction>, LedgerError> {
        dispatch!(self, claim_actions(now, limit, None))
    }

    /// Like [`Ledger::claim_actions`], of one kind only when `kind` is given (the others stay pending).
    pub async fn claim_actions_of(
        &self,
        now: DateTime<Utc>,
        limit: usize,
        kind: Option<ActionKind>,
    ) -> Result<Vec<ClaimedAction>, LedgerError> {
        dispatch!(self, claim_actions(now, limit, kind))
    }

    /// Records the process group a `running` action's command runs in.
    pub async fn record_process(&self, key: &str, group: ProcessGroup) -> Result<(), LedgerError> {
        dispatch!(self, record_process(key, group))
    }

    /// Records an attempt's end and its events (with their outbox rows) in one write.
    pub async fn finish_action(&self, end: ActionEnd<'_>) -> Result<(), LedgerError> {
        let added = !end.deliveries.is_empty();
        dispatch!(self, finish_action(end))?;
        self.signal(added, false);
        Ok(())
    }

    /// When the next pending action is due.
    pub async fn next_action_at(&self) -> Result<Option<DateTime<Utc>>, LedgerError> {
        dispatch!(self, next_action_at(None))
    }

    /// When the next pending action of `kind` (any kind when `None`) is due.
    pub async fn next_action_of(&self, kind: Option<ActionKind>) -> Result<Option<DateTime<Utc>>, LedgerError> {
        dispatch!(self, next_action_at(kind))
    }

    /// Actions `running` now (a cluster may be carrying them out for us).
    pub async fn running_actions(&self) -> Result<Vec<ClaimedAction>, LedgerError> {
        dispatch!(self, running_actions())
    }

    /// Actions left `running` by a process that died: back to `pending` (the attempt is counted).
    pub async fn requeue_running(&self) -> Result<Vec<String>, LedgerError> {
        dispatch!(self, requeue_running())
    }

    /// These actions, if still `running`, back to `pending` (the attempt is counted).
    pub async fn requeue_actions(&self, keys: Vec<String>) -> Result<(), LedgerError> {
        dispatch!(self, requeue_actions(keys))
    }

    /// Records a tag move made outside an action (`rollback`), under `watch` (the image's builder),
    /// keeping the newest `history` moves of the image.
    pub async fn record_tag_move(&self, watch: &str, tag_move: TagMove, history: usize) -> Result<(), LedgerError> {
        dispatch!(self, record_tag_move(watch, tag_move, history))
    }

    /// The newest tag moves first, of one `[[images]]` name or of all.
    pub async fn tag_moves(&self, image: Option<&str>, limit: usize) -> Result<Vec<TagMove>, LedgerError> {
        dispatch!(self, tag_moves(image, limit))
    }

    /// The most recently updated actions, any state.
    pub async fn actions(&self, limit: usize) -> Result<Vec<ActionRecord>, LedgerError> {
        dispatch!(self, actions(limit))
    }

    /// Actions not finished yet (pending or running), oldest first.
    pub async fn open_actions(&self) -> Result<Vec<OpenAction>, LedgerError> {
        dispatch!(self, open_actions())
    }
}
