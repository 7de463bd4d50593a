//! The runner's Job in a pool with a Kueue queue, on the real control plane, when Kueue 0.19
//! evicts its Workload (WaitForPodsReady: `Evicted`, then `Requeued`). No Kueue controller runs:
//! the test writes what Kueue would — the Workload it makes for the Job (with
//! `fieldValidation=Strict`: the daemon's pod template must pass Kueue's real CRD schema), its
//! admission, the eviction, the Job suspended and resumed — and the real Job controller and the
//! node agent do the rest.

use crate::support;

use serde_json::{Value, json};

use builder_monitor::ledger::{ActionState, Ledger};
use builder_monitor::runner::strict;
use kube::api::{Patch, PatchParams};
use support::cnb::BuilderSpec;
use support::control_plane::{TestNamespace, control_plane};
use support::daemon::{Daemon, Workspace};
use support::images::{Format, Image, Pusher};
use support::registry::TestRegistry;

/// The annotation by which the node agent keeps a Job's pod running (`forever`) or ends it.
const RUN_FOR: &str = "fake-kubelet.builder-monitor.test/run-for";

/// A condition as Kueue writes it (`metav1.Condition`: every field required by the CRD).
fn condition(kind: &str, status: bool, reason: &str, message: &str) -> Value {
    json!({
        "type": kind, "status": if status { "True" } else { "False" }, "reason": reason, "message": message,
        "lastTransitionTime": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
}

/// Kueue's admission of a one-pod Workload in ClusterQueue `cluster-builds`, flavor `default`.
fn admission() -> Value {
    json!({
        "clusterQueue": "cluster-builds",
        "podSetAssignments": [{"name": "main", "count": 1, "flavors": {"cpu": "default", "memory": "default"},
                               "resourceUsage": {"cpu": "1", "memory": "2Gi"}}],
    })
}

/// Writes the Workload's status, as Kueue does (the `status` subresource).
async fn workload_status(ns: &TestNamespace, name: &str, status: Value) {
    let workloads = ns.api("kueue.x-k8s.io/v1beta2", "Workload").await;
    workloads
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({ "status": status })))
        .await
        .unwrap_or_else(|e| panic!("Workload {name}'s status: {e}"));
}

/// The lines of `log` that are events of type `kind`.
fn events<'a>(log: &'a [String], kind: &str) -> Vec<&'a String> {
    log.iter().filter(|l| l.contains("builder_monitor_core::event") && l.contains(&format!("\"{kind}\""))).collect()
}

/// A rebuild in pool `q` (queue `builds`): the Job runs (admitted), Kueue evicts its Workload
/// (the pod was not ready in time) and suspends the Job: the real Job controller removes the pod
/// and the daemon shows the build `queued` again, not failed; re-admitted, the same Job runs to
/// the end — one Job, one action, one `build.succeeded`, no `build.failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_kueue_evicts_is_queued_again_and_built_once() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let host = registry.host.clone();
    let run = format!("{host}/demo/run:latest");
    pusher.push_index("demo/run", "latest", &[Image::new("amd64")], Format::Oci).await;
    pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run).image(), Format::Oci).await;
    pusher.push_image("apps/web", Some("latest"), &Image::new("amd64").salt("web"), Format::Oci).await;
    let ns = control_plane().namespace("kueue").await;
    let ws = Workspace::new();
    // Its pod runs until Kueue's admission says otherwise (below).
    std::fs::write(ws.path("hold.yaml"), format!("metadata:\n  annotations:\n    {RUN_FOR}: forever\n")).unwrap();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"200ms\"\njitter = \"0s\"\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n\
         [[images]]\nname = \"web\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/web:latest\"\npolicy = \"rebuild\"\n\
         source = {{ git = \"https://example.com/web.git\", revision = \"main\" }}\npod_template = \"hold.yaml\"\n"
    ));
    let config_arg = config.to_str().unwrap().to_string();
    let pinned = ws.run(&["run", "--once", "--config", &config_arg]);
    assert_eq!(pinned.code, Some(0), "{}", pinned.stderr);
    let text = std::fs::read_to_string(&config).unwrap()
        + &format!(
            "\n[runner]\ntype = \"kubernetes\"\nmax_concurrent = 2\nmax_attempts = 1\n\n\
             [[runner.pools]]\nname = \"q\"\nkubeconfig = \"{}\"\nnamespace = \"{}\"\nplatforms = [\"linux/amd64\"]\n\
             queue = \"builds\"\nresources = {{ requests = {{ cpu = \"1\", memory = \"2Gi\" }} }}\n",
            ns.kubeconfig.display(),
            ns.name
        );
    std::fs::write(&config, text).unwrap();

    let mut daemon = Daemon::start(&config);
    pusher
        .push_image(
            "demo/builder",
            Some("latest"),
            &BuilderSpec::jammy(&run).bump("paketo-buildpacks/java", "18.2.0").image(),
            Format::Oci,
        )
        .await;
    let created = daemon.wait_for("the Job", |v| v["message"] == "Job created");
    let key = created["name"].as_str().unwrap().to_string();
    let job = ns.wait_for("batch/v1", "Job", &key, |j| j["status"]["ready"] == 1).await;
    let uid = job["metadata"]["uid"].clone();

    // The Workload Kueue makes for the Job: the Job's pod template as the server keeps it (the
    // daemon's, defaulted), accepted by Kueue's schema with nothing unknown and no warning.
    let workload = format!("job-{key}");
    let object = json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {
            "name": workload, "namespace": ns.name,
            "labels": {"kueue.x-k8s.io/job-uid": uid},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": key, "uid": uid,
                                 "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {"queueName": "builds", "podSets": [{"name": "main", "count": 1, "template": job["spec"]["template"]}]},
    });
    let warnings = strict::create(&ns.api("kueue.x-k8s.io/v1beta2", "Workload").await, &object)
        .await
        .unwrap_or_else(|e| panic!("the Workload of the daemon's Job: {e}"));
    assert!(warnings.is_empty(), "{warnings:?}");
    let stored = ns.get("kueue.x-k8s.io/v1beta2", "Workload", &workload).await.unwrap();
    assert_eq!(
        stored["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["securityContext"],
        job["spec"]["template"]["spec"]["containers"][0]["securityContext"],
        "nothing pruned: {stored}"
    );
    let admitted = || {
        vec![
            condition("QuotaReserved", true, "QuotaReserved", "Quota reserved in ClusterQueue cluster-builds"),
            condition("Admitted", true, "Admitted", "The workload is admitted"),
        ]
    };
    workload_status(&ns, &workload, json!({"admission": admission(), "conditions": admitted()})).await;

    // WaitForPodsReady's eviction: Evicted (PodsReadyTimeout), quota released, the Job suspended.
    let mut evicted = vec![
        condition("QuotaReserved", false, "Pending", "Evicted by PodsReadyTimeout"),
        condition("Admitted", false, "NoReservation", "The workload has no reservation"),
        condition(
            "Evicted",
            true,
            "PodsReadyTimeout",
            &format!("Exceeded the PodsReady timeout {}/{workload}", ns.name),
        ),
        condition("Requeued", false, "PodsReadyTimeout", "Exceeded the PodsReady timeout"),
    ];
    let requeue_at =
        (chrono::Utc::now() + chrono::Duration::seconds(60)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let stats = json!({"evictions": [{"reason": "PodsReadyTimeout", "underlyingCause": "", "count": 1}]});
    workload_status(
        &ns,
        &workload,
        json!({"admission": null, "conditions": evicted, "requeueState": {"count": 1, "requeueAt": requeue_at},
               "schedulingStats": stats}),
    )
    .await;
    let jobs = ns.api("batch/v1", "Job").await;
    jobs.patch(&key, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"suspend": true}})))
        .await
        .expect("suspend the Job, as Kueue's Job reconciler does");
    let suspended = |j: &Value| {
        let conditions = j["status"]["conditions"].as_array().cloned().unwrap_or_default();
        conditions.iter().any(|c| c["type"] == "Suspended" && c["status"] == "True")
            && j["status"]["active"].as_i64().unwrap_or(0) == 0
    };
    let job = ns.wait_for("batch/v1", "Job", &key, suspended).await;
    let conditions = job["status"]["conditions"].as_array().cloned().unwrap_or_default();
    assert!(!conditions.iter().any(|c| c["type"] == "Failed" && c["status"] == "True"), "{}", job["status"]);
    // The pod removed by the suspension is no failure (its backoffLimit is 0: max_attempts 1).
    assert_eq!(job["status"]["failed"].as_i64().unwrap_or(0), 0, "{}", job["status"]);
    assert_eq!(job["spec"]["backoffLimit"], 0);
    daemon.wait_for("queued again", |v| v["message"] == "the Job waits in its Kueue queue" && v["action"] == key);
    let status = ws.run(&["status", "--json", "--config", &config_arg]);
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    let web = status["images"].as_array().unwrap().iter().find(|i| i["name"] == "web").unwrap();
    assert_eq!(web["last_action"]["state"], "queued", "{web:#}");
    assert_eq!(web["last_action"]["pool"], "q", "{web:#}");

    // Back off, requeued, admitted again: Kueue resumes the Job (its admission may change the pod
    // template's annotations while the Job is suspended: here, the pod ends).
    evicted[3] = condition("Requeued", true, "BackoffFinished", "The workload backoff was finished");
    workload_status(&ns, &workload, json!({"conditions": evicted})).await;
    let mut readmitted = admitted();
    readmitted.push(condition("Evicted", false, "QuotaReserved", "Previously: Exceeded the PodsReady timeout"));
    readmitted.push(condition("Requeued", true, "BackoffFinished", "The workload backoff was finished"));
    workload_status(&ns, &workload, json!({"admission": admission(), "conditions": readmitted})).await;
    let resume = json!({"spec": {"suspend": false, "template": {"metadata": {"annotations": {RUN_FOR: "0s"}}}}});
    jobs.patch(&key, &PatchParams::default(), &Patch::Merge(&resume)).await.expect("resume the Job, as Kueue does");
    daemon.wait_for("running again", |v| v["message"] == "Kueue admitted the Job; it runs" && v["action"] == key);
    daemon.wait_for("the outcome", |v| {
        v["target"] == "builder_monitor_core::event"
            && matches!(v["event_type"].as_str(), Some("build.succeeded" | "build.failed"))
    });
    let (exit, log) = daemon.terminate();
    assert!(exit.success());

    // Built once: one Job, one action, one success and no failure.
    assert_eq!(events(&log, "build.succeeded").len(), 1, "{log:#?}");
    assert!(events(&log, "build.failed").is_empty(), "{log:#?}");
    let ours = kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=builder-monitor");
    assert_eq!(jobs.list(&ours).await.unwrap().items.len(), 1);
    let job = ns.get("batch/v1", "Job", &key).await.unwrap();
    assert_eq!(job["status"]["succeeded"], 1, "{}", job["status"]);
    crate::real_jobs::no_pods_left(&ns, &job).await;
    let ledger = Ledger::open_read_only(&ws.path("state.db")).unwrap();
    let actions: Vec<_> = ledger.actions(10).await.unwrap().into_iter().filter(|a| a.image == "web").collect();
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!((actions[0].key.as_str(), actions[0].state), (key.as_str(), ActionState::Succeeded));
}
