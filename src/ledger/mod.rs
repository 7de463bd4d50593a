//! The ledger: pins, digest history, changes, events, deliveries and actions. Two backends keep it
//! — embedded SQLite, or ConfigMaps on Kubernetes — with the same operations and guarantees.

mod kubernetes;
mod lock;
mod records;
mod sqlite;
pub mod time;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, broadcast};

pub use kubernetes::KubeLedger;
pub use lock::WriterLock;
pub use records::*;
pub use sqlite::SqliteLedger;

use builder_monitor_core::event::Event;
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::rollout::{self, Freeze, GateAction, Rollout, Wait};

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

/// The ledger the daemon writes to: embedded SQLite, or ConfigMaps on Kubernetes. Clones share
/// the backend and the signals of new work.
#[derive(Clone)]
pub struct Ledger {
    backend: Backend,
    signals: Arc<Signals>,
    /// Unchanged checks not written yet, by watch: this ledger's reads show their times.
    touches: Arc<Mutex<BTreeMap<String, Touch>>>,
    /// How often the daemon writes them.
    touch_flush: Duration,
}

/// Touches per write of [`Ledger::flush_touches`]: a fleet's 10,000 are written in ten
/// transactions, so a flush never copies all of them at once (~1.5 MiB).
pub const TOUCH_BATCH: usize = 1_000;

/// How often the daemon writes the times of unchanged checks ([`Ledger::flush_touches`]): what
/// a crash can lose, and how far behind the daemon another process reading the ledger can be.
pub const TOUCH_FLUSH: Duration = Duration::from_secs(30);

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

/// The events of a roll-out state change (a freeze, or its end), made inside the write that
/// records it from the change's sequence number in the roll-out record (1 for the first freeze)
/// and the freeze in force before it. A write that met another may be redone, so it only builds.
pub type FreezeEvents = Arc<dyn Fn(u64, Option<&Freeze>) -> (Vec<Event>, Vec<DeliveryKey>) + Send + Sync>;

/// What a freeze request did.
#[derive(Debug, Clone)]
pub struct FreezeChange {
    /// The freeze in force before it.
    pub before: Option<Freeze>,
    /// The events it recorded: none when the state did not flip.
    pub events: Vec<Event>,
}

/// The events of the roll-out itself (`rollout.frozen`, `rollout.unfrozen`) are kept under this
/// name, beside the watches'.
pub const ROLLOUT_WATCH: &str = "rollout";

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
        Ledger { backend, signals: Arc::default(), touches: Arc::default(), touch_flush: TOUCH_FLUSH }
    }

    /// This ledger with the times of unchanged checks written every `period` instead of every
    /// [`TOUCH_FLUSH`] (tests).
    pub fn with_touch_flush(self, period: Duration) -> Self {
        Ledger { touch_flush: period, ..self }
    }

    /// How often the daemon writes the times of unchanged checks.
    pub fn touch_flush(&self) -> Duration {
        self.touch_flush
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

    /// Whether other processes write it too (the Kubernetes ledger: replicas, and the command
    /// line's approvals, releases and freezes), whose writes signal nothing here.
    pub fn is_shared(&self) -> bool {
        matches!(self.backend, Backend::Kubernetes(_))
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

    /// A watch's entry, with the time of its latest check even when that is not written yet.
    pub async fn watch(&self, name: &str) -> Result<Option<WatchRecord>, LedgerError> {
        let mut record = dispatch!(self, watch(name))?;
        if let Some(r) = record.as_mut() {
            self.overlay(r);
        }
        Ok(record)
    }

    /// Every watch's entry, as [`Ledger::watch`] reads it.
    pub async fn watches(&self) -> Result<Vec<WatchRecord>, LedgerError> {
        let mut records = dispatch!(self, watches())?;
        records.iter_mut().for_each(|r| self.overlay(r));
        Ok(records)
    }

    /// The entries of the watches whose last check failed (what a registry's outage state starts
    /// from), without reading the others: reading every entry of 10,000 pinned builders, metadata
    /// and all, held ~250 MiB at the first check after a restart.
    pub async fn failing_watches(&self) -> Result<Vec<WatchRecord>, LedgerError> {
        dispatch!(self, failing_watches())
    }

    /// Shows an unwritten touch's time on the entry it would be written to.
    fn overlay(&self, record: &mut WatchRecord) {
        let touches = self.touches.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = touches.get(&record.name)
            && t.image == record.image
            && record.last_ok == Some(true)
            && record.last_check.is_none_or(|c| c < t.time)
        {
            record.last_check = Some(t.time);
        }
    }

    /// The touches not written yet, but `except`'s.
    fn pending_touches(&self, except: Option<&str>) -> Vec<Touch> {
        let touches = self.touches.lock().unwrap_or_else(|e| e.into_inner());
        touches.values().filter(|t| Some(t.watch.as_str()) != except).cloned().collect()
    }

    /// Forgets written touches (not a newer one that came meanwhile).
    fn forget_touches<'a>(&self, written: impl IntoIterator<Item = &'a Touch>) {
        let mut touches = self.touches.lock().unwrap_or_else(|e| e.into_inner());
        for t in written {
            if touches.get(&t.watch).is_some_and(|pending| pending.time <= t.time) {
                touches.remove(&t.watch);
            }
        }
    }

    /// Writes the times of the unchanged checks kept in memory, [`TOUCH_BATCH`] watches per write
    /// (SQLite) or one write per watch (Kubernetes); answers how many. The daemon calls it every
    /// [`TOUCH_FLUSH`] and at shutdown; every other commit writes them too.
    pub async fn flush_touches(&self) -> Result<usize, LedgerError> {
        let mut written = 0;
        let mut after: Option<String> = None;
        loop {
            let batch: Vec<Touch> = {
                let touches = self.touches.lock().unwrap_or_else(|e| e.into_inner());
                let from = match &after {
                    Some(name) => std::ops::Bound::Excluded(name.as_str()),
                    None => std::ops::Bound::Unbounded,
                };
                touches
                    .range::<str, _>((from, std::ops::Bound::Unbounded))
                    .take(TOUCH_BATCH)
                    .map(|(_, t)| t.clone())
                    .collect()
            };
            let Some(last) = batch.last() else { return Ok(written) };
            after = Some(last.watch.clone());
            dispatch!(self, touch(&batch))?;
            self.forget_touches(&batch);
            written += batch.len();
            if batch.len() < TOUCH_BATCH {
                return Ok(written);
            }
        }
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
    /// actions — in one write, with the touches kept so far; a check that changed nothing but its
    /// time is kept as a touch instead (see [`CheckRecord::only_moves_time`]).
    pub async fn commit(&self, record: CheckRecord) -> Result<(), LedgerError> {
        // Only a quiet record can be a touch, so only it needs the entry to compare with.
        let before = if record.is_quiet() { self.watch(&record.watch).await? } else { None };
        self.commit_over(record, before.as_ref()).await
    }

    /// [`Ledger::commit`] for a caller that read the watch's entry (`before`, as [`Ledger::watch`]
    /// answered it) since its last commit: the check's own read, not another one.
    pub async fn commit_over(&self, record: CheckRecord, before: Option<&WatchRecord>) -> Result<(), LedgerError> {
        let watch = record.watch.clone();
        if record.only_moves_time(before) {
            let touch = Touch { watch: watch.clone(), image: record.image.clone(), time: record.time };
            self.touches.lock().unwrap_or_else(|e| e.into_inner()).insert(watch.clone(), touch);
            let _ = self.signals.commits.send(watch);
            return Ok(());
        }
        let (deliveries, actions) = (!record.deliveries.is_empty(), !record.actions.is_empty());
        let own = Touch { watch: watch.clone(), image: record.image.clone(), time: record.time };
        // The record supersedes its own watch's touch; the others ride along in the same write.
        let touches = self.pending_touches(Some(&watch));
        dispatch!(self, commit_touching(record, &touches))?;
        self.forget_touches(touches.iter().chain([&own]));
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

    /// Takes due pending actions (no roll-out gates but a freeze): each becomes `running` with one
    /// more attempt.
    pub async fn claim_actions(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<ClaimedAction>, LedgerError> {
        dispatch!(self, claim_actions(now, limit, None, &Rollout::default()))
    }

    /// Takes due pending actions that the roll-out gates let start (of one kind only when `kind` is
    /// given; the others stay pending): each becomes `running` with one more attempt.
    pub async fn claim_actions_of(
        &self,
        now: DateTime<Utc>,
        limit: usize,
        kind: Option<ActionKind>,
        rollout: &Rollout,
    ) -> Result<Vec<ClaimedAction>, LedgerError> {
        dispatch!(self, claim_actions(now, limit, kind, rollout))
    }

    /// Records the process group a `running` action's command runs in.
    pub async fn record_process(&self, key: &str, group: ProcessGroup) -> Result<(), LedgerError> {
        dispatch!(self, record_process(key, group))
    }

    /// Records an attempt's end and its events (with their outbox rows) in one write. Answers the
    /// state recorded (`None`: the action was not running): a retry that a newer change
    /// superseded meanwhile ends `superseded`, not `pending`.
    pub async fn finish_action(&self, end: ActionEnd<'_>) -> Result<Option<ActionState>, LedgerError> {
        let added = !end.deliveries.is_empty();
        let ended = dispatch!(self, finish_action(end))?;
        self.signal(added, false);
        Ok(ended)
    }

    /// When the next pending action is due (no roll-out gates).
    pub async fn next_action_at(&self, now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>, LedgerError> {
        dispatch!(self, next_action_at(None, &Rollout::default(), now))
    }

    /// When the next pending action of `kind` (any kind when `None`) may start, by the roll-out
    /// gates: none while frozen or while every action waits for a lower wave, the next window's
    /// opening while all windows are closed.
    pub async fn next_action_of(
        &self,
        kind: Option<ActionKind>,
        rollout: &Rollout,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, LedgerError> {
        dispatch!(self, next_action_at(kind, rollout, now))
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

    /// Records a tag write before it happens (write-ahead), under `watch` when it has no action
    /// (`rollback`: the image's builder). Refused, writing nothing, when its action is no longer
    /// running or a newer change has an action for the same image.
    pub async fn begin_tag_write(&self, watch: &str, intent: TagIntent) -> Result<WriteGrant, LedgerError> {
        match &self.backend {
            Backend::Sqlite(l) => l.begin_tag_write(intent).await,
            Backend::Kubernetes(l) => l.begin_tag_write(watch, intent).await,
        }
    }

    /// The tag writes announced and not recorded as done or as not done: after a crash, each is
    /// completed (the tag holds its digest), retried (it holds the one expected) or failed.
    pub async fn tag_intents(&self) -> Result<Vec<TagIntent>, LedgerError> {
        dispatch!(self, tag_intents())
    }

    /// Forgets the open intent on `image` (of `action`, or a rollback's with `None`): its write
    /// did not happen. An action's ends with `finish_action`, a rollback's with `record_tag_move`.
    pub async fn end_tag_write(&self, image: &str, action: Option<&str>) -> Result<(), LedgerError> {
        dispatch!(self, end_tag_write(image, action))
    }

    /// The target of the newest succeeded action of `kind` for `image`.
    pub async fn last_succeeded_target(
        &self,
        image: &str,
        kind: ActionKind,
    ) -> Result<Option<serde_json::Value>, LedgerError> {
        dispatch!(self, last_succeeded_target(image, kind))
    }

    /// The newest tag moves first, of one `[[images]]` name or of all.
    pub async fn tag_moves(&self, image: Option<&str>, limit: usize) -> Result<Vec<TagMove>, LedgerError> {
        dispatch!(self, tag_moves(image, limit))
    }

    /// The most recently updated actions, any state.
    pub async fn actions(&self, limit: usize) -> Result<Vec<ActionRecord>, LedgerError> {
        dispatch!(self, actions(limit))
    }

    /// Actions not finished yet (pending, running, held, awaiting approval), oldest first.
    pub async fn open_actions(&self) -> Result<Vec<OpenAction>, LedgerError> {
        dispatch!(self, open_actions())
    }

    /// Every action of one change, any state, by wave.
    pub async fn change_actions(&self, change_id: &str) -> Result<Vec<ActionRecord>, LedgerError> {
        dispatch!(self, change_actions(change_id))
    }

    /// Approves, rejects or releases a change's actions (one image's only, with `image`); answers
    /// the actions it moved. Wakes the runner when one may start now.
    pub async fn decide(
        &self,
        change_id: &str,
        image: Option<&str>,
        verdict: Verdict,
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<Decided>, LedgerError> {
        let decided = dispatch!(self, decide(change_id, image, verdict, by, now))?;
        self.signal(false, decided.iter().any(|d| d.state == ActionState::Pending));
        Ok(decided)
    }

    /// Freezes (`Some`) or lifts the freeze (`None`) on action starts; records `events` when the
    /// state flips. Answers the freeze before.
    pub async fn set_freeze(
        &self,
        freeze: Option<Freeze>,
        events: Vec<Event>,
        deliveries: Vec<DeliveryKey>,
        history: usize,
        now: DateTime<Utc>,
    ) -> Result<Option<Freeze>, LedgerError> {
        let made: FreezeEvents = Arc::new(move |_, _| (events.clone(), deliveries.clone()));
        Ok(self.change_freeze(freeze, made, history, now).await?.before)
    }

    /// Freezes (`Some`) or lifts the freeze (`None`) on action starts. When the state flips, the
    /// flip is counted in the roll-out record and `events` makes its events from that count, in
    /// the same write: each flip's events get their own ids, however close together they come.
    pub async fn change_freeze(
        &self,
        freeze: Option<Freeze>,
        events: FreezeEvents,
        history: usize,
        now: DateTime<Utc>,
    ) -> Result<FreezeChange, LedgerError> {
        let lifted = freeze.is_none();
        let change = dispatch!(self, set_freeze(freeze, events, history, now))?;
        let flipped = change.before.is_some() == lifted;
        self.signal(flipped, flipped && lifted);
        Ok(change)
    }

    /// The freeze in force, if any.
    pub async fn freeze_state(&self) -> Result<Option<Freeze>, LedgerError> {
        dispatch!(self, freeze_state())
    }
}

/// A pending action as the roll-out gates see it: when it is due, and whether it may start.
struct Gated {
    key: String,
    due: DateTime<Utc>,
    verdict: Result<(), Wait>,
}

/// The pending actions (of `kind`, when given) among `rows` — every action of the changes
/// concerned — each with when it is due and the roll-out gates' verdict, soonest due first. An
/// action whose image has another action running (`running`: image → its change, any change)
/// waits for it, and so does every later one of an image already let through: one action per app
/// image at a time, so an older change's action can never write after a newer one's.
fn gate_rows(
    rows: &[ActionRecord],
    kind: Option<ActionKind>,
    rollout: &Rollout,
    freeze: Option<&Freeze>,
    now: DateTime<Utc>,
    running: &BTreeMap<String, String>,
) -> Vec<Gated> {
    let mut by_change: std::collections::BTreeMap<&str, Vec<&ActionRecord>> = Default::default();
    for r in rows {
        by_change.entry(r.change.as_str()).or_default().push(r);
    }
    let mut out = Vec::new();
    for actions in by_change.values() {
        let view: Vec<GateAction> = actions.iter().map(|a| a.gate_action()).collect();
        let mut verdicts = rollout::gate(&view, rollout, freeze, now);
        for a in actions
            .iter()
            .filter(|a| a.state == ActionState::Pending && kind.is_none_or(|k| ActionKind::parse(&a.action) == Some(k)))
        {
            let verdict = verdicts.remove(&a.key).unwrap_or(Ok(()));
            out.push((a.created, a.key.clone(), a.next_attempt, verdict, a.image.clone(), a.change.clone()));
        }
    }
    out.sort_by(|a, b| (a.2, a.0, &a.1).cmp(&(b.2, b.0, &b.1)));
    let mut busy = running.clone();
    out.into_iter()
        .map(|(_, key, due, verdict, image, change)| {
            let verdict = match busy.get(&image) {
                Some(other) if verdict.is_ok() => Err(Wait::ImageBusy { image, change: other.clone() }),
                _ => {
                    if verdict.is_ok() {
                        busy.insert(image, change);
                    }
                    verdict
                }
            };
            Gated { key, due, verdict }
        })
        .collect()
}

/// The running actions among `rows`: image → its change.
fn running_images(rows: &[ActionRecord]) -> BTreeMap<String, String> {
    rows.iter().filter(|a| a.state == ActionState::Running).map(|a| (a.image.clone(), a.change.clone())).collect()
}

/// When the next of the `gated` pending actions may start.
fn next_start(
    gated: Vec<Gated>,
    rollout: &Rollout,
    freeze: Option<&Freeze>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    if freeze.is_some() || gated.is_empty() {
        return None;
    }
    if !rollout.windows.is_open(now) {
        return rollout.windows.next_open(now);
    }
    gated.into_iter().filter(|g| g.verdict.is_ok()).map(|g| g.due).min()
}
