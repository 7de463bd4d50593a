//! Ordered delivery per subject, with real receivers: a freeze and its end made by the command
//! line while no daemon runs reach the receiver complete and in order once the daemon starts, and
//! a refused delivery holds back only its own subject's later events, on both ledgers.

use std::sync::Arc;
use std::time::Duration;

use builder_monitor::alert::Dispatcher;
use builder_monitor::config::Config;
use builder_monitor::ledger::{DeliveryKey, Ledger};
use builder_monitor::metrics::Metrics;
use builder_monitor::rollout;
use builder_monitor::schedule::Clock;
use builder_monitor_core::event::{Event, EventType, Subject};
use builder_monitor_core::schedule::{parse_timestamp, timestamp};

use super::alert;
use super::support::daemon::{Daemon, Workspace, run_with_env};
use super::support::receiver::{Received, Receiver, Reply};
use super::support::registry::TestRegistry;

fn header(r: &Received, name: &str) -> String {
    r.header(name).unwrap_or_default().to_string()
}

/// `type reason` of each request, and its delivery id.
fn told(received: &[Received]) -> Vec<(String, String)> {
    received
        .iter()
        .map(|r| {
            let body = r.json();
            let reason = body["rollout"]["reason"].as_str().unwrap_or_default().to_string();
            (format!("{} {reason}", header(r, "x-builder-monitor-event")), header(r, "x-builder-monitor-delivery"))
        })
        .collect()
}

/// Runs the binary with `args` and `--config config` in `ws`; it must succeed.
fn cli(ws: &Workspace, config: &std::path::Path, args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend(["--config", config.to_str().unwrap()]);
    let out = run_with_env(&all, &[], ws.dir.path());
    assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
    out.stdout
}

/// freeze, unfreeze, freeze, unfreeze by the command line with the daemon stopped (so written to
/// the ledger directly), then the daemon started: the receiver hears all four, in that order, 20
/// times over — 18 with the four requests as fast as the command line goes (mostly within one
/// second: one clock tick), 2 with a second between them. Some receivers hold the first request a
/// while, or refuse it once (503, retried), so a later one could overtake it if the lane let it.
// Blocking calls (the binary, its log) must not stall the in-test receiver: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freezes_made_while_the_daemon_was_stopped_arrive_complete_and_in_order() {
    // The builder's tag is missing: its checks fail at once, and this alert hears nothing of them
    // (`rollout.*` only).
    let registry = TestRegistry::start();
    for trial in 0..20 {
        let receiver = Receiver::start().await;
        match trial % 3 {
            1 => receiver.reply([Reply::Delay(Duration::from_millis(100))]),
            2 => receiver.reply([Reply::Status(503)]),
            _ => {}
        }
        let ws = Workspace::new();
        let host = &registry.host;
        let config = ws.config(&format!(
            "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
             [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\nwatch_run_image = false\n\n{}",
            alert("hook", "webhook", &receiver.url, "events = [\"rollout.*\"]")
        ));
        let apart = trial >= 18;
        let requests: [&[&str]; 4] =
            [&["freeze", "--reason", "first"], &["unfreeze"], &["freeze", "--reason", "second"], &["unfreeze"]];
        for (n, request) in requests.iter().enumerate() {
            if apart && n > 0 {
                // The clock must tick between them: nothing to await.
                std::thread::sleep(Duration::from_millis(1100));
            }
            cli(&ws, &config, request);
        }
        let status: serde_json::Value = serde_json::from_str(&cli(&ws, &config, &["status", "--json"])).unwrap();
        assert_eq!(status["deliveries"].as_array().unwrap().len(), 4, "trial {trial}: four recorded\n{status:#}");

        let daemon = Daemon::start(&config);
        let expected_requests = if trial % 3 == 2 { 5 } else { 4 };
        receiver.wait_for(expected_requests).await;
        let (code, log) = daemon.terminate();
        assert!(code.success(), "{}", log.join("\n"));
        let received = told(&receiver.received());
        assert_eq!(received.len(), expected_requests, "trial {trial}: {received:#?}");
        // A refused first request is sent again (same id) before anything after it.
        let mut heard = received.clone();
        heard.dedup();
        let order: Vec<&str> = heard.iter().map(|(what, _)| what.as_str()).collect();
        assert_eq!(
            order,
            ["rollout.frozen first", "rollout.unfrozen first", "rollout.frozen second", "rollout.unfrozen second"],
            "trial {trial} (apart: {apart}): {received:#?}"
        );
        let ids: std::collections::BTreeSet<&str> = heard.iter().map(|(_, id)| id.as_str()).collect();
        assert_eq!(ids.len(), 4, "trial {trial}: four ids {received:#?}");
    }
}

/// The first event of a subject refused (503) at a receiver holds back that subject's later
/// events there — the roll-out's unfreeze waits for its freeze — but not another subject's (a
/// builder's move goes through at once); once the freeze is delivered, the unfreeze follows.
#[tokio::test]
async fn a_refused_delivery_holds_back_its_subjects_later_events_only() {
    let dir = tempfile::tempdir().unwrap();
    held_back_with(Ledger::open(&dir.path().join("state.db")).unwrap()).await;
    let double = super::support::kube::KubeDouble::start().await;
    double.create_namespace("bm");
    held_back_with(Ledger::kubernetes(double.client(), "bm", chrono::Utc::now())).await;
}

async fn held_back_with(ledger: Ledger) {
    // What `main` does before any HTTP client is built.
    builder_monitor::install_crypto_provider();
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let text = "[[builders]]\nname = \"jammy\"\nimage = \"docker.io/paketobuildpacks/builder-jammy-base:latest\"\n\n"
        .to_string()
        + &alert("hook", "webhook", &receiver.url, "events = [\"rollout.*\", \"builder.changed\"]");
    let config = Config::parse(&dir.path().join("config.toml"), &text).unwrap();
    let clock = Clock::manual(parse_timestamp("2026-11-30T12:00:00Z").unwrap());
    rollout::freeze(&config, &ledger, Some("incident".into()), "dan", clock.now()).await.unwrap();
    clock.advance(Duration::from_secs(1));
    rollout::unfreeze(&config, &ledger, "dan", clock.now()).await.unwrap();
    clock.advance(Duration::from_secs(1));
    let subject =
        Subject { name: "jammy".into(), image: "docker.io/paketobuildpacks/builder-jammy-base:latest".into() };
    let moved = Event::new("moved-1".into(), EventType::BuilderChanged, timestamp(clock.now()), subject);
    ledger
        .record_events("jammy", vec![moved], vec![DeliveryKey::new("moved-1", "hook")], 10, clock.now())
        .await
        .unwrap();

    receiver.reply([Reply::StatusIfContains("rollout.frozen".into(), 503)]);
    let dispatcher = Arc::new(Dispatcher::new(&config.alerts, ledger.clone(), clock.clone(), Metrics::new()).unwrap());
    dispatcher.deliver_due_once().await;
    let types = |from: usize| -> Vec<String> {
        let mut t: Vec<String> =
            receiver.received()[from..].iter().map(|r| header(r, "x-builder-monitor-event")).collect();
        t.sort();
        t
    };
    assert_eq!(types(0), ["builder.changed", "rollout.frozen"], "the unfreeze waits behind the refused freeze");

    // The freeze's retry falls due: the freeze, then the unfreeze.
    clock.advance(Duration::from_secs(3600));
    dispatcher.deliver_due_once().await;
    let later: Vec<String> = receiver.received()[2..].iter().map(|r| header(r, "x-builder-monitor-event")).collect();
    assert_eq!(later, ["rollout.frozen", "rollout.unfrozen"]);
    assert!(ledger.pending_deliveries().await.unwrap().is_empty());
}

/// A builder's registry failing, answering, failing and answering again within one second (checks
/// asked for one after another): two runs of failures, each told — failed, recovered, failed,
/// recovered — with four ids, in that order.
#[tokio::test]
async fn failures_again_within_one_second_are_told_again_and_in_order() {
    let registry = super::support::registry::TestRegistry::start();
    let pusher = super::support::images::Pusher::new(&registry.host);
    let image = super::support::images::Image::new("amd64").salt("1");
    pusher.push_image("demo/b", Some("latest"), &image, super::support::images::Format::Oci).await;
    let proxy = super::support::proxy::Proxy::start(&registry.host).await;
    let receiver = Receiver::start().await;
    let text = format!("[registries.\"{}\"]\nmax_attempts = 1\n\n", proxy.host)
        + &super::builder(&proxy.host, "b", "demo/b")
        + &alert("hook", "webhook", &receiver.url, "events = [\"check.*\"]\nfailure_threshold = 1");
    // One instant for every check: the clock does not tick between them.
    let s = super::setup_with_clock(&text, Clock::manual(parse_timestamp("2026-11-30T12:00:00.100Z").unwrap()));
    s.monitor.check_builder("b").await.unwrap().unwrap();
    for down in [Some(503), None, Some(503), None] {
        proxy.down(down);
        s.monitor.check_builder("b").await.unwrap().unwrap();
    }
    let recorded: Vec<Event> = s.ledger.events_after(0, 100).await.unwrap().into_iter().map(|e| e.event).collect();
    let checks: Vec<&Event> = recorded.iter().filter(|e| e.event_type.as_str().starts_with("check.")).collect();
    let ids: std::collections::BTreeSet<&str> = checks.iter().map(|e| e.id.as_str()).collect();
    assert_eq!((checks.len(), ids.len()), (4, 4), "{checks:#?}");

    s.dispatcher.deliver_due_once().await;
    let heard: Vec<(String, String)> = receiver
        .received()
        .iter()
        .map(|r| (header(r, "x-builder-monitor-event"), header(r, "x-builder-monitor-delivery")))
        .collect();
    let expected: Vec<(String, String)> = checks.iter().map(|e| (e.event_type.to_string(), e.id.clone())).collect();
    assert_eq!(heard, expected);
    let types: Vec<&str> = heard.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(types, ["check.failed", "check.recovered", "check.failed", "check.recovered"]);
}
