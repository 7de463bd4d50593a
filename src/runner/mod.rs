//! The runner: carries out recorded rebases and rebuilds, each by its backend (`runner::backend`:
//! local commands for `exec`, a `batch/v1` Job for `kubernetes`, a kpack Build for `kpack`;
//! nothing for `none`; with `rebase = "registry"`, rebases in the daemon by registry writes), at
//! most `max_concurrent` at once (registry rebases: `max_registry_rebases`), retrying failures its backend leaves to it and recording every
//! outcome with the app tag's digests before and after.

mod attempt;
pub mod backend;
mod build_signing;
pub mod carrier;
mod context;
pub mod deploy;
pub mod exec;
mod execute;
pub mod git;
pub mod gitops;
pub mod group;
pub mod kpack;
pub mod kubernetes;
mod none;
pub mod objects;
pub mod pool;
mod registry_rebase;
mod secrets;
pub mod strict;
mod verify;
pub mod watch;

/// The runner kinds that build in pools, each with the objects it makes there
/// (`objects::PoolObjects`): a new such kind is its module's line above and its line here.
const POOLED: &[pool::Pooled] = &[
    pool::Pooled::new(RunnerKind::Kubernetes, &kubernetes::Jobs),
    pool::Pooled::new(RunnerKind::Kpack, &kpack::Builds),
];

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, RebasePath, RunnerKind};
use crate::ledger::{ActionEnd, ActionOutcome, ActionState, ClaimedAction, Hold, Kinds, Ledger, LedgerError, TagMove};
use crate::metrics::Metrics;
use crate::rebase::{RebaseError, RebaseRequest};
use crate::registry::Registry;
use crate::schedule::Clock;
use crate::signing::SigningService;
use crate::worker::{self, Work};
use attempt::{Attempt, Digests, GitopsResult, KindResult, Next};
use backend::AfterRestart;
pub use backend::{Backends, Clusters};
use builder_monitor_core::event::{self, ActionInfo, ActionResult, BuildInfo, Event, EventType, Subject};
use builder_monitor_core::plan::{ActionKind, ActionTarget};
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::schedule::{timestamp, timestamp_millis};
use carrier::ActionRef;
use context::Context;
use registry_rebase::tag_move;
pub use secrets::Secrets;

/// Why the runner cannot be set up or start, or cannot make or submit the object that carries out
/// an action. Each message says its cause, which is also the `source()`.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("action {key} was running before the restart and its command cannot be stopped: {source}")]
    Alive { key: String, source: group::GroupError },
    #[error("runner type \"{0}\" needs a Kubernetes client")]
    NoClient(&'static str),
    /// The settings table the runner type needs is absent (`runner.exec`, `runner.kubernetes`).
    #[error("missing [{0}]")]
    MissingSettings(&'static str),
    #[error("image {image} has no source: a rebuild needs [[images]] source = {{ git = \"…\" }}")]
    NoSource { image: String },
    #[error(
        "image {image} has no source: kpack refuses a Build without one, a rebase's too; add [[images]] source = {{ git = \"…\", revision = \"…\" }} (what kpack's Image builds from)"
    )]
    NoKpackSource { image: String },
    #[error("a rebase needs the new run image")]
    NoRunImage,
    #[error("a {0} action is not carried out by a build Job")]
    NotABuild(&'static str),
    #[error("a kpack rebase needs the current digest of {image}, which could not be read")]
    NoAppDigest { image: String },
    #[error("the build pod's template cannot be merged: {source}")]
    Template { source: crate::config::pod_template::TemplateError },
    #[error("a kpack Build cannot carry the pod template's {fields}")]
    KpackTemplate { fields: String },
    #[error("{0}")]
    Pool(String),
    #[error("the generated Job is not valid: {source}")]
    InvalidJob { source: crate::config::KubeValueError },
    #[error("the generated Build is not valid: {source}")]
    InvalidBuild { source: serde_json::Error },
    #[error("invalid Build: {source}")]
    BuildObject { source: serde_json::Error },
    /// The API refused to create the object (a conflict is not an error: the object is followed).
    #[error("cannot create {kind} {name}: {source}")]
    Create { kind: &'static str, name: String, source: kube::Error },
    /// The API refused a field of the object (created with `fieldValidation=Strict`).
    #[error(
        "the cluster refused {kind} {name}: it does not know {fields} (created with fieldValidation=Strict, so nothing is dropped silently; the cluster's Kubernetes or CRD is older than the field: upgrade it, or remove what sets the field): {message}"
    )]
    Refused { kind: &'static str, name: String, fields: String, message: String },
}

const IDLE: Duration = Duration::from_secs(60);
/// The wait with nothing due on a shared ledger (Kubernetes): another process's approval, release
/// or unfreeze wakes nothing here, so the runner looks again this soon.
const SHARED_IDLE: Duration = Duration::from_secs(5);
const GRACE: Duration = Duration::from_secs(10);
/// The longest wait for the app tag's digest around a runner's action (one HEAD; it is a record,
/// never a reason to hold the action up).
const DIGEST_WAIT: Duration = Duration::from_secs(10);

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub success: bool,
    pub detail: String,
    pub output_tail: String,
}

/// How the runner names an action to the objects it makes for it.
fn reference(action: &ClaimedAction) -> ActionRef<'_> {
    ActionRef { key: &action.key, change_id: &action.change_id, image: &action.image, kind: action.kind }
}

/// The runner as the worker loop runs it.
struct Actions {
    runner: Arc<Runner>,
    /// Whether the actions left running by the cluster are followed again.
    resumed: bool,
}

impl Work for Actions {
    async fn start_due(&mut self, tasks: &mut JoinSet<()>) -> Option<Duration> {
        // The actions the cluster runs are followed once it answers.
        if !self.resumed && self.runner.backends.cluster_wait().is_none() {
            self.resumed = true;
            self.runner.resume(tasks).await;
        }
        self.runner.start_due(tasks).await;
        Some(self.runner.until_next_due().await)
    }

    async fn woken(&mut self) {
        self.runner.wake.notified().await
    }
}

pub struct Runner {
    /// What the carriers see: config, ledger, clock, registry, scrubber, signing.
    ctx: Context,
    /// What carries out each kind of action.
    backends: Backends,
    /// The ledger's signal of new actions.
    wake: Arc<Notify>,
    /// Slots of `max_concurrent`: pods, commands, builds, deploys.
    permits: Arc<Semaphore>,
    /// Slots of `max_registry_rebases`: a registry rebase is a few small requests from the daemon,
    /// so many run at once, bounded apart from the heavy work (and by each registry's pace).
    registry_permits: Arc<Semaphore>,
    /// Attempts that failed in this process (`run --once` exits 1 after one).
    failures: AtomicUsize,
}

impl Runner {
    /// A runner on its own: its registry client from the config's registries (with metrics of its
    /// own), no signing key (`[signing]`'s trusted keys still gate).
    pub fn new(config: Arc<Config>, ledger: Ledger, clock: Clock, backends: Backends) -> Self {
        let registry = Registry::new(config.registries.values().cloned(), Metrics::new());
        let signing = SigningService::of(&config, None);
        Self::with_parts(config, ledger, clock, backends, &registry, signing)
    }

    /// The daemon's runner: over the daemon's registry client (its limits, tokens and metrics) and
    /// signing service. Every request the runner makes is an action's: it goes through the
    /// client's actions' view, paced by what each registry answers, not by the watching's
    /// `requests_per_second`.
    pub fn with_parts(
        config: Arc<Config>,
        ledger: Ledger,
        clock: Clock,
        backends: Backends,
        registry: &Registry,
        signing: Option<Arc<SigningService>>,
    ) -> Self {
        let permits = Arc::new(Semaphore::new(config.runner.max_concurrent));
        let registry_permits = Arc::new(Semaphore::new(config.runner.max_registry_rebases));
        let wake = ledger.new_actions();
        let ctx = Context::new(config, ledger, clock, registry, signing);
        Runner { ctx, backends, wake, permits, registry_permits, failures: AtomicUsize::new(0) }
    }

    /// The kinds of action this runner takes on: those its backends take (only rebases when the
    /// runner is `none` but rebases run in the daemon: rebuilds stay recorded, never run).
    fn claims(&self) -> Kinds {
        self.backends.claims()
    }

    /// Whether it runs anything at all.
    fn acts(&self) -> bool {
        self.backends.act()
    }

    /// Attempts that failed in this process so far.
    pub fn failures(&self) -> usize {
        self.failures.load(Ordering::Relaxed)
    }

    /// Start-up reconciliation of actions left `running`, as each one's backend says
    /// (`AfterRestart`): a registry rebase or a local command runs again (its attempt still
    /// counts), a command once its process group from before is gone (stopped if it still lives);
    /// a Job or Build lives in the cluster, so the runner follows it again (`resume`).
    pub async fn recover(&self) -> Result<usize, RunnerError> {
        self.ctx.settle_rollbacks().await?;
        let mut keys = Vec::new();
        for action in self.ctx.ledger.running_actions().await? {
            let backend = self.backends.backend(action.kind);
            if backend.after_restart() != AfterRestart::RunAgain {
                continue;
            }
            if let Some(process) = action.process {
                if let Some(owner) = group::owner(process) {
                    tracing::warn!(action = %action.key, process_group = process.id, owner, "action is running in another live builder-monitor process; left to it");
                    continue;
                }
                if group::alive(process) {
                    tracing::warn!(action = %action.key, process_group = process.id, "the command of an action left running is still alive; stopping it before it runs again");
                }
                group::stop(process, GRACE)
                    .await
                    .map_err(|source| RunnerError::Alive { key: action.key.clone(), source })?;
            }
            keys.push((action.key, backend.name()));
        }
        if keys.is_empty() {
            return Ok(0);
        }
        self.ctx.ledger.requeue_actions(keys.iter().map(|(key, _)| key.clone()).collect()).await?;
        for (key, runner) in &keys {
            tracing::warn!(action = %key, runner, "action was running when the daemon stopped; it runs again");
        }
        Ok(keys.len())
    }

    /// Follows the actions the cluster runs for us that are still `running` in the ledger.
    async fn resume(self: &Arc<Self>, tasks: &mut JoinSet<()>) {
        if !self.backends.follow() || self.backends.cluster_wait().is_some() {
            return;
        }
        let running = match self.ctx.ledger.running_actions().await {
            Ok(r) => r,
            Err(err) => {
                tracing::error!(error = %err, "cannot read running actions");
                return;
            }
        };
        for action in
            running.into_iter().filter(|a| self.backends.backend(a.kind).after_restart() == AfterRestart::Follow)
        {
            tracing::info!(action = %action.key, "following an action started before the restart");
            match self.permits.clone().acquire_owned().await {
                Ok(permit) => {
                    tasks.spawn(self.clone().execute(action, permit));
                }
                Err(_) => return,
            }
        }
    }

    /// The cluster the deploys and builds wait for, while they wait (the daemon asks it again).
    pub fn awaited_cluster(&self) -> Option<kube::Client> {
        self.backends.cluster_wait().and(self.backends.cluster.clone())
    }

    /// The cluster they waited for answers: they are claimed again, from now on.
    pub fn cluster_answers(&self) {
        self.backends.cluster_answers();
        tracing::info!("the Kubernetes cluster answers: the deploys and builds that waited for it run");
        self.wake.notify_one();
    }

    /// Carries out actions until `shutdown`; commands still running then get a grace period, after
    /// which they are killed and run again after the next start.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let kind = self.ctx.config.runner.kind.as_str();
        if !self.acts() {
            tracing::info!("runner \"{kind}\": actions are planned and recorded, never run (see `status`)");
            return;
        }
        if !self.claims().contains(ActionKind::Rebuild) {
            tracing::info!(
                "runner \"{kind}\": rebuilds are planned and recorded, never run; rebases run in the daemon"
            );
        }
        if let Some(reason) = self.backends.cluster_wait() {
            tracing::warn!(reason = %reason, "deploys and builds on the Kubernetes cluster wait for it (see `status`)");
        }
        if let Some(client) = self.backends.deploy_client.clone() {
            // Before any action starts: a deploy that starts takes its image out of the index.
            match self.ctx.rebuild_guard().await {
                Ok(n) => tracing::debug!(workloads = n, "override guard: what the deploys wrote, read from the ledger"),
                Err(err) => {
                    tracing::error!(error = %err, "cannot read the deploys for the override guard; it guards those that succeed from now on")
                }
            }
            tokio::spawn(deploy::guard(self.clone(), client, shutdown.clone()));
        }
        // An aborted task ends once its future is dropped, and with it the command's group.
        worker::run(Actions { runner: self, resumed: false }, shutdown, GRACE).await;
    }

    /// Carries out every action due now and waits for them (`run --once`); failures are retried
    /// on a later run, after their backoff.
    pub async fn run_due_once(self: &Arc<Self>) -> usize {
        if !self.acts() {
            return 0;
        }
        let mut tasks = JoinSet::new();
        self.resume(&mut tasks).await;
        let mut started = 0;
        // More actions may be due than there are slots: start more as slots free up.
        loop {
            started += self.start_due(&mut tasks).await;
            if tasks.join_next().await.is_none() {
                break;
            }
        }
        started
    }

    async fn until_next_due(&self) -> Duration {
        let idle = if self.ctx.ledger.is_shared() { SHARED_IDLE } else { IDLE };
        match self.ctx.ledger.next_action_of(self.claims(), &self.ctx.config.rollout, self.ctx.clock.now()).await {
            Ok(Some(at)) => {
                (at - self.ctx.clock.now()).to_std().unwrap_or(Duration::ZERO).clamp(Duration::from_millis(10), idle)
            }
            _ => idle,
        }
    }

    /// The kinds claimed into each set of slots: registry rebases into `max_registry_rebases`',
    /// everything else into `max_concurrent`'s.
    fn lanes(&self) -> [(Kinds, &Arc<Semaphore>); 2] {
        let claims = self.claims();
        match claims.contains(ActionKind::Rebase) && self.ctx.config.runner.in_registry(ActionKind::Rebase) {
            true => [
                (claims.without(ActionKind::Rebase), &self.permits),
                (ActionKind::Rebase.into(), &self.registry_permits),
            ],
            false => [(claims, &self.permits), (Kinds::NONE, &self.registry_permits)],
        }
    }

    async fn start_due(self: &Arc<Self>, tasks: &mut JoinSet<()>) -> usize {
        let mut started = 0;
        for (kinds, permits) in self.lanes() {
            let free = permits.available_permits();
            if free == 0 || kinds.is_empty() {
                continue;
            }
            let claimed = match self
                .ctx
                .ledger
                .claim_actions_of(self.ctx.clock.now(), free, kinds, &self.ctx.config.rollout)
                .await
            {
                Ok(claimed) => claimed,
                Err(err) => {
                    tracing::error!(error = %err, "cannot claim actions");
                    continue;
                }
            };
            started += claimed.len();
            for action in claimed {
                match permits.clone().try_acquire_owned() {
                    Ok(permit) => {
                        tasks.spawn(self.clone().execute(action, permit));
                    }
                    Err(_) => tracing::error!(action = %action.key, "no runner slot although one was free"),
                }
            }
        }
        started
    }
}

/// Why `build-spec` cannot show an action.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    /// The object the runner would create cannot be built (bad settings for this image).
    #[error(transparent)]
    Object(#[from] RunnerError),
    #[error("encoding the {what}: {source}")]
    Encode { what: &'static str, source: serde_json::Error },
}

/// What the runner would create for an action now (`build-spec`): the Job, the kpack Build, the
/// command with its arguments filled as the runner fills them, or the rebase the daemon would write.
pub fn preview(
    config: &Config,
    action: &ActionRef<'_>,
    target: &ActionTarget,
) -> Result<serde_json::Value, PreviewError> {
    backend::for_action(&config.runner, action.kind).preview(config, action, target)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ledger::{ActionState, CheckRecord, NewAction, WatchKind};

    fn target(image: &str) -> ActionTarget {
        ActionTarget {
            image: image.into(),
            builder_name: "jammy".into(),
            builder: "registry.example.com/cnb/builder@sha256:b".into(),
            run_image: Some("registry.example.com/cnb/run@sha256:r".into()),
            source: None,
            env: BTreeMap::new(),
            why: "test".into(),
            user_id: None,
            group_id: None,
            platform_apis: vec![],
            stack_id: None,
            app_reference: None,
            reasons: vec![],
            scheduling: Default::default(),
            vex: None,
            plan: Default::default(),
        }
    }

    /// With `rebase = "registry"`, runner `none` still carries out rebases (in the daemon) and only
    /// rebases: a rebuild stays recorded, never run. The rebase here fails before any request (its
    /// app image is no reference), which ends it for good with a `rebase.failed` saying the path.
    #[tokio::test]
    async fn runner_none_runs_registry_rebases_and_only_those() {
        let text = "[[builders]]\nname = \"jammy\"\nimage = \"registry.example.com/cnb/builder:latest\"\n\
                    [runner]\nrebase = \"registry\"\nmax_attempts = 1\n";
        let config = Arc::new(Config::parse(std::path::Path::new("/config.toml"), text).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().join("ledger.db")).unwrap();
        let now = Clock::System.now();
        let new = |image: &str, kind| {
            let reference =
                if kind == ActionKind::Rebase { "Not A Reference" } else { "registry.example.com/apps/a:1" };
            NewAction::new(format!("k-{image}"), "c1".into(), image.into(), kind, target(reference))
        };
        ledger
            .commit(CheckRecord {
                watch: "jammy".into(),
                kind: WatchKind::Builder,
                image: "registry.example.com/cnb/builder:latest".into(),
                time: now,
                outcome: Ok(()),
                pin: None,
                pending: None,
                change: None,
                events: vec![],
                deliveries: vec![],
                actions: vec![new("app", ActionKind::Rebase), new("api", ActionKind::Rebuild)],
                history: 10,
            })
            .await
            .unwrap();
        let backends = Backends::for_config(&config, backend::Clusters::default(), CancellationToken::new()).unwrap();
        let runner = Arc::new(Runner::new(config, ledger.clone(), Clock::System, backends));
        assert_eq!(runner.run_due_once().await, 1);
        let actions = ledger.actions(10).await.unwrap();
        let state = |image: &str| actions.iter().find(|a| a.image == image).map(|a| (a.state, a.attempts)).unwrap();
        assert_eq!(state("app"), (ActionState::Failed, 1));
        assert_eq!(state("api"), (ActionState::Pending, 0));
        let events = ledger.events_after(0, 10).await.unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].event.event_type, EventType::RebaseFailed);
        let info = events[0].event.action.as_ref().unwrap();
        let path = info.result.build().and_then(|b| b.path.as_deref());
        assert_eq!((info.image.as_str(), path), ("app", Some("registry")));
        assert!(ledger.tag_moves(None, 10).await.unwrap().is_empty(), "a failed rebase moved nothing");
    }

    #[test]
    fn an_exec_preview_shows_the_command_the_runner_would_run() {
        let text = r#"
[[builders]]
name = "jammy"
image = "registry.example.com/cnb/builder:latest"

[[images]]
name = "petclinic"
builder = "jammy"
image = "registry.example.com/apps/petclinic:latest"

[runner]
type = "exec"
[runner.exec]
rebuild = ["pack", "build", "{image}", "--builder", "{builder}", "--env", "CHANGE={change_id}"]
rebase = ["pack", "rebase", "{image}", "--run-image", "{run_image}"]
"#;
        let config = Config::parse(std::path::Path::new("/config.toml"), text).unwrap();
        let target = target("registry.example.com/apps/petclinic:latest");
        let action = ActionRef { key: "bm-1", change_id: "c1", image: "petclinic", kind: ActionKind::Rebuild };
        let shown = preview(&config, &action, &target).unwrap();
        assert_eq!(shown["runner"], "exec");
        let expected = [
            "pack",
            "build",
            "registry.example.com/apps/petclinic:latest",
            "--builder",
            "registry.example.com/cnb/builder@sha256:b",
            "--env",
            "CHANGE=c1",
        ];
        assert_eq!(shown["command"], serde_json::json!(expected));
        let rebase = ActionRef { kind: ActionKind::Rebase, ..action };
        let shown = preview(&config, &rebase, &target).unwrap();
        assert_eq!(shown["command"][4], "registry.example.com/cnb/run@sha256:r");
        assert_eq!(shown["target"]["image"], "registry.example.com/apps/petclinic:latest");
        assert_eq!(shown["path"], "runner");

        // With rebases in the daemon a rebase has no command; a rebuild keeps its own.
        let text = text.replace("[runner.exec]", "rebase = \"registry\"\n[runner.exec]");
        let config = Config::parse(std::path::Path::new("/config.toml"), &text).unwrap();
        let shown = preview(&config, &rebase, &target).unwrap();
        assert_eq!(shown["path"], "registry");
        assert_eq!(shown["rebase"]["run_image"], "registry.example.com/cnb/run@sha256:r");
        assert!(shown.get("command").is_none(), "{shown}");
        assert_eq!(preview(&config, &action, &target).unwrap()["command"][0], "pack");
    }
}
