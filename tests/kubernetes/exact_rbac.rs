//! Exact rights on the real control plane (issue 62 item 5): the daemon under a ServiceAccount
//! token (TokenRequest) bound to exactly what `builder-monitor rbac --config` prints for its
//! config starts and does its work; a token with no rights stops it at start with a message
//! naming what is missing and how to grant it.

use crate::support;

use std::path::{Path, PathBuf};

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use serde_json::{Value, json};

use support::cnb::BuilderSpec;
use support::control_plane::{TestNamespace, control_plane};
use support::daemon::{Daemon, Workspace};
use support::images::{Format, Pusher};
use support::registry::TestRegistry;

/// A config using the cluster for the daemon's own state: the ConfigMap ledger and the Lease,
/// in a namespace of the control plane; one builder watch on a real registry.
pub struct World {
    pub _registry: TestRegistry,
    pub ns: TestNamespace,
    pub ws: Workspace,
    pub config: PathBuf,
}

impl World {
    /// `extra` is appended to the config, `HOST` in it replaced by the registry's, `NAMESPACE`
    /// by the test's namespace.
    pub async fn new(extra: &str) -> Self {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let host = registry.host.clone();
        let run_tag = format!("{host}/demo/run:latest");
        pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
        let ns = control_plane().namespace("rbac").await;
        let ws = Workspace::new();
        let config = ws.config(&format!(
            "[monitor]\nstate = \"kubernetes\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
             [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\nwatch_run_image = false\n\n\
             [kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"{}\"\nleader_election = true\n\n{extra}",
            ws.path("account.kubeconfig").display(),
            ns.name,
            extra = extra.replace("HOST", &host).replace("NAMESPACE", &ns.name),
        ));
        World { _registry: registry, ns, ws, config }
    }

    /// Runs the binary with this world's config.
    pub fn run(&self, args: &[&str]) -> support::daemon::Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--config", self.config.to_str().unwrap()]);
        self.ws.run(&all)
    }

    /// The objects `builder-monitor rbac --config` prints for this config, for ServiceAccount
    /// `account` (the binary's own output).
    pub fn printed_rbac(&self, account: &str) -> Vec<Value> {
        let out = self.run(&["rbac", "--output", "json", "--service-account", account]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        serde_json::from_str(&out.stdout).expect("rbac prints JSON")
    }

    /// Writes the config's kubeconfig: the control plane's server and CA, `token`.
    pub fn use_token(&self, token: &str) {
        write_kubeconfig(&self.ws.path("account.kubeconfig"), &self.ns.kubeconfig, token, None);
    }
}

/// Applies each object (server-side apply, as `kubectl apply --server-side` does) with the admin
/// client, where its `metadata.namespace` says.
pub async fn apply(client: &kube::Client, objects: &[Value]) {
    for object in objects {
        let (group, version) = object["apiVersion"].as_str().unwrap().split_once('/').unwrap_or(("", "v1"));
        let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap());
        let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk).await.expect("discover");
        let api: Api<DynamicObject> = match (capabilities.scope, object["metadata"]["namespace"].as_str()) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
            _ => Api::all_with(client.clone(), &resource),
        };
        let name = object["metadata"]["name"].as_str().unwrap();
        let params = PatchParams::apply("builder-monitor-tests").force();
        api.patch(name, &params, &Patch::Apply(object)).await.unwrap_or_else(|e| panic!("apply {object}: {e}"));
    }
}

/// Waits until the server's authorizer grants ServiceAccount `account` of `namespace` the verb on
/// the resource there (SubjectAccessReview, asked by the admin): RBAC objects just applied take
/// effect once the authorizer's informers have seen them. Fails the test after `PATIENCE`.
pub async fn await_granted(
    client: &kube::Client,
    namespace: &str,
    account: &str,
    verb: &str,
    group: &str,
    resource: &str,
) {
    await_granted_in(client, namespace, account, namespace, verb, group, resource).await
}

/// [`await_granted`] for ServiceAccount `account` of `account_namespace`, in `namespace`.
pub async fn await_granted_in(
    client: &kube::Client,
    account_namespace: &str,
    account: &str,
    namespace: &str,
    verb: &str,
    group: &str,
    resource: &str,
) {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": format!("system:serviceaccount:{account_namespace}:{account}"),
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{account_namespace}"), "system:authenticated"],
            "resourceAttributes": {"namespace": namespace, "verb": verb, "group": group, "resource": resource},
        },
    }))
    .unwrap();
    let granted = async {
        loop {
            let answer = reviews.create(&PostParams::default(), &review).await.expect("SubjectAccessReview");
            if answer.status.is_some_and(|s| s.allowed) {
                return;
            }
            // The authorizer's informers offer no event to wait on; ask again shortly.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(support::PATIENCE, granted)
        .await
        .unwrap_or_else(|_| panic!("{account} was not granted {verb} {resource} within {:?}", support::PATIENCE));
}

/// A ServiceAccount `account` in `namespace` (created when missing) and a token for it, by
/// TokenRequest.
pub async fn token(client: &kube::Client, namespace: &str, account: &str) -> String {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    if accounts.get_opt(account).await.expect("get the ServiceAccount").is_none() {
        let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": account}})).unwrap();
        accounts.create(&PostParams::default(), &sa).await.expect("create the ServiceAccount");
    }
    let request = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    });
    let answer: Value =
        accounts.create_subresource("token", account, &PostParams::default(), &request).await.expect("TokenRequest");
    answer["status"]["token"].as_str().expect("a token").to_string()
}

/// A kubeconfig at `path` for the server of the admin kubeconfig `admin`, trusting its CA (or
/// `ca`, base64 PEM, instead), authenticating with `token`.
pub fn write_kubeconfig(path: &Path, admin: &Path, token: &str, ca: Option<&str>) {
    let admin = kube::config::Kubeconfig::read_from(admin).expect("the admin kubeconfig");
    let cluster = admin.clusters[0].cluster.as_ref().expect("a cluster");
    let server = cluster.server.as_deref().expect("a server");
    let ca = ca.or(cluster.certificate_authority_data.as_deref()).expect("the CA inline");
    let text = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": "test", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    });
    std::fs::write(path, serde_json::to_string_pretty(&text).unwrap()).expect("write the kubeconfig");
}

/// The daemon's first check pins the builder: in the ConfigMap ledger, under the Lease.
async fn works(w: &World) {
    let mut daemon = Daemon::start(&w.config);
    daemon.wait_for_event("builder.pinned");
    let (status, log) = daemon.terminate();
    assert!(status.success(), "{}", log.join("\n"));
    let configmaps = w.ns.api("v1", "ConfigMap").await;
    let names: Vec<String> =
        configmaps.list(&Default::default()).await.unwrap().items.into_iter().filter_map(|c| c.metadata.name).collect();
    assert!(names.len() > 1, "the ledger's ConfigMaps are there: {names:?}");
    assert!(w.ns.get("coordination.k8s.io/v1", "Lease", "builder-monitor").await.is_some(), "and the Lease");
}

/// Issue 62 item 5: under exactly the printed RBAC the daemon starts (its start-up check reads
/// no Namespace, which the printed Roles do not grant) and pins into the ConfigMap ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_starts_and_works_under_exactly_the_printed_rbac() {
    let w = World::new("").await;
    let client = &w.ns.client;
    let account = format!("{}-daemon", w.ns.name);
    let printed = w.printed_rbac(&account);
    let kinds: Vec<&str> = printed.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ServiceAccount", "Role", "RoleBinding"], "{printed:?}");
    apply(client, &printed).await;
    await_granted(client, &w.ns.name, &account, "update", "coordination.k8s.io", "leases").await;
    w.use_token(&token(client, &w.ns.name, &account).await);
    works(&w).await;
}

/// A token of an account bound to nothing: the daemon stops at start, naming each missing
/// permission, its namespace, and how to grant them — not a raw refusal of a Namespace read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_with_no_rights_stops_the_daemon_at_start_naming_what_is_missing() {
    let w = World::new("").await;
    w.use_token(&token(&w.ns.client, &w.ns.name, "nobody").await);
    let mut daemon = Daemon::start(&w.config);
    let status = daemon.wait_for_or_exit("nothing", |_| false).expect_err("it exits");
    assert!(!status.success());
    let log = daemon.log.join("\n");
    let ns = &w.ns.name;
    for wanted in [
        format!(
            "missing permission in namespace \"{ns}\" (or it does not exist): create configmaps, get configmaps, list configmaps, update configmaps (for [monitor] state = \"kubernetes\")"
        ),
        format!(
            "missing permission in namespace \"{ns}\" (or it does not exist): create leases.coordination.k8s.io, get leases.coordination.k8s.io, update leases.coordination.k8s.io (for [kubernetes] leader_election)"
        ),
        "`builder-monitor rbac` prints the Roles and bindings it needs".to_string(),
    ] {
        assert!(log.contains(&wanted), "{wanted}\nnot in:\n{log}");
    }
    assert!(!log.contains("cannot get resource \"namespaces\""), "{log}");
}
