//! Deploys over every workload kind on the real control plane (`support::control_plane`), health
//! read from the real controllers' status: a roll-out in waves over a Deployment (the canary), a
//! StatefulSet (`RollingUpdate`), a DaemonSet (on the node agent's node, so its health cannot hold
//! vacuously) and a CronJob, applied with the daemon's field manager; an undo after the canary's
//! new pods fail their image pulls, the tag put back and the later waves held; the forced rollback
//! of a StatefulSet whose pod is stuck on the undone revision; and a person's
//! change during the roll-out (another field manager sets the image), which wins: not undone, not
//! recorded as ours.

use crate::real_world::{RealWorld, containers, rolled_out, workload};
use crate::support;

use kube::api::{Patch, PatchParams};
use serde_json::json;

use builder_monitor::ledger::ActionState;
use support::control_plane::control_plane;
use support::daemon::Daemon;

/// The apps, in roll-out order (name, wave, the kind of workload it runs in, of its name).
const APPS: [(&str, u32, &str); 4] =
    [("canary", 0, "Deployment"), ("db", 1, "StatefulSet"), ("agent", 2, "DaemonSet"), ("report", 3, "CronJob")];

/// This file's world: [`APPS`], each in a workload of its kind (containers `app` and `sidecar`),
/// `extra` appended to the config.
async fn world(extra: &str) -> RealWorld {
    world_with_tagged(extra, &[]).await
}

/// As [`world`], the workloads of the apps in `tagged` naming their image by tag and
/// digest (`…/apps/NAME:latest@sha256:…`): pulls that fail by the prefix `…/apps/NAME@` fail
/// only for what the daemon writes, never for what an undo puts back.
async fn world_with_tagged(extra: &str, tagged: &[&str]) -> RealWorld {
    RealWorld::start("workloads", &APPS, extra, |kind, name, image| {
        let image = if tagged.contains(&name) {
            image.replacen(&format!("/apps/{name}@"), &format!("/apps/{name}:latest@"), 1)
        } else {
            image.to_string()
        };
        workload(kind, name, &image)
    })
    .await
}

/// The real controllers roll each workload out; the daemon applies only the `app` image (its
/// field manager owns it, the sidecar stays the creator's) and writes each wave only after the
/// one before is healthy on the controllers' status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roll_out_in_waves_over_every_workload_kind_on_the_real_controllers() {
    let w = world("").await;
    w.move_run_image().await;
    let out = w.cli(&["run", "--once"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for (name, _, kind) in APPS {
        let tag = w.tag(name).await;
        assert_ne!(tag, w.built(name), "{name}'s tag moved");
        assert_eq!(w.image(name, 0).await, w.reference(name, &tag), "{kind} {name} runs the new digest");
        assert_eq!(w.image(name, 1).await, "registry.example/proxy:1", "{kind} {name}'s sidecar is left alone");
        let o = w.object(name).await;
        assert!(rolled_out(kind, &o), "{kind} {name} rolled out by its controller: {}", o["status"]);
        let managers = o["metadata"]["managedFields"].as_array().unwrap();
        let ours = managers.iter().find(|m| m["manager"] == "builder-monitor").expect("the daemon's field manager");
        assert_eq!(ours["operation"], "Apply", "{ours}");
        let fields = ours["fieldsV1"].to_string();
        assert!(fields.contains(r#"k:{\"name\":\"app\"}"#) && fields.contains("f:image"), "{fields}");
        assert!(!fields.contains(r#"k:{\"name\":\"sidecar\"}"#), "the sidecar is not ours: {fields}");
    }
    let agent = w.object("agent").await;
    assert!(agent["status"]["desiredNumberScheduled"].as_i64() >= Some(1), "{}", agent["status"]);
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
    for (name, _, kind) in APPS {
        let shown = w.shown(name);
        assert_eq!(shown.len(), 1, "{shown:?}");
        assert_eq!((shown[0]["kind"].as_str(), shown[0]["state"].as_str()), (Some(kind), Some("healthy")), "{shown:?}");
    }
}

/// The canary's new pods never pull their image (the node agent reports `ErrImagePull`, then
/// `ImagePullBackOff`): the deploy fails on the pods (`fail_after` 1 s, well before
/// `deploy_timeout` or the progress deadline) and is undone: the Deployment and the tag back, its
/// old pods serving throughout, the StatefulSet, DaemonSet and CronJob never written, held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pull_failures_undo_the_canary_and_hold_every_later_kind() {
    let w = world("[rollout]\nfail_after = \"1s\"\ndeploy_timeout = \"10m\"\n").await;
    // Only new pods fail: the running ones keep running on the old digest.
    control_plane().fail_pulls(&format!("{}/apps/canary@", w.host)).await;
    w.move_run_image().await;
    let mut daemon = Daemon::start(&w.config);
    daemon.wait_for_event("deploy.started");
    let failed = daemon.wait_for_event("deploy.failed");
    daemon.wait_for_event("deploy.rolled_back");
    let (status, _) = daemon.terminate();
    assert!(status.success());
    assert_eq!(failed["action"]["image"], "canary", "{failed}");
    let detail = failed["action"]["detail"].as_str().unwrap();
    assert!(detail.contains("ErrImagePull") || detail.contains("ImagePullBackOff"), "{detail}");

    assert_eq!(w.image("canary", 0).await, w.reference("canary", &w.built("canary")), "the Deployment is put back");
    assert_eq!(w.tag("canary").await, w.built("canary"), "and its tag too");
    w.ns.wait_for("apps/v1", "Deployment", "canary", |o| rolled_out("Deployment", o)).await;
    for (name, _, kind) in &APPS[1..] {
        assert_eq!(w.image(name, 0).await, w.reference(name, &w.built(name)), "{kind} {name} was never deployed");
        assert_eq!(w.tag(name).await, w.built(name), "{name} was never rebased");
        let o = w.object(name).await;
        let ours = o["metadata"]["managedFields"].as_array().unwrap().iter().any(|m| m["manager"] == "builder-monitor");
        assert!(!ours, "the daemon never wrote {kind} {name}: {}", o["metadata"]["managedFields"]);
    }
    let actions = w.ledger().actions(100).await.unwrap();
    let held: Vec<&str> = actions.iter().filter(|a| a.state == ActionState::Held).map(|a| a.image.as_str()).collect();
    assert_eq!(held.len(), 3, "db, agent and report wait: {actions:?}");
    let canary = actions.iter().find(|a| a.image == "canary" && a.action == "deploy").unwrap();
    assert!(canary.holds && canary.state == ActionState::Failed, "{canary:?}");
    let shown = w.shown("canary");
    assert_eq!(shown[0]["state"], "undone", "{shown:?}");
    assert!(shown[0]["held"].is_string(), "{shown:?}");
}

/// While the canary's roll-out waits (its new pods cannot pull), a person sets another image with
/// their own field manager (`kubectl set image` does an Update as `kubectl-set`). Theirs rolls out
/// and wins: the daemon records an override, holds the image, never `deploy.succeeded`, does not
/// put its own digest (or the old one) back, and the image field is theirs on the server; the
/// later waves are not written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_image_set_during_the_roll_out_wins_on_the_real_server() {
    let w = world("[rollout]\nfail_after = \"10m\"\ndeploy_timeout = \"10m\"\n").await;
    control_plane().fail_pulls(&format!("{}/apps/canary@", w.host)).await;
    w.move_run_image().await;
    let mut daemon = Daemon::start(&w.config);
    daemon.wait_for_event("deploy.started");
    let hotfix = format!("{}/apps/canary:hotfix", w.host);
    let deployments = w.ns.api("apps/v1", "Deployment").await;
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": hotfix}]}}}});
    let by_person = PatchParams { field_manager: Some("kubectl-set".into()), ..PatchParams::default() };
    deployments.patch("canary", &by_person, &Patch::Strategic(&patch)).await.expect("the person's change");
    let overridden = daemon.wait_for_event("deploy.overridden");
    let (status, _) = daemon.terminate();
    assert!(status.success());

    assert_eq!(overridden["action"]["image"], "canary", "{overridden}");
    let detail = overridden["action"]["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("container app runs {hotfix}")), "{detail}");
    assert_eq!(w.image("canary", 0).await, hotfix, "the person's image stays");
    let o = w.ns.wait_for("apps/v1", "Deployment", "canary", |o| rolled_out("Deployment", o)).await;
    assert_eq!(containers("Deployment", &o)[0]["image"], json!(hotfix), "and is what rolled out");
    let managers = o["metadata"]["managedFields"].as_array().unwrap();
    let owner_of_image = |manager: &str| {
        managers.iter().filter(|m| m["manager"] == manager).any(|m| {
            let fields = m["fieldsV1"].to_string();
            fields.contains(r#"k:{\"name\":\"app\"}"#) && fields.contains("f:image")
        })
    };
    assert!(owner_of_image("kubectl-set"), "the person owns the image: {managers:?}");
    assert!(!owner_of_image("builder-monitor"), "the daemon no longer does: {managers:?}");

    let events = w.events().await;
    assert!(!events.iter().any(|(t, i)| t == "deploy.succeeded" && i == "canary"), "{events:?}");
    let deploy =
        w.ledger().actions(100).await.unwrap().into_iter().find(|a| a.image == "canary" && a.action == "deploy");
    let deploy = deploy.expect("the canary's deploy");
    assert!(deploy.state == ActionState::Failed && deploy.holds, "{deploy:?}");
    let shown = w.shown("canary");
    assert_eq!((shown[0]["state"].as_str(), shown[0]["healthy"].as_bool()), (Some("overridden"), Some(false)));
    for (name, _, kind) in &APPS[1..] {
        assert_eq!(w.image(name, 0).await, w.reference(name, &w.built(name)), "{kind} {name} was never deployed");
    }
}

/// The StatefulSet's new pods never pull their image. Its controller (`OrderedReady`) replaces
/// `db-1` first, and once the template is put back it does not replace a pod that is not Ready
/// until someone deletes it (the "forced rollback" of the Kubernetes docs): the undo deletes the
/// pod of the failed revision, the controller makes it again on the old one, and the StatefulSet is
/// back at 2 of 2 Ready on the old digest, the tag put back, the later waves held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulsets_pod_stuck_on_the_undone_revision_is_replaced_on_the_old_one() {
    let w = world_with_tagged("[rollout]\nfail_after = \"1s\"\ndeploy_timeout = \"10m\"\n", &["db"]).await;
    // What the daemon writes (`…/apps/db@sha256:…`) fails; the old `…/apps/db:latest@…` pulls.
    control_plane().fail_pulls(&format!("{}/apps/db@", w.host)).await;
    let before = w.object("db").await;
    let old_revision = before["status"]["currentRevision"].as_str().unwrap().to_string();
    w.move_run_image().await;
    let mut daemon = Daemon::start(&w.config);
    let failed = daemon.wait_for_event("deploy.failed");
    daemon.wait_for_event("deploy.rolled_back");
    let (status, _) = daemon.terminate();
    assert!(status.success());
    assert_eq!(failed["action"]["image"], "db", "{failed}");
    let detail = failed["action"]["detail"].as_str().unwrap();
    assert!(detail.contains("ErrImagePull") || detail.contains("ImagePullBackOff"), "{detail}");
    assert!(detail.contains("replaced db-1"), "the undo names the pod it deleted: {detail}");

    let old = format!("{}/apps/db:latest@{}", w.host, w.built("db"));
    let o = w.ns.wait_for("apps/v1", "StatefulSet", "db", |o| rolled_out("StatefulSet", o)).await;
    assert_eq!(containers("StatefulSet", &o)[0]["image"], json!(old), "the StatefulSet is put back");
    assert_eq!((o["status"]["readyReplicas"].as_i64(), o["status"]["replicas"].as_i64()), (Some(2), Some(2)));
    assert_eq!(o["status"]["updateRevision"], json!(old_revision), "on the revision it ran before: {}", o["status"]);
    for pod in ["db-0", "db-1"] {
        let p = w.ns.get("v1", "Pod", pod).await.unwrap_or_else(|| panic!("pod {pod}"));
        assert_eq!(p["metadata"]["labels"]["controller-revision-hash"], json!(old_revision), "{pod}: {p}");
        assert_eq!(p["spec"]["containers"][0]["image"], json!(old), "{pod} runs the old digest");
    }
    assert_eq!(w.tag("db").await, w.built("db"), "the tag is put back");
    let actions = w.ledger().actions(100).await.unwrap();
    let held: Vec<&str> = actions.iter().filter(|a| a.state == ActionState::Held).map(|a| a.image.as_str()).collect();
    assert_eq!(held.len(), 2, "agent and report wait: {actions:?}");
    assert_eq!(w.shown("db")[0]["state"], "undone");
}
