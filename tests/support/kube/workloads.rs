//! Workloads as kubectl writes them: created from a typical manifest, their images set, their
//! metadata labelled, through the same code path as HTTP requests.

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::KubeDouble;
use super::controllers::CONTROLLED;
use super::http::{self, Target, create, labels_match};

/// `(group, plural, Kind)` of a workload kind named by kind or plural (`Deployment`, `deployments`).
pub(super) fn workload_kind(kind: &str) -> (&'static str, &'static str, &'static str) {
    match kind.to_ascii_lowercase().as_str() {
        "deployment" | "deployments" => ("apps", "deployments", "Deployment"),
        "statefulset" | "statefulsets" => ("apps", "statefulsets", "StatefulSet"),
        "daemonset" | "daemonsets" => ("apps", "daemonsets", "DaemonSet"),
        "cronjob" | "cronjobs" => ("batch", "cronjobs", "CronJob"),
        _ => panic!("not a workload kind: {kind}"),
    }
}

pub(super) fn workload_target(kind: &str, namespace: &str, name: &str) -> Target {
    let (group, plural, _) = workload_kind(kind);
    Target {
        group: group.into(),
        version: "v1".into(),
        plural: plural.into(),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        status: false,
    }
}

/// What `kubectl apply` would create from a typical manifest: selector and template labels
/// `app: NAME`; each container with a pull policy, resources and an env variable, the first with a
/// port.
fn workload_object(kind: &str, namespace: &str, name: &str, containers: &[(&str, &str)], replicas: i64) -> Value {
    let (group, _, kind) = workload_kind(kind);
    let containers: Vec<Value> = containers
        .iter()
        .enumerate()
        .map(|(i, (container, image))| {
            let mut c = json!({
                "name": container, "image": image, "imagePullPolicy": "IfNotPresent", "resources": {},
                "env": [{ "name": "CONTAINER", "value": container }],
            });
            if i == 0 {
                c["ports"] = json!([{ "containerPort": 8080, "protocol": "TCP" }]);
            }
            c
        })
        .collect();
    let labels = json!({ "app": name });
    let selector = json!({ "matchLabels": labels });
    let template = |restart: &str| {
        json!({
            "metadata": { "labels": labels },
            "spec": { "containers": containers, "restartPolicy": restart, "terminationGracePeriodSeconds": 30 },
        })
    };
    let spec = match kind {
        "Deployment" => json!({
            "replicas": replicas, "selector": selector, "progressDeadlineSeconds": 600, "revisionHistoryLimit": 10,
            "strategy": { "type": "RollingUpdate", "rollingUpdate": { "maxSurge": "25%", "maxUnavailable": "25%" } },
            "template": template("Always"),
        }),
        "StatefulSet" => json!({
            "replicas": replicas, "selector": selector, "serviceName": name, "podManagementPolicy": "OrderedReady",
            "updateStrategy": { "type": "RollingUpdate", "rollingUpdate": { "partition": 0 } },
            "template": template("Always"),
        }),
        "DaemonSet" => json!({
            "selector": selector,
            "updateStrategy": { "type": "RollingUpdate", "rollingUpdate": { "maxUnavailable": 1, "maxSurge": 0 } },
            "template": template("Always"),
        }),
        _ => json!({
            "schedule": "0 3 * * *", "concurrencyPolicy": "Forbid",
            "jobTemplate": { "spec": { "backoffLimit": 2, "template": template("OnFailure") } },
        }),
    };
    let mut object = json!({
        "apiVersion": format!("{group}/v1"), "kind": kind,
        "metadata": { "name": name, "namespace": namespace, "labels": labels },
        "spec": spec,
    });
    let last_applied = serde_json::to_string(&object).unwrap();
    object["metadata"]["annotations"] = json!({ "kubectl.kubernetes.io/last-applied-configuration": last_applied });
    object
}

impl KubeDouble {
    /// Creates a Deployment, StatefulSet, DaemonSet or CronJob as `kubectl apply` would the first
    /// time (field manager `kubectl-client-side-apply`, an update owning every field; the
    /// namespace created if missing), and returns it once its controller has rolled it out (at
    /// once when its roll-out is paused or held, and for a CronJob). `replicas` is ignored by a
    /// DaemonSet (one pod per node, two nodes) and a CronJob.
    pub async fn create_workload(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        containers: &[(&str, &str)],
        replicas: i64,
    ) -> Value {
        let namespace_exists = self.get("namespaces", None, namespace).is_some();
        if !namespace_exists {
            self.create_namespace(namespace);
        }
        let target = workload_target(kind, namespace, name);
        let body = workload_object(kind, namespace, name, containers, replicas);
        let (code, reply) = create(&self.shared, &target, body, "kubectl-client-side-apply");
        self.notify();
        assert_eq!(code, 201, "create {kind} {namespace}/{name}: {reply}");
        let waits = {
            let store = self.shared.store.lock().unwrap();
            let key = target.key(name);
            CONTROLLED.contains(&key.plural.as_str()) && store.controllers.rolls_out(&key)
        };
        if waits {
            self.wait_until(&format!("{kind} {namespace}/{name} rolled out"), |d| {
                d.rollout_done(kind, namespace, name).then_some(())
            })
            .await;
        }
        self.workload(kind, namespace, name).unwrap()
    }

    /// What `kubectl set image` does (`--field-manager manager`): a strategic merge patch of
    /// one container's image (an init container's, when it is one), through the code path of
    /// HTTP requests. Returns the object written.
    pub fn set_image_as(
        &self,
        manager: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        container: &str,
        image: &str,
    ) -> Value {
        let object = self.workload(kind, namespace, name).unwrap_or_else(|| panic!("no {kind} {namespace}/{name}"));
        let (_, _, kind_name) = workload_kind(kind);
        let pointer =
            if kind_name == "CronJob" { "/spec/jobTemplate/spec/template/spec" } else { "/spec/template/spec" };
        let spec = object.pointer(pointer).cloned().unwrap_or_default();
        let names = |field: &str| -> Vec<Value> {
            spec[field].as_array().into_iter().flatten().map(|c| json!({ "name": c["name"] })).collect()
        };
        let field = if names("initContainers").iter().any(|c| c["name"] == container) {
            "initContainers"
        } else {
            "containers"
        };
        let mut patch_spec = json!({});
        patch_spec[format!("$setElementOrder/{field}")] = json!(names(field));
        patch_spec[field] = json!([{ "name": container, "image": image }]);
        let mut patch = json!({});
        let mut at = &mut patch;
        for part in pointer.trim_start_matches('/').split('/') {
            at = &mut at[part];
        }
        *at = patch_spec;
        let query = BTreeMap::from([("fieldManager".to_string(), manager.to_string())]);
        let (code, reply) = http::patch(
            &self.shared,
            &workload_target(kind, namespace, name),
            name,
            "application/strategic-merge-patch+json",
            &query,
            &HeaderMap::new(),
            patch,
        );
        self.notify();
        assert_eq!(code, 200, "set image of {kind} {namespace}/{name}: {reply}");
        reply
    }

    /// Adds labels and annotations to a workload's own metadata (as `kubectl label` and
    /// `kubectl annotate` do, field manager `kubectl-label`), e.g. the marks a GitOps tool puts
    /// on what it owns. Returns the object written.
    pub fn label_workload(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> Value {
        let map = |pairs: &[(&str, &str)]| -> Value { pairs.iter().map(|(k, v)| (k.to_string(), json!(v))).collect() };
        let patch = json!({ "metadata": { "labels": map(labels), "annotations": map(annotations) } });
        let query = BTreeMap::from([("fieldManager".to_string(), "kubectl-label".to_string())]);
        let (code, reply) = http::patch(
            &self.shared,
            &workload_target(kind, namespace, name),
            name,
            "application/merge-patch+json",
            &query,
            &HeaderMap::new(),
            patch,
        );
        self.notify();
        assert_eq!(code, 200, "label {kind} {namespace}/{name}: {reply}");
        reply
    }

    /// Deletes a workload, as `kubectl delete` does (a DELETED event for watchers; its pods are
    /// the controllers' to clean up). Returns whether it existed.
    pub fn delete_workload(&self, kind: &str, namespace: &str, name: &str) -> bool {
        let key = workload_target(kind, namespace, name).key(name);
        let deleted = self.shared.store.lock().unwrap().delete(&key).is_some();
        self.notify();
        deleted
    }

    /// The next successful write (update or patch) of this workload is taken, and its answer never
    /// sent: as when the connection breaks after the API server committed it. The writer waits.
    pub fn lose_next_answer(&self, kind: &str, namespace: &str, name: &str) {
        let key = workload_target(kind, namespace, name).key(name);
        self.shared.store.lock().unwrap().answer_lost.insert(key);
    }

    /// A workload by kind (`Deployment` or `deployments`).
    pub fn workload(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        self.get(workload_kind(kind).1, Some(namespace), name)
    }

    /// The pods a workload's `spec.selector.matchLabels` selects, by name.
    pub fn pods_of(&self, kind: &str, namespace: &str, name: &str) -> Vec<Value> {
        let Some(object) = self.workload(kind, namespace, name) else { return Vec::new() };
        let Some(labels) = object["spec"]["selector"]["matchLabels"].as_object().filter(|l| !l.is_empty()) else {
            return Vec::new();
        };
        let selector: Vec<String> =
            labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect();
        let selector = selector.join(",");
        let store = self.shared.store.lock().unwrap();
        store
            .objects
            .iter()
            .filter(|(k, o)| {
                k.plural == "pods" && k.namespace.as_deref() == Some(namespace) && labels_match(o, &selector)
            })
            .map(|(_, o)| o.clone())
            .collect()
    }
}
