//! How deploys end when something goes wrong in the middle, through the built binary against the
//! real registry and the Kubernetes API double: an undo leaves what a person changed during the
//! roll-out and puts back the rest; a deploy that runs out of attempts (a namespace answering
//! 403) is undone like any failure; a Deployment deleted during the deploy is not created again
//! by the undo; a person's change during the roll-out is an override, never our success; and a
//! daemon that dies between a write and its record announces `deploy.started` exactly once.

mod support;

use std::path::PathBuf;

use serde_json::Value;

use builder_monitor::ledger::{ActionRecord, ActionState, Ledger};
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor_core::reference::ImageRef;
use support::app::{self, App, RunImage};
use support::cnb::BuilderSpec;
use support::daemon::{Daemon, Output, Workspace};
use support::images::{Format, Pusher};
use support::kube::KubeDouble;
use support::kube::controllers::Failure;
use support::registry::TestRegistry;

/// An app: its name, wave, and the Deployments (namespace, name) it is deployed to.
type AppSpec<'a> = (&'a str, u32, &'a [(&'a str, &'a str)]);

struct World {
    _registry: TestRegistry,
    kube: KubeDouble,
    pusher: Pusher,
    ws: Workspace,
    config: PathBuf,
    host: String,
    /// Each app's digest as built, on run image v1, by name.
    built: Vec<(String, String)>,
}

impl World {
    /// Run image v1, a builder naming it, the apps built on it, each running in its Deployments
    /// (container `app`, and a `sidecar` no deploy writes); `extra` is appended to the config.
    /// One `run --once` pins everything.
    async fn new(apps: &[AppSpec<'_>], extra: &str) -> Self {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let host = registry.host.clone();
        let run_tag = format!("{host}/demo/run:latest");
        let run_v1 = RunImage::jammy("1", 3);
        let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
        pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
        let kube = KubeDouble::start().await;
        let ws = Workspace::new();
        let mut images = String::new();
        let mut built = Vec::new();
        for (name, wave, workloads) in apps {
            let app = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest)).label("app", name);
            let digest =
                app::push_app(&pusher, &format!("apps/{name}"), Some("latest"), &app, Format::Oci).await.digest;
            let running = format!("{host}/apps/{name}@{digest}");
            let mut deploy = Vec::new();
            for (namespace, workload) in *workloads {
                kube.create_workload(
                    "Deployment",
                    namespace,
                    workload,
                    &[("app", running.as_str()), ("sidecar", "registry.example/proxy:1")],
                    2,
                )
                .await;
                deploy.push(format!(
                    "{{ kind = \"Deployment\", namespace = \"{namespace}\", name = \"{workload}\", container = \"app\" }}"
                ));
            }
            built.push((name.to_string(), digest));
            images += &format!(
                "[[images]]\nname = \"{name}\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/{name}:latest\"\nwave = {wave}\n\
                 deploy = [{}]\n\n",
                deploy.join(", ")
            );
        }
        let kubeconfig = kube.kubeconfig(ws.dir.path());
        let config = ws.config(&format!(
            "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
             [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n{images}\
             [runner]\ntype = \"none\"\nrebase = \"registry\"\nmax_attempts = 1\n\n\
             [kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"shop\"\n\n{extra}",
            kubeconfig.display()
        ));
        let world = World { _registry: registry, kube, pusher, ws, config, host, built };
        let first = world.cli(&["run", "--once"]);
        assert_eq!(first.code, Some(0), "{}", first.stderr);
        world
    }

    fn cli(&self, args: &[&str]) -> Output {
        let config = self.config.to_str().unwrap().to_string();
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--config", &config]);
        self.ws.run(&all)
    }

    /// Pushes run image v2: each app's tag moves by a registry rebase, then its deploys follow.
    async fn move_run_image(&self) {
        app::push_run(&self.pusher, "demo/run", Some("latest"), &RunImage::jammy("2", 4), Format::Oci).await;
    }

    fn built(&self, app: &str) -> String {
        self.built.iter().find(|(n, _)| n == app).map(|(_, d)| d.clone()).unwrap()
    }

    async fn tag(&self, app: &str) -> String {
        builder_monitor::install_crypto_provider();
        let registry = Registry::new([], Metrics::new());
        let tag = ImageRef::parse(&format!("{}/apps/{app}:latest", self.host)).unwrap();
        registry.head_manifest(&tag).await.unwrap().digest
    }

    /// The image of container `app` of Deployment `namespace/name`, if it exists.
    fn running(&self, namespace: &str, name: &str) -> Option<String> {
        let d = self.kube.workload("Deployment", namespace, name)?;
        let containers = d["spec"]["template"]["spec"]["containers"].as_array().unwrap().clone();
        let app = containers.iter().find(|c| c["name"] == "app").unwrap();
        Some(app["image"].as_str().unwrap().to_string())
    }

    fn reference(&self, app: &str) -> String {
        format!("{}/apps/{app}@{}", self.host, self.built(app))
    }

    fn ledger(&self) -> Ledger {
        Ledger::open_read_only(&self.ws.path("state.db")).unwrap()
    }

    /// Every event recorded, in order: (type, image, the whole event).
    async fn events(&self) -> Vec<(String, String, Value)> {
        let events = self.ledger().events_after(0, 1000).await.unwrap();
        events
            .into_iter()
            .map(|e| {
                let v = serde_json::to_value(&e.event).unwrap();
                let image = v["action"]["image"].as_str().unwrap_or_default().to_string();
                (e.event.event_type.to_string(), image, v)
            })
            .collect()
    }

    async fn count(&self, event_type: &str, image: &str) -> usize {
        self.events().await.iter().filter(|(t, i, _)| t == event_type && i == image).count()
    }

    async fn deploy_of(&self, image: &str) -> ActionRecord {
        let actions = self.ledger().actions(100).await.unwrap();
        actions.into_iter().find(|a| a.image == image && a.action == "deploy").expect("a deploy of the image")
    }

    /// `status --json`'s deploy entries of an image.
    fn shown(&self, image: &str) -> Vec<Value> {
        let out = self.cli(&["status", "--json"]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let status: Value = serde_json::from_str(&out.stdout).unwrap();
        status["deploys"].as_array().unwrap().iter().filter(|d| d["image"] == image).cloned().collect()
    }
}

/// The item 2: a person sets `:hotfix` on one Deployment while the deploy waits for the
/// other, which then fails. The undo reads both: the person's container stays as they set it
/// (the image held, `deploy.overridden` naming it), the other is put back, and so is the tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undo_leaves_a_persons_change_and_puts_back_only_what_still_runs_ours() {
    let w = World::new(
        &[("canary", 0, &[("shop", "one"), ("shop", "two")])],
        "[rollout]\nfail_after = \"1s\"\ndeploy_timeout = \"2m\"\n",
    )
    .await;
    let before = w.reference("canary");
    w.kube.hold_rollout("Deployment", "shop", "two");
    w.move_run_image().await;
    let mut daemon = Daemon::start(&w.config);
    daemon.wait_for_event("deploy.started");
    let written = w.running("shop", "two").unwrap();
    assert_ne!(written, before);
    w.kube.wait_until("one rolled out", |k| k.rollout_done("Deployment", "shop", "one").then_some(())).await;
    let hotfix = format!("{}/apps/canary:hotfix", w.host);
    w.kube.set_image_as("kubectl-set", "Deployment", "shop", "one", "app", &hotfix);
    w.kube.fail_image(&written, Failure::ImagePullBackOff);
    w.kube.release_rollout("Deployment", "shop", "two");
    let failed = daemon.wait_for_event("deploy.failed");
    let overridden = daemon.wait_for_event("deploy.overridden");
    let (status, _) = daemon.terminate();
    assert!(status.success());

    assert_eq!(w.running("shop", "one").unwrap(), hotfix, "the person's image stays");
    assert_eq!(w.running("shop", "two").unwrap(), before, "ours is put back");
    assert_eq!(w.tag("canary").await, w.built("canary"), "and the tag too");
    let said = format!("container app runs {hotfix}");
    for detail in [&failed["action"]["detail"], &overridden["action"]["detail"]] {
        assert!(detail.as_str().unwrap().contains(&said), "{detail}");
    }
    let deploy = w.deploy_of("canary").await;
    assert!(deploy.state == ActionState::Failed && deploy.holds, "{deploy:?}");
    let shown = w.shown("canary");
    let one = shown.iter().find(|d| d["name"] == "one").unwrap();
    assert_eq!(one["state"], "overridden", "{one}");
    assert!(one["held"].as_str().is_some_and(|h| h.contains(&said)), "{one}");
    assert_eq!(shown.iter().find(|d| d["name"] == "two").unwrap()["state"], "undone");
}

/// The item 3: a Role taken away in one of two namespaces (403 on its writes) ends the
/// deploy after its attempts; what it had written is put back, the tag too, and the image held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_that_runs_out_of_attempts_is_undone_and_holds_its_image() {
    let w = World::new(&[("canary", 0, &[("shop", "one"), ("blocked", "two")])], "").await;
    let before = w.reference("canary");
    w.kube.forbid("patch", "blocked");
    w.move_run_image().await;
    let out = w.cli(&["run", "--once"]);
    assert_ne!(w.tag("canary").await, "", "{}", out.stderr);

    assert_eq!(w.running("shop", "one").unwrap(), before, "the workload it wrote is put back");
    assert_eq!(w.running("blocked", "two").unwrap(), before);
    assert_eq!(w.tag("canary").await, w.built("canary"), "the tag goes back");
    let deploy = w.deploy_of("canary").await;
    assert!(deploy.state == ActionState::Failed && deploy.holds, "{deploy:?}");
    let detail = deploy.detail.clone().unwrap_or_default();
    assert!(detail.contains("forbidden") && detail.contains("put back: Deployment shop/one"), "{detail}");
    assert_eq!(w.count("deploy.failed", "canary").await, 1);
    assert_eq!(w.count("deploy.rolled_back", "canary").await, 1);
    let shown = w.shown("canary");
    assert!(shown.iter().all(|d| d["held"].is_string()), "{shown:?}");
    assert!(shown.iter().all(|d| d["state"] == "undone"), "{shown:?}");
}

/// The item 3: a Deployment deleted while the deploy waits for it is not created again
/// by the undo; the tag goes back and the image is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undo_does_not_create_again_a_deployment_deleted_during_the_deploy() {
    let w = World::new(&[("canary", 0, &[("shop", "one")])], "").await;
    w.kube.hold_rollout("Deployment", "shop", "one");
    w.move_run_image().await;
    let mut daemon = Daemon::start(&w.config);
    daemon.wait_for_event("deploy.started");
    assert!(w.kube.delete_workload("Deployment", "shop", "one"));
    let failed = daemon.wait_for_event("deploy.failed");
    let (status, _) = daemon.terminate();
    assert!(status.success());

    assert_eq!(w.running("shop", "one"), None, "not created again: {failed}");
    assert_eq!(w.tag("canary").await, w.built("canary"), "the tag goes back");
    let detail = failed["action"]["detail"].as_str().unwrap();
    assert!(detail.contains("not created again: Deployment shop/one"), "{detail}");
    let deploy = w.deploy_of("canary").await;
    assert!(deploy.state == ActionState::Failed && deploy.holds, "{deploy:?}");
}

/// The item 4: a person's image rolled out during our roll-out is healthy, but not ours:
/// an override, held, never `deploy.succeeded`; the later wave waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_change_during_the_roll_out_is_an_override_not_our_success() {
    let w = World::new(&[("canary", 0, &[("shop", "one")]), ("web", 1, &[("shop", "web")])], "").await;
    w.kube.hold_rollout("Deployment", "shop", "one");
    w.move_run_image().await;
    let mut daemon = Daemon::start(&w.config);
    daemon.wait_for_event("deploy.started");
    let hotfix = format!("{}/apps/canary:hotfix", w.host);
    w.kube.set_image_as("kubectl-set", "Deployment", "shop", "one", "app", &hotfix);
    w.kube.release_rollout("Deployment", "shop", "one");
    let overridden = daemon.wait_for_event("deploy.overridden");
    let (status, _) = daemon.terminate();
    assert!(status.success());

    assert_eq!(overridden["action"]["image"], "canary");
    let detail = overridden["action"]["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("container app runs {hotfix}")), "{detail}");
    assert_eq!(w.running("shop", "one").unwrap(), hotfix, "the person's image stays");
    assert_eq!(w.count("deploy.succeeded", "canary").await, 0);
    let deploy = w.deploy_of("canary").await;
    assert!(deploy.state == ActionState::Failed && deploy.holds, "{deploy:?}");
    let shown = w.shown("canary");
    assert_eq!((shown[0]["state"].as_str(), shown[0]["healthy"].as_bool()), (Some("overridden"), Some(false)));
    assert!(shown[0]["held"].is_string(), "{shown:?}");
    assert_eq!(w.running("shop", "web").unwrap(), w.reference("web"), "the later wave is not deployed");
}

/// The item 10a: the daemon dies after a write was taken but before it was recorded (its
/// answer lost); the restarted daemon finds the write landed and announces `deploy.started`
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_started_is_recorded_once_when_the_daemon_dies_between_a_write_and_its_record() {
    let w = World::new(&[("canary", 0, &[("shop", "one")])], "").await;
    let before = w.reference("canary");
    w.kube.lose_next_answer("Deployment", "shop", "one");
    w.move_run_image().await;
    let daemon = Daemon::start(&w.config);
    w.kube
        .wait_until("the write taken", |k| {
            let d = k.workload("Deployment", "shop", "one")?;
            (d["spec"]["template"]["spec"]["containers"][0]["image"] != before.as_str()).then_some(())
        })
        .await;
    daemon.kill();
    let mut daemon = Daemon::start(&w.config);
    daemon.wait_for("the deploy", |v| v["message"] == "action succeeded" && v["kind"] == "deploy");
    let _ = daemon.terminate();
    assert_eq!(w.count("deploy.started", "canary").await, 1, "written once, announced once");
    assert_eq!(w.count("deploy.succeeded", "canary").await, 1);
}
