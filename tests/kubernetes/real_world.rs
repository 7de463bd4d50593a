//! What the deploy tests on the real control plane (`real_deploy`, `real_workloads`) share: a
//! registry with run image v1, a builder naming it and apps built on it, each running in a
//! workload of its name in a namespace of its own, rolled out by the real controllers, and a
//! config deploying them in waves with `[runner] type = "none"` (rebases in the registry), pinned
//! by one `run --once`; and what the tests read back (the CLI, the ledger's events, the tags, the
//! workloads as the server holds them).

use crate::support;

use std::path::PathBuf;

use serde_json::{Value, json};

use builder_monitor::ledger::Ledger;
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor_core::reference::ImageRef;
use support::app::{self, App, RunImage};
use support::cnb::BuilderSpec;
use support::control_plane::{TestNamespace, control_plane};
use support::images::{Format, Pusher};
use support::registry::TestRegistry;

/// The apps of a world: (name, wave, the kind of workload it runs in, of its name).
pub type Apps = [(&'static str, u32, &'static str)];

pub struct RealWorld {
    _registry: TestRegistry,
    pub ns: TestNamespace,
    pusher: Pusher,
    pub ws: support::daemon::Workspace,
    pub config: PathBuf,
    pub host: String,
    apps: &'static Apps,
    /// Each app's digest as built, on run image v1, by name.
    built: Vec<(String, String)>,
}

impl RealWorld {
    /// Run image v1, a builder naming it, `apps` built on it, each running in the workload
    /// `object(kind, name, image)` makes (the app's `…/apps/NAME@sha256:…` its image) in a new
    /// namespace `PREFIX-N`, rolled out by the real controllers; `extra` is appended to the
    /// config. One `run --once` pins everything.
    pub async fn start(
        prefix: &str,
        apps: &'static Apps,
        extra: &str,
        object: impl Fn(&str, &str, &str) -> Value,
    ) -> Self {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let host = registry.host.clone();
        let run_tag = format!("{host}/demo/run:latest");
        let run_v1 = RunImage::jammy("1", 3);
        let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
        pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
        let ns = control_plane().namespace(prefix).await;
        let ws = support::daemon::Workspace::new();
        let mut images = String::new();
        let mut built = Vec::new();
        for &(name, wave, kind) in apps {
            let app = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest)).label("app", name);
            let digest =
                app::push_app(&pusher, &format!("apps/{name}"), Some("latest"), &app, Format::Oci).await.digest;
            ns.create(object(kind, name, &format!("{host}/apps/{name}@{digest}"))).await;
            built.push((name.to_string(), digest));
            images += &format!(
                "[[images]]\nname = \"{name}\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/{name}:latest\"\n\
                 wave = {wave}\ndeploy = [{{ kind = \"{kind}\", namespace = \"{}\", name = \"{name}\" }}]\n\n",
                ns.name
            );
        }
        // The controllers make a fleet's pods at their own pace (their client's QPS): a second
        // more of patience per 10 workloads.
        let patience = support::PATIENCE + std::time::Duration::from_millis(100) * apps.len() as u32;
        for &(name, _, kind) in apps {
            ns.wait_for_within(patience, api_version(kind), kind, name, |o| rolled_out(kind, o)).await;
        }
        let config = ws.config(&format!(
            "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
             [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n{images}\
             [runner]\ntype = \"none\"\nrebase = \"registry\"\nmax_attempts = 1\n\n\
             [kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"{}\"\n\n{extra}",
            ns.kubeconfig.display(),
            ns.name
        ));
        let world = RealWorld { _registry: registry, ns, pusher, ws, config, host, apps, built };
        let first = world.cli(&["run", "--once"]);
        assert_eq!(first.code, Some(0), "{}", first.stderr);
        world
    }

    pub fn cli(&self, args: &[&str]) -> support::daemon::Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--config", self.config.to_str().unwrap()]);
        self.ws.run(&all)
    }

    pub fn ledger(&self) -> Ledger {
        Ledger::open_read_only(&self.ws.path("state.db")).unwrap()
    }

    /// Every event recorded, in order: (type, image).
    pub async fn events(&self) -> Vec<(String, String)> {
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
    pub fn shown(&self, image: &str) -> Vec<Value> {
        let out = self.cli(&["status", "--json"]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let status: Value = serde_json::from_str(&out.stdout).unwrap();
        status["deploys"].as_array().unwrap().iter().filter(|d| d["image"] == image).cloned().collect()
    }

    /// Run image v2 pushed to the run tag: every app's rebase is due.
    pub async fn move_run_image(&self) {
        app::push_run(&self.pusher, "demo/run", Some("latest"), &RunImage::jammy("2", 4), Format::Oci).await;
    }

    /// App NAME's digest as built on run image v1.
    pub fn built(&self, app: &str) -> String {
        self.built.iter().find(|(n, _)| n == app).map(|(_, d)| d.clone()).unwrap()
    }

    pub fn reference(&self, app: &str, digest: &str) -> String {
        format!("{}/apps/{app}@{digest}", self.host)
    }

    /// The digest app NAME's tag holds now.
    pub async fn tag(&self, app: &str) -> String {
        builder_monitor::install_crypto_provider();
        let registry = Registry::new([], Metrics::new());
        let tag = ImageRef::parse(&format!("{}/apps/{app}:latest", self.host)).unwrap();
        registry.head_manifest(&tag).await.unwrap().digest
    }

    /// The kind of workload app NAME runs in.
    pub fn kind_of(&self, name: &str) -> &'static str {
        self.apps.iter().find(|(n, _, _)| *n == name).map(|(_, _, k)| *k).unwrap()
    }

    /// The workload of app NAME as the server holds it.
    pub async fn object(&self, name: &str) -> Value {
        let kind = self.kind_of(name);
        self.ns.get(api_version(kind), kind, name).await.unwrap_or_else(|| panic!("the {kind} {name}"))
    }

    /// The image of container `CONTAINER` of app NAME's workload, as the server holds it.
    pub async fn image(&self, name: &str, container: usize) -> String {
        let object = self.object(name).await;
        containers(self.kind_of(name), &object)[container]["image"].as_str().unwrap().to_string()
    }
}

pub fn api_version(kind: &str) -> &'static str {
    if kind == "CronJob" { "batch/v1" } else { "apps/v1" }
}

pub fn containers<'a>(kind: &str, object: &'a Value) -> &'a Vec<Value> {
    let pointer = if kind == "CronJob" {
        "/spec/jobTemplate/spec/template/spec/containers"
    } else {
        "/spec/template/spec/containers"
    };
    object.pointer(pointer).and_then(Value::as_array).expect("containers")
}

/// A workload of `kind` as a person would write it: two containers (`app` and `sidecar`), no
/// security context (Pod Security `baseline` admits its pods, `restricted` refuses them).
pub fn workload(kind: &str, name: &str, image: &str) -> Value {
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
pub fn rolled_out(kind: &str, o: &Value) -> bool {
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
