//! Jobs, Kueue and clusters side by side: the Job controller's status, Kueue's suspension and
//! admission, two doubles as two clusters, and one going down.

use super::*;

fn build_job(name: &str, queue: Option<&str>) -> Value {
    let mut job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": name, "labels": { "app.kubernetes.io/managed-by": "builder-monitor" } },
        "spec": {
            "backoffLimit": 2, "activeDeadlineSeconds": 3600,
            "template": { "spec": {
                "restartPolicy": "Never", "nodeSelector": { "disktype": "ssd" },
                "containers": [{ "name": "build", "image": "registry.test/builder@sha256:1111" }],
            } },
        },
    });
    if let Some(queue) = queue {
        job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = json!(queue);
        job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = json!("builds-low");
    }
    job
}

async fn create_job(api: &Api<Job>, job: Value) -> Job {
    api.create(&PostParams::default(), &serde_json::from_value(job).unwrap()).await.unwrap()
}

fn names(double: &KubeDouble, plural: &str) -> Vec<String> {
    double.list(plural).iter().map(|o| o["metadata"]["name"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn two_doubles_are_two_clusters_each_with_its_kubeconfig_context() {
    let (east, west) = (KubeDouble::start().await, KubeDouble::start().await);
    let dir = tempfile::tempdir().unwrap();
    let east_path = east.kubeconfig_named(dir.path(), "east");
    let west_path = west.kubeconfig_named(dir.path(), "west");
    assert_eq!(
        (east_path.file_name().unwrap(), west_path.file_name().unwrap()),
        ("kubeconfig-east".as_ref(), "kubeconfig-west".as_ref())
    );
    builder_monitor::install_crypto_provider();
    for (double, path, name) in [(&east, &east_path, "east"), (&west, &west_path, "west")] {
        double.create_namespace("builds");
        let kubeconfig = Kubeconfig::read_from(path).unwrap();
        assert_eq!(kubeconfig.current_context.as_deref(), Some(name));
        assert_eq!(kubeconfig.clusters.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), [name]);
        let options = KubeConfigOptions { context: Some(name.into()), ..KubeConfigOptions::default() };
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.unwrap();
        let api: Api<Job> = Api::namespaced(kube::Client::try_from(config).unwrap(), "builds");
        create_job(&api, build_job(&format!("{name}-build"), None)).await;
    }
    assert_eq!(names(&east, "jobs"), ["east-build"]);
    assert_eq!(names(&west, "jobs"), ["west-build"]);

    // Both files merged, as KUBECONFIG=a:b does: the context picks the cluster.
    let merged = Kubeconfig::read_from(&east_path).unwrap().merge(Kubeconfig::read_from(&west_path).unwrap()).unwrap();
    assert_eq!(merged.current_context.as_deref(), Some("east"), "the first file's current context");
    let options = KubeConfigOptions { context: Some("west".into()), ..KubeConfigOptions::default() };
    let config = kube::Config::from_custom_kubeconfig(merged, &options).await.unwrap();
    let api: Api<Job> = Api::namespaced(kube::Client::try_from(config).unwrap(), "builds");
    create_job(&api, build_job("picked", None)).await;
    assert_eq!(names(&east, "jobs"), ["east-build"]);
    assert_eq!(names(&west, "jobs"), ["west-build", "picked"]);
}

/// The kind of the first I/O error under `error`, if any.
fn io_error_kind(error: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        next = e.source();
    }
    None
}

fn is_connection_error(error: &kube::Error) -> bool {
    matches!(error, kube::Error::HyperError(_) | kube::Error::Service(_))
}

#[tokio::test]
async fn a_double_gone_down_refuses_connections_and_breaks_off_its_watches() {
    let double = KubeDouble::start().await;
    let other = KubeDouble::start().await;
    double.create_namespace("builds");
    other.create_namespace("builds");
    let api: Api<ConfigMap> = Api::namespaced(double.client(), "builds");
    api.create(&PostParams::default(), &configmap("a", "1")).await.unwrap();
    let mut events = api.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    assert!(matches!(events.try_next().await.unwrap(), Some(WatchEvent::Added(_))));

    double.go_down().await;

    // The watch breaks off (kube ends it, or yields an error first), not an answer.
    let rest = tokio::time::timeout(support::PATIENCE, async {
        let mut rest = Vec::new();
        while let Some(event) = events.next().await {
            rest.push(event);
        }
        rest
    })
    .await
    .expect("the watch stream ended");
    assert!(rest.iter().all(|e| matches!(e, Err(e) if !matches!(e, kube::Error::Api(_)))), "{rest:?}");

    // The client that had a connection open, and a new one: no HTTP status, a connection error.
    let pooled = tokio::time::timeout(support::PATIENCE, api.get("a")).await.expect("no hang").unwrap_err();
    assert!(is_connection_error(&pooled), "{pooled:?}");
    let fresh: Api<ConfigMap> = Api::namespaced(double.client(), "builds");
    let refused = tokio::time::timeout(support::PATIENCE, fresh.get("a")).await.expect("no hang").unwrap_err();
    assert!(is_connection_error(&refused), "{refused:?}");
    assert_eq!(io_error_kind(&refused), Some(std::io::ErrorKind::ConnectionRefused), "{refused:?}");

    // What it held stays readable; the other cluster goes on.
    assert_eq!(names(&double, "configmaps"), ["a"]);
    let api: Api<ConfigMap> = Api::namespaced(other.client(), "builds");
    api.create(&PostParams::default(), &configmap("b", "1")).await.unwrap();
    assert_eq!(names(&other, "configmaps"), ["b"]);
}

// ---- The Job controller and Kueue ----

fn suspended_condition(job: &Value) -> Option<(&str, &str)> {
    let c = job["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Suspended")?;
    Some((c["status"].as_str()?, c["reason"].as_str()?))
}

#[tokio::test]
async fn kueue_holds_a_queued_job_suspended_until_admitted_on_the_flavor_nodes() {
    let double = KubeDouble::start().await;
    double.create_namespace("builds");
    let api: Api<Job> = Api::namespaced(double.client(), "builds");
    create_job(&api, build_job("before", Some("builds"))).await;
    double.enable_kueue();
    let created = create_job(&api, build_job("queued", Some("builds"))).await;
    assert_eq!(created.spec.unwrap().suspend, Some(true), "the webhook suspended it on create");
    create_job(&api, build_job("direct", None)).await;
    double.settle().await;

    let queued = double.get("jobs", Some("builds"), "queued").unwrap();
    assert_eq!(queued["spec"]["suspend"], true);
    assert_eq!(queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "builds");
    assert_eq!(queued["metadata"]["labels"]["kueue.x-k8s.io/priority-class"], "builds-low");
    assert_eq!(suspended_condition(&queued), Some(("True", "JobSuspended")));
    assert!(queued["status"]["startTime"].is_null() && queued["status"]["active"].is_null(), "{queued}");
    let direct = double.get("jobs", Some("builds"), "direct").unwrap();
    assert!(direct["spec"]["suspend"].is_null(), "no queue, not suspended: {direct}");
    assert!(direct["status"]["startTime"].is_string());
    assert_eq!(direct["status"]["active"], 1);
    assert_eq!(suspended_condition(&direct), None);
    // What the controller writes is a valid batch/v1 Job status: nothing k8s-openapi does not know.
    k8s_typed::<Job>(&queued).unwrap();
    k8s_typed::<Job>(&direct).unwrap();
    let before = double.get("jobs", Some("builds"), "before").unwrap();
    assert!(before["spec"]["suspend"].is_null(), "created before Kueue was there: {before}");

    let rv = queued["metadata"]["resourceVersion"].as_str().unwrap();
    let mut events = api.watch(&WatchParams::default().fields("metadata.name=queued"), rv).await.unwrap().boxed();
    double.admit_job("builds", "queued", &[("cloud.google.com/machine-family", "c3"), ("zone", "eu-1b")]);
    let admitted = double
        .wait_until("the admitted Job started", |d| {
            d.get("jobs", Some("builds"), "queued").filter(|j| j["status"]["startTime"].is_string())
        })
        .await;
    assert_eq!(admitted["spec"]["suspend"], false);
    assert_eq!(
        admitted["spec"]["template"]["spec"]["nodeSelector"],
        json!({ "disktype": "ssd", "cloud.google.com/machine-family": "c3", "zone": "eu-1b" }),
        "the flavor's node labels merged into the Job's"
    );
    assert_eq!(suspended_condition(&admitted), Some(("False", "JobResumed")));
    assert_eq!(admitted["status"]["active"], 1);
    assert_eq!(double.owner("jobs", Some("builds"), "queued", "spec.suspend").as_deref(), Some("kueue"));

    // The watch started before saw the admission, then the controller starting the Job.
    let seen = tokio::time::timeout(support::PATIENCE, async {
        let mut seen = Vec::new();
        while let Some(event) = events.try_next().await.unwrap() {
            let WatchEvent::Modified(job) = event else { panic!("{event:?}") };
            let started = job.status.as_ref().is_some_and(|s| s.start_time.is_some());
            seen.push((job.spec.unwrap().suspend, started));
            if started {
                return seen;
            }
        }
        panic!("the watch ended: {seen:?}")
    })
    .await
    .expect("the watch saw the Job start");
    assert_eq!(seen, [(Some(false), false), (Some(false), true)]);
}

#[tokio::test]
async fn a_job_managed_by_multikueue_gets_no_status_from_the_job_controller() {
    let double = KubeDouble::start().await;
    double.create_namespace("builds");
    double.enable_kueue();
    let api: Api<Job> = Api::namespaced(double.client(), "builds");
    let mut job = build_job("dispatched", Some("builds"));
    job["spec"]["managedBy"] = json!("kueue.x-k8s.io/multikueue");
    create_job(&api, job).await;
    double.settle().await;
    let held = double.get("jobs", Some("builds"), "dispatched").unwrap();
    assert_eq!(held["spec"]["managedBy"], "kueue.x-k8s.io/multikueue");
    assert_eq!(held["spec"]["suspend"], true, "Kueue's webhook suspends it all the same");
    assert!(held.get("status").is_none(), "{held}");

    double.admit_job("builds", "dispatched", &[("zone", "eu-1b")]);
    double.settle().await;
    let admitted = double.get("jobs", Some("builds"), "dispatched").unwrap();
    assert_eq!(admitted["spec"]["suspend"], false);
    assert!(admitted.get("status").is_none(), "{admitted}");

    // Said explicitly, the built-in controller is the one.
    let mut job = build_job("built-in", None);
    job["spec"]["managedBy"] = json!("kubernetes.io/job-controller");
    create_job(&api, job).await;
    let started = double
        .wait_until("the Job started", |d| {
            d.get("jobs", Some("builds"), "built-in").filter(|j| j["status"]["startTime"].is_string())
        })
        .await;
    assert_eq!(started["status"]["active"], 1);
}

#[tokio::test]
async fn a_status_a_test_sets_survives_the_job_controller() {
    let double = KubeDouble::start().await;
    double.create_namespace("builds");
    double.enable_kueue();
    let api: Api<Job> = Api::namespaced(double.client(), "builds");
    create_job(&api, build_job("done", None)).await;
    create_job(&api, build_job("retrying", None)).await;
    create_job(&api, build_job("never-admitted", Some("builds"))).await;
    double.settle().await;
    assert!(double.get("jobs", Some("builds"), "done").unwrap()["status"]["startTime"].is_string());

    // Finished: the controller leaves the status as written.
    let complete = json!({ "succeeded": 1, "conditions": [{ "type": "Complete", "status": "True" }] });
    double.set_status("jobs", Some("builds"), "done", complete.clone());
    let failed =
        json!({ "failed": 1, "conditions": [{ "type": "Failed", "status": "True", "reason": "DeadlineExceeded" }] });
    double.set_status("jobs", Some("builds"), "never-admitted", failed.clone());
    // Running: the controller puts back its own field and keeps the test's.
    double.set_status("jobs", Some("builds"), "retrying", json!({ "active": 2, "failed": 1, "ready": 1 }));
    double.settle().await;

    assert_eq!(double.get("jobs", Some("builds"), "done").unwrap()["status"], complete);
    assert_eq!(double.get("jobs", Some("builds"), "never-admitted").unwrap()["status"], failed);
    let retrying = double.get("jobs", Some("builds"), "retrying").unwrap();
    assert!(retrying["status"]["startTime"].is_string(), "{retrying}");
    assert_eq!(
        (&retrying["status"]["active"], &retrying["status"]["failed"], &retrying["status"]["ready"]),
        (&json!(2), &json!(1), &json!(1))
    );
    let job = api.get("done").await.unwrap();
    assert!(job.status.unwrap().conditions.unwrap().iter().any(|c| c.type_ == "Complete" && c.status == "True"));
}
