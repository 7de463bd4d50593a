//! A loopback HTTP proxy in front of a registry that records every request and can answer some of
//! them with injected faults (429 with Retry-After, 5xx, redirects elsewhere), all of them with one
//! status (down), or not at all (hang).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Response, StatusCode};

#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub status: u16,
    pub at: Instant,
    pub injected: bool,
    pub authorization: bool,
    /// Body bytes of the request and of the answer (0 for what the proxy answered itself).
    pub sent: usize,
    pub received: usize,
    /// How long the registry took to answer (0 for what the proxy answered itself).
    pub took: std::time::Duration,
}

#[derive(Debug, Clone)]
pub struct Fault {
    /// Only requests with this method take the fault (any method when `None`).
    pub method: Option<String>,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The Distribution error code of the answer's body (`INJECTED` when `None`).
    pub code: Option<String>,
    /// Only requests whose path contains this take the fault (any path when `None`).
    pub path_contains: Option<String>,
}

impl Fault {
    pub fn status(status: u16) -> Self {
        Fault { method: None, status, headers: Vec::new(), code: None, path_contains: None }
    }
    /// Forwards the request but adds `headers` to the registry's answer.
    pub fn decorate() -> Self {
        Fault { method: None, status: 0, headers: Vec::new(), code: None, path_contains: None }
    }
    pub fn on(mut self, method: &str) -> Self {
        self.method = Some(method.into());
        self
    }
    /// Only for requests whose path contains `part`.
    pub fn at(mut self, part: &str) -> Self {
        self.path_contains = Some(part.into());
        self
    }
    pub fn code(mut self, code: &str) -> Self {
        self.code = Some(code.into());
        self
    }
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// Answers requests with `307 Location: http://TO/<same path>` instead of forwarding.
#[derive(Debug, Clone)]
pub struct Redirect {
    /// `host:port` of the other server.
    pub to: String,
    /// Only paths containing this are redirected (every `/v2/…` path when `None`).
    pub path_contains: Option<String>,
}

impl Redirect {
    pub fn all(to: &str) -> Self {
        Redirect { to: to.into(), path_contains: None }
    }
    /// Blob requests only, as a registry sends them to its storage.
    pub fn blobs(to: &str) -> Self {
        Self::paths(to, "/blobs/")
    }
    pub fn paths(to: &str, containing: &str) -> Self {
        Redirect { to: to.into(), path_contains: Some(containing.into()) }
    }
}

/// What a [`Trap`] does to the request it catches.
#[derive(Clone)]
pub enum TrapAction {
    /// Holds the request before forwarding it: `held` is notified, then it waits for `release`.
    Hold { held: Arc<tokio::sync::Notify>, release: Arc<tokio::sync::Notify> },
    /// Forwards the request, then runs this before the answer goes back (a kill, a competing push).
    After(Arc<dyn Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync>),
}

/// Catches one request: the first with `method` whose path contains `path_contains`, after letting
/// `skip` such requests through.
#[derive(Clone)]
pub struct Trap {
    pub method: String,
    pub path_contains: String,
    pub skip: usize,
    pub action: TrapAction,
}

impl Trap {
    /// A trap that holds the request until the returned `release` is notified; `held` is notified
    /// once it holds it.
    pub fn hold(method: &str, path_contains: &str) -> (Self, Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>) {
        let (held, release) = (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
        let action = TrapAction::Hold { held: held.clone(), release: release.clone() };
        (Trap { method: method.into(), path_contains: path_contains.into(), skip: 0, action }, held, release)
    }

    /// A trap that runs `then` after forwarding the request, before answering it.
    pub fn after<F, Fut>(method: &str, path_contains: &str, then: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let action = TrapAction::After(Arc::new(move || Box::pin(then())));
        Trap { method: method.into(), path_contains: path_contains.into(), skip: 0, action }
    }
}

struct Shared {
    upstream: String,
    client: reqwest::Client,
    seen: Mutex<Vec<Seen>>,
    faults: Mutex<VecDeque<Fault>>,
    redirect: Mutex<Option<Redirect>>,
    /// While set, every request is answered with this status (an outage).
    down: Mutex<Option<u16>>,
    hang: AtomicBool,
    traps: Mutex<Vec<Trap>>,
    /// Forward the client's Host header, so the registry's absolute URLs and notifications name
    /// the proxy (as they would name a load balancer in front of it).
    preserve_host: AtomicBool,
    /// Releases hanging requests when the proxy is dropped.
    closed: CancellationToken,
}

pub struct Proxy {
    /// `127.0.0.1:PORT`
    pub host: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy forwarding to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> Self {
        let shared = Arc::new(Shared {
            upstream: format!("http://{upstream}"),
            client: super::http(),
            seen: Mutex::new(Vec::new()),
            faults: Mutex::new(VecDeque::new()),
            redirect: Mutex::new(None),
            down: Mutex::new(None),
            hang: AtomicBool::new(false),
            traps: Mutex::new(Vec::new()),
            preserve_host: AtomicBool::new(false),
            closed: CancellationToken::new(),
        });
        let app = axum::Router::new().fallback(handle).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let host = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy { host, shared, task }
    }

    /// Queues a fault for the next matching request.
    pub fn inject(&self, fault: Fault) {
        self.shared.faults.lock().unwrap().push_back(fault);
    }

    /// Sets a trap for one request (see [`Trap`]).
    pub fn trap(&self, trap: Trap) {
        self.shared.traps.lock().unwrap().push(trap);
    }

    /// Redirects matching requests elsewhere until called with `None`.
    pub fn redirect(&self, redirect: Option<Redirect>) {
        *self.shared.redirect.lock().unwrap() = redirect;
    }

    /// Answers every request with `status` until called with `None`: the registry is down.
    pub fn down(&self, status: Option<u16>) {
        *self.shared.down.lock().unwrap() = status;
    }

    /// While on, every request is accepted and read but never answered (recorded with status 0).
    pub fn preserve_host(&self, on: bool) {
        self.shared.preserve_host.store(on, Ordering::SeqCst);
    }

    pub fn hang(&self, on: bool) {
        self.shared.hang.store(on, Ordering::SeqCst);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    pub fn clear(&self) {
        self.shared.seen.lock().unwrap().clear();
    }

    pub fn count(&self, method: &str) -> usize {
        self.seen().iter().filter(|s| s.method == method).count()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.closed.cancel();
        self.task.abort();
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response<Body> {
    let method = request.method().to_string();
    let path = request.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    let authorization = request.headers().contains_key("authorization");
    let record_timed = |status: u16, injected: bool, at: Instant, sent: usize, received: usize, took| {
        shared.seen.lock().unwrap().push(Seen {
            method: method.clone(),
            path: path.clone(),
            status,
            at,
            injected,
            authorization,
            sent,
            received,
            took,
        });
    };
    let record = |status: u16, injected: bool| {
        record_timed(status, injected, Instant::now(), 0, 0, std::time::Duration::ZERO);
    };
    if shared.hang.load(Ordering::SeqCst) {
        record(0, true);
        shared.closed.cancelled().await;
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        return response;
    }
    let down = *shared.down.lock().unwrap();
    if let Some(status) = down {
        record(status, true);
        let mut response = Response::new(Body::from("{\"errors\":[{\"code\":\"UNAVAILABLE\",\"message\":\"down\"}]}"));
        *response.status_mut() = StatusCode::from_u16(status).unwrap();
        return response;
    }
    let redirect = shared
        .redirect
        .lock()
        .unwrap()
        .clone()
        .filter(|r| r.path_contains.as_deref().map_or(path.starts_with("/v2/"), |p| path.contains(p)));
    if let Some(redirect) = redirect {
        record(307, true);
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::TEMPORARY_REDIRECT;
        let location = format!("http://{}{path}", redirect.to);
        response.headers_mut().insert("location", HeaderValue::from_str(&location).unwrap());
        return response;
    }
    let fault = {
        let mut faults = shared.faults.lock().unwrap();
        let position = faults.iter().position(|f| {
            f.method.as_deref().is_none_or(|m| m == method)
                && f.path_contains.as_deref().is_none_or(|p| path.contains(p))
        });
        position.and_then(|i| faults.remove(i))
    };
    let (fault, extra_headers) = match fault {
        Some(f) if f.status == 0 => (None, f.headers),
        other => (other, Vec::new()),
    };
    if let Some(fault) = fault {
        record(fault.status, true);
        let mut response = Response::new(Body::from(format!(
            "{{\"errors\":[{{\"code\":\"{}\",\"message\":\"injected HTTP {}\"}}]}}",
            fault.code.as_deref().unwrap_or("INJECTED"),
            fault.status
        )));
        *response.status_mut() = StatusCode::from_u16(fault.status).unwrap();
        for (name, value) in fault.headers {
            response
                .headers_mut()
                .insert(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(&value).unwrap());
        }
        return response;
    }
    let trap = {
        let mut traps = shared.traps.lock().unwrap();
        let position = traps.iter().position(|t| t.method == method && path.contains(&t.path_contains));
        match position {
            Some(i) if traps[i].skip > 0 => {
                traps[i].skip -= 1;
                None
            }
            Some(i) => Some(traps.remove(i).action),
            None => None,
        }
    };
    let after = match trap {
        Some(TrapAction::Hold { held, release }) => {
            held.notify_one();
            release.notified().await;
            None
        }
        Some(TrapAction::After(then)) => Some(then),
        None => None,
    };
    let mut forward = shared.client.request(request.method().clone(), format!("{}{path}", shared.upstream));
    for (name, value) in request.headers() {
        if name != "host" || shared.preserve_host.load(Ordering::SeqCst) {
            forward = forward.header(name, value);
        }
    }
    let body = axum::body::to_bytes(request.into_body(), 64 << 20).await.unwrap_or_default();
    let sent = body.len();
    let forwarded = Instant::now();
    let upstream = match forward.body(body).send().await {
        Ok(r) => r,
        Err(e) => {
            record(502, false);
            let mut response = Response::new(Body::from(e.to_string()));
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            return response;
        }
    };
    let status = upstream.status();
    let answered = Instant::now();
    let headers = upstream.headers().clone();
    let bytes = upstream.bytes().await.unwrap_or_default();
    let took = answered - forwarded;
    record_timed(status.as_u16(), false, answered, sent, bytes.len(), took);
    if let Some(then) = after {
        then().await;
    }
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    for (name, value) in &headers {
        if name != "transfer-encoding" && name != "connection" {
            response.headers_mut().insert(name.clone(), value.clone());
        }
    }
    for (name, value) in extra_headers {
        response
            .headers_mut()
            .insert(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(&value).unwrap());
    }
    response
}
