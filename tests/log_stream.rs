//! A daemon whose log stream is closed or full keeps serving, counts the lines it drops, and stops
//! on SIGTERM (issue 23, item 7: with `run 2>&1 | head -1` it once ignored SIGTERM for 23 minutes).

mod support;

use support::PATIENCE;
use support::daemon::{Unread, Workspace};
use support::receiver::ClosedPort;

const TOKEN: &str = "log-stream-test-token-0123";

/// A daemon with a server, a token and the highest hook rate; its one builder's registry refuses
/// connections (nothing here needs a check to succeed).
fn start(ws: &Workspace, closed: &ClosedPort, log_level: &str) -> Unread {
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n[server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"BM_LOG_TEST_TOKEN\"\nhooks_per_second = 10000\n\n[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:{}/demo/b:latest\"\nwatch_run_image = false\n",
        closed.port()
    ));
    Unread::start(&config, &[("BM_LOG_TEST_TOKEN", TOKEN), ("BUILDER_MONITOR_LOG", log_level)])
}

/// Every request gives up after `PATIENCE`: a daemon blocked on its log must fail the test, not hang it.
fn client() -> reqwest::Client {
    builder_monitor::install_crypto_provider();
    reqwest::Client::builder().timeout(PATIENCE).build().unwrap()
}

/// A hook for a tag nobody watches: accepted, logged at INFO ("registry hook"), checks nothing.
async fn hook(client: &reqwest::Client, addr: &str) {
    let body = r#"{"push_data": {"tag": "x"}, "repository": {"repo_name": "nobody/watches"}}"#;
    let response = client.post(format!("http://{addr}/hooks/dockerhub")).bearer_auth(TOKEN).body(body).send().await;
    let response = response.unwrap_or_else(|e| panic!("the hook got no answer: {e}"));
    assert_eq!(response.status(), 202);
}

/// `builder_monitor_log_lines_dropped_total` from `/metrics` (None when it is not served).
async fn dropped(client: &reqwest::Client, addr: &str) -> Option<f64> {
    let text = client.get(format!("http://{addr}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines().find_map(|l| l.strip_prefix("builder_monitor_log_lines_dropped_total ")).map(|v| v.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_log_reader_gone_the_daemon_serves_counts_dropped_lines_and_stops_on_sigterm() {
    let (ws, closed) = (Workspace::new(), ClosedPort::new());
    let mut daemon = start(&ws, &closed, "info");
    // As `run 2>&1 | head -1`: the reader exits, and every write to the pipe fails with EPIPE.
    drop(daemon.stderr.take());
    let client = client();
    hook(&client, &daemon.addr).await;
    // The writer thread counts a failed line once it has tried it: wait for that.
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        match dropped(&client, &daemon.addr).await {
            Some(n) if n > 0.0 => break,
            seen => assert!(std::time::Instant::now() < deadline, "no dropped lines counted: {seen:?}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let status = tokio::task::spawn_blocking(move || daemon.terminate()).await.unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_log_pipe_full_the_daemon_serves_drops_lines_and_stops_on_sigterm() {
    let (ws, closed) = (Workspace::new(), ClosedPort::new());
    // Verbose, and nobody reads: the pipe's 64 KiB fill, then the daemon's queue (1 MiB).
    let mut daemon = start(&ws, &closed, "trace");
    let client = client();
    let mut sent = 0;
    loop {
        // ~170 bytes of log a hook: 200 make ~34 KiB. 16 at a time: a client may hold 64 connections.
        use futures::StreamExt;
        let hooks = futures::stream::iter(0..200).map(|_| hook(&client, &daemon.addr)).buffer_unordered(16);
        hooks.collect::<Vec<()>>().await;
        sent += 200;
        if dropped(&client, &daemon.addr).await.is_some_and(|n| n > 0.0) {
            break;
        }
        // 40,000 hooks log ~6.5 MiB: the 1 MiB queue must have overflowed long before.
        assert!(sent < 40_000, "{sent} hooks and no dropped lines counted");
    }
    let status = tokio::task::spawn_blocking(move || daemon.terminate()).await.unwrap();
    assert!(status.success(), "{status}");
}
