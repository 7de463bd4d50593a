//! Deploys end to end: a run image push against the real registry moves three apps' tags by
//! registry rebases and then their Deployments on the Kubernetes API double (whose controller
//! rolls them out like the real one, and fails them on request), through the built binary: canary
//! first, each wave only after the one before is healthy; a failing canary undone (workload and
//! tag back, the later waves held until `release`); a person's change held; a GitOps-owned
//! Deployment skipped; a daemon killed while it waits for health resumes the same deploy without
//! writing twice; and the exec `deploy` template. Then how deploys end when something goes wrong in
//! the middle: an undo leaves what a person changed during the roll-out and puts back the rest; a
//! deploy that runs out of attempts (a namespace answering 403) is undone like any failure; a
//! Deployment deleted during the deploy is not created again by the undo; a person's change during
//! the roll-out is an override, never our success; and a daemon that dies between a write and its
//! record announces `deploy.started` exactly once.

use crate::support;

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

mod expedited;
mod forced;
mod signed;

/// The apps, in roll-out order: the canary in wave 0, then one app per wave.
const APPS: [(&str, u32); 3] = [("canary", 0), ("web", 1), ("api", 2)];

/// An app: its name, wave, and the Deployments (namespace, name) it is deployed to.
type AppSpec<'a> = (&'a str, u32, &'a [(&'a str, &'a str)]);

/// [`APPS`], each deployed to its Deployment of namespace `shop`.
const SHOP: [AppSpec<'static>; 3] =
    [("canary", 0, &[("shop", "canary")]), ("web", 1, &[("shop", "web")]), ("api", 2, &[("shop", "api")])];

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
    /// Run image v1, a builder naming it, [`APPS`] built on it, each running in a Deployment of
    /// namespace `shop`; `extra` is appended to the config. One `run --once` pins everything.
    async fn new(extra: &str, image_extra: &dyn Fn(&str) -> String) -> Self {
        World::with(&SHOP, None, extra, image_extra).await
    }

    /// `apps`, each deploying container `app` of its Deployments; `extra` is appended to the config.
    async fn deploying_app(apps: &[AppSpec<'_>], extra: &str) -> Self {
        World::with(apps, Some("app"), extra, &|_| String::new()).await
    }

    /// Run image v1, a builder naming it, the apps built on it, each running in its Deployments
    /// (container `app`, and a `sidecar` no deploy writes), deploying `container` when named (else
    /// the container running the app's image); `extra` is appended to the config, `image_extra`
    /// to each image's entry. One `run --once` pins everything.
    async fn with(
        apps: &[AppSpec<'_>],
        container: Option<&str>,
        extra: &str,
        image_extra: &dyn Fn(&str) -> String,
    ) -> Self {
        World::with_kind(apps, "Deployment", container, extra, image_extra).await
    }

    /// [`World::with`], the apps running in workloads of `kind` instead of Deployments.
    async fn with_kind(
        apps: &[AppSpec<'_>],
        kind: &str,
        container: Option<&str>,
        extra: &str,
        image_extra: &dyn Fn(&str) -> String,
    ) -> Self {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let host = registry.host.clone();
        let run_tag = format!("{host}/demo/run:latest");
        let run_v1 = RunImage::jammy("1", 3);
        let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
        pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
        let kube = KubeDouble::start().await;
        kube.create_namespace("shop");
        let ws = Workspace::new();
        let mut images = String::new();
        let mut built = Vec::new();
        let container = container.map(|c| format!(", container = \"{c}\"")).unwrap_or_default();
        for (name, wave, workloads) in apps {
            let app = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest)).label("app", name);
            let digest =
                app::push_app(&pusher, &format!("apps/{name}"), Some("latest"), &app, Format::Oci).await.digest;
            let running = format!("{host}/apps/{name}@{digest}");
            let mut deploy = Vec::new();
            for (namespace, workload) in *workloads {
                kube.create_workload(
                    kind,
                    namespace,
                    workload,
                    &[("app", running.as_str()), ("sidecar", "registry.example/proxy:1")],
                    2,
                )
                .await;
                deploy.push(format!(
                    "{{ kind = \"{kind}\", namespace = \"{namespace}\", name = \"{workload}\"{container} }}"
                ));
            }
            built.push((name.to_string(), digest));
            images += &format!(
                "[[images]]\nname = \"{name}\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/{name}:latest\"\nwave = {wave}\n\
                 deploy = [{}]\n{}\n",
                deploy.join(", "),
                image_extra(name)
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

    async fn move_run_image(&self) {
        app::push_run(&self.pusher, "demo/run", Some("latest"), &RunImage::jammy("2", 4), Format::Oci).await;
    }

    /// An app's digest as built, on run image v1.
    fn built(&self, app: &str) -> String {
        self.built.iter().find(|(n, _)| n == app).map(|(_, d)| d.clone()).unwrap()
    }

    async fn tag(&self, app: &str) -> String {
        builder_monitor::install_crypto_provider();
        let registry = Registry::new([], Metrics::new());
        let tag = ImageRef::parse(&format!("{}/apps/{app}:latest", self.host)).unwrap();
        registry.head_manifest(&tag).await.unwrap().digest
    }

    /// The image of container `app` of Deployment `shop/NAME`.
    fn running(&self, name: &str) -> String {
        self.running_in("shop", name).expect("the Deployment")
    }

    /// The image of container `app` of Deployment `NAMESPACE/NAME`, while it exists.
    fn running_in(&self, namespace: &str, name: &str) -> Option<String> {
        let d = self.kube.workload("Deployment", namespace, name)?;
        let containers = d["spec"]["template"]["spec"]["containers"].as_array().unwrap().clone();
        let app = containers.iter().find(|c| c["name"] == "app").unwrap();
        Some(app["image"].as_str().unwrap().to_string())
    }

    fn sidecar(&self, name: &str) -> String {
        let d = self.kube.get("deployments", Some("shop"), name).unwrap();
        d["spec"]["template"]["spec"]["containers"][1]["image"].as_str().unwrap().to_string()
    }

    fn reference(&self, app: &str, digest: &str) -> String {
        format!("{}/apps/{app}@{digest}", self.host)
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

    async fn position(&self, event_type: &str, image: &str) -> usize {
        let events = self.events().await;
        events.iter().position(|(t, i, _)| t == event_type && i == image).unwrap_or_else(|| {
            panic!("no {event_type} of {image} in {:?}", events.iter().map(|(t, i, _)| (t, i)).collect::<Vec<_>>())
        })
    }

    fn status(&self) -> Value {
        let out = self.cli(&["status", "--json"]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        serde_json::from_str(&out.stdout).unwrap()
    }

    async fn actions(&self) -> Vec<ActionRecord> {
        self.ledger().actions(100).await.unwrap()
    }

    async fn count(&self, event_type: &str, image: &str) -> usize {
        self.events().await.iter().filter(|(t, i, _)| t == event_type && i == image).count()
    }

    async fn deploy_of(&self, image: &str) -> ActionRecord {
        let actions = self.actions().await;
        actions.into_iter().find(|a| a.image == image && a.action == "deploy").expect("a deploy of the image")
    }

    /// `status --json`'s deploy entries of an image.
    fn shown(&self, image: &str) -> Vec<Value> {
        let status = self.status();
        status["deploys"].as_array().unwrap().iter().filter(|d| d["image"] == image).cloned().collect()
    }
}

/// The first "done when": the run image push moves each app's tag, then its Deployment,
/// canary first, each app only after the one before is healthy, every step recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_image_push_rolls_out_to_three_apps_in_waves_each_after_the_one_before_is_healthy() {
    let w = World::new("", &|_| String::new()).await;
    w.move_run_image().await;
    let out = w.cli(&["run", "--once"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    for (name, _) in APPS {
        let tag = w.tag(name).await;
        assert_ne!(tag, w.built(name), "{name}'s tag moved");
        assert_eq!(w.running(name), w.reference(name, &tag), "{name} runs the new digest");
        assert_eq!(w.sidecar(name), "registry.example/proxy:1", "the other container is left as it was");
        let d = w.kube.get("deployments", Some("shop"), name).unwrap();
        let annotation = &d["spec"]["template"]["metadata"]["annotations"]["buildermonitor.dev/change"];
        assert!(annotation.is_string(), "the pod template names the change: {d}");
        assert_eq!(d["status"]["updatedReplicas"], 2, "{name} rolled out: {d}");
        assert_eq!(
            w.kube.owner("deployments", Some("shop"), name, ".spec.template.spec.containers[name=\"app\"].image"),
            Some("builder-monitor".to_string())
        );
    }
    // Each step after the one before: rebase, deploy written, deploy healthy, then the next app.
    let mut last = 0;
    for (name, _) in APPS {
        for step in ["rebase.succeeded", "deploy.started", "deploy.succeeded"] {
            let at = w.position(step, name).await;
            assert!(at >= last, "{step} of {name} came before the step before it");
            last = at;
        }
    }
    let actions = w.actions().await;
    let deploys: Vec<_> = actions.iter().filter(|a| a.action == "deploy").collect();
    assert_eq!(deploys.len(), 3, "{actions:?}");
    assert!(deploys.iter().all(|a| a.state == ActionState::Succeeded && a.attempts == 1), "{deploys:?}");

    let status = w.status();
    let shown = status["deploys"].as_array().unwrap_or_else(|| panic!("no deploys in {status}"));
    for (name, _) in APPS {
        let entry = shown.iter().find(|d| d["image"] == name).unwrap();
        assert_eq!(entry["kind"], "Deployment");
        assert_eq!(entry["namespace"], "shop");
        assert_eq!(entry["state"], "healthy", "{entry}");
        assert_eq!(entry["healthy"], true);
        assert_eq!(entry["digest"].as_str(), Some(w.tag(name).await.as_str()));
    }
}

/// A canary whose new pods cannot pull their image fails after `fail_after`: its Deployment and its
/// tag go back to exactly what they were, the later waves are held and never touched, and
/// `release` lets them go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_canary_is_undone_and_holds_the_later_waves_until_release() {
    let w = World::new("[rollout]\nfail_after = \"1s\"\ndeploy_timeout = \"2m\"\n", &|_| String::new()).await;
    let before: Vec<String> = APPS.iter().map(|(name, _)| w.running(name)).collect();
    // The canary's controller waits, so the digest the deploy writes can be made to fail.
    w.kube.hold_rollout("Deployment", "shop", "canary");
    w.move_run_image().await;
    let mut daemon = Daemon::start(&w.config);
    daemon.wait_for_event("deploy.started");
    let written = w.running("canary");
    assert_ne!(written, before[0]);
    w.kube.fail_image(&written, Failure::ImagePullBackOff);
    w.kube.release_rollout("Deployment", "shop", "canary");
    let failed = daemon.wait_for_event("deploy.failed");
    daemon.wait_for_event("deploy.rolled_back");
    let (status, _) = daemon.terminate();
    assert!(status.success());
    let detail = failed["action"]["detail"].as_str().unwrap();
    assert!(detail.contains("ImagePullBackOff"), "{detail}");

    assert_eq!(w.running("canary"), before[0], "the canary's Deployment is back to what it ran");
    assert_eq!(w.tag("canary").await, w.built("canary"), "and its tag too");
    for (i, name) in ["web", "api"].iter().enumerate() {
        assert_eq!(w.running(name), before[i + 1], "{name} was never deployed");
        assert_eq!(w.tag(name).await, w.built(name), "{name} was never rebased");
    }
    let actions = w.actions().await;
    let held: Vec<_> = actions.iter().filter(|a| a.state == ActionState::Held).collect();
    assert_eq!(held.len(), 2, "web and api wait: {actions:?}");
    let canary = actions.iter().find(|a| a.image == "canary" && a.action == "deploy").unwrap();
    assert!(canary.holds && canary.state == ActionState::Failed, "{canary:?}");
    let change = held[0].change.clone();

    // Release: the later waves go (the canary stays as it is), and deploy.
    let out = w.cli(&["release", &change]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = w.cli(&["run", "--once"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for name in ["web", "api"] {
        let tag = w.tag(name).await;
        assert_eq!(w.running(name), w.reference(name, &tag), "{name} deployed after the release");
    }
    assert_eq!(w.running("canary"), before[0], "the canary stays where the undo put it");
}

/// A person who sets the image of a deployed Deployment back by hand wins: the image is held, with
/// `deploy.overridden`, and nothing rolls it forward again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_change_to_a_deployed_image_holds_the_image() {
    let w = World::new("", &|_| String::new()).await;
    w.move_run_image().await;
    let out = w.cli(&["run", "--once"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let mut daemon = Daemon::start(&w.config);
    let by_hand = w.reference("web", &w.built("web"));
    w.kube.set_image_as("kubectl-set", "Deployment", "shop", "web", "app", &by_hand);
    let overridden = daemon.wait_for_event("deploy.overridden");
    assert_eq!(overridden["action"]["image"], "web", "{overridden}");
    let (status, _) = daemon.terminate();
    assert!(status.success());
    assert_eq!(w.running("web"), by_hand, "the person's image stays");
    let actions = w.actions().await;
    let deploy = actions.iter().find(|a| a.image == "web" && a.action == "deploy").unwrap();
    assert!(deploy.holds, "{deploy:?}");
    assert!(deploy.detail.as_deref().unwrap_or_default().contains("changed by someone else"), "{deploy:?}");
    let status = w.status();
    let web = status["deploys"].as_array().unwrap().iter().find(|d| d["image"] == "web").unwrap().clone();
    assert!(web["held"].as_str().unwrap_or_default().contains("changed by someone else"), "{web}");
}

/// A Deployment Argo CD owns is not written: the deploy ends `skipped`, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gitops_owned_deployment_is_skipped() {
    let w = World::new("", &|_| String::new()).await;
    w.kube.label_workload("Deployment", "shop", "web", &[("argocd.argoproj.io/instance", "shop-web")], &[]);
    let before = w.running("web");
    w.move_run_image().await;
    let out = w.cli(&["run", "--once"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(w.running("web"), before, "an Argo CD object is left to Argo CD");
    let actions = w.actions().await;
    let deploy = actions.iter().find(|a| a.image == "web" && a.action == "deploy").unwrap();
    assert_eq!(deploy.state, ActionState::Skipped, "{deploy:?}");
    assert!(deploy.detail.as_deref().unwrap().contains("argocd.argoproj.io/instance"), "{deploy:?}");
    // The next wave did not wait for a skipped deploy.
    let tag = w.tag("api").await;
    assert_eq!(w.running("api"), w.reference("api", &tag));
}

/// SIGKILL while a deploy waits for health: the restarted daemon follows the same action, never
/// writes the workload a second time, and records it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_while_a_deploy_waits_for_health_resumes_it_without_writing_twice() {
    let w = World::new("", &|_| String::new()).await;
    w.move_run_image().await;
    w.kube.pause_rollouts();
    let mut daemon = Daemon::start(&w.config);
    daemon.wait_for_event("deploy.started");
    let generation =
        |w: &World| w.kube.get("deployments", Some("shop"), "canary").unwrap()["metadata"]["generation"].clone();
    let written = generation(&w);
    daemon.kill();
    let mut daemon = Daemon::start(&w.config);
    w.kube.resume_rollouts();
    daemon.wait_for("api's deploy", |v| {
        v["message"] == "action succeeded" && v["image"] == "api" && v["kind"] == "deploy"
    });
    let _ = daemon.terminate();
    assert_eq!(generation(&w), written, "the canary's template was written once");
    let actions = w.actions().await;
    let canary = actions.iter().find(|a| a.image == "canary" && a.action == "deploy").unwrap();
    assert_eq!(canary.state, ActionState::Succeeded);
    assert_eq!(canary.attempts, 1, "the same attempt, followed again: {canary:?}");
    let started = w.events().await.into_iter().filter(|(t, i, _)| t == "deploy.started" && i == "canary").count();
    assert_eq!(started, 1, "written once, announced once");
}

/// Without Kubernetes: `[runner.exec] deploy` runs once per moved app with the new digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exec_deploy_template_runs_with_the_new_digest() {
    let w = World::new(
        "[runner.exec]\ndeploy = [\"sh\", \"-c\", \"echo {name} {digest} {reference} >> deploys.txt\"]\n",
        &|_| String::new(),
    )
    .await;
    w.move_run_image().await;
    let out = w.cli(&["run", "--once"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lines = std::fs::read_to_string(w.ws.path("deploys.txt")).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (i, (name, _)) in APPS.iter().enumerate() {
        let tag = w.tag(name).await;
        assert_eq!(lines[i], format!("{name} {tag} {}", w.reference(name, &tag)));
    }
}

/// The deploy namespaces' permissions are checked at start, naming what is missing and what needs
/// it; `rbac` prints the `-deploys` Role that grants them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_deploy_permissions_are_a_clear_start_up_error_and_rbac_prints_them() {
    let w = World::new("", &|_| String::new()).await;
    w.kube.deny("patch", "apps", "deployments");
    let out = w.cli(&["run", "--once"]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("missing permission in namespace \"shop\": patch deployments.apps (for [[images]] deploy)"),
        "{}",
        out.stderr
    );
    let out = w.cli(&["rbac", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let objects: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    let role = objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"].as_str().is_some_and(|n| n.ends_with("-deploys")))
        .unwrap_or_else(|| panic!("no -deploys Role in {objects:?}"));
    assert_eq!(role["metadata"]["namespace"], "shop");
    let rules = role["rules"].as_array().unwrap();
    assert!(
        rules
            .iter()
            .any(|r| r["resources"][0] == "deployments" && r["verbs"].as_array().unwrap().contains(&"patch".into()))
    );
    // A StatefulSet's forced rollback after an undo deletes its pods stuck on the undone revision.
    let pods = rules.iter().find(|r| r["resources"][0] == "pods").unwrap_or_else(|| panic!("no pods rule: {rules:?}"));
    assert_eq!(pods["verbs"], serde_json::json!(["list", "watch", "delete"]), "{pods}");
}

/// The item 2: a person sets `:hotfix` on one Deployment while the deploy waits for the
/// other, which then fails. The undo reads both: the person's container stays as they set it
/// (the image held, `deploy.overridden` naming it), the other is put back, and so is the tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undo_leaves_a_persons_change_and_puts_back_only_what_still_runs_ours() {
    let w = World::deploying_app(
        &[("canary", 0, &[("shop", "one"), ("shop", "two")])],
        "[rollout]\nfail_after = \"1s\"\ndeploy_timeout = \"2m\"\n",
    )
    .await;
    let before = w.reference("canary", &w.built("canary"));
    w.kube.hold_rollout("Deployment", "shop", "two");
    w.move_run_image().await;
    let mut daemon = Daemon::start(&w.config);
    daemon.wait_for_event("deploy.started");
    let written = w.running_in("shop", "two").unwrap();
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

    assert_eq!(w.running_in("shop", "one").unwrap(), hotfix, "the person's image stays");
    assert_eq!(w.running_in("shop", "two").unwrap(), before, "ours is put back");
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
    let w = World::deploying_app(&[("canary", 0, &[("shop", "one"), ("blocked", "two")])], "").await;
    let before = w.reference("canary", &w.built("canary"));
    w.kube.forbid("patch", "blocked");
    w.move_run_image().await;
    let out = w.cli(&["run", "--once"]);
    assert_ne!(w.tag("canary").await, "", "{}", out.stderr);

    assert_eq!(w.running_in("shop", "one").unwrap(), before, "the workload it wrote is put back");
    assert_eq!(w.running_in("blocked", "two").unwrap(), before);
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
    let w = World::deploying_app(&[("canary", 0, &[("shop", "one")])], "").await;
    w.kube.hold_rollout("Deployment", "shop", "one");
    w.move_run_image().await;
    let mut daemon = Daemon::start(&w.config);
    daemon.wait_for_event("deploy.started");
    assert!(w.kube.delete_workload("Deployment", "shop", "one"));
    let failed = daemon.wait_for_event("deploy.failed");
    let (status, _) = daemon.terminate();
    assert!(status.success());

    assert_eq!(w.running_in("shop", "one"), None, "not created again: {failed}");
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
    let w = World::deploying_app(&[("canary", 0, &[("shop", "one")]), ("web", 1, &[("shop", "web")])], "").await;
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
    assert_eq!(w.running_in("shop", "one").unwrap(), hotfix, "the person's image stays");
    assert_eq!(w.count("deploy.succeeded", "canary").await, 0);
    let deploy = w.deploy_of("canary").await;
    assert!(deploy.state == ActionState::Failed && deploy.holds, "{deploy:?}");
    let shown = w.shown("canary");
    assert_eq!((shown[0]["state"].as_str(), shown[0]["healthy"].as_bool()), (Some("overridden"), Some(false)));
    assert!(shown[0]["held"].is_string(), "{shown:?}");
    assert_eq!(
        w.running_in("shop", "web").unwrap(),
        w.reference("web", &w.built("web")),
        "the later wave is not deployed"
    );
}

/// The item 10a: the daemon dies after a write was taken but before it was recorded (its
/// answer lost); the restarted daemon finds the write landed and announces `deploy.started`
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_started_is_recorded_once_when_the_daemon_dies_between_a_write_and_its_record() {
    let w = World::deploying_app(&[("canary", 0, &[("shop", "one")])], "").await;
    let before = w.reference("canary", &w.built("canary"));
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
