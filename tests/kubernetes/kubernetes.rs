//! The Kubernetes runners against the API double and a real registry: Jobs and kpack Builds with
//! the configured scheduling, found again after a restart, outcomes from the objects' status,
//! access checks, and `build-spec`.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use builder_monitor::config::{Config, k8s_typed};
use builder_monitor::daemon::Parts;
use builder_monitor::ledger::Ledger;
use builder_monitor::monitor::Monitor;
use builder_monitor::runner::kpack::KpackBuildSpec;
use builder_monitor::runner::{Backends, Runner};
use builder_monitor::schedule::Clock;
use builder_monitor_core::event::EventType;
use serde_json::{Value, json};
use support::cnb::BuilderSpec;
use support::daemon::{Daemon, Workspace, run_with_env};
use support::images::{Format, Image, Pushed, Pusher};
use support::kube::KubeDouble;
use support::registry::TestRegistry;
use tokio_util::sync::CancellationToken;

mod cluster;

struct World {
    registry: TestRegistry,
    pusher: Pusher,
    double: KubeDouble,
    run: String,
}

impl World {
    async fn new() -> Self {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let double = KubeDouble::start().await;
        double.create_namespace("builds");
        let run = format!("{}/demo/run:latest", registry.host);
        World { registry, pusher, double, run }
    }

    async fn push_run(&self, salt: &str) -> (Pushed, Vec<Pushed>) {
        let images = [Image::new("amd64").salt(salt), Image::new("arm64").salt(salt)];
        self.pusher.push_index("demo/run", "latest", &images, Format::Oci).await
    }

    async fn push_builder(&self, spec: &BuilderSpec) -> Pushed {
        self.pusher.push_image("demo/builder", Some("latest"), &spec.image(), Format::Oci).await
    }

    async fn push_app(&self, run_digest: &str) -> Pushed {
        let lifecycle = json!({ "runImage": { "image": self.run, "topLayer": "sha256:top",
            "reference": format!("{}/demo/run@{run_digest}", self.registry.host) } });
        let image = Image::new("amd64")
            .salt(run_digest)
            .label("io.buildpacks.lifecycle.metadata", lifecycle.to_string())
            .label("io.buildpacks.stack.id", "io.buildpacks.stacks.jammy");
        self.pusher.push_image("apps/petclinic", Some("latest"), &image, Format::Oci).await
    }

    /// A config with one builder, the app image and the given runner; `extra` goes at the end.
    fn config(&self, runner: &str, extra: &str) -> String {
        format!(
            r#"[monitor]
state = "state.db"
interval = "200ms"
jitter = "0s"

[[builders]]
name = "jammy"
image = "{host}/demo/builder:latest"

[[images]]
name = "petclinic"
builder = "jammy"
image = "{host}/apps/petclinic:latest"
source = {{ git = "https://github.com/spring-projects/spring-petclinic", revision = "main", sub_path = "app" }}
env = {{ BP_JVM_VERSION = "21" }}
scheduling = {{ node_selector = {{ zone = "eu-1b" }}, runtime_class_name = "gvisor" }}

[runner]
type = "{runner}"
max_attempts = 3

[runner.kubernetes]
namespace = "builds"
service_account = "builder"
node_selector = {{ disktype = "ssd", zone = "eu-1a" }}
tolerations = [{{ key = "dedicated", operator = "Equal", value = "builds", effect = "NoSchedule" }}]
affinity = {{ nodeAffinity = {{ requiredDuringSchedulingIgnoredDuringExecution = {{ nodeSelectorTerms = [
  {{ matchExpressions = [{{ key = "topology.kubernetes.io/zone", operator = "In", values = ["eu-1a", "eu-1b"] }}] }}] }} }} }}
priority_class_name = "builds-low"
scheduler_name = "default-scheduler"
image_pull_secrets = ["regcred"]
resources = {{ requests = {{ cpu = "1", memory = "2Gi" }}, limits = {{ memory = "4Gi" }} }}
active_deadline = "1h"
docker_config_secret = "registry-credentials"
{extra}
"#,
            host = self.registry.host
        )
    }
}

struct InProcess {
    monitor: Arc<Monitor>,
    runner: Arc<Runner>,
    ledger: Ledger,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

fn assemble(text: &str, client: kube::Client) -> InProcess {
    let dir = tempfile::tempdir().unwrap();
    let config = Arc::new(Config::parse(&dir.path().join("config.toml"), text).unwrap_or_else(|e| panic!("{e}")));
    let ledger = Ledger::open(&dir.path().join("state.db")).unwrap();
    let monitor = Parts::new(config.clone(), ledger.clone(), Clock::System, None).unwrap().monitor;
    let stop = CancellationToken::new();
    let backend = Backends::for_config(&config, Some(client).into(), stop.clone()).unwrap();
    let runner = Arc::new(Runner::new(config, ledger.clone(), Clock::System, backend));
    InProcess { monitor, runner, ledger, stop, _dir: dir }
}

async fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + support::PATIENCE;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn events(ledger: &Ledger, t: EventType) -> Vec<builder_monitor_core::event::Event> {
    ledger.events_after(0, 1000).await.unwrap().into_iter().map(|e| e.event).filter(|e| e.event_type == t).collect()
}

#[tokio::test]
async fn a_builder_change_creates_one_job_with_every_scheduling_field() {
    let w = World::new().await;
    let (run1, _) = w.push_run("1").await;
    let v1 = BuilderSpec::jammy(&w.run);
    w.push_builder(&v1).await;
    let p = assemble(&w.config("kubernetes", ""), w.double.client());
    assert!(p.monitor.run_once().await);
    tokio::spawn(p.runner.clone().run(p.stop.clone()));

    let pushed = w.push_builder(&v1.bump("paketo-buildpacks/java", "18.2.0")).await;
    assert!(p.monitor.run_once().await);
    let job = wait_for("the Job", || w.double.list("jobs").into_iter().next()).await;
    let host = &w.registry.host;
    let key = p.ledger.actions(1).await.unwrap()[0].key.clone();
    let change = p.ledger.changes(Some("jammy"), 1).await.unwrap()[0].id.clone();

    assert_eq!(job["metadata"]["name"], key);
    assert_eq!(job["metadata"]["namespace"], "builds");
    let labels = &job["metadata"]["labels"];
    assert_eq!(labels["app.kubernetes.io/managed-by"], "builder-monitor");
    assert_eq!(labels["buildermonitor.dev/image"], "petclinic");
    assert_eq!(labels["buildermonitor.dev/change"], change);
    let annotations = &job["metadata"]["annotations"];
    assert_eq!(annotations["buildermonitor.dev/builder"], format!("{host}/demo/builder@{}", pushed.digest));
    assert_eq!(annotations["buildermonitor.dev/reasons"], "BUILDPACK");
    assert_eq!(job["spec"]["backoffLimit"], 2);
    assert_eq!(job["spec"]["activeDeadlineSeconds"], 3600);
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(job["spec"]["template"]["metadata"]["labels"]["buildermonitor.dev/image"], "petclinic");
    assert_eq!(pod["nodeSelector"], json!({ "disktype": "ssd", "zone": "eu-1b" }), "maps merge key by key");
    assert_eq!(
        pod["tolerations"],
        json!([{ "key": "dedicated", "operator": "Equal", "value": "builds", "effect": "NoSchedule" }])
    );
    assert_eq!(
        pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
            [0]["values"],
        json!(["eu-1a", "eu-1b"])
    );
    assert_eq!(pod["priorityClassName"], "builds-low");
    assert_eq!(pod["runtimeClassName"], "gvisor", "from the image's own scheduling");
    assert_eq!(pod["schedulerName"], "default-scheduler");
    assert_eq!(pod["serviceAccountName"], "builder");
    assert_eq!(pod["imagePullSecrets"], json!([{ "name": "regcred" }]));
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(
        pod["securityContext"],
        json!({ "runAsNonRoot": true, "runAsUser": 1001, "runAsGroup": 1000, "fsGroup": 1000, "seccompProfile": { "type": "RuntimeDefault" } })
    );
    let source = &pod["initContainers"][0];
    assert_eq!(source["command"][4], "https://github.com/spring-projects/spring-petclinic");
    assert_eq!(source["command"][5], "main");
    assert_eq!((&source["command"][6], &source["command"][7]), (&json!("BP_JVM_VERSION"), &json!("21")));
    let build = &pod["containers"][0];
    assert_eq!(build["image"], format!("{host}/demo/builder@{}", pushed.digest), "the pinned builder");
    assert_eq!(build["command"], json!(["/cnb/lifecycle/creator"]));
    let args: Vec<&str> = build["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(args.contains(&"-app=/workspace/app/app"), "{args:?}");
    assert!(
        args.contains(&format!("-run-image={host}/demo/run@{}", run1.digest).as_str()),
        "the pinned run image: {args:?}"
    );
    assert!(args.contains(&format!("-previous-image={host}/apps/petclinic:latest").as_str()));
    assert_eq!(args.last().unwrap(), &format!("{host}/apps/petclinic:latest"));
    let env: Vec<(String, String)> = build["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().into(), e["value"].as_str().unwrap().into()))
        .collect();
    assert!(env.contains(&("CNB_PLATFORM_API".into(), "0.14".into())));
    assert!(env.contains(&("DOCKER_CONFIG".into(), "/docker-config".into())));
    assert_eq!(build["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(build["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(build["resources"]["limits"]["memory"], "4Gi");
    assert!(pod["volumes"].as_array().unwrap().iter().any(|v| v["secret"]["secretName"] == "registry-credentials"));
    // The object is a valid batch/v1 Job: nothing k8s-openapi does not know.
    k8s_typed::<k8s_openapi::api::batch::v1::Job>(&job).unwrap();

    // The cluster finishes it: one build.succeeded, the action done.
    w.double.set_status(
        "jobs",
        Some("builds"),
        &key,
        json!({ "succeeded": 1, "conditions": [{ "type": "Complete", "status": "True" }] }),
    );
    let ledger = p.ledger.clone();
    let deadline = Instant::now() + support::PATIENCE;
    while ledger.actions(1).await.unwrap()[0].state != builder_monitor::ledger::ActionState::Succeeded {
        assert!(Instant::now() < deadline, "the outcome was never recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(events(&p.ledger, EventType::BuildSucceeded).await.len(), 1);
    assert_eq!(w.double.list("jobs").len(), 1);
    p.stop.cancel();
}

#[tokio::test]
async fn kpack_builds_for_rebuilds_and_rebases_follow_their_succeeded_condition() {
    let w = World::new().await;
    let (_, run1) = w.push_run("1").await;
    let v1 = BuilderSpec::jammy(&w.run);
    w.push_builder(&v1).await;
    let app = w.push_app(&run1[0].digest).await;
    let p = assemble(&w.config("kpack", ""), w.double.client());
    assert!(p.monitor.run_once().await);
    tokio::spawn(p.runner.clone().run(p.stop.clone()));
    let host = w.registry.host.clone();

    // A buildpack bump: a rebuild Build.
    let builder = w.push_builder(&v1.clone().bump("paketo-buildpacks/java", "18.2.0")).await;
    assert!(p.monitor.run_once().await);
    let build = wait_for("the rebuild Build", || w.double.list("builds").into_iter().next()).await;
    assert_eq!(build["apiVersion"], "kpack.io/v1alpha2");
    let spec: KpackBuildSpec = serde_json::from_value(build["spec"].clone()).expect("a Build kpack understands");
    assert_eq!(spec.tags, [format!("{host}/apps/petclinic:latest")]);
    assert_eq!(spec.builder.image, format!("{host}/demo/builder@{}", builder.digest));
    assert_eq!(spec.builder.image_pull_secrets[0].name, "regcred");
    assert_eq!(spec.source.as_ref().unwrap().git.url, "https://github.com/spring-projects/spring-petclinic");
    assert_eq!(spec.source.as_ref().unwrap().sub_path.as_deref(), Some("app"));
    assert_eq!(spec.service_account_name.as_deref(), Some("builder"));
    assert_eq!(spec.node_selector["zone"], "eu-1b");
    assert_eq!(spec.priority_class_name.as_deref(), Some("builds-low"));
    assert_eq!(spec.runtime_class_name.as_deref(), Some("gvisor"));
    assert!(spec.tolerations.is_some() && spec.affinity.is_some());
    assert_eq!(spec.env[0].name, "BP_JVM_VERSION");
    assert!(build["metadata"]["annotations"].get("image.kpack.io/reason").is_none(), "a rebuild is not a STACK build");
    let name = build["metadata"]["name"].as_str().unwrap().to_string();
    w.double.set_status(
        "builds",
        Some("builds"),
        &name,
        json!({ "conditions": [{ "type": "Succeeded", "status": "True" }] }),
    );
    let ledger = p.ledger.clone();
    let deadline = Instant::now() + support::PATIENCE;
    while events(&ledger, EventType::BuildSucceeded).await.is_empty() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The run image moves: a rebase Build, annotated STACK, naming the app and the stack id.
    let (run2, _) = w.push_run("2").await;
    assert!(p.monitor.run_once().await);
    let rebase = wait_for("the rebase Build", || w.double.list("builds").into_iter().nth(1)).await;
    assert_eq!(rebase["metadata"]["annotations"]["image.kpack.io/reason"], "STACK");
    let spec: KpackBuildSpec = serde_json::from_value(rebase["spec"].clone()).unwrap();
    let last = spec.last_build.unwrap();
    assert_eq!(last.image.as_deref(), Some(format!("{host}/apps/petclinic@{}", app.digest).as_str()));
    assert_eq!(last.stack_id.as_deref(), Some("io.buildpacks.stacks.jammy"));
    assert_eq!(spec.run_image.unwrap().image, format!("{host}/demo/run@{}", run2.digest));
    let name = rebase["metadata"]["name"].as_str().unwrap().to_string();
    w.double.set_status("builds", Some("builds"), &name, json!({ "conditions": [{ "type": "Succeeded", "status": "False", "message": "rebase failed: incompatible stack" }] }));
    let deadline = Instant::now() + support::PATIENCE;
    while events(&ledger, EventType::RebaseFailed).await.is_empty() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let failed = &events(&ledger, EventType::RebaseFailed).await[0];
    assert_eq!(
        failed.action.as_ref().unwrap().detail.as_deref(),
        Some("Build failed: rebase failed: incompatible stack")
    );
    assert_eq!(w.double.list("builds").len(), 2);
    p.stop.cancel();
}

fn daemon_config(w: &World, dir: &Path) -> std::path::PathBuf {
    let kubeconfig = w.double.kubeconfig(dir);
    let text = w.config("kubernetes", &format!("\n[kubernetes]\nkubeconfig = \"{}\"\n", kubeconfig.display()));
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

// The daemon's log is read by blocking calls while the in-process API double serves: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_finds_its_job_and_reports_the_outcome_once() {
    let w = World::new().await;
    w.push_run("1").await;
    let v1 = BuilderSpec::jammy(&w.run);
    w.push_builder(&v1).await;
    let ws = Workspace::new();
    let config = daemon_config(&w, ws.dir.path());
    let mut daemon = Daemon::start(&config);
    daemon.wait_for_event("builder.pinned");
    w.push_builder(&v1.bump("paketo-buildpacks/java", "18.2.0")).await;
    daemon.wait_for("the Job", |v| v["message"] == "Job created");
    daemon.kill();
    assert_eq!(w.double.list("jobs").len(), 1);

    let mut daemon = Daemon::start(&config);
    daemon.wait_for("the Job found again", |v| v["message"] == "Job exists already (a retry or restart); following it");
    let job = w.double.list("jobs")[0].clone();
    let name = job["metadata"]["name"].as_str().unwrap().to_string();
    // The pod failed; its termination message is the end of its log.
    w.double.put("", "v1", "pods", Some("builds"), json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": format!("{name}-abcde"), "labels": { "batch.kubernetes.io/job-name": name } },
        "spec": { "containers": [{ "name": "build", "image": "x" }] },
        "status": { "containerStatuses": [{ "name": "build", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": { "terminated": { "exitCode": 51, "message": "ERROR: failed to build: exit status 1" } } }] },
    }));
    w.double.set_status("jobs", Some("builds"), &name, json!({ "failed": 3, "conditions": [{ "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit" }] }));
    daemon.wait_for("the outcome", |v| v["message"] == "action failed for good");
    let (status, _) = daemon.terminate();
    assert!(status.success());
    assert_eq!(w.double.list("jobs").len(), 1, "found, not duplicated");

    let ledger = Ledger::open(&ws.dir.path().join("state.db")).unwrap();
    let failed = events(&ledger, EventType::BuildFailed).await;
    assert_eq!(failed.len(), 1);
    let info = failed[0].action.as_ref().unwrap();
    assert_eq!(
        info.detail.as_deref(),
        Some("Job failed: BackoffLimitExceeded: Job has reached the specified backoff limit")
    );
    assert_eq!(info.output_tail.as_deref(), Some("ERROR: failed to build: exit status 1"));
    assert_eq!(
        events(&ledger, EventType::BuildStarted).await.len(),
        1,
        "following the same attempt again keeps its event id"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_permissions_and_namespaces_are_clear_start_up_errors() {
    let w = World::new().await;
    let ws = Workspace::new();
    let config = daemon_config(&w, ws.dir.path());
    let config = config.to_str().unwrap();
    w.double.deny("create", "batch", "jobs");
    w.double.deny("watch", "batch", "jobs");
    let out = run_with_env(&["run", "--once", "--config", config], &[], ws.dir.path());
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("missing permission in namespace \"builds\": create jobs.batch, watch jobs.batch"),
        "{}",
        out.stderr
    );

    let other = ws.path("other.toml");
    std::fs::write(
        &other,
        std::fs::read_to_string(config).unwrap().replace("namespace = \"builds\"", "namespace = \"missing\""),
    )
    .unwrap();
    let out = run_with_env(&["run", "--once", "--config", other.to_str().unwrap()], &[], ws.dir.path());
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("namespace \"missing\" does not exist"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_spec_prints_what_the_runner_would_create() {
    let w = World::new().await;
    let (run1, children) = w.push_run("1").await;
    let v1 = BuilderSpec::jammy(&w.run);
    let builder = w.push_builder(&v1).await;
    w.push_app(&children[1].digest).await;
    let ws = Workspace::new();
    let config = daemon_config(&w, ws.dir.path());
    let config = config.to_str().unwrap();
    // Pins first (runner none, so nothing is created).
    let none = ws.path("none.toml");
    std::fs::write(&none, std::fs::read_to_string(config).unwrap().replace("type = \"kubernetes\"", "type = \"none\""))
        .unwrap();
    assert_eq!(run_with_env(&["run", "--once", "--config", none.to_str().unwrap()], &[], ws.dir.path()).code, Some(0));
    // Runner none: what would be recorded, and that nothing would run (no `command: null`).
    let out = run_with_env(
        &[
            "build-spec",
            "--config",
            none.to_str().unwrap(),
            "--image",
            "petclinic",
            "--action",
            "rebuild",
            "--output",
            "json",
        ],
        &[],
        ws.dir.path(),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let recorded: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(recorded["runner"], "none");
    assert!(recorded.get("command").is_none(), "{recorded:#}");
    assert!(recorded["note"].as_str().unwrap().contains("nothing to run"), "{recorded:#}");

    let host = &w.registry.host;
    let out = run_with_env(
        &["build-spec", "--config", config, "--image", "petclinic", "--action", "rebuild", "--output", "json"],
        &[],
        ws.dir.path(),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let job: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(job["kind"], "Job");
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["image"], format!("{host}/demo/builder@{}", builder.digest));
    assert_eq!(pod["nodeSelector"]["disktype"], "ssd");
    assert_eq!(pod["priorityClassName"], "builds-low");
    let yaml = run_with_env(
        &["build-spec", "--config", config, "--image", "petclinic", "--action", "rebase"],
        &[],
        ws.dir.path(),
    );
    assert_eq!(yaml.code, Some(0), "{}", yaml.stderr);
    assert!(yaml.stdout.starts_with("apiVersion: \"batch/v1\"\n"), "{}", yaml.stdout);
    assert!(yaml.stdout.contains(&format!("- \"-run-image={host}/demo/run@{}\"", run1.digest)), "{}", yaml.stdout);
    assert!(yaml.stdout.contains("/cnb/lifecycle/rebaser"), "{}", yaml.stdout);
    assert!(yaml.stdout.contains("priorityClassName: \"builds-low\""), "{}", yaml.stdout);

    let kpack = ws.path("kpack.toml");
    std::fs::write(
        &kpack,
        std::fs::read_to_string(config).unwrap().replace("type = \"kubernetes\"", "type = \"kpack\""),
    )
    .unwrap();
    let out = run_with_env(
        &[
            "build-spec",
            "--config",
            kpack.to_str().unwrap(),
            "--image",
            "petclinic",
            "--action",
            "rebase",
            "--output",
            "json",
        ],
        &[],
        ws.dir.path(),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let build: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(build["kind"], "Build");
    assert_eq!(build["metadata"]["annotations"]["image.kpack.io/reason"], "STACK");
    assert_eq!(build["spec"]["lastBuild"]["stackId"], "io.buildpacks.stacks.jammy");
    let out =
        run_with_env(&["build-spec", "--config", config, "--image", "nope", "--action", "rebuild"], &[], ws.dir.path());
    assert_eq!(out.code, Some(2), "an unknown name is a usage error");
    assert!(out.stderr.contains("no image named \"nope\""), "{}", out.stderr);
}
