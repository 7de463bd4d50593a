//! Deploys to Kubernetes workloads (`[[images]] deploy`): a backend that takes only deploys. An
//! attempt reads each workload, records its containers' images before it writes (the action's
//! progress), points them at the new digest by a forced server-side apply of just those fields,
//! and watches the roll-out until it is healthy on what it wrote, fails, or someone else changes
//! what it wrote. A deploy that ends failed — for any reason, a retryable error on its last
//! attempt included — is undone ([`undo`]) and holds its image. A restart follows the same action
//! again: a write that landed is not made twice, and `deploy.started` is recorded once. The
//! override guard ([`guard`]) watches what succeeded deploys wrote.

use std::collections::BTreeMap;

use futures::StreamExt;
use futures::future::BoxFuture;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;

mod forced;
mod guard;
mod record;
mod undo;

pub use guard::{guard, guard_index};
pub use record::{Origin, deploy_action};

use super::attempt::{Attempt, Digests, Next};
use super::carrier::ActionRef;
use super::carrier::{Backend, Carrier};
use super::{Outcome, PreviewError, Runner, RunnerError};
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
        Ok(std::sync::Arc::new(Started { client }))
    }
}

struct Started {
    client: kube::Client,
}

impl Carrier for Started {
    fn attempt<'a>(
        &'a self,
        runner: &'a Runner,
        action: &'a ClaimedAction,
        target: &'a ActionTarget,
        _verified: Option<&'a str>,
    ) -> BoxFuture<'a, Attempt> {
        Box::pin(async move {
            let Some(deploy) = target.plan.deploy() else {
                return Attempt::failed("a deploy action without a deploy target".into(), Next::Final);
            };
            let progress = action.progress.as_ref().and_then(Progress::deploy).cloned().unwrap_or_default();
            Deploying { client: &self.client, runner, action, target, deploy, progress }.run().await
        })
    }
}

pub(super) fn resource(kind: core::WorkloadKind) -> ApiResource {
    let (group, version) = kind.api_version().split_once('/').unwrap_or(("", "v1"));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind.as_str()), kind.plural())
}

fn pods() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Pod"), "pods")
}

/// One attempt of one deploy, with its record as it goes.
struct Deploying<'a> {
    client: &'a kube::Client,
    runner: &'a Runner,
    action: &'a ClaimedAction,
    target: &'a ActionTarget,
    deploy: &'a DeployTarget,
    progress: DeployProgress,
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
            Err(err) => Err(format!("cannot read {w}: {err}")),
        }
    }

    async fn record(&self) -> Result<(), String> {
        match self.runner.ledger.record_progress(&self.action.key, Progress::Deploy(self.progress.clone())).await {
            Ok(true) => Ok(()),
            Ok(false) => Err("the action is no longer running".into()),
            Err(err) => Err(format!("cannot record the deploy's progress: {err}")),
        }
    }

    /// Whether this is the action's last attempt: a retryable stop ends it.
    fn last_attempt(&self) -> bool {
        self.action.attempt >= self.runner.config.runner.max_attempts
    }

    /// The record of what each workload runs now and what it gets, before anything is written.
    async fn plan(&self) -> Result<DeployProgress, Stop> {
        let app = ImageRef::parse(&self.target.image)
            .map_err(|e| Stop::Fail(format!("invalid app image {}: {e}", self.target.image)))?;
        let mut progress = DeployProgress::default();
        for w in &self.deploy.workloads {
            let object = match self.get(w).await {
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
        self.api(w).patch(&w.name, &params, &Patch::Apply(&body)).await.map(|_| ())
    }

    /// Workload `i`'s write; a write the cluster refuses for a missing right waits (recorded as
    /// the workload's detail, for `status`) until the right is granted again, then is made: the
    /// deploy is neither failed nor retried meanwhile (`cluster::rights`).
    async fn apply_when_granted(&mut self, i: usize, images: &[(bool, core::Container)]) -> Result<(), Stop> {
        let w = self.progress.workloads[i].workload.clone();
        loop {
            let error = match self.try_apply(&w, images, Some(&self.action.change_id)).await {
                Ok(()) => break,
                Err(error) => error,
            };
            let Some(right) = crate::cluster::rights::refused(&error) else {
                return Err(Stop::Retry(format!("cannot write {w}: {error}")));
            };
            // A 403 that RBAC does not explain (an admission webhook's refusal: the review says
            // the right is granted, or cannot be asked) is an ordinary failed write, tried again
            // within the attempts; waiting for a right already held would never end.
            if crate::cluster::rights::allowed_now(self.client, &right).await != Some(false) {
                return Err(Stop::Retry(format!("cannot write {w}: {error}")));
            }
            let what = format!("image \"{}\"'s deploy", self.action.image);
            let _waiting = crate::cluster::rights::Waiting::new(right.clone(), &what);
            self.progress.workloads[i].detail = Some(format!("waiting for the right to {right}"));
            self.record().await.map_err(Stop::Retry)?;
            crate::cluster::rights::granted(self.client, &right).await;
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
            Err(Stop::Retry(why)) if !self.last_attempt() => Attempt::failed(why, Next::Retry),
            Err(Stop::Retry(why)) => {
                let why = format!(
                    "{why} (attempt {} of {}: none left)",
                    self.action.attempt, self.runner.config.runner.max_attempts
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
            if !self.runner.deploy_started(self.action, self.target, &self.progress).await {
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
            let object = match self.get(&w).await {
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
            self.progress.workloads[i].written_at = Some(timestamp(self.runner.clock.now()));
            self.record().await.map_err(Stop::Retry)?;
        }
        Ok(())
    }

    /// Waits until `w`'s roll-out is healthy on what the deploy wrote (`writes`), fails, a new pod
    /// stays in a bad waiting state for `fail_after`, `deploy_timeout` after `written` passes, or
    /// someone else changes a written container (at once: healthy means our images are what
    /// runs). Watches the workload and its pods.
    async fn healthy(
        &self,
        w: &core::Workload,
        writes: &[ContainerWrite],
        written: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<(), Unhealthy> {
        let rollout = &self.runner.config.rollout;
        let now = self.runner.clock.now();
        let elapsed = written.map(|t| (now - t).to_std().unwrap_or_default()).unwrap_or_default();
        let deadline = tokio::time::Instant::now() + rollout.deploy_timeout.saturating_sub(elapsed);
        let object = match self.get(w).await {
            Ok(Some(o)) => o,
            Ok(None) => return Err(Unhealthy::Failed(format!("{w} is gone"))),
            Err(why) => return Err(Unhealthy::Api(why)),
        };
        let selector = core::selector(&object);
        let mut current = object;
        let config = crate::runner::watch::settings().fields(&format!("metadata.name={}", w.name));
        let mut objects = watcher(self.api(w), config).default_backoff().boxed();
        // Whether the watch's current (re)list has shown the workload.
        let mut listed = false;
        let pod_api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &w.namespace, &pods());
        let mut pod_events = match &selector {
            Some(s) => watcher(pod_api, crate::runner::watch::settings().labels(s)).default_backoff().boxed(),
            None => futures::stream::pending().boxed(),
        };
        let mut pods: BTreeMap<String, Value> = BTreeMap::new();
        let mut trouble_since: BTreeMap<String, tokio::time::Instant> = BTreeMap::new();
        loop {
            let changed = core::changed_by_others(w.kind, &current, writes);
            if !changed.is_empty() {
                return Err(Unhealthy::Overridden(changed));
            }
            if let Some(why) = being_deleted(w, &current) {
                return Err(Unhealthy::Failed(why));
            }
            match core::health(w.kind, &current) {
                Health::Healthy => return Ok(()),
                Health::Failed(why) => return Err(Unhealthy::Failed(why)),
                Health::Progressing(_) => {}
            }
            let list: Vec<Value> = pods.values().cloned().collect();
            let recheck = match core::pod_trouble(&list, &self.action.change_id) {
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
            tokio::select! {
                event = objects.next() => match event {
                    Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                        listed = true;
                        if let Ok(v) = serde_json::to_value(o) {
                            current = v;
                        }
                    }
                    Some(Ok(watcher::Event::Delete(_))) => return Err(Unhealthy::Failed(format!("{w} was deleted"))),
                    // A (re)list that did not hold it: deleted before the watch began, or while it
                    // was disconnected; no Delete event comes for that.
                    Some(Ok(watcher::Event::Init)) => listed = false,
                    Some(Ok(watcher::Event::InitDone)) if !listed => {
                        return Err(Unhealthy::Failed(format!("{w} was deleted")));
                    }
                    Some(Ok(_)) => {}
                    Some(Err(err)) => tracing::warn!(workload = %w, error = %err, "watch of a deployed workload failed; retrying"),
                    None => return Err(Unhealthy::Api(format!("the watch of {w} ended"))),
                },
                event = pod_events.next() => match event {
                    Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                        if let (Some(name), Ok(v)) = (o.metadata.name.clone(), serde_json::to_value(&o)) {
                            pods.insert(name, v);
                        }
                    }
                    Some(Ok(watcher::Event::Delete(o))) => {
                        if let Some(name) = &o.metadata.name {
                            pods.remove(name);
                        }
                    }
                    Some(Ok(watcher::Event::Init)) => pods.clear(),
                    Some(Ok(_)) => {}
                    Some(Err(err)) => tracing::warn!(workload = %w, error = %err, "watch of a workload's pods failed; retrying"),
                    None => {}
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
