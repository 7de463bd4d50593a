//! The Kubernetes runner's Jobs on the real control plane (`support::control_plane`), in a
//! namespace that enforces (and warns at) Pod Security `restricted`: the Job of each pool (one
//! with a pod template of its own, one queued through Kueue) is accepted with
//! `fieldValidation=Strict` (as the runner creates it: `builder_monitor::runner::strict`) and no
//! warning, a field the server does not know is refused naming it, and the server's warnings are
//! returned; and the daemon follows the Jobs it creates to success and to failure as the node
//! agent ends their pods, logs what the server warned about, and deletes the finished Jobs' pods.

use crate::support;

use std::path::PathBuf;

use serde_json::{Value, json};

use builder_monitor::ledger::{ActionState, Ledger};
use builder_monitor::runner::strict;
use support::cnb::BuilderSpec;
use support::control_plane::{ENFORCE, TestNamespace, control_plane};
use support::daemon::{Daemon, Workspace};
use support::images::{Format, Image, Pusher};
use support::registry::TestRegistry;

/// The annotation by which the node agent ends a Job's pod with an exit code.
const EXIT_CODE: &str = "fake-kubelet.builder-monitor.test/exit-code";
/// A node label the server warns about (deprecated since Kubernetes 1.14).
const DEPRECATED: &str = "beta.kubernetes.io/arch";

struct World {
    _registry: TestRegistry,
    ns: TestNamespace,
    pusher: Pusher,
    ws: Workspace,
    config: PathBuf,
    run: String,
}

impl World {
    /// A builder and two apps (`good`, and `bad`, whose pod template has the node agent end its
    /// build with exit code 3), built by pool `a` (a pod template adding a mirror container and a
    /// toleration) or pool `c` (through a Kueue queue), both in a new namespace that enforces and
    /// warns at `restricted`. Pinned by one `run --once` with no runner.
    async fn new() -> Self {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let host = registry.host.clone();
        let run = format!("{host}/demo/run:latest");
        pusher.push_index("demo/run", "latest", &[Image::new("amd64")], Format::Oci).await;
        pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run).image(), Format::Oci).await;
        for app in ["good", "bad"] {
            pusher
                .push_image(&format!("apps/{app}"), Some("latest"), &Image::new("amd64").salt(app), Format::Oci)
                .await;
        }
        let ns = control_plane().namespace("jobs").await;
        let namespaces = ns.api("v1", "Namespace").await;
        let labels =
            json!({"metadata": {"labels": {ENFORCE: "restricted", "pod-security.kubernetes.io/warn": "restricted"}}});
        namespaces
            .patch(&ns.name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&labels))
            .await
            .expect("label the namespace");
        ns.create(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder"}})).await;
        let ws = Workspace::new();
        std::fs::write(
            ws.path("linux.yaml"),
            "spec:\n  tolerations:\n  - key: spot\n    operator: Exists\n  containers:\n  - name: build\n    resources:\n      limits:\n        memory: 8Gi\n  - name: mirror\n    image: registry.example.com/mirror:2\n    securityContext:\n      allowPrivilegeEscalation: false\n      capabilities:\n        drop: [ALL]\n",
        )
        .unwrap();
        // `bad` also selects its node by the label deprecated since 1.14: the server warns.
        std::fs::write(
            ws.path("bad.yaml"),
            format!(
                "metadata:\n  annotations:\n    {EXIT_CODE}: \"3\"\nspec:\n  nodeSelector:\n    {DEPRECATED}: amd64\n"
            ),
        )
        .unwrap();
        let images: String = ["good", "bad"]
            .iter()
            .map(|app| {
                let template = if *app == "bad" { "pod_template = \"bad.yaml\"\n" } else { "" };
                format!(
                    "[[images]]\nname = \"{app}\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/{app}:latest\"\n\
                     policy = \"rebuild\"\nsource = {{ git = \"https://example.com/{app}.git\", revision = \"main\" }}\n\
                     {template}\n"
                )
            })
            .collect();
        let config = ws.config(&format!(
            "[monitor]\nstate = \"state.db\"\ninterval = \"200ms\"\njitter = \"0s\"\n\n\
             [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n{images}"
        ));
        let pinned = ws.run(&["run", "--once", "--config", config.to_str().unwrap()]);
        assert_eq!(pinned.code, Some(0), "{}", pinned.stderr);
        let kubeconfig = ns.kubeconfig.display();
        let text = std::fs::read_to_string(&config).unwrap()
            + &format!(
                "[runner]\ntype = \"kubernetes\"\nmax_concurrent = 4\nmax_attempts = 1\n\n\
                 [[runner.pools]]\nname = \"a\"\nkubeconfig = \"{kubeconfig}\"\nnamespace = \"{ns}\"\n\
                 platforms = [\"linux/amd64\"]\nservice_account = \"builder\"\n\
                 tolerations = [{{ key = \"builds\", operator = \"Exists\" }}]\npod_template = \"{template}\"\n\
                 docker_config_secret = \"registry-credentials\"\n\n\
                 [[runner.pools]]\nname = \"c\"\nkubeconfig = \"{kubeconfig}\"\nnamespace = \"{ns}\"\n\
                 platforms = [\"linux/amd64\", \"linux/arm64\"]\nqueue = \"builds\"\npriority_class = \"batch-low\"\n\
                 managed_by = \"kueue.x-k8s.io/multikueue\"\nresources = {{ requests = {{ cpu = \"1\", memory = \"2Gi\" }} }}\n",
                ns = ns.name,
                template = ws.path("linux.yaml").display(),
            );
        std::fs::write(&config, text).unwrap();
        World { _registry: registry, ns, pusher, ws, config, run }
    }

    /// The Job the runner would create for `image`'s rebuild in `pool` (`build-spec`).
    fn spec(&self, image: &str, pool: &str) -> Value {
        let config = self.config.to_str().unwrap();
        let out = self.ws.run(&[
            "build-spec",
            "--config",
            config,
            "--image",
            image,
            "--action",
            "rebuild",
            "--output",
            "json",
            "--pool",
            pool,
        ]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        serde_json::from_str(&out.stdout).unwrap()
    }

    /// Creates `job` as NAME as the runner does (`fieldValidation=Strict`): the server's warnings,
    /// or its refusal.
    async fn create_strictly(&self, mut job: Value, name: &str) -> Result<Vec<String>, kube::Error> {
        job["metadata"]["name"] = json!(name);
        job["metadata"]["namespace"] = json!(self.ns.name);
        strict::create(&self.ns.api("batch/v1", "Job").await, &job).await
    }
}

/// Each pool's Job, exactly as the runner builds it, is accepted by the real server with
/// `fieldValidation=Strict` (no field it does not know), and Pod Security `restricted` has no
/// warning for it; the unqueued one's pods are admitted under `enforce` and run to completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_pools_job_is_accepted_strictly_and_restricted_without_warnings() {
    let w = World::new().await;
    for (image, pool) in [("good", "a"), ("bad", "a"), ("good", "c")] {
        let job = w.spec(image, pool);
        assert_eq!(job["kind"], "Job", "{job}");
        assert_eq!(job["metadata"]["annotations"]["buildermonitor.dev/pool"], pool, "{job}");
        let name = format!("strict-{image}-{pool}");
        let warnings = w.create_strictly(job, &name).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        if image == "bad" {
            // Only the deprecated node label its template sets: nothing of the daemon's own.
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(warnings[0].starts_with(&format!("spec.template.spec.nodeSelector[{DEPRECATED}]")), "{warnings:?}");
        } else {
            assert!(warnings.is_empty(), "{name}: {warnings:?}");
        }
    }
    // The checks can fail: a field the server does not know is refused, named in the runner's
    // error; a pod that is not restricted is warned about.
    let mut unknown = w.spec("good", "a");
    unknown["spec"]["template"]["spec"]["containers"][0]["buildCache"] = json!(true);
    let refused = w.create_strictly(unknown, "strict-unknown").await.expect_err("an unknown field is refused");
    assert!(matches!(&refused, kube::Error::Api(s) if s.code == 400), "{refused}");
    let error = strict::refusal("Job", "strict-unknown", refused).to_string();
    assert!(
        error.starts_with("the cluster refused Job strict-unknown: it does not know \"spec.template.spec.containers[0].buildCache\" (created with fieldValidation=Strict"),
        "{error}"
    );
    assert!(w.ns.get("batch/v1", "Job", "strict-unknown").await.is_none());
    let mut lax = w.spec("good", "a");
    lax["spec"]["template"]["spec"]["containers"][0].as_object_mut().unwrap().remove("securityContext");
    let warnings = w.create_strictly(lax, "strict-lax").await.expect("accepted, with a warning");
    assert!(warnings.iter().any(|w| w.contains("restricted")), "{warnings:?}");

    let queued = w.ns.get("batch/v1", "Job", "strict-good-c").await.unwrap();
    assert_eq!(queued["spec"]["managedBy"], "kueue.x-k8s.io/multikueue", "{queued}");
    let done = |j: &Value| {
        j["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Complete" && c["status"] == "True"))
    };
    let job = w.ns.wait_for("batch/v1", "Job", "strict-good-a", done).await;
    assert_eq!(job["status"]["succeeded"], 1, "{}", job["status"]);
}

/// A builder change starts both apps' rebuilds in pool `a`: the runner creates their Jobs in the
/// restricted namespace, the node agent ends `good`'s pod with 0 and `bad`'s with 3, and the
/// daemon records `build.succeeded` for one and `build.failed` for the other, as the Jobs'
/// conditions on the server say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_follows_its_jobs_to_success_and_failure() {
    let w = World::new().await;
    let mut daemon = Daemon::start(&w.config);
    let v1 = BuilderSpec::jammy(&w.run);
    w.pusher
        .push_image("demo/builder", Some("latest"), &v1.bump("paketo-buildpacks/java", "18.2.0").image(), Format::Oci)
        .await;
    let first = daemon.wait_for("an outcome", |v| {
        v["target"] == "builder_monitor_core::event"
            && matches!(v["event_type"].as_str(), Some("build.succeeded" | "build.failed"))
    });
    let second = daemon.wait_for("the other outcome", |v| {
        v["target"] == "builder_monitor_core::event"
            && matches!(v["event_type"].as_str(), Some("build.succeeded" | "build.failed"))
    });
    let (status, log) = daemon.terminate();
    assert!(status.success());
    let failed = [&first, &second].into_iter().find(|e| e["event_type"] == "build.failed").unwrap();
    assert!(failed["message"].as_str().unwrap().contains("BackoffLimitExceeded"), "the Job's reason: {failed}");
    let outcome = |app: &str| {
        [&first, &second]
            .into_iter()
            .map(|line| serde_json::from_str::<Value>(line["event"].as_str().unwrap()).unwrap())
            .find(|e| e["action"]["image"] == app)
            .map(|e| (e["type"].clone(), e["action"]["pool"].clone()))
    };
    assert_eq!(outcome("good"), Some((json!("build.succeeded"), json!("a"))), "{first}\n{second}");
    assert_eq!(outcome("bad"), Some((json!("build.failed"), json!("a"))), "{first}\n{second}");

    let ledger = Ledger::open_read_only(&w.ws.path("state.db")).unwrap();
    let actions = ledger.actions(10).await.unwrap();
    for (app, state) in [("good", ActionState::Succeeded), ("bad", ActionState::Failed)] {
        let action = actions.iter().find(|a| a.image == app).unwrap_or_else(|| panic!("{app}: {actions:?}"));
        assert_eq!(action.state, state, "{action:?}");
        let job = w.ns.get("batch/v1", "Job", &action.key).await.unwrap_or_else(|| panic!("{app}'s Job"));
        let condition = if app == "good" { "Complete" } else { "Failed" };
        let conditions = job["status"]["conditions"].as_array().cloned().unwrap_or_default();
        assert!(conditions.iter().any(|c| c["type"] == condition && c["status"] == "True"), "{app}: {conditions:?}");
        assert_eq!(job["metadata"]["annotations"]["buildermonitor.dev/pool"], "a");
        // The server's warning about bad's Job, in the daemon's log; none about good's.
        let warned: Vec<&String> = log
            .iter()
            .filter(|l| l.contains("the cluster warns about the Job it accepted") && l.contains(action.key.as_str()))
            .collect();
        if app == "bad" {
            assert_eq!(warned.len(), 1, "{log:#?}");
            assert!(warned[0].contains(&format!("spec.template.spec.nodeSelector[{DEPRECATED}]")), "{}", warned[0]);
        } else {
            assert!(warned.is_empty(), "{warned:?}");
        }
        // Its pods deleted once it finished (the Job stays, with its status).
        no_pods_left(&w.ns, &job).await;
    }
}

/// Waits until no pod of `job` (by its uid) is left: each one listed now is deleted.
pub async fn no_pods_left(ns: &TestNamespace, job: &Value) {
    let pods = ns.api("v1", "Pod").await;
    let selector = format!("batch.kubernetes.io/controller-uid={}", job["metadata"]["uid"].as_str().unwrap());
    let listed = pods.list(&kube::api::ListParams::default().labels(&selector)).await.unwrap();
    for pod in listed.items {
        let (name, uid) = (pod.metadata.name.unwrap(), pod.metadata.uid.unwrap());
        let gone = kube::runtime::wait::await_condition(
            pods.clone(),
            &name,
            kube::runtime::wait::conditions::is_deleted(&uid),
        );
        tokio::time::timeout(support::PATIENCE, gone)
            .await
            .unwrap_or_else(|_| panic!("pod {name} of Job {} still there", job["metadata"]["name"]))
            .unwrap();
    }
}
