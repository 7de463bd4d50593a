//! A daemon whose log stream is closed or full keeps serving, counts the lines it drops, and stops
//! on SIGTERM (issue 23, item 7: with `run 2>&1 | head -1` it once ignored SIGTERM for 23 minutes).

use crate::support;

use support::PATIENCE;
use support::daemon::{Unread, Workspace};
use support::receiver::ClosedPort;

const TOKEN: &str = "log-stream-test-token-0123";
/// The WARN of a registry that does not answer (the first check's failure, here).
const REGISTRY_UNAVAILABLE: &str =
    "registry unavailable; its watches' failed checks are logged at debug until it answers again";

/// A daemon with a server, a token and the highest hook rate; its one builder's registry refuses
/// connections (nothing here needs a check to succeed).
fn start(ws: &Workspace, closed: &ClosedPort, log_level: &str, ready: &'static str) -> Unread {
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n[server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"BM_LOG_TEST_TOKEN\"\nhooks_per_second = 10000\n\n[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:{}/demo/b:latest\"\nwatch_run_image = false\n",
        closed.port()
    ));
    Unread::start(&config, &[("BM_LOG_TEST_TOKEN", TOKEN), ("BUILDER_MONITOR_LOG", log_level)], ready)
}

/// Every request gives up after `PATIENCE`: a daemon blocked on its log must fail the test, not hang it.
fn client() -> reqwest::Client {
    builder_monitor::install_crypto_provider();
    reqwest::Client::builder().timeout(PATIENCE).build().unwrap()
}

/// A hook for a tag nobody watches: accepted, logged at INFO ("registry hook"), checks nothing.
/// An error says why it was not.
async fn hook(client: &reqwest::Client, addr: &str) -> Result<(), String> {
    let body = r#"{"push_data": {"tag": "x"}, "repository": {"repo_name": "nobody/watches"}}"#;
    let response = client.post(format!("http://{addr}/hooks/dockerhub")).bearer_auth(TOKEN).body(body).send().await;
    match response.map(|r| r.status().as_u16()) {
        Ok(202) => Ok(()),
        Ok(status) => Err(format!("the hook got {status}")),
        Err(e) => Err(format!("the hook got no answer: {e}")),
    }
}

/// `builder_monitor_log_lines_dropped_total` from `/metrics` (None when it is not served).
async fn dropped(client: &reqwest::Client, addr: &str) -> Result<Option<f64>, String> {
    let response = client.get(format!("http://{addr}/metrics")).send().await.map_err(|e| e.to_string())?;
    let text = response.text().await.map_err(|e| e.to_string())?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("builder_monitor_log_lines_dropped_total "))
        .map(|v| v.parse().unwrap()))
}

// Each test serves first and stops second, and only then says what went wrong while serving: a
// daemon that cannot serve must still be shown to stop (or not) on SIGTERM.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_log_reader_gone_the_daemon_serves_counts_dropped_lines_and_stops_on_sigterm() {
    let (ws, closed) = (Workspace::new(), ClosedPort::new());
    // Once its first check is over, the daemon logs nothing by itself for an hour: what it logs
    // next is the hook's line and the SIGTERM's.
    let mut daemon = start(&ws, &closed, "info", REGISTRY_UNAVAILABLE);
    // As `run 2>&1 | head -1`: the reader exits, and every write to the pipe fails with EPIPE.
    drop(daemon.stderr.take());
    let client = client();
    let served = async {
        hook(&client, &daemon.addr).await?;
        // The writer thread counts a failed line once it has tried it: wait for that.
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            match dropped(&client, &daemon.addr).await? {
                Some(n) if n > 0.0 => return Ok(()),
                seen if std::time::Instant::now() > deadline => {
                    return Err(format!("no dropped lines counted: {seen:?}"));
                }
                _ => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
    }
    .await;
    let status = tokio::task::spawn_blocking(move || daemon.terminate()).await.unwrap();
    served.unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_log_pipe_full_the_daemon_serves_drops_lines_and_stops_on_sigterm() {
    let (ws, closed) = (Workspace::new(), ClosedPort::new());
    // Verbose, and nobody reads: the pipe's 64 KiB fill, then the daemon's queue (1 MiB).
    let mut daemon = start(&ws, &closed, "trace", "serving health, metrics, API and hooks");
    let client = client();
    let served = async {
        let mut sent = 0;
        loop {
            // ~170 bytes of log a hook: 200 make ~34 KiB. 16 at a time: a client may hold 64 connections.
            use futures::StreamExt;
            let hooks = futures::stream::iter(0..200).map(|_| hook(&client, &daemon.addr)).buffer_unordered(16);
            hooks.collect::<Vec<_>>().await.into_iter().collect::<Result<Vec<()>, String>>()?;
            sent += 200;
            if dropped(&client, &daemon.addr).await?.is_some_and(|n| n > 0.0) {
                return Ok(());
            }
            // 40,000 hooks log ~6.5 MiB: the 1 MiB queue must have overflowed long before.
            if sent >= 40_000 {
                return Err(format!("{sent} hooks and no dropped lines counted"));
            }
        }
    }
    .await;
    let status = tokio::task::spawn_blocking(move || daemon.terminate()).await.unwrap();
    served.unwrap();
    assert!(status.success(), "{status}");
}
