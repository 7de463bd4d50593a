//! A real HTTP receiver on loopback for alert tests: records every request and answers from a
//! script (status codes, Retry-After, redirects, delays), 200 once the script is used up.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Response, StatusCode};
use tokio::sync::Notify;

use super::PATIENCE;

#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

#[derive(Debug, Clone)]
pub enum Reply {
    Status(u16),
    /// A status with one header (e.g. 429 + Retry-After).
    WithHeader(u16, &'static str, String),
    /// Wait, then answer 200 (to catch a request in flight).
    Delay(Duration),
    /// Like `Delay`, but only for a request whose body contains the text; others pass it by.
    DelayIfContains(String, Duration),
    /// Like `Status`, but only for a request whose body contains the text; others pass it by.
    StatusIfContains(String, u16),
}

struct Shared {
    received: Mutex<Vec<Received>>,
    script: Mutex<VecDeque<Reply>>,
    arrived: Notify,
}

pub struct Receiver {
    pub url: String,
    pub port: u16,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

/// A loopback port nothing listens on: connections to it are refused. The port stays bound (not
/// listening) while this lives, so no other test's listener can take it; with `SO_REUSEADDR` a
/// `Receiver::start_on` may still listen there later.
pub struct ClosedPort(tokio::net::TcpSocket);

impl ClosedPort {
    pub fn new() -> Self {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_reuseaddr(true).expect("SO_REUSEADDR");
        socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind a closed port");
        ClosedPort(socket)
    }

    pub fn port(&self) -> u16 {
        self.0.local_addr().expect("bound").port()
    }
}

impl Receiver {
    pub async fn start() -> Self {
        Self::start_on(0).await
    }

    pub async fn start_on(port: u16) -> Self {
        let shared = Arc::new(Shared {
            received: Mutex::new(Vec::new()),
            script: Mutex::new(VecDeque::new()),
            arrived: Notify::new(),
        });
        let app = axum::Router::new().fallback(handle).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.expect("bind receiver");
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { url: format!("http://127.0.0.1:{port}/hook"), port, shared, task }
    }

    /// Queues replies for the next requests.
    pub fn reply(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.script.lock().unwrap().extend(replies);
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// Waits until a request whose body contains `text` arrived.
    pub async fn wait_for_body(&self, text: &str) -> Received {
        loop {
            let n = self.received().len();
            if let Some(r) = self.received().into_iter().find(|r| String::from_utf8_lossy(&r.body).contains(text)) {
                return r;
            }
            self.wait_for(n + 1).await;
        }
    }

    /// Waits until at least `n` requests arrived.
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let arrived = self.shared.arrived.notified();
            let received = self.received();
            if received.len() >= n {
                return received;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                panic!("receiver got {} requests, expected {n}", self.received().len());
            }
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response<Body> {
    let path = request.uri().path().to_string();
    let headers = request.headers().clone();
    let body = axum::body::to_bytes(request.into_body(), 16 << 20).await.unwrap_or_default().to_vec();
    let reply = {
        let mut script = shared.script.lock().unwrap();
        match script.front() {
            Some(Reply::DelayIfContains(text, _) | Reply::StatusIfContains(text, _))
                if !String::from_utf8_lossy(&body).contains(text.as_str()) =>
            {
                None
            }
            _ => script.pop_front(),
        }
    };
    // Recorded on arrival: a sender killed while waiting for the answer has still delivered.
    shared.received.lock().unwrap().push(Received { path, headers, body, at: Instant::now() });
    shared.arrived.notify_waiters();
    if let Some(Reply::Delay(d) | Reply::DelayIfContains(_, d)) = &reply {
        tokio::time::sleep(*d).await;
    }
    let mut response = Response::new(Body::empty());
    match reply {
        Some(Reply::Status(code) | Reply::StatusIfContains(_, code)) => {
            *response.status_mut() = StatusCode::from_u16(code).unwrap()
        }
        Some(Reply::WithHeader(code, name, value)) => {
            *response.status_mut() = StatusCode::from_u16(code).unwrap();
            response.headers_mut().insert(name, value.parse().unwrap());
        }
        Some(Reply::Delay(_) | Reply::DelayIfContains(..)) | None => {}
    }
    response
}
