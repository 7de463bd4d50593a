//! An in-process Kubernetes API double that `kube::Client` talks to over HTTP ([`http`]): it keeps
//! objects per group/version/resource/namespace and implements the REST semantics the daemon uses
//! — create (201, 409 AlreadyExists), get (404), list with label and field selectors, replace,
//! merge patch (RFC 7386: lists replaced whole), strategic merge patch and server-side apply (lists
//! of named objects such as `containers`, `env` or `volumes` merged element by element),
//! resourceVersion preconditions (409 Conflict), delete, the status subresource, watch streams
//! with resume from a resourceVersion, and SelfSubjectAccessReview with configurable answers. A
//! verb can be forbidden in one namespace (403, as after a Role changed), and the answer to an
//! object's next write lost after the write was taken (as when a connection breaks then).
//!
//! Field ownership is kept as the API server keeps it ([`fields`]): every write's field manager
//! (the `fieldManager` parameter, else the User-Agent's product, else `unknown`) owns the fields it
//! set or changed, shown in `metadata.managedFields`; an apply that would change a field another
//! manager owns is a 409 Conflict naming them both, unless forced, which takes the field over; what
//! an applier stops applying goes unless someone else owns it.
//!
//! Workload controllers ([`controllers`]) roll out Deployments, StatefulSets and DaemonSets in the
//! background: they write the status the real controllers write and create the new template's
//! pods (deleting the old ones), with failure modes a test sets per image, and a pause. Helpers
//! ([`workloads`]) create workloads as `kubectl apply` would, change images as `kubectl set image`
//! does and label them. Tests assert on the state the double holds, never on the calls made.
//!
//! Jobs ([`jobs`]): a minimal Job controller keeps `status.startTime`, `status.active` and the
//! `Suspended` condition of the Jobs it manages (not those whose `spec.managedBy` names another
//! controller, such as MultiKueue), merged into whatever status a test wrote; it never completes
//! or fails a Job (a test does, with [`KubeDouble::set_status`]) and makes no pods. Kueue can be
//! enabled ([`KubeDouble::enable_kueue`]): its webhook suspends the Jobs created with a queue
//! name, and [`KubeDouble::admit_job`] admits one as Kueue does (unsuspended, the flavor's node
//! labels in its `nodeSelector`).
//!
//! Several doubles are several clusters: each has its own port and store, and
//! [`KubeDouble::kubeconfig_named`] writes kubeconfigs that live side by side, one context per
//! cluster. A cluster can be lost for good ([`KubeDouble::go_down`]): its listener closed, its
//! connections (watch streams included) dropped without an answer; it never comes back.
//!
//! Not modelled: a write that changes nothing still takes a resourceVersion (the API server skips
//! it); `managedFields` sent in a request are ignored rather than taken; no defaulting of fields;
//! no ReplicaSet or ControllerRevision objects (pods belong to their workload directly); no pods
//! for Jobs, no Job completion, backoff or deadline of its own; no Kueue objects (Workloads,
//! queues, flavors), quota or preemption; no TLS, authentication (any token is accepted) or
//! HTTP/2; a cluster that is down cannot come back up (make another double).

pub mod controllers;
pub mod fields;
mod http;
pub mod jobs;
mod workloads;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use fields::{Managed, ManagerId};
use http::handle;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl Key {
    fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }
}

/// Resources whose `status` is only written through the `/status` subresource.
const WITH_STATUS: &[&str] = &[
    "jobs",
    "pods",
    "builds",
    "clusterbuilders",
    "namespaces",
    "deployments",
    "statefulsets",
    "daemonsets",
    "cronjobs",
];

fn kind_of(plural: &str) -> &'static str {
    match plural {
        "jobs" => "Job",
        "pods" => "Pod",
        "builds" => "Build",
        "clusterbuilders" => "ClusterBuilder",
        "leases" => "Lease",
        "configmaps" => "ConfigMap",
        "events" => "Event",
        "namespaces" => "Namespace",
        "secrets" => "Secret",
        "customresourcedefinitions" => "CustomResourceDefinition",
        "deployments" => "Deployment",
        "statefulsets" => "StatefulSet",
        "daemonsets" => "DaemonSet",
        "cronjobs" => "CronJob",
        _ => "Object",
    }
}

struct Event {
    rv: u64,
    kind: &'static str,
    key: Key,
    object: Value,
}

#[derive(Default)]
struct Store {
    rv: u64,
    uid: u64,
    objects: BTreeMap<Key, Value>,
    /// Every change, for watches to replay from a resourceVersion.
    log: Vec<Event>,
    /// Who owns which fields of each object (rendered into its `metadata.managedFields`).
    managed: BTreeMap<Key, Managed>,
    /// (verb, group, resource) the access review denies.
    denied: BTreeSet<(String, String, String)>,
    /// (verb, namespace) whose REST requests are answered 403 Forbidden ([`KubeDouble::forbid`]).
    forbidden: BTreeSet<(String, String)>,
    /// Objects whose next write is taken and its answer never sent ([`KubeDouble::lose_next_answer`]).
    answer_lost: BTreeSet<Key>,
    controllers: controllers::Controllers,
    /// Whether Kueue's webhook suspends the Jobs created with a queue name ([`jobs`]).
    kueue: bool,
}

struct Shared {
    store: Mutex<Store>,
    changed: tokio::sync::watch::Sender<u64>,
    /// The resourceVersion at which the controllers last found nothing to do.
    idle: tokio::sync::watch::Sender<u64>,
    /// Set once, by [`KubeDouble::go_down`]: the API server goes away.
    down: tokio::sync::watch::Sender<bool>,
}

impl Shared {
    fn notify(&self) {
        let rv = self.store.lock().unwrap().rv;
        let _ = self.changed.send(rv);
    }
}

pub struct KubeDouble {
    pub url: String,
    shared: Arc<Shared>,
    /// The server: its listener and, in a `JoinSet`, its connections (aborting it drops them all).
    task: tokio::task::JoinHandle<()>,
    /// Closed (its sender dropped) when the server has stopped: listener and connections gone.
    served: tokio::sync::watch::Receiver<()>,
    controllers: tokio::task::JoinHandle<()>,
}

impl Drop for KubeDouble {
    fn drop(&mut self) {
        self.task.abort();
        self.controllers.abort();
    }
}

/// Returns once the double is down.
async fn gone(down: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = down.wait_for(|down| *down).await;
}

/// Serves `app` on `listener`, one task per connection, until the double goes down: then the
/// listener is closed (new connections are refused) and every connection dropped where it is (a
/// request in flight gets no answer, a watch stream breaks off), as when an API server dies.
/// Dropping `_served` at the end tells [`KubeDouble::go_down`] it is over.
async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    mut down: tokio::sync::watch::Receiver<bool>,
    _served: tokio::sync::watch::Sender<()>,
) {
    let service = hyper_util::service::TowerToHyperService::new(app);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            biased;
            () = gone(&mut down) => break,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else {
            tokio::task::yield_now().await;
            continue;
        };
        while connections.try_join_next().is_some() {}
        let service = service.clone();
        connections.spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
        });
    }
    drop(listener);
    connections.shutdown().await;
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// RFC 7386 JSON merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

impl KubeDouble {
    pub async fn start() -> Self {
        let (changed, _) = tokio::sync::watch::channel(0);
        let (idle, _) = tokio::sync::watch::channel(0);
        let (down, down_seen) = tokio::sync::watch::channel(false);
        let shared = Arc::new(Shared { store: Mutex::new(Store::default()), changed, idle, down });
        let app = axum::Router::new().fallback(handle).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind kube double");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (serving, served) = tokio::sync::watch::channel(());
        let task = tokio::spawn(serve(listener, app, down_seen, serving));
        let controllers = tokio::spawn(controllers::run(shared.clone()));
        KubeDouble { url, shared, task, served, controllers }
    }

    /// The API server goes away for good, as when a cluster's control plane is lost: once this
    /// returns its listener is closed (a connection is refused) and every open connection has been
    /// dropped without an answer (a watch stream breaks off, a pooled connection is gone). It
    /// never comes back; the store stays readable for assertions ([`Self::get`], [`Self::list`])
    /// and the controllers keep running on it.
    pub async fn go_down(&self) {
        self.shared.down.send_replace(true);
        let mut served = self.served.clone();
        while served.changed().await.is_ok() {}
    }

    /// A `kube::Client` for this double.
    pub fn client(&self) -> kube::Client {
        builder_monitor::install_crypto_provider();
        let config = kube::Config::new(self.url.parse().unwrap());
        kube::Client::try_from(config).expect("kube client")
    }

    /// A kubeconfig file pointing at this double, for the daemon binary: `dir/kubeconfig`, its
    /// cluster and context `double`.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        self.write_kubeconfig(dir.join("kubeconfig"), "double")
    }

    /// A kubeconfig file `dir/kubeconfig-NAME` whose cluster, context and current context are
    /// `name` (the user `tester`, namespace `default`): several doubles' files side by side, each
    /// context naming its own cluster.
    pub fn kubeconfig_named(&self, dir: &std::path::Path, name: &str) -> std::path::PathBuf {
        self.write_kubeconfig(dir.join(format!("kubeconfig-{name}")), name)
    }

    fn write_kubeconfig(&self, path: std::path::PathBuf, name: &str) -> std::path::PathBuf {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: tester\n    namespace: default\ncurrent-context: {name}\nusers:\n- name: tester\n  user:\n    token: test-token\n",
            self.url
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Answers 403 Forbidden, as the API server does, to every `verb` request (`get`, `list`,
    /// `watch`, `create`, `update`, `patch`, `delete`) in `namespace` from now on. The access
    /// reviews answer as before: this is a Role changed after the daemon checked its permissions.
    pub fn forbid(&self, verb: &str, namespace: &str) {
        self.shared.store.lock().unwrap().forbidden.insert((verb.into(), namespace.into()));
    }

    pub fn deny(&self, verb: &str, group: &str, resource: &str) {
        self.shared.store.lock().unwrap().denied.insert((verb.into(), group.into(), resource.into()));
    }

    pub fn create_namespace(&self, name: &str) {
        let key = Key {
            group: String::new(),
            version: "v1".into(),
            plural: "namespaces".into(),
            namespace: None,
            name: name.into(),
        };
        let object = json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } });
        self.shared.store.lock().unwrap().write_update(
            &key,
            object,
            Some(ManagerId::update("kubectl-create", "v1", "")),
        );
        self.notify();
    }

    /// Writes the store has taken so far (its newest resourceVersion): unchanged when nothing was
    /// created, replaced, patched or deleted (the controllers' writes count too).
    pub fn writes(&self) -> u64 {
        self.shared.store.lock().unwrap().rv
    }

    fn notify(&self) {
        self.shared.notify();
    }

    /// Every object of a resource (in any namespace), oldest first.
    pub fn list(&self, plural: &str) -> Vec<Value> {
        let store = self.shared.store.lock().unwrap();
        let mut objects: Vec<Value> =
            store.objects.iter().filter(|(k, _)| k.plural == plural).map(|(_, v)| v.clone()).collect();
        objects.sort_by_key(|o| {
            o["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        });
        objects
    }

    pub fn get(&self, plural: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let store = self.shared.store.lock().unwrap();
        store.find(plural, namespace, name).map(|k| store.objects[&k].clone())
    }

    /// The managers owning the field at `path` of an object (`spec.replicas`,
    /// `.spec.template.spec.containers[name="app"].image`, as the API server prints paths), in
    /// `metadata.managedFields` order: several when they applied the same value.
    pub fn owners(&self, plural: &str, namespace: Option<&str>, name: &str, path: &str) -> Vec<String> {
        let wanted = if path.starts_with('.') { path.to_string() } else { format!(".{path}") };
        let store = self.shared.store.lock().unwrap();
        let Some(key) = store.find(plural, namespace, name) else { return Vec::new() };
        let Some(managed) = store.managed.get(&key) else { return Vec::new() };
        managed
            .iter()
            .filter(|(_, owned)| owned.fields.iter().any(|p| fields::display(p) == wanted))
            .map(|(id, _)| id.manager.clone())
            .collect()
    }

    /// The manager owning the field at `path` (the first, when shared); see [`Self::owners`].
    pub fn owner(&self, plural: &str, namespace: Option<&str>, name: &str, path: &str) -> Option<String> {
        self.owners(plural, namespace, name, path).into_iter().next()
    }

    /// Waits until `found` returns something, re-evaluating after every change to the store.
    pub async fn wait_until<T>(&self, what: &str, found: impl Fn(&KubeDouble) -> Option<T>) -> T {
        let mut changes = self.shared.changed.subscribe();
        let deadline = tokio::time::Instant::now() + super::PATIENCE;
        loop {
            if let Some(value) = found(self) {
                return value;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                _ => panic!("{what}: not seen within {:?}", super::PATIENCE),
            }
        }
    }

    /// Writes an object's status as a controller would (a MODIFIED event for watchers; the field
    /// manager `kube-controller-manager` on the status subresource).
    pub fn set_status(&self, plural: &str, namespace: Option<&str>, name: &str, status: Value) {
        let mut store = self.shared.store.lock().unwrap();
        let key = store.find(plural, namespace, name).unwrap_or_else(|| panic!("no {plural} {name}"));
        let mut object = store.objects[&key].clone();
        object["status"] = status;
        let id = ManagerId::update("kube-controller-manager", &key.api_version(), "status");
        store.write_update(&key, object, Some(id));
        drop(store);
        self.notify();
    }

    /// Creates or overwrites any object directly, status included (e.g. a Pod a Job would have
    /// made), as the field manager `kube-controller-manager`.
    pub fn put(&self, group: &str, version: &str, plural: &str, namespace: Option<&str>, object: Value) {
        let key = Key {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            namespace: namespace.map(str::to_string),
            name: object["metadata"]["name"].as_str().unwrap().into(),
        };
        let id = ManagerId::update("kube-controller-manager", &key.api_version(), "");
        self.shared.store.lock().unwrap().write_update(&key, object, Some(id));
        self.notify();
    }
}

impl Store {
    fn bump(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn find(&self, plural: &str, namespace: Option<&str>, name: &str) -> Option<Key> {
        self.objects
            .keys()
            .find(|k| k.plural == plural && k.namespace.as_deref() == namespace && k.name == name)
            .cloned()
    }

    /// Writes `object` as an update by `id` (none: ownership unchanged, but for fields that are
    /// gone), creating it when absent.
    fn write_update(&mut self, key: &Key, object: Value, id: Option<ManagerId>) -> Value {
        let old = self.objects.get(key).cloned();
        if old.is_none() {
            self.managed.remove(key);
        }
        if let Some(id) = id {
            let managed = self.managed.entry(key.clone()).or_default();
            fields::update(managed, old.as_ref().unwrap_or(&Value::Null), &object, id, &now());
        }
        match old {
            None => self.insert(key, object),
            Some(_) => self.update(key, object, "MODIFIED"),
        }
    }

    /// `metadata.managedFields` from what the store keeps (whatever a request sent is ignored).
    fn render_managed(&mut self, key: &Key, object: &mut Value) {
        let managed = self.managed.entry(key.clone()).or_default();
        fields::retain_existing(managed, object);
        if managed.is_empty() {
            self.managed.remove(key);
            if let Some(m) = object["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
        } else {
            object["metadata"]["managedFields"] = fields::render(managed);
        }
    }

    fn insert(&mut self, key: &Key, mut object: Value) -> Value {
        let rv = self.bump();
        self.uid += 1;
        let meta = object["metadata"].as_object_mut().map(std::mem::take).unwrap_or_default();
        let mut meta = Value::Object(meta);
        meta["name"] = json!(key.name);
        if let Some(ns) = &key.namespace {
            meta["namespace"] = json!(ns);
        }
        meta["uid"] = json!(format!("00000000-0000-0000-0000-{:012}", self.uid));
        meta["resourceVersion"] = json!(rv.to_string());
        meta["generation"] = json!(1);
        meta["creationTimestamp"] = json!(now());
        object["metadata"] = meta;
        self.render_managed(key, &mut object);
        self.objects.insert(key.clone(), object.clone());
        self.log.push(Event { rv, kind: "ADDED", key: key.clone(), object: object.clone() });
        object
    }

    fn update(&mut self, key: &Key, mut object: Value, event: &'static str) -> Value {
        let rv = self.bump();
        let old = self.objects.get(key).cloned().unwrap_or(Value::Null);
        // Metadata the server owns stays; generation follows changes outside metadata and status.
        for field in ["uid", "creationTimestamp", "name", "namespace"] {
            if !old["metadata"][field].is_null() {
                object["metadata"][field] = old["metadata"][field].clone();
            }
        }
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(m) = v.as_object_mut() {
                m.remove("metadata");
                m.remove("status");
            }
            v
        };
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        object["metadata"]["generation"] =
            json!(if strip(&old) != strip(&object) { generation + 1 } else { generation });
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.render_managed(key, &mut object);
        self.objects.insert(key.clone(), object.clone());
        self.log.push(Event { rv, kind: event, key: key.clone(), object: object.clone() });
        object
    }

    fn delete(&mut self, key: &Key) -> Option<Value> {
        let object = self.objects.remove(key)?;
        self.managed.remove(key);
        let rv = self.bump();
        self.log.push(Event { rv, kind: "DELETED", key: key.clone(), object: object.clone() });
        Some(object)
    }
}
