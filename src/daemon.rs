//! The daemon: builds the parts from a Config, runs leader terms (checks, alert deliveries,
//! builds, ClusterBuilder publication) and stops everything within one deadline.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::alert::{AlertError, Dispatcher};
use crate::cluster::publish::Publisher;
use crate::cluster::{self, ClusterError, lease::LeaseElector};
use crate::config::{Config, StateLocation};
use crate::ledger::{Ledger, LedgerError, OpenAction, WriterLock};
use crate::metrics::Metrics;
use crate::monitor::{Monitor, MonitorHandle};
use crate::registry::Registry;
use crate::runner::{Backends, Clusters, Runner, RunnerError};
use crate::schedule::Clock;
use crate::server::{self, ServerState};
use crate::signing::SigningService;
use crate::vulns::{self, Refresher, Vulns, VulnsError};

/// How long the whole stop may take: checks, runner, deliveries, publisher and the HTTP drain.
pub const STOP_DEADLINE: Duration = Duration::from_secs(15);

/// How often `builder_monitor_actions` is brought up to date from the ledger.
const ACTION_SAMPLE_PERIOD: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Alert(#[from] AlertError),
    /// Actions left running by an earlier process cannot be taken over.
    #[error(transparent)]
    Recover(RunnerError),
    #[error("cannot set up the runner: {0}")]
    Runner(#[source] RunnerError),
    #[error("cannot listen on {listen} ([server] listen): {source}")]
    Listen { listen: std::net::SocketAddr, source: std::io::Error },
    #[error(transparent)]
    Vulns(#[from] VulnsError),
    #[error("the acting task failed: {0}")]
    Acting(#[from] tokio::task::JoinError),
}

/// How a command uses the ledger.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The daemon: creates and migrates it (holding the [`WriterLock`]).
    Write,
    /// Everything else: an existing ledger, read-only, never created, migrated or locked.
    Read,
}

/// The ledger the config names.
pub async fn open_ledger(config: &Config, access: Access, clock: &Clock) -> Result<Ledger, DaemonError> {
    match &config.monitor.state {
        StateLocation::Sqlite(path) if access == Access::Write => Ok(Ledger::open(path)?),
        StateLocation::Sqlite(path) => Ok(Ledger::open_read_only(path)?),
        StateLocation::Kubernetes => {
            let client = cluster::client(&config.kubernetes).await?;
            Ok(Ledger::kubernetes(client, &config.kubernetes.namespace, clock.now()))
        }
    }
}

/// Everything a replica needs to act, built once at start.
pub struct Parts {
    pub config: Arc<Config>,
    pub ledger: Ledger,
    pub clock: Clock,
    pub monitor: Arc<Monitor>,
    pub dispatcher: Arc<Dispatcher>,
    pub client: Option<kube::Client>,
    /// The clients of pools with clusters of their own, by pool name.
    pub pool_clients: std::collections::BTreeMap<String, kube::Client>,
    /// Why the actions on `[kubernetes]`'s cluster wait, when it could not be configured or did
    /// not answer at start.
    pub cluster_wait: Option<String>,
    pub metrics: Arc<Metrics>,
    /// The one registry client: checks, planning and registry rebases share its limits and tokens.
    pub registry: Arc<Registry>,
    /// The OSV data in force (`[vulnerabilities]`), when configured; set by [`Parts::build`].
    pub vulns: Option<Vulns>,
    /// `[signing]` with the key the config's loading decrypted (set by [`run`]; without it, no
    /// key: only the trusted keys gate).
    pub signing: Option<Arc<SigningService>>,
    /// A URL mirror's refresher, taken by the daemon's worker loop (or `run --once`'s one refresh).
    refresher: std::sync::Mutex<Option<Refresher>>,
}

impl Parts {
    /// The Kubernetes client when the config uses the cluster (its permissions checked first), then
    /// the parts over it ([`Parts::new`]).
    /// When only actions need the cluster, one that cannot be configured or does not answer is
    /// no reason to stop: watches, alerts and registry rebases run, and the actions that need it
    /// wait ([`Parts::cluster_wait`]) until it answers.
    pub async fn build(config: Arc<Config>, ledger: Ledger, clock: Clock) -> Result<Self, DaemonError> {
        let permissions = cluster::required_permissions(&config);
        let may_wait = cluster::only_actions_need_it(&config);
        let (client, cluster_wait) = if permissions.is_empty() {
            (None, None)
        } else {
            match cluster::client(&config.kubernetes).await {
                Err(error) if may_wait => (None, Some(cluster::no_cluster(&error))),
                Err(error) => return Err(error.into()),
                Ok(client) => match cluster::check_access(&client, &permissions).await {
                    Ok(()) => (Some(client), None),
                    Err(ClusterError::Api(error)) if may_wait && crate::runner::pool::unanswered(&error) => {
                        (Some(client), Some(cluster::unreachable(&error)))
                    }
                    Err(error) => return Err(error.into()),
                },
            }
        };
        if let Some(reason) = &cluster_wait {
            tracing::warn!(reason = %reason, "the actions that need the Kubernetes cluster wait for it; watches, alerts and registry rebases run");
        }
        let pool_clients = cluster::pool_clients(&config).await?;
        let mut parts = Self::new(config, ledger, clock, client)?;
        parts.pool_clients = pool_clients;
        parts.cluster_wait = cluster_wait;
        let pinned = if parts.config.vulnerabilities.is_some() {
            pinned_releases(&parts.ledger).await?
        } else {
            Default::default()
        };
        if let Some((data, refresher)) = vulns::start(&parts.config, parts.metrics.clone(), pinned).await? {
            // The checks match each move against the snapshot in force when they make it.
            parts.monitor.set_vulns(data.clone());
            parts.vulns = Some(data);
            parts.refresher = std::sync::Mutex::new(refresher);
        }
        Ok(parts)
    }

    /// The registry client, monitor and alert dispatcher for `config` over `ledger` (the one
    /// wiring of the daemon, `run --once`, the tests and the benchmark).
    pub fn new(
        config: Arc<Config>,
        ledger: Ledger,
        clock: Clock,
        client: Option<kube::Client>,
    ) -> Result<Self, DaemonError> {
        let metrics = Metrics::with_log_drops(
            crate::log_stream::dropped_lines(),
            cluster::requests::counters().clone(),
            config.vulnerabilities.is_some(),
        );
        let registry = Arc::new(Registry::new(config.registries.values().cloned(), metrics.clone()));
        let monitor =
            Arc::new(Monitor::new(config.clone(), registry.clone(), ledger.clone(), clock.clone(), metrics.clone()));
        let dispatcher = Arc::new(Dispatcher::new(&config.alerts, ledger.clone(), clock.clone(), metrics.clone())?);
        let signing = SigningService::of(&config, None);
        Ok(Parts {
            config,
            ledger,
            clock,
            monitor,
            dispatcher,
            client,
            pool_clients: Default::default(),
            cluster_wait: None,
            metrics,
            registry,
            vulns: None,
            signing,
            refresher: Default::default(),
        })
    }

    /// The URL mirror's refresher, once (`None` for a local mirror or none).
    fn take_refresher(&self) -> Option<Refresher> {
        self.refresher.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn publisher(&self) -> Option<Publisher> {
        let client = self.client.clone().filter(|_| self.config.kubernetes.publish)?;
        Some(Publisher::new(client, self.config.clone(), self.ledger.clone(), self.metrics.clone()))
    }

    async fn runner(&self, stop: CancellationToken) -> Result<Arc<Runner>, DaemonError> {
        let clusters = Clusters {
            default: self.client.clone(),
            pools: self.pool_clients.clone(),
            waiting: self.cluster_wait.clone(),
        };
        let backends = Backends::for_config(&self.config, clusters, stop).map_err(DaemonError::Runner)?;
        let (config, ledger, clock, signing) =
            (self.config.clone(), self.ledger.clone(), self.clock.clone(), self.signing.clone());
        let runner = Arc::new(Runner::with_parts(config, ledger, clock, backends, &self.registry, signing));
        runner.recover().await.map_err(DaemonError::Recover)?;
        Ok(runner)
    }

    /// `run --once`: every check once, the actions and deliveries that are due, the
    /// ClusterBuilders. True when every check and action succeeded.
    pub async fn run_once(&self) -> Result<bool, DaemonError> {
        let stop = CancellationToken::new();
        // The vulnerability data downloads while the checks and actions run: they never wait for
        // it (a move checked before it arrives says its release's data is not loaded).
        let refresh = self.take_refresher().map(|mut refresher| {
            tokio::spawn(async move {
                refresher.refresh_logged().await;
            })
        });
        let runner = self.runner(stop.clone()).await?;
        let checks_ok = self.monitor.run_once().await;
        runner.run_due_once().await;
        let actions_ok = runner.failures() == 0;
        self.dispatcher.deliver_due_once().await;
        if let Some(refresh) = refresh {
            if !refresh.is_finished() {
                let under_way = self.vulns.as_ref().and_then(Vulns::downloading).map(|d| d.note()).unwrap_or_default();
                tracing::info!(download = %under_way, "checks and actions done without the vulnerability data; waiting for its download to keep it for the next run (moves checked now say their release's data is not loaded)");
            }
            let _ = refresh.await;
        }
        if let Some(publisher) = self.publisher() {
            publisher.publish_specs().await?;
            for builder in &self.config.builders {
                publisher.publish_status(&builder.name).await?;
            }
        }
        stop.cancel();
        Ok(checks_ok && actions_ok)
    }

    /// One term of acting, until `stop`: the named tasks of the term, started.
    async fn start_term(self: &Arc<Self>, stop: CancellationToken) -> Result<Term, DaemonError> {
        // The term's first reads (recovery, the first checks, deliveries, open actions) share one
        // read of the ledger, until every builder has been checked once.
        self.ledger.share_start_reads();
        let runner = match self.runner(stop.clone()).await {
            Ok(runner) => runner,
            Err(error) => {
                self.ledger.end_start_reads();
                return Err(error);
            }
        };
        let mut term = Term::default();
        term.spawn("start reads", end_start_reads(self.ledger.clone(), self.monitor.handle(), stop.clone()));
        if let Some(publisher) = self.publisher() {
            term.spawn("publisher", publisher.run(stop.clone()));
        }
        term.spawn("alert deliveries", self.dispatcher.clone().run(stop.clone()));
        if let Some(client) = runner.awaited_cluster() {
            term.spawn("cluster probe", await_cluster(runner.clone(), client, self.config.clone(), stop.clone()));
        }
        term.spawn("runner", runner.run(stop.clone()));
        term.spawn(
            "action metrics",
            sample_open_actions(self.config.clone(), self.ledger.clone(), self.metrics.clone(), stop.clone()),
        );
        term.spawn("checks", self.monitor.clone().run(stop));
        Ok(term)
    }
}

/// The tasks of a term (or of the whole daemon), by name, so a stop can say what is still running.
#[derive(Default)]
struct Term {
    tasks: JoinSet<()>,
    names: std::collections::HashMap<tokio::task::Id, &'static str>,
}

impl Term {
    fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let id = self.tasks.spawn(task).id();
        self.names.insert(id, name);
    }

    /// Waits for every task until `deadline`; then logs which were still running and aborts them.
    /// False when some had to be aborted.
    async fn join_until(&mut self, deadline: tokio::time::Instant, what: &str) -> bool {
        loop {
            match tokio::time::timeout_at(deadline, self.tasks.join_next_with_id()).await {
                Ok(None) => return true,
                Ok(Some(done)) => {
                    let id = match &done {
                        Ok((id, ())) => *id,
                        Err(err) => err.id(),
                    };
                    let name = self.names.remove(&id).unwrap_or("task");
                    if let Err(err) = done
                        && err.is_panic()
                    {
                        tracing::error!(task = name, error = %err, "task failed");
                    }
                }
                Err(_) => {
                    let mut running: Vec<&str> = self.names.values().copied().collect();
                    running.sort_unstable();
                    tracing::warn!(running = ?running, "{what}: still running at the deadline; aborted (the ledger is transactional, nothing is half-written)");
                    self.tasks.abort_all();
                    while self.tasks.join_next().await.is_some() {}
                    self.names.clear();
                    return false;
                }
            }
        }
    }
}

/// Keeps `builder_monitor_actions{state}` current while this replica acts; a standby serves no
/// such series, so a dashboard summing replicas never counts an action twice.
async fn sample_open_actions(config: Arc<Config>, ledger: Ledger, metrics: Arc<Metrics>, stop: CancellationToken) {
    let mut every = tokio::time::interval(ACTION_SAMPLE_PERIOD);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = every.tick() => {
                // As `status` shows them: a pending action a roll-out gate keeps back is `waiting`.
                match crate::status::open_actions(&config, &ledger, chrono::Utc::now()).await {
                    Ok((open, _)) => metrics.set_open_actions(open.iter().map(OpenAction::shown_state)),
                    Err(err) => tracing::debug!(error = %err, "cannot count open actions for the metrics"),
                }
            }
        }
    }
    metrics.actions.clear();
}

/// `run`: the daemon, from a loaded config and its signing service (the key its loading
/// decrypted), until `shutdown`; `once` checks and acts once. The answer is the exit code
/// (`run --once` exits 1 when a check or action failed).
pub async fn run(
    config: Arc<Config>,
    signing: Option<Arc<SigningService>>,
    once: bool,
    shutdown: CancellationToken,
) -> Result<u8, DaemonError> {
    // Held until this function returns: one writer per SQLite ledger (Kubernetes has the lease).
    let clock = Clock::System;
    let _writer = match &config.monitor.state {
        StateLocation::Sqlite(path) => Some(WriterLock::acquire(path, clock.now())?),
        StateLocation::Kubernetes => None,
    };
    let ledger = open_ledger(&config, Access::Write, &clock).await?;
    let mut parts = Parts::build(config.clone(), ledger.clone(), clock).await?;
    parts.signing = signing;
    let parts = Arc::new(parts);
    // `status` and the page show why the cluster's actions wait from this note, not by asking.
    crate::cluster::waiting::note(&config.work_dir(), parts.cluster_wait.as_deref(), parts.clock.now());
    let election = config.kubernetes.leader_election && !once;
    tracing::info!(builders = config.builders.len(), alerts = config.alerts.len(), runner = config.runner.kind.as_str(), rebase = config.runner.rebase.as_str(), state = %ledger.location(), publish = config.kubernetes.publish, leader_election = election, once, "builder-monitor starting");
    if once {
        return Ok(if parts.run_once().await? { 0 } else { 1 });
    }

    let (leading_tx, mut leading) = tokio::sync::watch::channel(!election);
    // From here on the ledger writes only while this replica leads, and waits for a right the
    // cluster refuses; `status` reads the rights missing from the state directory.
    ledger.serve_daemon(election.then(|| leading.clone()));
    crate::rights::report_to(&config.work_dir());
    let resign = CancellationToken::new();
    let mut no_election = None;
    let elector = match (&parts.client, election) {
        (Some(client), true) => {
            let elector = LeaseElector::new(client.clone(), &config.kubernetes);
            tracing::info!(lease = %config.kubernetes.lease_name, namespace = %config.kubernetes.namespace, identity = elector.identity(), "campaigning for the lease; standing by until it is ours");
            Some(tokio::spawn(elector.run(leading_tx, resign.clone())))
        }
        _ => {
            // Without election this replica always leads.
            no_election = Some(leading_tx);
            None
        }
    };
    let mut serving = Term::default();
    // Every replica refreshes its own copy: a standby's probes and page show it too.
    if let Some(refresher) = parts.take_refresher() {
        serving.spawn("OSV refresh", crate::worker::run(refresher, shutdown.clone(), Duration::ZERO));
    }
    if let Some(settings) = &config.server {
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .map_err(|source| DaemonError::Listen { listen: settings.listen, source })?;
        let bound = listener.local_addr().map_or_else(|_| settings.listen.to_string(), |a| a.to_string());
        tracing::info!(listen = %bound, "serving health, metrics, API and hooks");
        if settings.api_token.is_some() && settings.public_read {
            tracing::warn!(
                listen = %bound,
                "the read API (/api/v1/...) is public: an API token is configured, but only for checks and hooks; set [server] public_read = false to require it for reads too"
            );
        }
        let state = ServerState::new(config.clone(), settings.clone(), parts.monitor.handle(), ledger)
            .with_leadership(leading.clone())
            .with_registry(parts.registry.clone())
            .with_signing(parts.signing.clone())
            .with_vulns(parts.vulns.clone());
        let stop = shutdown.clone();
        serving.spawn("HTTP server", async move {
            if let Err(err) = server::serve(Arc::new(state), listener, stop).await {
                tracing::error!(error = %err, "HTTP server failed");
            }
        });
    }

    // Start-up is done: its code and heap are given back now, the first cycle's once it is.
    serving.spawn("memory release", release_memory(parts.monitor.handle(), shutdown.clone()));

    let mut failure = None;
    let mut stop_deadline = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            changed = leading.wait_for(|l| *l) => if changed.is_err() { break },
        }
        parts.metrics.leader.set(1);
        let stop = shutdown.child_token();
        let mut term = match parts.start_term(stop.clone()).await {
            Ok(term) => term,
            Err(err) => {
                parts.metrics.leader.set(0);
                failure = Some(err);
                break;
            }
        };
        let lost = tokio::select! {
            _ = shutdown.cancelled() => false,
            _ = leading.wait_for(|l| !*l) => true,
        };
        stop.cancel();
        parts.metrics.leader.set(0);
        if lost {
            // The lease may pass to another replica once it expires: whatever still runs by then is cut off.
            let cap = config.kubernetes.lease_duration.saturating_sub(config.kubernetes.renew_deadline);
            term.join_until(tokio::time::Instant::now() + cap, "the lease could pass on").await;
            tracing::info!("stopped acting; standing by");
        } else {
            let deadline = tokio::time::Instant::now() + STOP_DEADLINE;
            stop_deadline = Some(deadline);
            term.join_until(deadline, "stopping").await;
        }
        if shutdown.is_cancelled() {
            break;
        }
    }
    // Released only now, so the next leader never overlaps with this one's last checks.
    resign.cancel();
    if let Some(elector) = elector {
        let _ = elector.await;
    }
    shutdown.cancel();
    let deadline = stop_deadline.unwrap_or_else(|| tokio::time::Instant::now() + STOP_DEADLINE);
    serving.join_until(deadline, "stopping").await;
    if let Some(failure) = failure {
        return Err(failure);
    }
    drop(no_election);
    tracing::info!("builder-monitor stopped");
    Ok(0)
}

/// Ends the sharing of the term's first reads ([`Ledger::share_start_reads`]) once every builder
/// has been checked once, or when the term ends first.
async fn end_start_reads(ledger: Ledger, monitor: MonitorHandle, stop: CancellationToken) {
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = monitor.first_cycle() => {}
    }
    ledger.end_start_reads();
}

/// Gives back the memory start-up used and no longer needs (`crate::memory`): once at start-up,
/// again when every builder has been checked once (pinning and inspecting every tag touched code
/// a steady check never runs). A standby that never leads gives back only the first.
async fn release_memory(monitor: MonitorHandle, stop: CancellationToken) {
    release_memory_after("start-up").await;
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = monitor.first_cycle() => release_memory_after("the first check cycle").await,
    }
}

async fn release_memory_after(what: &'static str) {
    // /proc reads and system calls: off the runtime's workers.
    match tokio::task::spawn_blocking(crate::memory::release).await {
        Ok(Ok(released)) => tracing::debug!(
            after = what,
            code_kib = released.code_kib,
            mappings = released.mappings,
            heap_trimmed = released.heap_trimmed,
            "gave back memory no longer needed"
        ),
        Ok(Err(err)) => tracing::debug!(after = what, error = %err, "cannot give back memory no longer needed"),
        Err(err) => tracing::debug!(after = what, error = %err, "the memory release failed"),
    }
}

/// The Ubuntu releases of the images the ledger has pinned: the vulnerability data kept at start.
async fn pinned_releases(ledger: &Ledger) -> Result<vulns::Pinned, LedgerError> {
    let mut pinned = vulns::Pinned::default();
    for record in ledger.watches().await? {
        if let Some(metadata) = record.pinned_metadata() {
            pinned.releases.extend(builder_monitor_core::cnb::releases_of(&metadata).into_values());
            pinned.names.extend(builder_monitor_core::cnb::package_names(&metadata));
        }
    }
    Ok(pinned)
}

/// One `()` per SIGHUP (the config is read again); none where signals cannot be listened for.
pub fn hangups() -> tokio::sync::mpsc::UnboundedReceiver<()> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::hangup()) {
            Ok(mut hangup) => {
                tokio::spawn(async move {
                    while hangup.recv().await.is_some() {
                        tracing::info!("SIGHUP received, reading the config again");
                        if tx.send(()).is_err() {
                            break;
                        }
                    }
                });
            }
            Err(e) => tracing::error!(error = %e, "cannot listen for SIGHUP; the config is read at start only"),
        }
    }
    rx
}

/// Cancels `shutdown` on SIGINT or SIGTERM.
pub async fn stop_on_signal(shutdown: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                let _ = tokio::signal::ctrl_c().await;
                shutdown.cancel();
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
            _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    shutdown.cancel();
}

/// How often a cluster the actions wait for is asked whether it answers again.
const CLUSTER_PROBE: Duration = Duration::from_secs(30);

/// Asks the cluster the runner's deploys and builds wait for whether it answers (the start-up
/// access check), until it does — they are then claimed again — or `stop`. Here, not in the
/// runner: the access check is `cluster`'s, which reads the runner's permission tables.
async fn await_cluster(runner: Arc<Runner>, client: kube::Client, config: Arc<Config>, stop: CancellationToken) {
    let permissions = crate::cluster::required_permissions(&config);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(CLUSTER_PROBE) => {}
        }
        match crate::cluster::check_access(&client, &permissions).await {
            Ok(()) => {
                crate::cluster::waiting::note(&config.work_dir(), None, chrono::Utc::now());
                return runner.cluster_answers();
            }
            Err(err) => tracing::debug!(error = %err, "the Kubernetes cluster still does not answer"),
        }
    }
}
