//! Deploys against the real control plane (`support::control_plane`: kube-apiserver, etcd and the
//! real workload controllers), health read from the real controllers' status: a roll-out in waves
//! over three Deployments, applied with the daemon's field manager, the canary healthy before
//! wave 1 is written; an undo after `ProgressDeadlineExceeded` (a 3 s deadline, the new pods'
//! image pulls failing); and what the hand-written double could not show, a roll-out that Pod
//! Security refuses (the namespace relabelled `restricted` after its workloads were created, so
//! the Deployment is accepted and the ReplicaSet's pod creates are refused) failing at once,
//! naming Pod Security and the refused pods' reason, instead of waiting out the progress
//! deadline. Each undo puts the workload and the tag back and holds the later waves.

use crate::real_world::{RealWorld, rolled_out as rolled_out_as, workload};
use crate::support;

use serde_json::{Value, json};

use builder_monitor::ledger::{ActionState, Ledger};
use support::control_plane::control_plane;
use support::daemon::Daemon;

/// The apps, in roll-out order: the canary in wave 0, then one app per wave; each runs in a
/// Deployment of its name.
const APPS: [(&str, u32, &str); 3] = [("canary", 0, "Deployment"), ("web", 1, "Deployment"), ("api", 2, "Deployment")];

/// This file's world: [`APPS`], each in a Deployment (two replicas, containers `app` and
/// `sidecar`, no security context), `extra` appended to the config.
async fn world(extra: &str) -> RealWorld {
    world_with_deadline(extra, None).await
}

/// [`world`], the Deployments' `progressDeadlineSeconds` set when given.
async fn world_with_deadline(extra: &str, progress_deadline: Option<u32>) -> RealWorld {
    RealWorld::start("deploy", &APPS, extra, |kind, name, image| {
        let mut object = workload(kind, name, image);
        if let Some(seconds) = progress_deadline {
            object["spec"]["progressDeadlineSeconds"] = json!(seconds);
        }
        object
    })
    .await
}

/// The controllers report the Deployment's current generation rolled out and available.
fn rolled_out(d: &Value) -> bool {
    rolled_out_as("Deployment", d)
}

/// The real controllers roll each Deployment out; the daemon applies only the `app` image (its
/// field manager owns it, the sidecar stays the creator's) and writes each wave only after the
/// one before is healthy on the controllers' status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_image_push_rolls_out_in_waves_on_the_real_controllers() {
    let w = world("").await;
    w.move_run_image().await;
    let out = w.cli(&["run", "--once"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for (name, _, _) in APPS {
        let tag = w.tag(name).await;
        assert_ne!(tag, w.built(name), "{name}'s tag moved");
        assert_eq!(w.image(name, 0).await, w.reference(name, &tag), "{name} runs the new digest");
        let d = w.ns.get("apps/v1", "Deployment", name).await.unwrap();
        assert!(rolled_out(&d), "{name} rolled out by the controller: {}", d["status"]);
        assert_eq!(d["spec"]["template"]["spec"]["containers"][1]["image"], "registry.example/proxy:1");
        let managers = d["metadata"]["managedFields"].as_array().unwrap();
        let ours = managers.iter().find(|m| m["manager"] == "builder-monitor").expect("the daemon's field manager");
        assert_eq!(ours["operation"], "Apply", "{ours}");
        let fields = ours["fieldsV1"].to_string();
        assert!(fields.contains(r#"k:{\"name\":\"app\"}"#) && fields.contains("f:image"), "{fields}");
        assert!(!fields.contains(r#"k:{\"name\":\"sidecar\"}"#), "the sidecar is not ours: {fields}");
    }
    // Each step after the one before: rebase, deploy written, deploy healthy, then the next app.
    let events = w.events().await;
    let mut last = 0;
    for (name, _, _) in APPS {
        for step in ["rebase.succeeded", "deploy.started", "deploy.succeeded"] {
            let at = events.iter().position(|(t, i)| t == step && i == name).unwrap_or_else(|| panic!("{step} {name}"));
            assert!(at >= last, "{step} of {name} came before the step before it: {events:?}");
            last = at;
        }
    }
    let out = w.cli(&["status", "--json"]);
    let status: Value = serde_json::from_str(&out.stdout).unwrap();
    for (name, _, _) in APPS {
        let entry = status["deploys"].as_array().unwrap().iter().find(|d| d["image"] == name).unwrap();
        assert_eq!(entry["state"], "healthy", "{entry}");
    }
}

/// The canary's new pods never pull their image and the Deployment's progress deadline is 3 s:
/// the real controller reports `ProgressDeadlineExceeded` (well before `fail_after`, 10 m, would
/// judge the pods), and the deploy is undone: the Deployment and the tag back, web and api held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roll_out_past_its_progress_deadline_is_undone() {
    let w = world_with_deadline("[rollout]\nfail_after = \"10m\"\ndeploy_timeout = \"10m\"\n", Some(3)).await;
    let before: Vec<String> = futures::future::join_all(APPS.iter().map(|(name, _, _)| w.image(name, 0))).await;
    // Only new pods fail: the running ones keep running on the old digest.
    control_plane().fail_pulls(&format!("{}/apps/canary@", w.host)).await;
    w.move_run_image().await;
    let mut daemon = Daemon::start(&w.config);
    daemon.wait_for_event("deploy.started");
    let failed = daemon.wait_for_event("deploy.failed");
    daemon.wait_for_event("deploy.rolled_back");
    let (status, _) = daemon.terminate();
    assert!(status.success());
    let detail = failed["action"]["detail"].as_str().unwrap();
    assert!(detail.contains("ProgressDeadlineExceeded"), "{detail}");
    assert_eq!(w.image("canary", 0).await, before[0], "the canary's Deployment is back to what it ran");
    assert_eq!(w.tag("canary").await, w.built("canary"), "and its tag too");
    for (i, name) in ["web", "api"].iter().enumerate() {
        assert_eq!(w.image(name, 0).await, before[i + 1], "{name} was never deployed");
        assert_eq!(w.tag(name).await, w.built(name), "{name} was never rebased");
    }
    let actions = Ledger::open_read_only(&w.ws.path("state.db")).unwrap().actions(100).await.unwrap();
    assert_eq!(actions.iter().filter(|a| a.state == ActionState::Held).count(), 2, "{actions:?}");
}

/// Issue 61 item 8, on the real server: the namespace enforces Pod Security `restricted` from
/// after the Deployments were created, so the canary's write is accepted and its new pods are
/// refused (the Deployment gets `ReplicaFailure=True, FailedCreate` while `Progressing` stays
/// true for the 600 s progress deadline, and `deploy_timeout` is 10 m). The deploy fails at once
/// (the daemon is given `PATIENCE`, 30 s) naming Pod Security and what the pods lack; the undo
/// puts the Deployment and the tag back, and web and api wait, held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roll_out_refused_by_pod_security_fails_at_once_and_is_undone() {
    let w = world("[rollout]\nfail_after = \"1s\"\ndeploy_timeout = \"10m\"\n").await;
    let before: Vec<String> = futures::future::join_all(APPS.iter().map(|(name, _, _)| w.image(name, 0))).await;
    w.ns.enforce_restricted().await;
    w.move_run_image().await;
    let mut daemon = Daemon::start(&w.config);
    daemon.wait_for_event("deploy.started");
    let failed = daemon.wait_for_event("deploy.failed");
    daemon.wait_for_event("deploy.rolled_back");
    let (status, _) = daemon.terminate();
    assert!(status.success());
    assert_eq!(failed["action"]["image"], "canary", "{failed}");
    let detail = failed["action"]["detail"].as_str().unwrap();
    assert!(detail.contains("Pod Security"), "the failure names Pod Security: {detail}");
    assert!(detail.contains("FailedCreate"), "and the condition's reason: {detail}");
    assert!(detail.contains("allowPrivilegeEscalation"), "and what the refused pods lack: {detail}");

    assert_eq!(w.image("canary", 0).await, before[0], "the canary's Deployment is back to what it ran");
    assert_eq!(w.tag("canary").await, w.built("canary"), "and its tag too");
    w.ns.wait_for("apps/v1", "Deployment", "canary", rolled_out).await;
    for (i, name) in ["web", "api"].iter().enumerate() {
        assert_eq!(w.image(name, 0).await, before[i + 1], "{name} was never deployed");
        assert_eq!(w.tag(name).await, w.built(name), "{name} was never rebased");
        assert_eq!(before[i + 1], w.reference(name, &w.built(name)));
    }
    let ledger = Ledger::open_read_only(&w.ws.path("state.db")).unwrap();
    let actions = ledger.actions(100).await.unwrap();
    let held: Vec<_> = actions.iter().filter(|a| a.state == ActionState::Held).map(|a| a.image.as_str()).collect();
    assert_eq!(held.len(), 2, "web and api wait: {actions:?}");
    let canary = actions.iter().find(|a| a.image == "canary" && a.action == "deploy").unwrap();
    assert!(canary.holds && canary.state == ActionState::Failed, "{canary:?}");
}
