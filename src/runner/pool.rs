//! Pools: where the runner kinds that build in pools (`kubernetes`, `kpack`) build. Each pool is
//! started once — its cluster's client, a watch on the objects its kind makes (a Job, a kpack
//! Build: `objects::PoolObjects`), a health kept from what that client hears, and at most
//! `max_in_flight` builds. An action goes to the pool its image names, or to the first pool
//! serving every platform of the app image whose cluster answers (`builder_monitor_core::pool`);
//! the pool is recorded with the action before anything is created there, so a restart follows
//! the build in that pool instead of starting another. A pool whose cluster does not answer is
//! passed over for the next one, within the same attempt.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::api::{Api, DynamicObject};
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::attempt::Attempt;
use super::carrier::{ActionRef, Backend, Carrier, Clusters, Context};
use super::objects::{Placement, PoolObjects};
use super::watch::{Health, Watched};
pub use super::watch::{unanswered, unanswered_watch};
use super::{Outcome, POOLED, PreviewError, RunnerError};
use crate::config::{Config, Facts, Pool, RunnerKind};
use crate::ledger::ClaimedAction;
use builder_monitor_core::plan::ActionTarget;
use builder_monitor_core::pool::{BuildProgress, PoolView, candidates};
use builder_monitor_core::progress::Progress;
use builder_monitor_core::reference::ImageRef;

/// A runner kind that builds in pools, as a backend: its answers are its kind's, its carrier the
/// pools (of whatever kind each is). Each such kind is one line of the runner's `POOLED`.
pub struct Pooled {
    kind: RunnerKind,
    objects: &'static dyn PoolObjects,
}

impl Pooled {
    pub const fn new(kind: RunnerKind, objects: &'static dyn PoolObjects) -> Self {
        Pooled { kind, objects }
    }
}

/// The backend of `kind`, when it builds in pools.
pub fn backend(kind: RunnerKind) -> Option<&'static dyn Backend> {
    POOLED.iter().find(|p| p.kind == kind).map(|p| p as &dyn Backend)
}

/// The objects a pool of `kind` makes.
fn objects(kind: RunnerKind) -> Result<&'static dyn PoolObjects, RunnerError> {
    POOLED
        .iter()
        .find(|p| p.kind == kind)
        .map(|p| p.objects)
        .ok_or_else(|| RunnerError::Pool(format!("runner type \"{}\" does not build in pools", kind.as_str())))
}

impl Backend for Pooled {
    fn facts(&self) -> &'static Facts {
        self.kind.facts()
    }

    fn preview(&self, config: &Config, action: &ActionRef<'_>, target: &ActionTarget) -> Result<Value, PreviewError> {
        preview(config, action, target)
    }

    fn start(
        &self,
        config: &Config,
        clusters: &Clusters,
        stop: CancellationToken,
    ) -> Result<Arc<dyn Carrier>, RunnerError> {
        Ok(Arc::new(Pools::start(config, clusters, stop)?))
    }
}

/// The longest wait between tries to reach the pool of a build started before a restart.
const MAX_REACH_BACKOFF: Duration = Duration::from_secs(60);

/// One pool, started.
struct Site {
    pool: Pool,
    objects: &'static dyn PoolObjects,
    client: kube::Client,
    health: Arc<Health>,
    slots: Option<Arc<Semaphore>>,
    watched: Arc<Watched>,
}

/// Why a build could not be created in a pool.
enum CreateError {
    /// The cluster did not answer: another pool may take the build.
    Unanswered(String),
    Failed(RunnerError),
}

impl Site {
    fn start(pool: &Pool, client: kube::Client, stop: CancellationToken) -> Result<Self, RunnerError> {
        let objects = objects(pool.kind)?;
        let health = Arc::new(Health::new(&pool.name));
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), &pool.settings.namespace, &objects.resource());
        let watched = Watched::start(api, health.clone(), stop);
        let slots = pool.max_in_flight.map(|n| Arc::new(Semaphore::new(n)));
        Ok(Site { pool: pool.clone(), objects, client, health, slots, watched })
    }

    async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone()?.acquire_owned().await.ok()
    }

    /// Creates the action's object here, or finds it made already (a retry or a restart). Made
    /// only while this replica may write (`Ledger::may_write`); a create the cluster refuses for
    /// a right RBAC does not grant waits for it (`rights::when_granted`).
    async fn create(
        &self,
        ctx: &Context,
        action: &ActionRef<'_>,
        target: &ActionTarget,
        place: &Placement<'_>,
        max_attempts: u32,
    ) -> Result<(), CreateError> {
        let namespace = &self.pool.settings.namespace;
        let kind = self.objects.kind();
        let object = self.objects.object(action, target, place, max_attempts).map_err(CreateError::Failed)?;
        let api = Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &self.objects.resource());
        let what = format!("image \"{}\"'s {kind}", action.image);
        let (api, object) = (&api, &object);
        let created = crate::rights::when_granted(&self.client, &what, move || async move {
            if !ctx.ledger.may_write() {
                return Ok(None);
            }
            super::strict::create(api, object).await.map(Some)
        })
        .await;
        match created {
            Ok(None) => Err(CreateError::Failed(crate::ledger::LedgerError::NotLeading.into())),
            Ok(Some(warnings)) => {
                self.health.answered();
                tracing::info!(name = %action.key, pool = %self.pool.name, namespace = %namespace, "{kind} created");
                for warning in warnings {
                    tracing::warn!(name = %action.key, pool = %self.pool.name, warning = %warning, "the cluster warns about the {kind} it accepted");
                }
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                self.health.answered();
                tracing::info!(name = %action.key, pool = %self.pool.name, "{kind} exists already (a retry or restart); following it");
                Ok(())
            }
            Err(err) if unanswered(&err) => {
                self.health.unanswered(&err.to_string());
                Err(CreateError::Unanswered(err.to_string()))
            }
            Err(source) => {
                self.health.answered();
                Err(CreateError::Failed(super::strict::refusal(kind, action.key, source)))
            }
        }
    }

    /// Waits for the build to finish, recording each time a queue (Kueue) holds or admits it.
    async fn follow(&self, ctx: &Context, action: &ClaimedAction, progress: &mut BuildProgress) -> Outcome {
        let objects = self.objects;
        let ((success, detail), finished) = loop {
            let queued = progress.queued;
            let seen = self
                .watched
                .wait(&action.key, |object| match objects.outcome(object) {
                    Some(done) => Some(Err((done, object.clone()))),
                    None if objects.queued(object) != queued => Some(Ok(!queued)),
                    None => None,
                })
                .await;
            match seen {
                Err(done) => break done,
                Ok(now_queued) => {
                    progress.queued = now_queued;
                    // Recorded first: what the log says, `status` shows already.
                    record(ctx, action, progress).await;
                    let kind = objects.kind();
                    if now_queued {
                        tracing::info!(action = %action.key, pool = %self.pool.name, "the {kind} waits in its Kueue queue");
                    } else {
                        tracing::info!(action = %action.key, pool = %self.pool.name, "Kueue admitted the {kind}; it runs");
                    }
                }
            }
        };
        let output_tail = if success {
            String::new()
        } else {
            objects.output_tail(&self.client, &self.pool.settings.namespace, &action.key).await
        };
        objects.clean_up(&self.client, &self.pool.settings.namespace, &finished).await;
        Outcome { success, detail, output_tail }
    }
}

async fn record(ctx: &Context, action: &ClaimedAction, progress: &BuildProgress) -> bool {
    match ctx.ledger.record_progress(&action.key, Progress::Build(progress.clone())).await {
        Ok(recorded) => recorded,
        Err(err) => {
            tracing::error!(action = %action.key, error = %err, "cannot record the build's pool");
            false
        }
    }
}

fn failed(detail: String) -> Outcome {
    Outcome { success: false, detail, output_tail: String::new() }
}

/// Every pool, started: the carrier of the runner kinds that build in pools.
pub struct Pools {
    sites: Vec<Site>,
    max_attempts: u32,
}

impl Pools {
    pub fn start(config: &Config, clusters: &Clusters, stop: CancellationToken) -> Result<Self, RunnerError> {
        let mut sites = Vec::new();
        for pool in &config.runner.pools {
            let client = clusters.of(pool).ok_or_else(|| match &pool.cluster {
                Some(_) => RunnerError::Pool(format!("pool \"{}\" has no client for its cluster", pool.name)),
                None => RunnerError::NoClient(pool.kind.as_str()),
            })?;
            sites.push(Site::start(pool, client, stop.clone())?);
        }
        if sites.is_empty() {
            return Err(RunnerError::MissingSettings("runner.kubernetes] or [[runner.pools]"));
        }
        Ok(Pools { sites, max_attempts: config.runner.max_attempts })
    }

    fn site(&self, name: &str) -> Option<&Site> {
        self.sites.iter().find(|s| s.pool.name == name)
    }

    /// One attempt; `used` is the pool it ran in (or last tried).
    async fn carry_out(
        &self,
        ctx: &Context,
        action: &ClaimedAction,
        target: &ActionTarget,
        used: &std::sync::Mutex<Option<String>>,
    ) -> Outcome {
        let set_used = |name: &str| *used.lock().unwrap_or_else(|e| e.into_inner()) = Some(name.to_string());
        let reference = super::reference(action);
        let image = ctx.config.image(&action.image);
        let image_template = image.and_then(|i| i.pod_template.as_ref()).map(|t| &t.value);
        let recorded = action.progress.as_ref().and_then(Progress::build).cloned();
        if let Some(mut progress) = recorded {
            let Some(site) = self.site(&progress.pool) else {
                return failed(format!(
                    "the build was started in pool \"{}\", which is no longer configured; it is not followed",
                    progress.pool
                ));
            };
            set_used(&progress.pool);
            let platform = progress.platform.clone();
            let place = Placement { pool: &site.pool, image_template, platform: platform.as_deref() };
            let _slot = site.slot().await;
            return self.reach(ctx, site, &reference, target, &place, action, &mut progress).await;
        }
        let platforms = app_platforms(ctx, target).await;
        let views: Vec<PoolView<'_>> = self
            .sites
            .iter()
            .map(|s| PoolView {
                name: &s.pool.name,
                platforms: s.pool.platforms.as_deref(),
                answers: s.health.answers(),
            })
            .collect();
        let named = image.and_then(|i| i.pool.as_deref());
        let order = match candidates(&views, named, platforms.as_deref()) {
            Ok(order) => order,
            Err(err) => {
                return failed(format!(
                    "{err}: add the platform to a pool's platforms, or name the pool with [[images]] pool"
                ));
            }
        };
        // One platform places the pod on a node of it; an index's build runs where the pool puts it.
        let platform = match platforms.as_deref() {
            Some([one]) => Some(one.clone()),
            _ => None,
        };
        let mut passed = Vec::new();
        for name in order {
            let Some(site) = self.site(name) else { continue };
            set_used(name);
            let place = Placement { pool: &site.pool, image_template, platform: platform.as_deref() };
            let mut progress = BuildProgress { pool: name.to_string(), queued: false, platform: platform.clone() };
            let _slot = site.slot().await;
            // Recorded before anything is created: a restart follows the build in this pool.
            if !record(ctx, action, &progress).await {
                return failed("cannot record the pool the build runs in; nothing was created".into());
            }
            match site.create(ctx, &reference, target, &place, self.max_attempts).await {
                Ok(()) => return site.follow(ctx, action, &mut progress).await,
                Err(CreateError::Unanswered(error)) => {
                    tracing::warn!(action = %action.key, pool = name, error = %error, "the pool's cluster does not answer; trying the next pool");
                    passed.push(format!("{name}: {error}"));
                }
                Err(CreateError::Failed(err)) => return failed(err.to_string()),
            }
        }
        failed(format!("no pool that builds {} answers ({})", describe(platforms.as_deref()), passed.join("; ")))
    }

    /// Follows a build recorded in `site` before a restart: creating it there (found if it was
    /// made), trying again with backoff while the cluster does not answer — the build may be
    /// running there, so it never moves to another pool.
    #[allow(clippy::too_many_arguments)]
    async fn reach(
        &self,
        ctx: &Context,
        site: &Site,
        reference: &ActionRef<'_>,
        target: &ActionTarget,
        place: &Placement<'_>,
        action: &ClaimedAction,
        progress: &mut BuildProgress,
    ) -> Outcome {
        let mut wait = Duration::from_secs(1);
        loop {
            match site.create(ctx, reference, target, place, self.max_attempts).await {
                Ok(()) => return site.follow(ctx, action, progress).await,
                Err(CreateError::Failed(err)) => return failed(err.to_string()),
                Err(CreateError::Unanswered(error)) => {
                    tracing::warn!(action = %action.key, pool = %site.pool.name, error = %error, retry_in = ?wait, "the build's pool does not answer; it started there, so it is followed there");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(MAX_REACH_BACKOFF);
                }
            }
        }
    }
}

fn describe(platforms: Option<&[String]>) -> String {
    platforms.map(|p| p.join(" and ")).unwrap_or_else(|| "the app (its platform is not known)".into())
}

async fn app_platforms(ctx: &Context, target: &ActionTarget) -> Option<Vec<String>> {
    platforms_of(&ctx.registry, &target.image, ctx.config.monitor.max_platforms).await
}

/// The platforms of an app image as its tag has them now; `None` when it cannot be read (a
/// first build): then every pool may take it.
pub async fn platforms_of(registry: &crate::registry::Registry, image: &str, max: usize) -> Option<Vec<String>> {
    let reference = ImageRef::parse(image).ok()?;
    match crate::inspect::observe(registry, &reference, reference.manifest_reference(), max).await {
        Ok(observation) => {
            let platforms: Vec<String> = observation.platforms.into_keys().filter(|p| p != "unknown").collect();
            (!platforms.is_empty()).then_some(platforms)
        }
        Err(err) => {
            tracing::info!(image, error = %err, "the app image's platform cannot be read; any pool may build it");
            None
        }
    }
}

impl Carrier for Pools {
    fn attempt<'a>(
        &'a self,
        ctx: &'a Context,
        action: &'a ClaimedAction,
        target: &'a ActionTarget,
        verified: Option<&'a str>,
    ) -> BoxFuture<'a, Attempt> {
        Box::pin(async move {
            let used = std::sync::Mutex::new(None);
            let work = async { (self.carry_out(ctx, action, target, &used).await, true) };
            let mut attempt = ctx.pushed(action, target, verified, work).await;
            attempt.build_mut().pool = used.into_inner().unwrap_or_else(|e| e.into_inner());
            attempt
        })
    }
}

/// The pool an app's build would go to now, every cluster taken to answer (`build-spec`).
pub fn choose<'a>(config: &'a Config, image: &str, platforms: Option<&[String]>) -> Result<&'a Pool, String> {
    let views: Vec<PoolView<'_>> = config
        .runner
        .pools
        .iter()
        .map(|p| PoolView { name: &p.name, platforms: p.platforms.as_deref(), answers: true })
        .collect();
    let named = config.image(image).and_then(|i| i.pool.as_deref());
    let order = candidates(&views, named, platforms).map_err(|e| e.to_string())?;
    order.first().and_then(|name| config.runner.pool(name)).ok_or_else(|| "no pools are configured".to_string())
}

/// What the pool an action would go to now would create (`build-spec`): the image's pool, else
/// the first pool (`build-spec` names the pool by the app's platforms first).
pub fn preview(config: &Config, action: &ActionRef<'_>, target: &ActionTarget) -> Result<Value, PreviewError> {
    preview_on(config, action, target, None)
}

/// [`preview`] for an app of known `platforms` (one of them places the pod, as the runner does).
pub fn preview_on(
    config: &Config,
    action: &ActionRef<'_>,
    target: &ActionTarget,
    platforms: Option<&[String]>,
) -> Result<Value, PreviewError> {
    let image = config.image(action.image);
    let named = image.and_then(|i| i.pool.as_deref());
    let pool = match named {
        Some(name) => config.runner.pool(name),
        None => config.runner.pools.first(),
    };
    let Some(pool) = pool else {
        return Ok(super::exec::command_preview(config, action, target));
    };
    let image_template = image.and_then(|i| i.pod_template.as_ref()).map(|t| &t.value);
    let platform = match platforms {
        Some([one]) => Some(one.as_str()),
        Some(_) => None,
        None => pool.platforms.as_ref().filter(|p| p.len() == 1).map(|p| p[0].as_str()),
    };
    let place = Placement { pool, image_template, platform };
    objects(pool.kind)?.preview(action, target, &place, config.runner.max_attempts)
}
