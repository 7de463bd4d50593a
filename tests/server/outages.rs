//! Quiet outages against real parts: a registry behind a fault proxy goes down for ten seconds
//! (of a manual clock) under four watches, and a real receiver hears of it once, across a restart.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use builder_monitor::alert::Dispatcher;
use builder_monitor::config::Config;
use builder_monitor::daemon::Parts;
use builder_monitor::ledger::Ledger;
use builder_monitor::monitor::Monitor;
use builder_monitor::schedule::Clock;
use support::cnb::BuilderSpec;
use support::images::{Format, Image, Pusher};
use support::proxy::Proxy;
use support::receiver::Receiver;
use support::registry::TestRegistry;

/// One daemon's in-memory parts over a ledger that outlives them (a restart makes new ones).
struct Daemon {
    monitor: Arc<Monitor>,
    dispatcher: Arc<Dispatcher>,
}

impl Daemon {
    fn start(config: &Arc<Config>, ledger: &Ledger, clock: &Clock) -> Self {
        let parts = Parts::new(config.clone(), ledger.clone(), clock.clone(), None).unwrap();
        Daemon { monitor: parts.monitor, dispatcher: parts.dispatcher }
    }

    /// Every watch checked once, then every due alert sent.
    async fn tick(&self) -> bool {
        let ok = self.monitor.run_once().await;
        self.dispatcher.deliver_due_once().await;
        ok
    }

    fn failing_metric(&self, registry: &str) -> Option<f64> {
        let text = self.monitor.handle().metrics().encode();
        let series = format!("builder_monitor_watches_failing{{registry=\"{registry}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&series)).map(|v| v.parse().unwrap())
    }
}

fn count_by_type(receiver: &Receiver) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in receiver.received() {
        *out.entry(r.header("x-builder-monitor-event").unwrap_or("?").to_string()).or_default() += 1;
    }
    out
}

#[tokio::test]
async fn a_ten_second_registry_outage_is_one_message_and_one_recovery() {
    let registry = TestRegistry::start();
    let proxy = Proxy::start(&registry.host).await;
    let pusher = Pusher::new(&registry.host);
    // Three builders naming one run image: four watches of one registry.
    let run_image = format!("{}/demo/run:latest", proxy.host);
    pusher.push_image("demo/run", Some("latest"), &Image::new("amd64").salt("run"), Format::Oci).await;
    let mut text = format!(
        "[monitor]\nstate = \"state.db\"\njitter = \"0s\"\n\n[registries.\"{}\"]\nbackoff = \"10ms\"\nmax_attempts = 2\n\n",
        proxy.host
    );
    for name in ["a", "b", "c"] {
        let spec = BuilderSpec::jammy(&run_image);
        pusher.push_image(&format!("demo/{name}"), Some("latest"), &spec.image(), Format::Oci).await;
        text += &format!("[[builders]]\nname = \"{name}\"\nimage = \"{}/demo/{name}:latest\"\n", proxy.host);
    }
    let (ops, pager) = (Receiver::start().await, Receiver::start().await);
    // ops: everything, default threshold (3). pager: per-watch messages only, after 6 failures.
    text += &format!("[[alerts]]\nname = \"ops\"\ntype = \"webhook\"\nurl = \"{}\"\nevents = [\"*\"]\n", ops.url);
    text += &format!(
        "[[alerts]]\nname = \"pager\"\ntype = \"webhook\"\nurl = \"{}\"\nevents = [\"check.failed\", \"check.recovered\"]\nfailure_threshold = 6\n",
        pager.url
    );
    let dir = tempfile::tempdir().unwrap();
    let config = Arc::new(Config::parse(&dir.path().join("config.toml"), &text).unwrap());
    let ledger = Ledger::open(&dir.path().join("state.db")).unwrap();
    let clock = Clock::manual(chrono::Utc::now());
    let step = Duration::from_secs(2);

    let mut daemon = Daemon::start(&config, &ledger, &clock);
    assert!(daemon.tick().await, "pins every watch");
    let watches: Vec<String> = ledger.watches().await.unwrap().into_iter().map(|w| w.name).collect();
    let run_watch = format!("run:{run_image}");
    assert_eq!(watches, ["a", "b", "c", run_watch.as_str()]);
    assert_eq!(daemon.failing_metric(&proxy.host), Some(0.0));
    let before = ops.received().len();

    // Down for ten seconds: five rounds of checks, two seconds apart; the daemon restarts midway.
    proxy.down(Some(503));
    for round in 1..=5 {
        clock.advance(step);
        assert!(!daemon.tick().await, "round {round} fails");
        if round == 3 {
            assert_eq!(count_by_type(&ops).get("registry.unavailable"), Some(&1), "announced at the third failure");
            assert_eq!(daemon.failing_metric(&proxy.host), Some(4.0));
            daemon = Daemon::start(&config, &ledger, &clock);
        }
    }
    assert_eq!(daemon.failing_metric(&proxy.host), Some(4.0), "the restarted daemon knows them too");
    proxy.down(None);
    clock.advance(step);
    assert!(daemon.tick().await, "the registry answers again");
    assert_eq!(daemon.failing_metric(&proxy.host), Some(0.0));

    let counts = count_by_type(&ops);
    assert_eq!(counts.get("registry.unavailable"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("registry.recovered"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("check.failed"), None, "no per-watch messages: {counts:?}");
    assert_eq!(counts.get("check.recovered"), None, "{counts:?}");
    assert_eq!(ops.received().len() - before, 2);
    assert!(pager.received().is_empty(), "five failures stay below pager's threshold of six");

    let unavailable =
        ops.received().into_iter().find(|r| r.header("x-builder-monitor-event") == Some("registry.unavailable"));
    let body = unavailable.unwrap().json();
    assert_eq!(body["outage"]["registry"], proxy.host.as_str());
    assert_eq!(body["outage"]["watches"], serde_json::json!(["a", "b", "c", run_watch]));
    assert_eq!(body["outage"]["reason"], "registry_unavailable");
    let names: Vec<&str> = body["builders"].as_array().unwrap().iter().map(|b| b["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let recovered =
        ops.received().into_iter().find(|r| r.header("x-builder-monitor-event") == Some("registry.recovered"));
    assert_eq!(recovered.unwrap().json()["outage"]["since"], body["outage"]["since"]);

    // The ledger still has every watch's own failure and recovery.
    let events = ledger.events_after(0, 1000).await.unwrap();
    let of_type = |t: &str| events.iter().filter(|e| e.event.event_type.as_str() == t).count();
    assert_eq!((of_type("check.failed"), of_type("check.recovered")), (4, 4));
    assert_eq!((of_type("registry.unavailable"), of_type("registry.recovered")), (1, 1));
    assert!(ledger.pending_deliveries().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_watch_failing_alone_reaches_its_alert_after_the_threshold_and_recovers() {
    let registry = TestRegistry::start();
    let proxy = Proxy::start(&registry.host).await;
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/a", Some("latest"), &Image::new("amd64").salt("a"), Format::Oci).await;
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64").salt("b"), Format::Oci).await;
    let receiver = Receiver::start().await;
    let mut text = format!(
        "[monitor]\nstate = \"state.db\"\njitter = \"0s\"\n\n[registries.\"{}\"]\nbackoff = \"10ms\"\nmax_attempts = 2\n\n",
        proxy.host
    );
    for name in ["a", "b"] {
        text += &format!(
            "[[builders]]\nname = \"{name}\"\nimage = \"{}/demo/{name}:latest\"\nwatch_run_image = false\n",
            proxy.host
        );
    }
    text += &format!(
        "[[alerts]]\nname = \"ops\"\ntype = \"webhook\"\nurl = \"{}\"\nevents = [\"check.*\", \"registry.*\"]\nfailure_threshold = 2\n",
        receiver.url
    );
    let dir = tempfile::tempdir().unwrap();
    let config = Arc::new(Config::parse(&dir.path().join("config.toml"), &text).unwrap());
    let ledger = Ledger::open(&dir.path().join("state.db")).unwrap();
    let clock = Clock::manual(chrono::Utc::now());
    let daemon = Daemon::start(&config, &ledger, &clock);
    assert!(daemon.tick().await);

    // b's tag disappears: its own problem, not the registry's; a keeps working.
    let b = ledger.watch("b").await.unwrap().unwrap().pin.unwrap();
    pusher.delete("demo/b", &b.digest).await;
    clock.advance(Duration::from_secs(60));
    daemon.tick().await;
    assert!(receiver.received().is_empty(), "one failure is below the threshold of 2");
    clock.advance(Duration::from_secs(60));
    daemon.tick().await;
    assert_eq!(count_by_type(&receiver), BTreeMap::from([("check.failed".to_string(), 1)]));
    let failed = receiver.received()[0].json();
    assert_eq!(
        (failed["builder"]["name"].as_str(), failed["error"]["reason"].as_str()),
        (Some("b"), Some("tag_missing"))
    );
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64").salt("b2"), Format::Oci).await;
    clock.advance(Duration::from_secs(60));
    daemon.tick().await;
    assert_eq!(
        count_by_type(&receiver),
        BTreeMap::from([("check.failed".to_string(), 1), ("check.recovered".to_string(), 1)])
    );
}

/// An alert with the default events hears of a failure's end as it heard of its start: a watch's
/// `check.recovered` after its `check.failed`, an outage's `registry.recovered` after its
/// `registry.unavailable`; a blip below the threshold was never told, so its end is not either.
#[tokio::test]
async fn default_alerts_hear_each_told_failure_end_and_no_other() {
    let registry = TestRegistry::start();
    let proxy = Proxy::start(&registry.host).await;
    let pusher = Pusher::new(&registry.host);
    let mut text = format!(
        "[monitor]\nstate = \"state.db\"\njitter = \"0s\"\n\n[registries.\"{}\"]\nbackoff = \"10ms\"\nmax_attempts = 2\n\n",
        proxy.host
    );
    for name in ["a", "b"] {
        pusher.push_image(&format!("demo/{name}"), Some("latest"), &Image::new("amd64").salt(name), Format::Oci).await;
        text += &format!(
            "[[builders]]\nname = \"{name}\"\nimage = \"{}/demo/{name}:latest\"\nwatch_run_image = false\n",
            proxy.host
        );
    }
    let receiver = Receiver::start().await;
    text +=
        &format!("[[alerts]]\nname = \"ops\"\ntype = \"webhook\"\nurl = \"{}\"\nfailure_threshold = 2\n", receiver.url);
    let dir = tempfile::tempdir().unwrap();
    let config = Arc::new(Config::parse(&dir.path().join("config.toml"), &text).unwrap());
    let ledger = Ledger::open(&dir.path().join("state.db")).unwrap();
    let clock = Clock::manual(chrono::Utc::now());
    let daemon = Daemon::start(&config, &ledger, &clock);
    assert!(daemon.tick().await);
    let step = Duration::from_secs(60);

    // A blip: one failed round, below the threshold of 2, then fine. Nobody hears of either.
    proxy.down(Some(503));
    clock.advance(step);
    assert!(!daemon.tick().await);
    proxy.down(None);
    clock.advance(step);
    assert!(daemon.tick().await);
    assert!(receiver.received().is_empty(), "{:?}", count_by_type(&receiver));

    // An outage of both watches: one registry.unavailable, then its registry.recovered.
    proxy.down(Some(503));
    for _ in 0..2 {
        clock.advance(step);
        assert!(!daemon.tick().await);
    }
    assert_eq!(count_by_type(&receiver), BTreeMap::from([("registry.unavailable".to_string(), 1)]));
    proxy.down(None);
    clock.advance(step);
    assert!(daemon.tick().await);
    let want = [("registry.unavailable", 1), ("registry.recovered", 1)];
    assert_eq!(count_by_type(&receiver), want.map(|(t, n)| (t.to_string(), n)).into());

    // One watch's tag goes missing (its own problem): its check.failed, then its check.recovered.
    let a = ledger.watch("a").await.unwrap().unwrap().pin.unwrap();
    pusher.delete("demo/a", &a.digest).await;
    for _ in 0..2 {
        clock.advance(step);
        daemon.tick().await;
    }
    assert_eq!(count_by_type(&receiver).get("check.failed"), Some(&1));
    pusher.push_image("demo/a", Some("latest"), &Image::new("amd64").salt("a2"), Format::Oci).await;
    clock.advance(step);
    daemon.tick().await;
    let counts = count_by_type(&receiver);
    assert_eq!((counts.get("check.failed"), counts.get("check.recovered")), (Some(&1), Some(&1)), "{counts:?}");
}
