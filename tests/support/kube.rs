//! An in-process Kubernetes API double that `kube::Client` talks to over HTTP: it keeps objects per
//! group/version/resource/namespace and implements the REST semantics the daemon uses — create
//! (201, 409 AlreadyExists), get (404), list with label selectors, replace and merge/apply patches
//! with resourceVersion preconditions (409 Conflict), delete, the status subresource, watch streams
//! with resume from a resourceVersion, and SelfSubjectAccessReview with configurable answers.
//! Tests assert on the state it holds, never on the calls made.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri};
use serde_json::{Value, json};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub namespace: Option<String>,
    pub name: String,
}

/// Resources whose `status` is only written through the `/status` subresource.
const WITH_STATUS: &[&str] = &["jobs", "pods", "builds", "clusterbuilders", "namespaces"];

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
    /// (manager, key) → the last object that manager applied, for server-side apply.
    applied: BTreeMap<(String, Key), Value>,
    /// (verb, group, resource) the access review denies.
    denied: BTreeSet<(String, String, String)>,
}

struct Shared {
    store: Mutex<Store>,
    changed: tokio::sync::watch::Sender<u64>,
}

pub struct KubeDouble {
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for KubeDouble {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn status_error(code: u16, reason: &str, message: String) -> Response<Body> {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    json_response(code, &body)
}

fn json_response(code: u16, body: &Value) -> Response<Body> {
    let mut r = Response::new(Body::from(serde_json::to_vec(body).unwrap()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap();
    r.headers_mut().insert("content-type", "application/json".parse().unwrap());
    r
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

/// Removes from `target` the fields `before` had and `after` no longer has (what a manager stopped
/// applying), recursing through objects.
fn remove_dropped(target: &mut Value, before: &Value, after: &Value) {
    if let (Value::Object(t), Value::Object(b)) = (target, before) {
        for (k, bv) in b {
            match after.get(k) {
                None => {
                    t.remove(k);
                }
                Some(av) => {
                    if let Some(tv) = t.get_mut(k) {
                        remove_dropped(tv, bv, av);
                    }
                }
            }
        }
    }
}

fn labels_match(object: &Value, selector: &str) -> bool {
    let labels = object["metadata"]["labels"].as_object();
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(|v| v.as_str());
    selector.split(',').filter(|s| !s.trim().is_empty()).all(|term| {
        let term = term.trim();
        if let Some((k, v)) = term.split_once("!=") {
            get(k.trim()) != Some(v.trim())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            get(k.trim()) == Some(v.trim())
        } else if let Some(k) = term.strip_prefix('!') {
            get(k.trim()).is_none()
        } else {
            get(term).is_some()
        }
    })
}

fn fields_match(object: &Value, selector: &str) -> bool {
    selector.split(',').filter(|s| !s.is_empty()).all(|term| match term.split_once('=') {
        Some(("metadata.name", v)) => object["metadata"]["name"] == v,
        Some(("metadata.namespace", v)) => object["metadata"]["namespace"] == v,
        _ => true,
    })
}

/// What a request path names.
struct Target {
    group: String,
    version: String,
    plural: String,
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
}

impl Target {
    fn key(&self, name: &str) -> Key {
        Key {
            group: self.group.clone(),
            version: self.version.clone(),
            plural: self.plural.clone(),
            namespace: self.namespace.clone(),
            name: name.to_string(),
        }
    }
    fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }
}

fn parse_path(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => (String::new(), version.to_string(), rest),
        ["apis", group, version, rest @ ..] => (group.to_string(), version.to_string(), rest),
        _ => return None,
    };
    let t = |plural: &str, namespace: Option<&str>, name: Option<&str>, status: bool| Target {
        group: group.clone(),
        version: version.clone(),
        plural: plural.to_string(),
        namespace: namespace.map(str::to_string),
        name: name.map(str::to_string),
        status,
    };
    Some(match rest {
        ["namespaces", ns, plural] => t(plural, Some(ns), None, false),
        ["namespaces", ns, plural, name] => t(plural, Some(ns), Some(name), false),
        ["namespaces", ns, plural, name, "status"] => t(plural, Some(ns), Some(name), true),
        [plural] => t(plural, None, None, false),
        [plural, name] => t(plural, None, Some(name), false),
        [plural, name, "status"] => t(plural, None, Some(name), true),
        _ => return None,
    })
}

fn query(uri: &Uri) -> BTreeMap<String, String> {
    reqwest::Url::parse(&format!("http://x{uri}"))
        .map(|u| u.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect())
        .unwrap_or_default()
}

impl KubeDouble {
    pub async fn start() -> Self {
        let (changed, _) = tokio::sync::watch::channel(0);
        let shared = Arc::new(Shared { store: Mutex::new(Store::default()), changed });
        let app = axum::Router::new().fallback(handle).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind kube double");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        KubeDouble { url, shared, task }
    }

    /// A `kube::Client` for this double.
    pub fn client(&self) -> kube::Client {
        builder_monitor::install_crypto_provider();
        let config = kube::Config::new(self.url.parse().unwrap());
        kube::Client::try_from(config).expect("kube client")
    }

    /// A kubeconfig file pointing at this double, for the daemon binary.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster:\n    server: {}\ncontexts:\n- name: double\n  context:\n    cluster: double\n    user: tester\n    namespace: default\ncurrent-context: double\nusers:\n- name: tester\n  user:\n    token: test-token\n",
            self.url
        );
        std::fs::write(&path, text).unwrap();
        path
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
        self.shared.store.lock().unwrap().insert(&key, object);
        self.notify();
    }

    /// Writes the store has taken so far (its newest resourceVersion): unchanged when nothing was
    /// created, replaced, patched or deleted.
    pub fn writes(&self) -> u64 {
        self.shared.store.lock().unwrap().rv
    }

    fn notify(&self) {
        let rv = self.shared.store.lock().unwrap().rv;
        let _ = self.shared.changed.send(rv);
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
        store
            .objects
            .iter()
            .find(|(k, _)| k.plural == plural && k.namespace.as_deref() == namespace && k.name == name)
            .map(|(_, v)| v.clone())
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

    /// Writes an object's status as a controller would (a MODIFIED event for watchers).
    pub fn set_status(&self, plural: &str, namespace: Option<&str>, name: &str, status: Value) {
        let mut store = self.shared.store.lock().unwrap();
        let key = store
            .objects
            .keys()
            .find(|k| k.plural == plural && k.namespace.as_deref() == namespace && k.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {plural} {name}"));
        let mut object = store.objects[&key].clone();
        object["status"] = status;
        store.update(&key, object, "MODIFIED");
        drop(store);
        self.notify();
    }

    /// Creates any object directly (e.g. a Pod a Job would have made).
    pub fn put(&self, group: &str, version: &str, plural: &str, namespace: Option<&str>, object: Value) {
        let key = Key {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            namespace: namespace.map(str::to_string),
            name: object["metadata"]["name"].as_str().unwrap().into(),
        };
        let mut store = self.shared.store.lock().unwrap();
        if store.objects.contains_key(&key) {
            store.update(&key, object, "MODIFIED");
        } else {
            store.insert(&key, object);
        }
        drop(store);
        self.notify();
    }
}

impl Store {
    fn bump(&mut self) -> u64 {
        self.rv += 1;
        self.rv
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
        self.objects.insert(key.clone(), object.clone());
        self.log.push(Event { rv, kind: event, key: key.clone(), object: object.clone() });
        object
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let Some(target) = parse_path(uri.path()) else {
        return status_error(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({})", uri.path()),
        );
    };
    let q = query(&uri);
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => return status_error(400, "BadRequest", format!("body is not JSON: {e}")),
        }
    };
    if target.plural == "selfsubjectaccessreviews" && method == Method::POST {
        let attrs = &body["spec"]["resourceAttributes"];
        let s = |k: &str| attrs[k].as_str().unwrap_or_default().to_string();
        let denied = shared.store.lock().unwrap().denied.contains(&(s("verb"), s("group"), s("resource")));
        let mut review = body.clone();
        review["status"] = json!({ "allowed": !denied, "reason": if denied { "denied by the test" } else { "" } });
        return json_response(201, &review);
    }
    let response = match (&method, &target.name) {
        (&Method::GET, None) if q.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            return watch(shared, target, q).await;
        }
        (&Method::GET, None) => list(&shared, &target, &q),
        (&Method::GET, Some(name)) => {
            let store = shared.store.lock().unwrap();
            match store.objects.get(&target.key(name)) {
                Some(o) => json_response(200, o),
                None => not_found(&target, name),
            }
        }
        (&Method::POST, None) => create(&shared, &target, body),
        (&Method::PUT, Some(name)) => replace(&shared, &target, name, body),
        (&Method::PATCH, Some(name)) => {
            let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
            patch(&shared, &target, name, content_type, &q, body)
        }
        (&Method::DELETE, Some(name)) => {
            let mut store = shared.store.lock().unwrap();
            let key = target.key(name);
            match store.objects.remove(&key) {
                Some(o) => {
                    let rv = store.bump();
                    store.log.push(Event { rv, kind: "DELETED", key, object: o.clone() });
                    json_response(200, &o)
                }
                None => not_found(&target, name),
            }
        }
        _ => status_error(405, "MethodNotAllowed", format!("{method} not allowed on {}", uri.path())),
    };
    let rv = shared.store.lock().unwrap().rv;
    let _ = shared.changed.send(rv);
    response
}

fn drop_status(object: &mut Value) {
    if let Some(m) = object.as_object_mut() {
        m.remove("status");
    }
}

fn not_found(target: &Target, name: &str) -> Response<Body> {
    let resource =
        if target.group.is_empty() { target.plural.clone() } else { format!("{}.{}", target.plural, target.group) };
    status_error(404, "NotFound", format!("{resource} \"{name}\" not found"))
}

fn visible(key: &Key, target: &Target) -> bool {
    key.group == target.group
        && key.plural == target.plural
        && (target.namespace.is_none() || key.namespace == target.namespace)
}

fn list(shared: &Shared, target: &Target, q: &BTreeMap<String, String>) -> Response<Body> {
    let store = shared.store.lock().unwrap();
    let labels = q.get("labelSelector").cloned().unwrap_or_default();
    let fields = q.get("fieldSelector").cloned().unwrap_or_default();
    let items: Vec<Value> = store
        .objects
        .iter()
        .filter(|(k, o)| visible(k, target) && labels_match(o, &labels) && fields_match(o, &fields))
        .map(|(_, o)| o.clone())
        .collect();
    let body = json!({
        "apiVersion": target.api_version(),
        "kind": format!("{}List", kind_of(&target.plural)),
        "metadata": { "resourceVersion": store.rv.to_string() },
        "items": items,
    });
    json_response(200, &body)
}

fn create(shared: &Shared, target: &Target, mut body: Value) -> Response<Body> {
    let Some(name) = body["metadata"]["name"].as_str().map(str::to_string) else {
        return status_error(422, "Invalid", "metadata.name is required".into());
    };
    if let Some(ns) = &target.namespace {
        let store = shared.store.lock().unwrap();
        let ns_key = Key {
            group: String::new(),
            version: "v1".into(),
            plural: "namespaces".into(),
            namespace: None,
            name: ns.clone(),
        };
        if !store.objects.contains_key(&ns_key) {
            return status_error(404, "NotFound", format!("namespaces \"{ns}\" not found"));
        }
    }
    let key = target.key(&name);
    let mut store = shared.store.lock().unwrap();
    if store.objects.contains_key(&key) {
        let resource =
            if target.group.is_empty() { target.plural.clone() } else { format!("{}.{}", target.plural, target.group) };
        return status_error(409, "AlreadyExists", format!("{resource} \"{name}\" already exists"));
    }
    if WITH_STATUS.contains(&target.plural.as_str()) {
        drop_status(&mut body);
    }
    let object = store.insert(&key, body);
    json_response(201, &object)
}

fn precondition(existing: &Value, body: &Value) -> Option<Response<Body>> {
    let wanted = body["metadata"]["resourceVersion"].as_str()?;
    let current = existing["metadata"]["resourceVersion"].as_str().unwrap_or_default();
    (wanted != current).then(|| {
        status_error(
            409,
            "Conflict",
            "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again".into(),
        )
    })
}

/// Applies a write to the main resource or, for `/status`, to the status only.
fn write(store: &mut Store, target: &Target, key: &Key, existing: &Value, mut next: Value) -> Value {
    if WITH_STATUS.contains(&target.plural.as_str()) {
        if target.status {
            let status = next["status"].clone();
            next = existing.clone();
            next["status"] = status;
        } else {
            next["status"] = existing["status"].clone();
            if next["status"].is_null() {
                drop_status(&mut next);
            }
        }
    }
    store.update(key, next, "MODIFIED")
}

fn replace(shared: &Shared, target: &Target, name: &str, body: Value) -> Response<Body> {
    let key = target.key(name);
    let mut store = shared.store.lock().unwrap();
    let Some(existing) = store.objects.get(&key).cloned() else { return not_found(target, name) };
    if let Some(conflict) = precondition(&existing, &body) {
        return conflict;
    }
    let object = write(&mut store, target, &key, &existing, body);
    json_response(200, &object)
}

fn patch(
    shared: &Shared,
    target: &Target,
    name: &str,
    content_type: &str,
    q: &BTreeMap<String, String>,
    body: Value,
) -> Response<Body> {
    let key = target.key(name);
    let mut store = shared.store.lock().unwrap();
    let existing = store.objects.get(&key).cloned();
    if content_type.starts_with("application/apply-patch") {
        let manager = q.get("fieldManager").cloned().unwrap_or_default();
        if manager.is_empty() {
            return status_error(422, "Invalid", "fieldManager is required for apply patch".into());
        }
        // A manager's fields are tracked per subresource, as the API server does.
        let manager = if target.status { format!("{manager}/status") } else { manager };
        let previous = store.applied.get(&(manager.clone(), key.clone())).cloned();
        store.applied.insert((manager, key.clone()), body.clone());
        return match existing {
            None => {
                if target.status {
                    return not_found(target, name);
                }
                let mut object = body;
                if WITH_STATUS.contains(&target.plural.as_str()) {
                    drop_status(&mut object);
                }
                let object = store.insert(&key, object);
                json_response(201, &object)
            }
            Some(existing) => {
                if let Some(conflict) = precondition(&existing, &body) {
                    return conflict;
                }
                let mut next = existing.clone();
                if let Some(previous) = &previous {
                    remove_dropped(&mut next, previous, &body);
                }
                let mut applied = body.clone();
                if let Some(m) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("resourceVersion");
                }
                merge(&mut next, &applied);
                let object = write(&mut store, target, &key, &existing, next);
                json_response(200, &object)
            }
        };
    }
    if !(content_type.starts_with("application/merge-patch+json")
        || content_type.starts_with("application/strategic-merge-patch+json"))
    {
        return status_error(
            415,
            "UnsupportedMediaType",
            format!("patch type {content_type} is not supported by the double"),
        );
    }
    let Some(existing) = existing else { return not_found(target, name) };
    if let Some(conflict) = precondition(&existing, &body) {
        return conflict;
    }
    let mut next = existing.clone();
    let mut patch = body;
    // (get_mut, not indexing: indexing would insert a null `metadata` that the merge then applies)
    if let Some(m) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    merge(&mut next, &patch);
    let object = write(&mut store, target, &key, &existing, next);
    json_response(200, &object)
}

struct WatchState {
    pending: Option<Vec<Value>>,
    cursor: u64,
    shared: Arc<Shared>,
    target: Target,
    labels: String,
    fields: String,
    receiver: tokio::sync::watch::Receiver<u64>,
    deadline: tokio::time::Instant,
}

async fn watch(shared: Arc<Shared>, target: Target, q: BTreeMap<String, String>) -> Response<Body> {
    let labels = q.get("labelSelector").cloned().unwrap_or_default();
    let fields = q.get("fieldSelector").cloned().unwrap_or_default();
    let timeout = q.get("timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(300u64).min(300);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    let start: u64 = q.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut receiver = shared.changed.subscribe();
    receiver.borrow_and_update();
    // resourceVersion 0 or absent: the current state as ADDED events, then changes.
    let (cursor, initial) = {
        let store = shared.store.lock().unwrap();
        if start == 0 {
            let initial: Vec<Value> = store
                .objects
                .iter()
                .filter(|(k, o)| visible(k, &target) && labels_match(o, &labels) && fields_match(o, &fields))
                .map(|(_, o)| json!({ "type": "ADDED", "object": o }))
                .collect();
            (store.rv, initial)
        } else {
            (start, Vec::new())
        }
    };
    let state = WatchState { pending: Some(initial), cursor, shared, target, labels, fields, receiver, deadline };
    let stream = futures::stream::unfold(state, |mut st| async move {
        if let Some(initial) = st.pending.take().filter(|i| !i.is_empty()) {
            let chunk: String = initial.iter().map(|e| format!("{e}\n")).collect();
            return Some((Ok::<_, std::io::Error>(Bytes::from(chunk)), st));
        }
        loop {
            let batch: Vec<Value> = {
                let store = st.shared.store.lock().unwrap();
                let batch = store
                    .log
                    .iter()
                    .filter(|e| {
                        e.rv > st.cursor
                            && visible(&e.key, &st.target)
                            && labels_match(&e.object, &st.labels)
                            && fields_match(&e.object, &st.fields)
                    })
                    .map(|e| json!({ "type": e.kind, "object": e.object }))
                    .collect();
                st.cursor = store.rv;
                batch
            };
            if !batch.is_empty() {
                let chunk: String = batch.iter().map(|e| format!("{e}\n")).collect();
                return Some((Ok(Bytes::from(chunk)), st));
            }
            match tokio::time::timeout_at(st.deadline, st.receiver.changed()).await {
                Ok(Ok(())) => continue,
                _ => return None,
            }
        }
    });
    let mut r = Response::new(Body::from_stream(stream));
    r.headers_mut().insert("content-type", "application/json".parse().unwrap());
    r
}
