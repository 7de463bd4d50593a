//! The ledger: pins, digest history, changes, events, deliveries and actions. Two backends keep it
//! — embedded SQLite, or ConfigMaps on Kubernetes — with the same operations and guarantees.
//!
//! Each record family is one module with its records and its contract, a trait both backends
//! implement: checks and pins ([`Checks`]), events and the alert outbox ([`Outbox`]), actions
//! ([`Actions`]) and their tag writes ([`TagWrites`]), the roll-out record ([`RolloutControl`]),
//! what the registries answered ([`RegistryFacts`]).
//! Each backend keeps the same families in files of the same names (`sqlite/`, `kubernetes/`).
//! What a write does to the rows — an action's end, supersession, holds, verdicts, claims,
//! arrivals, a delivery's attempt, a freeze — is written once, in `rules/`: pure functions over
//! typed rows that answer a change set, one file per rule (a new rule is one file there, with its
//! tests). A backend loads the rows a rule needs and applies its change set in one write (SQLite's
//! transaction, or the ConfigMap write that compares the entry's resourceVersion); each rule's
//! docs say which backend does what.
//! [`Ledger`] is the front the daemon uses: it passes most operations straight to its backend and
//! adds what is not the store's (signals of new work, the unchanged checks kept in memory).
//! Payloads are types at this boundary: an action's `ActionTarget`, a pin's `PinnedMetadata`
//! (through [`PinMetadata`], decoded only when read). Both backends keep them as JSON, which is
//! written and read only here; an unreadable one is [`LedgerError::Corrupt`], except where a
//! reader has always gone on without it (see [`ClaimedAction::target`], [`PinMetadata::read`]).

mod actions;
mod checks;
mod kubernetes;
mod lock;
mod outbox;
mod registries;
mod rollout;
mod rules;
mod sqlite;
mod tags;
pub mod time;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, broadcast};

pub use actions::*;
pub use checks::*;
pub use kubernetes::KubeLedger;
pub use lock::WriterLock;
pub use outbox::*;
pub use registries::*;
pub use rollout::*;
pub use sqlite::SqliteLedger;
pub use tags::*;

use builder_monitor_core::event::Event;
use builder_monitor_core::plan::{ActionKind, ActionTarget};
use builder_monitor_core::rollout::{Freeze, GateAction, Rollout};

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
    #[error(
        "ledger on Kubernetes: the entry of watch {watch} would be {bytes} bytes holding only what is still to be done (open actions, pending deliveries, the pin), over a ConfigMap's 1 MiB; nothing was written: let its deliveries go out and its actions finish, or keep the ledger in a file (`[monitor] state = \"PATH\"`)"
    )]
    EntryTooLarge { watch: String, bytes: usize },
    #[error("ledger: {0}")]
    Sqlite(rusqlite::Error),
    #[error("ledger holds an unreadable {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
    #[error(
        "ledger on Kubernetes: this replica no longer leads (the Lease is another's): the write is left to the leader"
    )]
    NotLeading,
    #[error("ledger worker stopped: {0}")]
    Worker(tokio::task::JoinError),
}

impl From<rusqlite::Error> for LedgerError {
    fn from(error: rusqlite::Error) -> Self {
        LedgerError::Sqlite(error)
    }
}

/// A store that keeps the whole ledger: every family's contract, and what the store itself
/// answers. The contract is split by family, not written as one trait, so each backend's file of
/// a family implements exactly that family's trait (and its docs are the family's contract).
pub trait LedgerBackend: Checks + Outbox + Actions + TagWrites + RolloutControl + RegistryFacts {
    /// A trivial read: the store answers (readiness).
    fn ping(&self) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// Where the ledger lives, for people.
    fn location(&self) -> String;
}

/// The ledger the daemon writes to: embedded SQLite, or ConfigMaps on Kubernetes. Clones share
/// the backend and the signals of new work.
#[derive(Clone)]
pub struct Ledger {
    backend: Backend,
    signals: Arc<Signals>,
    /// Unchanged checks not written yet, by watch: this ledger's reads show their times.
    touches: Arc<Mutex<BTreeMap<Arc<str>, Touch>>>,
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

/// Runs `$call` with `$backend` bound to whichever backend this is.
macro_rules! dispatch {
    ($self:ident, |$backend:ident| $call:expr) => {
        match &$self.backend {
            Backend::Sqlite($backend) => $call.await,
            Backend::Kubernetes($backend) => $call.await,
        }
    };
}

/// The operations the front passes straight to its backend, listed once by family: each is
/// documented on its trait, the contract.
macro_rules! forward {
    ($($family:ident { $(fn $name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)* })*) => {
        impl Ledger {
            $($(
                #[doc = concat!("See [`", stringify!($family), "::", stringify!($name), "`].")]
                pub async fn $name(&self, $($arg: $ty),*) -> Result<$out, LedgerError> {
                    dispatch!(self, |backend| $family::$name(backend, $($arg),*))
                }
            )*)*
        }
    };
}

forward! {
    LedgerBackend {
        fn ping() -> ();
    }
    Checks {
        fn pins() -> Vec<PinSummary>;
        fn failing_watches() -> Vec<WatchRecord>;
        fn has_pinned(watch: &str, digest: &str) -> bool;
        fn history(watch: &str, limit: usize) -> Vec<PinnedDigest>;
        fn changes(watch: Option<&str>, limit: usize) -> Vec<ChangeRecord>;
    }
    Outbox {
        fn events_after(after_seq: i64, limit: usize) -> Vec<StoredEvent>;
        fn deliveries_of(events: Vec<String>) -> Vec<DeliveryKey>;
        fn latest_events(types: Vec<String>, limit: usize) -> Vec<StoredEvent>;
        fn due_deliveries(now: DateTime<Utc>, limit: usize) -> Vec<DueDelivery>;
        fn next_delivery_at(exclude: &[DeliveryKey]) -> Option<DateTime<Utc>>;
        fn update_delivery(event: &str, alert: &str, update: DeliveryUpdate, now: DateTime<Utc>) -> ();
        fn pending_deliveries() -> Vec<PendingDelivery>;
        fn dead_letters() -> Vec<DeadLetter>;
    }
    Actions {
        fn record_process(key: &str, group: ProcessGroup) -> ();
        fn record_progress(key: &str, progress: builder_monitor_core::progress::Progress) -> bool;
        fn running_actions() -> Vec<ClaimedAction>;
        fn requeue_running() -> Vec<String>;
        fn requeue_actions(keys: Vec<String>) -> ();
        fn actions(limit: usize) -> Vec<ActionRecord>;
        fn latest_actions(kind: ActionKind) -> Vec<LatestAction>;
        fn open_actions() -> Vec<OpenAction>;
        fn change_actions(change_id: &str) -> Vec<ActionRecord>;
        fn change_gates(change_id: &str) -> Vec<GateAction>;
        fn last_succeeded_target(image: &str, kind: ActionKind) -> Option<ActionTarget>;
    }
    TagWrites {
        fn begin_tag_write(watch: &str, intent: TagIntent) -> WriteGrant;
        fn tag_intents() -> Vec<TagIntent>;
        fn end_tag_write(image: &str, action: Option<&str>) -> ();
        fn record_tag_move(watch: &str, tag_move: TagMove, history: usize) -> ();
        fn tag_moves(image: Option<&str>, limit: usize) -> Vec<TagMove>;
    }
    RolloutControl {
        fn freeze_state() -> Option<Freeze>;
    }
    RegistryFacts {
        fn record_registry(record: RegistryRecord) -> ();
        fn registries() -> Vec<RegistryRecord>;
    }
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

    /// The ledger in ConfigMaps of `namespace`; `now` (the caller's clock) seeds the event
    /// sequence numbers.
    pub fn kubernetes(client: kube::Client, namespace: &str, now: DateTime<Utc>) -> Self {
        Ledger::with(Backend::Kubernetes(KubeLedger::new(client, namespace, now)))
    }

    /// Makes this the daemon's ledger (the Kubernetes ledger; nothing for SQLite, whose writer
    /// lock is the fence): writes wait for a right the cluster refuses and, with `leading`
    /// (leader election), are made only while this replica leads (`kubernetes` module doc).
    pub fn serve_daemon(&self, leading: Option<tokio::sync::watch::Receiver<bool>>) {
        if let Backend::Kubernetes(l) = &self.backend {
            l.serve_daemon(leading);
        }
    }

    /// Lets the reads of a daemon's start share one read of the whole ledger (the Kubernetes
    /// ledger: one LIST of its ConfigMaps instead of one per family read, see
    /// `kubernetes::start_list`; nothing for SQLite, whose reads are local), until
    /// [`Ledger::end_start_reads`] or this ledger's first write.
    pub fn share_start_reads(&self) {
        if let Backend::Kubernetes(l) = &self.backend {
            l.share_start_list();
        }
    }

    /// Ends what [`Ledger::share_start_reads`] began: every read reads the ledger again.
    pub fn end_start_reads(&self) {
        if let Backend::Kubernetes(l) = &self.backend {
            l.end_start_list();
        }
    }

    /// Whether this replica may write now: false once a leader has lost the Lease. Checked
    /// before each write to the ledger and, by the runner, to the cluster.
    pub fn may_write(&self) -> bool {
        match &self.backend {
            Backend::Sqlite(_) => true,
            Backend::Kubernetes(l) => l.may_write(),
        }
    }

    /// Whether other processes write it too (the Kubernetes ledger: replicas, and the command
    /// line's approvals, releases and freezes), whose writes signal nothing here.
    pub fn is_shared(&self) -> bool {
        matches!(self.backend, Backend::Kubernetes(_))
    }

    /// See [`LedgerBackend::location`].
    pub fn location(&self) -> String {
        match &self.backend {
            Backend::Sqlite(l) => l.location(),
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

    /// A watch's entry ([`Checks::watch`]), with the time of its latest check even when that is
    /// not written yet.
    pub async fn watch(&self, name: &str) -> Result<Option<WatchRecord>, LedgerError> {
        let mut record = dispatch!(self, |backend| backend.watch(name))?;
        if let Some(r) = record.as_mut() {
            self.overlay(r);
        }
        Ok(record)
    }

    /// Every watch's entry, as [`Ledger::watch`] reads it.
    pub async fn watches(&self) -> Result<Vec<WatchRecord>, LedgerError> {
        let mut records = dispatch!(self, |backend| backend.watches())?;
        records.iter_mut().for_each(|r| self.overlay(r));
        Ok(records)
    }

    /// Shows an unwritten touch's time on the entry it would be written to.
    fn overlay(&self, record: &mut WatchRecord) {
        let touches = self.touches.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = touches.get(record.name.as_str())
            && *t.image == *record.image
            && record.last_ok == Some(true)
            && record.last_check.is_none_or(|c| c < t.time)
        {
            record.last_check = Some(t.time);
        }
    }

    /// The touches not written yet, but `except`'s.
    fn pending_touches(&self, except: Option<&str>) -> Vec<Touch> {
        let touches = self.touches.lock().unwrap_or_else(|e| e.into_inner());
        touches.values().filter(|t| Some(&*t.watch) != except).cloned().collect()
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
        let mut after: Option<Arc<str>> = None;
        loop {
            let batch: Vec<Touch> = {
                let touches = self.touches.lock().unwrap_or_else(|e| e.into_inner());
                let from = match &after {
                    Some(name) => std::ops::Bound::Excluded(&**name),
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
            dispatch!(self, |backend| backend.touch(&batch))?;
            self.forget_touches(&batch);
            written += batch.len();
            if batch.len() < TOUCH_BATCH {
                return Ok(written);
            }
        }
    }

    /// Commits a check's outcome ([`Checks::commit`]) with the touches kept so far; a check that
    /// changed nothing but its time is kept as a touch instead (see [`CheckRecord::only_moves_time`]).
    pub async fn commit(&self, record: CheckRecord) -> Result<(), LedgerError> {
        // Only a quiet record can be a touch, so only it needs the entry to compare with.
        let before = if record.is_quiet() { self.watch(&record.watch).await? } else { None };
        self.commit_over(record, before.as_ref()).await
    }

    /// [`Ledger::commit`] for a caller that read the watch's entry (`before`, as [`Ledger::watch`]
    /// answered it) since its last commit: the check's own read, not another one.
    pub async fn commit_over(&self, record: CheckRecord, before: Option<&WatchRecord>) -> Result<(), LedgerError> {
        if record.only_moves_time(before) {
            self.note_unchanged(&record.watch, record.image.as_str().into(), record.time);
            return Ok(());
        }
        let watch = record.watch.clone();
        let (deliveries, actions) = (!record.deliveries.is_empty(), !record.actions.is_empty());
        let own = Touch { watch: watch.as_str().into(), image: record.image.as_str().into(), time: record.time };
        // The record supersedes its own watch's touch; the others ride along in the same write.
        let touches = self.pending_touches(Some(&watch));
        dispatch!(self, |backend| backend.commit(record, &touches))?;
        self.forget_touches(touches.iter().chain([&own]));
        self.signal(deliveries, actions);
        // No receiver (no publisher) is no error.
        let _ = self.signals.commits.send(watch);
        Ok(())
    }

    /// Keeps the time of a successful check that found what a steady entry holds
    /// ([`CheckRecord::only_moves_time`]) as a touch, written with the next batch: the daemon's
    /// unchanged checks come here straight, with no read of the entry (`monitor::pins`).
    pub fn note_unchanged(&self, watch: &str, image: Arc<str>, time: DateTime<Utc>) {
        {
            let mut touches = self.touches.lock().unwrap_or_else(|e| e.into_inner());
            match touches.get_mut(watch) {
                // The common case, every check of a steady watch: no allocation.
                Some(t) if t.image == image => t.time = t.time.max(time),
                _ => {
                    let name: Arc<str> = watch.into();
                    touches.insert(name.clone(), Touch { watch: name, image, time });
                }
            }
        }
        // Only the publisher listens; without it, no name is copied.
        if self.signals.commits.receiver_count() > 0 {
            let _ = self.signals.commits.send(watch.to_string());
        }
    }

    /// Records a rollback's tag move with its events ([`TagWrites::record_rollback`]); wakes the
    /// alert dispatcher.
    pub async fn record_rollback(
        &self,
        watch: &str,
        tag_move: TagMove,
        events: Vec<Event>,
        deliveries: Vec<DeliveryKey>,
        history: usize,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        let added = !deliveries.is_empty();
        dispatch!(self, |backend| backend.record_rollback(watch, tag_move, events, deliveries, history, now))?;
        self.signal(added, false);
        Ok(())
    }

    /// Records events (and their outbox rows) outside a check, e.g. `build.started`, at `now`
    /// ([`Outbox::record_events`]); wakes the alert dispatcher.
    pub async fn record_events(
        &self,
        watch: &str,
        events: Vec<Event>,
        deliveries: Vec<DeliveryKey>,
        history: usize,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        let added = !deliveries.is_empty();
        dispatch!(self, |backend| backend.record_events(watch, events, deliveries, history, now))?;
        self.signal(added, false);
        Ok(())
    }

    /// Takes due pending actions (no roll-out gates but a freeze): each becomes `running` with one
    /// more attempt.
    pub async fn claim_actions(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<ClaimedAction>, LedgerError> {
        dispatch!(self, |backend| backend.claim_actions(now, limit, Kinds::ALL, &Rollout::default()))
    }

    /// Takes due pending actions that the roll-out gates let start (see [`Actions::claim_actions`]).
    pub async fn claim_actions_of(
        &self,
        now: DateTime<Utc>,
        limit: usize,
        kinds: impl Into<Kinds>,
        rollout: &Rollout,
    ) -> Result<Vec<ClaimedAction>, LedgerError> {
        let kinds = kinds.into();
        dispatch!(self, |backend| backend.claim_actions(now, limit, kinds, rollout))
    }

    /// Records an attempt's end ([`Actions::finish_action`]); wakes the alert dispatcher, and the
    /// runner when it recorded actions that follow.
    pub async fn finish_action(&self, end: ActionEnd<'_>) -> Result<Option<ActionState>, LedgerError> {
        let added = !end.deliveries.is_empty();
        let follow = !end.follow.is_empty();
        let ended = dispatch!(self, |backend| backend.finish_action(end))?;
        self.signal(added, follow && ended == Some(ActionState::Succeeded));
        Ok(ended)
    }

    /// Marks a finished action as holding its image ([`Actions::hold_image`]); wakes the alert
    /// dispatcher.
    pub async fn hold_image(&self, hold: ImageHold<'_>) -> Result<bool, LedgerError> {
        let added = !hold.deliveries.is_empty();
        let held = dispatch!(self, |backend| backend.hold_image(hold))?;
        self.signal(added && held, false);
        Ok(held)
    }

    /// Records actions asked for by hand ([`Actions::record_actions`]); wakes the runner.
    pub async fn record_actions(&self, actions: Vec<NewAction>, now: DateTime<Utc>) -> Result<(), LedgerError> {
        dispatch!(self, |backend| backend.record_actions(None, actions, now))?;
        self.signal(false, true);
        Ok(())
    }

    /// Records the first of the actions planned for a move of `watch` ahead of the check's commit
    /// (which records the rest, the change and the pin), so they can start while the rest are
    /// planned; wakes the runner. Recording is by key: a check that stops before its commit finds
    /// the same move again under the same change id, and what it recorded already stays.
    pub async fn record_planned(
        &self,
        watch: &str,
        actions: Vec<NewAction>,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        dispatch!(self, |backend| backend.record_actions(Some(watch), actions, now))?;
        self.signal(false, true);
        Ok(())
    }

    /// When the next pending action is due (no roll-out gates).
    pub async fn next_action_at(&self, now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>, LedgerError> {
        dispatch!(self, |backend| backend.next_action_at(Kinds::ALL, &Rollout::default(), now))
    }

    /// When the next pending action may start by the roll-out gates (see [`Actions::next_action_at`]).
    pub async fn next_action_of(
        &self,
        kinds: impl Into<Kinds>,
        rollout: &Rollout,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, LedgerError> {
        let kinds = kinds.into();
        dispatch!(self, |backend| backend.next_action_at(kinds, rollout, now))
    }

    /// Approves, rejects or releases a change's actions ([`Actions::decide`]). Wakes the runner
    /// when one may start now.
    pub async fn decide(
        &self,
        change_id: &str,
        image: Option<&str>,
        verdict: Verdict,
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<Decided>, LedgerError> {
        let decided = dispatch!(self, |backend| backend.decide(change_id, image, verdict, by, now))?;
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

    /// Freezes or lifts the freeze ([`RolloutControl::set_freeze`]); wakes the alert dispatcher
    /// when the state flips, and the runner when the freeze is lifted.
    pub async fn change_freeze(
        &self,
        freeze: Option<Freeze>,
        events: FreezeEvents,
        history: usize,
        now: DateTime<Utc>,
    ) -> Result<FreezeChange, LedgerError> {
        let lifted = freeze.is_none();
        let change = dispatch!(self, |backend| backend.set_freeze(freeze, events, history, now))?;
        let flipped = change.before.is_some() == lifted;
        self.signal(flipped, flipped && lifted);
        Ok(change)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fleet's touches hold the steady pins' images and one name each, not copies: at 10,000
    /// watches the copies were ~0.7 MiB of the daemon's heap (docs/performance.md, round 4).
    #[test]
    fn a_touch_shares_the_image_it_was_given_and_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().join("state.db")).unwrap();
        let image: Arc<str> = "reg.test/b:1".into();
        let now = Utc::now();
        ledger.note_unchanged("b", image.clone(), now);
        ledger.note_unchanged("b", image.clone(), now + chrono::Duration::seconds(1));
        let touches = ledger.touches.lock().unwrap();
        let (key, touch) = touches.iter().next().expect("one touch");
        assert!(Arc::ptr_eq(&touch.image, &image), "the touch copied the image");
        assert!(Arc::ptr_eq(key, &touch.watch), "the key and the touch's name are two copies");
        assert_eq!(touch.time, now + chrono::Duration::seconds(1));
    }
}
