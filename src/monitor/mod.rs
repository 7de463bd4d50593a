//! The monitor: every watched tag (builders, and the run images they name) checked on its
//! schedule. Parts: the scheduler loop, run images, the check (named steps: `observe`, pure
//! `decide`, `react` through `crate::reaction`, outages, commit), the failure bookkeeping of
//! outages, and what failures and recoveries log (`failure_log`).

mod check;
pub mod decide;
mod failure_log;
mod hooks;
mod outages;
mod pins;
pub mod run_images;
mod scheduler;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};

use crate::alert::outage::RegistryState;
use crate::config::{BuilderSettings, Config, Platform};
use crate::ledger::{Ledger, WatchKind};
use crate::metrics::Metrics;
use crate::reaction::Reaction;
use crate::registry::{Registry, RegistryError};
use crate::schedule::Clock;
use builder_monitor_core::cnb::{Change, run_watch_name};
use builder_monitor_core::event::Subject;
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::schedule::Schedule;
pub use hooks::HOOK_FOLLOW_UPS;
use hooks::HookChains;
use run_images::RunImages;

/// How long running checks may take to finish after a shutdown signal.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Checks in flight at once. Thousands of schedules can fall due together (start-up, a shared
/// interval); unbounded, each would hold a socket, its buffers and a ~9 KiB check future at once.
/// Each registry gets an equal share of them (`Slots`), so one that hangs cannot hold them all.
pub const CHECK_CONCURRENCY: usize = 16;

/// How often the daemon proves its scheduler is alive, and how stale that proof may get.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(60);

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

/// What the HTTP server may ask of the monitor: wake checks (at once, or debounced for push
/// hooks), and whether it is alive, through its first cycle, and which registries fail.
#[derive(Clone)]
pub struct MonitorHandle {
    config: Arc<Config>,
    clock: Clock,
    metrics: Arc<Metrics>,
    /// Names of watches to check now, for the scheduler.
    wakes: mpsc::UnboundedSender<String>,
    run_images: Arc<Mutex<RunImages>>,
    /// Builders not checked yet since start (readiness).
    unchecked: Arc<Mutex<BTreeSet<String>>>,
    /// Becomes true once `unchecked` is empty (the daemon then gives back start-up memory).
    first_cycle: Arc<tokio::sync::watch::Sender<bool>>,
    /// Unix time the scheduler last showed it is alive (liveness).
    heartbeat: Arc<AtomicI64>,
    /// Watches with a push hook's checks under way.
    hooks: HookChains,
    /// Failing watches per registry, as last committed (readiness).
    failing: Arc<Mutex<BTreeMap<String, usize>>>,
}

impl MonitorHandle {
    /// The daemon's clock's time now.
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.clock.now()
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Whether every builder has been checked once since start.
    pub fn first_cycle_done(&self) -> bool {
        self.unchecked.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    /// Returns once every builder has been checked since start (at once if that is so already).
    pub async fn first_cycle(&self) {
        let mut done = self.first_cycle.subscribe();
        // The sender lives as long as this handle: an error cannot happen while we hold it.
        let _ = done.wait_for(|done| *done).await;
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

    /// Wakes a watch (a builder, or a run image watch by its `run:…` name) for a check now; false
    /// when there is no such watch.
    pub fn check_now(&self, watch: &str) -> bool {
        let known = self.config.builder(watch).is_some()
            || self.run_images.lock().unwrap_or_else(|e| e.into_inner()).entries.contains_key(watch);
        if !known {
            return false;
        }
        let _ = self.wakes.send(watch.to_string());
        true
    }

    /// Wakes every watch (builder or run image) of this registry, repository and tag for an immediate
    /// check, followed up while the tag still shows the pin (`HOOK_FOLLOW_UPS`), and returns their
    /// names. `registry: None` matches any registry.
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
            self.hooks.hook(name, &self.wakes);
        }
        names
    }

    /// Whether a push hook's checks of this watch are still under way (its chain has not ended).
    pub fn hook_checks_pending(&self, name: &str) -> bool {
        self.hooks.pending(name)
    }

    fn beat(&self) {
        self.heartbeat.store(self.clock.now().timestamp(), Ordering::Relaxed);
    }
}

/// The monitor: its handle (the state the HTTP server shares), and what only the checks use.
pub struct Monitor {
    handle: MonitorHandle,
    registry: Arc<Registry>,
    /// The actions' view of the same registries, for planning: reading a fleet's app images to
    /// decide their actions is the patch's work, paced by the registry, not by the watching's
    /// `requests_per_second`.
    planning: Registry,
    ledger: Ledger,
    /// Taken by `run` while it runs; wakes sent meanwhile wait here.
    wake_receiver: Mutex<Option<mpsc::UnboundedReceiver<String>>>,
    /// Per registry: its failing watches and the outages alerts were told of (`alert::outage`),
    /// read from the ledger on first use. Held from a check's decision until its commit, so the
    /// checks of one registry decide one after another, each on what the last one recorded.
    outages: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<RegistryState>>>>>,
    /// What failed checks and recoveries log (`failure_log`): registries in an outage, failing watches.
    failure_log: Mutex<failure_log::FailureLog>,
    run_image_heads: run_images::RunImageHeads,
    /// Each steady watch's pin, so an unchanged check stays in memory.
    pins: pins::Pins,
    /// The vulnerability data a move's fixes are matched against; set once the loader has
    /// started (`Parts::build`, after the monitor is built). Unset: `[vulnerabilities]`
    /// configures none, and the changes have no `fixes`.
    vulns: std::sync::OnceLock<crate::vulns::Vulns>,
}

impl Monitor {
    pub fn new(
        config: Arc<Config>,
        registry: Arc<Registry>,
        ledger: Ledger,
        clock: Clock,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (wakes, wake_receiver) = mpsc::unbounded_channel();
        let unchecked: BTreeSet<String> = config.builders.iter().map(|b| b.name.clone()).collect();
        let handle = MonitorHandle {
            first_cycle: Arc::new(tokio::sync::watch::Sender::new(unchecked.is_empty())),
            unchecked: Arc::new(Mutex::new(unchecked)),
            heartbeat: Arc::new(AtomicI64::new(clock.now().timestamp())),
            config,
            clock,
            metrics,
            wakes,
            run_images: Arc::new(Mutex::new(RunImages::default())),
            hooks: HookChains::default(),
            failing: Arc::new(Mutex::new(BTreeMap::new())),
        };
        Self {
            handle,
            planning: registry.actions(),
            registry,
            ledger,
            wake_receiver: Mutex::new(Some(wake_receiver)),
            outages: Mutex::new(HashMap::new()),
            failure_log: Mutex::default(),
            run_image_heads: Default::default(),
            pins: Default::default(),
            vulns: std::sync::OnceLock::new(),
        }
    }

    /// Each move from now on is matched against `vulns`' data (the first call only counts).
    pub fn set_vulns(&self, vulns: crate::vulns::Vulns) {
        let _ = self.vulns.set(vulns);
    }

    /// The small handle the HTTP server holds: readiness, liveness, metrics and wakes.
    pub fn handle(&self) -> MonitorHandle {
        self.handle.clone()
    }

    /// The ledger's signal of new actions (the runner waits on it).
    pub fn action_wake(&self) -> Arc<Notify> {
        self.ledger.new_actions()
    }

    /// The ledger's signal of new alert deliveries (the dispatcher waits on it).
    pub fn delivery_wake(&self) -> Arc<Notify> {
        self.ledger.new_deliveries()
    }

    pub fn config(&self) -> &Config {
        &self.handle.config
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The reaction over this monitor's config, ledger and registries.
    pub fn reaction(&self) -> Reaction<'_> {
        Reaction { config: &self.handle.config, ledger: &self.ledger, registry: &self.planning }
    }

    /// The run image watches in force, with the builders naming each.
    pub fn run_image_watches(&self) -> Vec<(Watch, Vec<String>)> {
        let run_images = self.handle.run_images.lock().unwrap_or_else(|e| e.into_inner());
        run_images.entries.values().map(|e| (e.watch.clone(), e.users.iter().cloned().collect())).collect()
    }

    /// Reads every watch's pin in one query (`Checks::pins`): the steady ones are kept in memory,
    /// and the run images the builders' pins name are watched from the start.
    async fn load_pins(&self) {
        let summaries = match self.ledger.pins().await {
            Ok(summaries) => summaries,
            Err(err) => {
                // Every check then reads the ledger, and run images are learned as builders move.
                tracing::error!(error = %err, "cannot read the ledger's pins");
                Vec::new()
            }
        };
        self.pins.load(&summaries);
        let by_name: HashMap<&str, &crate::ledger::PinSummary> =
            summaries.iter().map(|s| (s.name.as_str(), s)).collect();
        {
            let mut run_images = self.handle.run_images.lock().unwrap_or_else(|e| e.into_inner());
            for b in &self.handle.config.builders {
                if let Some(summary) = by_name.get(b.name.as_str())
                    && pins::displays_as(&b.image, &summary.image)
                {
                    run_images.note_named(b, summary.run_image.as_deref());
                }
            }
        }
        // Each registry's outage state as the ledger has it now (another replica may have led
        // meanwhile), so a registry's first checks can stay in memory too.
        let registries: BTreeSet<&str> = self.handle.config.builders.iter().map(|b| b.image.registry()).collect();
        for registry in registries {
            self.reload_registry_state(registry).await;
        }
    }

    /// Whether the registry's outage state is known and holds nothing: no failing watch, no open
    /// outage. Only then may a check skip the outage bookkeeping, which would find nothing to do.
    fn registry_quiet(&self, registry: &str) -> bool {
        let Some(slot) = self.outages.lock().unwrap_or_else(|e| e.into_inner()).get(registry).cloned() else {
            return false;
        };
        let Ok(state) = slot.try_lock() else { return false };
        state.as_ref().is_some_and(|s| s.failing.is_empty() && s.open.is_empty())
    }

    /// Who an event about `watch` concerns: the builder itself, or the builders naming a run image.
    fn subjects(&self, watch: &Watch) -> Vec<Subject> {
        self.handle.run_images.lock().unwrap_or_else(|e| e.into_inner()).subjects(&self.handle.config, watch)
    }
}
