//! The `kpack` runner: a `kpack.io/v1alpha2` Build per action. A rebase is a Build annotated
//! `image.kpack.io/reason: STACK` whose `lastBuild` names the app and the builder's stack id —
//! exactly when kpack runs its rebase pod. The outcome is the Build's `Succeeded` condition.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::attempt::Attempt;
use super::backend::{AfterRestart, Backend, Carrier, Rule};
use super::kubernetes::{ActionRef, Watched, annotations, labels, merged, scheduling_fields};
use super::{Outcome, PreviewError, Runner, RunnerError};
use crate::config::{Config, KubeRunnerSettings, RebasePath};
use crate::ledger::ClaimedAction;
use builder_monitor_core::plan::{ActionKind, ActionTarget};

/// The `kpack` runner's answers.
pub struct Builds;

impl Backend for Builds {
    fn name(&self) -> &'static str {
        "kpack"
    }

    fn setting(&self) -> &'static str {
        "[runner] type = \"kpack\""
    }

    fn permissions(&self) -> &'static [Rule] {
        &[Rule { group: "kpack.io", resource: "builds", verbs: &["create", "get", "list", "watch"] }]
    }

    fn takes(&self, _kind: ActionKind) -> bool {
        true
    }

    /// A Build is one attempt: its failure is final.
    fn retries(&self) -> bool {
        false
    }

    fn after_restart(&self) -> AfterRestart {
        AfterRestart::Follow
    }

    /// A rebase Build names the app by digest (`lastBuild`).
    fn needs_app_digest(&self) -> bool {
        true
    }

    fn path(&self) -> RebasePath {
        RebasePath::Runner
    }

    fn preview(&self, config: &Config, action: &ActionRef<'_>, target: &ActionTarget) -> Result<Value, PreviewError> {
        match &config.runner.kubernetes {
            Some(settings) => Ok(build(action, target, settings)?),
            None => Ok(super::exec::command_preview(config, action, target)),
        }
    }

    fn start(
        &self,
        config: &Config,
        client: Option<kube::Client>,
        stop: CancellationToken,
    ) -> Result<Arc<dyn Carrier>, RunnerError> {
        let (client, settings) = super::cluster_settings(config, client, self.name())?;
        Ok(Arc::new(BuildBackend::start(client, settings, stop)))
    }
}

/// The fields of a kpack Build that builder-monitor writes, typed (unknown fields are refused, so
/// the tests catch a Build kpack would not understand).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KpackBuildSpec {
    pub tags: Vec<String>,
    pub builder: KpackImage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_image: Option<KpackImage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<KpackSource>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<k8s_openapi::api::core::v1::EnvVar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_build: Option<KpackLastBuild>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<k8s_openapi::api::core::v1::ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<k8s_openapi::api::core::v1::Toleration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<k8s_openapi::api::core::v1::Affinity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KpackImage {
    pub image: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<k8s_openapi::api::core::v1::LocalObjectReference>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KpackSource {
    pub git: KpackGit,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_path: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KpackGit {
    pub url: String,
    pub revision: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KpackLastBuild {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_id: Option<String>,
}

pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("kpack.io", "v1alpha2", "Build"), "builds")
}

/// The kpack Build that carries out an action.
pub fn build(
    action: &ActionRef<'_>,
    target: &ActionTarget,
    settings: &KubeRunnerSettings,
) -> Result<Value, RunnerError> {
    let scheduling = merged(&settings.scheduling, &target.scheduling);
    let mut spec = json!({
        "tags": [target.image],
        "builder": { "image": target.builder },
    });
    if !settings.image_pull_secrets.is_empty() {
        let secrets: Vec<Value> = settings.image_pull_secrets.iter().map(|s| json!({ "name": s })).collect();
        spec["builder"]["imagePullSecrets"] = json!(secrets);
    }
    if let Some(run) = &target.run_image {
        spec["runImage"] = json!({ "image": run });
    }
    if let Some(sa) = &settings.service_account {
        spec["serviceAccountName"] = json!(sa);
    }
    if let Some(source) = &target.source {
        spec["source"] = json!({ "git": { "url": source.git, "revision": source.revision } });
        if let Some(sub) = &source.sub_path {
            spec["source"]["subPath"] = json!(sub);
        }
    } else if action.kind == ActionKind::Rebuild {
        return Err(RunnerError::NoSource { image: action.image.to_string() });
    }
    if !target.env.is_empty() {
        let env: Vec<Value> = target.env.iter().map(|(k, v)| json!({ "name": k, "value": v })).collect();
        spec["env"] = json!(env);
    }
    if let Some(r) = &settings.resources {
        spec["resources"] = r.clone();
    }
    if let Some(d) = settings.active_deadline {
        spec["activeDeadlineSeconds"] = json!(d.as_secs());
    }
    if let Some(m) = spec.as_object_mut() {
        m.extend(scheduling_fields(&scheduling));
    }
    let mut annotations = annotations(target);
    if action.kind == ActionKind::Rebase {
        let app =
            target.app_reference.clone().ok_or_else(|| RunnerError::NoAppDigest { image: target.image.clone() })?;
        annotations.insert("image.kpack.io/reason".into(), "STACK".into());
        spec["lastBuild"] = json!({ "image": app, "stackId": target.stack_id });
    }
    // Checked against our typed spec: a field kpack does not know would fail here, not in kpack.
    serde_json::from_value::<KpackBuildSpec>(spec.clone()).map_err(|source| RunnerError::InvalidBuild { source })?;
    Ok(json!({
        "apiVersion": "kpack.io/v1alpha2",
        "kind": "Build",
        "metadata": { "name": action.key, "namespace": settings.namespace, "labels": labels(action), "annotations": annotations },
        "spec": spec,
    }))
}

/// Whether a Build finished: its `Succeeded` condition.
pub fn build_outcome(build: &Value) -> Option<(bool, String)> {
    let condition = build["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Succeeded")?;
    let message = condition["message"].as_str().unwrap_or_default().to_string();
    match condition["status"].as_str() {
        Some("True") => Some((true, if message.is_empty() { "Build succeeded".into() } else { message })),
        Some("False") => {
            Some((false, if message.is_empty() { "Build failed".into() } else { format!("Build failed: {message}") }))
        }
        _ => None,
    }
}

pub struct BuildBackend {
    pub client: kube::Client,
    pub settings: KubeRunnerSettings,
    watched: Arc<Watched>,
}

impl Carrier for BuildBackend {
    fn attempt<'a>(
        &'a self,
        runner: &'a Runner,
        action: &'a ClaimedAction,
        target: &'a ActionTarget,
    ) -> BoxFuture<'a, Attempt> {
        Box::pin(
            runner.pushed(
                action,
                target,
                async move { (self.carry_out(&super::reference(action), target).await, true) },
            ),
        )
    }
}

impl BuildBackend {
    pub fn start(client: kube::Client, settings: KubeRunnerSettings, stop: CancellationToken) -> Self {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &settings.namespace, &api_resource());
        let watched = Watched::start(api, stop);
        BuildBackend { client, settings, watched }
    }

    pub async fn carry_out(&self, action: &ActionRef<'_>, target: &ActionTarget) -> Outcome {
        if let Err(err) = self.create(action, target).await {
            return Outcome { success: false, detail: err.to_string(), output_tail: String::new() };
        }
        let (success, detail) = self.watched.wait(action.key, build_outcome).await;
        Outcome { success, detail, output_tail: String::new() }
    }

    /// Creates the action's Build, or finds it made already (a retry or a restart).
    async fn create(&self, action: &ActionRef<'_>, target: &ActionTarget) -> Result<(), RunnerError> {
        let object = build(action, target, &self.settings)?;
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &self.settings.namespace, &api_resource());
        let object: DynamicObject =
            serde_json::from_value(object).map_err(|source| RunnerError::BuildObject { source })?;
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => tracing::info!(build = %action.key, namespace = %self.settings.namespace, "kpack Build created"),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                tracing::info!(build = %action.key, "kpack Build exists already; following it")
            }
            Err(source) => return Err(RunnerError::Create { kind: "Build", name: action.key.to_string(), source }),
        }
        Ok(())
    }
}
