//! The HTTP server against hostile clients, on the real daemon over loopback (issue 23, item 5):
//! the per-client limiters' memory is bounded, every response forbids sniffing and referrers, and
//! a token-protected endpoint refuses a wrong token before it reads (or waits for) the body.

use crate::support;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use futures::StreamExt;
use support::PATIENCE;
use support::daemon::{Daemon, Workspace};
use support::receiver::ClosedPort;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "server-hardening-token-0123";

/// The limiter cap docs/http-api.md states (`src/server/clients.rs`).
const MAX_TRACKED_CLIENTS: usize = 10_000;

/// A daemon with a server and a token; its one builder's registry refuses connections.
fn start(ws: &Workspace, closed: &ClosedPort, extra_server: &str) -> (Daemon, SocketAddr) {
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n[server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"BM_SERVER_TEST_TOKEN\"\n{extra_server}\n\n[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:{}/demo/b:latest\"\nwatch_run_image = false\n",
        closed.port()
    ));
    let mut daemon = Daemon::start_with_env(&config, &[("BM_SERVER_TEST_TOKEN", TOKEN)]);
    let addr = daemon.server_addr().parse().unwrap();
    (daemon, addr)
}

/// Sends `head` (a request head, its blank line included) and then `body` from `source` on a new
/// connection, and returns the response head as soon as it has come (the body is never waited for).
async fn exchange(source: Ipv4Addr, server: SocketAddr, head: &str, body: &[u8]) -> String {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source.into(), 0)).unwrap();
    let mut stream = socket.connect(server).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let read = async {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed without a response: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&got).into_owned()
    };
    // Nothing here should take long; past PATIENCE the server is waiting for something.
    tokio::time::timeout(PATIENCE, read).await.unwrap_or_else(|_| panic!("no response to {head:?}"))
}

/// The status code of a response head.
fn status(head: &str) -> u16 {
    head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("not a response: {head}"))
}

/// A hook for a tag nobody watches (accepted, checks nothing), from `source`, with the token.
async fn hook_from(source: Ipv4Addr, server: SocketAddr) -> u16 {
    let body = r#"{"push_data": {"tag": "x"}, "repository": {"repo_name": "nobody/watches"}}"#;
    let head = format!(
        "POST /hooks/dockerhub HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    status(&exchange(source, server, &head, body.as_bytes()).await)
}

/// The `i`th client address: 127.10.0.1 on (the whole of 127/8 is loopback).
fn client(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 10, 0, 1)) + i as u32)
}

/// `builder_monitor_http_clients_tracked{limiter="hooks"}`, None when it is not served.
async fn hook_clients_tracked(server: SocketAddr) -> Option<f64> {
    let text = support::http().get(format!("http://{server}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("builder_monitor_http_clients_tracked{limiter=\"hooks\"} "))
        .map(|v| v.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_new_client_addresses_share_one_hook_bucket() {
    let (ws, closed) = (Workspace::new(), ClosedPort::new());
    // One hook per address per 1,000 s (burst 1): no bucket refills, and none is forgotten, here.
    let (_daemon, server) = start(&ws, &closed, "hooks_per_second = 0.001");
    let codes: Vec<u16> = futures::stream::iter(0..MAX_TRACKED_CLIENTS)
        .map(|i| hook_from(client(i), server))
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(codes.iter().all(|c| *c == 202), "each address has a hook: {:?}", codes.iter().find(|c| **c != 202));
    assert_eq!(hook_clients_tracked(server).await, Some(MAX_TRACKED_CLIENTS as f64));
    // The limiter is full: two new addresses share the overflow bucket's one hook.
    let (first, second) = (client(MAX_TRACKED_CLIENTS), client(MAX_TRACKED_CLIENTS + 1));
    assert_eq!(hook_from(first, server).await, 202, "the overflow bucket's hook");
    assert_eq!(hook_from(second, server).await, 429, "another new address, the same spent bucket");
    assert_eq!(hook_clients_tracked(server).await, Some(MAX_TRACKED_CLIENTS as f64), "the map did not grow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_client_addresses_are_forgotten() {
    let (ws, closed) = (Workspace::new(), ClosedPort::new());
    // One hook every 2 s: an address's bucket is full again 2 s after its hook, forgettable 2 s
    // later, and forgotten at the next sweep (every 10 s).
    let (_daemon, server) = start(&ws, &closed, "hooks_per_second = 0.5");
    let codes: Vec<u16> =
        futures::stream::iter(0..200).map(|i| hook_from(client(i), server)).buffer_unordered(16).collect().await;
    assert!(codes.iter().all(|c| *c == 202), "{codes:?}");
    let remembered = hook_clients_tracked(server).await.expect("the limiter's size is served");
    assert!(remembered > 0.0, "the addresses that just sent a hook are remembered");
    let deadline = Instant::now() + PATIENCE;
    while hook_clients_tracked(server).await != Some(0.0) {
        assert!(Instant::now() < deadline, "idle addresses still remembered after {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_forbids_sniffing_and_referrers() {
    let (ws, closed) = (Workspace::new(), ClosedPort::new());
    let (_daemon, server) = start(&ws, &closed, "");
    let base = format!("http://{server}");
    let http = support::http();
    let too_big = vec![b' '; (1 << 20) + 1];
    let requests = [
        http.get(format!("{base}/")),
        http.get(format!("{base}/healthz")),
        http.get(format!("{base}/readyz")),
        http.get(format!("{base}/metrics")),
        http.get(format!("{base}/api/v1/builders")),
        http.get(format!("{base}/api/v1/builders/b")),
        http.get(format!("{base}/api/v1/builders/nobody")),
        http.get(format!("{base}/api/v1/changes")),
        http.get(format!("{base}/no/such/page")),
        http.delete(format!("{base}/healthz")),
        http.post(format!("{base}/api/v1/builders/b/check")).bearer_auth(TOKEN),
        http.post(format!("{base}/api/v1/freeze")).bearer_auth("wrong"),
        http.post(format!("{base}/api/v1/freeze")).bearer_auth(TOKEN).body(too_big),
        http.post(format!("{base}/api/v1/changes/nothing/approve")).bearer_auth(TOKEN),
        http.post(format!("{base}/hooks/dockerhub")).bearer_auth(TOKEN).body("{"),
        http.post(format!("{base}/hooks/nowhere")).bearer_auth(TOKEN).body("{}"),
    ];
    let mut statuses = Vec::new();
    for request in requests {
        let response = request.send().await.unwrap();
        let url = response.url().clone();
        let headers = response.headers();
        assert_eq!(headers.get("x-content-type-options").map(|v| v.to_str().unwrap()), Some("nosniff"), "{url}");
        assert_eq!(headers.get("referrer-policy").map(|v| v.to_str().unwrap()), Some("no-referrer"), "{url}");
        statuses.push(response.status().as_u16());
    }
    // Successes, refusals and errors alike.
    for code in [200, 202, 400, 401, 404, 405, 413] {
        assert!(statuses.contains(&code), "{code} among {statuses:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_refused_before_the_body_is_read() {
    let (ws, closed) = (Workspace::new(), ClosedPort::new());
    let (_daemon, server) = start(&ws, &closed, "");
    let endpoints = [
        ("POST", "/api/v1/freeze", "Authorization: Bearer wrong\r\n"),
        ("DELETE", "/api/v1/freeze", ""),
        ("POST", "/api/v1/changes/c-1/approve", "Authorization: Bearer wrong\r\n"),
        ("POST", "/api/v1/builders/b/check", ""),
        ("POST", "/hooks/distribution", "Authorization: Bearer wrong\r\n"),
        ("POST", "/hooks/dockerhub?token=wrong", ""),
    ];
    for (method, path, auth) in endpoints {
        // A body under the 1 MiB limit of which 1 KiB comes, then nothing: a slow client.
        let head = format!("{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 524288\r\n\r\n");
        let answer = exchange(Ipv4Addr::LOCALHOST, server, &head, &[b'{'; 1024]).await;
        assert_eq!(status(&answer), 401, "{method} {path} with half a body:\n{answer}");
        // 100 MiB announced, none sent.
        let head = format!("{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 104857600\r\n\r\n");
        let answer = exchange(Ipv4Addr::LOCALHOST, server, &head, b"").await;
        assert_eq!(status(&answer), 401, "{method} {path} with no body:\n{answer}");
    }
}
