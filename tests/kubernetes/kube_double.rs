//! The Kubernetes API double answers `kube::Client` the way an API server does, for the semantics
//! the daemon relies on: REST, field ownership under server-side apply, the workload controllers'
//! roll-outs, the Job controller and Kueue's suspension of queued Jobs, and clusters side by side,
//! one of which can go down.

#[path = "kube_double/jobs.rs"]
mod jobs;

use crate::support;

use builder_monitor::config::k8s_typed;
use builder_monitor_core::deploy::{
    self, CHANGE_ANNOTATION, Container, FIELD_MANAGER, GitopsOwned, Health, Workload, WorkloadKind,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use serde_json::{Value, json};
use support::kube::KubeDouble;
use support::kube::controllers::Failure;

fn configmap(name: &str, data: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name, "labels": { "app": "x" } },
        "data": { "k": data },
    }))
    .unwrap()
}

fn api_error(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason),
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn create_get_conflicts_and_deletes() {
    let double = KubeDouble::start().await;
    let client = double.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "builds");
    // The namespace must exist.
    assert_eq!(api_error(api.create(&PostParams::default(), &configmap("a", "1")).await.unwrap_err()).0, 404);
    double.create_namespace("builds");
    let created = api.create(&PostParams::default(), &configmap("a", "1")).await.unwrap();
    assert!(created.metadata.uid.is_some() && created.metadata.resource_version.is_some());
    assert_eq!(created.metadata.labels.as_ref().unwrap()["app"], "x", "{created:?}");
    assert_eq!(
        api_error(api.create(&PostParams::default(), &configmap("a", "1")).await.unwrap_err()),
        (409, "AlreadyExists".into())
    );
    assert_eq!(api.get("a").await.unwrap().data.unwrap()["k"], "1");
    assert_eq!(api_error(api.get("nope").await.unwrap_err()), (404, "NotFound".into()));
    assert!(api.get_opt("nope").await.unwrap().is_none());

    // A stale resourceVersion is a conflict; the current one wins.
    let mut stale = created.clone();
    stale.data = Some([("k".to_string(), "2".to_string())].into());
    api.replace("a", &PostParams::default(), &stale).await.unwrap();
    stale.data = Some([("k".to_string(), "3".to_string())].into());
    assert_eq!(
        api_error(api.replace("a", &PostParams::default(), &stale).await.unwrap_err()),
        (409, "Conflict".into())
    );

    // Merge and apply patches.
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({ "data": { "m": "x" } }))).await.unwrap();
    let ssa = PatchParams::apply("builder-monitor").force();
    api.patch("b", &ssa, &Patch::Apply(json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "b" }, "data": { "x": "1", "y": "2" } }))).await.unwrap();
    api.patch(
        "b",
        &ssa,
        &Patch::Apply(
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "b" }, "data": { "x": "3" } }),
        ),
    )
    .await
    .unwrap();
    let b = api.get("b").await.unwrap().data.unwrap();
    assert_eq!(
        (b.get("x").map(String::as_str), b.get("y")),
        (Some("3"), None),
        "apply drops what the manager stopped applying"
    );

    let listed = api.list(&ListParams::default().labels("app=x")).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    api.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(api.get_opt("a").await.unwrap().is_none());
    assert_eq!(double.list("configmaps").len(), 1);
}

#[tokio::test]
async fn status_is_a_subresource_and_watches_resume() {
    let double = KubeDouble::start().await;
    double.create_namespace("builds");
    let api: Api<Job> = Api::namespaced(double.client(), "builds");
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "j", "labels": { "app.kubernetes.io/managed-by": "builder-monitor" } },
        "spec": { "template": { "spec": { "restartPolicy": "Never", "containers": [{ "name": "c", "image": "x" }] } } },
        "status": { "succeeded": 1 },
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &job).await.unwrap();
    assert!(created.status.is_none(), "status is not written on create");
    // The Job controller starts it (a write of its own the watch below is not to see).
    double.settle().await;

    let mut events =
        watcher(api.clone(), watcher::Config::default().labels("app.kubernetes.io/managed-by=builder-monitor")).boxed();
    let mut seen_init = false;
    while let Some(e) = events.try_next().await.unwrap() {
        match e {
            watcher::Event::InitApply(j) => {
                assert_eq!(j.metadata.name.as_deref(), Some("j"));
                seen_init = true;
            }
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert!(seen_init);
    double.set_status(
        "jobs",
        Some("builds"),
        "j",
        json!({ "succeeded": 1, "conditions": [{ "type": "Complete", "status": "True" }] }),
    );
    loop {
        if let watcher::Event::Apply(j) = events.try_next().await.unwrap().unwrap() {
            assert_eq!(j.status.unwrap().succeeded, Some(1));
            break;
        }
    }
    let status = api
        .patch_status(
            "j",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "failed": 1 }, "spec": { "parallelism": 5 } })),
        )
        .await
        .unwrap();
    assert_eq!(status.status.unwrap().failed, Some(1));
    assert_eq!(status.spec.unwrap().parallelism, None, "a status write leaves the spec alone");
}

// ---- Field ownership (server-side apply) ----

const NS: &str = "shop";
const APP_IMAGE: &str = ".spec.template.spec.containers[name=\"app\"].image";
const PROXY_IMAGE: &str = ".spec.template.spec.containers[name=\"proxy\"].image";

fn workload(kind: WorkloadKind, name: &str) -> Workload {
    Workload { kind, namespace: NS.into(), name: name.into(), container: None, gitops_owned: GitopsOwned::Skip }
}

/// The body a deploy applies (the core's own): these containers' images and the change annotation.
fn deploy_body(kind: WorkloadKind, name: &str, images: &[(&str, &str)], change: Option<&str>) -> Value {
    let images: Vec<(bool, Container)> =
        images.iter().map(|(n, i)| (false, Container { name: n.to_string(), image: i.to_string() })).collect();
    deploy::apply_body(&workload(kind, name), &images, change)
}

fn api(double: &KubeDouble, kind: WorkloadKind) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(kind.group(), "v1", kind.as_str()));
    Api::namespaced_with(double.client(), NS, &resource)
}

/// Applies `body` as `manager` (forced or not): the object written, or the API's Status.
async fn apply(
    double: &KubeDouble,
    kind: WorkloadKind,
    name: &str,
    manager: &str,
    force: bool,
    body: &Value,
) -> Result<Value, Box<kube::core::Status>> {
    let params = if force { PatchParams::apply(manager).force() } else { PatchParams::apply(manager) };
    match api(double, kind).patch(name, &params, &Patch::Apply(body)).await {
        Ok(object) => Ok(serde_json::to_value(object).unwrap()),
        Err(kube::Error::Api(status)) => Err(status),
        Err(other) => panic!("{other}"),
    }
}

fn container<'a>(object: &'a Value, name: &str) -> &'a Value {
    object["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name} in {object}"))
}

async fn web(double: &KubeDouble, replicas: i64) -> Value {
    double
        .create_workload(
            "Deployment",
            NS,
            "web",
            &[("app", "registry.test/app:1"), ("proxy", "registry.test/proxy:1")],
            replicas,
        )
        .await
}

#[tokio::test]
async fn an_apply_conflicts_on_a_field_another_manager_owns_unless_forced() {
    let double = KubeDouble::start().await;
    web(&double, 2).await;
    let owner = |path: &str| double.owner("deployments", Some(NS), "web", path);
    assert_eq!(owner(APP_IMAGE).as_deref(), Some("kubectl-client-side-apply"), "the creator owns what it set");
    assert_eq!(owner(".spec.replicas").as_deref(), Some("kubectl-client-side-apply"));
    let new = "registry.test/app@sha256:2222";
    let body = deploy_body(WorkloadKind::Deployment, "web", &[("app", new)], Some("change-2"));

    let status = apply(&double, WorkloadKind::Deployment, "web", FIELD_MANAGER, false, &body).await.unwrap_err();
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using apps/v1: .spec.template.spec.containers[name="app"].image"#
    );
    let cause = &status.details.as_ref().unwrap().causes[0];
    assert_eq!((cause.reason.as_str(), cause.field.as_str()), ("FieldManagerConflict", APP_IMAGE));
    let unchanged = double.workload("Deployment", NS, "web").unwrap();
    assert_eq!(container(&unchanged, "app")["image"], "registry.test/app:1", "a conflict writes nothing");
    assert_eq!(unchanged["metadata"]["generation"], 1);

    let applied = apply(&double, WorkloadKind::Deployment, "web", FIELD_MANAGER, true, &body).await.unwrap();
    assert_eq!(container(&applied, "app")["image"], new);
    assert_eq!(owner(APP_IMAGE).as_deref(), Some(FIELD_MANAGER), "forcing takes the field");
    assert_eq!(double.owners("deployments", Some(NS), "web", APP_IMAGE), [FIELD_MANAGER], "from its owner");
    let annotation = format!(".spec.template.metadata.annotations.{CHANGE_ANNOTATION}");
    assert_eq!(owner(&annotation).as_deref(), Some(FIELD_MANAGER));
    assert_eq!(owner(PROXY_IMAGE).as_deref(), Some("kubectl-client-side-apply"), "what it did not apply stays");
    assert_eq!(owner(".spec.replicas").as_deref(), Some("kubectl-client-side-apply"));

    // managedFields as the API server shows them.
    let entries = applied["metadata"]["managedFields"].as_array().unwrap();
    let entry =
        |manager: &str| entries.iter().find(|e| e["manager"] == manager).unwrap_or_else(|| panic!("{entries:?}"));
    let ours = entry(FIELD_MANAGER);
    assert_eq!((&ours["operation"], &ours["fieldsType"]), (&json!("Apply"), &json!("FieldsV1")));
    assert_eq!(
        ours["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"],
        json!({ ".": {}, "f:image": {}, "f:name": {} })
    );
    let creator = entry("kubectl-client-side-apply");
    assert_eq!((&creator["operation"], &creator["apiVersion"]), (&json!("Update"), &json!("apps/v1")));
    let creator_app = &creator["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"];
    assert!(creator_app.get("f:image").is_none() && creator_app.get("f:imagePullPolicy").is_some(), "{creator_app}");

    // The same value as another manager's is no conflict: the field is shared.
    let same = deploy_body(WorkloadKind::Deployment, "web", &[("app", new), ("proxy", "registry.test/proxy:1")], None);
    apply(&double, WorkloadKind::Deployment, "web", FIELD_MANAGER, false, &same).await.unwrap();
    assert_eq!(
        double.owners("deployments", Some(NS), "web", PROXY_IMAGE),
        [FIELD_MANAGER, "kubectl-client-side-apply"]
    );

    // Conflicts with several managers, grouped as the API server groups them.
    let other = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "web" },
        "spec": { "replicas": 5, "template": { "spec": { "containers": [{ "name": "app", "image": "x" }] } } },
    });
    let status = apply(&double, WorkloadKind::Deployment, "web", "other", false, &other).await.unwrap_err();
    assert_eq!(
        status.message,
        "Apply failed with 2 conflicts: conflicts with \"builder-monitor\":\n- .spec.template.spec.containers[name=\"app\"].image\nconflicts with \"kubectl-client-side-apply\" using apps/v1:\n- .spec.replicas"
    );
}

#[tokio::test]
async fn an_apply_merges_containers_by_name_and_removes_what_it_alone_stopped_applying() {
    let double = KubeDouble::start().await;
    let created = web(&double, 2).await;
    let (app, proxy) = ("registry.test/app@sha256:2222", "registry.test/proxy@sha256:3333");
    let body = deploy_body(WorkloadKind::Deployment, "web", &[("app", app), ("proxy", proxy)], Some("change-2"));
    let applied = apply(&double, WorkloadKind::Deployment, "web", FIELD_MANAGER, true, &body).await.unwrap();

    // Only the images changed: every other field of both containers, and of the object, stays.
    for name in ["app", "proxy"] {
        let (before, after) = (container(&created, name), container(&applied, name));
        let without_image = |c: &Value| {
            let mut c = c.clone();
            c.as_object_mut().unwrap().remove("image");
            c
        };
        assert_eq!(without_image(after), without_image(before), "{name}");
    }
    assert_eq!(container(&applied, "proxy")["image"], proxy);
    assert_eq!(applied["spec"]["replicas"], 2);
    assert_eq!(applied["spec"]["template"]["metadata"]["labels"], json!({ "app": "web" }));
    assert_eq!(applied["spec"]["template"]["metadata"]["annotations"][CHANGE_ANNOTATION], "change-2");

    // It stops applying the annotation and the proxy's image: it alone owned both, so both go;
    // the proxy container stays, its other fields owned by its creator.
    let body = deploy_body(WorkloadKind::Deployment, "web", &[("app", app)], None);
    let applied = apply(&double, WorkloadKind::Deployment, "web", FIELD_MANAGER, false, &body).await.unwrap();
    assert!(
        applied["spec"]["template"]["metadata"].get("annotations").is_none_or(|a| a.get(CHANGE_ANNOTATION).is_none())
    );
    assert!(container(&applied, "proxy").get("image").is_none(), "{}", container(&applied, "proxy"));
    assert_eq!(container(&applied, "proxy")["imagePullPolicy"], "IfNotPresent");
    assert_eq!(container(&applied, "app")["image"], app);

    // A JSON merge patch replaces lists whole, as on a real API server.
    let params = PatchParams { field_manager: Some("kubectl-patch".into()), ..Default::default() };
    let patch = json!({ "spec": { "template": { "spec": { "containers": [{ "name": "app", "image": "registry.test/app:9" }] } } } });
    let patched = api(&double, WorkloadKind::Deployment).patch("web", &params, &Patch::Merge(&patch)).await.unwrap();
    let patched = serde_json::to_value(patched).unwrap();
    assert_eq!(
        patched["spec"]["template"]["spec"]["containers"],
        json!([{ "name": "app", "image": "registry.test/app:9" }])
    );
    assert_eq!(double.owner("deployments", Some(NS), "web", APP_IMAGE).as_deref(), Some("kubectl-patch"));
}

#[tokio::test]
async fn a_strategic_merge_patch_takes_a_field_from_the_applier() {
    let double = KubeDouble::start().await;
    web(&double, 1).await;
    let body = deploy_body(WorkloadKind::Deployment, "web", &[("app", "registry.test/app@sha256:2222")], Some("c2"));
    apply(&double, WorkloadKind::Deployment, "web", FIELD_MANAGER, true, &body).await.unwrap();

    let set = double.set_image_as("kubectl-set", "Deployment", NS, "web", "app", "registry.test/app:hotfix");
    assert_eq!(container(&set, "app")["image"], "registry.test/app:hotfix");
    assert_eq!(
        container(&set, "app")["ports"],
        json!([{ "containerPort": 8080, "protocol": "TCP" }]),
        "merged by name"
    );
    assert_eq!(container(&set, "proxy")["image"], "registry.test/proxy:1");
    assert_eq!(double.owner("deployments", Some(NS), "web", APP_IMAGE).as_deref(), Some("kubectl-set"));

    let body = deploy_body(WorkloadKind::Deployment, "web", &[("app", "registry.test/app@sha256:4444")], Some("c3"));
    let status = apply(&double, WorkloadKind::Deployment, "web", FIELD_MANAGER, false, &body).await.unwrap_err();
    assert_eq!(
        status.message,
        r#"Apply failed with 1 conflict: conflict with "kubectl-set" using apps/v1: .spec.template.spec.containers[name="app"].image"#
    );

    // Over HTTP too: a strategic merge patch merges `env` by name.
    let params = PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() };
    let patch = json!({ "spec": { "template": { "spec": { "containers": [
        { "name": "proxy", "env": [{ "name": "MODE", "value": "strict" }] },
    ] } } } });
    let patched =
        api(&double, WorkloadKind::Deployment).patch("web", &params, &Patch::Strategic(&patch)).await.unwrap();
    let patched = serde_json::to_value(patched).unwrap();
    assert_eq!(
        container(&patched, "proxy")["env"],
        json!([{ "name": "CONTAINER", "value": "proxy" }, { "name": "MODE", "value": "strict" }])
    );
    assert_eq!(container(&patched, "app")["image"], "registry.test/app:hotfix");
    let mode = ".spec.template.spec.containers[name=\"proxy\"].env[name=\"MODE\"].value";
    assert_eq!(double.owner("deployments", Some(NS), "web", mode).as_deref(), Some("kubectl-edit"));
}

// ---- Workload controllers ----

fn health(kind: WorkloadKind, object: &Value) -> Health {
    deploy::health(kind, object)
}

async fn wait_health(double: &KubeDouble, kind: WorkloadKind, name: &str, healthy: bool) -> Value {
    double
        .wait_until(&format!("{kind} {name} healthy: {healthy}"), |d| {
            let object = d.workload(kind.as_str(), NS, name)?;
            let verdict = health(kind, &object);
            (matches!(verdict, Health::Healthy) == healthy && !matches!(verdict, Health::Progressing(_)))
                .then_some(object)
        })
        .await
}

fn change_of(pod: &Value) -> Option<&str> {
    pod["metadata"]["annotations"][CHANGE_ANNOTATION].as_str()
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().unwrap().iter().any(|c| c["type"] == "Ready" && c["status"] == "True")
}

#[tokio::test]
async fn a_deployment_rolls_out_healthy_with_pods_of_the_new_template() {
    let double = KubeDouble::start().await;
    let created = web(&double, 3).await;
    assert_eq!(health(WorkloadKind::Deployment, &created), Health::Healthy, "{}", created["status"]);
    let old: Vec<Value> = double.pods_of("Deployment", NS, "web");
    assert_eq!(old.len(), 3);
    assert!(old.iter().all(ready));

    let new = "registry.test/app@sha256:2222";
    let body = deploy_body(WorkloadKind::Deployment, "web", &[("app", new)], Some("change-2"));
    let applied = apply(&double, WorkloadKind::Deployment, "web", FIELD_MANAGER, true, &body).await.unwrap();
    assert_eq!(applied["metadata"]["generation"], 2);
    let object = wait_health(&double, WorkloadKind::Deployment, "web", true).await;
    let status = &object["status"];
    assert_eq!(status["observedGeneration"], 2);
    for field in ["replicas", "updatedReplicas", "readyReplicas", "availableReplicas"] {
        assert_eq!(status[field], 3, "{field}: {status}");
    }
    let conditions = status["conditions"].as_array().unwrap();
    let progressing = conditions.iter().find(|c| c["type"] == "Progressing").unwrap();
    assert_eq!((&progressing["status"], &progressing["reason"]), (&json!("True"), &json!("NewReplicaSetAvailable")));
    assert!(conditions.iter().any(|c| c["type"] == "Available" && c["status"] == "True"));

    // The pods, as the daemon reads them: by the workload's selector, through the API.
    let selector = deploy::selector(&object).unwrap();
    let pods =
        Api::<Pod>::namespaced(double.client(), NS).list(&ListParams::default().labels(&selector)).await.unwrap();
    let pods: Vec<Value> = pods.items.into_iter().map(|p| serde_json::to_value(p).unwrap()).collect();
    assert_eq!(pods.len(), 3, "the old template's pods are gone");
    for pod in &pods {
        assert_eq!(change_of(pod), Some("change-2"), "{pod}");
        assert!(ready(pod) && pod["status"]["phase"] == "Running");
        assert_eq!(pod["spec"]["containers"][0]["image"], new);
        assert!(pod["status"]["containerStatuses"][0]["state"]["running"].is_object());
        assert!(old.iter().all(|o| o["metadata"]["name"] != pod["metadata"]["name"]));
        assert_eq!(pod["metadata"]["ownerReferences"][0]["name"], "web");
    }
}

#[tokio::test]
async fn statefulsets_and_daemonsets_roll_out_healthy() {
    let double = KubeDouble::start().await;
    let db = double.create_workload("StatefulSet", NS, "db", &[("db", "registry.test/db:1")], 2).await;
    let agent = double.create_workload("DaemonSet", NS, "agent", &[("agent", "registry.test/agent:1")], 0).await;
    assert_eq!(health(WorkloadKind::StatefulSet, &db), Health::Healthy, "{}", db["status"]);
    assert_eq!(health(WorkloadKind::DaemonSet, &agent), Health::Healthy, "{}", agent["status"]);
    let old_revision = db["status"]["updateRevision"].as_str().unwrap().to_string();
    assert!(old_revision.starts_with("db-"), "{old_revision}");

    let body = deploy_body(WorkloadKind::StatefulSet, "db", &[("db", "registry.test/db@sha256:2222")], Some("c-db"));
    apply(&double, WorkloadKind::StatefulSet, "db", FIELD_MANAGER, true, &body).await.unwrap();
    let body =
        deploy_body(WorkloadKind::DaemonSet, "agent", &[("agent", "registry.test/agent@sha256:3333")], Some("c-agent"));
    apply(&double, WorkloadKind::DaemonSet, "agent", FIELD_MANAGER, true, &body).await.unwrap();

    let db = wait_health(&double, WorkloadKind::StatefulSet, "db", true).await;
    let status = &db["status"];
    assert_eq!(status["observedGeneration"], 2);
    assert_eq!(status["currentRevision"], status["updateRevision"]);
    assert_ne!(status["updateRevision"], old_revision.as_str());
    assert_eq!((&status["replicas"], &status["readyReplicas"]), (&json!(2), &json!(2)));
    let pods = double.pods_of("StatefulSet", NS, "db");
    assert_eq!(pods.len(), 2);
    assert!(pods.iter().all(|p| change_of(p) == Some("c-db") && ready(p)));

    let agent = wait_health(&double, WorkloadKind::DaemonSet, "agent", true).await;
    let status = &agent["status"];
    assert_eq!(status["observedGeneration"], 2);
    for field in ["desiredNumberScheduled", "updatedNumberScheduled", "numberAvailable", "numberReady"] {
        assert_eq!(status[field], 2, "{field}: {status}");
    }
    let pods = double.pods_of("DaemonSet", NS, "agent");
    assert_eq!(pods.len(), 2);
    assert!(pods.iter().all(|p| change_of(p) == Some("c-agent") && ready(p)));
}

/// A Deployment of 2 rolled out, then a deploy of `image` that fails as `failure`; the
/// Deployment once its controller has gone as far as it goes.
async fn failing_rollout(double: &KubeDouble, image: &str, failure: Failure) -> Value {
    web(double, 2).await;
    double.fail_image(image, failure);
    let body = deploy_body(WorkloadKind::Deployment, "web", &[("app", image)], Some("change-2"));
    apply(double, WorkloadKind::Deployment, "web", FIELD_MANAGER, true, &body).await.unwrap();
    double
        .wait_until("the roll-out as far as it goes", |d| d.rollout_done("Deployment", NS, "web").then_some(()))
        .await;
    double.settle().await;
    double.workload("Deployment", NS, "web").unwrap()
}

fn new_pods(double: &KubeDouble) -> Vec<Value> {
    double.pods_of("Deployment", NS, "web").into_iter().filter(|p| change_of(p) == Some("change-2")).collect()
}

#[tokio::test]
async fn a_progress_deadline_fails_the_deployment() {
    let double = KubeDouble::start().await;
    let image = "registry.test/app@sha256:dead";
    let object = failing_rollout(&double, image, Failure::ProgressDeadline).await;
    let status = &object["status"];
    assert_eq!(status["observedGeneration"], 2);
    assert_eq!((&status["updatedReplicas"], &status["availableReplicas"]), (&json!(1), &json!(2)), "{status}");
    let progressing = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Progressing").unwrap();
    let pods = new_pods(&double);
    assert_eq!(pods.len(), 1);
    let hash = pods[0]["metadata"]["labels"]["pod-template-hash"].as_str().unwrap();
    assert_eq!(
        (&progressing["status"], &progressing["reason"], &progressing["message"]),
        (
            &json!("False"),
            &json!("ProgressDeadlineExceeded"),
            &json!(format!("ReplicaSet \"web-{hash}\" has timed out progressing."))
        )
    );
    assert!(
        matches!(health(WorkloadKind::Deployment, &object), Health::Failed(m) if m.contains("ProgressDeadlineExceeded"))
    );
    assert!(!ready(&pods[0]) && pods[0]["status"]["phase"] == "Running");
    assert_eq!(double.pods_of("Deployment", NS, "web").len(), 3, "the old pods stay");
}

#[tokio::test]
async fn image_pull_and_crash_loop_back_offs_show_in_the_new_pods() {
    for (failure, reason, phase) in [
        (Failure::ImagePullBackOff, "ImagePullBackOff", "Pending"),
        (Failure::CrashLoopBackOff, "CrashLoopBackOff", "Running"),
    ] {
        let double = KubeDouble::start().await;
        let image = "registry.test/app@sha256:bad0";
        let object = failing_rollout(&double, image, failure).await;
        assert!(matches!(health(WorkloadKind::Deployment, &object), Health::Progressing(_)), "{}", object["status"]);
        assert_eq!(object["status"]["observedGeneration"], 2);
        assert_eq!(object["status"]["updatedReplicas"], 1);
        let pods = new_pods(&double);
        assert_eq!(pods.len(), 1, "{reason}");
        assert_eq!(pods[0]["status"]["phase"], phase);
        let trouble =
            deploy::pod_trouble(&pods, "change-2").unwrap_or_else(|| panic!("{reason}: {}", pods[0]["status"]));
        assert_eq!((trouble.container.as_str(), trouble.reason.as_str()), ("app", reason));
        if failure == Failure::ImagePullBackOff {
            assert_eq!(trouble.message, format!("Back-off pulling image \"{image}\""));
        } else {
            assert!(
                trouble.message.starts_with("back-off 5m0s restarting failed container=app"),
                "{}",
                trouble.message
            );
        }
        let proxy =
            pods[0]["status"]["containerStatuses"].as_array().unwrap().iter().find(|s| s["name"] == "proxy").unwrap();
        assert!(proxy["state"]["running"].is_object(), "only the failing image's container waits");
        assert_eq!(double.pods_of("Deployment", NS, "web").len(), 3, "the old pods stay");
    }
}

#[tokio::test]
async fn a_stuck_rollout_observes_the_generation_and_goes_no_further() {
    let double = KubeDouble::start().await;
    let object = failing_rollout(&double, "registry.test/app@sha256:5111", Failure::Stuck).await;
    let status = &object["status"];
    assert_eq!(status["observedGeneration"], 2);
    assert_eq!((&status["replicas"], &status["availableReplicas"]), (&json!(2), &json!(2)));
    assert!(status.get("updatedReplicas").is_none(), "{status}");
    assert!(matches!(health(WorkloadKind::Deployment, &object), Health::Progressing(_)));
    assert!(new_pods(&double).is_empty());
}

#[tokio::test]
async fn a_daemonset_pull_failure_replaces_one_pod() {
    let double = KubeDouble::start().await;
    double.create_workload("DaemonSet", NS, "agent", &[("agent", "registry.test/agent:1")], 0).await;
    let image = "registry.test/agent@sha256:bad1";
    double.fail_image(image, Failure::ImagePullBackOff);
    let body = deploy_body(WorkloadKind::DaemonSet, "agent", &[("agent", image)], Some("c-agent"));
    apply(&double, WorkloadKind::DaemonSet, "agent", FIELD_MANAGER, true, &body).await.unwrap();
    double.wait_until("done", |d| d.rollout_done("DaemonSet", NS, "agent").then_some(())).await;
    let status = double.workload("DaemonSet", NS, "agent").unwrap()["status"].clone();
    assert_eq!(
        (&status["desiredNumberScheduled"], &status["updatedNumberScheduled"], &status["numberAvailable"]),
        (&json!(2), &json!(1), &json!(1)),
        "{status}"
    );
    let pods = double.pods_of("DaemonSet", NS, "agent");
    assert_eq!(pods.len(), 2);
    assert_eq!(deploy::pod_trouble(&pods, "c-agent").unwrap().reason, "ImagePullBackOff");
}

#[tokio::test]
async fn paused_rollouts_leave_the_written_workload_unobserved_until_resumed() {
    let double = KubeDouble::start().await;
    web(&double, 2).await;
    double.create_workload("Deployment", NS, "other", &[("app", "registry.test/app:1")], 1).await;
    double.pause_rollouts();
    let body =
        deploy_body(WorkloadKind::Deployment, "web", &[("app", "registry.test/app@sha256:2222")], Some("change-2"));
    apply(&double, WorkloadKind::Deployment, "web", FIELD_MANAGER, true, &body).await.unwrap();
    double.settle().await;
    let object = double.workload("Deployment", NS, "web").unwrap();
    assert_eq!((&object["metadata"]["generation"], &object["status"]["observedGeneration"]), (&json!(2), &json!(1)));
    assert!(matches!(health(WorkloadKind::Deployment, &object), Health::Progressing(_)));
    assert!(new_pods(&double).is_empty());

    double.resume_rollouts();
    wait_health(&double, WorkloadKind::Deployment, "web", true).await;
    assert_eq!(new_pods(&double).len(), 2);

    // One workload held, another rolled out.
    double.hold_rollout("Deployment", NS, "web");
    let body =
        deploy_body(WorkloadKind::Deployment, "web", &[("app", "registry.test/app@sha256:3333")], Some("change-3"));
    apply(&double, WorkloadKind::Deployment, "web", FIELD_MANAGER, true, &body).await.unwrap();
    let body =
        deploy_body(WorkloadKind::Deployment, "other", &[("app", "registry.test/app@sha256:3333")], Some("change-3"));
    apply(&double, WorkloadKind::Deployment, "other", FIELD_MANAGER, true, &body).await.unwrap();
    wait_health(&double, WorkloadKind::Deployment, "other", true).await;
    double.settle().await;
    let held = double.workload("Deployment", NS, "web").unwrap();
    assert_eq!(held["status"]["observedGeneration"], 2, "held at the generation before");
    double.release_rollout("Deployment", NS, "web");
    let object = wait_health(&double, WorkloadKind::Deployment, "web", true).await;
    assert_eq!(object["status"]["observedGeneration"], 3);
}

#[tokio::test]
async fn a_watch_sees_the_rollout_progress() {
    let double = KubeDouble::start().await;
    let created = web(&double, 2).await;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(double.client(), NS);
    let rv = created["metadata"]["resourceVersion"].as_str().unwrap();
    let mut events = deployments.watch(&WatchParams::default().fields("metadata.name=web"), rv).await.unwrap().boxed();
    let body =
        deploy_body(WorkloadKind::Deployment, "web", &[("app", "registry.test/app@sha256:2222")], Some("change-2"));
    apply(&double, WorkloadKind::Deployment, "web", FIELD_MANAGER, true, &body).await.unwrap();

    let mut seen = Vec::new();
    while let Some(event) = events.try_next().await.unwrap() {
        let WatchEvent::Modified(d) = event else { panic!("{event:?}") };
        let object = serde_json::to_value(&d).unwrap();
        let verdict = health(WorkloadKind::Deployment, &object);
        let status = d.status.unwrap_or_default();
        seen.push((status.observed_generation, status.updated_replicas, verdict.clone()));
        if verdict == Health::Healthy {
            break;
        }
    }
    assert_eq!(seen.first().map(|s| s.0), Some(Some(1)), "first the write, not yet observed: {seen:?}");
    assert!(
        seen.iter().any(|(observed, updated, v)| *observed == Some(2)
            && updated.unwrap_or(0) < 2
            && matches!(v, Health::Progressing(_))),
        "then observed, not yet updated: {seen:?}"
    );
    assert_eq!(seen.last().map(|s| (s.0, s.1)), Some((Some(2), Some(2))));
}

#[tokio::test]
async fn a_cronjob_takes_the_apply_in_its_job_template_and_has_no_controller() {
    let double = KubeDouble::start().await;
    let created = double.create_workload("CronJob", NS, "nightly", &[("task", "registry.test/task:1")], 1).await;
    assert!(created.get("status").is_none());
    let body = deploy_body(WorkloadKind::CronJob, "nightly", &[("task", "registry.test/task@sha256:2222")], Some("c"));
    let applied = apply(&double, WorkloadKind::CronJob, "nightly", FIELD_MANAGER, true, &body).await.unwrap();
    let template = &applied["spec"]["jobTemplate"]["spec"]["template"];
    assert_eq!(template["spec"]["containers"][0]["image"], "registry.test/task@sha256:2222");
    assert_eq!(template["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(template["spec"]["restartPolicy"], "OnFailure");
    assert_eq!(applied["spec"]["schedule"], "0 3 * * *");
    double.settle().await;
    assert!(double.list("pods").is_empty());
    let path = ".spec.jobTemplate.spec.template.spec.containers[name=\"task\"].image";
    assert_eq!(double.owner("cronjobs", Some(NS), "nightly", path).as_deref(), Some(FIELD_MANAGER));

    // `kubectl set image` on it, and a label a GitOps tool would leave.
    let set = double.set_image_as("kubectl-set", "CronJob", NS, "nightly", "task", "registry.test/task:2");
    assert_eq!(
        set["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.test/task:2"
    );
    let labelled = double.label_workload("CronJob", NS, "nightly", &[("argocd.argoproj.io/instance", "shop")], &[]);
    assert_eq!(deploy::gitops_owner(&labelled), Some("argocd.argoproj.io/instance"));
}

// ---- Clusters side by side, a cluster going down ----
