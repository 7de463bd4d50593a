//! Deploys to Kubernetes workloads (`[[images]] deploy`): a backend that takes only deploys. An
//! attempt reads each workload, records its containers' images before it writes (the action's
//! progress), points them at the new digest by a forced server-side apply of just those fields,
//! watches the roll-out until it is healthy or fails, and on a failure puts back what it recorded
//! (and the app tag, with `undo = "workload-and-tag"`). A restart follows the same action again:
//! a write that landed is not made twice.

use std::collections::BTreeMap;

use futures::StreamExt;
use futures::future::BoxFuture;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;

use super::attempt::{Attempt, Digests, Next};
use super::backend::{AfterRestart, Backend, Carrier, Rule};
use super::kubernetes::ActionRef;
use super::{Outcome, PreviewError, Runner, RunnerError};
use crate::config::{Config, RebasePath};
use crate::ledger::ClaimedAction;
use builder_monitor_core::deploy::{
    self as core, CHANGE_ANNOTATION, ContainerWrite, DeployProgress, DeployTarget, FIELD_MANAGER, Health,
    WorkloadProgress, WorkloadState,
};
use builder_monitor_core::event::EventType;
use builder_monitor_core::plan::{ActionKind, ActionTarget};
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::schedule::{parse_timestamp, timestamp};

/// Deploys to workloads: deploys only, in the cluster `[kubernetes]` selects.
pub struct Workloads;

const VERBS: &[&str] = &["get", "list", "watch", "patch"];

/// What a deploy needs in each namespace it deploys to.
pub const PERMISSIONS: &[Rule] = &[
    Rule { group: "apps", resource: "deployments", verbs: VERBS },
    Rule { group: "apps", resource: "statefulsets", verbs: VERBS },
    Rule { group: "apps", resource: "daemonsets", verbs: VERBS },
    Rule { group: "batch", resource: "cronjobs", verbs: VERBS },
    Rule { group: "", resource: "pods", verbs: &["list", "watch"] },
];

impl Backend for Workloads {
    fn name(&self) -> &'static str {
        "deploy"
    }

    fn setting(&self) -> &'static str {
        "[[images]] deploy"
    }

    /// None in the build namespace: its permissions are in the deploy namespaces ([`PERMISSIONS`]).
    fn permissions(&self) -> &'static [Rule] {
        &[]
    }

    fn takes(&self, kind: ActionKind) -> bool {
        kind == ActionKind::Deploy
    }

    fn retries(&self) -> bool {
        true
    }

    /// The roll-out lives in the cluster and the write is recorded: it is followed again.
    fn after_restart(&self) -> AfterRestart {
        AfterRestart::Follow
    }

    fn needs_app_digest(&self) -> bool {
        false
    }

    fn path(&self) -> RebasePath {
        RebasePath::Runner
    }

    fn preview(&self, _: &Config, action: &ActionRef<'_>, target: &ActionTarget) -> Result<Value, PreviewError> {
        let deploy = target.deploy.as_ref();
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
        clusters: &super::backend::Clusters,
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
    ) -> BoxFuture<'a, Attempt> {
        Box::pin(async move {
            let Some(deploy) = target.deploy.as_ref() else {
                return Attempt::failed("a deploy action without a deploy target".into(), Next::Final);
            };
            Deploying { client: &self.client, runner, action, target, deploy }.run().await
        })
    }
}

fn resource(kind: core::WorkloadKind) -> ApiResource {
    let (group, version) = kind.api_version().split_once('/').unwrap_or(("", "v1"));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind.as_str()), kind.plural())
}

fn pods() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Pod"), "pods")
}

/// One attempt of one deploy.
struct Deploying<'a> {
    client: &'a kube::Client,
    runner: &'a Runner,
    action: &'a ClaimedAction,
    target: &'a ActionTarget,
    deploy: &'a DeployTarget,
}

/// Why a workload's roll-out did not become healthy.
enum Unhealthy {
    /// It failed: undone.
    Failed(String),
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

    async fn record(&self, progress: &DeployProgress) -> Result<(), String> {
        let value = serde_json::to_value(progress).map_err(|e| e.to_string())?;
        match self.runner.ledger.record_progress(&self.action.key, value).await {
            Ok(true) => Ok(()),
            Ok(false) => Err("the action is no longer running".into()),
            Err(err) => Err(format!("cannot record the deploy's progress: {err}")),
        }
    }

    /// The record of what each workload runs now and what it gets, before anything is written.
    async fn plan(&self) -> Result<DeployProgress, Attempt> {
        let app = ImageRef::parse(&self.target.image)
            .map_err(|e| Attempt::failed(format!("invalid app image {}: {e}", self.target.image), Next::Final))?;
        let mut progress = DeployProgress::default();
        for w in &self.deploy.workloads {
            let object = match self.get(w).await {
                Ok(Some(o)) => o,
                Ok(None) => return Err(Attempt::failed(format!("{w} not found"), Next::Final)),
                Err(why) => return Err(Attempt::failed(why, Next::Retry)),
            };
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
                });
                continue;
            }
            let chosen = core::targets(w, &object, &app).map_err(|e| Attempt::failed(e.to_string(), Next::Final))?;
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
            });
        }
        Ok(progress)
    }

    async fn apply(
        &self,
        w: &core::Workload,
        images: &[(bool, core::Container)],
        change: Option<&str>,
    ) -> Result<(), String> {
        let body = core::apply_body(w, images, change);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.api(w)
            .patch(&w.name, &params, &Patch::Apply(&body))
            .await
            .map(|_| ())
            .map_err(|e| format!("cannot write {w}: {e}"))
    }

    async fn run(self) -> Attempt {
        let mut progress: DeployProgress =
            self.action.progress.clone().and_then(|p| serde_json::from_value(p).ok()).unwrap_or_default();
        // An earlier attempt failed and began its undo (a crash cut it short): finish the undo,
        // never write the failed digest again.
        if progress.workloads.iter().any(|w| matches!(w.state, WorkloadState::Failed | WorkloadState::Undone)) {
            return self.fail(progress, "an earlier attempt failed; its undo is completed now".into()).await;
        }
        if progress.workloads.is_empty() {
            progress = match self.plan().await {
                Ok(p) => p,
                Err(attempt) => return attempt,
            };
            if progress.workloads.iter().all(|w| w.state == WorkloadState::Skipped) {
                let detail = progress.workloads.iter().filter_map(|w| w.detail.clone()).collect::<Vec<_>>().join("; ");
                let mut attempt = Attempt::new(
                    Outcome { success: true, detail, output_tail: String::new() },
                    Next::Final,
                    Digests::default(),
                );
                attempt.moved = false;
                attempt.skipped = true;
                attempt.workloads = progress.workloads;
                return attempt;
            }
            if let Err(why) = self.record(&progress).await {
                return Attempt::failed(why, Next::Retry);
            }
        }
        // The writes: each once. A workload recorded as being written is read first: the write of
        // an attempt before a crash may have landed.
        let mut wrote = false;
        for i in 0..progress.workloads.len() {
            if progress.workloads[i].state != WorkloadState::Writing {
                continue;
            }
            let w = progress.workloads[i].workload.clone();
            let object = match self.get(&w).await {
                Ok(Some(o)) => o,
                Ok(None) => return self.fail(progress, format!("{w} is gone")).await,
                Err(why) => return Attempt::failed(why, Next::Retry),
            };
            let writes = progress.workloads[i].containers.clone();
            let landed = core::still_written(w.kind, &object, &writes) == Some(true);
            if !landed {
                let before: Vec<ContainerWrite> =
                    writes.iter().map(|c| ContainerWrite { image: c.previous.clone(), ..c.clone() }).collect();
                if core::still_written(w.kind, &object, &before) != Some(true) {
                    return self
                        .fail(progress, format!("{w} changed by someone else before the write; nothing written"))
                        .await;
                }
                let images: Vec<(bool, core::Container)> = writes
                    .iter()
                    .map(|c| (c.init, core::Container { name: c.name.clone(), image: c.image.clone() }))
                    .collect();
                if let Err(why) = self.apply(&w, &images, Some(&self.action.change_id)).await {
                    return Attempt::failed(why, Next::Retry);
                }
                wrote = true;
            }
            progress.workloads[i].state = WorkloadState::Written;
            progress.workloads[i].written_at = Some(timestamp(self.runner.clock.now()));
            if let Err(why) = self.record(&progress).await {
                return Attempt::failed(why, Next::Retry);
            }
        }
        if wrote {
            self.runner.deploy_started(self.action, self.target, &progress).await;
        }
        // Health: each workload in turn, within `deploy_timeout` of its write.
        for i in 0..progress.workloads.len() {
            if progress.workloads[i].state != WorkloadState::Written {
                continue;
            }
            let w = progress.workloads[i].workload.clone();
            if w.kind.has_health() {
                let written = progress.workloads[i].written_at.as_deref().and_then(parse_timestamp);
                match self.healthy(&w, written).await {
                    Ok(()) => {}
                    Err(Unhealthy::Api(why)) => return Attempt::failed(why, Next::Retry),
                    Err(Unhealthy::Failed(why)) => {
                        progress.workloads[i].state = WorkloadState::Failed;
                        progress.workloads[i].detail = Some(why.clone());
                        return self.fail(progress, format!("{w}: {why}")).await;
                    }
                }
            }
            progress.workloads[i].state = WorkloadState::Healthy;
            if let Err(why) = self.record(&progress).await {
                return Attempt::failed(why, Next::Retry);
            }
        }
        let written: Vec<String> = progress
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
        attempt.workloads = progress.workloads;
        attempt
    }

    /// Waits until `w`'s roll-out is healthy, fails, a new pod stays in a bad waiting state for
    /// `fail_after`, or `deploy_timeout` after `written` passes. Watches the workload and its pods.
    async fn healthy(
        &self,
        w: &core::Workload,
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
        let config = watcher::Config::default().fields(&format!("metadata.name={}", w.name));
        let mut objects = watcher(self.api(w), config).default_backoff().boxed();
        let pod_api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &w.namespace, &pods());
        let mut pod_events = match &selector {
            Some(s) => watcher(pod_api, watcher::Config::default().labels(s)).default_backoff().boxed(),
            None => futures::stream::pending().boxed(),
        };
        let mut pods: BTreeMap<String, Value> = BTreeMap::new();
        let mut trouble_since: BTreeMap<String, tokio::time::Instant> = BTreeMap::new();
        loop {
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
                        if let Ok(v) = serde_json::to_value(o) {
                            current = v;
                        }
                    }
                    Some(Ok(watcher::Event::Delete(_))) => return Err(Unhealthy::Failed(format!("{w} was deleted"))),
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

    /// Ends a failed deploy: its written workloads put back (unless `undo = "none"`), then the app
    /// tag (`workload-and-tag`). The image is held.
    async fn fail(&self, mut progress: DeployProgress, why: String) -> Attempt {
        let mut problems = Vec::new();
        // Recorded before the undo writes: a restart after a crash finishes the undo (see `run`).
        for wp in progress.workloads.iter_mut() {
            if matches!(wp.state, WorkloadState::Written | WorkloadState::Healthy) {
                wp.state = WorkloadState::Failed;
            }
        }
        if let Err(why) = self.record(&progress).await {
            problems.push(why);
        }
        if self.deploy.undo.workloads() {
            for wp in progress.workloads.iter_mut() {
                if wp.state != WorkloadState::Failed {
                    continue;
                }
                let images: Vec<(bool, core::Container)> = wp
                    .containers
                    .iter()
                    .map(|c| (c.init, core::Container { name: c.name.clone(), image: c.previous.clone() }))
                    .collect();
                match self.apply(&wp.workload, &images, wp.previous_change.as_deref()).await {
                    Ok(()) => wp.state = WorkloadState::Undone,
                    Err(e) => problems.push(e),
                }
            }
        }
        let _ = self.record(&progress).await;
        // Those an earlier attempt put back count too: the tag goes back after them.
        let undone: Vec<String> = progress
            .workloads
            .iter()
            .filter(|w| w.state == WorkloadState::Undone)
            .map(|w| w.workload.to_string())
            .collect();
        let mut tag = None;
        if self.deploy.undo.tag()
            && !undone.is_empty()
            && let Some(before) = &self.deploy.tag_before
        {
            match self.runner.undo_tag(self.action, self.target, &self.deploy.digest, before).await {
                Ok(Some(moved)) => tag = Some(moved),
                Ok(None) => {}
                Err(e) => problems.push(e),
            }
        }
        let mut detail = why;
        if !undone.is_empty() {
            detail.push_str(&format!("; put back: {}", undone.join(", ")));
        }
        if let Some((from, to)) = &tag {
            detail.push_str(&format!("; tag {} moved back {} → {}", self.target.image, short(from), short(to)));
        }
        if !problems.is_empty() {
            detail.push_str(&format!("; could not undo: {}", problems.join("; ")));
        }
        let mut attempt = Attempt::failed(detail, Next::Final);
        attempt.hold_image = true;
        attempt.rolled_back = !undone.is_empty();
        attempt.workloads = progress.workloads;
        // The tag's move back is recorded by the rollback that made it; these are for the event.
        if let Some((from, to)) = tag {
            attempt.digests = Digests { before: Some(from), after: Some(to) };
        }
        attempt.moved = false;
        attempt
    }
}

fn short(digest: &str) -> &str {
    &digest[..digest.len().min("sha256:".len() + 12)]
}

impl Runner {
    /// Moves the app tag back from `digest` to `before` after a failed deploy, as `rollback` does
    /// (recorded before the write); only when the tag still holds `digest`. Answers the move made.
    async fn undo_tag(
        &self,
        action: &ClaimedAction,
        target: &ActionTarget,
        digest: &str,
        before: &str,
    ) -> Result<Option<(String, String)>, String> {
        let Some(image) = self.config.image(&action.image) else {
            return Err(format!("image {} is no longer configured: its tag is left", action.image));
        };
        match self.app_digest(&target.image).await {
            Some(now) if now == digest => {}
            Some(now) => {
                tracing::warn!(image = %action.image, tag = %now, "the app tag moved on after the deploy; not moved back");
                return Ok(None);
            }
            None => return Err(format!("cannot read {}: its tag is left", target.image)),
        }
        match crate::rollback::rollback(
            &self.config,
            &self.ledger,
            &self.registry,
            image,
            Some(before),
            self.clock.now(),
        )
        .await
        {
            Ok(done) if done.moved => Ok(Some((digest.to_string(), before.to_string()))),
            Ok(_) => Ok(None),
            Err(err) => Err(format!("cannot move {} back to {}: {err}", target.image, short(before))),
        }
    }
}

/// Watches the deployed workloads until `stop`: when one's container no longer runs what the
/// newest succeeded deploy of its image wrote — a person's rollback, or another tool's write — the
/// image is held (`deploy.overridden`), so nothing rolls it forward again until a newer change or
/// `release`. A deploy still running is its own business: its writes are not an override.
pub async fn guard(runner: std::sync::Arc<Runner>, client: kube::Client, stop: tokio_util::sync::CancellationToken) {
    let mut scopes: std::collections::BTreeSet<(core::WorkloadKind, String)> = Default::default();
    for image in &runner.config.images {
        for w in &image.deploy {
            scopes.insert((w.kind, w.namespace.clone()));
        }
    }
    let streams = scopes.into_iter().map(|(kind, namespace)| {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource(kind));
        watcher(api, watcher::Config::default()).default_backoff().map(move |e| (kind, e)).boxed()
    });
    let mut events = futures::stream::select_all(streams);
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            e = events.next() => e,
        };
        let (kind, object) = match event {
            Some((kind, Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)))) => (kind, o),
            Some((_, Ok(_))) => continue,
            Some((_, Err(err))) => {
                tracing::debug!(error = %err, "watch of deployed workloads failed; retrying");
                continue;
            }
            None => return,
        };
        let (Some(namespace), Some(name)) = (object.metadata.namespace.clone(), object.metadata.name.clone()) else {
            continue;
        };
        let Ok(object) = serde_json::to_value(&object) else { continue };
        if let Err(err) = runner.check_override(kind, &namespace, &name, &object).await {
            tracing::warn!(workload = %format!("{kind} {namespace}/{name}"), error = %err, "cannot check a deployed workload");
        }
    }
}

impl Runner {
    /// Holds the image whose newest deploy wrote `object` when its containers now run something
    /// else (see [`guard`]).
    async fn check_override(
        &self,
        kind: core::WorkloadKind,
        namespace: &str,
        name: &str,
        object: &Value,
    ) -> Result<(), crate::ledger::LedgerError> {
        let images: Vec<&crate::config::ImageSettings> = self
            .config
            .images
            .iter()
            .filter(|i| i.deploy.iter().any(|w| w.kind == kind && w.namespace == namespace && w.name == name))
            .collect();
        if images.is_empty() {
            return Ok(());
        }
        let actions = self.ledger.actions(OVERRIDE_LOOKBACK).await?;
        for image in images {
            let Some(newest) = actions
                .iter()
                .filter(|a| a.image == image.name && a.action == ActionKind::Deploy.as_str())
                .max_by_key(|a| a.created)
            else {
                continue;
            };
            if newest.state != crate::ledger::ActionState::Succeeded || newest.holds {
                continue;
            }
            let Some(progress) = newest.progress.clone().and_then(|p| serde_json::from_value::<DeployProgress>(p).ok())
            else {
                continue;
            };
            let Some(record) = progress
                .workloads
                .iter()
                .find(|w| w.workload.kind == kind && w.workload.namespace == namespace && w.workload.name == name)
            else {
                continue;
            };
            if record.state != WorkloadState::Healthy
                || core::still_written(kind, object, &record.containers) != Some(false)
            {
                continue;
            }
            let now_running: Vec<String> = core::containers(kind, object)
                .unwrap_or_default()
                .into_iter()
                .filter(|(_, c)| record.containers.iter().any(|w| w.name == c.name))
                .map(|(_, c)| format!("{} runs {}", c.name, c.image))
                .collect();
            let detail = format!(
                "held: workload {namespace}/{name} changed by someone else ({}); run `builder-monitor release {}` to let deploys go again",
                now_running.join(", "),
                newest.change
            );
            self.hold_overridden(newest, image, &progress, detail).await?;
        }
        Ok(())
    }

    async fn hold_overridden(
        &self,
        action: &crate::ledger::ActionRecord,
        image: &crate::config::ImageSettings,
        progress: &DeployProgress,
        detail: String,
    ) -> Result<(), crate::ledger::LedgerError> {
        let claimed = ClaimedAction {
            key: action.key.clone(),
            change_id: action.change.clone(),
            image: action.image.clone(),
            kind: ActionKind::Deploy,
            attempt: action.attempts,
            target: Err(crate::ledger::Unreadable(String::new())),
            process: None,
            progress: None,
        };
        let target = ActionTarget {
            image: image.image.to_string(),
            builder_name: image.builder.clone(),
            builder: String::new(),
            run_image: None,
            source: None,
            env: Default::default(),
            why: String::new(),
            user_id: None,
            group_id: None,
            platform_apis: Vec::new(),
            stack_id: None,
            app_reference: None,
            reasons: Vec::new(),
            scheduling: Default::default(),
            deploy: None,
            gitops: None,
        };
        let mut event =
            self.event(&claimed, &target, EventType::DeployOverridden, Some(detail.clone()), None, &Digests::default());
        if let Some(info) = event.action.as_mut() {
            info.workloads = progress.workloads.clone();
        }
        let events = vec![event];
        let history = self.config.monitor.history;
        let key = action.key.clone();
        let record = |deliveries| {
            self.ledger.hold_image(crate::ledger::ImageHold {
                key: &key,
                detail: detail.clone(),
                watch: &image.builder,
                events: events.clone(),
                deliveries,
                history,
                now: self.clock.now(),
            })
        };
        let held = crate::alert::emit(&self.config.alerts, &events, record).await?;
        if held {
            tracing::warn!(image = %image.name, change = %action.change, "{detail}");
        }
        Ok(())
    }
}

/// How many recent actions the guard reads to find an image's newest deploy.
const OVERRIDE_LOOKBACK: usize = 1000;
