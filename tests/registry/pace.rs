//! Actions at the registry's pace: a fleet of registry rebases through the registry client's
//! actions' view is not held to the watching's `requests_per_second` (the default 5/s), slows down
//! on the registry's 429s without failing, and costs a pinned number of requests per app; the
//! watching stays under `requests_per_second`.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;

use builder_monitor::config::RegistrySettings;
use builder_monitor::metrics::Metrics;
use builder_monitor::rebase::{RebaseRequest, RunImageDocs, Unguarded, rebase_with};
use builder_monitor::registry::Registry;
use builder_monitor_core::reference::ImageRef;
use support::app::{self, App, RunImage};
use support::images::{Format, Pusher};
use support::proxy::{Fault, Proxy};
use support::registry::{Auth, TestRegistry};

/// Rebases in flight at once, as `[runner] max_concurrent` would allow.
const CONCURRENT: usize = 8;
/// Layers of the run images.
const RUN_LAYERS: usize = 2;

struct Fleet {
    _registry: TestRegistry,
    proxy: Proxy,
    host: String,
    apps: Vec<String>,
    /// The new run image, by digest (as the daemon names it).
    run: String,
}

/// `n` apps, one repository each, on run image v1; v2 pushed; the proxy's log cleared.
async fn fleet(n: usize) -> Fleet {
    let registry = TestRegistry::start_relative(Auth::Anonymous);
    let proxy = Proxy::start(&registry.host).await;
    let host = proxy.host.clone();
    let pusher = Pusher::new(&host);
    let v1 = RunImage::jammy("v1", RUN_LAYERS);
    let v1_pushed = app::push_run(&pusher, "run", Some("latest"), &v1, Format::Oci).await;
    let built = App::on(&v1, &format!("{host}/run:latest"), &format!("{host}/run@{}", v1_pushed.digest));
    let mut apps = Vec::new();
    for i in 0..n {
        let repo = format!("apps/web-{i:02}");
        app::push_app(&pusher, &repo, Some("1"), &built, Format::Oci).await;
        apps.push(format!("{host}/{repo}:1"));
    }
    let v2 = RunImage::jammy("v2", RUN_LAYERS);
    let v2_pushed = app::push_run(&pusher, "run", Some("latest"), &v2, Format::Oci).await;
    proxy.clear();
    let run = format!("{host}/run@{}", v2_pushed.digest);
    Fleet { _registry: registry, proxy, host, apps, run }
}

/// Every app of `fleet` rebased through `registry`, `CONCURRENT` at a time; the errors, if any.
async fn rebase_all(fleet: &Fleet, registry: &Registry) -> Vec<String> {
    let docs = RunImageDocs::default();
    futures::stream::iter(&fleet.apps)
        .map(|app| {
            let request = RebaseRequest {
                image: ImageRef::parse(app).unwrap(),
                run_image: ImageRef::parse(&fleet.run).unwrap(),
                force: false,
                dry_run: false,
                known_run_images: Vec::new(),
                sign: None,
            };
            let docs = &docs;
            async move { rebase_with(registry, &request, &Unguarded, docs).await.map(|_| ()) }
        })
        .buffer_unordered(CONCURRENT)
        .filter_map(|r| async move { r.err().map(|e| e.to_string()) })
        .collect()
        .await
}

/// A metric's value in the exposition; `None` when the series is not there.
fn metric(metrics: &Arc<Metrics>, series: &str) -> Option<f64> {
    metrics.encode().lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

fn by_method(proxy: &Proxy) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for seen in proxy.seen() {
        *counts.entry(seen.method).or_default() += 1;
    }
    counts
}

/// With the default config (5 requests/s per registry), a fleet's rebases are not held to it: no
/// request of theirs waited for the watching's limiter, and their pace is unbounded (the registry
/// never said otherwise). The requests are pinned per app, by method: one more fails the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_at_the_default_config_is_not_held_to_the_watching_rate_and_costs_pinned_requests() {
    const APPS: usize = 40;
    let fleet = fleet(APPS).await;
    builder_monitor::install_crypto_provider();
    let metrics = Metrics::new();
    let settings = RegistrySettings::defaults_for(&fleet.host);
    assert_eq!(settings.requests_per_second, Some(5.0), "the default watching rate");
    let registry = Registry::new([settings], metrics.clone()).actions();
    let failed = rebase_all(&fleet, &registry).await;
    assert!(failed.is_empty(), "{failed:#?}");

    let host = &fleet.host;
    let waited = metric(&metrics, &format!("builder_monitor_rate_limit_wait_seconds_total{{registry=\"{host}\"}}"));
    assert_eq!(waited, None, "no action request waited for the watching's limiter");
    let paced = metric(&metrics, &format!("builder_monitor_action_pace_wait_seconds_total{{registry=\"{host}\"}}"));
    assert_eq!(paced, None, "nor for a pace: the registry never asked to slow down");
    assert_eq!(registry.action_rate(host), None);

    // Per app: its manifest and config (GET), the tag's HEAD before and after its PUT, a mount per
    // new run image layer and the config upload's POST, the config's and the tag's PUT (which
    // stores the manifest: nothing signed names it by digest first); per fleet: the new run
    // image's manifest and config, read once.
    let per_app = [("GET", 2), ("HEAD", 2), ("POST", RUN_LAYERS + 1), ("PUT", 2)];
    let per_fleet = [("GET", 2)];
    let mut expected = BTreeMap::new();
    for (method, n) in per_app {
        *expected.entry(method.to_string()).or_default() += n * APPS;
    }
    for (method, n) in per_fleet {
        *expected.entry(method.to_string()).or_default() += n;
    }
    assert_eq!(by_method(&fleet.proxy), expected, "{:#?}", fleet.proxy.seen().iter().take(40).collect::<Vec<_>>());
}

/// A registry answering 429 (`Retry-After: 1`) to half of the fleet's PUTs: every rebase completes,
/// the actions' pace comes down and its pauses are waited, and each 429 costs one more PUT, no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_throttling_half_the_writes_slows_the_fleet_down_and_fails_no_rebase() {
    const APPS: usize = 8;
    let fleet = fleet(APPS).await;
    builder_monitor::install_crypto_provider();
    let metrics = Metrics::new();
    let registry = Registry::new([RegistrySettings::defaults_for(&fleet.host)], metrics.clone()).actions();
    // Half of the PUTs that land (each app's config and tag).
    let throttled = APPS;
    for _ in 0..throttled {
        fleet.proxy.inject(Fault::status(429).header("Retry-After", "1").on("PUT"));
    }
    let failed = rebase_all(&fleet, &registry).await;
    assert!(failed.is_empty(), "no rebase fails for the registry's 429s: {failed:#?}");

    let seen = fleet.proxy.seen();
    let refusals: Vec<_> = seen.iter().filter(|s| s.injected && s.status == 429).map(|s| s.at).collect();
    assert_eq!(refusals.len(), throttled, "every fault answered");
    let puts = seen.iter().filter(|s| s.method == "PUT" && !s.injected).count();
    assert_eq!(puts, 2 * APPS, "each PUT landed once, after its 429s");
    // No request beyond what the registry allowed: every 429 cost exactly one more PUT (none
    // thrown away, none doubled), and the 429s' pauses were waited (the pace metric, not a clock:
    // a busy machine delays requests, it cannot make them fewer).
    let requests = seen.iter().filter(|s| s.method == "PUT").count();
    assert_eq!(requests, 2 * APPS + throttled, "each 429 answered by one later PUT, no more");
    let host = &fleet.host;
    let rate = metric(&metrics, &format!("builder_monitor_registry_action_rate{{registry=\"{host}\"}}"));
    assert!(rate.is_some_and(|r| r > 0.0), "the pace came down to a rate: {rate:?}");
    let paused = metric(&metrics, &format!("builder_monitor_action_pace_wait_seconds_total{{registry=\"{host}\"}}"));
    assert!(paused.is_some_and(|p| p > 0.0), "requests waited out the pauses: {paused:?}");
}

/// The watching keeps its budget: checks through the registry client's own view wait for
/// `requests_per_second`; the same reads through the actions' view do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_stay_under_requests_per_second() {
    let fleet = fleet(1).await;
    builder_monitor::install_crypto_provider();
    let metrics = Metrics::new();
    let mut settings = RegistrySettings::defaults_for(&fleet.host);
    settings.requests_per_second = Some(20.0);
    settings.burst = 1;
    let watching = Registry::new([settings], metrics.clone());
    let actions = watching.actions();
    let app = ImageRef::parse(&fleet.apps[0]).unwrap();
    let series = format!("builder_monitor_rate_limit_wait_seconds_total{{registry=\"{}\"}}", fleet.host);
    for _ in 0..10 {
        actions.head_manifest(&app).await.unwrap();
    }
    assert_eq!(metric(&metrics, &series), None, "actions' reads are not the watching's");
    for _ in 0..10 {
        watching.head_manifest(&app).await.unwrap();
    }
    assert!(metric(&metrics, &series).is_some_and(|w| w > 0.0), "checks waited for the limiter");
}
