//! Watching and pinning against a real Distribution registry: request counts, auth, moves,
//! platform filters, rollbacks, vanished tags, retries and settle.

mod auth;
mod direct;
#[path = "watch/in_memory.rs"]
mod in_memory;

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use builder_monitor::config::Config;
use builder_monitor::daemon::Parts;
use builder_monitor::ledger::Ledger;
use builder_monitor::monitor::{CheckOutcome, Monitor};
use builder_monitor::schedule::Clock;
use support::images::{Format, Image, Pusher};
use support::proxy::{Fault, Proxy, Redirect};
use support::registry::{Auth, TestRegistry};
use support::token::TokenServer;

struct Setup {
    monitor: Arc<Monitor>,
    ledger: Ledger,
    clock: Clock,
    _dir: tempfile::TempDir,
}

impl Setup {
    fn new(config_text: &str) -> Self {
        Self::with_clock(config_text, Clock::System)
    }

    fn with_clock(config_text: &str, clock: Clock) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("password"), "testpass\n").unwrap();
        let config = Arc::new(Config::parse(&dir.path().join("config.toml"), config_text).unwrap());
        let builder_monitor::config::StateLocation::Sqlite(path) = &config.monitor.state else { unreachable!() };
        let ledger = Ledger::open(path).unwrap();
        let monitor = Parts::new(config.clone(), ledger.clone(), clock.clone(), None).unwrap().monitor;
        Setup { monitor, ledger, clock, _dir: dir }
    }

    async fn check(&self, name: &str) -> CheckOutcome {
        self.monitor.check_builder(name).await.unwrap().unwrap()
    }

    async fn event_types(&self) -> Vec<String> {
        self.ledger.events_after(0, 1000).await.unwrap().into_iter().map(|e| e.event.event_type.to_string()).collect()
    }
}

fn builder_config(host: &str, repo: &str, extra: &str) -> String {
    format!(
        "[monitor]\nstate = \"state.db\"\n\n[registries.\"{host}\"]\nbackoff = \"50ms\"\n{extra}\n[[builders]]\nname = \"b\"\nimage = \"{host}/{repo}:latest\"\n"
    )
}

fn amd64_arm64(salt_amd64: &str, salt_arm64: &str) -> Vec<Image> {
    vec![Image::new("amd64").salt(salt_amd64), Image::new("arm64").salt(salt_arm64)]
}

#[tokio::test]
async fn unchanged_tag_costs_one_head_per_check() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let (index, _) = pusher.push_index("demo/builder", "latest", &amd64_arm64("a", "a"), Format::Oci).await;
    let proxy = Proxy::start(&registry.host).await;
    let setup = Setup::new(&builder_config(&proxy.host, "demo/builder", ""));

    assert!(matches!(setup.check("b").await, CheckOutcome::Pinned { digest } if digest == index.digest));
    proxy.clear();
    for _ in 0..25 {
        assert!(matches!(setup.check("b").await, CheckOutcome::Unchanged));
    }
    let seen = proxy.seen();
    assert_eq!(seen.len(), 25, "{seen:#?}");
    assert!(seen.iter().all(|s| s.method == "HEAD" && s.status == 200));
    assert_eq!(setup.event_types().await, ["builder.pinned"]);
}

#[tokio::test]
async fn repush_records_exactly_one_change() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let (v1, _) = pusher.push_index("demo/builder", "latest", &amd64_arm64("a", "a"), Format::Oci).await;
    let setup = Setup::new(&builder_config(&registry.host, "demo/builder", ""));
    assert!(matches!(setup.check("b").await, CheckOutcome::Pinned { .. }));

    let (v2, children) = pusher.push_index("demo/builder", "latest", &amd64_arm64("b", "b"), Format::Oci).await;
    match setup.check("b").await {
        CheckOutcome::Changed { previous, current, .. } => {
            assert_eq!((previous.as_str(), current.as_str()), (v1.digest.as_str(), v2.digest.as_str()));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(setup.check("b").await, CheckOutcome::Unchanged));
    assert_eq!(setup.event_types().await, ["builder.pinned", "builder.changed"]);

    let events = setup.ledger.events_after(0, 10).await.unwrap();
    let changed = serde_json::to_value(&events[1].event).unwrap();
    let image = format!("{}/demo/builder", registry.host);
    assert_eq!(changed["builder"]["image"], format!("{image}:latest"));
    assert_eq!(changed["previous"]["reference"], format!("{image}@{}", v1.digest));
    assert_eq!(changed["current"]["reference"], format!("{image}@{}", v2.digest));
    assert_eq!(changed["current"]["platforms"]["linux/arm64"], children[1].digest);
    assert_eq!(changed["rollback"], false);
    let record = setup.ledger.watch("b").await.unwrap().unwrap();
    assert_eq!(record.pin.unwrap().digest, v2.digest);
    let changes = setup.ledger.changes(Some("b"), 10).await.unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].id, changed["id"].as_str().unwrap());
}

#[tokio::test]
async fn docker_and_single_manifests_are_watched_too() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let d1 = pusher.push_image("demo/docker", Some("latest"), &Image::new("amd64"), Format::Docker).await;
    let setup = Setup::new(&builder_config(&registry.host, "demo/docker", ""));
    assert!(matches!(setup.check("b").await, CheckOutcome::Pinned { digest } if digest == d1.digest));
    let record = setup.ledger.watch("b").await.unwrap().unwrap();
    let pin = record.pin.unwrap();
    assert_eq!(pin.media_type, "application/vnd.docker.distribution.manifest.v2+json");
    assert_eq!(pin.platforms.get("linux/amd64"), Some(&d1.digest));
    let d2 = pusher.push_image("demo/docker", Some("latest"), &Image::new("amd64").salt("2"), Format::Docker).await;
    assert!(matches!(setup.check("b").await, CheckOutcome::Changed { current, .. } if current == d2.digest));
}

#[tokio::test]
async fn platform_filter_ignores_moves_of_unwatched_platforms() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_index("demo/builder", "latest", &amd64_arm64("a", "a"), Format::Oci).await;
    let text = builder_config(&registry.host, "demo/builder", "") + "platforms = [\"linux/amd64\"]\n";
    let setup = Setup::new(&text);
    assert!(matches!(setup.check("b").await, CheckOutcome::Pinned { .. }));

    // Only arm64 moved: the pin follows the index, but nothing is reported.
    let (v2, _) = pusher.push_index("demo/builder", "latest", &amd64_arm64("a", "b"), Format::Oci).await;
    assert!(matches!(setup.check("b").await, CheckOutcome::PlatformsUnchanged { digest } if digest == v2.digest));
    assert!(matches!(setup.check("b").await, CheckOutcome::Unchanged));
    assert_eq!(setup.event_types().await, ["builder.pinned"]);

    // amd64 moved: reported.
    let (v3, _) = pusher.push_index("demo/builder", "latest", &amd64_arm64("b", "b"), Format::Oci).await;
    match setup.check("b").await {
        CheckOutcome::Changed { previous, current, .. } => assert_eq!((previous, current), (v2.digest, v3.digest)),
        other => panic!("{other:?}"),
    }
    assert_eq!(setup.event_types().await, ["builder.pinned", "builder.changed"]);
}

#[tokio::test]
async fn moving_back_is_a_flagged_rollback_with_its_own_id() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let a = Image::new("amd64").salt("a");
    let b = Image::new("amd64").salt("b");
    pusher.push_image("demo/app", Some("latest"), &a, Format::Oci).await;
    let setup = Setup::new(&builder_config(&registry.host, "demo/app", ""));
    setup.check("b").await;
    for image in [&b, &a, &b] {
        pusher.push_image("demo/app", Some("latest"), image, Format::Oci).await;
        assert!(matches!(setup.check("b").await, CheckOutcome::Changed { .. }));
    }
    let mut changes = setup.ledger.changes(Some("b"), 10).await.unwrap();
    changes.reverse();
    assert_eq!(changes.iter().map(|c| c.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(changes.iter().map(|c| c.rollback).collect::<Vec<_>>(), [false, true, true]);
    let ids: std::collections::BTreeSet<_> = changes.iter().map(|c| c.id.clone()).collect();
    assert_eq!(ids.len(), 3, "A→B, B→A, A→B are three changes");
}

#[tokio::test]
async fn vanished_tag_fails_keeps_the_pin_and_recovers() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let image = Image::new("amd64");
    let v1 = pusher.push_image("demo/app", Some("latest"), &image, Format::Oci).await;
    let setup = Setup::new(&builder_config(&registry.host, "demo/app", ""));
    setup.check("b").await;

    pusher.delete("demo/app", &v1.digest).await;
    for _ in 0..3 {
        match setup.check("b").await {
            CheckOutcome::Failed(err) => assert_eq!(err.reason(), "tag_missing"),
            other => panic!("{other:?}"),
        }
    }
    let record = setup.ledger.watch("b").await.unwrap().unwrap();
    assert_eq!(record.pin.as_ref().unwrap().digest, v1.digest, "pin kept");
    assert_eq!(record.consecutive_failures, 3);
    // One alert per failure streak, not one per check.
    assert_eq!(setup.event_types().await, ["builder.pinned", "check.failed"]);
    let failed = setup.ledger.events_after(0, 10).await.unwrap()[1].event.clone();
    assert_eq!(failed.error.as_ref().unwrap().reason, "tag_missing");
    assert_eq!(failed.current.as_ref().unwrap().digest, v1.digest);

    pusher.push_image("demo/app", Some("latest"), &image, Format::Oci).await;
    assert!(matches!(setup.check("b").await, CheckOutcome::Unchanged));
    assert_eq!(setup.event_types().await, ["builder.pinned", "check.failed", "check.recovered"]);
    let recovered = setup.ledger.events_after(0, 10).await.unwrap()[2].event.clone();
    assert_eq!(recovered.error.unwrap().consecutive_failures, 3);
}

#[tokio::test]
async fn retry_after_and_server_errors_are_retried_without_false_changes() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/app", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let proxy = Proxy::start(&registry.host).await;
    let setup = Setup::new(&builder_config(&proxy.host, "demo/app", "max_attempts = 3\n"));
    setup.check("b").await;
    proxy.clear();

    proxy.inject(Fault::status(429).on("HEAD").header("Retry-After", "1"));
    assert!(matches!(setup.check("b").await, CheckOutcome::Unchanged));
    let seen = proxy.seen();
    assert_eq!(seen.iter().map(|s| s.status).collect::<Vec<_>>(), [429, 200]);
    let gap = seen[1].at - seen[0].at;
    assert!(gap >= Duration::from_secs(1), "request {gap:?} after a 429 with Retry-After: 1");
    let labels = builder_monitor::metrics::Metrics::registry_labels(&proxy.host);
    assert_eq!(setup.monitor.handle().metrics().rate_limited.get_or_create(&labels).get(), 1, "429 counted");

    proxy.clear();
    proxy.inject(Fault::status(503));
    proxy.inject(Fault::status(502));
    assert!(matches!(setup.check("b").await, CheckOutcome::Unchanged));
    assert_eq!(proxy.seen().iter().map(|s| s.status).collect::<Vec<_>>(), [503, 502, 200]);

    proxy.clear();
    for _ in 0..3 {
        proxy.inject(Fault::status(500));
    }
    match setup.check("b").await {
        CheckOutcome::Failed(err) => assert_eq!(err.reason(), "registry_unavailable"),
        other => panic!("{other:?}"),
    }
    assert_eq!(proxy.seen().len(), 3, "max_attempts = 3");
    assert_eq!(setup.event_types().await, ["builder.pinned", "check.failed"]);
    assert!(setup.ledger.changes(None, 10).await.unwrap().is_empty(), "an error is never a change");
}

#[tokio::test]
async fn requests_respect_the_rate_limit() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/app", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let proxy = Proxy::start(&registry.host).await;
    let setup = Setup::new(&builder_config(&proxy.host, "demo/app", "requests_per_second = 5\nburst = 1\n"));
    for _ in 0..6 {
        setup.check("b").await;
    }
    // The proxy sees arrivals, not the limiter's releases: a request held up on its way (a busy
    // machine) shortens the gap to the next one, so single gaps say little. The k-th request cannot
    // be released before the first one's release + k × 200 ms, hence arrival_k − arrival_0 ≥
    // k × 200 ms − (the first one's delay on its way), for every k; 150 ms allows for that delay.
    // Without the limiter all of them arrive within a few milliseconds.
    let seen = proxy.seen();
    assert!(seen.len() >= 6, "{} requests", seen.len());
    for (k, request) in seen.iter().enumerate().skip(1) {
        let since_first = request.at - seen[0].at;
        let floor = Duration::from_millis(200 * k as u64 - 150);
        assert!(
            since_first >= floor,
            "request {k} came {since_first:?} after the first at 5 req/s (at least {floor:?})"
        );
    }
}

#[tokio::test]
async fn settle_reports_a_digest_only_after_it_stayed() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/app", Some("latest"), &Image::new("amd64").salt("1"), Format::Oci).await;
    let clock = Clock::manual(chrono::Utc::now());
    let text = builder_config(&registry.host, "demo/app", "") + "settle = \"30m\"\n";
    let setup = Setup::with_clock(&text, clock);
    setup.check("b").await;

    let v2 = pusher.push_image("demo/app", Some("latest"), &Image::new("amd64").salt("2"), Format::Oci).await;
    assert!(matches!(setup.check("b").await, CheckOutcome::Held { digest } if digest == v2.digest));
    setup.clock.advance(Duration::from_secs(29 * 60));
    assert!(matches!(setup.check("b").await, CheckOutcome::Held { .. }));
    // It moved again before settling: the wait starts over for the newest digest.
    let v3 = pusher.push_image("demo/app", Some("latest"), &Image::new("amd64").salt("3"), Format::Oci).await;
    setup.clock.advance(Duration::from_secs(2 * 60));
    assert!(matches!(setup.check("b").await, CheckOutcome::Held { digest } if digest == v3.digest));
    setup.clock.advance(Duration::from_secs(29 * 60));
    assert!(matches!(setup.check("b").await, CheckOutcome::Held { .. }));
    setup.clock.advance(Duration::from_secs(60));
    assert!(matches!(setup.check("b").await, CheckOutcome::Changed { current, .. } if current == v3.digest));
    assert_eq!(setup.event_types().await, ["builder.pinned", "builder.changed"]);
}

#[tokio::test]
async fn spent_pull_quota_holds_gets_back_but_not_heads() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/app", Some("latest"), &Image::new("amd64").salt("1"), Format::Oci).await;
    let proxy = Proxy::start(&registry.host).await;
    let setup = Setup::new(&builder_config(&proxy.host, "demo/app", ""));
    setup.check("b").await;

    // The registry says the pull quota is spent: one pull comes back per window/limit = 1 s.
    let v2 = pusher.push_image("demo/app", Some("latest"), &Image::new("amd64").salt("2"), Format::Oci).await;
    proxy.clear();
    proxy
        .inject(Fault::decorate().on("HEAD").header("RateLimit-Limit", "2;w=2").header("RateLimit-Remaining", "0;w=2"));
    assert!(matches!(setup.check("b").await, CheckOutcome::Changed { current, .. } if current == v2.digest));
    let seen = proxy.seen();
    assert_eq!(seen.iter().map(|s| s.method.as_str()).collect::<Vec<_>>(), ["HEAD", "GET", "GET"]);
    let held = seen[1].at - seen[0].at;
    assert!(held >= Duration::from_millis(950), "GET {held:?} after the quota ran out");
    assert!(seen.iter().all(|s| s.status == 200));
}

#[tokio::test]
async fn cross_host_manifest_redirects_are_refused_and_never_pinned() {
    let registry = TestRegistry::start();
    let other = TestRegistry::start();
    let ours =
        Pusher::new(&registry.host).push_image("demo/builder", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    Pusher::new(&registry.host).push_image("demo/only-here", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    // Another image under the same name on the other host.
    let foreign = Pusher::new(&other.host)
        .push_image("demo/builder", Some("latest"), &Image::new("amd64").salt("foreign"), Format::Oci)
        .await;
    assert_ne!(ours.digest, foreign.digest);
    let proxy = Proxy::start(&registry.host).await;
    let text = builder_config(&proxy.host, "demo/builder", "")
        + &format!("[[builders]]\nname = \"here\"\nimage = \"{}/demo/only-here:latest\"\n", proxy.host);
    let setup = Setup::new(&text);
    assert!(matches!(setup.check("b").await, CheckOutcome::Pinned { digest } if digest == ours.digest));

    proxy.redirect(Some(Redirect::all(&other.host)));
    for _ in 0..2 {
        match setup.check("b").await {
            CheckOutcome::Failed(err) => {
                assert_eq!(err.reason(), "invalid_response", "{err}");
                assert!(err.to_string().contains(&other.host), "names the target host: {err}");
            }
            other => panic!("{other:?}"),
        }
    }
    // What the other host answers (here a 404) is not the configured registry's word.
    match setup.check("here").await {
        CheckOutcome::Failed(err) => assert_eq!(err.reason(), "invalid_response", "{err}"),
        other => panic!("{other:?}"),
    }
    // A first check under the redirect pins nothing.
    let fresh = Setup::new(&builder_config(&proxy.host, "demo/builder", ""));
    assert!(matches!(fresh.check("b").await, CheckOutcome::Failed(_)));
    assert!(fresh.ledger.watch("b").await.unwrap().and_then(|r| r.pin).is_none(), "no foreign pin");

    proxy.redirect(None);
    assert!(matches!(setup.check("b").await, CheckOutcome::Unchanged));
    let record = setup.ledger.watch("b").await.unwrap().unwrap();
    assert_eq!(record.pin.unwrap().digest, ours.digest);
    let types = setup.event_types().await;
    assert!(!types.iter().any(|t| t == "builder.changed"), "{types:?}");
    assert!(setup.ledger.changes(None, 10).await.unwrap().is_empty(), "a redirect is never a change");
}

#[tokio::test]
async fn blob_redirects_to_storage_are_followed_without_credentials() {
    let registry = TestRegistry::start_with(Auth::Htpasswd);
    let storage = TestRegistry::start();
    let image = Image::new("amd64");
    let pushed = Pusher::with_basic(&registry.host, "testuser", "testpass")
        .push_image("demo/app", Some("latest"), &image, Format::Oci)
        .await;
    // The same blobs, served by "storage" on another host.
    Pusher::new(&storage.host).push_image("demo/app", Some("latest"), &image, Format::Oci).await;
    let storage_proxy = Proxy::start(&storage.host).await;
    let proxy = Proxy::start(&registry.host).await;
    proxy.redirect(Some(Redirect::blobs(&storage_proxy.host)));
    let setup =
        Setup::new(&builder_config(&proxy.host, "demo/app", "username = \"testuser\"\npassword_file = \"password\"\n"));

    assert!(matches!(setup.check("b").await, CheckOutcome::Pinned { digest } if digest == pushed.digest));
    let redirected: Vec<_> = proxy.seen().into_iter().filter(|s| s.status == 307).collect();
    assert!(!redirected.is_empty(), "the config blob was redirected: {:#?}", proxy.seen());
    let fetched = storage_proxy.seen();
    assert!(fetched.iter().any(|s| s.method == "GET" && s.path.contains("/blobs/") && s.status == 200), "{fetched:#?}");
    assert!(fetched.iter().all(|s| !s.authorization), "credentials never leave the registry's host: {fetched:#?}");
}

#[tokio::test]
async fn token_requests_follow_no_redirect_to_another_host() {
    let tokens = TokenServer::start(Some(("testuser", "testpass")), 300).await;
    let elsewhere = TokenServer::start(Some(("testuser", "testpass")), 300).await;
    let realm_host = tokens.realm.trim_start_matches("http://").trim_end_matches("/token").to_string();
    let elsewhere_host = elsewhere.realm.trim_start_matches("http://").trim_end_matches("/token").to_string();
    let realm = Proxy::start(&realm_host).await;
    let registry = TestRegistry::start_with(Auth::Token { realm: format!("http://{}/token", realm.host) });
    Pusher::with_basic(&registry.host, "testuser", "testpass")
        .push_image("demo/app", Some("latest"), &Image::new("amd64"), Format::Oci)
        .await;
    let setup = Setup::new(&builder_config(
        &registry.host,
        "demo/app",
        "username = \"testuser\"\npassword_file = \"password\"\n",
    ));

    // A token from elsewhere would be accepted by this registry (same signing key): it must not be fetched.
    realm.redirect(Some(Redirect::paths(&elsewhere_host, "/token")));
    match setup.check("b").await {
        CheckOutcome::Failed(err) => {
            assert_eq!(err.reason(), "invalid_response", "{err}");
            assert!(err.to_string().contains(&elsewhere_host), "names the target host: {err}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(elsewhere.fetches(), 0, "no token request, so no credentials, went elsewhere");

    realm.redirect(None);
    assert!(matches!(setup.check("b").await, CheckOutcome::Pinned { .. }));
}

#[tokio::test]
async fn a_digest_the_registry_does_not_serve_is_an_invalid_response() {
    let registry = TestRegistry::start();
    Pusher::new(&registry.host).push_image("demo/app", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let proxy = Proxy::start(&registry.host).await;
    let setup = Setup::new(&builder_config(&proxy.host, "demo/app", ""));
    setup.check("b").await;

    let bogus = format!("sha256:{}", "0".repeat(64));
    for header in [bogus.as_str(), "sha256:not-hex", "md5:0123"] {
        proxy.inject(Fault::decorate().on("HEAD").header("Docker-Content-Digest", header));
        match setup.check("b").await {
            CheckOutcome::Failed(err) => {
                assert_eq!(err.reason(), "invalid_response", "{header}: {err}");
                assert!(err.to_string().contains(header), "{err}");
            }
            other => panic!("{header}: {other:?}"),
        }
    }
    assert!(matches!(setup.check("b").await, CheckOutcome::Unchanged));
    assert!(setup.ledger.changes(None, 10).await.unwrap().is_empty());
}

/// `999ms`, `5us`, `3ns`: humantime's parts below a second.
fn has_subsecond_units(message: &str) -> bool {
    let bytes = message.as_bytes();
    ["ms", "us", "ns"].iter().any(|unit| {
        message.match_indices(unit).any(|(i, _)| {
            i > 0 && bytes[i - 1].is_ascii_digit() && bytes.get(i + 2).is_none_or(|b| !b.is_ascii_alphanumeric())
        })
    })
}

#[tokio::test]
async fn an_overlong_retry_after_is_capped_and_reported_honestly() {
    let registry = TestRegistry::start();
    Pusher::new(&registry.host).push_image("demo/app", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let proxy = Proxy::start(&registry.host).await;

    // Default cap (10m): the check fails at once, saying what the registry asked for, in whole units.
    let setup = Setup::new(&builder_config(&proxy.host, "demo/app", ""));
    setup.check("b").await;
    proxy.inject(Fault::status(429).on("HEAD").header("Retry-After", "86400"));
    match setup.check("b").await {
        CheckOutcome::Failed(err) => {
            let message = err.to_string();
            assert_eq!(err.reason(), "rate_limited", "{message}");
            assert!(message.contains("1day") && message.contains("10m"), "{message}");
            assert!(!has_subsecond_units(&message), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // Checks meanwhile fail fast and say how long is left, rounded to seconds.
    match setup.check("b").await {
        CheckOutcome::Failed(err) => {
            let message = err.to_string();
            assert_eq!(err.reason(), "rate_limited", "{message}");
            assert!(message.contains("10m") && !has_subsecond_units(&message), "{message}");
        }
        other => panic!("{other:?}"),
    }

    // A short cap: the registry is checked again on the next check, not in a day.
    let proxy = Proxy::start(&registry.host).await;
    let setup = Setup::new(&builder_config(&proxy.host, "demo/app", "max_retry_after = \"1s\"\n"));
    setup.check("b").await;
    proxy.inject(Fault::status(429).on("HEAD").header("Retry-After", "86400"));
    assert!(matches!(setup.check("b").await, CheckOutcome::Failed(err) if err.reason() == "rate_limited"));
    proxy.clear();
    assert!(matches!(setup.check("b").await, CheckOutcome::Unchanged));
    assert_eq!(proxy.seen().iter().map(|s| (s.method.as_str(), s.status)).collect::<Vec<_>>(), [("HEAD", 200)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_registry_does_not_delay_another_registrys_checks() {
    const HANGING_TAGS: usize = 100;
    let healthy = TestRegistry::start();
    let pusher = Pusher::new(&healthy.host);
    pusher.push_image("demo/app", Some("latest"), &Image::new("amd64").salt("1"), Format::Oci).await;
    let dead = TestRegistry::start();
    let hanging = Proxy::start(&dead.host).await;
    hanging.hang(true);
    let mut text = format!(
        "[monitor]\nstate = \"state.db\"\njitter = \"0s\"\n\n[registries.\"{}\"]\ntimeout = \"3s\"\nmax_attempts = 2\nbackoff = \"50ms\"\nrequests_per_second = 0\n\n[[builders]]\nname = \"healthy\"\nimage = \"{}/demo/app:latest\"\ninterval = \"1s\"\n",
        hanging.host, healthy.host
    );
    for i in 0..HANGING_TAGS {
        text += &format!(
            "[[builders]]\nname = \"t{i}\"\nimage = \"{}/demo/t{i}:latest\"\ninterval = \"1s\"\n",
            hanging.host
        );
    }
    let setup = Setup::new(&text);
    let mut committed = setup.ledger.commits();
    let daemon = tokio::spawn(setup.monitor.clone().run(tokio_util::sync::CancellationToken::new()));

    let mut failed = std::collections::BTreeSet::new();
    let mut next_commit = async || {
        tokio::time::timeout(support::PATIENCE, committed.recv())
            .await
            .expect("a check commits")
            .expect("no commit missed")
    };
    loop {
        let name = next_commit().await;
        if name == "healthy" {
            break;
        }
        failed.insert(name);
    }
    let moved = pusher.push_image("demo/app", Some("latest"), &Image::new("amd64").salt("2"), Format::Oci).await;
    let pushed_at = std::time::Instant::now();
    // Its own schedule says within about a second; today's 16 shared slots held by the hanging
    // registry's checks (3s x 2 attempts each) would take over half a minute.
    let bound = Duration::from_secs(8);
    loop {
        let name = tokio::time::timeout(bound.saturating_sub(pushed_at.elapsed()), next_commit())
            .await
            .unwrap_or_else(|_| panic!("the healthy registry's move was not seen within {bound:?}"));
        if name != "healthy" {
            failed.insert(name);
            continue;
        }
        let record = setup.ledger.watch("healthy").await.unwrap().unwrap();
        if record.pin.is_some_and(|p| p.digest == moved.digest) {
            break;
        }
    }
    // The hanging registry's checks are still recorded, as failures.
    while failed.len() < HANGING_TAGS {
        let name = next_commit().await;
        if name != "healthy" {
            failed.insert(name);
        }
    }
    for i in 0..HANGING_TAGS {
        let record = setup.ledger.watch(&format!("t{i}")).await.unwrap().unwrap();
        assert!(record.consecutive_failures >= 1 && record.pin.is_none(), "t{i}: {record:?}");
        assert_eq!(record.last_error_reason.as_deref(), Some("registry_unavailable"), "t{i}");
    }
    // The circuit opened: a few requests reached the dead registry, not one per check and attempt.
    let reached = hanging.seen().len();
    assert!(reached < 30, "{reached} requests to a registry that never answers");
    daemon.abort();
}

/// The daemon's scheduler over one builder `b` on a manual clock, checked when told to, with the
/// times of unchanged checks written every `flush`; and a reader of the same ledger file as
/// another process (`status`) opens it.
struct Scheduled {
    monitor: Arc<Monitor>,
    ledger: Ledger,
    other: Ledger,
    clock: Clock,
    commits: tokio::sync::broadcast::Receiver<String>,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Scheduled {
    async fn start(host: &str, flush: Duration) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n[[builders]]\nname = \"b\"\nimage = \"{host}/demo/builder:latest\"\n"
        );
        let config = Arc::new(Config::parse(&dir.path().join("config.toml"), &text).unwrap());
        let path = dir.path().join("state.db");
        let ledger = Ledger::open(&path).unwrap().with_touch_flush(flush);
        let other = Ledger::open_read_only(&path).unwrap();
        let clock = Clock::manual(builder_monitor_core::schedule::parse_timestamp("2026-11-30T12:00:00Z").unwrap());
        let monitor = Parts::new(config, ledger.clone(), clock.clone(), None).unwrap().monitor;
        let commits = ledger.commits();
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(monitor.clone().run(stop.clone()));
        let mut scheduled = Scheduled { monitor, ledger, other, clock, commits, stop, task, _dir: dir };
        scheduled.checked().await;
        scheduled
    }

    /// Waits for the next check of `b` to be committed (or kept).
    async fn checked(&mut self) {
        loop {
            let name = tokio::time::timeout(support::PATIENCE, self.commits.recv()).await.unwrap().unwrap();
            if name == "b" {
                return;
            }
        }
    }

    /// Checks `b` again, a minute later by the daemon's clock.
    async fn check_again(&mut self) {
        self.clock.advance(Duration::from_secs(60));
        assert!(self.monitor.handle().check_now("b"));
        self.checked().await;
    }

    async fn last_check(ledger: &Ledger) -> String {
        builder_monitor_core::schedule::timestamp(ledger.watch("b").await.unwrap().unwrap().last_check.unwrap())
    }
}

#[tokio::test]
async fn unchanged_checks_are_kept_in_memory_and_written_at_shutdown() {
    let registry = TestRegistry::start();
    Pusher::new(&registry.host).push_index("demo/builder", "latest", &amd64_arm64("a", "a"), Format::Oci).await;
    let mut s = Scheduled::start(&registry.host, Duration::from_secs(3600)).await;
    for _ in 0..3 {
        s.check_again().await;
    }
    assert_eq!(Scheduled::last_check(&s.ledger).await, "2026-11-30T12:03:00Z", "the daemon reads its own checks");
    assert_eq!(Scheduled::last_check(&s.other).await, "2026-11-30T12:00:00Z", "not written yet: the pin's time");
    s.stop.cancel();
    s.task.await.unwrap();
    assert_eq!(Scheduled::last_check(&s.other).await, "2026-11-30T12:03:00Z", "written at shutdown");
}

#[tokio::test]
async fn unchanged_checks_are_written_on_the_flush_timer() {
    let registry = TestRegistry::start();
    Pusher::new(&registry.host).push_index("demo/builder", "latest", &amd64_arm64("a", "a"), Format::Oci).await;
    let mut s = Scheduled::start(&registry.host, Duration::from_millis(100)).await;
    s.check_again().await;
    s.check_again().await;
    // The timer has no event of its own: the file is read until it shows the newest check.
    let deadline = tokio::time::Instant::now() + support::PATIENCE;
    while Scheduled::last_check(&s.other).await != "2026-11-30T12:02:00Z" {
        assert!(tokio::time::Instant::now() < deadline, "not written within {:?}", support::PATIENCE);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!s.task.is_finished(), "written while the daemon runs");
    s.stop.cancel();
    s.task.await.unwrap();
}
