//! ClusterBuilder on the real control plane (issue 62 item 3): the CRD `builder-monitor crd`
//! prints is accepted and becomes Established; the daemon's ClusterBuilders pass its structural
//! schema under `fieldValidation=Strict` (against a CRD older than the daemon, whose schema lacks
//! a field it writes, the server refuses the whole write, and the daemon's warning names the fix); the status goes through the status subresource
//! and the spec through the resource, each owned apart; `kubectl get` shows the printer columns;
//! pruning deletes only what this daemon manages.

use crate::support;

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use tokio::sync::RwLock;

use support::cnb::BuilderSpec;
use support::control_plane::{TestNamespace, control_plane};
use support::daemon::{Daemon, Workspace};
use support::images::{Format, Pusher};
use support::registry::TestRegistry;

const CRD_NAME: &str = "clusterbuilders.buildermonitor.dev";
const API_VERSION: &str = "buildermonitor.dev/v1alpha1";
const TOKEN_ENV: &str = "BM_CB_TEST_TOKEN";
const TOKEN: &str = "cluster-builders-test-token";

/// The CRD is the whole control plane's: the test that installs an older one holds this
/// exclusively; the others share it.
pub static CRD: RwLock<()> = RwLock::const_new(());

/// The documents `builder-monitor crd` prints, as JSON.
pub fn printed_crd() -> Vec<Value> {
    let out = Workspace::new().run(&["crd"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    serde_saphyr::from_multiple(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", out.stdout))
}

/// Applies `crd` (server-side, as `kubectl apply --server-side` does) and waits until the server
/// says it is Established.
pub async fn install(ns: &TestNamespace, crd: &Value) {
    crate::exact_rbac::apply(&ns.client, std::slice::from_ref(crd)).await;
    let generation = ns.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", CRD_NAME).await.unwrap()["metadata"]
        ["generation"]
        .clone();
    ns.wait_for("apiextensions.k8s.io/v1", "CustomResourceDefinition", CRD_NAME, |crd| {
        let established = crd["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Established" && c["status"] == "True"));
        // The schema in force is the one applied (a CRD's status has no observedGeneration:
        // its storedVersions and the accepted names say the same for us).
        established && crd["metadata"]["generation"] == generation
    })
    .await;
}

struct World {
    registry: TestRegistry,
    pusher: Pusher,
    ns: TestNamespace,
    ws: Workspace,
}

impl World {
    async fn new() -> Self {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let ns = control_plane().namespace("cb").await;
        World { registry, pusher, ns, ws: Workspace::new() }
    }

    /// The ClusterBuilder name of builder `short`: cluster-scoped, so unique to the test's namespace.
    fn name(&self, short: &str) -> String {
        format!("{}-{short}", self.ns.name)
    }

    async fn push_builder(&self, repo: &str, spec: &BuilderSpec) -> String {
        self.pusher.push_image(repo, Some("latest"), &spec.image(), Format::Oci).await.digest
    }

    /// A daemon config publishing (and pruning) `builders` (short name, repository).
    fn config(&self, builders: &[(&str, &str)], interval: &str) -> std::path::PathBuf {
        let mut text = format!(
            "[monitor]\ninterval = \"{interval}\"\njitter = \"0s\"\n\n\
             [server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"{TOKEN_ENV}\"\n\n\
             [kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"{}\"\npublish = true\nprune = true\n\n",
            self.ns.kubeconfig.display(),
            self.ns.name,
        );
        for (short, repo) in builders {
            text += &format!(
                "[[builders]]\nname = \"{}\"\nimage = \"{}/{repo}:latest\"\nwatch_run_image = false\n\n",
                self.name(short),
                self.registry.host
            );
        }
        self.ws.config(&text)
    }

    fn start(&self, config: &std::path::Path) -> Daemon {
        Daemon::start_with_env(config, &[(TOKEN_ENV, TOKEN)])
    }

    async fn cluster_builders(&self) -> Api<DynamicObject> {
        self.ns.api(API_VERSION, "ClusterBuilder").await
    }

    /// Waits until ClusterBuilder `short`'s status satisfies `wanted`.
    async fn wait_status(&self, short: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        self.ns.wait_for(API_VERSION, "ClusterBuilder", &self.name(short), |o| wanted(&o["status"])).await
    }
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == type_)).unwrap_or(&Value::Null)
}

/// The field sets each manager owns, by (manager, operation, subresource).
fn owners(object: &Value) -> Vec<(String, String, String, Value)> {
    object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap().to_string(),
                m["operation"].as_str().unwrap().to_string(),
                m["subresource"].as_str().unwrap_or_default().to_string(),
                m["fieldsV1"].clone(),
            )
        })
        .collect()
}

/// `kubectl get clusterbuilder NAME`: the server's Table for it.
async fn table(ns: &TestNamespace, name: &str) -> Value {
    let request = axum::http::Request::get(format!("/apis/{API_VERSION}/clusterbuilders/{name}"))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let text = ns.client.request_text(request).await.expect("the Table");
    serde_json::from_str(&text).unwrap()
}

/// The printed CRD is Established; the daemon's spec and status of two builders pass it under
/// Strict validation, every status field the daemon computes arrives, each half is owned by its
/// own write; the Table has the printer columns; a change is an Event; pruning a builder taken
/// out of the config deletes its ClusterBuilder and nothing it does not manage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterbuilders_pass_the_printed_crd_and_only_managed_ones_are_pruned() {
    let _crd = CRD.read().await;
    let w = World::new().await;
    let crd = printed_crd();
    assert_eq!(crd.len(), 1, "one document: {crd:?}");
    install(&w.ns, &crd[0]).await;

    let run_tag = format!("{}/demo/run:latest", w.registry.host);
    let first = w.push_builder("demo/jammy", &BuilderSpec::jammy(&run_tag)).await;
    w.push_builder("demo/heroku", &BuilderSpec::heroku(&run_tag)).await;
    let config = w.config(&[("jammy", "demo/jammy"), ("heroku", "demo/heroku")], "1h");
    let mut daemon = w.start(&config);
    let addr = daemon.server_addr();
    let jammy = w.name("jammy");
    w.wait_status("jammy", |s| condition(s, "Ready")["status"] == "True").await;

    // A change: the java buildpack moves; the check on demand pins it.
    let second =
        w.push_builder("demo/jammy", &BuilderSpec::jammy(&run_tag).bump("paketo-buildpacks/java", "18.2.0")).await;
    let check = support::http()
        .post(format!("http://{addr}/api/v1/builders/{jammy}/check"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(check.status(), 202);
    let object = w.wait_status("jammy", |s| s["history"].as_array().is_some_and(|h| h.len() == 2)).await;
    let status = &object["status"];
    let repo = format!("{}/demo/jammy", w.registry.host);
    assert_eq!(status["latestImage"], json!(format!("{repo}@{second}")), "{status:#}");
    assert_eq!(status["history"][0]["digest"], json!(second));
    assert_eq!(status["history"][1]["digest"], json!(first));
    assert_eq!(status["stack"], json!({"id": "io.buildpacks.stacks.jammy", "runImage": run_tag}));
    assert_eq!(status["lifecycle"], json!({"version": "0.21.13"}));
    let buildpacks: Vec<(&str, &str)> = status["builderMetadata"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["id"].as_str().unwrap(), b["version"].as_str().unwrap()))
        .collect();
    assert_eq!(
        buildpacks,
        [
            ("paketo-buildpacks/go", "4.14.0"),
            ("paketo-buildpacks/java", "18.2.0"),
            ("paketo-buildpacks/nodejs", "7.2.0")
        ]
    );
    assert_eq!(condition(status, "Ready")["reason"], "Pinned");
    assert_eq!(condition(status, "UpToDate")["reason"], "Current");
    let last_change = &status["lastChange"];
    assert!(last_change["id"].is_string() && last_change["kind"].is_string(), "{status:#}");
    assert!(status["lastCheckTime"].is_string() && status["lastChangeTime"].is_string(), "{status:#}");
    // Status writes leave the spec (and so the generation) alone.
    assert_eq!(object["spec"], json!({"image": format!("{repo}:latest"), "interval": "1h"}));
    assert_eq!(object["metadata"]["generation"], 1);
    assert_eq!(status["observedGeneration"], 1);

    // The spec is the daemon's apply to the resource, the status its apply to the subresource.
    let owned = owners(&object);
    let ours: Vec<_> = owned.iter().filter(|o| o.0 == "builder-monitor").collect();
    assert_eq!(ours.len(), 2, "{owned:#?}");
    for (_, operation, subresource, fields) in ours {
        assert_eq!(operation, "Apply");
        let top: Vec<&String> = fields.as_object().unwrap().keys().collect();
        match subresource.as_str() {
            "" => assert_eq!(top, ["f:metadata", "f:spec"], "{fields:#}"),
            "status" => assert_eq!(top, ["f:status"], "{fields:#}"),
            other => panic!("a write to subresource {other}"),
        }
    }

    // `kubectl get clusterbuilder`: the CRD's printer columns, filled from the object.
    let table = table(&w.ns, &jammy).await;
    let columns: Vec<&str> =
        table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(columns, ["Name", "Image", "Latest", "Kind of last change", "Age"]);
    let cells = table["rows"][0]["cells"].as_array().unwrap();
    assert_eq!(
        cells[..4],
        [json!(jammy), json!(format!("{repo}:latest")), json!(format!("{repo}@{second}")), last_change["kind"].clone()]
    );

    // The change is an Event on the ClusterBuilder, in `default`: the only namespace (with
    // kube-system) the server takes Events about a cluster-scoped object in.
    // The daemon records it after the status write: awaited through a watch, not assumed there.
    let events: Api<Event> = Api::namespaced(w.ns.client.clone(), "default");
    let about_it = kube::runtime::watcher::Config::default().fields(&format!("involvedObject.name={jammy}"));
    let mut stream =
        Box::pin(kube::runtime::WatchStreamExt::applied_objects(kube::runtime::watcher(events.clone(), about_it)));
    tokio::time::timeout(support::PATIENCE, futures::TryStreamExt::try_next(&mut stream))
        .await
        .unwrap_or_else(|_| panic!("no Event about ClusterBuilder {jammy} in default within {:?}", support::PATIENCE))
        .expect("the watch of Events");
    drop(stream);
    let listed = events.list(&Default::default()).await.unwrap();
    let on_it: Vec<&Event> =
        listed.items.iter().filter(|e| e.involved_object.name.as_deref() == Some(jammy.as_str())).collect();
    assert_eq!(on_it.len(), 1, "{:#?}", listed.items);
    assert_eq!(on_it[0].reason.as_deref(), Some("RebuildNeeded"), "{:#?}", on_it[0]);

    // Objects it does not manage: one without its label, one of another installation (another
    // namespace's daemon labels it the same way).
    let cluster_builders = w.cluster_builders().await;
    let foreign = w.name("foreign");
    let other_install = w.name("other-install");
    for (name, labels) in [
        (&foreign, json!({})),
        (
            &other_install,
            json!({"app.kubernetes.io/managed-by": "builder-monitor", "buildermonitor.dev/namespace": "elsewhere"}),
        ),
    ] {
        let object = json!({"apiVersion": API_VERSION, "kind": "ClusterBuilder",
            "metadata": {"name": name, "labels": labels}, "spec": {"image": "example.test/x:latest"}});
        cluster_builders.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.unwrap();
    }

    // heroku is taken out of the config and jammy's interval changes: the restarted daemon
    // prunes heroku only; jammy's new spec is a new generation, its status kept and observed.
    let (exit, log) = daemon.terminate();
    assert!(exit.success(), "{}", log.join("\n"));
    let config = w.config(&[("jammy", "demo/jammy")], "2h");
    let mut daemon = w.start(&config);
    daemon.wait_for("the prune", |l| l["message"] == "pruned: no builder of that name is configured");
    let object = w.wait_status("jammy", |s| s["observedGeneration"] == 2).await;
    assert_eq!(object["spec"]["interval"], "2h");
    assert_eq!(object["status"]["latestImage"], json!(format!("{repo}@{second}")));
    assert_eq!(object["status"]["history"].as_array().unwrap().len(), 2);
    let (exit, log) = daemon.terminate();
    assert!(exit.success(), "{}", log.join("\n"));
    let pruned: Vec<&String> = log.iter().filter(|l| l.contains("pruned")).collect();
    assert_eq!(pruned.len(), 1, "{pruned:#?}");
    assert!(pruned[0].contains(&w.name("heroku")), "{pruned:#?}");
    assert!(cluster_builders.get_opt(&w.name("heroku")).await.unwrap().is_none());
    for name in [&foreign, &other_install, &jammy] {
        assert!(cluster_builders.get_opt(name).await.unwrap().is_some(), "{name} is kept");
    }
    for name in [foreign, other_install, jammy] {
        cluster_builders.delete(&name, &Default::default()).await.unwrap();
    }
}

/// A CRD older than the daemon (here: without `status.history`): the server refuses to apply a
/// field its schema does not declare, so the status write fails whole; the daemon's warning names
/// the field and the command that updates the CRD; the current CRD applied, the retry succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_older_than_the_daemon_fails_status_writes_naming_the_fix() {
    let _crd = CRD.write().await;
    let w = World::new().await;
    let current = printed_crd().remove(0);
    let mut older = current.clone();
    let status_schema = &mut older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
    status_schema["properties"].as_object_mut().unwrap().remove("history").expect("a history field");
    install(&w.ns, &older).await;

    let run_tag = format!("{}/demo/run:latest", w.registry.host);
    w.push_builder("demo/jammy", &BuilderSpec::jammy(&run_tag)).await;
    let config = w.config(&[("jammy", "demo/jammy")], "1h");
    let mut daemon = w.start(&config);
    let line = daemon.wait_for("the failed status write", |l| l["message"] == "cannot publish status; retrying");
    let error = line["error"].as_str().unwrap();
    assert!(error.contains(&format!("ClusterBuilder {}", w.name("jammy"))), "{error}");
    assert!(error.contains(".status.history: field not declared in schema"), "{error}");
    assert!(error.contains("builder-monitor crd | kubectl apply --server-side -f -"), "{error}");
    let object = w.ns.get(API_VERSION, "ClusterBuilder", &w.name("jammy")).await.unwrap();
    // The status written before the first check (nothing pinned yet, so no history) passed; the
    // pin's write, refused whole, left nothing of itself.
    assert!(object["status"]["latestImage"].is_null(), "{object:#}");

    install(&w.ns, &current).await;
    let object = w.wait_status("jammy", |s| s["history"].as_array().is_some_and(|h| h.len() == 1)).await;
    assert_eq!(condition(&object["status"], "Ready")["status"], "True");
    let (exit, log) = daemon.terminate();
    assert!(exit.success(), "{}", log.join("\n"));
    w.cluster_builders().await.delete(&w.name("jammy"), &Default::default()).await.unwrap();
}
