//! Deploys to Kubernetes workloads (`[[images]] deploy`): a backend that takes only deploys. An
//! attempt reads each workload, records its containers' images before it writes (the action's
//! progress), points them at the new digest by a forced server-side apply of just those fields,
//! and watches the roll-out until it is healthy on what it wrote, fails, or someone else changes
//! what it wrote. A deploy that ends failed — for any reason, a retryable error on its last
//! attempt included — is undone ([`undo`]) and holds its image. A restart follows the same action
//! again: a write that landed is not made twice, and `deploy.started` is recorded once. The
//! override guard ([`guard`]) watches what succeeded deploys wrote.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::Value;

mod forced;
mod guard;
mod record;
mod undo;
mod view;

pub use guard::{guard, guard_index};
pub use record::{Origin, deploy_action};

use super::attempt::{Attempt, Digests, Next};
use super::carrier::ActionRef;
use super::carrier::{Backend, Carrier, Context};
use super::{Outcome, PreviewError, RunnerError};
use crate::config::Config;
use crate::ledger::ClaimedAction;
use builder_monitor_core::deploy::{
    self as core, CHANGE_ANNOTATION, ContainerWrite, DeployProgress, DeployTarget, FIELD_MANAGER, Health,
    WorkloadProgress, WorkloadState,
};
use builder_monitor_core::plan::ActionTarget;
use builder_monitor_core::progress::Progress;
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::schedule::{parse_timestamp, timestamp};

/// Deploys to workloads: deploys only, in the cluster `[kubernetes]` selects.
pub struct Workloads;

/// What a deploy needs in each namespace it deploys to.
pub use crate::config::DEPLOY_PERMISSIONS as PERMISSIONS;

impl Backend for Workloads {
    fn facts(&self) -> &'static crate::config::Facts {
        &crate::config::WORKLOADS
    }

    fn preview(&self, _: &Config, action: &ActionRef<'_>, target: &ActionTarget) -> Result<Value, PreviewError> {
        let deploy = target.plan.deploy();
        Ok(serde_json::json!({
            "runner": "deploy",
            "workloads": deploy.map(|d| &d.workloads),
            "image": deploy.map(|d| &d.reference),
            "annotation": { CHANGE_ANNOTATION: action.change_id },
            "target": target,
        }))
    }

    fn start(
        &self,
        _: &Config,
        clusters: &super::carrier::Clusters,
        _: tokio_util::sync::CancellationToken,
    ) -> Result<std::sync::Arc<dyn Carrier>, RunnerError> {
        let client = clusters.default.clone().ok_or(RunnerError::NoClient("deploy"))?;
        let views = view::Views::new(client.clone());
        Ok(std::sync::Arc::new(Started { client, views }))
    }
}

struct Started {
    client: kube::Client,
    /// The watches this cluster's deploys share ([`view`]).
    views: view::Views,
}

impl Carrier for Started {
    fn attempt<'a>(
        &'a self,
        ctx: &'a Context,
        action: &'a ClaimedAction,
        target: &'a ActionTarget,
        _verified: Option<&'a str>,
    ) -> BoxFuture<'a, Attempt> {
        Box::pin(async move {
            let Some(deploy) = target.plan.deploy() else {
                return Attempt::failed("a deploy action without a deploy target".into(), Next::Final);
            };
            let progress = action.progress.as_ref().and_then(Progress::deploy).cloned().unwrap_or_default();
            let views = &self.views;
            Deploying {
                client: &self.client,
                views,
                ctx,
                action,
                target,
                deploy,
                progress,
                planned: false,
                generations: Default::default(),
            }
            .run()
            .await
        })
    }
}

pub(super) fn resource(kind: core::WorkloadKind) -> ApiResource {
    let (group, version) = kind.api_version().split_once('/').unwrap_or(("", "v1"));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind.as_str()), kind.plural())
}

pub(super) fn pods() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Pod"), "pods")
}

/// One attempt of one deploy, with its record as it goes.
struct Deploying<'a> {
    client: &'a kube::Client,
    views: &'a view::Views,
    ctx: &'a Context,
    action: &'a ClaimedAction,
    target: &'a ActionTarget,
    deploy: &'a DeployTarget,
    progress: DeployProgress,
    /// Whether this attempt planned the deploy (nothing of it can have landed before): its writes
    /// read the workloads from the shared view; after a restart or retry they GET them.
    planned: bool,
    /// The generation each workload's write in this attempt made (by `Workload`'s display): the
    /// shared view may still show the one before, which health must not judge (it would read
    /// the old image as someone else's change).
    generations: std::sync::Mutex<BTreeMap<String, i64>>,
}

/// Why an attempt stops before the deploy is done.
enum Stop {
    /// The cluster could not be asked, or the ledger not written: tried again while attempts
    /// are left, and undone like a failure once they are out.
    Retry(String),
    /// The deploy failed: undone (`undo`) and the image held.
    Fail(String),
}

/// Why a workload's roll-out did not become healthy.
enum Unhealthy {
    /// It failed: undone.
    Failed(String),
    /// Someone else changed what it runs: theirs stays, the rest is undone, the image held.
    Overridden(Vec<core::Changed>),
    /// The cluster could not be asked: tried again.
    Api(String),
}

impl Deploying<'_> {
    fn api(&self, w: &core::Workload) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &w.namespace, &resource(w.kind))
    }

    async fn get(&self, w: &core::Workload) -> Result<Option<Value>, String> {
        match self.api(w).get_opt(&w.name).await {
            Ok(o) => Ok(o.and_then(|o| serde_json::to_value(o).ok())),
            Err(err) => {
                // A read refused for a missing right is listed (`rights`); retried as any.
                crate::rights::noted(self.client, &err, &format!("image \"{}\"'s deploy", self.action.image)).await;
                Err(format!("cannot read {w}: {err}"))
            }
        }
    }

    /// `w` as the shared view of its kind and namespace holds it (listed first); a GET when the
    /// view does not hold it (yet: created since the view listed).
    async fn read(&self, w: &core::Workload) -> Result<Option<Value>, String> {
        let held = self.views.hold(view::Scope::Workloads(w.kind, w.namespace.clone()));
        let mut listing = held.subscribe();
        view::listed(&mut listing).await.map_err(|e| format!("cannot read {w}: {e}"))?;
        let found = listing.borrow().objects.get(&w.name).cloned();
        match found {
            Some(object) => Ok(Some(object)),
            None => self.get(w).await,
        }
    }

    async fn record(&self) -> Result<(), String> {
        match self.ctx.ledger.record_progress(&self.action.key, Progress::Deploy(self.progress.clone())).await {
            Ok(true) => Ok(()),
            Ok(false) => Err("the action is no longer running".into()),
            Err(err) => Err(format!("cannot record the deploy's progress: {err}")),
        }
    }

    /// Whether this is the action's last attempt: a retryable stop ends it.
    fn last_attempt(&self) -> bool {
        self.action.attempt >= self.ctx.config.runner.max_attempts
    }

    /// The record of what each workload runs now and what it gets, before anything is written.
    async fn plan(&self) -> Result<DeployProgress, Stop> {
        let app = ImageRef::parse(&self.target.image)
            .map_err(|e| Stop::Fail(format!("invalid app image {}: {e}", self.target.image)))?;
        let mut progress = DeployProgress::default();
        for w in &self.deploy.workloads {
            let object = match self.read(w).await {
                Ok(Some(o)) => o,
                Ok(None) => return Err(Stop::Fail(format!("{w} not found"))),
                Err(why) => return Err(Stop::Retry(why)),
            };
            if let Some(why) = being_deleted(w, &object) {
                return Err(Stop::Fail(format!("{why}: nothing written")));
            }
            if let Some(mark) = core::gitops_owner(&object)
                && w.gitops_owned == core::GitopsOwned::Skip
            {
                progress.workloads.push(WorkloadProgress {
                    workload: w.clone(),
                    containers: Vec::new(),
                    previous_change: None,
                    state: WorkloadState::Skipped,
                    detail: Some(format!(
                        "{w} is owned by a GitOps tool ({mark}): not written; its Git source is where the digest goes \
                         (or set gitops_owned = \"patch\")"
                    )),
                    written_at: None,
                    failed_revision: None,
                });
                continue;
            }
            let chosen = core::targets(w, &object, &app).map_err(|e| Stop::Fail(e.to_string()))?;
            let all = core::containers(w.kind, &object).unwrap_or_default();
            let containers = chosen
                .into_iter()
                .map(|c| ContainerWrite {
                    init: all.iter().any(|(init, a)| *init && a.name == c.name),
                    name: c.name,
                    previous: c.image,
                    image: self.deploy.reference.clone(),
                })
                .collect();
            let annotation =
                format!("{}/metadata/annotations/{}", w.kind.template_pointer(), CHANGE_ANNOTATION.replace('/', "~1"));
            progress.workloads.push(WorkloadProgress {
                workload: w.clone(),
                containers,
                previous_change: object.pointer(&annotation).and_then(Value::as_str).map(str::to_string),
                state: WorkloadState::Writing,
                detail: None,
                written_at: None,
                failed_revision: None,
            });
        }
        Ok(progress)
    }

    async fn try_apply(
        &self,
        w: &core::Workload,
        images: &[(bool, core::Container)],
        change: Option<&str>,
    ) -> Result<(), kube::Error> {
        let body = core::apply_body(w, images, change);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let written = self.api(w).patch(&w.name, &params, &Patch::Apply(&body)).await?;
        if let Some(generation) = written.metadata.generation {
            let mut generations = self.generations.lock().unwrap_or_else(|e| e.into_inner());
            generations.insert(w.to_string(), generation);
        }
        Ok(())
    }

    /// Workload `i`'s write; a write the cluster refuses for a missing right waits (recorded as
    /// the workload's detail, for `status`) until the right is granted again, then is made: the
    /// deploy is neither failed nor retried meanwhile (`rights`).
    async fn apply_when_granted(&mut self, i: usize, images: &[(bool, core::Container)]) -> Result<(), Stop> {
        let w = self.progress.workloads[i].workload.clone();
        loop {
            // A leader that has lost the Lease (while it waited, too) writes nothing more.
            if !self.ctx.ledger.may_write() {
                return Err(Stop::Retry(crate::ledger::LedgerError::NotLeading.to_string()));
            }
            let error = match self.try_apply(&w, images, Some(&self.action.change_id)).await {
                Ok(()) => break,
                Err(error) => error,
            };
            let Some(right) = crate::rights::refused(&error) else {
                return Err(Stop::Retry(format!("cannot write {w}: {error}")));
            };
            // A 403 that RBAC does not explain (an admission webhook's refusal: the review says
            // the right is granted, or cannot be asked) is an ordinary failed write, tried again
            // within the attempts; waiting for a right already held would never end.
            if crate::rights::allowed_now(self.client, &right).await != Some(false) {
                return Err(Stop::Retry(format!("cannot write {w}: {error}")));
            }
            let what = format!("image \"{}\"'s deploy", self.action.image);
            let _waiting = crate::rights::Waiting::new(right.clone(), &what);
            self.progress.workloads[i].detail = Some(format!("waiting for the right to {right}"));
            self.record().await.map_err(Stop::Retry)?;
            crate::rights::granted(self.client, &right).await;
        }
        if self.progress.workloads[i].detail.take().is_some() {
            self.record().await.map_err(Stop::Retry)?;
        }
        Ok(())
    }

    /// The attempt: the deploy carried on from its record; any stop that ends the deploy (a
    /// failure, an override, or a retryable error on the last attempt) undoes what it wrote.
    async fn run(mut self) -> Attempt {
        match self.go().await {
            Ok(attempt) => attempt,
            // A replica no longer leading leaves the deploy (and any undo) to the leader.
            Err(Stop::Retry(why)) if !self.last_attempt() || !self.ctx.ledger.may_write() => {
                Attempt::failed(why, Next::Retry)
            }
            Err(Stop::Retry(why)) => {
                let why = format!(
                    "{why} (attempt {} of {}: none left)",
                    self.action.attempt, self.ctx.config.runner.max_attempts
                );
                self.fail(why).await
            }
            Err(Stop::Fail(why)) => self.fail(why).await,
        }
    }

    async fn go(&mut self) -> Result<Attempt, Stop> {
        // An earlier attempt failed and began its undo (a crash cut it short): finish the undo,
        // never write the failed digest again.
        if self
            .progress
            .workloads
            .iter()
            .any(|w| matches!(w.state, WorkloadState::Failed | WorkloadState::Undone | WorkloadState::Overridden))
        {
            return Err(Stop::Fail("an earlier attempt failed; its undo is completed now".into()));
        }
        if self.progress.workloads.is_empty() {
            self.progress = self.plan().await?;
            self.planned = true;
            if self.progress.workloads.iter().all(|w| w.state == WorkloadState::Skipped) {
                let detail =
                    self.progress.workloads.iter().filter_map(|w| w.detail.clone()).collect::<Vec<_>>().join("; ");
                let mut attempt = Attempt::new(
                    Outcome { success: true, detail, output_tail: String::new() },
                    Next::Final,
                    Digests::default(),
                );
                attempt.moved = false;
                attempt.deploy_mut().skipped = true;
                attempt.deploy_mut().workloads = std::mem::take(&mut self.progress.workloads);
                return Ok(attempt);
            }
            self.record().await.map_err(Stop::Retry)?;
        }
        self.write_all().await?;
        // Once per deploy, after its writes are recorded: a restart that finds them landed
        // announces what the crash kept it from announcing, and one after the announcement adds
        // nothing (its event id is the action's).
        if !self.progress.started && self.progress.wrote() {
            if !self.ctx.deploy_started(self.action, self.target, &self.progress).await {
                return Err(Stop::Retry("cannot record deploy.started".into()));
            }
            self.progress.started = true;
            self.record().await.map_err(Stop::Retry)?;
        }
        // Health: each workload in turn, within `deploy_timeout` of its write.
        for i in 0..self.progress.workloads.len() {
            if self.progress.workloads[i].state != WorkloadState::Written {
                continue;
            }
            let w = self.progress.workloads[i].workload.clone();
            if w.kind.has_health() {
                let written = self.progress.workloads[i].written_at.as_deref().and_then(parse_timestamp);
                let writes = self.progress.workloads[i].containers.clone();
                match self.healthy(&w, &writes, written).await {
                    Ok(()) => {}
                    Err(Unhealthy::Api(why)) => return Err(Stop::Retry(why)),
                    Err(Unhealthy::Failed(why)) => {
                        self.progress.workloads[i].state = WorkloadState::Failed;
                        self.progress.workloads[i].detail = Some(why.clone());
                        return Err(Stop::Fail(format!("{w}: {why}")));
                    }
                    Err(Unhealthy::Overridden(changed)) => {
                        let why = overridden(&changed, "during the roll-out");
                        self.progress.workloads[i].state = WorkloadState::Overridden;
                        self.progress.workloads[i].detail = Some(why.clone());
                        return Err(Stop::Fail(format!("{w}: {why}")));
                    }
                }
            }
            self.progress.workloads[i].state = WorkloadState::Healthy;
            self.record().await.map_err(Stop::Retry)?;
        }
        let written: Vec<String> = self
            .progress
            .workloads
            .iter()
            .filter(|w| w.state == WorkloadState::Healthy)
            .map(|w| w.workload.to_string())
            .collect();
        let detail = format!("{} runs {}: {}", self.target.image, short(&self.deploy.digest), written.join(", "));
        let mut attempt = Attempt::new(
            Outcome { success: true, detail, output_tail: String::new() },
            Next::Final,
            Digests::default(),
        );
        attempt.moved = false;
        attempt.deploy_mut().workloads = std::mem::take(&mut self.progress.workloads);
        Ok(attempt)
    }

    /// The writes: each once. A workload recorded as being written is read first: the write of
    /// an attempt before a crash may have landed.
    async fn write_all(&mut self) -> Result<(), Stop> {
        for i in 0..self.progress.workloads.len() {
            if self.progress.workloads[i].state != WorkloadState::Writing {
                continue;
            }
            let w = self.progress.workloads[i].workload.clone();
            let read = if self.planned { self.read(&w).await } else { self.get(&w).await };
            let object = match read {
                Ok(Some(o)) => o,
                Ok(None) => return Err(Stop::Fail(format!("{w} is gone"))),
                Err(why) => return Err(Stop::Retry(why)),
            };
            let writes = self.progress.workloads[i].containers.clone();
            let landed = core::still_written(w.kind, &object, &writes) == Some(true);
            if !landed {
                let before: Vec<ContainerWrite> =
                    writes.iter().map(|c| ContainerWrite { image: c.previous.clone(), ..c.clone() }).collect();
                if core::still_written(w.kind, &object, &before) != Some(true) {
                    let changed = core::changed_by_others(w.kind, &object, &before);
                    let why = overridden(&changed, "before the write; nothing written");
                    self.progress.workloads[i].state = WorkloadState::Overridden;
                    self.progress.workloads[i].detail = Some(why.clone());
                    return Err(Stop::Fail(format!("{w}: {why}")));
                }
                let images: Vec<(bool, core::Container)> = writes
                    .iter()
                    .map(|c| (c.init, core::Container { name: c.name.clone(), image: c.image.clone() }))
                    .collect();
                self.apply_when_granted(i, &images).await?;
            }
            self.progress.workloads[i].state = WorkloadState::Written;
            self.progress.workloads[i].written_at = Some(timestamp(self.ctx.clock.now()));
            self.record().await.map_err(Stop::Retry)?;
        }
        Ok(())
    }

    /// Waits until `w`'s roll-out is healthy on what the deploy wrote (`writes`), fails, a new pod
    /// stays in a bad waiting state for `fail_after`, `deploy_timeout` after `written` passes, or
    /// someone else changes a written container (at once: healthy means our images are what
    /// runs). Reads the workload and its troubled pods from the shared views ([`view`]).
    async fn healthy(
        &self,
        w: &core::Workload,
        writes: &[ContainerWrite],
        written: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<(), Unhealthy> {
        let rollout = &self.ctx.config.rollout;
        let now = self.ctx.clock.now();
        let elapsed = written.map(|t| (now - t).to_std().unwrap_or_default()).unwrap_or_default();
        let deadline = tokio::time::Instant::now() + rollout.deploy_timeout.saturating_sub(elapsed);
        let held = self.views.hold(view::Scope::Workloads(w.kind, w.namespace.clone()));
        let mut objects = held.subscribe();
        view::listed(&mut objects).await.map_err(|e| Unhealthy::Api(format!("cannot read {w}: {e}")))?;
        // The pods are read by the workload's selector, from the view of the troubled ones.
        let viewed = objects.borrow().objects.get(&w.name).cloned();
        let first = match viewed {
            Some(o) => o,
            None => match self.get(w).await {
                Ok(Some(o)) => o,
                Ok(None) => return Err(Unhealthy::Failed(format!("{w} is gone"))),
                Err(why) => return Err(Unhealthy::Api(why)),
            },
        };
        let labels: Option<BTreeMap<String, String>> =
            core::selector_labels(&first).map(|l| l.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        let pods_held = labels.as_ref().map(|_| self.views.hold(view::Scope::Pods(w.namespace.clone())));
        let mut pods = pods_held.as_ref().map(view::Held::subscribe);
        // Whether the view has shown it: missing after that, it was deleted. What it shows of a
        // generation before this attempt's write is not judged: the watch has not caught up.
        let mut seen = false;
        let written_generation =
            self.generations.lock().unwrap_or_else(|e| e.into_inner()).get(&w.to_string()).copied();
        let caught_up = |o: &Value| {
            let generation = o.pointer("/metadata/generation").and_then(Value::as_i64);
            written_generation.is_none_or(|written| generation.is_some_and(|g| g >= written))
        };
        let mut trouble_since: BTreeMap<String, tokio::time::Instant> = BTreeMap::new();
        loop {
            let verdict = match objects.borrow_and_update().objects.get(&w.name) {
                Some(current) if caught_up(current) => {
                    seen = true;
                    judge(w, writes, current)
                }
                Some(_) => None,
                None if seen => Some(Err(Unhealthy::Failed(format!("{w} was deleted")))),
                None if caught_up(&first) => judge(w, writes, &first),
                None => None,
            };
            if let Some(verdict) = verdict {
                return verdict;
            }
            let trouble = match (&mut pods, &labels) {
                (Some(pods), Some(labels)) => {
                    let labels: BTreeMap<&str, &str> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    let listing = pods.borrow_and_update();
                    core::pod_trouble(
                        listing.objects.values().filter(|p| core::selects(&labels, p)),
                        &self.action.change_id,
                    )
                }
                _ => None,
            };
            let recheck = match trouble {
                Some(t) => {
                    let key = format!("{}/{}/{}", t.pod, t.container, t.reason);
                    let since = *trouble_since.entry(key).or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= rollout.fail_after {
                        return Err(Unhealthy::Failed(t.to_string()));
                    }
                    (since + rollout.fail_after).min(deadline)
                }
                None => {
                    trouble_since.clear();
                    deadline
                }
            };
            let pods_changed = async {
                match pods.as_mut() {
                    Some(pods) => pods.changed().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = objects.changed() => if changed.is_err() {
                    return Err(Unhealthy::Api(format!("the watch of {w} ended")));
                },
                changed = pods_changed => if changed.is_err() {
                    return Err(Unhealthy::Api(format!("the watch of {w}'s pods ended")));
                },
                _ = tokio::time::sleep_until(recheck) => {
                    if tokio::time::Instant::now() >= deadline {
                        let limit = humantime::format_duration(rollout.deploy_timeout);
                        return Err(Unhealthy::Failed(format!("not healthy within deploy_timeout {limit}")));
                    }
                }
            }
        }
    }
}

/// What `current` says of `w`'s roll-out of `writes`: `None` while it progresses.
fn judge(w: &core::Workload, writes: &[ContainerWrite], current: &Value) -> Option<Result<(), Unhealthy>> {
    let changed = core::changed_by_others(w.kind, current, writes);
    if !changed.is_empty() {
        return Some(Err(Unhealthy::Overridden(changed)));
    }
    if let Some(why) = being_deleted(w, current) {
        return Some(Err(Unhealthy::Failed(why)));
    }
    match core::health(w.kind, current) {
        Health::Healthy => Some(Ok(())),
        Health::Failed(why) => Some(Err(Unhealthy::Failed(why))),
        Health::Progressing(_) => None,
    }
}

/// Why `w` (as `object` shows it) can never roll out: it is being deleted — its
/// `deletionTimestamp` is set, as for everything in a namespace being terminated, where the
/// server refuses new ReplicaSets and pods and the controllers no longer roll it out. Without
/// this the deploy would wait out `deploy_timeout` (holding the waves after it).
fn being_deleted(w: &core::Workload, object: &Value) -> Option<String> {
    let since = object.pointer("/metadata/deletionTimestamp")?.as_str()?;
    Some(format!(
        "{w} is being deleted (since {since}; its namespace \"{}\" may be being terminated): it will not roll out",
        w.namespace
    ))
}

/// What a deploy says of containers someone else changed (`when`: during the roll-out, …).
fn overridden(changed: &[core::Changed], when: &str) -> String {
    let list: Vec<String> = changed.iter().map(ToString::to_string).collect();
    format!("changed by someone else {when} ({}): left as they set it", list.join(", "))
}

fn short(digest: &str) -> &str {
    &digest[..digest.len().min("sha256:".len() + 12)]
}
