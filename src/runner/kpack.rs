//! The `kpack` runner's objects: a `kpack.io/v1alpha2` Build per action. A rebase is a Build annotated
//! `image.kpack.io/reason: STACK` whose `lastBuild` names the app and the builder's stack id —
//! exactly when kpack runs its rebase pod. The outcome is the Build's `Succeeded` condition. Its
//! answers are `crate::config`'s kpack table; its pools are `pool`'s.

use std::collections::BTreeMap;

use kube::api::{ApiResource, GroupVersionKind};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::RunnerError;
use super::carrier::ActionRef;
use super::objects::{POOL_ANNOTATION, Placement, PoolObjects, annotations, labels, scheduling_fields};
use builder_monitor_core::plan::{ActionKind, ActionTarget};

/// The `kpack` runner's objects: Builds.
pub struct Builds;

impl PoolObjects for Builds {
    fn kind(&self) -> &'static str {
        "Build"
    }

    fn resource(&self) -> ApiResource {
        api_resource()
    }

    fn object(
        &self,
        action: &ActionRef<'_>,
        target: &ActionTarget,
        place: &Placement<'_>,
        _max_attempts: u32,
    ) -> Result<Value, RunnerError> {
        build(action, target, place)
    }

    fn outcome(&self, object: &Value) -> Option<(bool, String)> {
        build_outcome(object)
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

/// The kpack Build that carries out an action in its pool: the pool's settings and the image's
/// scheduling first, then what the pool's and the image's pod templates add (they were checked
/// at load to hold only what a Build carries).
pub fn build(action: &ActionRef<'_>, target: &ActionTarget, place: &Placement<'_>) -> Result<Value, RunnerError> {
    let settings = &place.pool.settings;
    let scheduling = place.scheduling(target, false);
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
    } else {
        // kpack validates every Build's source (exactly one of git, blob, registry), a rebase's
        // too: it copies the Image's. Without one, kpack's webhook refuses the Build.
        return Err(RunnerError::NoKpackSource { image: action.image.to_string() });
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
    for template in place.templates() {
        let fields = crate::config::pod_template::kpack_fields(template)
            .map_err(|fields| RunnerError::KpackTemplate { fields: fields.join(", ") })?;
        with_template(&mut spec, fields);
    }
    let mut annotations = annotations(target);
    annotations.insert(POOL_ANNOTATION.into(), place.pool.name.clone());
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

/// A template's fields added to a Build spec: node selector keys and env names the spec does not
/// set, its tolerations appended, and each single field the spec leaves empty.
fn with_template(spec: &mut Value, fields: crate::config::pod_template::KpackFields) {
    let crate::config::pod_template::KpackFields {
        node_selector,
        tolerations,
        affinity,
        runtime_class_name,
        scheduler_name,
        priority_class_name,
        service_account_name,
        env,
        resources,
    } = fields;
    for (key, value) in node_selector {
        if spec["nodeSelector"].get(&key).is_none() {
            spec["nodeSelector"][key] = json!(value);
        }
    }
    if !tolerations.is_empty() {
        let mut all = tolerations;
        for t in spec["tolerations"].as_array().cloned().unwrap_or_default() {
            if !all.contains(&t) {
                all.push(t);
            }
        }
        spec["tolerations"] = json!(all);
    }
    let mut own_env = spec["env"].as_array().cloned().unwrap_or_default();
    let mut merged_env: Vec<Value> =
        env.into_iter().filter(|e| !own_env.iter().any(|o| o["name"] == e["name"])).collect();
    merged_env.append(&mut own_env);
    if !merged_env.is_empty() {
        spec["env"] = json!(merged_env);
    }
    for (key, value) in [
        ("affinity", affinity),
        ("runtimeClassName", runtime_class_name.map(Value::from)),
        ("schedulerName", scheduler_name.map(Value::from)),
        ("priorityClassName", priority_class_name.map(Value::from)),
        ("serviceAccountName", service_account_name.map(Value::from)),
        ("resources", resources),
    ] {
        if let Some(value) = value
            && spec.get(key).is_none_or(Value::is_null)
        {
            spec[key] = value;
        }
    }
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
