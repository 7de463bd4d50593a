//! The watch loop: one scheduler task checks every watched tag (builders, and the run images they
//! name) on its schedule. A check is one HEAD when nothing moved; a move is observed, explained, committed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::alert::outage::{self, RegistryState};
use crate::config::{BuilderSettings, Config, Platform};
use crate::config::{ImageSettings, Policy, RunnerKind};
use crate::inspect::{self, Observation};
use crate::ledger::{
    ChangeRecord, CheckRecord, Ledger, LedgerError, NewAction, PinRecord, PinUpdate, WatchKind, WatchRecord,
};
use crate::metrics::{BuilderLabels, ChangeLabels, CheckLabels, Metrics, RegistryLabels};
use crate::registry::{Registry, RegistryError};
use crate::schedule::{Clock, Slots, Timetable};
use builder_monitor_core::cnb::{self, Change, PinnedMetadata, RunImagePin};
use builder_monitor_core::event::{self, CheckError, Event, EventType, ImageAction, Pin, Subject};
use builder_monitor_core::plan::{self, ActionTarget, AppState, Decision, Move, RunImageTarget};
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::schedule::{self, Schedule, Settle, timestamp};

/// How long running checks may take to finish after a shutdown signal.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Checks in flight at once. Thousands of schedules can fall due together (start-up, a shared
/// interval); unbounded, each would hold a socket, its buffers and a ~9 KiB check future at once.
/// Each registry gets an equal share of them (`Slots`), so one that hangs cannot hold them all.
pub const CHECK_CONCURRENCY: usize = 16;

/// Something the monitor watches: a builder tag, or a run image tag that builders name.
#[derive(Debug, Clone)]
pub struct Watch {
    /// Ledger key: the builder name, or `run:` + the normalised run image reference.
    pub name: String,
    pub kind: WatchKind,
    pub image: ImageRef,
    pub schedule: Schedule,
    pub jitter: Duration,
    pub platforms: Option<Vec<Platform>>,
    pub settle: Option<Duration>,
}

impl Watch {
    pub fn builder(b: &BuilderSettings) -> Self {
        Watch {
            name: b.name.clone(),
            kind: WatchKind::Builder,
            image: b.image.clone(),
            schedule: b.schedule.clone(),
            jitter: b.jitter,
            platforms: b.platforms.clone(),
            settle: b.settle,
        }
    }

    /// A run image watch, on the schedule of the builder that first named it.
    pub fn run_image(image: ImageRef, first_user: &BuilderSettings) -> Self {
        Watch {
            name: run_watch_name(&image),
            kind: WatchKind::RunImage,
            image,
            schedule: first_user.schedule.clone(),
            jitter: first_user.jitter,
            platforms: None,
            settle: first_user.settle,
        }
    }
}

/// The ledger name of a run image watch.
pub fn run_watch_name(image: &ImageRef) -> String {
    format!("run:{image}")
}

/// What one check found.
#[derive(Debug)]
pub enum CheckOutcome {
    /// The tag still points at the pin.
    Unchanged,
    /// First sight: the tag is now pinned.
    Pinned { digest: String },
    /// An accepted move, recorded as a change.
    Changed { id: String, previous: String, current: String, change: Box<Change> },
    /// A new digest held back by `settle`.
    Held { digest: String },
    /// The index moved but none of the watched platforms did: pin advanced, no change.
    PlatformsUnchanged { digest: String },
    /// The registry could not answer; the pin is kept.
    Failed(RegistryError),
}

/// A run image watch and the builders that name it.
struct RunImageEntry {
    watch: Watch,
    users: BTreeSet<String>,
    /// Set once it is scheduled; cancelled when no builder names it any more.
    stop: Option<CancellationToken>,
}

/// A watch in the daemon's timetable.
#[derive(Clone)]
struct Scheduled {
    watch: Arc<Watch>,
    /// Run image watches: cancelled when no builder names the run image any more.
    stop: Option<CancellationToken>,
}

#[derive(Default)]
struct RunImages {
    entries: BTreeMap<String, RunImageEntry>,
    /// While the daemon runs: where to send the names of newly needed run image watches.
    spawner: Option<mpsc::UnboundedSender<String>>,
}

pub struct Monitor {
    config: Arc<Config>,
    registry: Arc<Registry>,
    ledger: Ledger,
    clock: Clock,
    /// Names of watches to check now, for the scheduler in `run`.
    wakes: mpsc::UnboundedSender<String>,
    /// Taken by `run` while it runs; wakes sent meanwhile wait here.
    wake_receiver: Mutex<Option<mpsc::UnboundedReceiver<String>>>,
    run_images: Mutex<RunImages>,
    /// Notified when a commit added deliveries to the outbox.
    delivery_wake: Arc<Notify>,
    /// Notified when a commit added actions for the runner.
    action_wake: Arc<Notify>,
    metrics: Arc<Metrics>,
    /// Builders not checked yet since start (readiness).
    unchecked: Mutex<BTreeSet<String>>,
    /// Unix time the scheduler last showed it is alive (liveness).
    heartbeat: AtomicI64,
    /// Watches with a hook-triggered check scheduled.
    hook_pending: Arc<Mutex<BTreeSet<String>>>,
    /// Where to send the names of builders whose ledger entry a check committed (the publisher).
    committed: Mutex<Option<mpsc::UnboundedSender<String>>>,
    /// Per registry: its failing watches and the outages alerts were told of (`alert::outage`),
    /// read from the ledger on first use. Held from a check's decision until its commit, so the
    /// checks of one registry decide one after another, each on what the last one recorded.
    outages: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<RegistryState>>>>>,
    /// Failing watches per registry, as last committed (readiness).
    failing: Mutex<BTreeMap<String, usize>>,
}

/// How long a push hook waits before its check (see `wake_after_hook`).
pub const HOOK_DELAY: Duration = Duration::from_millis(500);

/// How often the daemon proves its scheduler is alive, and how stale that proof may get.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(60);

impl Monitor {
    pub fn new(
        config: Arc<Config>,
        registry: Arc<Registry>,
        ledger: Ledger,
        clock: Clock,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (wakes, wake_receiver) = mpsc::unbounded_channel();
        let unchecked = Mutex::new(config.builders.iter().map(|b| b.name.clone()).collect());
        let heartbeat = AtomicI64::new(clock.now().timestamp());
        Self {
            metrics,
            unchecked,
            heartbeat,
            hook_pending: Arc::new(Mutex::new(BTreeSet::new())),
            committed: Mutex::new(None),
            outages: Mutex::new(HashMap::new()),
            failing: Mutex::new(BTreeMap::new()),
            config,
            registry,
            ledger,
            clock,
            wakes,
            wake_receiver: Mutex::new(Some(wake_receiver)),
            run_images: Mutex::new(RunImages::default()),
            delivery_wake: Arc::new(Notify::new()),
            action_wake: Arc::new(Notify::new()),
        }
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Whether every builder has been checked once since start.
    pub fn first_cycle_done(&self) -> bool {
        self.unchecked.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    /// Whether the scheduler showed it is alive within `HEARTBEAT_STALE`.
    pub fn alive(&self) -> bool {
        let last = self.heartbeat.load(Ordering::Relaxed);
        self.clock.now().timestamp() - last <= HEARTBEAT_STALE.as_secs() as i64
    }

    /// Watches whose last check failed, per registry (registries checked since start).
    pub fn failing_watches(&self) -> BTreeMap<String, usize> {
        self.failing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| (r.clone(), *n))
            .collect()
    }

    fn beat(&self) {
        self.heartbeat.store(self.clock.now().timestamp(), Ordering::Relaxed);
    }

    /// Notified whenever new actions are recorded (the runner waits on it).
    pub fn action_wake(&self) -> Arc<Notify> {
        self.action_wake.clone()
    }

    /// Notified whenever new alert deliveries are recorded (the dispatcher waits on it).
    pub fn delivery_wake(&self) -> Arc<Notify> {
        self.delivery_wake.clone()
    }

    /// Sends the name of every builder a check commits for (a run image check: the builders naming
    /// it) to `to`, until replaced; `None` stops.
    pub fn report_commits(&self, to: Option<mpsc::UnboundedSender<String>>) {
        *self.committed.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Asks a builder's task to check now; false when no such builder is watched.
    pub fn check_now(&self, builder: &str) -> bool {
        if self.config.builder(builder).is_none() {
            return false;
        }
        let _ = self.wakes.send(builder.to_string());
        true
    }

    /// Wakes every watch (builder or run image) of this registry, repository and tag for an immediate
    /// check, and returns their names. `registry: None` matches any registry.
    pub fn check_matching(&self, registry: Option<&str>, repository: &str, tag: &str) -> Vec<String> {
        let matches = |image: &ImageRef| {
            image.repository() == repository
                && image.tag() == Some(tag)
                && registry.is_none_or(|r| r == image.registry() || r == image.api_host())
        };
        let mut names: Vec<String> =
            self.config.builders.iter().filter(|b| matches(&b.image)).map(|b| b.name.clone()).collect();
        let run_images = self.run_images.lock().unwrap_or_else(|e| e.into_inner());
        names.extend(run_images.entries.iter().filter(|(_, e)| matches(&e.watch.image)).map(|(n, _)| n.clone()));
        drop(run_images);
        for name in &names {
            self.wake_after_hook(name);
        }
        names
    }

    /// Wakes a watch `HOOK_DELAY` from now, once however many hooks arrive meanwhile. The delay
    /// lets the registry finish the push: Distribution notifies before it links the tag.
    fn wake_after_hook(&self, name: &str) {
        if !self.hook_pending.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string()) {
            return;
        }
        let (pending, wakes) = (self.hook_pending.clone(), self.wakes.clone());
        let name = name.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(HOOK_DELAY).await;
            pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&name);
            let _ = wakes.send(name);
        });
    }

    /// The run image watches in force, with the builders naming each.
    pub fn run_image_watches(&self) -> Vec<(Watch, Vec<String>)> {
        let run_images = self.run_images.lock().unwrap_or_else(|e| e.into_inner());
        run_images.entries.values().map(|e| (e.watch.clone(), e.users.iter().cloned().collect())).collect()
    }

    /// Learns run images from the metadata already pinned, so they are watched from the start.
    async fn load_run_images(&self) {
        for b in &self.config.builders {
            match self.ledger.watch(&b.name).await {
                Ok(Some(record)) if record.image == b.image.to_string() => {
                    self.note_run_image(b, pinned_metadata(&record).as_ref());
                }
                Ok(_) => {}
                Err(err) => tracing::error!(builder = %b.name, error = %err, "cannot read the ledger"),
            }
        }
    }

    /// Records which run image a builder names now (moving it off any other), starting a watch
    /// for a run image no builder named before.
    fn note_run_image(&self, builder: &BuilderSettings, metadata: Option<&PinnedMetadata>) {
        let image = metadata
            .filter(|_| builder.watch_run_image)
            .and_then(|m| m.preferred())
            .and_then(|m| m.run_image())
            .and_then(|name| match ImageRef::parse(name) {
                Ok(image) if image.digest().is_none() => Some(image),
                Ok(_) => None,
                Err(err) => {
                    tracing::warn!(builder = %builder.name, run_image = name, error = %err, "run image name is not a reference; not watched");
                    None
                }
            });
        let target = image.as_ref().map(run_watch_name);
        let mut run_images = self.run_images.lock().unwrap_or_else(|e| e.into_inner());
        run_images.entries.retain(|name, entry| {
            if Some(name) != target.as_ref() && entry.users.remove(&builder.name) && entry.users.is_empty() {
                if let Some(stop) = &entry.stop {
                    stop.cancel();
                }
                tracing::info!(run_image = %entry.watch.image, "no builder names this run image any more; not watched");
                return false;
            }
            true
        });
        let (Some(image), Some(name)) = (image, target) else { return };
        let spawner = run_images.spawner.clone();
        let entry = run_images.entries.entry(name.clone()).or_insert_with(|| {
            tracing::info!(run_image = %image, builder = %builder.name, "watching run image");
            if let Some(spawner) = &spawner {
                let _ = spawner.send(name.clone());
            }
            RunImageEntry { watch: Watch::run_image(image, builder), users: BTreeSet::new(), stop: None }
        });
        entry.users.insert(builder.name.clone());
    }

    /// Checks every builder once, then every run image they name. True when every check succeeded.
    pub async fn run_once(self: &Arc<Self>) -> bool {
        self.load_run_images().await;
        let builders: Vec<Watch> = self.config.builders.iter().map(Watch::builder).collect();
        let mut all_ok = self.check_all(builders).await;
        let run_images: Vec<Watch> = self.run_image_watches().into_iter().map(|(w, _)| w).collect();
        all_ok &= self.check_all(run_images).await;
        all_ok
    }

    async fn check_all(self: &Arc<Self>, watches: Vec<Watch>) -> bool {
        let mut slots = Slots::new(CHECK_CONCURRENCY);
        for watch in &watches {
            slots.register(watch.image.registry());
        }
        let mut pending = watches.into_iter();
        let mut tasks = JoinSet::new();
        let mut registries: HashMap<tokio::task::Id, String> = HashMap::new();
        let mut all_ok = true;
        loop {
            while slots.has_room() {
                let watch = match slots.next_waiting() {
                    Some(watch) => watch,
                    None => match pending.next() {
                        Some(watch) => {
                            let registry = watch.image.registry().to_string();
                            match slots.admit(&registry, watch) {
                                Some(watch) => watch,
                                None => continue,
                            }
                        }
                        None => break,
                    },
                };
                let registry = watch.image.registry().to_string();
                let monitor = self.clone();
                let task = tasks.spawn(async move {
                    matches!(monitor.check_logged(&watch).await, Some(o) if !matches!(o, CheckOutcome::Failed(_)))
                });
                registries.insert(task.id(), registry);
            }
            let Some(done) = tasks.join_next_with_id().await else { break };
            let (task, ok) = match done {
                Ok((task, ok)) => (task, ok),
                Err(err) => (err.id(), false),
            };
            all_ok &= ok;
            if let Some(registry) = registries.remove(&task) {
                slots.finished(&registry);
            }
        }
        all_ok
    }

    /// Runs every watch on its schedule until `shutdown`, then gives running checks a grace period.
    ///
    /// One task times all watches (`Timetable`) and runs up to `CHECK_CONCURRENCY` checks at once,
    /// earliest due first, each registry within its share (`Slots`): a due check of a registry
    /// that used its share waits for that registry, not for everyone.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        self.load_run_images().await;
        let Some(mut wakes) = self.wake_receiver.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            tracing::error!("the monitor is running already");
            return;
        };
        let (spawner, mut spawns) = mpsc::unbounded_channel();
        {
            let mut run_images = self.run_images.lock().unwrap_or_else(|e| e.into_inner());
            for name in run_images.entries.keys() {
                let _ = spawner.send(name.clone());
            }
            run_images.spawner = Some(spawner);
        }
        let mut table: Timetable<Scheduled> = Timetable::default();
        let mut slots: Slots<usize> = Slots::new(CHECK_CONCURRENCY);
        let now = tokio::time::Instant::now();
        for builder in &self.config.builders {
            slots.register(builder.image.registry());
            let scheduled = Scheduled { watch: Arc::new(Watch::builder(builder)), stop: None };
            table.add(&builder.name, scheduled, builder.jitter, now);
        }
        let mut running: JoinSet<()> = JoinSet::new();
        let mut running_ids: HashMap<tokio::task::Id, usize> = HashMap::new();
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        loop {
            let now = tokio::time::Instant::now();
            while slots.has_room() {
                let id = match slots.next_waiting() {
                    Some(id) => id,
                    None => match table.pop_due(now) {
                        Some(id) => match slots.admit(table.item(id).watch.image.registry(), id) {
                            Some(id) => id,
                            None => continue,
                        },
                        None => break,
                    },
                };
                let Scheduled { watch, stop } = table.item(id).clone();
                if stop.is_some_and(|s| s.is_cancelled()) {
                    slots.finished(watch.image.registry());
                    table.remove(id);
                    continue;
                }
                let monitor = self.clone();
                let task = running.spawn(async move {
                    monitor.check_logged(&watch).await;
                });
                running_ids.insert(task.id(), id);
            }
            let next = if slots.has_room() { table.next_due() } else { None };
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                Some(done) = running.join_next_with_id(), if !running.is_empty() => {
                    let task = match &done {
                        Ok((task, ())) => *task,
                        Err(err) => err.id(),
                    };
                    let Some(id) = running_ids.remove(&task) else { continue };
                    let watch = table.item(id).watch.clone();
                    slots.finished(watch.image.registry());
                    if let Err(err) = done {
                        tracing::error!(watch = %watch.name, error = %err, "check failed unexpectedly; it runs again on schedule");
                    }
                    let now = tokio::time::Instant::now();
                    if !table.finished(id, &watch.schedule, watch.jitter, now, self.clock.now()) {
                        tracing::warn!(watch = %watch.name, schedule = %watch.schedule, "schedule has no future firing; checked only when woken");
                    }
                }
                Some(name) = wakes.recv() => {
                    if let Some(id) = table.id(&name) {
                        table.wake(id, tokio::time::Instant::now());
                    }
                }
                Some(name) = spawns.recv() => {
                    let stop = CancellationToken::new();
                    let watch = {
                        let mut run_images = self.run_images.lock().unwrap_or_else(|e| e.into_inner());
                        run_images.entries.get_mut(&name).map(|entry| {
                            entry.stop = Some(stop.clone());
                            entry.watch.clone()
                        })
                    };
                    if let Some(watch) = watch {
                        slots.register(watch.image.registry());
                        // A run image dropped and named again: the old entry's stop is cancelled.
                        if let Some(old) = table.id(&name) {
                            table.remove(old);
                        }
                        let jitter = watch.jitter;
                        let scheduled = Scheduled { watch: Arc::new(watch), stop: Some(stop) };
                        table.add(&name, scheduled, jitter, tokio::time::Instant::now());
                    }
                }
                _ = heartbeat.tick() => self.beat(),
                _ = async { match next { Some(due) => tokio::time::sleep_until(due).await, None => std::future::pending().await } } => {}
            }
        }
        self.run_images.lock().unwrap_or_else(|e| e.into_inner()).spawner = None;
        *self.wake_receiver.lock().unwrap_or_else(|e| e.into_inner()) = Some(wakes);
        let drained =
            tokio::time::timeout(SHUTDOWN_GRACE, async { while running.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "checks still running after the grace period; aborting them (the ledger is transactional, nothing is half-written)");
            running.abort_all();
        }
    }

    /// A check whose ledger failure is logged rather than returned.
    async fn check_logged(&self, watch: &Watch) -> Option<CheckOutcome> {
        match self.check(watch).await {
            Ok(outcome) => Some(outcome),
            Err(err) => {
                tracing::error!(watch = %watch.name, error = %err, "cannot record check");
                None
            }
        }
    }

    /// Checks a builder by name (tests, API).
    pub async fn check_builder(&self, name: &str) -> Option<Result<CheckOutcome, LedgerError>> {
        let builder = self.config.builder(name)?;
        Some(self.check(&Watch::builder(builder)).await)
    }

    /// Who an event about `watch` concerns: the builder itself, or the builders naming a run image.
    fn subjects(&self, watch: &Watch) -> Vec<Subject> {
        let subject = |b: &BuilderSettings| Subject { name: b.name.clone(), image: b.image.to_string() };
        match watch.kind {
            WatchKind::Builder => vec![Subject { name: watch.name.clone(), image: watch.image.to_string() }],
            WatchKind::RunImage => {
                let run_images = self.run_images.lock().unwrap_or_else(|e| e.into_inner());
                run_images
                    .entries
                    .get(&watch.name)
                    .map(|e| e.users.iter().filter_map(|u| self.config.builder(u)).map(subject).collect())
                    .unwrap_or_default()
            }
        }
    }

    fn new_event(&self, watch: &Watch, id: String, event_type: EventType, time: &str) -> Event {
        let subjects = self.subjects(watch);
        let first = subjects
            .first()
            .cloned()
            .unwrap_or_else(|| Subject { name: watch.name.clone(), image: watch.image.to_string() });
        let mut e = Event::new(id, event_type, time.to_string(), first);
        if watch.kind == WatchKind::RunImage {
            e.builders = subjects;
            e.run_image = Some(watch.image.to_string());
        }
        e
    }

    /// One check of one watch, committed to the ledger.
    pub async fn check(&self, watch: &Watch) -> Result<CheckOutcome, LedgerError> {
        let image = watch.image.to_string();
        // A watch whose configured image changed starts over with a new pin, not a change.
        let record = self.ledger.watch(&watch.name).await?.filter(|r| r.image == image);
        let started = std::time::Instant::now();
        let result = self.observe_move(watch, record.as_ref()).await;
        let time = timestamp(self.clock.now());
        let mut commit = CheckRecord {
            watch: watch.name.clone(),
            kind: watch.kind,
            image: image.clone(),
            time: time.clone(),
            outcome: Ok(()),
            pin: None,
            pending: None,
            change: None,
            events: Vec::new(),
            deliveries: Vec::new(),
            actions: Vec::new(),
            history: self.config.monitor.history,
        };
        let failures = record.as_ref().map_or(0, |r| r.consecutive_failures);

        let outcome = match result {
            Err(err) => {
                let since = record.as_ref().and_then(|r| r.failing_since.clone()).unwrap_or_else(|| time.clone());
                // From the recorded check time, so the log and `status` name the same moment.
                let checked = schedule::parse_timestamp(&time).unwrap_or_else(|| self.clock.now());
                let next_check = next_check(&watch.schedule, checked);
                tracing::warn!(watch = %watch.name, image = %image, reason = err.reason(), error = %err, consecutive_failures = failures + 1, next_check = next_check.as_deref().unwrap_or("when woken"), jitter = %humantime::format_duration(watch.jitter), "check failed; pin kept");
                if failures == 0 {
                    let id = failed_event_id(&watch.name, &since);
                    let mut e = self.new_event(watch, id, EventType::CheckFailed, &time);
                    e.current = record.as_ref().and_then(|r| r.pin.as_ref()).map(pin_of);
                    e.error = Some(CheckError {
                        reason: err.reason().to_string(),
                        message: err.to_string(),
                        consecutive_failures: 1,
                        since,
                    });
                    commit.events.push(e);
                }
                commit.outcome = Err((err.reason().to_string(), err.to_string()));
                commit.pending = record.as_ref().and_then(|r| r.pending.clone());
                CheckOutcome::Failed(err)
            }
            Ok(found) => {
                if let Some(r) = record.as_ref().filter(|r| r.consecutive_failures > 0) {
                    let since = r.failing_since.clone().unwrap_or_default();
                    let id = event::stable_id(&[&watch.name, EventType::CheckRecovered.as_str(), &since]);
                    let mut e = self.new_event(watch, id, EventType::CheckRecovered, &time);
                    e.current = r.pin.as_ref().map(pin_of);
                    e.error = Some(CheckError {
                        reason: r.last_error_reason.clone().unwrap_or_default(),
                        message: r.last_error.clone().unwrap_or_default(),
                        consecutive_failures: r.consecutive_failures,
                        since,
                    });
                    tracing::info!(watch = %watch.name, after_failures = r.consecutive_failures, "check recovered");
                    commit.events.push(e);
                }
                self.apply(watch, record.as_ref(), found, &mut commit).await?
            }
        };
        // Failure events go where `alert::outage` says (thresholds, grouping); the others by routing.
        for event in &commit.events {
            if matches!(event.event_type, EventType::CheckFailed | EventType::CheckRecovered) {
                continue;
            }
            for alert in crate::config::alerts::routes(&self.config.alerts, event) {
                commit.deliveries.push((event.id.clone(), alert.to_string()));
            }
        }
        let registry = watch.image.registry().to_string();
        let slot = self.registry_slot(&registry);
        let mut state = slot.lock().await;
        if state.is_none() {
            *state = Some(self.load_registry_state(&registry).await?);
        }
        let decided = match &outcome {
            CheckOutcome::Failed(err) => outage::Outcome::Failed {
                failures: failures + 1,
                since: record
                    .as_ref()
                    .and_then(|r| r.failing_since.as_deref())
                    .and_then(schedule::parse_timestamp)
                    .unwrap_or_else(|| self.clock.now()),
                reason: err.reason().to_string(),
                message: err.to_string(),
            },
            _ => outage::Outcome::Succeeded,
        };
        let audience = |name: &str| {
            let names = self.subject_names(name);
            crate::alert::audiences(&self.config.alerts, &names.iter().map(String::as_str).collect::<Vec<_>>())
        };
        let (notices, next_state) =
            state.as_ref().map(|s| s.decide(&registry, &watch.name, &decided, &audience)).unwrap_or_default();
        // Events recorded by an earlier check, repeated only so their new deliveries have them.
        let mut repeated = BTreeSet::new();
        self.add_notices(watch, record.as_ref(), &registry, &notices, &mut commit, &mut repeated);
        let events = commit.events.clone();
        let has_deliveries = !commit.deliveries.is_empty();
        let has_actions = !commit.actions.is_empty();
        let new_metadata = commit.pin.as_ref().and_then(|p| p.metadata.clone());
        let pinned = commit.pin.as_ref().map(|p| p.digest.clone()).or_else(|| {
            let failed = matches!(outcome, CheckOutcome::Failed(_));
            record.as_ref().and_then(|r| r.pin.as_ref()).filter(|_| !failed).map(|p| p.digest.clone())
        });
        let change_kind = commit.change.as_ref().map(|c| c.change.kind);
        self.ledger.commit(commit).await?;
        let failing = next_state.failing_count();
        *state = Some(next_state);
        drop(state);
        self.metrics.watches_failing.get_or_create(&RegistryLabels { registry: registry.clone() }).set(failing as i64);
        self.failing.lock().unwrap_or_else(|e| e.into_inner()).insert(registry, failing);
        self.record_metrics(watch, &outcome, started.elapsed(), pinned.as_deref(), change_kind);
        if has_deliveries {
            self.delivery_wake.notify_one();
        }
        if has_actions {
            self.action_wake.notify_one();
        }
        // Logged once recorded: a log line never announces an event the ledger could still lose.
        for event in events.iter().filter(|e| !repeated.contains(&e.id)) {
            crate::event_log::log(event);
        }
        if let Some(to) = self.committed.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            for subject in self.subjects(watch) {
                let _ = to.send(subject.name);
            }
        }
        if watch.kind == WatchKind::Builder
            && let Some(metadata) = new_metadata
            && let Some(builder) = self.config.builder(&watch.name)
        {
            let metadata: Option<PinnedMetadata> = serde_json::from_value(metadata).ok();
            self.note_run_image(builder, metadata.as_ref());
        }
        tracing::debug!(watch = %watch.name, elapsed = ?started.elapsed(), outcome = ?outcome, "check done");
        Ok(outcome)
    }

    /// The lock and state of one registry's failures (`outages`).
    fn registry_slot(&self, registry: &str) -> Arc<tokio::sync::Mutex<Option<RegistryState>>> {
        self.outages.lock().unwrap_or_else(|e| e.into_inner()).entry(registry.to_string()).or_default().clone()
    }

    /// The builders an event about the watch `name` concerns: itself, or the builders naming a run image.
    fn subject_names(&self, name: &str) -> Vec<String> {
        if name.starts_with("run:") {
            let run_images = self.run_images.lock().unwrap_or_else(|e| e.into_inner());
            return run_images.entries.get(name).map(|e| e.users.iter().cloned().collect()).unwrap_or_default();
        }
        vec![name.to_string()]
    }

    /// What the ledger says about a registry's failures: its failing watches, which alerts got
    /// each one's `check.failed`, and the outages announced and not yet over.
    async fn load_registry_state(&self, registry: &str) -> Result<RegistryState, LedgerError> {
        let mut state = RegistryState::default();
        let of_registry = |image: &str| ImageRef::parse(image).is_ok_and(|i| i.registry() == registry);
        let failing: Vec<WatchRecord> = self
            .ledger
            .watches()
            .await?
            .into_iter()
            .filter(|w| w.consecutive_failures > 0 && of_registry(&w.image))
            .collect();
        let failed_ids: Vec<String> =
            failing.iter().map(|w| failed_event_id(&w.name, w.failing_since.as_deref().unwrap_or_default())).collect();
        let delivered = self.ledger.deliveries_of(failed_ids.clone()).await?;
        for (w, id) in failing.into_iter().zip(failed_ids) {
            let told = delivered.iter().filter(|(e, _)| *e == id).map(|(_, a)| a.clone()).collect();
            let since =
                w.failing_since.as_deref().and_then(schedule::parse_timestamp).unwrap_or_else(|| self.clock.now());
            state.failing.insert(
                w.name.clone(),
                outage::Failing {
                    since,
                    failures: w.consecutive_failures,
                    reason: w.last_error_reason.clone().unwrap_or_default(),
                    message: w.last_error.clone().unwrap_or_default(),
                    told,
                },
            );
        }
        let types = [EventType::RegistryUnavailable, EventType::RegistryRecovered].map(|t| t.as_str().to_string());
        let recent = self.ledger.latest_events(types.to_vec(), 1000).await?;
        let ended: BTreeSet<&str> = recent
            .iter()
            .filter(|e| e.event.event_type == EventType::RegistryRecovered)
            .map(|e| e.event.id.as_str())
            .collect();
        let open: Vec<(&Event, &event::Outage)> = recent
            .iter()
            .filter(|e| e.event.event_type == EventType::RegistryUnavailable)
            .filter(|e| !ended.contains(outage::recovered_id(&e.event.id).as_str()))
            .filter_map(|e| e.event.outage.as_ref().filter(|o| o.registry == registry).map(|o| (&e.event, o)))
            .collect();
        let delivered = self.ledger.deliveries_of(open.iter().map(|(e, _)| e.id.clone()).collect()).await?;
        for (e, o) in open {
            let alerts = delivered.iter().filter(|(id, _)| *id == e.id).map(|(_, a)| a.clone()).collect();
            let since = schedule::parse_timestamp(&o.since).unwrap_or_else(|| self.clock.now());
            state.open.insert(
                e.id.clone(),
                outage::Outage {
                    id: e.id.clone(),
                    since,
                    watches: o.watches.clone(),
                    reason: o.reason.clone(),
                    message: o.message.clone(),
                    alerts,
                },
            );
        }
        let count = state.failing_count();
        self.metrics
            .watches_failing
            .get_or_create(&RegistryLabels { registry: registry.to_string() })
            .set(count as i64);
        self.failing.lock().unwrap_or_else(|e| e.into_inner()).insert(registry.to_string(), count);
        Ok(state)
    }

    /// Adds the events and deliveries `notices` asks for to a check's commit.
    fn add_notices(
        &self,
        watch: &Watch,
        record: Option<&WatchRecord>,
        registry: &str,
        notices: &outage::Notices,
        commit: &mut CheckRecord,
        repeated: &mut BTreeSet<String>,
    ) {
        let by_type =
            |commit: &CheckRecord, t: EventType| commit.events.iter().find(|e| e.event_type == t).map(|e| e.id.clone());
        if !notices.failed.is_empty() {
            let id = match by_type(commit, EventType::CheckFailed) {
                Some(id) => id,
                None => {
                    // Recorded at the first failure; repeated (a no-op for the ledger) so the
                    // deliveries never name an event the ledger lacks.
                    let since = record.and_then(|r| r.failing_since.clone()).unwrap_or_else(|| commit.time.clone());
                    let id = failed_event_id(&watch.name, &since);
                    let mut e = self.new_event(watch, id.clone(), EventType::CheckFailed, &since);
                    e.current = record.and_then(|r| r.pin.as_ref()).map(pin_of);
                    if let Err((reason, message)) = &commit.outcome {
                        e.error = Some(CheckError {
                            reason: reason.clone(),
                            message: message.clone(),
                            consecutive_failures: record.map_or(0, |r| r.consecutive_failures) + 1,
                            since,
                        });
                    }
                    repeated.insert(id.clone());
                    commit.events.push(e);
                    id
                }
            };
            commit.deliveries.extend(notices.failed.iter().map(|a| (id.clone(), a.clone())));
        }
        if let Some(id) = by_type(commit, EventType::CheckRecovered) {
            commit.deliveries.extend(notices.recovered.iter().map(|a| (id.clone(), a.clone())));
        }
        for (o, alerts) in &notices.unavailable {
            let e = self.outage_event(registry, o, o.id.clone(), EventType::RegistryUnavailable, &commit.time);
            tracing::warn!(registry, watches = o.watches.len(), since = %timestamp(o.since), reason = %o.reason, "registry unavailable: several watches fail together; alerts get one message for them");
            commit.deliveries.extend(alerts.iter().map(|a| (e.id.clone(), a.clone())));
            commit.events.push(e);
        }
        for (o, alerts) in &notices.ended {
            let e = self.outage_event(registry, o, o.recovered_id(), EventType::RegistryRecovered, &commit.time);
            tracing::info!(registry, since = %timestamp(o.since), "registry outage over: none of its watches fails any more");
            commit.deliveries.extend(alerts.iter().map(|a| (e.id.clone(), a.clone())));
            commit.events.push(e);
        }
    }

    /// A `registry.*` event: about the builders of the watches in the outage.
    fn outage_event(&self, registry: &str, o: &outage::Outage, id: String, event_type: EventType, time: &str) -> Event {
        let mut names: Vec<String> = o.watches.iter().flat_map(|w| self.subject_names(w)).collect();
        names.sort();
        names.dedup();
        let subjects: Vec<Subject> = names
            .iter()
            .map(|n| Subject {
                name: n.clone(),
                image: self.config.builder(n).map(|b| b.image.to_string()).unwrap_or_default(),
            })
            .collect();
        let first = subjects
            .first()
            .cloned()
            .unwrap_or_else(|| Subject { name: registry.to_string(), image: registry.to_string() });
        let mut e = Event::new(id, event_type, time.to_string(), first);
        e.builders = subjects;
        e.outage = Some(event::Outage {
            registry: registry.to_string(),
            since: timestamp(o.since),
            watches: o.watches.clone(),
            reason: o.reason.clone(),
            message: o.message.clone(),
        });
        e
    }

    fn record_metrics(
        &self,
        watch: &Watch,
        outcome: &CheckOutcome,
        elapsed: Duration,
        pinned: Option<&str>,
        change: Option<cnb::ChangeKind>,
    ) {
        let ok = !matches!(outcome, CheckOutcome::Failed(_));
        let labels = CheckLabels { builder: watch.name.clone(), result: if ok { "ok" } else { "error" }.into() };
        self.metrics.checks.get_or_create(&labels).inc();
        self.metrics.check_duration.observe(elapsed.as_secs_f64());
        if ok {
            let now = self.clock.now();
            let seconds = now.timestamp() as f64 + f64::from(now.timestamp_subsec_millis()) / 1000.0;
            self.metrics.last_success.get_or_create(&BuilderLabels { builder: watch.name.clone() }).set(seconds);
        }
        if let Some(digest) = pinned {
            self.metrics.set_pinned(&watch.name, digest);
        }
        if let Some(kind) = change {
            let labels = ChangeLabels { builder: watch.name.clone(), kind: kind.as_str().into() };
            self.metrics.changes.get_or_create(&labels).inc();
        }
        self.unchecked.lock().unwrap_or_else(|e| e.into_inner()).remove(&watch.name);
        self.beat();
    }

    /// Registry side of a check: the HEAD, and what a new digest is when it is needed.
    async fn observe_move(&self, watch: &Watch, record: Option<&WatchRecord>) -> Result<Found, RegistryError> {
        let head = self.registry.head_manifest(&watch.image).await?;
        let pin = record.and_then(|r| r.pin.as_ref());
        if pin.is_some_and(|p| p.digest == head.digest) {
            return Ok(Found::Unchanged);
        }
        if let (Some(_), Some(r)) = (pin, record) {
            let pending =
                r.pending.as_ref().and_then(|(d, since)| Some((d.as_str(), schedule::parse_timestamp(since)?)));
            if let Settle::Hold { since } = schedule::settle(watch.settle, pending, &head.digest, self.clock.now()) {
                return Ok(Found::Held { digest: head.digest, since: timestamp(since) });
            }
        }
        // By digest, not tag: what we fetch is exactly what the HEAD saw, even if the tag moves again.
        let observation =
            inspect::observe(&self.registry, &watch.image, &head.digest).await.map_err(|e| not_served(watch, e))?;
        if let (Some(filter), Some(previous)) = (watch.platforms.as_deref(), pin)
            && selected(previous, filter) == observation.selected(Some(filter))
        {
            return Ok(Found::PlatformsUnchanged(observation));
        }
        let metadata = match watch.kind {
            WatchKind::RunImage => None,
            WatchKind::Builder => {
                let mut metadata =
                    inspect::builder_metadata(&self.registry, &watch.image, &observation, watch.platforms.as_deref())
                        .await
                        .map_err(|e| not_served(watch, e))?;
                metadata.run_image = self.resolve_run_image(watch, &metadata).await;
                Some(metadata)
            }
        };
        Ok(Found::Moved { observation, metadata })
    }

    /// The immutable reference of the run image a builder names, as of now: the run image watch's
    /// pin when there is one, else one HEAD.
    async fn resolve_run_image(&self, watch: &Watch, metadata: &PinnedMetadata) -> Option<RunImagePin> {
        let name = metadata.preferred()?.run_image()?.to_string();
        let reference = match ImageRef::parse(&name) {
            Err(_) => None,
            Ok(image) => match image.digest() {
                Some(digest) => Some(image.pinned(digest)),
                None => {
                    let pinned = match self.ledger.watch(&run_watch_name(&image)).await {
                        Ok(Some(r)) if r.image == image.to_string() => r.pin.map(|p| p.reference),
                        _ => None,
                    };
                    match pinned {
                        Some(reference) => Some(reference),
                        None => match self.registry.head_manifest(&image).await {
                            Ok(head) => Some(image.pinned(&head.digest)),
                            Err(err) => {
                                tracing::warn!(watch = %watch.name, run_image = %image, error = %err, "cannot resolve the run image; comparing by name only");
                                None
                            }
                        },
                    }
                }
            },
        };
        Some(RunImagePin { image: name, reference })
    }

    /// Turns what the registry said into ledger writes and events.
    async fn apply(
        &self,
        watch: &Watch,
        record: Option<&WatchRecord>,
        found: Found,
        commit: &mut CheckRecord,
    ) -> Result<CheckOutcome, LedgerError> {
        let (observation, metadata) = match found {
            Found::Unchanged => return Ok(CheckOutcome::Unchanged),
            Found::Held { digest, since } => {
                tracing::info!(watch = %watch.name, digest = %digest, since = %since, "new digest held back until it settles");
                commit.pending = Some((digest.clone(), since));
                return Ok(CheckOutcome::Held { digest });
            }
            Found::PlatformsUnchanged(observation) => {
                tracing::info!(watch = %watch.name, digest = %observation.digest, "index moved but no watched platform did; pin advanced without a change");
                commit.pin = Some(PinUpdate {
                    reference: watch.image.pinned(&observation.digest),
                    digest: observation.digest.clone(),
                    media_type: observation.media_type,
                    platforms: observation.platforms,
                    metadata: record.and_then(|r| r.metadata.clone()),
                });
                return Ok(CheckOutcome::PlatformsUnchanged { digest: observation.digest });
            }
            Found::Moved { observation, metadata } => (observation, metadata),
        };
        let current = Pin {
            digest: observation.digest.clone(),
            reference: watch.image.pinned(&observation.digest),
            platforms: observation.platforms.clone(),
        };
        commit.pin = Some(PinUpdate {
            digest: current.digest.clone(),
            reference: current.reference.clone(),
            media_type: observation.media_type.clone(),
            platforms: observation.platforms.clone(),
            metadata: metadata.as_ref().and_then(|m| serde_json::to_value(m).ok()),
        });
        let Some((record, previous)) = record.and_then(|r| r.pin.as_ref().map(|p| (r, p))) else {
            if watch.kind == WatchKind::Builder {
                let id = event::stable_id(&[&watch.name, EventType::BuilderPinned.as_str(), &current.digest]);
                let mut e = self.new_event(watch, id, EventType::BuilderPinned, &commit.time);
                e.current = Some(current.clone());
                commit.events.push(e);
            }
            return Ok(CheckOutcome::Pinned { digest: current.digest });
        };

        let seq = record.moves + 1;
        let id = event::change_id(&watch.name, seq, &previous.digest, &current.digest);
        let rollback = self.ledger.has_pinned(&watch.name, &current.digest).await?;
        let (event_type, change) = match (watch.kind, &metadata, pinned_metadata(record)) {
            (WatchKind::RunImage, _, _) => (
                EventType::RunImageChanged,
                Change::run_image_moved(previous.reference.clone(), current.reference.clone()),
            ),
            (WatchKind::Builder, Some(now), Some(before)) => (EventType::BuilderChanged, cnb::classify(&before, now)),
            (WatchKind::Builder, _, _) => {
                (EventType::BuilderChanged, Change::unknown("no CNB metadata was recorded for the previous pin"))
            }
        };
        tracing::info!(watch = %watch.name, change = %change.summary(), "moved");
        let (decisions, actions) = self.plan_actions(watch, &id, &change, &current, metadata.as_ref()).await?;
        for d in &decisions {
            tracing::info!(watch = %watch.name, image = %d.image, action = d.action.map_or("none", |a| a.as_str()), why = %d.why, "planned");
        }
        let mut e = self.new_event(watch, id.clone(), event_type, &commit.time);
        e.previous = Some(pin_of(previous));
        e.current = Some(current.clone());
        e.change = Some(change.clone());
        e.rollback = Some(rollback);
        e.images = Some(
            decisions
                .iter()
                .filter_map(|d| d.action.map(|a| ImageAction { name: d.image.clone(), action: a.as_str().into() }))
                .collect(),
        );
        commit.actions = actions;
        commit.events.push(e);
        commit.change = Some(ChangeRecord {
            id: id.clone(),
            watch: watch.name.clone(),
            seq,
            previous: previous.digest.clone(),
            current: current.digest.clone(),
            previous_reference: previous.reference.clone(),
            current_reference: current.reference.clone(),
            change: change.clone(),
            rollback,
            detected: commit.time.clone(),
        });
        Ok(CheckOutcome::Changed {
            id,
            previous: previous.digest.clone(),
            current: current.digest,
            change: Box::new(change),
        })
    }
}

impl Monitor {
    /// Plans the reaction of every app image the move concerns; reads the app images it needs.
    async fn plan_actions(
        &self,
        watch: &Watch,
        change_id: &str,
        change: &Change,
        current: &Pin,
        metadata: Option<&PinnedMetadata>,
    ) -> Result<(Vec<Decision>, Vec<NewAction>), LedgerError> {
        let builders: Vec<String> = match watch.kind {
            WatchKind::Builder => vec![watch.name.clone()],
            WatchKind::RunImage => self.subjects(watch).into_iter().map(|s| s.name).collect(),
        };
        let images: Vec<ImageSettings> =
            self.config.images.iter().filter(|i| builders.contains(&i.builder)).cloned().collect();
        if images.is_empty() || change.kind == cnb::ChangeKind::None {
            return Ok((Vec::new(), Vec::new()));
        }
        // The run image to rebase onto: the moved run image itself, or the one the builder moved to.
        let run_reference = match watch.kind {
            WatchKind::RunImage => Some(current.reference.clone()),
            WatchKind::Builder => change
                .run_image
                .as_ref()
                .and_then(|r| r.to.clone())
                .filter(|r| r.contains('@'))
                .or_else(|| metadata.and_then(|m| m.run_image.as_ref()).and_then(|r| r.reference.clone())),
        };
        let run_target = match (&run_reference, watch.kind) {
            (Some(reference), WatchKind::RunImage) => Some(RunImageTarget {
                reference: reference.clone(),
                digests: std::iter::once(current.digest.clone()).chain(current.platforms.values().cloned()).collect(),
            }),
            (Some(reference), WatchKind::Builder) => Some(self.run_image_target(reference).await),
            (None, _) => None,
        };
        // App images are read for `auto` decisions, and for kpack, whose rebase names the app's digest.
        let read_all = self.config.runner.kind == RunnerKind::Kpack;
        let mut apps = BTreeMap::new();
        for image in images.iter().filter(|i| read_all || i.policy == Policy::Auto) {
            apps.insert(image.name.clone(), self.app_state(&image.image).await);
        }
        // The builder's own metadata (user, platform APIs, stack) for the runners.
        let builder_metadata = |name: &str| {
            let name = name.to_string();
            async move {
                if watch.kind == WatchKind::Builder {
                    return metadata.and_then(|m| m.preferred()).cloned();
                }
                let record = self.ledger.watch(&name).await.ok().flatten();
                record.as_ref().and_then(pinned_metadata).and_then(|m| m.preferred().cloned())
            }
        };
        let decisions =
            plan::plan(&Move { change, builders: &builders, run_image: run_target.as_ref() }, &images, &apps);
        let mut actions = Vec::new();
        for d in &decisions {
            let (Some(kind), Some(image)) = (d.action, images.iter().find(|i| i.name == d.image)) else { continue };
            let builder_ref = match watch.kind {
                WatchKind::Builder => Some(current.reference.clone()),
                WatchKind::RunImage => {
                    self.ledger.watch(&image.builder).await?.and_then(|r| r.pin).map(|p| p.reference)
                }
            };
            let Some(builder_ref) = builder_ref else {
                tracing::warn!(image = %image.name, builder = %image.builder, "builder not pinned yet; no action");
                continue;
            };
            let meta = builder_metadata(&image.builder).await;
            let app_reference = match apps.get(&image.name) {
                Some(AppState::Built { digest: Some(digest), .. }) => Some(image.image.pinned(digest)),
                _ => None,
            };
            let target = ActionTarget {
                image: image.image.to_string(),
                builder_name: image.builder.clone(),
                builder: builder_ref,
                run_image: run_target.as_ref().map(|t| t.reference.clone()),
                source: image.source.clone(),
                env: image.env.clone(),
                why: d.why.clone(),
                user_id: meta.as_ref().and_then(|m| m.user_id),
                group_id: meta.as_ref().and_then(|m| m.group_id),
                platform_apis: meta.as_ref().map(|m| m.lifecycle.platform_apis.clone()).unwrap_or_default(),
                stack_id: meta.as_ref().and_then(|m| m.stack_id.clone()),
                app_reference,
                reasons: change
                    .reasons
                    .iter()
                    .filter_map(|r| serde_json::to_value(r).ok()?.as_str().map(str::to_string))
                    .collect(),
                scheduling: image.scheduling.clone(),
            };
            actions.push(NewAction {
                key: action_key(change_id, &image.name),
                change_id: change_id.to_string(),
                image: image.name.clone(),
                kind,
                target: serde_json::to_value(&target).unwrap_or_default(),
            });
        }
        Ok((decisions, actions))
    }

    /// Every digest that counts as "on" this run image reference: its own, and its platforms'.
    async fn run_image_target(&self, reference: &str) -> RunImageTarget {
        let mut digests = BTreeSet::new();
        let Ok(image) = ImageRef::parse(reference) else {
            return RunImageTarget { reference: reference.to_string(), digests };
        };
        if let Some(digest) = image.digest() {
            digests.insert(digest.to_string());
            match inspect::observe(&self.registry, &image, digest).await {
                Ok(observation) => digests.extend(observation.platforms.into_values()),
                Err(err) => {
                    tracing::warn!(run_image = %reference, error = %err, "cannot list the run image's platforms")
                }
            }
        }
        RunImageTarget { reference: reference.to_string(), digests }
    }

    /// What the app image's registry says about it now.
    pub async fn app_state(&self, image: &ImageRef) -> AppState {
        match inspect::app_metadata(&self.registry, image).await {
            Ok(None) => AppState::Missing,
            Ok(Some(app)) => match app.metadata {
                Ok(Some(m)) => AppState::Built {
                    run_image_digest: m.run_image_digest().map(str::to_string),
                    buildpacks: m.buildpacks,
                    launcher_version: m.launcher_version,
                    digest: Some(app.digest),
                },
                Ok(None) | Err(_) => AppState::NotCnb,
            },
            Err(err) => AppState::Unreachable(err.to_string()),
        }
    }
}

/// One app image measured against its builder's current pin (`plan`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Assessment {
    pub image: String,
    pub builder: String,
    pub policy: Policy,
    pub action: Option<plan::ActionKind>,
    pub why: String,
}

impl Monitor {
    /// For the current pins and app images: what each image would get, and why.
    pub async fn assess(&self) -> Result<Vec<Assessment>, LedgerError> {
        let mut out = Vec::new();
        for image in &self.config.images {
            let record = self.ledger.watch(&image.builder).await?;
            let metadata = record.as_ref().and_then(pinned_metadata);
            let builder = metadata.as_ref().and_then(|m| m.preferred()).cloned();
            let run_reference = self.newest_run_image(metadata.as_ref()).await?;
            let run_target = match &run_reference {
                Some(reference) => Some(self.run_image_target(reference).await),
                None => None,
            };
            let app = self.app_state(&image.image).await;
            let decision = plan::assess(image, &app, builder.as_ref(), run_target.as_ref());
            out.push(Assessment {
                image: image.name.clone(),
                builder: image.builder.clone(),
                policy: image.policy,
                action: decision.action,
                why: decision.why,
            });
        }
        Ok(out)
    }
}

impl Monitor {
    /// The newest immutable reference of a builder's run image: the run image watch's pin, else
    /// the one recorded with the builder's pin.
    async fn newest_run_image(&self, metadata: Option<&PinnedMetadata>) -> Result<Option<String>, LedgerError> {
        let run_name =
            metadata.and_then(|m| m.preferred()).and_then(|b| b.run_image()).and_then(|n| ImageRef::parse(n).ok());
        if let Some(run) = &run_name
            && let Some(r) = self.ledger.watch(&run_watch_name(run)).await?
            && let Some(pin) = r.pin
        {
            return Ok(Some(pin.reference));
        }
        Ok(metadata.and_then(|m| m.run_image.as_ref()).and_then(|r| r.reference.clone()))
    }

    /// What an action for `image` would be given now, from the current pins (`build-spec`).
    pub async fn preview(&self, image: &str, kind: plan::ActionKind) -> Result<(String, String, ActionTarget), String> {
        let image = self.config.images.iter().find(|i| i.name == image).ok_or_else(|| {
            let known: Vec<&str> = self.config.images.iter().map(|i| i.name.as_str()).collect();
            format!("no image named \"{image}\" (configured: {})", known.join(", "))
        })?;
        let record = self.ledger.watch(&image.builder).await.map_err(|e| e.to_string())?;
        let pin = record.as_ref().and_then(|r| r.pin.clone()).ok_or_else(|| {
            format!("builder \"{}\" is not pinned yet; run `builder-monitor run --once` first", image.builder)
        })?;
        let metadata = record.as_ref().and_then(pinned_metadata);
        let meta = metadata.as_ref().and_then(|m| m.preferred()).cloned();
        let run_image = self.newest_run_image(metadata.as_ref()).await.map_err(|e| e.to_string())?;
        if kind == plan::ActionKind::Rebase && run_image.is_none() {
            return Err(format!("the run image of builder \"{}\" is not known; a rebase needs it", image.builder));
        }
        let app_reference = match self.app_state(&image.image).await {
            AppState::Built { digest: Some(d), .. } => Some(image.image.pinned(&d)),
            _ => None,
        };
        let change = self.ledger.changes(Some(&image.builder), 1).await.map_err(|e| e.to_string())?;
        let change_id = change.first().map(|c| c.id.clone()).unwrap_or_else(|| event::stable_id(&["pin", &pin.digest]));
        let reasons = change
            .first()
            .map(|c| {
                c.change
                    .reasons
                    .iter()
                    .filter_map(|r| serde_json::to_value(r).ok()?.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let target = ActionTarget {
            image: image.image.to_string(),
            builder_name: image.builder.clone(),
            builder: pin.reference,
            run_image,
            source: image.source.clone(),
            env: image.env.clone(),
            why: format!("{} requested with build-spec", kind.as_str()),
            user_id: meta.as_ref().and_then(|m| m.user_id),
            group_id: meta.as_ref().and_then(|m| m.group_id),
            platform_apis: meta.as_ref().map(|m| m.lifecycle.platform_apis.clone()).unwrap_or_default(),
            stack_id: meta.as_ref().and_then(|m| m.stack_id.clone()),
            app_reference,
            reasons,
            scheduling: image.scheduling.clone(),
        };
        Ok((action_key(&change_id, &image.name), change_id, target))
    }
}

/// An action's idempotency key: stable for (change, image), DNS-safe, short enough to name objects.
pub fn action_key(change_id: &str, image: &str) -> String {
    format!("bm-{}", event::stable_id(&[change_id, image]))
}

/// What the registry side of a check found.
enum Found {
    Unchanged,
    Held { digest: String, since: String },
    PlatformsUnchanged(Observation),
    Moved { observation: Observation, metadata: Option<PinnedMetadata> },
}

fn selected(pin: &PinRecord, filter: &[Platform]) -> BTreeMap<String, String> {
    Observation {
        digest: pin.digest.clone(),
        media_type: pin.media_type.clone(),
        platforms: pin.platforms.clone(),
        single_config: None,
    }
    .selected(Some(filter))
}

/// The CNB metadata recorded with a watch's pin, if any could be read.
pub fn pinned_metadata(record: &WatchRecord) -> Option<PinnedMetadata> {
    serde_json::from_value(record.metadata.clone()?).ok()
}

/// A 404 once the HEAD found the tag: the registry names content it does not serve (a bogus
/// digest header, a manifest without its blobs). The tag is there, so this is not `tag_missing`.
fn not_served(watch: &Watch, err: RegistryError) -> RegistryError {
    match err {
        RegistryError::NotFound { reference } => RegistryError::InvalidResponse {
            registry: watch.image.registry().to_string(),
            detail: format!("the tag {} names {reference}, which the registry does not serve", watch.image),
        },
        other => other,
    }
}

fn pin_of(p: &PinRecord) -> Pin {
    Pin { digest: p.digest.clone(), reference: p.reference.clone(), platforms: p.platforms.clone() }
}

/// The id of a watch's `check.failed` for the run of failures that started at `since`.
fn failed_event_id(watch: &str, since: &str) -> String {
    event::stable_id(&[watch, EventType::CheckFailed.as_str(), since])
}

/// When the check after one at `now` is due (before jitter), RFC 3339; `None` when the schedule
/// has no future firing.
pub fn next_check(schedule: &Schedule, now: chrono::DateTime<chrono::Utc>) -> Option<String> {
    let delay = schedule.delay_after(now)?;
    Some(timestamp(now + chrono::Duration::from_std(delay).ok()?))
}
