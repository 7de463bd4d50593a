//! Deploys over every workload kind on the real control plane (`support::control_plane`), health
//! read from the real controllers' status: a roll-out in waves over a Deployment (the canary), a
//! StatefulSet (`RollingUpdate`), a DaemonSet (on the node agent's node, so its health cannot hold
//! vacuously) and a CronJob, applied with the daemon's field manager; an undo after the canary's
//! new pods fail their image pulls, the tag put back and the later waves held; the forced rollback
//! of a StatefulSet whose pod is stuck on the undone revision; and a person's
//! change during the roll-out (another field manager sets the image), which wins: not undone, not
//! recorded as ours.

use crate::support;

use std::path::PathBuf;

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use builder_monitor::ledger::{ActionState, Ledger};
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor_core::reference::ImageRef;
use support::app::{self, App, RunImage};
use support::cnb::BuilderSpec;
use support::control_plane::{TestNamespace, control_plane};
use support::daemon::{Daemon, Workspace};
use support::images::{Format, Pusher};
use support::registry::TestRegistry;

/// The apps, in roll-out order (name, wave, the kind of workload it runs in, of its name).
const APPS: [(&str, u32, &str); 4] =
    [("canary", 0, "Deployment"), ("db", 1, "StatefulSet"), ("agent", 2, "DaemonSet"), ("report", 3, "CronJob")];

struct World {
    _registry: TestRegistry,
    ns: TestNamespace,
    pusher: Pusher,
    ws: Workspace,
    config: PathBuf,
    host: String,
    /// Each app's digest as built, on run image v1, by name.
    built: Vec<(String, String)>,
}

impl World {
    /// Run image v1, a builder naming it, [`APPS`] built on it, each running in a workload of its
    /// kind (containers `app` and `sidecar`) in a new namespace, rolled out by the real
    /// controllers; `extra` is appended to the config. One `run --once` pins everything.
    async fn new(extra: &str) -> Self {
        Self::with_tagged(extra, &[]).await
    }

    /// As [`World::new`], the workloads of the apps in `tagged` naming their image by tag and
    /// digest (`…/apps/NAME:latest@sha256:…`): pulls that fail by the prefix `…/apps/NAME@` fail
    /// only for what the daemon writes, never for what an undo puts back.
    async fn with_tagged(extra: &str, tagged: &[&str]) -> Self {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let host = registry.host.clone();
        let run_tag = format!("{host}/demo/run:latest");
        let run_v1 = RunImage::jammy("1", 3);
        let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
        pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
        let ns = control_plane().namespace("workloads").await;
        let ws = Workspace::new();
        let mut images = String::new();
        let mut built = Vec::new();
        for (name, wave, kind) in APPS {
            let app = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest)).label("app", name);
            let digest =
                app::push_app(&pusher, &format!("apps/{name}"), Some("latest"), &app, Format::Oci).await.digest;
            let tag = if tagged.contains(&name) { ":latest" } else { "" };
            ns.create(workload(kind, name, &format!("{host}/apps/{name}{tag}@{digest}"))).await;
            built.push((name.to_string(), digest));
            images += &format!(
                "[[images]]\nname = \"{name}\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/{name}:latest\"\n\
                 wave = {wave}\ndeploy = [{{ kind = \"{kind}\", namespace = \"{}\", name = \"{name}\" }}]\n\n",
                ns.name
            );
        }
        for (name, _, kind) in APPS {
            ns.wait_for(api_version(kind), kind, name, |o| rolled_out(kind, o)).await;
        }
        let config = ws.config(&format!(
            "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
             [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n{images}\
             [runner]\ntype = \"none\"\nrebase = \"registry\"\nmax_attempts = 1\n\n\
             [kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"{}\"\n\n{extra}",
            ns.kubeconfig.display(),
            ns.name
        ));
        let world = World { _registry: registry, ns, pusher, ws, config, host, built };
        let first = world.cli(&["run", "--once"]);
        assert_eq!(first.code, Some(0), "{}", first.stderr);
        world
    }

    fn cli(&self, args: &[&str]) -> support::daemon::Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--config", self.config.to_str().unwrap()]);
        self.ws.run(&all)
    }

    fn ledger(&self) -> Ledger {
        Ledger::open_read_only(&self.ws.path("state.db")).unwrap()
    }

    /// Every event recorded, in order: (type, image).
    async fn events(&self) -> Vec<(String, String)> {
        let events = self.ledger().events_after(0, 1000).await.unwrap();
        events
            .into_iter()
            .map(|e| {
                let v = serde_json::to_value(&e.event).unwrap();
                (e.event.event_type.to_string(), v["action"]["image"].as_str().unwrap_or_default().to_string())
            })
            .collect()
    }

    /// `status --json`'s deploy entries of `image`.
    fn shown(&self, image: &str) -> Vec<Value> {
        let out = self.cli(&["status", "--json"]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let status: Value = serde_json::from_str(&out.stdout).unwrap();
        status["deploys"].as_array().unwrap().iter().filter(|d| d["image"] == image).cloned().collect()
    }

    async fn move_run_image(&self) {
        app::push_run(&self.pusher, "demo/run", Some("latest"), &RunImage::jammy("2", 4), Format::Oci).await;
    }

    fn built(&self, app: &str) -> String {
        self.built.iter().find(|(n, _)| n == app).map(|(_, d)| d.clone()).unwrap()
    }

    fn reference(&self, app: &str, digest: &str) -> String {
        format!("{}/apps/{app}@{digest}", self.host)
    }

    async fn tag(&self, app: &str) -> String {
        builder_monitor::install_crypto_provider();
        let registry = Registry::new([], Metrics::new());
        let tag = ImageRef::parse(&format!("{}/apps/{app}:latest", self.host)).unwrap();
        registry.head_manifest(&tag).await.unwrap().digest
    }

    /// The workload of app NAME as the server holds it.
    async fn object(&self, name: &str) -> Value {
        let kind = kind_of(name);
        self.ns.get(api_version(kind), kind, name).await.unwrap_or_else(|| panic!("the {kind} {name}"))
    }

    /// The image of container `CONTAINER` of app NAME's workload, as the server holds it.
    async fn image(&self, name: &str, container: usize) -> String {
        let object = self.object(name).await;
        containers(kind_of(name), &object)[container]["image"].as_str().unwrap().to_string()
    }
}

fn kind_of(name: &str) -> &'static str {
    APPS.iter().find(|(n, _, _)| *n == name).map(|(_, _, k)| *k).unwrap()
}

fn api_version(kind: &str) -> &'static str {
    if kind == "CronJob" { "batch/v1" } else { "apps/v1" }
}

fn containers<'a>(kind: &str, object: &'a Value) -> &'a Vec<Value> {
    let pointer = if kind == "CronJob" {
        "/spec/jobTemplate/spec/template/spec/containers"
    } else {
        "/spec/template/spec/containers"
    };
    object.pointer(pointer).and_then(Value::as_array).expect("containers")
}

/// A workload of `kind` as a person would write it: two containers, no security context.
fn workload(kind: &str, name: &str, image: &str) -> Value {
    let pod = json!({"containers": [
        {"name": "app", "image": image},
        {"name": "sidecar", "image": "registry.example/proxy:1"},
    ]});
    let template = json!({"metadata": {"labels": {"app": name}}, "spec": pod});
    let selector = json!({"matchLabels": {"app": name}});
    let spec = match kind {
        "Deployment" => json!({"replicas": 2, "selector": selector, "template": template}),
        "StatefulSet" => json!({
            "replicas": 2, "serviceName": name, "selector": selector, "template": template,
            "updateStrategy": {"type": "RollingUpdate"},
        }),
        "DaemonSet" => json!({"selector": selector, "template": template, "updateStrategy": {"type": "RollingUpdate"}}),
        "CronJob" => {
            let mut template = template;
            template["spec"]["restartPolicy"] = json!("Never");
            // Suspended, at midnight on New Year's Day: its Jobs are not this test's.
            json!({"schedule": "0 0 1 1 *", "suspend": true, "jobTemplate": {"spec": {"template": template}}})
        }
        other => panic!("no workload kind {other}"),
    };
    json!({"apiVersion": api_version(kind), "kind": kind, "metadata": {"name": name}, "spec": spec})
}

/// The controllers report the workload's current generation rolled out and available (a
/// DaemonSet on at least one node); a CronJob has nothing to roll out.
fn rolled_out(kind: &str, o: &Value) -> bool {
    let status = &o["status"];
    let current = status["observedGeneration"] == o["metadata"]["generation"];
    match kind {
        "Deployment" => {
            current
                && status["updatedReplicas"] == o["spec"]["replicas"]
                && status["availableReplicas"] == o["spec"]["replicas"]
                && status["replicas"] == o["spec"]["replicas"]
        }
        "StatefulSet" => {
            current
                && status["readyReplicas"] == o["spec"]["replicas"]
                && status["updatedReplicas"] == o["spec"]["replicas"]
                && status["currentRevision"] == status["updateRevision"]
        }
        "DaemonSet" => {
            let desired = status["desiredNumberScheduled"].as_i64().unwrap_or(0);
            current
                && desired >= 1
                && status["updatedNumberScheduled"].as_i64() == Some(desired)
                && status["numberAvailable"].as_i64() == Some(desired)
        }
        _ => true,
    }
}

/// The real controllers roll each workload out; the daemon applies only the `app` image (its
/// field manager owns it, the sidecar stays the creator's) and writes each wave only after the
/// one before is healthy on the controllers' status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roll_out_in_waves_over_every_workload_kind_on_the_real_controllers() {
    let w = World::new("").await;
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
    let w = World::new("[rollout]\nfail_after = \"1s\"\ndeploy_timeout = \"10m\"\n").await;
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
    let w = World::new("[rollout]\nfail_after = \"10m\"\ndeploy_timeout = \"10m\"\n").await;
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
    let w = World::with_tagged("[rollout]\nfail_after = \"1s\"\ndeploy_timeout = \"10m\"\n", &["db"]).await;
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
