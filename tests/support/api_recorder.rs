//! A loopback plain-HTTP proxy in front of the test control plane's apiserver that records every
//! request (method, path, query) and forwards it with an admin client (its token and TLS),
//! streaming the answer back as it comes (a watch stays open through it until the server ends
//! it). What a client or a daemon pointed at [`ApiRecorder::url`] asks of the API server, counted:
//! LISTs, GETs and WATCHes with their `resourceVersion`, `timeoutSeconds` and
//! `allowWatchBookmarks`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Response, StatusCode};
use tokio::sync::Notify;

/// One request as the proxy saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: BTreeMap<String, String>,
}

impl Recorded {
    /// The API verb: `WATCH` and `LIST` on a collection, `GET` of one object (or a subresource),
    /// and `POST`, `PUT`, `PATCH`, `DELETE` as sent; `OTHER` for paths outside the resource APIs
    /// (discovery, `/version`).
    pub fn verb(&self) -> &'static str {
        let Some(rest) = resource_path(&self.path) else { return "OTHER" };
        let collection = rest.len() == 1;
        match self.method.as_str() {
            "GET" if self.query.get("watch").is_some_and(|w| w == "true" || w == "1") => "WATCH",
            "GET" if collection => "LIST",
            "GET" => "GET",
            "POST" => "POST",
            "PUT" => "PUT",
            "PATCH" => "PATCH",
            "DELETE" => "DELETE",
            _ => "OTHER",
        }
    }

    /// The resource asked for (`configmaps`, `leases`, …); empty outside the resource APIs.
    pub fn resource(&self) -> &str {
        resource_path(&self.path).and_then(|rest| rest.first().copied()).unwrap_or_default()
    }

    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }
}

/// The segments of `path` after its API group and version and after `namespaces/NS`: `[resource]`
/// for a collection, `[resource, name, …]` for an object; `None` outside the resource APIs (and
/// for a namespace object itself, a collection of one resource only when listed).
fn resource_path(path: &str) -> Option<Vec<&str>> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.as_slice() {
        ["api", "v1", rest @ ..] => rest,
        ["apis", _, _, rest @ ..] => rest,
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _, inner @ ..] if !inner.is_empty() => inner,
        _ => rest,
    };
    (!rest.is_empty()).then(|| rest.to_vec())
}

struct Shared {
    client: kube::Client,
    seen: Mutex<Vec<Recorded>>,
    changed: Notify,
}

pub struct ApiRecorder {
    /// `http://127.0.0.1:PORT`, the server a client is pointed at.
    pub url: String,
    shared: Arc<Shared>,
    _serving: tokio::task::JoinHandle<()>,
}

impl ApiRecorder {
    /// Starts recording in front of the server that `client` (an admin client) reaches.
    pub async fn start(client: kube::Client) -> ApiRecorder {
        let shared = Arc::new(Shared { client, seen: Mutex::new(Vec::new()), changed: Notify::new() });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the API recorder");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().fallback(forward).with_state(shared.clone());
        let serving = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ApiRecorder { url, shared, _serving: serving }
    }

    /// Every request so far, in the order they came.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// Forgets the requests so far.
    pub fn clear(&self) {
        self.shared.seen.lock().unwrap().clear();
    }

    /// Waits until `wanted` holds of the requests so far; fails the test after `PATIENCE`.
    pub async fn wait_for<T>(&self, what: &str, wanted: impl Fn(&[Recorded]) -> Option<T>) -> T {
        let waiting = async {
            loop {
                let notified = self.shared.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if let Some(found) = wanted(&self.shared.seen.lock().unwrap()) {
                    return found;
                }
                notified.await;
            }
        };
        match tokio::time::timeout(super::PATIENCE, waiting).await {
            Ok(found) => found,
            Err(_) => panic!("{what}: not within {:?}; the requests: {:#?}", super::PATIENCE, self.requests()),
        }
    }

    /// A kubeconfig naming this proxy as the server, with no credentials (the proxy adds them),
    /// written to `dir`; `namespace` is its context's namespace.
    pub fn kubeconfig(&self, dir: &Path, namespace: &str) -> PathBuf {
        let path = dir.join("recorded-kubeconfig.yaml");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: recorded\n  cluster:\n    server: {}\n\
             users:\n- name: recorded\n  user: {{}}\ncontexts:\n- name: recorded\n  context:\n    cluster: recorded\n    \
             user: recorded\n    namespace: {namespace}\ncurrent-context: recorded\n",
            self.url
        );
        std::fs::write(&path, text).expect("write the recorded kubeconfig");
        path
    }

    /// A client of its own (with its own connections) that goes through this proxy.
    pub fn client(&self, namespace: &str) -> kube::Client {
        let mut config = kube::Config::new(self.url.parse().expect("the proxy's URL"));
        config.default_namespace = namespace.to_string();
        kube::Client::try_from(config).expect("a client of the recorder")
    }
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let query: BTreeMap<String, String> = parts.uri.query().map(|q| url_pairs(q).collect()).unwrap_or_default();
    let recorded = Recorded { method: parts.method.to_string(), path: parts.uri.path().to_string(), query };
    shared.seen.lock().unwrap().push(recorded);
    shared.changed.notify_waiters();
    let Ok(bytes) = axum::body::to_bytes(body, 64 << 20).await else {
        return status(StatusCode::BAD_REQUEST);
    };
    let path_and_query = parts.uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
    let mut outgoing = http_request(&parts.method, &path_and_query);
    for name in ["content-type", "accept"] {
        if let Some(value) = parts.headers.get(name) {
            outgoing = outgoing.header(name, value);
        }
    }
    let Ok(outgoing) = outgoing.body(kube::client::Body::from(bytes.to_vec())) else {
        return status(StatusCode::BAD_REQUEST);
    };
    match shared.client.send(outgoing).await {
        Ok(answer) => {
            let (parts, body) = answer.into_parts();
            Response::from_parts(parts, Body::new(body))
        }
        Err(_) => status(StatusCode::BAD_GATEWAY),
    }
}

fn http_request(method: &axum::http::Method, path_and_query: &str) -> axum::http::request::Builder {
    axum::http::Request::builder().method(method.clone()).uri(path_and_query)
}

fn status(code: StatusCode) -> Response<Body> {
    Response::builder().status(code).body(Body::empty()).unwrap()
}

/// The `name=value` pairs of a query string, percent-decoded.
fn url_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(name), decode(value))
    })
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match u8::from_str_radix(&text[i + 1..i + 3], 16) {
                Ok(b) => {
                    out.push(b);
                    i += 2;
                }
                Err(_) => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
