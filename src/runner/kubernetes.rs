//! The `kubernetes` runner's objects: a `batch/v1` Job per action, named by the action's key so a
//! retry or a restart finds it instead of creating another, carrying the pool's scheduling and pod
//! template; completion is observed through the pool's watch, never by polling. Its answers are
//! `crate::config`'s `[runner.kubernetes]` table; its pools are `pool`'s.

use futures::future::BoxFuture;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DeleteParams, ListParams, Preconditions};
use serde_json::{Value, json};

use super::carrier::ActionRef;
use super::objects::{POOL_ANNOTATION, Placement, PoolObjects, annotations, labels, scheduling_fields};
use super::{PreviewError, RunnerError};
use crate::config::{PRIORITY_LABEL, QUEUE_LABEL};
use builder_monitor_core::plan::{ActionKind, ActionTarget};

/// The `kubernetes` runner's objects: Jobs.
pub struct Jobs;

impl PoolObjects for Jobs {
    fn kind(&self) -> &'static str {
        "Job"
    }

    fn resource(&self) -> ApiResource {
        ApiResource::erase::<Job>(&())
    }

    fn object(
        &self,
        action: &ActionRef<'_>,
        target: &ActionTarget,
        place: &Placement<'_>,
        max_attempts: u32,
    ) -> Result<Value, RunnerError> {
        let job = job(action, target, place, max_attempts)?;
        serde_json::to_value(job).map_err(|source| RunnerError::BuildObject { source })
    }

    fn preview(
        &self,
        action: &ActionRef<'_>,
        target: &ActionTarget,
        place: &Placement<'_>,
        max_attempts: u32,
    ) -> Result<Value, PreviewError> {
        serde_json::to_value(job(action, target, place, max_attempts)?)
            .map_err(|source| PreviewError::Encode { what: "Job", source })
    }

    fn outcome(&self, object: &Value) -> Option<(bool, String)> {
        job_outcome(object)
    }

    fn queued(&self, object: &Value) -> bool {
        job_queued(object)
    }

    fn output_tail<'a>(&'a self, client: &'a kube::Client, namespace: &'a str, name: &'a str) -> BoxFuture<'a, String> {
        Box::pin(termination_message(client, namespace, name))
    }

    fn clean_up<'a>(&'a self, client: &'a kube::Client, namespace: &'a str, job: &'a Value) -> BoxFuture<'a, ()> {
        Box::pin(delete_pods(client, namespace, job))
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

/// Deletes the pods of a finished Job (by its uid: the pods of this Job, not of one made again
/// under its name). The Job keeps its status; Kubernetes keeps a finished Job's pods until the Job
/// goes, so without this every build would leave its pod behind. A failure is logged: the build's
/// outcome stands.
pub async fn delete_pods(client: &kube::Client, namespace: &str, job: &Value) {
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    let Some(uid) = job["metadata"]["uid"].as_str() else { return };
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let selector = format!("batch.kubernetes.io/controller-uid={uid}");
    let listed = match pods.list(&ListParams::default().labels(&selector)).await {
        Ok(listed) => listed,
        Err(err) => {
            tracing::warn!(job = name, namespace, error = %err, "cannot list the finished Job's pods to delete them");
            return;
        }
    };
    for pod in listed.items {
        let Some(pod_name) = pod.metadata.name else { continue };
        let params = DeleteParams {
            preconditions: pod.metadata.uid.map(|uid| Preconditions { uid: Some(uid), resource_version: None }),
            ..DeleteParams::background()
        };
        match pods.delete(&pod_name, &params).await {
            Ok(_) => tracing::debug!(job = name, pod = %pod_name, "deleted the finished Job's pod"),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(err) => {
                tracing::warn!(job = name, pod = %pod_name, error = %err, "cannot delete the finished Job's pod")
            }
        }
    }
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
