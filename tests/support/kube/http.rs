//! The HTTP side of the double: requests parsed into a resource and an operation, answered from
//! the store with the API server's status codes and `Status` bodies, and watch streams.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri};
use serde_json::{Value, json};

use super::fields::{self, Managed, ManagerId};
use super::{Key, Shared, Store, WITH_STATUS, kind_of, merge, now};

/// An answer: HTTP status and body.
pub(super) type Reply = (u16, Value);

fn status_error(code: u16, reason: &str, message: String) -> Reply {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    (code, body)
}

fn json_response(code: u16, body: &Value) -> Response<Body> {
    let mut r = Response::new(Body::from(serde_json::to_vec(body).unwrap()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap();
    r.headers_mut().insert("content-type", "application/json".parse().unwrap());
    r
}

pub(super) fn labels_match(object: &Value, selector: &str) -> bool {
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
pub(super) struct Target {
    pub(super) group: String,
    pub(super) version: String,
    pub(super) plural: String,
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
    pub(super) status: bool,
}

impl Target {
    pub(super) fn key(&self, name: &str) -> Key {
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
    fn subresource(&self) -> &'static str {
        if self.status { "status" } else { "" }
    }
    fn with_status(&self) -> bool {
        WITH_STATUS.contains(&self.plural.as_str())
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

/// The manager of an update: `fieldManager`, else what the API server derives from the
/// User-Agent (its product, before the first `/`).
fn update_manager(q: &BTreeMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    headers
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|p| !p.trim().is_empty())
        .map(|p| p.chars().take(128).collect())
        .unwrap_or_else(|| "unknown".to_string())
}

pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let Some(target) = parse_path(uri.path()) else {
        let (code, body) =
            status_error(404, "NotFound", format!("the server could not find the requested resource ({})", uri.path()));
        return json_response(code, &body);
    };
    let q = query(&uri);
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                let (code, body) = status_error(400, "BadRequest", format!("body is not JSON: {e}"));
                return json_response(code, &body);
            }
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
    let watching = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    if let Some(namespace) = &target.namespace {
        let verb = match (&method, &target.name) {
            (&Method::GET, None) if watching => "watch",
            (&Method::GET, None) => "list",
            (&Method::GET, Some(_)) => "get",
            (&Method::POST, _) => "create",
            (&Method::PUT, _) => "update",
            (&Method::PATCH, _) => "patch",
            (&Method::DELETE, _) => "delete",
            _ => "",
        };
        if shared.store.lock().unwrap().forbidden.contains(&(verb.to_string(), namespace.clone())) {
            let (code, body) = status_error(
                403,
                "Forbidden",
                format!(
                    "{} is forbidden: User \"tester\" cannot {verb} resource \"{}\" in API group \"{}\" in the namespace \"{namespace}\"",
                    target
                        .name
                        .as_ref()
                        .map_or_else(|| target.plural.clone(), |n| format!("{} \"{n}\"", resource_name(&target))),
                    target.plural,
                    target.group
                ),
            );
            return json_response(code, &body);
        }
    }
    let (code, reply) = match (&method, &target.name) {
        (&Method::GET, None) if watching => {
            return watch(shared, target, q).await;
        }
        (&Method::GET, None) => list(&shared, &target, &q),
        (&Method::GET, Some(name)) => {
            let store = shared.store.lock().unwrap();
            match store.objects.get(&target.key(name)) {
                Some(o) => (200, o.clone()),
                None => not_found(&target, name),
            }
        }
        (&Method::POST, None) => create(&shared, &target, body, &update_manager(&q, &headers)),
        (&Method::PUT, Some(name)) => replace(&shared, &target, name, body, &update_manager(&q, &headers)),
        (&Method::PATCH, Some(name)) => {
            let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
            patch(&shared, &target, name, content_type, &q, &headers, body)
        }
        (&Method::DELETE, Some(name)) => match shared.store.lock().unwrap().delete(&target.key(name)) {
            Some(o) => (200, o),
            None => not_found(&target, name),
        },
        _ => status_error(405, "MethodNotAllowed", format!("{method} not allowed on {}", uri.path())),
    };
    shared.notify();
    let written = matches!(method, Method::PUT | Method::PATCH) && code < 300;
    let lost = written
        && target.name.as_ref().is_some_and(|name| shared.store.lock().unwrap().answer_lost.remove(&target.key(name)));
    if lost {
        // The write is taken; its answer never comes (the client waits until it gives up or dies).
        std::future::pending::<()>().await;
    }
    json_response(code, &reply)
}

fn drop_status(object: &mut Value) {
    if let Some(m) = object.as_object_mut() {
        m.remove("status");
    }
}

fn resource_name(target: &Target) -> String {
    if target.group.is_empty() { target.plural.clone() } else { format!("{}.{}", target.plural, target.group) }
}

fn not_found(target: &Target, name: &str) -> Reply {
    status_error(404, "NotFound", format!("{} \"{name}\" not found", resource_name(target)))
}

fn visible(key: &Key, target: &Target) -> bool {
    key.group == target.group
        && key.plural == target.plural
        && (target.namespace.is_none() || key.namespace == target.namespace)
}

fn list(shared: &Shared, target: &Target, q: &BTreeMap<String, String>) -> Reply {
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
    (200, body)
}

pub(super) fn create(shared: &Shared, target: &Target, mut body: Value, manager: &str) -> Reply {
    let Some(name) = body["metadata"]["name"].as_str().map(str::to_string) else {
        return status_error(422, "Invalid", "metadata.name is required".into());
    };
    let mut store = shared.store.lock().unwrap();
    if let Some(ns) = &target.namespace {
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
    if store.objects.contains_key(&key) {
        return status_error(409, "AlreadyExists", format!("{} \"{name}\" already exists", resource_name(target)));
    }
    if target.with_status() {
        drop_status(&mut body);
    }
    super::jobs::on_create(&store, &key, &mut body);
    let id = ManagerId::update(manager, &target.api_version(), "");
    (201, store.write_update(&key, body, Some(id)))
}

fn precondition(existing: &Value, body: &Value) -> Option<Reply> {
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

/// What a write to the main resource or, for `/status`, to the status only, leaves of `next`.
fn confine(target: &Target, existing: &Value, mut next: Value) -> Value {
    if target.with_status() {
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
    next
}

fn write(store: &mut Store, target: &Target, key: &Key, existing: &Value, next: Value, manager: &str) -> Value {
    let next = confine(target, existing, next);
    store.write_update(key, next, Some(ManagerId::update(manager, &target.api_version(), target.subresource())))
}

fn replace(shared: &Shared, target: &Target, name: &str, body: Value, manager: &str) -> Reply {
    let key = target.key(name);
    let mut store = shared.store.lock().unwrap();
    let Some(existing) = store.objects.get(&key).cloned() else { return not_found(target, name) };
    if let Some(conflict) = precondition(&existing, &body) {
        return conflict;
    }
    (200, write(&mut store, target, &key, &existing, body, manager))
}

/// What an apply configures: not what the server keeps, and only the part of the object the
/// (sub)resource writes.
fn apply_config(target: &Target, body: &Value) -> Value {
    let mut config = fields::strip(body);
    if target.with_status() {
        if target.status {
            config = json!({ "status": config["status"].clone() });
            if config["status"].is_null() {
                config = json!({});
            }
        } else {
            drop_status(&mut config);
        }
    }
    config
}

pub(super) fn patch(
    shared: &Shared,
    target: &Target,
    name: &str,
    content_type: &str,
    q: &BTreeMap<String, String>,
    headers: &HeaderMap,
    body: Value,
) -> Reply {
    let key = target.key(name);
    let mut store = shared.store.lock().unwrap();
    let existing = store.objects.get(&key).cloned();
    if content_type.starts_with("application/apply-patch") {
        let manager = q.get("fieldManager").cloned().unwrap_or_default();
        if manager.is_empty() {
            return status_error(422, "Invalid", "fieldManager is required for apply patch".into());
        }
        let force = q.get("force").is_some_and(|f| f == "true");
        let id = ManagerId::apply(&manager, target.subresource());
        if existing.is_none() && target.status {
            return not_found(target, name);
        }
        if let Some(conflict) = existing.as_ref().and_then(|e| precondition(e, &body)) {
            return conflict;
        }
        let live = existing.clone().unwrap_or_else(
            || json!({ "apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": { "name": name } }),
        );
        let mut managed =
            if existing.is_some() { store.managed.get(&key).cloned().unwrap_or_default() } else { Managed::new() };
        let config = apply_config(target, &body);
        return match fields::apply(&mut managed, &live, &config, &id, &target.api_version(), &now(), force) {
            Err(conflicts) => {
                let (code, mut reply) = status_error(409, "Conflict", fields::conflict_message(&conflicts));
                reply["details"] = json!({
                    "name": name, "group": target.group, "kind": target.plural,
                    "causes": fields::conflict_causes(&conflicts),
                });
                (code, reply)
            }
            Ok(next) => {
                store.managed.insert(key.clone(), managed);
                match existing {
                    None => {
                        let mut next = next;
                        super::jobs::on_create(&store, &key, &mut next);
                        (201, store.insert(&key, next))
                    }
                    Some(existing) => {
                        let next = confine(target, &existing, next);
                        (200, store.update(&key, next, "MODIFIED"))
                    }
                }
            }
        };
    }
    let strategic = content_type.starts_with("application/strategic-merge-patch+json");
    if !(strategic || content_type.starts_with("application/merge-patch+json")) {
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
        m.remove("managedFields");
    }
    if strategic {
        fields::strategic_merge(&mut next, &patch);
    } else {
        merge(&mut next, &patch);
    }
    (200, write(&mut store, target, &key, &existing, next, &update_manager(q, headers)))
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
