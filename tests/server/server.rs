//! The HTTP server against real parts: registry push notifications driving checks, forged and
//! unauthorised hooks, exact metrics, the API versus `status --json`, probes and limits.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use builder_monitor::config::Config;
use builder_monitor::daemon::Parts;
use builder_monitor::ledger::Ledger;
use builder_monitor::monitor::Monitor;
use builder_monitor::schedule::Clock;
use builder_monitor::server::{self, ServerState};
use serde_json::{Value, json};
use support::daemon::{Daemon, Workspace, run_with_env};
use support::images::{Format, Image, Pusher};
use support::proxy::{Fault, Proxy};
use support::registry::TestRegistry;
use tokio_util::sync::CancellationToken;

mod hooks;

const TOKEN: &str = "test-api-token-0123456789";

/// A strict reading of the Prometheus/OpenMetrics text format: every line is a comment of a known
/// kind or `name{labels} value`, ending with `# EOF`. Returns sample → value.
fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "exposition ends with # EOF");
    for line in &lines[..lines.len() - 1] {
        if let Some(comment) = line.strip_prefix("# ") {
            let kind = comment.split(' ').next().unwrap();
            assert!(["HELP", "TYPE", "UNIT"].contains(&kind), "unknown comment: {line}");
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value: {line}"));
        let name = series.split('{').next().unwrap();
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'), "bad name: {line}");
        let labels = series.strip_prefix(name).unwrap_or_default();
        if !labels.is_empty() {
            assert!(labels.starts_with('{') && labels.ends_with('}'), "bad labels: {line}");
            for pair in labels[1..labels.len() - 1].split("\",").filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once("=\"").unwrap_or_else(|| panic!("bad label: {line}"));
                assert!(k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "bad label name: {line}");
                assert!(!v.trim_end_matches('"').contains('"'), "unescaped quote: {line}");
            }
        }
        assert!(samples.insert(series.to_string(), value).is_none(), "duplicate series: {line}");
    }
    samples
}

struct Served {
    monitor: Arc<Monitor>,
    ledger: Ledger,
    base: String,
    stop: CancellationToken,
    dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Monitor + server in process, on a free loopback port; the config is also written to disk.
async fn serve(config_text: &str) -> Served {
    serve_as(config_text, None).await
}

/// `serve`, as one of several replicas when `leading` is given.
async fn serve_as(config_text: &str, leading: Option<tokio::sync::watch::Receiver<bool>>) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, config_text).unwrap();
    let config = Arc::new(Config::parse(&path, config_text).unwrap());
    let builder_monitor::config::StateLocation::Sqlite(state) = &config.monitor.state else { unreachable!() };
    let ledger = Ledger::open(state).unwrap();
    let monitor = Parts::new(config.clone(), ledger.clone(), Clock::System, None).unwrap().monitor;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let mut settings = config.server.clone().expect("[server] in the config");
    // The daemon reads the token from the environment; in process it is handed over directly.
    settings.api_token = Some(builder_monitor::config::Secret::new(TOKEN));
    let mut state = ServerState::new(config.clone(), settings, monitor.handle(), ledger.clone());
    if let Some(leading) = leading {
        state = state.with_leadership(leading);
    }
    let state = Arc::new(state);
    let stop = CancellationToken::new();
    tokio::spawn(server::serve(state, listener, stop.clone()));
    Served { monitor, ledger, base, stop, dir }
}

fn config(host: &str, extra_server: &str) -> String {
    format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n[server]\nlisten = \"127.0.0.1:0\"\n{extra_server}\n\n[[builders]]\nname = \"b\"\nimage = \"{host}/demo/b:latest\"\nwatch_run_image = false\n"
    )
}

#[tokio::test]
async fn metrics_count_exactly_what_happened() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64").salt("1"), Format::Oci).await;
    let proxy = Proxy::start(&registry.host).await;
    let s = serve(&config(&proxy.host, "")).await;
    let check = || async { s.monitor.check_builder("b").await.unwrap().unwrap() };
    check().await; // pin: HEAD + GET manifest + GET config
    for _ in 0..3 {
        check().await;
    }
    proxy.inject(Fault::status(429).on("HEAD").header("Retry-After", "1"));
    check().await; // 429, then HEAD 200
    let v2 = pusher.push_image("demo/b", Some("latest"), &Image::new("amd64").salt("2"), Format::Oci).await;
    check().await; // change: HEAD + GET manifest + GET config

    let text = support::http().get(format!("{}/metrics", s.base)).send().await.unwrap().text().await.unwrap();
    let m = parse_metrics(&text);
    let reg = &proxy.host;
    let get = |k: &str| m.get(k).copied().unwrap_or_else(|| panic!("{k} missing from:\n{text}"));
    assert_eq!(get("builder_monitor_checks_total{builder=\"b\",result=\"ok\"}"), 6.0);
    assert!(!m.contains_key("builder_monitor_checks_total{builder=\"b\",result=\"error\"}"));
    assert_eq!(get("builder_monitor_check_duration_seconds_count"), 6.0);
    assert_eq!(get("builder_monitor_changes_total{builder=\"b\",kind=\"unknown\"}"), 1.0);
    assert_eq!(get(&format!("builder_monitor_registry_rate_limited_total{{registry=\"{reg}\"}}")), 1.0);
    assert_eq!(
        get(&format!("builder_monitor_registry_requests_total{{registry=\"{reg}\",method=\"HEAD\",status=\"200\"}}")),
        6.0
    );
    assert_eq!(
        get(&format!("builder_monitor_registry_requests_total{{registry=\"{reg}\",method=\"HEAD\",status=\"429\"}}")),
        1.0
    );
    assert_eq!(
        get(&format!("builder_monitor_registry_requests_total{{registry=\"{reg}\",method=\"GET\",status=\"200\"}}")),
        4.0
    );
    assert!(
        get(&format!("builder_monitor_rate_limit_wait_seconds_total{{registry=\"{reg}\"}}")) >= 1.0,
        "Retry-After waited"
    );
    assert_eq!(get(&format!("builder_monitor_pinned_info{{builder=\"b\",digest=\"{}\"}}", v2.digest)), 1.0);
    assert_eq!(
        m.keys().filter(|k| k.starts_with("builder_monitor_pinned_info")).count(),
        1,
        "the old digest's series is gone"
    );
    let last = get("builder_monitor_last_successful_check_timestamp_seconds{builder=\"b\"}");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!((now - last).abs() < 60.0, "{last} vs {now}");
    assert!(!m.keys().any(|k| k.starts_with("builder_monitor_token_fetches")), "anonymous registry: no tokens");
    // Every request the proxy saw is counted.
    let counted: f64 =
        m.iter().filter(|(k, _)| k.starts_with("builder_monitor_registry_requests_total")).map(|(_, v)| v).sum();
    assert_eq!(counted as usize, proxy.seen().len());
}

/// A failed check is counted with the reason the check records (the registry error's own);
/// a successful one has no `reason` label.
#[tokio::test]
async fn failed_checks_are_counted_by_their_reason() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let proxy = Proxy::start(&registry.host).await;
    let extra = format!("\n[registries.\"{}\"]\nmax_attempts = 1\n", proxy.host);
    let s = serve(&format!("{}{extra}", config(&proxy.host, ""))).await;
    let check = || async { s.monitor.check_builder("b").await.unwrap().unwrap() };
    check().await; // nothing pushed yet: tag_missing
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    check().await;
    proxy.down(Some(503));
    check().await;
    check().await;
    proxy.down(None);

    let text = support::http().get(format!("{}/metrics", s.base)).send().await.unwrap().text().await.unwrap();
    let m = parse_metrics(&text);
    let series: BTreeMap<&str, f64> = m
        .iter()
        .filter(|(k, _)| k.starts_with("builder_monitor_checks_total"))
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    let expected = BTreeMap::from([
        ("builder_monitor_checks_total{builder=\"b\",result=\"ok\"}", 1.0),
        ("builder_monitor_checks_total{builder=\"b\",result=\"error\",reason=\"tag_missing\"}", 1.0),
        ("builder_monitor_checks_total{builder=\"b\",result=\"error\",reason=\"registry_unavailable\"}", 2.0),
    ]);
    assert_eq!(series, expected, "{text}");
    let recorded = s.ledger.watch("b").await.unwrap().unwrap();
    assert_eq!(recorded.last_error_reason.as_deref(), Some("registry_unavailable"), "the reason the check records");
}

async fn get_json(url: &str, token: Option<&str>) -> (u16, Value) {
    let mut request = support::http().get(url);
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

// The binary `status --json` runs while the in-process server serves: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_matches_status_json_and_probes_tell_readiness() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64").salt("1"), Format::Oci).await;
    let text = config(&registry.host, "public_read = false");
    let s = serve(&text).await;

    let (code, ready) = get_json(&format!("{}/readyz", s.base), None).await;
    assert_eq!((code, &ready["first_check_cycle"]), (503, &json!(false)), "{ready}");
    assert_eq!(support::http().get(format!("{}/healthz", s.base)).send().await.unwrap().status(), 200);

    s.monitor.check_builder("b").await.unwrap().unwrap();
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64").salt("2"), Format::Oci).await;
    s.monitor.check_builder("b").await.unwrap().unwrap();
    let (code, ready) = get_json(&format!("{}/readyz", s.base), None).await;
    assert_eq!((code, &ready["ready"]), (200, &json!(true)), "{ready}");

    assert_eq!(get_json(&format!("{}/api/v1/builders", s.base), None).await.0, 401, "public_read = false");
    let (code, api) = get_json(&format!("{}/api/v1/builders", s.base), Some(TOKEN)).await;
    assert_eq!(code, 200);
    let out = run_with_env(
        &["status", "--json", "--config", s.dir.path().join("config.toml").to_str().unwrap()],
        &[("BM_TEST_API_TOKEN", TOKEN)],
        s.dir.path(),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let status: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(api, status["builders"], "the API and status --json show the same state");

    let (code, one) = get_json(&format!("{}/api/v1/builders/b", s.base), Some(TOKEN)).await;
    assert_eq!((code, &one), (200, &status["builders"][0]));
    assert_eq!(get_json(&format!("{}/api/v1/builders/nope", s.base), Some(TOKEN)).await.0, 404);
    let (code, changes) = get_json(&format!("{}/api/v1/changes?builder=b&limit=5", s.base), Some(TOKEN)).await;
    assert_eq!(code, 200);
    assert_eq!(changes.as_array().unwrap().len(), 1);
    assert_eq!(changes[0]["id"], status["builders"][0]["changes"][0]["id"]);
    assert_eq!(changes[0]["change"]["kind"], "unknown");
}

#[tokio::test]
async fn a_standby_is_ready_says_so_and_leaves_checks_to_the_leader() {
    let (leading, standby) = tokio::sync::watch::channel(false);
    // No registry is needed: a standby never checks.
    let s = serve_as(&config("127.0.0.1:9", ""), Some(standby)).await;
    let (code, ready) = get_json(&format!("{}/readyz", s.base), None).await;
    assert_eq!((code, &ready["leader"], &ready["ready"]), (200, &json!(false), &json!(true)), "{ready}");

    let check = support::http().post(format!("{}/api/v1/builders/b/check", s.base)).bearer_auth(TOKEN).send().await;
    let check = check.unwrap();
    assert_eq!(check.status(), 503);
    assert_eq!(check.headers()["retry-after"], "1");
    let hook = support::http()
        .post(format!("{}/hooks/distribution", s.base))
        .bearer_auth(TOKEN)
        .body(json!({ "events": [] }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(hook.status(), 503, "a standby does not swallow a hook: the sender retries");

    leading.send_replace(true);
    let (code, ready) = get_json(&format!("{}/readyz", s.base), None).await;
    assert_eq!((code, &ready["leader"], &ready["first_check_cycle"]), (503, &json!(true), &json!(false)), "{ready}");
    let check = support::http().post(format!("{}/api/v1/builders/b/check", s.base)).bearer_auth(TOKEN).send().await;
    assert_eq!(check.unwrap().status(), 202);
}

/// The soft limit on open descriptors of this process, from /proc (no unsafe call needed).
fn open_file_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("Max open files"))?.to_string();
            line.split_whitespace().nth(3)?.parse().ok()
        })
        .unwrap_or(1024)
}

/// A connection from `source` that sends half a request head and stops.
async fn half_open(server: std::net::SocketAddr, source: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    let mut stream = socket.connect(server).await.unwrap();
    // A closed-at-once connection may refuse the write; either way the server decides.
    let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await;
    stream
}

/// Reads until the server closes the connection (end of stream or reset).
async fn closed_by_server(stream: &mut tokio::net::TcpStream) {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 1024];
    let closed = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(support::PATIENCE, closed).await.expect("the server closes the connection");
}

// Thousands of sockets on one side and the server on the other: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_cannot_starve_healthz_and_are_closed() {
    let registry = TestRegistry::start();
    let s = serve(&config(
        &registry.host,
        "header_timeout = \"2s\"\nmax_connections = 256\nmax_connections_per_client = 64",
    ))
    .await;
    let server: std::net::SocketAddr = s.base.trim_start_matches("http://").parse().unwrap();
    // 3,000 as in the report, or what this process's descriptor limit leaves room for.
    let count = 3000.min(open_file_limit().saturating_sub(300));
    // The attacker is 127.0.0.2 (the whole of 127/8 is loopback); probes come from 127.0.0.1.
    let mut attackers = Vec::with_capacity(count);
    for _ in 0..count {
        attackers.push(half_open(server, "127.0.0.2").await);
    }
    let health = support::http().get(format!("{}/healthz", s.base)).send().await.unwrap();
    assert_eq!(health.status(), 200, "/healthz answers with {count} half-open connections from another client");

    // An idle keep-alive connection is closed too: it is waiting for a request head.
    let mut idle = tokio::net::TcpStream::connect(server).await.unwrap();
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 512];
        let n = idle.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
    }
    closed_by_server(&mut idle).await;
    for stream in &mut attackers {
        closed_by_server(stream).await;
    }
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let registry = TestRegistry::start();
    let s = serve(&config(&registry.host, "")).await;
    let check = format!("{}/api/v1/builders/b/check", s.base);
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let response =
            support::http().post(&check).header("Authorization", format!("{scheme} {TOKEN}")).send().await.unwrap();
        assert_eq!(response.status(), 202, "Authorization: {scheme} <token>");
    }
    let wrong = support::http().post(&check).header("Authorization", format!("Basic {TOKEN}")).send().await.unwrap();
    assert_eq!(wrong.status(), 401);
}

#[tokio::test]
async fn readyz_stays_ready_in_a_registry_outage_and_says_degraded() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64").salt("1"), Format::Oci).await;
    let proxy = Proxy::start(&registry.host).await;
    let text =
        config(&proxy.host, "") + &format!("\n[registries.\"{}\"]\nbackoff = \"10ms\"\nmax_attempts = 2\n", proxy.host);
    let s = serve(&text).await;
    s.monitor.check_builder("b").await.unwrap().unwrap();
    let (code, ready) = get_json(&format!("{}/readyz", s.base), None).await;
    assert_eq!((code, &ready["degraded"], &ready["failing_watches"]), (200, &json!(false), &json!(0)), "{ready}");

    proxy.down(Some(503));
    s.monitor.check_builder("b").await.unwrap().unwrap();
    let (code, ready) = get_json(&format!("{}/readyz", s.base), None).await;
    assert_eq!((code, &ready["ready"]), (200, &json!(true)), "an outage is no reason to restart: {ready}");
    assert_eq!((&ready["degraded"], &ready["failing_watches"]), (&json!(true), &json!(1)), "{ready}");
    assert_eq!(ready["failing_by_registry"][&proxy.host], json!(1), "{ready}");
    let text = support::http().get(format!("{}/metrics", s.base)).send().await.unwrap().text().await.unwrap();
    let m = parse_metrics(&text);
    assert_eq!(m.get(&format!("builder_monitor_watches_failing{{registry=\"{}\"}}", proxy.host)), Some(&1.0));

    proxy.down(None);
    s.monitor.check_builder("b").await.unwrap().unwrap();
    let (code, ready) = get_json(&format!("{}/readyz", s.base), None).await;
    assert_eq!((code, &ready["degraded"], &ready["failing_watches"]), (200, &json!(false), &json!(0)), "{ready}");
}

/// The roll-out endpoints: token-protected like the other POSTs, clear refusals, and each request
/// does what it says to the ledger.
#[tokio::test]
async fn roll_out_requests_need_the_token_and_do_what_they_say() {
    use builder_monitor::ledger::{ActionState, CheckRecord, NewAction, WatchKind};
    let s = serve(&config("127.0.0.1:1", "")).await;
    let target: builder_monitor_core::plan::ActionTarget = serde_json::from_value(json!({ "image": "r/app", "builder_name": "b", "builder": "r/b@sha256:x", "run_image": null, "source": null, "why": "test" })).unwrap();
    let action = |image: &str| NewAction {
        key: format!("k-{image}"),
        change_id: "c1".into(),
        image: image.into(),
        kind: builder_monitor_core::plan::ActionKind::Rebuild,
        target: target.clone(),
        wave: 1,
        needs_approval: true,
        expedited: Default::default(),
        batch: None,
    };
    s.ledger
        .commit(CheckRecord {
            watch: "b".into(),
            kind: WatchKind::Builder,
            image: "r/b:latest".into(),
            time: chrono::Utc::now(),
            outcome: Ok(()),
            pin: None,
            pending: None,
            change: None,
            events: vec![],
            deliveries: vec![],
            actions: vec![action("app"), action("api")],
            history: 10,
        })
        .await
        .unwrap();
    let http = support::http();
    let post = |path: &str, body: Option<&str>, token: bool| {
        let mut request = http.post(format!("{}{path}", s.base));
        if token {
            request = request.bearer_auth(TOKEN);
        }
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body.to_string());
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    assert_eq!(post("/api/v1/changes/c1/approve", None, false).await.0, 401);
    let (status, body) = post("/api/v1/changes/nope/approve", None, true).await;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"].as_str().unwrap().contains("no change nope"), "{body}");
    let (status, body) = post("/api/v1/changes/c1/approve", Some(r#"{"image":"web"}"#), true).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "change c1 has no action for image \"web\" (it has: api, app)");
    assert_eq!(post("/api/v1/changes/c1/approve", Some("not json"), true).await.0, 400);
    assert_eq!(post("/api/v1/changes/c1/frobnicate", None, true).await.0, 404);
    assert_eq!(post("/api/v1/changes/c1/release", Some(r#"{"image":"app"}"#), true).await.0, 400);

    // Approve one image's action: exactly that one moves, recorded with who asked.
    let (status, body) = post("/api/v1/changes/c1/approve", Some(r#"{"image":"app","by":"alice"}"#), true).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["actions"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(
        (body["actions"][0]["image"].as_str(), body["actions"][0]["state"].as_str()),
        (Some("app"), Some("pending"))
    );
    let rows = s.ledger.change_actions("c1").await.unwrap();
    let app = rows.iter().find(|a| a.image == "app").unwrap();
    assert_eq!((app.state, app.decided_by.as_deref()), (ActionState::Pending, Some("alice (api)")));
    assert_eq!(rows.iter().find(|a| a.image == "api").unwrap().state, ActionState::AwaitingApproval);
    // Reject the rest.
    let (status, body) = post("/api/v1/changes/c1/reject", None, true).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        s.ledger.change_actions("c1").await.unwrap().iter().find(|a| a.image == "api").unwrap().state,
        ActionState::Rejected
    );

    // The freeze: set, kept (a second request changes nothing), lifted.
    let (status, body) = post("/api/v1/freeze", Some(r#"{"reason":"release week","by":"bob"}"#), true).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["changed"].as_bool(), body["frozen"]["by"].as_str()), (Some(true), Some("bob (api)")));
    assert_eq!(s.ledger.freeze_state().await.unwrap().unwrap().reason.as_deref(), Some("release week"));
    assert_eq!(post("/api/v1/freeze", None, true).await.1["changed"].as_bool(), Some(false));
    let unauthorised = http.delete(format!("{}/api/v1/freeze", s.base)).send().await.unwrap();
    assert_eq!(unauthorised.status().as_u16(), 401);
    let lifted = http.delete(format!("{}/api/v1/freeze", s.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(lifted.status().as_u16(), 200);
    assert_eq!(s.ledger.freeze_state().await.unwrap(), None);
}

/// Every read endpoint the page's footer names answers (it once named one for data it lacks).
#[tokio::test]
async fn the_page_names_only_read_endpoints_that_answer() {
    let registry = TestRegistry::start();
    let s = serve(&config(&registry.host, "")).await;
    let page = support::http().get(format!("{}/", s.base)).send().await.unwrap().text().await.unwrap();
    let footer = &page[page.find("<footer>").expect("a footer")..];
    let named: Vec<&str> = footer
        .split("<code>")
        .skip(1)
        .filter_map(|c| c.split("</code>").next())
        .filter(|c| c.starts_with("/api/"))
        .collect();
    assert!(!named.is_empty(), "{footer}");
    // And for what it holds: the apps and actions are in `status --json`, not in the read API.
    assert!(footer.contains("the builders and run images (<code>/api/v1/builders</code>)"), "{footer}");
    for path in named {
        let (code, _) = get_json(&format!("{}{path}", s.base), Some(TOKEN)).await;
        assert_eq!(code, 200, "{path}");
    }
}
