//! Alert delivery to real HTTP receivers on loopback: the documented bodies and signatures,
//! retries, a receiver that comes up late, dead letters, routing, redirects, crashes and secrets.

#[path = "alerts/ordered.rs"]
mod ordered;

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use builder_monitor::alert::Dispatcher;
use builder_monitor::config::Config;
use builder_monitor::daemon::Parts;
use builder_monitor::ledger::{DeliveryKey, Ledger};
use builder_monitor::monitor::Monitor;
use builder_monitor::schedule::Clock;
use builder_monitor_core::event::Event;
use support::daemon::{Daemon, Workspace, run_with_env};
use support::images::{Format, Image, Pusher};
use support::receiver::{ClosedPort, Receiver, Reply};
use support::registry::TestRegistry;
use tokio_util::sync::CancellationToken;

const SECRET: &str = "s3cret-hmac-key";

struct Setup {
    monitor: Arc<Monitor>,
    dispatcher: Arc<Dispatcher>,
    ledger: Ledger,
    dir: tempfile::TempDir,
}

fn setup(text: &str) -> Setup {
    setup_with_clock(text, Clock::System)
}

fn setup_with_clock(text: &str, clock: Clock) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hmac"), format!("{SECRET}\n")).unwrap();
    let config = Arc::new(Config::parse(&dir.path().join("config.toml"), text).unwrap());
    let ledger = Ledger::open(&dir.path().join("state.db")).unwrap();
    let parts = Parts::new(config, ledger.clone(), clock, None).unwrap();
    Setup { monitor: parts.monitor, dispatcher: parts.dispatcher, ledger, dir }
}

fn builder(host: &str, name: &str, repo: &str) -> String {
    format!("[[builders]]\nname = \"{name}\"\nimage = \"{host}/{repo}:latest\"\nwatch_run_image = false\n")
}

fn alert(name: &str, kind: &str, url: &str, extra: &str) -> String {
    format!("[[alerts]]\nname = \"{name}\"\ntype = \"{kind}\"\nurl = \"{url}\"\nbackoff = \"100ms\"\n{extra}\n")
}

fn hmac(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    format!("sha256={}", hex::encode(ring::hmac::sign(&key, body).as_ref()))
}

/// Pins the builder, moves it, and returns the recorded `builder.changed` event.
async fn change(s: &Setup, pusher: &Pusher, name: &str, repo: &str, salt: &str) -> Event {
    pusher.push_image(repo, Some("latest"), &Image::new("amd64").salt(&format!("{salt}-a")), Format::Oci).await;
    s.monitor.check_builder(name).await.unwrap().unwrap();
    pusher.push_image(repo, Some("latest"), &Image::new("amd64").salt(&format!("{salt}-b")), Format::Oci).await;
    s.monitor.check_builder(name).await.unwrap().unwrap();
    let events = s.ledger.events_after(0, 1000).await.unwrap();
    events.into_iter().rev().find(|e| e.event.event_type.as_str() == "builder.changed").unwrap().event
}

#[tokio::test]
async fn each_receiver_type_gets_the_documented_body_signed() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let (webhook, slack, ce) = (Receiver::start().await, Receiver::start().await, Receiver::start().await);
    let text = builder(&registry.host, "heroku-24", "heroku/builder")
        + &alert("hook", "webhook", &webhook.url, "secret_file = \"hmac\"\nheaders = { \"X-Team\" = \"platform\" }")
        + &alert("chat", "slack", &slack.url, "")
        + &alert("bus", "cloudevents", &ce.url, "secret_file = \"hmac\"");
    let s = setup(&text);
    let event = change(&s, &pusher, "heroku-24", "heroku/builder", "1").await;
    assert_eq!(s.dispatcher.deliver_due_once().await, 3, "builder.pinned is not a default event; builder.changed is");

    let got = webhook.wait_for(1).await;
    let r = &got[0];
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("x-builder-monitor-event"), Some("builder.changed"));
    assert_eq!(r.header("x-builder-monitor-delivery"), Some(event.id.as_str()));
    assert_eq!(r.header("x-team"), Some("platform"));
    assert_eq!(r.body, serde_json::to_vec(&event).unwrap(), "the body is the recorded event, byte for byte");
    let body = r.json();
    for key in ["id", "type", "time", "builder", "previous", "current", "change", "images"] {
        assert!(body.get(key).is_some(), "{key} missing: {body}");
    }
    assert_eq!(body["builder"]["image"], format!("{}/heroku/builder:latest", registry.host));
    let signature = r.header("x-builder-monitor-signature-256").unwrap();
    assert_eq!(signature, hmac(SECRET, &r.body), "verifies with the secret");
    assert_ne!(signature, hmac("another secret", &r.body), "and not with another");

    let got = slack.wait_for(1).await;
    let body = got[0].json();
    let line = body["text"].as_str().unwrap();
    assert!(line.starts_with(&format!("{}/heroku/builder:latest moved: unknown", registry.host)), "{line}");
    let blocks = body["blocks"].as_array().unwrap();
    assert!(blocks[1]["fields"][0]["text"].as_str().unwrap().contains(&event.previous.as_ref().unwrap().reference));
    assert!(blocks[1]["fields"][1]["text"].as_str().unwrap().contains(&event.current.as_ref().unwrap().reference));
    assert!(got[0].header("x-builder-monitor-signature-256").is_none(), "no secret, no signature");

    let got = ce.wait_for(1).await;
    assert_eq!(got[0].header("content-type"), Some("application/cloudevents+json"));
    let body = got[0].json();
    assert_eq!(body["specversion"], "1.0");
    assert_eq!(body["id"], event.id);
    assert_eq!(body["source"], "/builder-monitor/builders/heroku-24");
    assert_eq!(body["type"], "dev.buildermonitor.builder.changed");
    assert_eq!(body["time"], event.time);
    assert_eq!(body["datacontenttype"], "application/json");
    assert_eq!(body["data"], serde_json::to_value(&event).unwrap());
    assert_eq!(got[0].header("x-builder-monitor-signature-256").unwrap(), hmac(SECRET, &got[0].body));

    assert!(s.ledger.pending_deliveries().await.unwrap().is_empty());
    assert_eq!(s.dispatcher.deliver_due_once().await, 0, "sent deliveries are not sent again");
}

/// Polls a condition of the ledger until it holds (state written by another task).
async fn wait_until<F, Fut>(what: &str, condition: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + support::PATIENCE;
    while !condition().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs the dispatcher until the returned token is cancelled.
fn run_dispatcher(s: &Setup) -> CancellationToken {
    let stop = CancellationToken::new();
    tokio::spawn(s.dispatcher.clone().run(stop.clone()));
    stop
}

#[tokio::test]
async fn server_errors_are_retried_with_the_same_delivery_id() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let receiver = Receiver::start().await;
    receiver.reply([Reply::Status(500), Reply::WithHeader(503, "retry-after", "1".into())]);
    let s = setup(&(builder(&registry.host, "b", "demo/b") + &alert("hook", "webhook", &receiver.url, "")));
    let stop = run_dispatcher(&s);
    let event = change(&s, &pusher, "b", "demo/b", "1").await;
    let got = receiver.wait_for(3).await;
    wait_until("the delivery is recorded as sent", || async {
        s.ledger.pending_deliveries().await.unwrap().is_empty()
    })
    .await;
    stop.cancel();
    assert_eq!(receiver.received().len(), 3, "two failures, one success");
    assert!(got.iter().all(|r| r.header("x-builder-monitor-delivery") == Some(event.id.as_str())));
    assert!(got[2].at - got[1].at >= Duration::from_secs(1), "Retry-After: 1 honoured");
    assert!(s.ledger.dead_letters().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_receiver_that_is_down_gets_the_event_once_it_is_up() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let closed = ClosedPort::new();
    let port = closed.port();
    let url = format!("http://127.0.0.1:{port}/hook");
    let s = setup(&(builder(&registry.host, "b", "demo/b") + &alert("hook", "webhook", &url, "")));
    let stop = run_dispatcher(&s);
    let event = change(&s, &pusher, "b", "demo/b", "1").await;
    // Wait until the dispatcher has failed at least twice against the closed port.
    let deadline = tokio::time::Instant::now() + support::PATIENCE;
    loop {
        let pending = s.ledger.pending_deliveries().await.unwrap();
        if pending.first().is_some_and(|p| p.attempts >= 2) {
            assert!(pending[0].last_status.as_deref().unwrap().contains("connection"), "{pending:?}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no failed attempts recorded: {pending:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let receiver = Receiver::start_on(port).await;
    let got = receiver.wait_for(1).await;
    stop.cancel();
    assert_eq!(got[0].header("x-builder-monitor-delivery"), Some(event.id.as_str()));
}

// Blocking calls (the binary, its log) must not stall the in-test receiver: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_deliveries_are_dead_letters_not_retry_storms() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let receiver = Receiver::start().await;
    receiver.reply([Reply::Status(400)]);
    let s = setup(&(builder(&registry.host, "b", "demo/b") + &alert("hook", "webhook", &receiver.url, "")));
    let event = change(&s, &pusher, "b", "demo/b", "1").await;
    assert_eq!(s.dispatcher.deliver_due_once().await, 1);
    assert_eq!(s.dispatcher.deliver_due_once().await, 0);
    assert_eq!(receiver.received().len(), 1);
    let dead = s.ledger.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!((dead[0].event.as_str(), dead[0].alert.as_str()), (event.id.as_str(), "hook"));
    assert_eq!(dead[0].last_status.as_deref(), Some("HTTP 400"));

    // `status --json` shows it.
    let config = s.dir.path().join("config.toml");
    std::fs::write(
        &config,
        builder(&registry.host, "b", "demo/b")
            + &alert("hook", "webhook", &receiver.url, "")
            + "[monitor]\nstate = \"state.db\"\n",
    )
    .unwrap();
    let out = run_with_env(&["status", "--json", "--config", config.to_str().unwrap()], &[], s.dir.path());
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let status: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(status["dead_letters"][0]["event"], event.id);
    assert_eq!(status["dead_letters"][0]["type"], "builder.changed");
}

#[tokio::test]
async fn deliveries_give_up_after_their_age_limit() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let receiver = Receiver::start().await;
    receiver.reply((0..50).map(|_| Reply::Status(503)));
    // The test moves the clock, so the age limit is crossed when the test says, not when load does.
    let clock = Clock::manual(chrono::Utc::now());
    let extra = "give_up_after = \"1h\"";
    let text = builder(&registry.host, "b", "demo/b") + &alert("hook", "webhook", &receiver.url, extra);
    let s = setup_with_clock(&text, clock.clone());
    change(&s, &pusher, "b", "demo/b", "1").await;
    for _ in 0..2 {
        assert_eq!(s.dispatcher.deliver_due_once().await, 1);
        assert!(s.ledger.dead_letters().await.unwrap().is_empty(), "gave up before its age limit");
        clock.advance(Duration::from_secs(31 * 60));
    }
    assert_eq!(s.dispatcher.deliver_due_once().await, 1);
    let dead = s.ledger.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let status = dead[0].last_status.as_deref().unwrap();
    assert!(status.contains("gave up after 3 attempts over 1h 2m"), "{status}");
    assert_eq!(receiver.received().len(), 3);
    assert_eq!(s.dispatcher.deliver_due_once().await, 0, "a dead letter is not retried");
}

#[tokio::test]
async fn event_and_builder_filters_route_each_event() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let (changes, failures, everything) = (Receiver::start().await, Receiver::start().await, Receiver::start().await);
    let text = builder(&registry.host, "paketo-jammy", "paketo/jammy")
        + &builder(&registry.host, "heroku-24", "heroku/builder")
        + &alert("changes", "webhook", &changes.url, "events = [\"builder.changed\"]\nbuilders = [\"paketo-*\"]")
        + &alert("failures", "webhook", &failures.url, "events = [\"check.*\"]\nfailure_threshold = 1")
        + &alert(
            "heroku",
            "webhook",
            &everything.url,
            "events = [\"*\"]\nbuilders = [\"heroku-*\"]\nfailure_threshold = 1",
        );
    let s = setup(&text);
    change(&s, &pusher, "paketo-jammy", "paketo/jammy", "p").await;
    change(&s, &pusher, "heroku-24", "heroku/builder", "h").await;
    let heroku = s.ledger.watch("heroku-24").await.unwrap().unwrap().pin.unwrap();
    pusher.delete("heroku/builder", &heroku.digest).await;
    s.monitor.check_builder("heroku-24").await.unwrap().unwrap();
    s.dispatcher.deliver_due_once().await;

    let seen = |r: &Receiver| -> Vec<(String, String)> {
        r.received()
            .iter()
            .map(|x| {
                (
                    x.json()["type"].as_str().unwrap().to_string(),
                    x.json()["builder"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    };
    let pair = |t: &str, b: &str| (t.to_string(), b.to_string());
    assert_eq!(seen(&changes), [pair("builder.changed", "paketo-jammy")]);
    assert_eq!(seen(&failures), [pair("check.failed", "heroku-24")]);
    assert_eq!(
        seen(&everything),
        [pair("builder.changed", "heroku-24"), pair("builder.pinned", "heroku-24"), pair("check.failed", "heroku-24")]
    );
}

#[tokio::test]
async fn redirects_to_another_host_are_not_followed() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let (first, elsewhere) = (Receiver::start().await, Receiver::start().await);
    first.reply([Reply::WithHeader(307, "location", elsewhere.url.replace("127.0.0.1", "localhost"))]);
    let s = setup(&(builder(&registry.host, "b", "demo/b") + &alert("hook", "webhook", &first.url, "")));
    change(&s, &pusher, "b", "demo/b", "1").await;
    s.dispatcher.deliver_due_once().await;
    assert_eq!(first.received().len(), 1);
    assert!(elsewhere.received().is_empty(), "the event must not reach another host");
    let dead = s.ledger.dead_letters().await.unwrap();
    assert!(dead[0].last_status.as_deref().unwrap().contains("redirect"), "{dead:?}");
}

fn daemon_config(registry: &str, url_env: bool, receiver_url: &str) -> String {
    let url = if url_env { "url_env = \"BM_TEST_ALERT_URL\"".to_string() } else { format!("url = \"{receiver_url}\"") };
    format!(
        "[monitor]\ninterval = \"200ms\"\njitter = \"0s\"\nstate = \"state.db\"\n{}[[alerts]]\nname = \"hook\"\ntype = \"webhook\"\n{url}\nsecret_file = \"hmac\"\nbackoff = \"100ms\"\n",
        builder(registry, "b", "demo/b")
    )
}

// Blocking calls (the binary, its log) must not stall the in-test receiver: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_daemons_lose_no_delivery() {
    let ws = Workspace::new();
    let state = ws.path("state.db");
    let text = |registry: &str, receiver: &str| daemon_config(registry, false, receiver);
    killed_daemons_lose_no_delivery_with(ws, text, move || Ledger::open(&state).unwrap()).await;
}

/// The same crashes with the ledger in ConfigMaps on the Kubernetes API double.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_daemons_lose_no_delivery_with_the_ledger_on_kubernetes() {
    let double = support::kube::KubeDouble::start().await;
    double.create_namespace("bm");
    let ws = Workspace::new();
    let kubeconfig = double.kubeconfig(ws.dir.path());
    let client = double.client();
    let text = move |registry: &str, receiver: &str| {
        daemon_config(registry, false, receiver).replace("state = \"state.db\"", "state = \"kubernetes\"")
            + &format!("\n[kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"bm\"\n", kubeconfig.display())
    };
    killed_daemons_lose_no_delivery_with(ws, text, move || {
        Ledger::kubernetes(client.clone(), "bm", chrono::Utc::now())
    })
    .await;
    drop(double);
}

/// Kills daemons at every moment of a delivery; `text(registry, receiver)` is the config,
/// `ledger()` opens the ledger it names.
async fn killed_daemons_lose_no_delivery_with(
    ws: Workspace,
    text: impl Fn(&str, &str) -> String,
    ledger: impl Fn() -> Ledger,
) {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let receiver = Receiver::start().await;
    std::fs::write(ws.path("hmac"), SECRET).unwrap();
    let config = ws.config(&text(&registry.host, &receiver.url));
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64").salt("0"), Format::Oci).await;

    let pin = run_with_env(&["run", "--once", "--config", config.to_str().unwrap()], &[], ws.dir.path());
    assert_eq!(pin.code, Some(0), "{}", pin.stderr);

    // Kill at different moments: right after the change is recorded (maybe before delivery),
    // while the receiver holds the request, and after the delivery was answered.
    let kills = [0u64, 1, 2, 0, 1, 2];
    let mut ids = Vec::new();
    for (round, kill) in kills.iter().enumerate() {
        let image = Image::new("amd64").salt(&format!("{}", round + 1));
        let pushed = pusher.push_image("demo/b", Some("latest"), &image, Format::Oci).await;
        if *kill == 1 {
            receiver.reply([Reply::DelayIfContains(pushed.digest.clone(), Duration::from_secs(3))]);
        }
        let mut daemon = Daemon::start(&config);
        let changed = daemon.wait_for_event("builder.changed");
        let id = changed["id"].as_str().unwrap().to_string();
        match kill {
            0 => {}
            1 => {
                receiver.wait_for_body(&pushed.digest).await;
            }
            _ => {
                daemon.wait_for("delivery", |v| v["message"] == "alert delivered" && v["event_id"] == id.as_str());
            }
        }
        daemon.kill();
        ids.push(id);
    }
    // One more start delivers whatever is left, then stop it cleanly.
    let ledger = ledger();
    let changes: BTreeSet<String> = ledger.changes(None, 100).await.unwrap().into_iter().map(|c| c.id).collect();
    assert_eq!(changes.len(), kills.len());
    let mut daemon = Daemon::start(&config);
    let deadline = tokio::time::Instant::now() + support::PATIENCE;
    loop {
        let got: BTreeSet<String> = receiver
            .received()
            .iter()
            .filter_map(|r| r.header("x-builder-monitor-delivery").map(str::to_string))
            .collect();
        if changes.is_subset(&got) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "missing deliveries: {:?}",
            changes.difference(&got).collect::<Vec<_>>()
        );
        receiver.wait_for(receiver.received().len() + 1).await;
    }
    daemon.wait_for("idle", |v| v["message"] == "check done");
    let (status, _) = daemon.terminate();
    assert!(status.success());

    let mut per_id: BTreeMap<String, usize> = BTreeMap::new();
    for r in receiver.received() {
        assert_eq!(r.header("x-builder-monitor-signature-256").unwrap(), hmac(SECRET, &r.body));
        *per_id.entry(r.header("x-builder-monitor-delivery").unwrap().to_string()).or_default() += 1;
    }
    assert_eq!(per_id.keys().cloned().collect::<BTreeSet<_>>(), changes, "every change delivered, nothing else");
    for (id, kill) in ids.iter().zip(kills) {
        let n = per_id[id];
        match kill {
            // Received but never answered: sent exactly once more after the restart.
            1 => assert_eq!(n, 2, "{id}"),
            // Answered before the kill: never again.
            2 => assert_eq!(n, 1, "{id}"),
            // Killed right after recording: at most once more.
            _ => assert!(n == 1 || n == 2, "{id}: {n}"),
        }
    }
    assert!(ledger.pending_deliveries().await.unwrap().is_empty());
}

// Blocking calls (the binary, its log) must not stall the in-test receiver: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_and_tokenised_urls_stay_out_of_logs() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let receiver = Receiver::start().await;
    let ws = Workspace::new();
    std::fs::write(ws.path("hmac"), SECRET).unwrap();
    let token_url = format!("{}/T0KEN-in-the-path?key=QUERY-T0KEN", receiver.url);
    let config = ws.config(&daemon_config(&registry.host, true, ""));
    let config = config.to_str().unwrap();
    let env = [("BM_TEST_ALERT_URL", token_url.as_str()), ("BUILDER_MONITOR_LOG", "trace")];
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64").salt("1"), Format::Oci).await;
    let first = run_with_env(&["run", "--once", "--config", config], &env, ws.dir.path());
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64").salt("2"), Format::Oci).await;
    let second = run_with_env(&["run", "--once", "--config", config], &env, ws.dir.path());
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert_eq!(receiver.received().len(), 1, "delivered through the tokenised URL");
    let check = run_with_env(&["check", "--config", config], &env, ws.dir.path());
    let status = run_with_env(&["status", "--config", config, "--json"], &env, ws.dir.path());
    for out in [&first, &second, &check, &status] {
        for text in [&out.stdout, &out.stderr] {
            for secret in [SECRET, "T0KEN-in-the-path", "QUERY-T0KEN"] {
                assert!(!text.contains(secret), "{secret} leaked:\n{text}");
            }
        }
    }
    assert!(
        check.stdout.contains(&format!("webhook http://127.0.0.1:{}/…, signed", receiver.port)),
        "{}",
        check.stdout
    );
}

// Blocking calls (the binary, its log) must not stall the in-test receiver: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_test_sends_a_marked_event_and_reports_the_outcome() {
    let ok = Receiver::start().await;
    let broken = Receiver::start().await;
    broken.reply([Reply::Status(500)]);
    let ws = Workspace::new();
    std::fs::write(ws.path("hmac"), SECRET).unwrap();
    let config = ws.config(
        &(alert("ok", "slack", &ok.url, "secret_file = \"hmac\"") + &alert("broken", "webhook", &broken.url, "")),
    );
    let config = config.to_str().unwrap();
    let out = ws.run(&["alert", "test", "--config", config, "--name", "ok"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("HTTP 200"), "{}", out.stdout);
    let got = ok.wait_for(1).await;
    assert_eq!(got[0].header("x-builder-monitor-event"), Some("alert.test"));
    assert!(got[0].json()["text"].as_str().unwrap().contains("test alert"));
    assert_eq!(got[0].header("x-builder-monitor-signature-256").unwrap(), hmac(SECRET, &got[0].body));

    let out = ws.run(&["alert", "test", "--config", config, "--name", "broken"]);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("HTTP 500"), "{}", out.stderr);
    let out = ws.run(&["alert", "test", "--config", config, "--name", "nope"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("no alert named \"nope\""), "{}", out.stderr);
    // Without --name: which alerts there are, and nothing sent.
    let out = ws.run(&["alert", "test", "--config", config]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("pass --name NAME; configured: ok (slack), broken (webhook)"), "{}", out.stderr);
    assert_eq!(ok.received().len(), 1, "nothing more sent");
}

#[tokio::test]
async fn a_slow_receiver_does_not_hold_up_another() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let (slow, fast) = (Receiver::start().await, Receiver::start().await);
    slow.reply([Reply::Delay(Duration::from_secs(5))]);
    let text = builder(&registry.host, "b", "demo/b")
        + &alert("slow", "webhook", &slow.url, "timeout = \"30s\"")
        + &alert("fast", "webhook", &fast.url, "");
    let s = setup(&text);
    let stop = run_dispatcher(&s);
    change(&s, &pusher, "b", "demo/b", "1").await;
    let held = slow.wait_for(1).await[0].at;
    let delivered = fast.wait_for(1).await[0].at;
    stop.cancel();
    assert!(delivered < held + Duration::from_secs(4), "the fast receiver waited for the slow one");
}

/// Events recorded from many tasks at once (as checks and runner completions record them), each
/// followed by a wake, while other wakes keep coming and a slow receiver holds sends in flight:
/// every delivery is posted exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wakes_while_sends_are_in_flight_never_send_a_delivery_twice() {
    let receiver = Receiver::start().await;
    receiver.reply((0..2000).map(|i| Reply::Delay(Duration::from_millis(1 + i % 7))));
    let url = |name: &str| receiver.url.replace("/hook", &format!("/{name}"));
    let text = builder("127.0.0.1:9", "b", "demo/b")
        + &alert("one", "webhook", &url("one"), "events = [\"build.succeeded\"]")
        + &alert("two", "webhook", &url("two"), "events = [\"build.succeeded\"]");
    let s = setup(&text);
    let alerts = builder_monitor::config::Config::parse(&s.dir.path().join("config.toml"), &text).unwrap().alerts;
    let wake = s.monitor.delivery_wake();
    let stop = CancellationToken::new();
    let dispatcher = tokio::spawn(s.dispatcher.clone().run(stop.clone()));
    let hammering = CancellationToken::new();
    let hammer = {
        let (wake, hammering) = (wake.clone(), hammering.clone());
        tokio::spawn(async move {
            while !hammering.is_cancelled() {
                wake.notify_one();
                tokio::task::yield_now().await;
            }
        })
    };
    const WRITERS: usize = 8;
    const EACH: usize = 40;
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let (ledger, wake, alerts) = (s.ledger.clone(), wake.clone(), alerts.clone());
        writers.spawn(async move {
            for i in 0..EACH {
                let id = format!("event-{w}-{i}");
                let event = Event::new(
                    id.clone(),
                    builder_monitor_core::event::EventType::BuildSucceeded,
                    "2026-01-01T00:00:00Z".into(),
                    builder_monitor_core::event::Subject {
                        name: "b".into(),
                        image: "127.0.0.1:9/demo/b:latest".into(),
                    },
                );
                let routes: Vec<DeliveryKey> = builder_monitor::alert::route(&alerts, std::slice::from_ref(&event));
                assert_eq!(routes.len(), 2);
                ledger.record_events("b", vec![event], routes, 10_000, chrono::Utc::now()).await.unwrap();
                wake.notify_one();
                tokio::task::yield_now().await;
            }
        });
    }
    while writers.join_next().await.is_some() {}
    let total = 2 * WRITERS * EACH;
    receiver.wait_for(total).await;
    let ledger = s.ledger.clone();
    wait_until("every delivery is recorded as sent", || {
        let ledger = ledger.clone();
        async move { ledger.pending_deliveries().await.unwrap().is_empty() }
    })
    .await;
    hammering.cancel();
    hammer.await.unwrap();
    stop.cancel();
    // Sends still in flight finish (and reach the receiver) before the worker returns.
    dispatcher.await.unwrap();
    let mut posts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for r in receiver.received() {
        let id = r.header("x-builder-monitor-delivery").unwrap().to_string();
        *posts.entry((r.path.clone(), id)).or_default() += 1;
    }
    let twice: Vec<_> = posts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{} of {total} deliveries were posted more than once: {twice:?}", twice.len());
    assert_eq!(posts.len(), total);
}
