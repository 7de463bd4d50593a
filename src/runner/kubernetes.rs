//! The `kubernetes` runner: a `batch/v1` Job per action, named by the action's key so a retry or a
//! restart finds it instead of creating another, carrying the configured scheduling; completion is
//! observed through a watch on the managed-by label, never by polling.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::backend::{AfterRestart, Backend, Carrier, Clusters, Rule};
use super::{PreviewError, RunnerError};
use crate::config::{Config, PRIORITY_LABEL, Pool, QUEUE_LABEL, RebasePath, Scheduling};
use builder_monitor_core::plan::{ActionKind, ActionTarget};

pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "builder-monitor";
/// The annotation naming the pool a Job or Build was made in.
pub const POOL_ANNOTATION: &str = "buildermonitor.dev/pool";
pub const SELECTOR: &str = "app.kubernetes.io/managed-by=builder-monitor";

/// The `kubernetes` runner's answers.
pub struct Jobs;

impl Backend for Jobs {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn setting(&self) -> &'static str {
        "[runner] type = \"kubernetes\""
    }

    /// Jobs made and watched; their pods listed for the termination message.
    fn permissions(&self) -> &'static [Rule] {
        &[
            Rule { group: "batch", resource: "jobs", verbs: &["create", "get", "list", "watch"] },
            Rule { group: "", resource: "pods", verbs: &["list"] },
        ]
    }

    fn takes(&self, _kind: ActionKind) -> bool {
        true
    }

    /// A Job retries its own pods (`backoffLimit`): its failure is final.
    fn retries(&self) -> bool {
        false
    }

    fn after_restart(&self) -> AfterRestart {
        AfterRestart::Follow
    }

    fn needs_app_digest(&self) -> bool {
        false
    }

    fn path(&self) -> RebasePath {
        RebasePath::Runner
    }

    fn preview(&self, config: &Config, action: &ActionRef<'_>, target: &ActionTarget) -> Result<Value, PreviewError> {
        super::pool::preview(config, action, target)
    }

    fn start(
        &self,
        config: &Config,
        clusters: &Clusters,
        stop: CancellationToken,
    ) -> Result<Arc<dyn Carrier>, RunnerError> {
        Ok(Arc::new(super::pool::Pools::start(config, clusters, stop)?))
    }
}

/// Where one action's build runs: its pool, the image's pod template, and the app's platform
/// when it is one (the build pod is placed on a node of that os and architecture).
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a> {
    pub pool: &'a Pool,
    pub image_template: Option<&'a Value>,
    pub platform: Option<&'a str>,
}

impl Placement<'_> {
    /// The pool's scheduling with the image's over it, and the node's os and architecture for a
    /// known platform unless either already names them (`os` left out for kpack, which sets it).
    pub fn scheduling(&self, target: &ActionTarget, os: bool) -> Scheduling {
        let mut scheduling = merged(&self.pool.settings.scheduling, &target.scheduling);
        if let Some((platform_os, arch)) = self.platform.and_then(|p| p.split_once('/')) {
            let arch = arch.split('/').next().unwrap_or(arch);
            if os {
                scheduling.node_selector.entry("kubernetes.io/os".into()).or_insert_with(|| platform_os.to_string());
            }
            scheduling.node_selector.entry("kubernetes.io/arch".into()).or_insert_with(|| arch.to_string());
        }
        scheduling
    }

    /// The pool's template, then the image's.
    pub fn templates(&self) -> Vec<&Value> {
        self.pool.pod_template.as_ref().map(|t| &t.value).into_iter().chain(self.image_template).collect()
    }
}

/// What names and describes an action in the objects made for it.
#[derive(Debug, Clone)]
pub struct ActionRef<'a> {
    pub key: &'a str,
    pub change_id: &'a str,
    pub image: &'a str,
    pub kind: ActionKind,
}

/// The runner's placement with the image's over it: maps merge key by key; lists, affinity and
/// names replace.
pub fn merged(runner: &Scheduling, image: &Scheduling) -> Scheduling {
    let mut node_selector = runner.node_selector.clone();
    node_selector.extend(image.node_selector.clone());
    Scheduling {
        node_selector,
        tolerations: image.tolerations.clone().or_else(|| runner.tolerations.clone()),
        affinity: image.affinity.clone().or_else(|| runner.affinity.clone()),
        priority_class_name: image.priority_class_name.clone().or_else(|| runner.priority_class_name.clone()),
        runtime_class_name: image.runtime_class_name.clone().or_else(|| runner.runtime_class_name.clone()),
        scheduler_name: image.scheduler_name.clone().or_else(|| runner.scheduler_name.clone()),
    }
}

fn version(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.trim().split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The platform API to run the lifecycle with: the highest the builder's lifecycle supports, up to
/// the newest these flags were written for; 0.9 (kpack's choice) when the builder does not say.
pub fn platform_api(supported: &[String]) -> String {
    supported
        .iter()
        .filter_map(|s| version(s).filter(|v| *v <= (0, 15)).map(|v| (v, s.clone())))
        .max()
        .map(|(_, s)| s)
        .unwrap_or_else(|| "0.9".to_string())
}

/// Labels every object of an action carries.
pub fn labels(action: &ActionRef<'_>) -> BTreeMap<String, String> {
    [
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
        ("buildermonitor.dev/image".to_string(), action.image.to_string()),
        ("buildermonitor.dev/change".to_string(), action.change_id.to_string()),
        ("buildermonitor.dev/action".to_string(), action.kind.as_str().to_string()),
    ]
    .into()
}

pub fn annotations(target: &ActionTarget) -> BTreeMap<String, String> {
    let mut a: BTreeMap<String, String> = [
        ("buildermonitor.dev/builder".to_string(), target.builder.clone()),
        ("buildermonitor.dev/reasons".to_string(), target.reasons.join(",")),
        ("buildermonitor.dev/why".to_string(), target.why.clone()),
    ]
    .into();
    if let Some(run) = &target.run_image {
        a.insert("buildermonitor.dev/run-image".into(), run.clone());
    }
    a
}

/// The scheduling fields of a pod spec (or of a kpack Build's top level).
pub fn scheduling_fields(s: &Scheduling) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    if !s.node_selector.is_empty() {
        m.insert("nodeSelector".into(), json!(s.node_selector));
    }
    if let Some(t) = &s.tolerations {
        m.insert("tolerations".into(), json!(t));
    }
    if let Some(a) = &s.affinity {
        m.insert("affinity".into(), a.clone());
    }
    for (key, value) in [
        ("priorityClassName", &s.priority_class_name),
        ("runtimeClassName", &s.runtime_class_name),
        ("schedulerName", &s.scheduler_name),
    ] {
        if let Some(v) = value {
            m.insert(key.into(), json!(v));
        }
    }
    m
}

const SOURCE_SCRIPT: &str = "set -e; git clone --quiet -- \"$1\" /workspace/app; git -C /workspace/app checkout --quiet \"$2\"; shift 2; mkdir -p /platform/env; while [ $# -gt 1 ]; do printf %s \"$2\" > \"/platform/env/$1\"; shift 2; done";

/// The Job that carries out an action in its pool: the build pod merged over the pool's and the
/// image's pod templates, Kueue's labels when the pool has a queue.
pub fn job(
    action: &ActionRef<'_>,
    target: &ActionTarget,
    place: &Placement<'_>,
    max_attempts: u32,
) -> Result<Job, RunnerError> {
    let settings = &place.pool.settings;
    let scheduling = place.scheduling(target, true);
    let uid = target.user_id.unwrap_or(1000);
    let gid = target.group_id.unwrap_or(1000);
    let api = platform_api(&target.platform_apis);
    let restricted = json!({
        "allowPrivilegeEscalation": false, "privileged": false, "runAsNonRoot": true,
        "capabilities": { "drop": ["ALL"] },
    });
    let mut env = vec![json!({ "name": "CNB_PLATFORM_API", "value": api })];
    let mut volumes = vec![json!({ "name": "layers", "emptyDir": {} })];
    let mut docker_mount = Vec::new();
    if let Some(secret) = &settings.docker_config_secret {
        env.push(json!({ "name": "DOCKER_CONFIG", "value": "/docker-config" }));
        volumes.push(json!({ "name": "docker-config", "secret": { "secretName": secret, "items": [{ "key": ".dockerconfigjson", "path": "config.json" }] } }));
        docker_mount.push(json!({ "name": "docker-config", "mountPath": "/docker-config", "readOnly": true }));
    }
    let mut init_containers = Vec::new();
    let container = match action.kind {
        ActionKind::Rebuild => {
            let source =
                target.source.as_ref().ok_or_else(|| RunnerError::NoSource { image: action.image.to_string() })?;
            let mut args = vec![
                json!("sh"),
                json!("-c"),
                json!(SOURCE_SCRIPT),
                json!("source"),
                json!(source.git),
                json!(source.revision),
            ];
            for (k, v) in &target.env {
                args.push(json!(k));
                args.push(json!(v));
            }
            init_containers.push(json!({
                "name": "source",
                "image": settings.git_image,
                "command": args,
                "env": [{ "name": "HOME", "value": "/workspace" }],
                "securityContext": restricted,
                "volumeMounts": [{ "name": "workspace", "mountPath": "/workspace" }, { "name": "platform", "mountPath": "/platform" }],
            }));
            volumes.push(json!({ "name": "workspace", "emptyDir": {} }));
            volumes.push(json!({ "name": "platform", "emptyDir": {} }));
            volumes.push(match &settings.cache_pvc {
                Some(claim) => json!({ "name": "cache", "persistentVolumeClaim": { "claimName": claim } }),
                None => json!({ "name": "cache", "emptyDir": {} }),
            });
            let app_dir = match source.sub_path.as_deref().map(|p| p.trim_matches('/')).filter(|p| !p.is_empty()) {
                Some(sub) => format!("/workspace/app/{sub}"),
                None => "/workspace/app".to_string(),
            };
            let mut args = vec![
                format!("-app={app_dir}"),
                "-layers=/layers".into(),
                "-platform=/platform".into(),
                "-cache-dir=/cache".into(),
                format!("-previous-image={}", target.image),
                "-report=/layers/report.toml".into(),
            ];
            if let Some(run) = &target.run_image {
                args.push(format!("-run-image={run}"));
            }
            args.push(target.image.clone());
            let mut mounts = vec![
                json!({ "name": "workspace", "mountPath": "/workspace" }),
                json!({ "name": "layers", "mountPath": "/layers" }),
                json!({ "name": "platform", "mountPath": "/platform" }),
                json!({ "name": "cache", "mountPath": "/cache" }),
            ];
            mounts.extend(docker_mount);
            json!({ "name": "build", "image": target.builder, "command": ["/cnb/lifecycle/creator"], "args": args,
                    "env": env, "volumeMounts": mounts })
        }
        ActionKind::Rebase => {
            let run = target.run_image.as_ref().ok_or(RunnerError::NoRunImage)?;
            // The rebaser took -image before platform API 0.12.
            let flag = if version(&api).is_some_and(|v| v >= (0, 12)) { "-run-image" } else { "-image" };
            let mut mounts = vec![json!({ "name": "layers", "mountPath": "/layers" })];
            mounts.extend(docker_mount);
            json!({ "name": "rebase", "image": target.builder, "command": ["/cnb/lifecycle/rebaser"],
                    "args": [format!("{flag}={run}"), "-report=/layers/report.toml", target.image],
                    "env": env, "volumeMounts": mounts })
        }
        ActionKind::Deploy | ActionKind::Gitops => return Err(RunnerError::NotABuild(action.kind.as_str())),
    };
    let mut container = container;
    container["securityContext"] = restricted.clone();
    container["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
    if let Some(resources) = &settings.resources {
        container["resources"] = resources.clone();
    }
    let mut pod = serde_json::Map::new();
    pod.insert("restartPolicy".into(), json!("Never"));
    if let Some(sa) = &settings.service_account {
        pod.insert("serviceAccountName".into(), json!(sa));
    }
    if !settings.image_pull_secrets.is_empty() {
        let secrets: Vec<Value> = settings.image_pull_secrets.iter().map(|s| json!({ "name": s })).collect();
        pod.insert("imagePullSecrets".into(), json!(secrets));
    }
    pod.extend(scheduling_fields(&scheduling));
    pod.insert(
        "securityContext".into(),
        json!({ "runAsNonRoot": true, "runAsUser": uid, "runAsGroup": gid, "fsGroup": gid, "seccompProfile": { "type": "RuntimeDefault" } }),
    );
    if !init_containers.is_empty() {
        pod.insert("initContainers".into(), json!(init_containers));
    }
    pod.insert("containers".into(), json!([container]));
    pod.insert("volumes".into(), json!(volumes));
    let mut labels = labels(action);
    if let Some(queue) = &place.pool.queue {
        labels.insert(QUEUE_LABEL.into(), queue.clone());
    }
    if let Some(class) = &place.pool.priority_class {
        labels.insert(PRIORITY_LABEL.into(), class.clone());
    }
    let build = json!({ "metadata": { "labels": labels }, "spec": pod });
    let templates = place.templates();
    let template = if templates.is_empty() {
        build
    } else {
        crate::config::pod_template::merge(&templates, &build).map_err(|source| RunnerError::Template { source })?
    };
    let mut spec = json!({
        "backoffLimit": settings.backoff_limit.unwrap_or(max_attempts.saturating_sub(1) as i32),
        "template": template,
    });
    if let Some(managed_by) = &place.pool.managed_by {
        spec["managedBy"] = json!(managed_by);
    }
    if let Some(d) = settings.active_deadline {
        spec["activeDeadlineSeconds"] = json!(d.as_secs());
    }
    if let Some(d) = settings.ttl_after_finished {
        spec["ttlSecondsAfterFinished"] = json!(d.as_secs());
    }
    let mut annotations = annotations(target);
    annotations.insert(POOL_ANNOTATION.into(), place.pool.name.clone());
    let value = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": action.key, "namespace": settings.namespace, "labels": labels, "annotations": annotations },
        "spec": spec,
    });
    crate::config::k8s_typed::<Job>(&value).map_err(|source| RunnerError::InvalidJob { source })
}

/// The objects of one kind the runner made, kept current by a watch on the managed-by label.
pub struct Watched {
    objects: Mutex<HashMap<String, Value>>,
    changed: Notify,
}

impl Watched {
    /// Starts watching `api` until `stop`; what the watch hears (or not) of the cluster goes to
    /// `health`.
    pub fn start<K>(api: Api<K>, health: Arc<super::pool::Health>, stop: CancellationToken) -> Arc<Self>
    where
        K: kube::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug + Send + 'static,
    {
        let watched = Arc::new(Watched { objects: Mutex::new(HashMap::new()), changed: Notify::new() });
        let w = watched.clone();
        tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default().labels(SELECTOR)).default_backoff().boxed();
            loop {
                let event = tokio::select! {
                    _ = stop.cancelled() => break,
                    e = events.next() => e,
                };
                match &event {
                    Some(Ok(_)) => health.answered(),
                    Some(Err(err)) if super::pool::unanswered_watch(err) => health.unanswered(&err.to_string()),
                    _ => {}
                }
                match event {
                    Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                        if let (Some(name), Ok(v)) = (o.meta().name.clone(), serde_json::to_value(&o)) {
                            w.objects.lock().unwrap_or_else(|e| e.into_inner()).insert(name, v);
                        }
                    }
                    Some(Ok(watcher::Event::Delete(o))) => {
                        if let Some(name) = o.meta().name.clone() {
                            w.objects.lock().unwrap_or_else(|e| e.into_inner()).remove(&name);
                        }
                    }
                    Some(Ok(_)) => {}
                    // A cluster that does not answer is logged by its health, once per outage.
                    Some(Err(err)) if super::pool::unanswered_watch(&err) => {
                        tracing::debug!(error = %err, "watch of build objects failed; retrying")
                    }
                    Some(Err(err)) => tracing::warn!(error = %err, "watch of build objects failed; retrying"),
                    None => break,
                }
                w.changed.notify_waiters();
            }
        });
        watched
    }

    /// Waits until `seen` finds what it waits for in the object `name`.
    pub async fn wait<T>(&self, name: &str, seen: impl Fn(&Value) -> Option<T>) -> T {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(result) = self.objects.lock().unwrap_or_else(|e| e.into_inner()).get(name).and_then(&seen) {
                return result;
            }
            notified.await;
        }
    }
}

/// Whether a Job finished: (succeeded, what its conditions say).
pub fn job_outcome(job: &Value) -> Option<(bool, String)> {
    let conditions = job["status"]["conditions"].as_array()?;
    let holds = |t: &str| conditions.iter().find(|c| c["type"] == t && c["status"] == "True");
    if let Some(c) = holds("Complete").or_else(|| holds("SuccessCriteriaMet")) {
        return Some((true, c["message"].as_str().filter(|m| !m.is_empty()).unwrap_or("Job complete").to_string()));
    }
    holds("Failed").map(|c| {
        let reason = c["reason"].as_str().unwrap_or("Failed");
        let message = c["message"].as_str().unwrap_or_default();
        (
            false,
            if message.is_empty() {
                format!("Job failed: {reason}")
            } else {
                format!("Job failed: {reason}: {message}")
            },
        )
    })
}

/// Whether Kueue holds the Job (suspended, not finished): it waits for quota, not running.
pub fn job_queued(job: &Value) -> bool {
    job["spec"]["suspend"] == json!(true)
}

/// The termination messages of a Job's pods (the end of their log, with FallbackToLogsOnError).
pub async fn termination_message(client: &kube::Client, namespace: &str, job: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let Ok(list) = pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"))).await
    else {
        return String::new();
    };
    list.items
        .iter()
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| s.init_container_statuses.iter().flatten().chain(s.container_statuses.iter().flatten()))
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
        .filter(|m| !m.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_api_is_the_highest_known() {
        let apis = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(platform_api(&apis(&["0.7", "0.10", "0.9", "0.14"])), "0.14");
        assert_eq!(platform_api(&apis(&["0.7", "0.99"])), "0.7");
        assert_eq!(platform_api(&[]), "0.9");
    }

    #[test]
    fn image_scheduling_merges_over_the_runner() {
        let runner = Scheduling {
            node_selector: [("disktype".to_string(), "ssd".to_string()), ("zone".to_string(), "a".to_string())].into(),
            tolerations: Some(vec![]),
            priority_class_name: Some("builds-low".into()),
            ..Default::default()
        };
        let image = Scheduling {
            node_selector: [("zone".to_string(), "b".to_string())].into(),
            runtime_class_name: Some("gvisor".into()),
            ..Default::default()
        };
        let m = merged(&runner, &image);
        assert_eq!(m.node_selector["disktype"], "ssd");
        assert_eq!(m.node_selector["zone"], "b");
        assert_eq!(m.tolerations, Some(vec![]));
        assert_eq!(m.priority_class_name.as_deref(), Some("builds-low"));
        assert_eq!(m.runtime_class_name.as_deref(), Some("gvisor"));
    }

    #[test]
    fn job_outcomes() {
        assert_eq!(job_outcome(&json!({ "status": {} })), None);
        assert!(
            job_outcome(&json!({ "status": { "conditions": [{ "type": "Complete", "status": "True" }] } })).unwrap().0
        );
        let failed = job_outcome(
            &json!({ "status": { "conditions": [{ "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit" }] } }),
        );
        assert_eq!(
            failed,
            Some((false, "Job failed: BackoffLimitExceeded: Job has reached the specified backoff limit".into()))
        );
    }
}
