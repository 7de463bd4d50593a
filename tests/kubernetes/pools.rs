//! Runner pools across clusters, each cluster its own API double: builds go to the pool serving
//! the app's platform, pass over a pool whose cluster is down, wait `queued` while Kueue holds
//! their Job, and after a SIGKILL are found again in the cluster they were started in; `check`
//! refuses a pool's or an image's pod template that reaches past what the pool allows.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use builder_monitor::config::Config;
use builder_monitor::daemon::Parts;
use builder_monitor::ledger::{ActionRecord, ActionState, Ledger};
use builder_monitor::monitor::Monitor;
use builder_monitor::runner::{Backends, Clusters, Runner};
use builder_monitor::schedule::Clock;
use builder_monitor_core::event::EventType;
use serde_json::{Value, json};
use support::cnb::BuilderSpec;
use support::daemon::{Daemon, Workspace, run_with_env};
use support::images::{Format, Image, Pusher};
use support::kube::KubeDouble;
use support::registry::TestRegistry;
use tokio_util::sync::CancellationToken;

struct Fleet {
    registry: TestRegistry,
    pusher: Pusher,
    run: String,
    /// Pool `a`: linux/amd64 Jobs. Pool `b`: windows/amd64 kpack Builds. Pool `c`: linux/amd64
    /// Jobs through a Kueue queue.
    a: KubeDouble,
    b: KubeDouble,
    c: KubeDouble,
    dir: tempfile::TempDir,
}

impl Fleet {
    async fn new() -> Self {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let (a, b, c) = (KubeDouble::start().await, KubeDouble::start().await, KubeDouble::start().await);
        for double in [&a, &b, &c] {
            double.create_namespace("builds");
        }
        c.enable_kueue();
        let run = format!("{}/demo/run:latest", registry.host);
        Fleet { registry, pusher, run, a, b, c, dir: tempfile::tempdir().unwrap() }
    }

    async fn push_builder(&self, spec: &BuilderSpec) {
        self.pusher.push_image("demo/builder", Some("latest"), &spec.image(), Format::Oci).await;
    }

    async fn push_apps(&self) {
        self.pusher.push_image("apps/web", Some("latest"), &Image::new("amd64").salt("web"), Format::Oci).await;
        let windows = Image { os: "windows".into(), ..Image::new("amd64").salt("desktop") };
        self.pusher.push_image("apps/desktop", Some("latest"), &windows, Format::Oci).await;
        let arm32 = Image { variant: Some("v7".into()), ..Image::new("arm").salt("kiosk") };
        self.pusher.push_image("apps/kiosk", Some("latest"), &arm32, Format::Oci).await;
    }

    fn config(&self) -> String {
        let dir = self.dir.path();
        // A registry mirror beside the build, more memory for it, and the spot nodes' toleration.
        std::fs::write(
            dir.join("linux.yaml"),
            "spec:\n  tolerations:\n  - key: spot\n    operator: Exists\n  containers:\n  - name: build\n    resources:\n      limits:\n        memory: 8Gi\n  - name: mirror\n    image: registry.example.com/mirror:2\n    securityContext:\n      allowPrivilegeEscalation: false\n      capabilities:\n        drop: [ALL]\n",
        )
        .unwrap();
        let (a, b, c) =
            (self.a.kubeconfig_named(dir, "a"), self.b.kubeconfig_named(dir, "b"), self.c.kubeconfig_named(dir, "c"));
        format!(
            r#"[monitor]
state = "state.db"
interval = "200ms"
jitter = "0s"

[[builders]]
name = "jammy"
image = "{host}/demo/builder:latest"

[[images]]
name = "web"
builder = "jammy"
image = "{host}/apps/web:latest"
policy = "rebuild"
source = {{ git = "https://example.com/web.git", revision = "main" }}

[[images]]
name = "desktop"
builder = "jammy"
image = "{host}/apps/desktop:latest"
policy = "rebuild"
source = {{ git = "https://example.com/desktop.git", revision = "main" }}

[[images]]
name = "kiosk"
builder = "jammy"
image = "{host}/apps/kiosk:latest"
policy = "rebuild"
source = {{ git = "https://example.com/kiosk.git", revision = "main" }}

[runner]
type = "kubernetes"
max_concurrent = 4
max_attempts = 1

[[runner.pools]]
name = "a"
kubeconfig = "{a}"
namespace = "builds"
platforms = ["linux/amd64"]
tolerations = [{{ key = "builds", operator = "Exists" }}]
pod_template = "{template}"

[[runner.pools]]
name = "b"
type = "kpack"
kubeconfig = "{b}"
namespace = "builds"
platforms = ["windows/amd64"]

[[runner.pools]]
name = "c"
kubeconfig = "{c}"
namespace = "builds"
platforms = ["linux/amd64", "linux/arm64"]
queue = "builds"
priority_class = "batch-low"
managed_by = "kueue.x-k8s.io/multikueue"
resources = {{ requests = {{ cpu = "1", memory = "2Gi" }} }}
"#,
            host = self.registry.host,
            a = a.display(),
            b = b.display(),
            c = c.display(),
            template = dir.join("linux.yaml").display(),
        )
    }
}

struct InProcess {
    monitor: Arc<Monitor>,
    ledger: Ledger,
    config: Arc<Config>,
    stop: CancellationToken,
}

fn assemble(fleet: &Fleet) -> InProcess {
    let path = fleet.dir.path().join("config.toml");
    let config = Arc::new(Config::parse(&path, &fleet.config()).unwrap_or_else(|e| panic!("{e}")));
    let ledger = Ledger::open(&fleet.dir.path().join("state.db")).unwrap();
    let monitor = Parts::new(config.clone(), ledger.clone(), Clock::System, None).unwrap().monitor;
    let clusters = Clusters {
        default: None,
        pools: [("a", &fleet.a), ("b", &fleet.b), ("c", &fleet.c)]
            .into_iter()
            .map(|(name, double)| (name.to_string(), double.client()))
            .collect(),
        waiting: None,
    };
    let stop = CancellationToken::new();
    let backends = Backends::for_config(&config, clusters, stop.clone()).unwrap();
    let runner = Arc::new(Runner::new(config.clone(), ledger.clone(), Clock::System, backends));
    tokio::spawn(runner.run(stop.clone()));
    InProcess { monitor, ledger, config, stop }
}

async fn until<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + support::PATIENCE;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn action(ledger: &Ledger, image: &str, change: usize) -> Option<ActionRecord> {
    // In the order their changes were recorded (the watch's sequence): two checks a test makes
    // within one second record their actions with the same `created`.
    let changes = ledger.changes(None, 100).await.unwrap();
    let order = |a: &ActionRecord| changes.iter().find(|c| c.id == a.change).map(|c| (c.detected, c.seq));
    let mut of_image: Vec<ActionRecord> =
        ledger.actions(100).await.unwrap().into_iter().filter(|a| a.image == image).collect();
    of_image.sort_by_key(|a| (order(a), a.created));
    of_image.into_iter().nth(change)
}

fn pool_of(record: &ActionRecord) -> Option<String> {
    record.progress.as_ref()?.build().map(|b| b.pool.clone())
}

fn only(double: &KubeDouble, plural: &str) -> Value {
    let objects = double.list(plural);
    assert_eq!(objects.len(), 1, "{objects:#?}");
    objects[0].clone()
}

#[tokio::test]
async fn builds_go_to_the_pool_of_their_platform_pass_over_a_down_cluster_and_wait_queued() {
    let fleet = Fleet::new().await;
    fleet.pusher.push_index("demo/run", "latest", &[Image::new("amd64")], Format::Oci).await;
    let v1 = BuilderSpec::jammy(&fleet.run);
    fleet.push_builder(&v1).await;
    fleet.push_apps().await;
    let p = assemble(&fleet);
    assert!(p.monitor.run_once().await);

    // A builder change: the amd64 app builds in pool a, the Windows app in pool b (kpack).
    let v2 = v1.bump("paketo-buildpacks/java", "18.2.0");
    fleet.push_builder(&v2).await;
    assert!(p.monitor.run_once().await);
    let job = until("web's Job in pool a", async || fleet.a.list("jobs").into_iter().next()).await;
    let build = until("desktop's Build in pool b", async || fleet.b.list("builds").into_iter().next()).await;
    let web = action(&p.ledger, "web", 0).await.unwrap();
    let desktop = action(&p.ledger, "desktop", 0).await.unwrap();
    assert_eq!(job["metadata"]["name"], web.key);
    assert_eq!(build["metadata"]["name"], desktop.key);
    assert_eq!(job["metadata"]["annotations"]["buildermonitor.dev/pool"], "a");
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"], json!({ "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64" }));
    // The pool's pod template under the build pod: tolerations appended, the sidecar beside it,
    // the build container tuned but still running the pinned builder's creator.
    assert_eq!(
        pod["tolerations"],
        json!([{ "key": "spot", "operator": "Exists" }, { "key": "builds", "operator": "Exists" }])
    );
    let names: Vec<&str> = pod["containers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["build", "mirror"]);
    assert_eq!(pod["containers"][0]["resources"]["limits"]["memory"], "8Gi");
    assert_eq!(pod["containers"][0]["command"], json!(["/cnb/lifecycle/creator"]));
    assert_eq!(pod["containers"][0]["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(build["spec"]["nodeSelector"], json!({ "kubernetes.io/arch": "amd64" }), "kpack sets the os itself");
    assert!(fleet.c.list("jobs").is_empty() && fleet.a.list("builds").is_empty() && fleet.b.list("jobs").is_empty());
    assert_eq!((pool_of(&web).as_deref(), pool_of(&desktop).as_deref()), (Some("a"), Some("b")));
    // No pool builds linux/arm/v7: the action fails naming the platform, and nothing is created.
    let kiosk = until("kiosk's failure", async || {
        action(&p.ledger, "kiosk", 0).await.filter(|a| a.state == ActionState::Failed)
    })
    .await;
    assert_eq!(
        kiosk.detail.as_deref(),
        Some(
            "no pool builds linux/arm/v7 (pools: a [linux/amd64], b [windows/amd64], c [linux/amd64, linux/arm64]): add the platform to a pool's platforms, or name the pool with [[images]] pool"
        )
    );
    assert_eq!(pool_of(&kiosk), None);

    fleet.a.set_status(
        "jobs",
        Some("builds"),
        &web.key,
        json!({ "succeeded": 1, "conditions": [{ "type": "Complete", "status": "True" }] }),
    );
    fleet.b.set_status(
        "builds",
        Some("builds"),
        &desktop.key,
        json!({ "conditions": [{ "type": "Succeeded", "status": "True" }] }),
    );
    until("both builds recorded", async || {
        let done = |a: Option<ActionRecord>| a.is_some_and(|a| a.state == ActionState::Succeeded);
        (done(action(&p.ledger, "web", 0).await) && done(action(&p.ledger, "desktop", 0).await)).then_some(())
    })
    .await;
    let succeeded: Vec<_> = p
        .ledger
        .events_after(0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .filter(|e| e.event_type == EventType::BuildSucceeded)
        .collect();
    let pools: Vec<(String, Option<String>)> = succeeded
        .iter()
        .map(|e| e.action.as_ref().unwrap())
        .map(|a| (a.image.clone(), a.result.build().and_then(|b| b.pool.clone())))
        .collect();
    assert!(
        pools.contains(&("web".into(), Some("a".into()))) && pools.contains(&("desktop".into(), Some("b".into()))),
        "{pools:?}"
    );

    // Pool a's API server goes away: web's next build goes to pool c, which serves amd64 too.
    fleet.a.go_down().await;
    fleet.push_builder(&v2.bump("paketo-buildpacks/java", "18.3.0")).await;
    assert!(p.monitor.run_once().await);
    let queued = until("web's Job in pool c", async || fleet.c.list("jobs").into_iter().next()).await;
    let web = action(&p.ledger, "web", 1).await.unwrap();
    assert_eq!(queued["metadata"]["name"], web.key);
    let labels = &queued["metadata"]["labels"];
    assert_eq!(labels["kueue.x-k8s.io/queue-name"], "builds");
    assert_eq!(labels["kueue.x-k8s.io/priority-class"], "batch-low");
    assert_eq!(queued["spec"]["managedBy"], "kueue.x-k8s.io/multikueue");
    assert_eq!(queued["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"], "1");
    assert_eq!(queued["spec"]["suspend"], true, "Kueue holds it");

    // Held by Kueue: `queued` in status and in pool c; admitted: `running`.
    let shown = async |state: &str| {
        let (open, _) = builder_monitor::status::open_actions(&p.config, &p.ledger, chrono::Utc::now()).await.unwrap();
        let web = open.into_iter().find(|o| o.image == "web")?;
        (web.shown_state() == state).then(|| serde_json::to_value(&web).unwrap())
    };
    let seen = until("web shown queued", async || shown("queued").await).await;
    assert_eq!(seen["pool"], "c");
    // One state wherever the action is listed: recent actions and the image's last action too.
    let status = builder_monitor::status::collect(&p.config, &p.ledger, 10).await.unwrap();
    let status = serde_json::to_value(&status).unwrap();
    let listed: Vec<&Value> =
        status["actions"].as_array().unwrap().iter().filter(|a| a["key"] == web.key.as_str()).collect();
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!(listed[0]["state"], "queued", "{:#}", listed[0]);
    let image = status["images"].as_array().unwrap().iter().find(|i| i["name"] == "web").unwrap();
    assert_eq!(image["last_action"]["state"], "queued", "{image:#}");
    fleet.c.admit_job("builds", &web.key, &[("cloud.google.com/gke-spot", "true")]);
    until("web shown running", async || shown("running").await).await;
    assert_eq!(pool_of(&action(&p.ledger, "web", 1).await.unwrap()).as_deref(), Some("c"), "recorded as such");
    let desktop_build = until("desktop's second Build", async || {
        fleet.b.list("builds").into_iter().find(|b| b["metadata"]["name"] != desktop.key)
    })
    .await;
    assert!(fleet.c.list("builds").is_empty());

    fleet.c.set_status(
        "jobs",
        Some("builds"),
        &web.key,
        json!({ "succeeded": 1, "conditions": [{ "type": "Complete", "status": "True" }] }),
    );
    let name = desktop_build["metadata"]["name"].as_str().unwrap().to_string();
    fleet.b.set_status(
        "builds",
        Some("builds"),
        &name,
        json!({ "conditions": [{ "type": "Succeeded", "status": "True" }] }),
    );
    let web = until("web's second build recorded", async || {
        action(&p.ledger, "web", 1).await.filter(|a| a.state == ActionState::Succeeded)
    })
    .await;
    assert_eq!(pool_of(&web).as_deref(), Some("c"));
    p.stop.cancel();
}

/// A daemon whose only build cluster is a pool of its own (no `[kubernetes]` client at all).
fn daemon_config(fleet: &Fleet, dir: &Path) -> std::path::PathBuf {
    let kubeconfig = fleet.b.kubeconfig_named(dir, "remote");
    let text = format!(
        r#"[monitor]
state = "state.db"
interval = "200ms"
jitter = "0s"

[[builders]]
name = "jammy"
image = "{host}/demo/builder:latest"

[[images]]
name = "web"
builder = "jammy"
image = "{host}/apps/web:latest"
policy = "rebuild"
source = {{ git = "https://example.com/web.git", revision = "main" }}

[runner]
type = "kubernetes"

[[runner.pools]]
name = "remote"
kubeconfig = "{kubeconfig}"
context = "remote"
namespace = "builds"
"#,
        host = fleet.registry.host,
        kubeconfig = kubeconfig.display()
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

// The daemon's log is read by blocking calls while the in-process API doubles serve: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_in_a_second_cluster_is_found_there_after_a_sigkill() {
    let fleet = Fleet::new().await;
    fleet.pusher.push_index("demo/run", "latest", &[Image::new("amd64")], Format::Oci).await;
    let v1 = BuilderSpec::jammy(&fleet.run);
    fleet.push_builder(&v1).await;
    fleet.push_apps().await;
    let ws = Workspace::new();
    let config = daemon_config(&fleet, ws.dir.path());
    let mut daemon = Daemon::start(&config);
    daemon.wait_for_event("builder.pinned");
    fleet.push_builder(&v1.bump("paketo-buildpacks/java", "18.2.0")).await;
    daemon.wait_for("the Job", |v| v["message"] == "Job created" && v["pool"] == "remote");
    daemon.kill();
    let job = only(&fleet.b, "jobs");
    let name = job["metadata"]["name"].as_str().unwrap().to_string();
    let uid = job["metadata"]["uid"].clone();

    let mut daemon = Daemon::start(&config);
    daemon.wait_for("the Job found again", |v| {
        v["message"] == "Job exists already (a retry or restart); following it" && v["pool"] == "remote"
    });
    fleet.b.set_status(
        "jobs",
        Some("builds"),
        &name,
        json!({ "succeeded": 1, "conditions": [{ "type": "Complete", "status": "True" }] }),
    );
    daemon.wait_for("the outcome", |v| v["message"] == "action succeeded");
    let (status, _) = daemon.terminate();
    assert!(status.success());
    assert_eq!(only(&fleet.b, "jobs")["metadata"]["uid"], uid, "found, not created again");
    assert!(fleet.a.list("jobs").is_empty() && fleet.c.list("jobs").is_empty());
    let ledger = Ledger::open(&ws.dir.path().join("state.db")).unwrap();
    let succeeded: Vec<_> = ledger
        .events_after(0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .filter(|e| e.event_type == EventType::BuildSucceeded)
        .collect();
    assert_eq!(succeeded.len(), 1);
    assert_eq!(succeeded[0].action.as_ref().unwrap().result.build().and_then(|b| b.pool.as_deref()), Some("remote"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_spec_and_rbac_show_each_pool() {
    let fleet = Fleet::new().await;
    fleet.pusher.push_index("demo/run", "latest", &[Image::new("amd64")], Format::Oci).await;
    fleet.push_builder(&BuilderSpec::jammy(&fleet.run)).await;
    fleet.push_apps().await;
    let ws = Workspace::new();
    let config = ws.path("config.toml");
    let full = fleet.config();
    let no_pools = full[..full.find("[runner]").unwrap()].to_string();
    std::fs::write(&config, no_pools).unwrap();
    let config = config.to_str().unwrap();
    // Pins first, with no runner, so nothing is created.
    let out = run_with_env(&["run", "--once", "--config", config], &[], ws.dir.path());
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    std::fs::write(config, full).unwrap();

    let spec = |image: &str, pool: Option<&str>| {
        let mut args =
            vec!["build-spec", "--config", config, "--image", image, "--action", "rebuild", "--output", "json"];
        if let Some(pool) = pool {
            args.extend(["--pool", pool]);
        }
        let out = run_with_env(&args, &[], ws.dir.path());
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        serde_json::from_str::<Value>(&out.stdout).unwrap()
    };
    let web = spec("web", None);
    assert_eq!(
        (web["kind"].as_str(), web["metadata"]["annotations"]["buildermonitor.dev/pool"].as_str()),
        (Some("Job"), Some("a"))
    );
    let desktop = spec("desktop", None);
    assert_eq!(
        (desktop["kind"].as_str(), desktop["metadata"]["annotations"]["buildermonitor.dev/pool"].as_str()),
        (Some("Build"), Some("b"))
    );
    let queued = spec("web", Some("c"));
    assert_eq!(queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "builds");
    assert_eq!(queued["spec"]["managedBy"], "kueue.x-k8s.io/multikueue");
    assert_eq!(
        queued["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/arch"], "amd64",
        "by the app's platform"
    );
    let out = run_with_env(
        &["build-spec", "--config", config, "--image", "web", "--action", "rebuild", "--pool", "z"],
        &[],
        ws.dir.path(),
    );
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("no pool named \"z\" (configured: a, b, c)"), "{}", out.stderr);

    let out = run_with_env(&["rbac", "--config", config, "--pool", "b", "--output", "json"], &[], ws.dir.path());
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let objects: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    let role = objects.iter().find(|o| o["kind"] == "Role").unwrap();
    assert_eq!(role["metadata"]["namespace"], "builds");
    assert_eq!(role["rules"][0]["apiGroups"], json!(["kpack.io"]));
    // The pools have clusters of their own: the default one needs nothing of them.
    let out = run_with_env(&["rbac", "--config", config], &[], ws.dir.path());
    assert!(!out.stdout.contains("jobs") && !out.stdout.contains("kpack"), "{}", out.stdout);

    // Without pool b, no pool builds the Windows app: `check` says so before any build fails.
    let text = std::fs::read_to_string(config).unwrap();
    let start = text.find("[[runner.pools]]\nname = \"b\"").unwrap();
    let end = start + text[start..].find("\n\n").unwrap();
    let without_b = ws.path("without-b.toml");
    std::fs::write(&without_b, format!("{}{}", &text[..start], &text[end..])).unwrap();
    let out = run_with_env(&["check", "--config", without_b.to_str().unwrap()], &[], ws.dir.path());
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("warning: image \"desktop\"")
            && out
                .stderr
                .contains("no pool builds windows/amd64 (pools: a [linux/amd64], c [linux/amd64, linux/arm64])"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("image \"web\""), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_missing_a_permission_in_its_cluster_stops_the_start_naming_it() {
    let fleet = Fleet::new().await;
    fleet.pusher.push_index("demo/run", "latest", &[Image::new("amd64")], Format::Oci).await;
    fleet.push_builder(&BuilderSpec::jammy(&fleet.run)).await;
    fleet.b.deny("create", "batch", "jobs");
    let ws = Workspace::new();
    let config = daemon_config(&fleet, ws.dir.path());
    let out = run_with_env(&["run", "--once", "--config", config.to_str().unwrap()], &[], ws.dir.path());
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("pool \"remote\": missing permission in namespace \"builds\": create jobs.batch"),
        "{}",
        out.stderr
    );
}

/// The issue "Close what an attack on deploys, Git write-back and pod templates found", item 7:
/// `check` exits 2 on a pool's template with a sidecar mounting the registry credentials' Secret
/// under a volume name of its own and an init container running as root, and on an image's
/// template that takes the pull Secret into its environment; each line names the file, the field,
/// why and the fix. The same sidecar made restricted, without the Secret, passes.
#[test]
fn check_refuses_a_template_reaching_the_credentials_or_root() {
    let ws = Workspace::new();
    std::fs::create_dir(ws.path("templates")).unwrap();
    let pool_template = ws.path("templates/linux.yaml");
    let image_template = ws.path("templates/web.yaml");
    let restricted = "securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: [ALL] } }";
    std::fs::write(
        &pool_template,
        format!(
            "spec:
  volumes:
  - {{ name: creds, secret: {{ secretName: regcred }} }}
  initContainers:
  - {{ name: certs, image: 'busybox:1', securityContext: {{ runAsUser: 0, allowPrivilegeEscalation: false, capabilities: {{ drop: [ALL] }} }} }}
  containers:
  - {{ name: mirror, image: 'mirror:2', {restricted}, volumeMounts: [{{ name: creds, mountPath: /creds }}] }}
"
        ),
    )
    .unwrap();
    std::fs::write(
        &image_template,
        format!(
            "spec:
  containers:
  - {{ name: agent, image: 'agent:1', {restricted}, env: [{{ name: PULL, valueFrom: {{ secretKeyRef: {{ name: mirror-pull, key: .dockerconfigjson }} }} }}] }}
"
        ),
    )
    .unwrap();
    let config = ws.config(
        r#"[monitor]
state = "state.db"

[[builders]]
name = "jammy"
image = "127.0.0.1:9/demo/builder:latest"

[[images]]
name = "web"
builder = "jammy"
image = "127.0.0.1:9/apps/web:latest"
policy = "rebuild"
source = { git = "https://example.com/web.git", revision = "main" }
pool = "linux"
pod_template = "templates/web.yaml"

[runner]
type = "kubernetes"

[[runner.pools]]
name = "linux"
namespace = "builds"
docker_config_secret = "regcred"
image_pull_secrets = ["mirror-pull"]
pod_template = "templates/linux.yaml"
"#,
    );
    let config = config.to_str().unwrap();
    let out = ws.run(&["check", "--config", config]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    let (pool_file, image_file) = (pool_template.display(), image_template.display());
    for line in [
        format!(
            "pod_template {pool_file}: spec.volumes[name=creds].secret.secretName: it reaches the build's registry credentials (the build mounts them into its own container only); remove it, or set allow_privileged = true on the pool"
        ),
        format!(
            "pod_template {pool_file}: spec.initContainers[name=certs].securityContext.runAsUser: Pod Security \"restricted\" refuses it: 0 runs as root; remove it, or set allow_privileged = true on the pool"
        ),
        format!(
            "pod_template {image_file}: spec.containers[name=agent].env[name=PULL].valueFrom.secretKeyRef: it reaches the build's registry credentials; remove it, or set allow_privileged = true on the pool"
        ),
    ] {
        assert!(out.stderr.contains(&line), "no {line:?} in\n{}", out.stderr);
    }
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);

    // Restricted and without the Secret, the same sidecar is a template `check` takes.
    std::fs::write(
        &pool_template,
        format!("spec:\n  containers:\n  - {{ name: mirror, image: 'mirror:2', {restricted} }}\n"),
    )
    .unwrap();
    std::fs::write(&image_template, "spec:\n  containers:\n  - { name: build, env: [{ name: A, value: b }] }\n")
        .unwrap();
    // The default cluster the pool builds on (`check` builds its client, it never calls it).
    let cluster = ws.path("kubeconfig");
    std::fs::write(
        &cluster,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:9\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: stand-in\n",
    )
    .unwrap();
    let out = support::daemon::run_with_env(
        &["check", "--config", config],
        &[("KUBECONFIG", cluster.to_str().unwrap())],
        ws.dir.path(),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}
