//! Deploys against the real control plane (`support::control_plane`: kube-apiserver, etcd and the
//! real workload controllers): what the hand-written double could not show. A roll-out that Pod
//! Security refuses (the namespace relabelled `restricted` after its workloads were created, so
//! the Deployment is accepted and the ReplicaSet's pod creates are refused) fails at once, naming
//! Pod Security and the refused pods' reason, instead of waiting out the progress deadline; it is
//! undone (workload and tag back) and holds the later waves.

use crate::support;

use std::path::PathBuf;

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

/// The apps, in roll-out order: the canary in wave 0, then one app per wave; each runs in a
/// Deployment of its name.
const APPS: [(&str, u32); 3] = [("canary", 0), ("web", 1), ("api", 2)];

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
    /// Run image v1, a builder naming it, [`APPS`] built on it, each running in a Deployment (two
    /// replicas, containers `app` and `sidecar`) of a new namespace, rolled out by the real
    /// controllers; `extra` is appended to the config. One `run --once` pins everything.
    async fn new(extra: &str) -> Self {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let host = registry.host.clone();
        let run_tag = format!("{host}/demo/run:latest");
        let run_v1 = RunImage::jammy("1", 3);
        let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
        pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
        let ns = control_plane().namespace("deploy").await;
        let ws = Workspace::new();
        let mut images = String::new();
        let mut built = Vec::new();
        for (name, wave) in APPS {
            let app = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest)).label("app", name);
            let digest =
                app::push_app(&pusher, &format!("apps/{name}"), Some("latest"), &app, Format::Oci).await.digest;
            ns.create(deployment(name, &format!("{host}/apps/{name}@{digest}"))).await;
            built.push((name.to_string(), digest));
            images += &format!(
                "[[images]]\nname = \"{name}\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/{name}:latest\"\n\
                 wave = {wave}\ndeploy = [{{ kind = \"Deployment\", namespace = \"{}\", name = \"{name}\" }}]\n\n",
                ns.name
            );
        }
        for (name, _) in APPS {
            ns.wait_for("apps/v1", "Deployment", name, rolled_out).await;
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
        let first = world.ws.run(&["run", "--once", "--config", world.config.to_str().unwrap()]);
        assert_eq!(first.code, Some(0), "{}", first.stderr);
        world
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

    /// The image of container `app` of Deployment NAME, as the server holds it.
    async fn running(&self, name: &str) -> String {
        let d = self.ns.get("apps/v1", "Deployment", name).await.expect("the Deployment");
        d["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap().to_string()
    }
}

/// A Deployment as a person would write it: no security context (Pod Security `baseline` admits
/// its pods, `restricted` refuses them).
fn deployment(name: &str, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [
                    {"name": "app", "image": image},
                    {"name": "sidecar", "image": "registry.example/proxy:1"},
                ]},
            },
        },
    })
}

/// The controllers report the Deployment's current generation rolled out and available.
fn rolled_out(d: &Value) -> bool {
    let status = &d["status"];
    status["observedGeneration"] == d["metadata"]["generation"]
        && status["updatedReplicas"] == d["spec"]["replicas"]
        && status["availableReplicas"] == d["spec"]["replicas"]
        && status["replicas"] == d["spec"]["replicas"]
}

/// Issue 61 item 8, on the real server: the namespace enforces Pod Security `restricted` from
/// after the Deployments were created, so the canary's write is accepted and its new pods are
/// refused (the Deployment gets `ReplicaFailure=True, FailedCreate` while `Progressing` stays
/// true for the 600 s progress deadline, and `deploy_timeout` is 10 m). The deploy fails at once
/// (the daemon is given `PATIENCE`, 30 s) naming Pod Security and what the pods lack; the undo
/// puts the Deployment and the tag back, and web and api wait, held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roll_out_refused_by_pod_security_fails_at_once_and_is_undone() {
    let w = World::new("[rollout]\nfail_after = \"1s\"\ndeploy_timeout = \"10m\"\n").await;
    let before: Vec<String> = futures::future::join_all(APPS.iter().map(|(name, _)| w.running(name))).await;
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

    assert_eq!(w.running("canary").await, before[0], "the canary's Deployment is back to what it ran");
    assert_eq!(w.tag("canary").await, w.built("canary"), "and its tag too");
    w.ns.wait_for("apps/v1", "Deployment", "canary", rolled_out).await;
    for (i, name) in ["web", "api"].iter().enumerate() {
        assert_eq!(w.running(name).await, before[i + 1], "{name} was never deployed");
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
