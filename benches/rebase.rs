//! The registry-rebase benchmark (docs/performance.md, "Registry rebase"): `cargo bench --bench rebase`.
//!
//! Starts two CNCF Distribution registries on loopback, each behind a counting proxy, pushes CNB
//! run images and apps built on them (item 3 writes its apps into the registry's storage), and
//! measures in one run:
//!
//! 1. one rebase of a 20-layer app: requests by method, bytes sent and received, wall time; next
//!    to `skopeo copy` of the same app to the other registry (what a pull and a push cost);
//! 2. 100 apps: wall time per rebase (one at a time) and apps per second (16 at a time), next to
//!    `skopeo copy` per app;
//! 3. the fleet patch: the real daemon with 1,000 app images on one run image, `[runner] rebase =
//!    "registry"` and the registry's push hook; a new run image is pushed; time from the push until
//!    the last app tag points at its rebased image, with the daemon's requests and bytes, and the
//!    attempts that failed. Each app in its own repository, or (`BENCH_SHARED_REPO=1`) all of them
//!    as tags of one repository.
//!
//! 4. the runner's claims over one change of 1,000 and of 10,000 pending rebases, on the SQLite
//!    ledger in-process (`claims.rs`): what planning and claiming cost the daemon per app as a
//!    fleet grows, without the registry's share.
//!
//! Results go to `$CARGO_TARGET_DIR/bench/rebase.{md,json}` (`./target` without the variable).
//! Environment: `BENCH_APPS` (item 2, default 100), `BENCH_FLEET` (item 3, default 1000),
//! `BENCH_SHARED_REPO=1` (item 3: one repository), `BENCH_DEFAULTS=0` (item 3: `requests_per_second
//! = 0` and `max_registry_rebases = 16` set, as earlier rounds measured; by default the config has
//! neither: the defaults a new user has),
//! `BENCH_RUN_CHANGED` (item 3: the new run image's layers that differ from the old one's, from the
//! top; default all 8; `1` is the usual update, its top layer alone), `BENCH_SIGN=1` (item 3: the daemon signs and
//! attests every rebased digest with cosign's encrypted test key, `[signing]`'s defaults; `both`:
//! the fleet unsigned, then signed, each on fresh registries, and the ratio of their times; each
//! fleet's requests are also counted by kind, with the registry's answering time),
//! `BENCH_CLAIMS` (item 4, default `1000,10000`), `BENCH_ONLY=1,2,3,4` picks parts.

#[path = "rebase/claims.rs"]
mod claims;
#[path = "rebase/render.rs"]
mod render;
#[path = "../tests/support/mod.rs"]
mod support;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use builder_monitor::config::RegistrySettings;
use builder_monitor::metrics::Metrics;
use builder_monitor::rebase::{RebaseRequest, Unguarded, rebase};
use builder_monitor::registry::Registry;
use builder_monitor_core::reference::ImageRef;
use serde_json::{Value, json};
use support::app::{self, App, Layer, RunImage};
use support::cnb::BuilderSpec;
use support::daemon::{Daemon, Workspace};
use support::images::{Format, Pusher};
use support::proxy::Proxy;
use support::registry::TestRegistry;

/// Layers of the run image; the app adds `APP_LAYERS` more (20 in all).
const RUN_LAYERS: usize = 8;
const APP_LAYERS: usize = 12;
/// Bytes of each run image layer and app layer in items 1 and 2 (incompressible).
const RUN_LAYER_BYTES: usize = 1 << 20;
const APP_LAYER_BYTES: usize = 256 << 10;
/// Concurrency of item 2's parallel rebases.
const CONCURRENCY: usize = 16;
/// Apps `skopeo copy` is timed on in item 2.
const SKOPEO_SAMPLES: usize = 10;
const API_TOKEN: &str = "bench-api-token-0123456789";

static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn say(message: impl std::fmt::Display) {
    let t = STARTED.get_or_init(Instant::now).elapsed().as_secs_f64();
    eprintln!("[bench {t:7.1}s] {message}");
}

fn env_number(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| panic!("{name}={text:?} is not a whole number")),
        Err(_) => default,
    }
}

fn selected(part: &str) -> bool {
    std::env::var("BENCH_ONLY").map_or(true, |only| only.split(',').any(|p| p.trim() == part))
}

/// Incompressible bytes (xorshift), the same for the same seed.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn sized_layer(path: &str, seed: u64, bytes: usize) -> Layer {
    let tar = app::tar(path, &noise(seed, bytes));
    let blob = app::gzip(&tar);
    Layer {
        digest: support::images::sha256(&blob),
        diff_id: support::images::sha256(&tar),
        blob,
        created_by: format!("ADD {path}"),
    }
}

fn run_image(version: u64, layer_bytes: usize) -> RunImage {
    let mut run = RunImage::jammy(&version.to_string(), RUN_LAYERS);
    run.layers =
        (0..RUN_LAYERS).map(|i| sized_layer(&format!("etc/run-{i}"), version * 1000 + i as u64, layer_bytes)).collect();
    run
}

/// A 20-layer app on `run`: `App::on`'s launcher, buildpack, app and config layers (the lifecycle
/// metadata names them by position), the app layer its own (`seed`), then more buildpack layers
/// every app shares.
fn app_on(run: &RunImage, run_name: &str, run_reference: &str, seed: u64, layer_bytes: usize) -> App {
    let mut app = App::on(run, run_name, run_reference);
    app.layers[2] = sized_layer("workspace/app.bin", 1_000_000 + seed, layer_bytes.min(64 << 10));
    let shared = app.layers.len()..APP_LAYERS;
    app.layers.extend(shared.map(|i| sized_layer(&format!("layers/bp-{i}/layer"), 50_000 + i as u64, layer_bytes)));
    app
}

fn settings(host: &str) -> RegistrySettings {
    let mut s = RegistrySettings::defaults_for(host);
    s.requests_per_second = None;
    s
}

fn client(hosts: &[&str]) -> Registry {
    builder_monitor::install_crypto_provider();
    Registry::new(hosts.iter().map(|h| settings(h)), Metrics::new())
}

fn image(text: &str) -> ImageRef {
    ImageRef::parse(text).expect("a reference")
}

/// Requests by method, bytes sent and received, as a proxy counted them.
fn traffic(proxies: &[&Proxy]) -> Value {
    let mut by_method = std::collections::BTreeMap::<String, usize>::new();
    let (mut sent, mut received) = (0u64, 0u64);
    for proxy in proxies {
        for seen in proxy.seen() {
            *by_method.entry(seen.method.clone()).or_default() += 1;
            sent += seen.sent as u64;
            received += seen.received as u64;
        }
    }
    let requests: usize = by_method.values().sum();
    json!({ "requests": requests, "by_method": by_method, "bytes_sent": sent, "bytes_received": received })
}

fn skopeo_copy(from: &str, to: &str) -> Duration {
    let started = Instant::now();
    let status = Command::new("skopeo")
        .args(["copy", "--quiet", "--src-tls-verify=false", "--dest-tls-verify=false"])
        .arg(format!("docker://{from}"))
        .arg(format!("docker://{to}"))
        .status()
        .expect("skopeo (apt-get install -y skopeo)");
    assert!(status.success(), "skopeo copy {from} {to}");
    started.elapsed()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

struct Setup {
    _registries: (TestRegistry, TestRegistry),
    /// The registry the apps live on, and a second one (the copy baseline's target), each behind a
    /// counting proxy that keeps the Host header (so upload locations route through it too).
    proxy: Proxy,
    other: Proxy,
    pusher: Pusher,
    v1: RunImage,
    /// `runImage.reference` of apps built on v1.
    v1_reference: String,
    /// The new run image, by tag.
    run_v2: String,
}

async fn setup() -> Setup {
    let (a, b) = (TestRegistry::start(), TestRegistry::start());
    let (proxy, other) = (Proxy::start(&a.host).await, Proxy::start(&b.host).await);
    proxy.preserve_host(true);
    other.preserve_host(true);
    let pusher = Pusher::new(&proxy.host);
    let v1 = run_image(1, RUN_LAYER_BYTES);
    let pushed_v1 = app::push_run(&pusher, "run", Some("v1"), &v1, Format::Oci).await;
    // The apps name `run:latest` (as built); the new run image is pushed there.
    app::push_run(&pusher, "run", Some("latest"), &run_image(2, RUN_LAYER_BYTES), Format::Oci).await;
    Setup {
        v1_reference: format!("{}/run@{}", proxy.host, pushed_v1.digest),
        run_v2: format!("{}/run:latest", proxy.host),
        v1,
        _registries: (a, b),
        pusher,
        proxy,
        other,
    }
}

async fn push_apps(setup: &Setup, first: usize, n: usize) -> Vec<String> {
    let mut tags = Vec::new();
    for i in first..first + n {
        let run_name = format!("{}/run:latest", setup.proxy.host);
        let app = app_on(&setup.v1, &run_name, &setup.v1_reference, i as u64, APP_LAYER_BYTES);
        let repo = format!("apps/app-{i:04}");
        app::push_app(&setup.pusher, &repo, Some("latest"), &app, Format::Oci).await;
        tags.push(format!("{}/{repo}:latest", setup.proxy.host));
    }
    tags
}

async fn one_rebase(setup: &Setup) -> Value {
    let tags = push_apps(setup, 0, 1).await;
    let registry = client(&[&setup.proxy.host]);
    setup.proxy.clear();
    let started = Instant::now();
    let report = rebase(
        &registry,
        &RebaseRequest {
            image: image(&tags[0]),
            run_image: image(&setup.run_v2),
            force: false,
            dry_run: false,
            known_run_images: Vec::new(),
            sign: None,
        },
        &Unguarded,
    )
    .await
    .expect("the rebase");
    let wall = started.elapsed();
    let ours = traffic(&[&setup.proxy]);
    say(format!("one rebase: {:.1} ms, {ours}", wall.as_secs_f64() * 1e3));

    setup.proxy.clear();
    setup.other.clear();
    let copy = skopeo_copy(&tags[0], &format!("{}/copies/one:latest", setup.other.host));
    let theirs = traffic(&[&setup.proxy, &setup.other]);
    say(format!("skopeo copy: {:.1} ms, {theirs}", copy.as_secs_f64() * 1e3));
    json!({
        "layers": RUN_LAYERS + APP_LAYERS,
        "app_bytes": RUN_LAYERS * RUN_LAYER_BYTES + APP_LAYERS * APP_LAYER_BYTES,
        "rebase": { "seconds": wall.as_secs_f64(), "traffic": ours, "report": serde_json::to_value(&report).unwrap() },
        "skopeo_copy": { "seconds": copy.as_secs_f64(), "traffic": theirs },
    })
}

async fn many_rebases(setup: &Setup, n: usize) -> Value {
    let tags = push_apps(setup, 1, n).await;
    let registry = Arc::new(client(&[&setup.proxy.host]));
    // One at a time: wall time per app.
    let half = n / 2;
    let mut per_app = Vec::new();
    setup.proxy.clear();
    for tag in &tags[..half] {
        let started = Instant::now();
        rebase(
            &registry,
            &RebaseRequest {
                image: image(tag),
                run_image: image(&setup.run_v2),
                force: false,
                dry_run: false,
                known_run_images: Vec::new(),
                sign: None,
            },
            &Unguarded,
        )
        .await
        .expect("a rebase");
        per_app.push(started.elapsed().as_secs_f64());
    }
    let sequential_traffic = traffic(&[&setup.proxy]);
    // The other half, CONCURRENCY at a time: apps per second.
    setup.proxy.clear();
    let started = Instant::now();
    let semaphore = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for tag in &tags[half..] {
        let (registry, semaphore) = (registry.clone(), semaphore.clone());
        let request = RebaseRequest {
            image: image(tag),
            run_image: image(&setup.run_v2),
            force: false,
            dry_run: false,
            known_run_images: Vec::new(),
            sign: None,
        };
        tasks.spawn(async move {
            let _permit = semaphore.acquire().await.unwrap();
            rebase(&registry, &request, &Unguarded).await.expect("a rebase");
        });
    }
    while tasks.join_next().await.is_some() {}
    let parallel = started.elapsed().as_secs_f64();
    let parallel_traffic = traffic(&[&setup.proxy]);
    let apps_per_second = (n - half) as f64 / parallel;
    let mut copies = Vec::new();
    for (i, tag) in tags.iter().take(SKOPEO_SAMPLES).enumerate() {
        copies.push(skopeo_copy(tag, &format!("{}/copies/many-{i:04}:latest", setup.other.host)).as_secs_f64());
    }
    say(format!(
        "{n} apps: median {:.1} ms per rebase one at a time, {apps_per_second:.1} apps/s at C={CONCURRENCY}; skopeo copy median {:.0} ms",
        median(per_app.clone()) * 1e3,
        median(copies.clone()) * 1e3
    ));
    json!({
        "apps": n,
        "sequential": { "apps": half, "median_seconds": median(per_app.clone()), "seconds": per_app, "traffic": sequential_traffic },
        "parallel": { "apps": n - half, "concurrency": CONCURRENCY, "seconds": parallel, "apps_per_second": apps_per_second, "traffic": parallel_traffic },
        "skopeo_copy": { "apps": copies.len(), "median_seconds": median(copies.clone()), "seconds": copies },
    })
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let mut report = serde_json::Map::new();
    if selected("1") || selected("2") {
        say("setting up two registries");
        let setup = setup().await;
        if selected("1") {
            report.insert("one".into(), one_rebase(&setup).await);
        }
        if selected("2") {
            let n = env_number("BENCH_APPS", 100);
            report.insert("many".into(), many_rebases(&setup, n).await);
        }
    }
    if selected("3") {
        let n = env_number("BENCH_FLEET", 1000);
        let shared = env_number("BENCH_SHARED_REPO", 0) != 0;
        // `BENCH_SIGN=both`: the same fleet patched unsigned, then signed, each on fresh registries.
        let sign = std::env::var("BENCH_SIGN").unwrap_or_default();
        let both = sign.trim() == "both";
        let signing = !both && env_number("BENCH_SIGN", 0) != 0;
        let fleet = fleet_patch(n, shared, signing).await;
        if both {
            let signed = fleet_patch(n, shared, true).await;
            let ratio = signed["seconds"].as_f64().unwrap_or(f64::NAN) / fleet["seconds"].as_f64().unwrap_or(f64::NAN);
            say(format!("fleet: signed / unsigned = {ratio:.2}"));
            report.insert("fleet_signed".into(), signed);
            report.insert("signed_over_unsigned".into(), json!(ratio));
        }
        report.insert("fleet".into(), fleet);
    }
    if selected("4") {
        let sizes = std::env::var("BENCH_CLAIMS").unwrap_or_else(|_| "1000,10000".into());
        let mut runs = Vec::new();
        for n in sizes.split(',').filter_map(|n| n.trim().parse::<usize>().ok()) {
            say(format!("claims: {n} actions"));
            runs.push(claims::claims(n).await);
        }
        report.insert("claims".into(), Value::Array(runs));
    }
    write_report(Value::Object(report));
}

fn write_report(report: Value) {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"))
        .join("bench");
    std::fs::create_dir_all(&dir).expect("create the report directory");
    std::fs::write(dir.join("rebase.json"), serde_json::to_string_pretty(&report).unwrap()).expect("write rebase.json");
    let markdown = render::render(&report);
    std::fs::write(dir.join("rebase.md"), &markdown).expect("write rebase.md");
    println!("{markdown}");
}

/// A loopback port free now: the registry's hook URL names the daemon's port before it starts (the
/// benchmark runs one thing at a time, so nothing races for it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// utime + stime of process `pid`, in seconds (`/proc/PID/stat`; the kernel's clock ticks are 100 a
/// second on Linux, as `getconf CLK_TCK` says here).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    Some((fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?) / 100.0)
}

/// What a request of the daemon's was, by its method and path: which manifest (a tag, a digest, a
/// signature's tag, a referrers tag), which blob request (a read, a check, a mount, an upload's
/// start and end), or the referrers API.
fn request_kind(method: &str, path: &str) -> &'static str {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let reference = path.rsplit_once("/manifests/").map(|(_, r)| r);
    match (method, reference) {
        (_, Some(r)) if r.ends_with(".sig") => match method {
            "GET" => "GET manifest .sig",
            "PUT" => "PUT manifest .sig",
            _ => "other manifest .sig",
        },
        (_, Some(r)) if r.ends_with(".att") => match method {
            "GET" => "GET manifest .att",
            "PUT" => "PUT manifest .att",
            _ => "other manifest .att",
        },
        (_, Some(r)) if r.starts_with("sha256-") => match method {
            "GET" => "GET referrers tag index",
            "PUT" => "PUT referrers tag index",
            _ => "other referrers tag index",
        },
        (_, Some(r)) if r.starts_with("sha256:") => match method {
            "GET" => "GET manifest by digest",
            "HEAD" => "HEAD manifest by digest",
            "PUT" => "PUT manifest by digest",
            _ => "other manifest by digest",
        },
        (_, Some(_)) => match method {
            "GET" => "GET manifest by tag",
            "HEAD" => "HEAD manifest by tag",
            "PUT" => "PUT manifest by tag",
            _ => "other manifest by tag",
        },
        _ if path.contains("/referrers/") => "GET referrers API",
        ("POST", _) if path.ends_with("/blobs/uploads/") && query.contains("mount=") => "POST blob mount",
        ("POST", _) if path.ends_with("/blobs/uploads/") && query.contains("digest=") => "POST monolithic upload",
        ("POST", _) if path.ends_with("/blobs/uploads/") => "POST upload start",
        ("PUT", _) if path.contains("/blobs/uploads/") => "PUT upload end",
        ("PATCH", _) if path.contains("/blobs/uploads/") => "PATCH upload",
        ("GET", _) if path.contains("/blobs/") => "GET blob",
        ("HEAD", _) if path.contains("/blobs/") => "HEAD blob",
        _ => "other",
    }
}

/// Where app `i` of the fleet lives: its own repository, or a tag of the one shared repository.
fn fleet_app(i: usize, shared: bool) -> (String, String) {
    if shared { ("fleet/apps".into(), format!("app-{i:04}")) } else { (format!("fleet/app-{i:04}"), "latest".into()) }
}

/// The fleet patch: `n` apps on one run image, the real daemon with `rebase = "registry"` and the
/// registry's push hook; a new run image is pushed; time until the last app tag is rebased.
async fn fleet_patch(n: usize, shared: bool, signing: bool) -> Value {
    let port = free_port();
    let registry = TestRegistry::start_notifying(&format!("http://127.0.0.1:{port}/hooks/distribution"), API_TOKEN);
    // Everything goes through the counting proxy, which keeps the Host header, so the registry's
    // upload locations and notifications name the proxy, as they would name a load balancer.
    let proxy = Proxy::start(&registry.host).await;
    proxy.preserve_host(true);
    let host = proxy.host.clone();
    let pusher = Pusher::new(&host);
    // Small layers: the fleet measures the daemon's work per app, not layer transfer.
    let v1 = run_image(1, 4 << 10);
    let mut v2 = run_image(2, 4 << 10);
    let changed = env_number("BENCH_RUN_CHANGED", RUN_LAYERS);
    assert!((1..=RUN_LAYERS).contains(&changed), "BENCH_RUN_CHANGED={changed}: between 1 and {RUN_LAYERS}");
    // The lower layers kept: a run image update usually changes its top layers only.
    v2.layers[..RUN_LAYERS - changed].clone_from_slice(&v1.layers[..RUN_LAYERS - changed]);
    let run_name = format!("{host}/run:latest");
    let pushed_v1 = app::push_run(&pusher, "run", Some("latest"), &v1, Format::Oci).await;
    let v1_ref = format!("{host}/run@{}", pushed_v1.digest);
    pusher.push_image("builder", Some("latest"), &BuilderSpec::jammy(&run_name).image(), Format::Oci).await;
    // The apps are written into the registry's storage, not pushed: 10,000 pushes would take half
    // an hour, and what is measured starts at the new run image's push. Each app differs from the
    // template only in its app layer (one gzip each, not thirteen).
    say(format!("fleet: seeding {n} apps into the registry's storage (shared repository: {shared})"));
    let seeding = Instant::now();
    let template = app_on(&v1, &run_name, &v1_ref, 0, 4 << 10);
    let registry = Arc::new(registry);
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
    let seeders: Vec<_> = (0..threads)
        .map(|t| {
            let (registry, template) = (registry.clone(), template.clone());
            tokio::task::spawn_blocking(move || {
                for i in (t..n).step_by(threads) {
                    let mut app = template.clone();
                    app.layers[2] = sized_layer("workspace/app.bin", 1_000_000 + i as u64, 4 << 10);
                    let (repo, tag) = fleet_app(i, shared);
                    let layers: Vec<&Layer> = app.run.layers.iter().chain(&app.layers).collect();
                    let built = app::build(&repo, &layers, &app.config(), Format::Oci);
                    registry.seed(&repo, &tag, &built.blobs, &built.manifest);
                }
            })
        })
        .collect();
    for seeder in seeders {
        seeder.await.expect("seeding");
    }
    say(format!("fleet: {n} apps seeded in {:.1} s", seeding.elapsed().as_secs_f64()));

    let ws = Workspace::new();
    // The registry's and the runner's defaults, as a new user has them (BENCH_DEFAULTS=0: tuned).
    let defaults = env_number("BENCH_DEFAULTS", 1) != 0;
    let tuning = if defaults { String::new() } else { format!("[registries.\"{host}\"]\nrequests_per_second = 0\n\n") };
    let concurrency = if defaults { String::new() } else { format!("max_registry_rebases = {CONCURRENCY}\n") };
    let mut text = format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n[server]\nlisten = \"127.0.0.1:{port}\"\napi_token_env = \"BENCH_API_TOKEN\"\n\n\
         {tuning}[runner]\ntype = \"none\"\nrebase = \"registry\"\n{concurrency}\n\
         [[builders]]\nname = \"b\"\nimage = \"{host}/builder:latest\"\n\n"
    );
    for i in 0..n {
        let (repo, tag) = fleet_app(i, shared);
        let _ = writeln!(
            text,
            "[[images]]\nname = \"app-{i:04}\"\nbuilder = \"b\"\nimage = \"{host}/{repo}:{tag}\"\npolicy = \"auto\"\n"
        );
    }
    if signing {
        let key = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/signing/cosign-n32768.key");
        let _ = writeln!(text, "[signing]\nkey = \"{}\"\npassword_env = \"BENCH_SIGNING_PASSWORD\"\n", key.display());
    }
    let config = ws.config(&text);
    let mut env = vec![
        ("BENCH_API_TOKEN".to_string(), API_TOKEN.to_string()),
        ("BENCH_SIGNING_PASSWORD".to_string(), "fixture password".to_string()),
    ];
    // Diagnostics: BENCH_HEAPTRACK=DIR records the daemon's allocations with heaptrack's preload
    // library (a raw file: `heaptrack_interpret < F | gzip > F.gz`, then `heaptrack_print`).
    if let Ok(dir) = std::env::var("BENCH_HEAPTRACK") {
        env.push(("LD_PRELOAD".into(), "/usr/lib/heaptrack/libheaptrack_preload.so".into()));
        env.push(("DUMP_HEAPTRACK_OUTPUT".into(), format!("{dir}/fleet-daemon.raw")));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut daemon = Daemon::start_with_env(&config, &env);
    // Pinned: the builder, then its run image (whose first check records no event).
    tokio::task::block_in_place(|| {
        daemon.wait_for_event("builder.pinned");
        daemon.wait_for("the run image's first check", |v| {
            v["message"] == "check done" && v["watch"].as_str().is_some_and(|w| w.starts_with("run:"))
        });
    });
    // The run image and the builder were pushed before the daemon listened: Distribution's
    // notification sink failed to deliver their events and retries them after its backoff (1 s),
    // holding every later event, and once delivered each starts a hook chain (a check at once,
    // again after 250 ms and 1 s) during which a new push's hook waits for the chain's next check.
    // Measured as a daemon that was up sees a push: from a healthy sink, with both chains ended
    // (each watch's last follow-up checked).
    let followed_up = [std::cell::Cell::new(false), std::cell::Cell::new(false)];
    let ended = [std::cell::Cell::new(false), std::cell::Cell::new(false)];
    tokio::task::block_in_place(|| {
        daemon.wait_for("the hook chains of the pushes before the start", |v| {
            let watch = v["watch"].as_str().unwrap_or_default();
            let i = usize::from(watch != "b");
            let last = builder_monitor::monitor::HOOK_FOLLOW_UPS.last().map(|d| d.as_millis() as u64);
            if v["message"].as_str().is_some_and(|m| m.starts_with("checking again after a push hook"))
                && v["after_ms"].as_u64() == last
            {
                followed_up[i].set(true);
            }
            if v["message"] == "check done" && followed_up[i].get() {
                ended[i].set(true);
            }
            ended.iter().all(std::cell::Cell::get)
        });
    });
    say("fleet: daemon ready; pushing the new run image");
    proxy.clear();
    let pushed_v2 = app::push_run(&pusher, "run", Some("latest"), &v2, Format::Oci).await;
    let pushed = Instant::now();
    // The registry's and the daemon's CPU from the push on (the push's own share is small: 8 layers).
    let (registry_cpu0, daemon_cpu0) = (cpu_seconds(registry.pid()), cpu_seconds(daemon.pid()));
    let push_requests = proxy.seen().len();
    let (mut first, mut p90) = (None, None);
    // Failed attempts (each retried after the action's backoff) and manifest PUTs tried again
    // within an attempt, as the daemon logs them.
    let (failed, again) = (std::cell::Cell::new(0usize), std::cell::Cell::new(0usize));
    for done in 0..n {
        tokio::task::block_in_place(|| {
            daemon.wait_for("a rebase", |v| {
                let message = v["message"].as_str().unwrap_or_default();
                if message.starts_with("action failed") {
                    failed.set(failed.get() + 1);
                }
                if message.ends_with("trying again") {
                    again.set(again.get() + 1);
                }
                message == "action succeeded" && v["kind"] == "rebase"
            })
        });
        if done == 0 {
            first = Some(pushed.elapsed());
        }
        if done + 1 == (n * 9).div_ceil(10) {
            p90 = Some(pushed.elapsed());
        }
    }
    let seconds = pushed.elapsed().as_secs_f64();
    let per_app_ms = |before: Option<f64>, after: Option<f64>| Some((after? - before?) * 1000.0 / n.max(1) as f64);
    let registry_cpu_ms = per_app_ms(registry_cpu0, cpu_seconds(registry.pid()));
    let daemon_cpu_ms = per_app_ms(daemon_cpu0, cpu_seconds(daemon.pid()));
    // The daemon's traffic: all of it after the push, less the push itself.
    let seen = proxy.seen();
    let (mut by_method, mut sent, mut received) = (std::collections::BTreeMap::<String, usize>::new(), 0u64, 0u64);
    // By kind: how many per app, and the registry's answering time they took (summed over the
    // requests, which overlap: a share, not a wall time).
    let mut by_kind = std::collections::BTreeMap::<&'static str, (usize, Duration)>::new();
    for s in &seen[push_requests..] {
        *by_method.entry(s.method.clone()).or_default() += 1;
        let kind = by_kind.entry(request_kind(&s.method, &s.path)).or_default();
        kind.0 += 1;
        kind.1 += s.took;
        sent += s.sent as u64;
        received += s.received as u64;
    }
    // Every app tag now points at an image on the new run image.
    let registry_client = client(&[&host]);
    let mut rebased = 0;
    for i in 0..n {
        let (repo, tag) = fleet_app(i, shared);
        let tag = image(&format!("{host}/{repo}:{tag}"));
        let head = registry_client.head_manifest(&tag).await.expect("HEAD an app");
        let manifest = registry_client.get_manifest(&tag, &head.digest).await.expect("GET an app");
        let doc: Value = serde_json::from_slice(&manifest.bytes).expect("a manifest");
        let base = doc["layers"][RUN_LAYERS - 1]["digest"].as_str().unwrap_or_default().to_string();
        if base == v2.layers[RUN_LAYERS - 1].digest {
            rebased += 1;
        }
    }
    // The daemon's peak resident memory over its whole life (start-up, pins and the patch).
    let peak_rss_kib = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).ok().and_then(|s| {
        s.lines().find_map(|l| l.strip_prefix("VmHWM:")?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
    });
    let (_, log) = tokio::task::block_in_place(|| daemon.terminate());
    // Diagnostics: BENCH_DAEMON_LOG=FILE keeps the daemon's log (JSON lines, timestamped).
    if let Ok(path) = std::env::var("BENCH_DAEMON_LOG") {
        std::fs::write(&path, log.join("\n")).expect("write BENCH_DAEMON_LOG");
    }
    let requests: usize = by_method.values().sum();
    let per_app = requests as f64 / n.max(1) as f64;
    let by_kind: serde_json::Map<String, Value> = by_kind
        .iter()
        .map(|(kind, (count, took))| {
            let per = |x: f64| x / n.max(1) as f64;
            let value = json!({ "requests": count, "per_app": per(*count as f64), "registry_ms_per_app": per(took.as_secs_f64() * 1e3), "mean_ms": took.as_secs_f64() * 1e3 / (*count).max(1) as f64 });
            (kind.to_string(), value)
        })
        .collect();
    say(format!("fleet requests by kind: {}", serde_json::to_string(&by_kind).unwrap_or_default()));
    let (failed, again) = (failed.get(), again.get());
    say(format!(
        "fleet{}{}, {changed} of {RUN_LAYERS} run image layers changed: {rebased}/{n} rebased {seconds:.1} s after the push (first after {:.2} s, 90 % after {:.1} s); {failed} failed attempts, {again} manifest PUTs tried again within an attempt; {requests} requests ({per_app:.1} per app, {by_method:?}), {sent} B sent, {received} B received; CPU per app: registry {} ms, daemon {} ms; peak RSS {} KiB",
        if signing { " (signed and attested)" } else { "" },
        if defaults { " (default config)" } else { " (requests_per_second = 0, max_registry_rebases = 16)" },
        first.map_or(f64::NAN, |f| f.as_secs_f64()),
        p90.map_or(f64::NAN, |f| f.as_secs_f64()),
        registry_cpu_ms.map_or("?".to_string(), |m| format!("{m:.1}")),
        daemon_cpu_ms.map_or("?".to_string(), |m| format!("{m:.1}")),
        peak_rss_kib.map_or("?".to_string(), |k| k.to_string())
    ));
    let _ = pushed_v2;
    json!({
        "apps": n, "shared_repository": shared, "signing": signing, "defaults": defaults, "rebased": rebased, "seconds": seconds,
        "run_layers_changed": changed,
        "first_seconds": first.map(|f| f.as_secs_f64()),
        "p90_seconds": p90.map(|f| f.as_secs_f64()),
        "failed_attempts": failed, "tried_again_within_attempts": again,
        "traffic": { "requests": requests, "requests_per_app": per_app, "by_method": by_method, "by_kind": by_kind, "bytes_sent": sent, "bytes_received": received },
        "peak_rss_kib": peak_rss_kib,
        "cpu_ms_per_app": { "registry": registry_cpu_ms, "daemon": daemon_cpu_ms },
        "concurrency": if defaults { None } else { Some(CONCURRENCY) },
    })
}
