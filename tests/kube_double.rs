//! The Kubernetes API double answers `kube::Client` the way an API server does, for the semantics
//! the daemon relies on.

mod support;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use support::kube::KubeDouble;

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
