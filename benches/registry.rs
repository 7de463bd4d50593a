//! The registry benchmark (docs/performance.md): `cargo bench --bench registry`.
//!
//! Starts the real CNCF Distribution registry on loopback, pushes builder-like images (multi-arch
//! OCI indexes and single Docker manifests with CNB labels) and tags them up to 10,000 times, then
//! measures in one run:
//!
//! 1. requests per unchanged check (counting proxy), anonymous and with bearer tokens;
//! 2. checks per second at concurrency 16, rate limits off, against the registry's own HEAD
//!    ceiling (ApacheBench `ab -i -k`, wrk where it can time HEAD) and `skopeo inspect`: in
//!    process, in the `builder-monitor run` daemon (start-up excluded) and by `run --once`
//!    (start-up included);
//! 3. change-to-event latency of the real daemon, polling every second and with the push hook;
//! 4. peak RSS and CPU of `builder-monitor run` at 100, 1,000 and 10,000 tags, and a soak;
//! 5. start-up time to the first check and to every builder checked, with the whole fleet (10,000
//!    builders by default), cold, warm, and warm under a rate limit;
//! 6. requests per new run image digest: what reading its OS package lists adds, per kind of image.
//!
//! Items 1 and 2 (but its daemon rates) drive the library in process (`Monitor::check_builder`, the function the daemon's
//! schedule calls for every check); items 3 to 5 run the daemon binary. Results go to
//! `$CARGO_TARGET_DIR/bench/registry.{md,json}` (`./target` without the variable).
//!
//! Environment: `BENCH_SOAK_SECS` (default 1800, the 30 minutes of issue 19), `BENCH_WINDOW_SECS` (throughput windows, default
//! 15), `BENCH_SIZES` (default `100,1000,10000`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use builder_monitor::config::{Config, StateLocation};
use builder_monitor::daemon::Parts;
use builder_monitor::ledger::Ledger;
use builder_monitor::metrics::Metrics;
use builder_monitor::monitor::{CheckOutcome, Monitor};
use builder_monitor::registry::MANIFEST_ACCEPT;
use builder_monitor::schedule::Clock;
use bytes::Bytes;
use serde_json::{Value, json};
use support::cnb::BuilderSpec;
use support::daemon::BINARY;
use support::images::{Format, Pusher, sha256};
use support::proxy::Proxy;
use support::registry::{Auth, TestRegistry};
use support::token::TokenServer;

/// Repositories the tags are spread over (one bearer scope each).
const REPOS: usize = 10;
/// Concurrency of the check loop, wrk and ab.
const CONCURRENCY: usize = 16;
/// Tags of the requests-per-check and throughput measurements, and of the start-up and soak runs.
const FLEET: usize = 1_000;
/// Lifetime of the bearer tokens the benchmark's token server issues (`expires_in`).
const TOKEN_LIFETIME: u64 = 10;
/// Checks of the bearer steady state span this many token lifetimes.
const TOKEN_LIFETIMES: u64 = 3;
/// Tags `skopeo inspect` is timed on.
const SKOPEO_SAMPLES: usize = 30;
/// Pushes per latency measurement.
const LATENCY_SAMPLES: usize = 10;
/// Steady check cycles of each memory run after the first (pinning) one.
const MEMORY_CYCLES: u64 = 3;
/// Interval and jitter of the memory runs: each tag is checked every 10 to 20 s.
const MEMORY_INTERVAL: u64 = 10;
const MEMORY_JITTER: u64 = 10;
/// Interval and jitter of the soak: each tag every 5 to 10 s.
const SOAK_INTERVAL: u64 = 5;
const SOAK_JITTER: u64 = 5;
const API_TOKEN: &str = "bench-api-token-0123456789";
const USER: &str = "testuser";
const PASSWORD: &str = "testpass";
const MIB: f64 = 1024.0;

static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn say(message: impl std::fmt::Display) {
    let t = STARTED.get_or_init(Instant::now).elapsed().as_secs_f64();
    eprintln!("[bench {t:7.1}s] {message}");
}

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| panic!("{name}={text:?} is not a whole number")),
        Err(_) => default,
    }
}

fn sizes() -> Vec<usize> {
    match std::env::var("BENCH_SIZES") {
        Ok(text) => text.split(',').map(|s| s.trim().parse().expect("BENCH_SIZES: numbers, comma-separated")).collect(),
        Err(_) => vec![100, 1_000, 10_000],
    }
}

fn main() {
    STARTED.get_or_init(Instant::now);
    builder_monitor::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(run());
}

// ---------------------------------------------------------------------------------------------
// Tags and the registries holding them.

fn repo_name(r: usize) -> String {
    format!("bench/builder-{r}")
}

/// Tag `i` of the fleet: repository `i % REPOS`; every other row of ten is an index.
fn tag_of(i: usize) -> (String, String) {
    (repo_name(i % REPOS), format!("t{:05}", i / REPOS))
}

fn is_index_tag(i: usize) -> bool {
    (i / REPOS).is_multiple_of(2)
}

/// A registry holding `tags` builder tags.
struct Fleet {
    registry: TestRegistry,
    pid: Option<u32>,
    host: String,
    index_digests: Vec<String>,
    single_digests: Vec<String>,
    tags: usize,
}

impl Fleet {
    fn digest_of(&self, i: usize) -> &str {
        if is_index_tag(i) { &self.index_digests[i % REPOS] } else { &self.single_digests[i % REPOS] }
    }
}

/// How the benchmark itself writes to a registry.
#[derive(Clone)]
enum Access {
    Anonymous,
    /// Token auth: push tokens come from this realm with basic credentials.
    Bearer {
        realm: String,
    },
}

/// Process ids of the `docker-registry` children of this process.
fn registry_children() -> BTreeSet<u32> {
    let me = std::process::id();
    let mut pids = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return pids };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let comm = &stat[open + 1..close];
        let ppid = stat[close + 1..].split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok());
        if comm == "docker-registry" && ppid == Some(me) {
            pids.insert(pid);
        }
    }
    pids
}

/// Starts a registry and returns it with its process id.
fn start_registry(start: impl FnOnce() -> TestRegistry) -> (TestRegistry, Option<u32>) {
    let before = registry_children();
    let registry = start();
    let pid = registry_children().difference(&before).next().copied();
    (registry, pid)
}

fn builder_images(run: &str, version: usize) -> Vec<support::images::Image> {
    let jammy = BuilderSpec::jammy(run).bump("paketo-buildpacks/java", &format!("18.1.{version}"));
    vec![jammy.clone().image(), jammy.arch("arm64").image()]
}

async fn push_token(http: &reqwest::Client, realm: &str, repo: &str) -> String {
    let url = format!("{realm}?service=test-registry&scope=repository:{repo}:pull,push");
    let response = http.get(url).basic_auth(USER, Some(PASSWORD)).send().await.expect("token request");
    let body = response.bytes().await.expect("token body");
    let value: Value = serde_json::from_slice(&body).expect("token JSON");
    value["token"].as_str().expect("token in answer").to_string()
}

async fn get_manifest(
    http: &reqwest::Client,
    host: &str,
    repo: &str,
    tag: &str,
    token: Option<&str>,
) -> (Bytes, String) {
    let mut request = http.get(format!("http://{host}/v2/{repo}/manifests/{tag}")).header("accept", MANIFEST_ACCEPT);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("GET manifest");
    assert!(response.status().is_success(), "GET {repo}:{tag}: HTTP {}", response.status());
    let media_type = response.headers()["content-type"].to_str().unwrap().to_string();
    (response.bytes().await.expect("manifest body"), media_type)
}

/// Pushes the images once per repository, then tags them `tags` times with plain manifest PUTs.
async fn populate(registry: TestRegistry, pid: Option<u32>, access: Access, tags: usize) -> Fleet {
    let host = registry.host.clone();
    let pusher = match access {
        Access::Anonymous => Pusher::new(&host),
        Access::Bearer { .. } => Pusher::with_basic(&host, USER, PASSWORD),
    };
    let run = format!("{host}/bench/run:latest");
    pusher
        .push_image("bench/run", Some("latest"), &support::images::Image::new("amd64").salt("run"), Format::Oci)
        .await;
    let http = support::http();
    let (mut index_digests, mut single_digests) = (Vec::new(), Vec::new());
    let started = Instant::now();
    for r in 0..REPOS {
        let repo = repo_name(r);
        let mut jammy = BuilderSpec::jammy(&run);
        jammy.description = format!("benchmark builder {r}: jammy-like, linux/amd64 + linux/arm64");
        let platforms = [jammy.clone().image(), jammy.arch("arm64").image()];
        let (index, _) = pusher.push_index(&repo, "index", &platforms, Format::Oci).await;
        let mut heroku = BuilderSpec::heroku(&run);
        heroku.run_mirrors.clear();
        heroku.description = format!("benchmark builder {r}: heroku-like, one Docker manifest");
        let single = pusher.push_image(&repo, Some("single"), &heroku.image(), Format::Docker).await;
        let token = match &access {
            Access::Anonymous => None,
            Access::Bearer { realm } => Some(push_token(&http, realm, &repo).await),
        };
        let index_manifest = get_manifest(&http, &host, &repo, "index", token.as_deref()).await;
        let single_manifest = get_manifest(&http, &host, &repo, "single", token.as_deref()).await;
        assert_eq!(sha256(&index_manifest.0), index.digest);
        assert_eq!(sha256(&single_manifest.0), single.digest);
        let rows: Arc<Vec<usize>> = Arc::new((r..tags).step_by(REPOS).collect());
        let next = Arc::new(AtomicUsize::new(0));
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..CONCURRENCY {
            let (rows, next, http, host, repo, token) =
                (rows.clone(), next.clone(), http.clone(), host.clone(), repo.clone(), token.clone());
            let (index_manifest, single_manifest) = (index_manifest.clone(), single_manifest.clone());
            workers.spawn(async move {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&i) = rows.get(k) else { break };
                    let (bytes, media_type) = if is_index_tag(i) { &index_manifest } else { &single_manifest };
                    let (_, tag) = tag_of(i);
                    let mut request = http
                        .put(format!("http://{host}/v2/{repo}/manifests/{tag}"))
                        .header("content-type", media_type.as_str())
                        .body(bytes.clone());
                    if let Some(token) = &token {
                        request = request.bearer_auth(token);
                    }
                    let status = request.send().await.expect("PUT manifest").status();
                    assert_eq!(status.as_u16(), 201, "PUT {repo}:{tag}");
                }
            });
        }
        while let Some(done) = workers.join_next().await {
            done.expect("tagging worker");
        }
        index_digests.push(index.digest);
        single_digests.push(single.digest);
    }
    say(format!("{host}: {tags} tags over {REPOS} repositories in {:.1}s", started.elapsed().as_secs_f64()));
    Fleet { registry, pid, host, index_digests, single_digests, tags }
}

/// A daemon configuration watching the first `n` tags of `host` (rate limit off, no run image
/// watches). `upstream`: the registry behind a proxy, which the builders' run image names.
fn config_text(host: &str, upstream: &str, n: usize, interval: &str, jitter: &str, server: &str) -> String {
    let mut text = format!("[monitor]\nstate = \"state.db\"\ninterval = \"{interval}\"\njitter = \"{jitter}\"\n\n");
    if !server.is_empty() {
        let _ = writeln!(text, "[server]\n{server}\n");
    }
    for h in BTreeSet::from([host, upstream]) {
        let _ = writeln!(text, "[registries.\"{h}\"]\nrequests_per_second = 0\n");
    }
    for i in 0..n {
        let (repo, tag) = tag_of(i);
        let _ = writeln!(
            text,
            "[[builders]]\nname = \"b{i:05}\"\nimage = \"{host}/{repo}:{tag}\"\nwatch_run_image = false\n"
        );
    }
    text
}

// ---------------------------------------------------------------------------------------------
// /proc readings.

fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / clock_ticks())
}

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: &str, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))?;
    line[key.len() + 1..].split_whitespace().next()?.parse().ok()
}

fn open_fds(pid: &str) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    /// Seconds since the process started.
    t: f64,
    rss_kib: u64,
    cpu: f64,
    fds: usize,
    threads: u64,
}

/// Samples a process's RSS, CPU and open descriptors on a thread until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Sample>>,
}

impl Sampler {
    fn start(pid: u32, since: Instant, period: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let pid = pid.to_string();
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                if let (Some(rss_kib), Some(cpu)) = (status_kib(&pid, "VmRSS"), cpu_seconds(&pid)) {
                    let fds = open_fds(&pid).unwrap_or(0);
                    let threads = status_kib(&pid, "Threads").unwrap_or(0);
                    samples.push(Sample { t: since.elapsed().as_secs_f64(), rss_kib, cpu, fds, threads });
                }
                std::thread::sleep(period);
            }
            samples
        });
        Sampler { stop, thread }
    }

    fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Runs a command to completion with stdout and stderr in files, sampling its CPU time.
fn run_tool(command: &mut Command, dir: &Path, name: &str) -> Option<(String, f64, Duration)> {
    let stdout = std::fs::File::create(dir.join(format!("{name}.out"))).ok()?;
    let stderr = std::fs::File::create(dir.join(format!("{name}.err"))).ok()?;
    let started = Instant::now();
    let mut child = match command.stdout(stdout).stderr(stderr).spawn() {
        Ok(child) => child,
        Err(err) => {
            say(format!("{name}: cannot run: {err}"));
            return None;
        }
    };
    let pid = child.id().to_string();
    let mut cpu = 0.0;
    loop {
        if let Some(c) = cpu_seconds(&pid) {
            cpu = c;
        }
        if child.try_wait().ok()?.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = started.elapsed();
    Some((std::fs::read_to_string(dir.join(format!("{name}.out"))).unwrap_or_default(), cpu, elapsed))
}

fn tool_version(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    text.lines().next().map(|l| l.trim().to_string()).filter(|l| !l.is_empty())
}

/// Sum of every sample of one metric family in an OpenMetrics exposition.
fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

// ---------------------------------------------------------------------------------------------
// In-process check loop (items 1 and 2).

struct InProcess {
    monitor: Arc<Monitor>,
    metrics: Arc<Metrics>,
    names: Arc<Vec<String>>,
    _dir: tempfile::TempDir,
}

impl InProcess {
    fn new(host: &str, upstream: &str, n: usize) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let text = config_text(host, upstream, n, "1h", "0s", "");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, &text).expect("write config");
        let config = Arc::new(Config::parse(&path, &text).expect("valid benchmark config"));
        let StateLocation::Sqlite(state) = &config.monitor.state else { unreachable!("the bench config names a file") };
        let ledger = Ledger::open(state).expect("ledger");
        let parts = Parts::new(config.clone(), ledger, Clock::System, None).expect("the daemon's parts");
        let (monitor, metrics) = (parts.monitor, parts.metrics);
        let names = Arc::new(config.builders.iter().map(|b| b.name.clone()).collect());
        InProcess { monitor, metrics, names, _dir: dir }
    }

    fn metric(&self, name: &str) -> f64 {
        metric_sum(&self.metrics.encode(), name)
    }
}

#[derive(Debug, Clone, Copy)]
enum Limit {
    Cycles(usize),
    For(Duration),
}

#[derive(Debug, Default, Clone, Copy)]
struct Loop {
    unchanged: usize,
    pinned_or_moved: usize,
    failed: usize,
    seconds: f64,
}

impl Loop {
    fn checks(&self) -> usize {
        self.unchanged + self.pinned_or_moved + self.failed
    }
    fn rate(&self) -> f64 {
        self.checks() as f64 / self.seconds
    }
}

/// `CONCURRENCY` workers checking the builders round robin, for a number of cycles or a time.
async fn check_loop(setup: &InProcess, limit: Limit) -> Loop {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let (max, deadline) = match limit {
        Limit::Cycles(c) => (Some(c * setup.names.len()), None),
        Limit::For(d) => (None, Some(started + d)),
    };
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (monitor, names, next) = (setup.monitor.clone(), setup.names.clone(), next.clone());
        workers.spawn(async move {
            let mut counts = Loop::default();
            loop {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if max.is_some_and(|m| i >= m) {
                    break;
                }
                match monitor.check_builder(&names[i % names.len()]).await {
                    Some(Ok(CheckOutcome::Unchanged)) => counts.unchanged += 1,
                    Some(Ok(CheckOutcome::Failed(err))) => {
                        if counts.failed == 0 {
                            say(format!("check failed: {err}"));
                        }
                        counts.failed += 1;
                    }
                    Some(Ok(_)) => counts.pinned_or_moved += 1,
                    Some(Err(_)) | None => counts.failed += 1,
                }
            }
            counts
        });
    }
    let mut total = Loop::default();
    while let Some(done) = workers.join_next().await {
        let c = done.expect("check worker");
        total.unchanged += c.unchanged;
        total.pinned_or_moved += c.pinned_or_moved;
        total.failed += c.failed;
    }
    total.seconds = started.elapsed().as_secs_f64();
    total
}

/// The `scope` of a token request path (`/token?service=…&scope=…`).
fn token_scope(path: &str) -> String {
    reqwest::Url::parse(&format!("http://x{path}"))
        .ok()
        .and_then(|u| u.query_pairs().find(|(k, _)| k == "scope").map(|(_, v)| v.into_owned()))
        .unwrap_or_default()
}

/// Item 1: requests per unchanged check, counted at a proxy in front of the registry; with bearer
/// auth, token fetches are counted (and timed, per scope) at a second proxy in front of the token
/// server.
async fn requests_per_check(host: &str, tokens: Option<&Proxy>, window: Duration) -> Value {
    let proxy = Proxy::start(host).await;
    let setup = InProcess::new(&proxy.host, host, FLEET);
    let fetches = || tokens.map_or(0, |t| t.seen().len());
    let before_pin = fetches();
    let pin_started = Instant::now();
    let pin = check_loop(&setup, Limit::Cycles(1)).await;
    assert_eq!(pin.pinned_or_moved, FLEET, "every tag pinned: {pin:?}");
    let pin_fetches = fetches() - before_pin;
    let pin_requests = proxy.seen().len() + pin_fetches;
    let pin_unauthorized = proxy.seen().iter().filter(|s| s.status == 401).count();
    proxy.clear();
    let (f0, m0, t0) = (
        fetches(),
        setup.metric("builder_monitor_registry_requests_total"),
        setup.metric("builder_monitor_token_fetches_total"),
    );
    let window_start = Instant::now();
    let steady = check_loop(&setup, Limit::For(window)).await;
    let window_end = Instant::now();
    let seen = proxy.seen();
    let token_fetches = fetches() - f0;
    let requests = seen.len() + token_fetches;
    let heads = seen.iter().filter(|s| s.method == "HEAD").count();
    let unauthorized = seen.iter().filter(|s| s.status == 401).count();
    let metric_requests = setup.metric("builder_monitor_registry_requests_total") - m0;
    let metric_fetches = setup.metric("builder_monitor_token_fetches_total") - t0;
    let checks = steady.checks();
    let per_check = requests as f64 / checks as f64;
    say(format!(
        "requests per check ({}): {per_check:.4} over {checks} checks; {token_fetches} token fetches",
        if tokens.is_some() { "bearer" } else { "anonymous" }
    ));
    let mut result = json!({
        "tags": FLEET,
        "checks": checks,
        "failed_checks": steady.failed,
        "seconds": steady.seconds,
        "requests": requests,
        "heads": heads,
        "unauthorized_answers": unauthorized,
        "token_fetches": token_fetches,
        "requests_per_check": per_check,
        "daemon_metrics": { "registry_requests": metric_requests, "token_fetches": metric_fetches,
                            "requests_per_check": metric_requests / checks as f64 },
        "pin": { "checks": pin.checks(), "requests": pin_requests, "requests_per_check": pin_requests as f64 / pin.checks() as f64,
                 "unauthorized_answers": pin_unauthorized, "token_fetches": pin_fetches, "seconds": pin.seconds },
    });
    if let Some(tokens) = tokens {
        // Every token fetch of the daemon, by scope, from the start of pinning.
        let mut by_scope: std::collections::BTreeMap<String, Vec<Instant>> = Default::default();
        for s in tokens.seen().into_iter().filter(|s| s.at >= pin_started) {
            by_scope.entry(token_scope(&s.path)).or_default().push(s.at);
        }
        let pin_end = window_start;
        let at_pin: Vec<usize> = by_scope.values().map(|ts| ts.iter().filter(|t| **t < pin_end).count()).collect();
        // Intervals between consecutive fetches of one scope that end inside the steady window.
        let mut intervals = Vec::new();
        for times in by_scope.values() {
            for pair in times.windows(2) {
                if pair[1] >= window_start && pair[1] <= window_end {
                    intervals.push(pair[1].duration_since(pair[0]).as_secs_f64());
                }
            }
        }
        let mean = (!intervals.is_empty()).then(|| intervals.iter().sum::<f64>() / intervals.len() as f64);
        let min = intervals.iter().copied().min_by(f64::total_cmp);
        result["token_lifetime_seconds"] = json!(TOKEN_LIFETIME);
        result["scopes_at_pin"] = json!(at_pin.len());
        result["token_fetches_per_scope_at_pin"] = json!(pin_fetches as f64 / at_pin.len().max(1) as f64);
        result["max_token_fetches_of_one_scope_at_pin"] = json!(at_pin.iter().max());
        // Pinning can outlast a token: a fetch 90 % of the lifetime after the scope's previous one is
        // the refresh the lifetime calls for; one sooner is a duplicate.
        let refresh = TOKEN_LIFETIME as f64 * 0.9 - 0.05;
        let duplicates: usize = by_scope
            .values()
            .map(|ts| {
                let pinning: Vec<&Instant> = ts.iter().filter(|t| **t < pin_end).collect();
                pinning.windows(2).filter(|p| p[1].duration_since(*p[0]).as_secs_f64() < refresh).count()
            })
            .sum();
        result["duplicate_token_fetches_at_pin"] = json!(duplicates);
        result["token_fetches_per_scope_per_lifetime_at_pin"] =
            json!((at_pin.len() + duplicates) as f64 / at_pin.len().max(1) as f64);
        result["steady_scopes"] = json!(REPOS);
        result["seconds_between_fetches_of_a_scope"] = json!({ "mean": mean, "min": min, "samples": intervals.len() });
        result["token_fetches_per_scope_per_lifetime"] = json!(mean.map(|m| TOKEN_LIFETIME as f64 / m));
    }
    result
}

fn parse_after(text: &str, marker: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.contains(marker))?;
    let rest = &line[line.find(marker)? + marker.len()..];
    rest.split_whitespace().next()?.trim_end_matches(',').parse().ok()
}

/// wrk at `CONCURRENCY` with keep-alive over the fleet's paths; `None` when wrk is missing.
fn wrk(url: &str, paths: &Path, method: &str, seconds: u64, dir: &Path) -> Option<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/head.lua");
    let mut command = Command::new("wrk");
    command
        .args(["-t2", &format!("-c{CONCURRENCY}"), &format!("-d{seconds}s"), "--timeout", "2s", "-s"])
        .arg(&script)
        .arg(url)
        .arg("--")
        .arg(paths)
        .arg(method);
    let (out, cpu, elapsed) = run_tool(&mut command, dir, &format!("wrk-{method}"))?;
    let requests = out
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next()?.parse::<f64>().ok());
    let rate = parse_after(&out, "Requests/sec:");
    let non_2xx = parse_after(&out, "Non-2xx or 3xx responses:").unwrap_or(0.0);
    let timeouts = out
        .lines()
        .find(|l| l.contains("Socket errors:"))
        .and_then(|l| l.rsplit("timeout ").next()?.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    Some(json!({
        "tool": "wrk", "method": method, "requests": requests, "requests_per_second": rate,
        "non_2xx": non_2xx, "timeouts": timeouts, "cpu_seconds": cpu, "seconds": elapsed.as_secs_f64(),
        "command": format!("wrk -t2 -c{CONCURRENCY} -d{seconds}s --timeout 2s -s bench/head.lua {url} -- paths.txt {method}"),
        "output": out,
    }))
}

/// ApacheBench HEAD (`-i`) with keep-alive at `CONCURRENCY` on one tag.
fn ab_head(url: &str, seconds: u64, dir: &Path) -> Option<Value> {
    let mut command = Command::new("ab");
    command.args([
        "-i",
        "-k",
        "-q",
        "-c",
        &CONCURRENCY.to_string(),
        "-t",
        &seconds.to_string(),
        "-n",
        "100000000",
        "-H",
        &format!("Accept: {MANIFEST_ACCEPT}"),
        url,
    ]);
    let (out, cpu, elapsed) = run_tool(&mut command, dir, "ab")?;
    Some(json!({
        "tool": "ab", "method": "HEAD",
        "requests": parse_after(&out, "Complete requests:"),
        "requests_per_second": parse_after(&out, "Requests per second:"),
        "failed": parse_after(&out, "Failed requests:").unwrap_or(0.0),
        "non_2xx": parse_after(&out, "Non-2xx responses:").unwrap_or(0.0),
        "keep_alive_requests": parse_after(&out, "Keep-Alive requests:"),
        "cpu_seconds": cpu, "seconds": elapsed.as_secs_f64(),
        "command": format!("ab -i -k -c {CONCURRENCY} -t {seconds} -n 100000000 -H 'Accept: <the daemon's list>' {url}"),
    }))
}

/// Item 2: checks per second, builder-monitor vs the registry's HEAD ceiling vs skopeo.
async fn throughput(fleet: &Fleet, window: Duration) -> Value {
    let registry_pid = fleet.pid.map(|p| p.to_string());
    let registry_cpu = || registry_pid.as_deref().and_then(cpu_seconds).unwrap_or(0.0);
    let me = std::process::id().to_string();
    let setup = InProcess::new(&fleet.host, &fleet.host, FLEET);
    let pin = check_loop(&setup, Limit::Cycles(1)).await;
    assert_eq!(pin.pinned_or_moved, FLEET, "every tag pinned: {pin:?}");
    check_loop(&setup, Limit::Cycles(1)).await; // warm: connections, ledger pages
    let (cpu0, reg0) = (cpu_seconds(&me).unwrap_or(0.0), registry_cpu());
    let steady = check_loop(&setup, Limit::For(window)).await;
    let (cpu1, reg1) = (cpu_seconds(&me).unwrap_or(0.0), registry_cpu());
    let bm_rate = steady.rate();
    say(format!(
        "builder-monitor: {bm_rate:.0} checks/s at C={CONCURRENCY} ({} checks, {} failed)",
        steady.checks(),
        steady.failed
    ));
    drop(setup);

    let dir = tempfile::tempdir().expect("temp dir");
    let paths = dir.path().join("paths.txt");
    let lines: String = (0..FLEET)
        .map(|i| {
            let (repo, tag) = tag_of(i);
            format!("/v2/{repo}/manifests/{tag}\n")
        })
        .collect();
    std::fs::write(&paths, lines).expect("write paths");
    let base = format!("http://{}/", fleet.host);
    let seconds = window.as_secs().max(1);

    let measure = |tool: &dyn Fn() -> Option<Value>| {
        let before = registry_cpu();
        let mut value = tool();
        if let Some(v) = value.as_mut() {
            v["registry_cpu_seconds"] = json!(registry_cpu() - before);
        }
        value
    };
    let wrk_head = tokio::task::block_in_place(|| measure(&|| wrk(&base, &paths, "HEAD", 3, dir.path())));
    let wrk_head_ok = wrk_head
        .as_ref()
        .is_some_and(|v| v["requests"].as_f64().unwrap_or(0.0) > 0.0 && v["timeouts"].as_f64() == Some(0.0));
    let (tag_repo, tag) = tag_of(0);
    let ab_url = format!("http://{}/v2/{tag_repo}/manifests/{tag}", fleet.host);
    let ab = tokio::task::block_in_place(|| measure(&|| ab_head(&ab_url, seconds, dir.path())));
    let wrk_get = tokio::task::block_in_place(|| measure(&|| wrk(&base, &paths, "GET", seconds, dir.path())));
    let wrk_head = if wrk_head_ok {
        tokio::task::block_in_place(|| measure(&|| wrk(&base, &paths, "HEAD", seconds, dir.path())))
    } else {
        wrk_head
    };
    let rate_of = |v: &Option<Value>| v.as_ref().and_then(|v| v["requests_per_second"].as_f64());
    let (ceiling_tool, ceiling) = if wrk_head_ok {
        ("wrk HEAD", rate_of(&wrk_head))
    } else if rate_of(&ab).is_some() {
        ("ab -i -k (HEAD)", rate_of(&ab))
    } else {
        ("none", None)
    };
    say(format!("registry HEAD ceiling: {ceiling:?} by {ceiling_tool}; wrk GET {:?}", rate_of(&wrk_get)));
    let daemon = daemon_rates(fleet, window).await;
    let daemon_rate = daemon["run"]["checks_per_second"].as_f64();
    let once_rate = daemon["once"]["checks_per_second"].as_f64();

    // skopeo: sequential, on tags spread over the fleet.
    let mut skopeo_times = Vec::new();
    let mut skopeo_wrong = 0;
    let mut skopeo_error = None;
    for k in 0..SKOPEO_SAMPLES {
        let i = k * FLEET / SKOPEO_SAMPLES;
        let (repo, tag) = tag_of(i);
        let started = Instant::now();
        let output = Command::new("skopeo")
            .args(["inspect", "--tls-verify=false", "--format", "{{.Digest}}"])
            .arg(format!("docker://{}/{repo}:{tag}", fleet.host))
            .output();
        let elapsed = started.elapsed().as_secs_f64();
        match output {
            Ok(o) if o.status.success() => {
                skopeo_times.push(elapsed);
                if String::from_utf8_lossy(&o.stdout).trim() != fleet.digest_of(i) {
                    skopeo_wrong += 1;
                }
            }
            Ok(o) => {
                skopeo_error = Some(String::from_utf8_lossy(&o.stderr).trim().to_string());
                break;
            }
            Err(e) => {
                skopeo_error = Some(format!("cannot run skopeo: {e}"));
                break;
            }
        }
    }
    let skopeo_rate = (!skopeo_times.is_empty()).then(|| skopeo_times.len() as f64 / skopeo_times.iter().sum::<f64>());
    say(format!("skopeo inspect: {skopeo_rate:?} tags/s ({skopeo_wrong} digests differing) {skopeo_error:?}"));

    let checks = steady.checks() as f64;
    json!({
        "tags": FLEET,
        "concurrency": CONCURRENCY,
        "builder_monitor": {
            "checks": steady.checks(), "failed": steady.failed, "seconds": steady.seconds,
            "checks_per_second": bm_rate,
            "cpu_ms_per_check": (cpu1 - cpu0) * 1000.0 / checks,
            "registry_cpu_ms_per_check": (reg1 - reg0) * 1000.0 / checks,
            "cpu_utilisation": (cpu1 - cpu0) / steady.seconds,
            "registry_cpu_utilisation": (reg1 - reg0) / steady.seconds,
            "pin_checks_per_second": pin.rate(),
        },
        "ceiling": { "tool": ceiling_tool, "requests_per_second": ceiling },
        "wrk_head": wrk_head,
        "ab_head": ab,
        "wrk_get": wrk_get,
        "ratio_to_ceiling": ceiling.map(|c| bm_rate / c),
        "daemon": daemon,
        "daemon_ratio_to_ceiling": ceiling.zip(daemon_rate).map(|(c, d)| d / c),
        "once_ratio_to_ceiling": ceiling.zip(once_rate).map(|(c, o)| o / c),
        "daemon_ratio_to_skopeo": skopeo_rate.zip(daemon_rate).map(|(s, d)| d / s),
        "skopeo": {
            "samples": skopeo_times.len(), "seconds": skopeo_times, "digest_mismatches": skopeo_wrong,
            "checks_per_second": skopeo_rate, "error": skopeo_error,
            "command": "skopeo inspect --tls-verify=false --format '{{.Digest}}' docker://HOST/REPO:TAG",
        },
        "ratio_to_skopeo": skopeo_rate.map(|s| bm_rate / s),
    })
}

/// Item 2 in the daemon binary over the `FLEET` tags, pinned first by one `run --once`: a second
/// `run --once`, timed from spawn to exit (start-up included), and `run` with an interval of
/// 100 ms (every tag always due, so it checks as fast as it can), counted by its own
/// `builder_monitor_checks_total` over `window` once ready (start-up excluded).
async fn daemon_rates(fleet: &Fleet, window: Duration) -> Value {
    let dir = tempfile::tempdir().expect("temp dir");
    let http = support::http();
    let port = free_port();
    let text = config_text(&fleet.host, &fleet.host, FLEET, "100ms", "0s", &format!("listen = \"127.0.0.1:{port}\""));
    let config = dir.path().join("config.toml");
    std::fs::write(&config, &text).expect("write config");
    let once = || {
        let started = Instant::now();
        let status = Command::new(BINARY)
            .args(["run", "--once", "--config"])
            .arg(&config)
            .env("BUILDER_MONITOR_LOG", "warn")
            .env_remove("BUILDER_MONITOR_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run builder-monitor run --once");
        (started.elapsed().as_secs_f64(), status.code())
    };
    let (pin_seconds, pin_code) = tokio::task::block_in_place(once);
    let (once_seconds, once_code) = tokio::task::block_in_place(once);
    let once_rate = FLEET as f64 / once_seconds;
    say(format!(
        "run --once over {FLEET} pinned tags: {once_seconds:.2}s, {once_rate:.0} checks/s (exit {once_code:?})"
    ));

    let mut daemon = Running::spawn(dir.path(), &text, port, "warn");
    let ready = daemon.wait_ready(&http, Duration::from_millis(20), Duration::from_secs(300)).await;
    // One more cycle first: connections and ledger pages warm, as in the in-process loop.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (m0, cpu0) = (daemon.metrics(&http).await, cpu_seconds(&daemon.pid).unwrap_or(0.0));
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let (m1, cpu1) = (daemon.metrics(&http).await, cpu_seconds(&daemon.pid).unwrap_or(0.0));
    let seconds = started.elapsed().as_secs_f64();
    let exit_code = daemon.terminate();
    let delta = |name: &str| metric_sum(&m1, name) - metric_sum(&m0, name);
    let checks = delta("builder_monitor_checks_total");
    let rate = checks / seconds;
    say(format!("builder-monitor run: {rate:.0} unchanged checks/s over {seconds:.1}s (start-up excluded)"));
    json!({
        "tags": FLEET,
        "config": "interval 100ms (every tag always due), jitter 0s, requests_per_second = 0, watch_run_image = false",
        "once": {
            "pin_seconds": pin_seconds, "pin_exit_code": pin_code,
            "seconds": once_seconds, "exit_code": once_code, "checks_per_second": once_rate,
            "measured": "a second `run --once` over the pinned tags, from spawn to exit",
        },
        "run": {
            "seconds_to_ready": ready.as_secs_f64(), "checks": checks, "seconds": seconds,
            "checks_per_second": rate, "cpu_ms_per_check": (cpu1 - cpu0) * 1000.0 / checks.max(1.0),
            "registry_requests_per_check": delta("builder_monitor_registry_requests_total") / checks.max(1.0),
            "exit_code": exit_code,
            "measured": "`builder_monitor_checks_total` of `builder-monitor run` over the window, from 2 s after /readyz",
        },
    })
}

// ---------------------------------------------------------------------------------------------
// Item 3: change-to-event latency of the daemon binary.

fn stats(values: &[f64]) -> Value {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let pick = |q: f64| sorted.get(((sorted.len() as f64 - 1.0) * q).round() as usize).copied();
    json!({
        "samples": sorted.len(),
        "min": sorted.first(), "median": pick(0.5), "p90": pick(0.9), "max": sorted.last(),
        "mean": (!sorted.is_empty()).then(|| sorted.iter().sum::<f64>() / sorted.len() as f64),
        "values": values,
    })
}

/// The daemon binary with its JSON log lines streamed to a channel, for timing events.
struct Streaming {
    child: Child,
    lines: std::sync::mpsc::Receiver<(Instant, String)>,
    spawned: Instant,
    /// Every line with its arrival time, and the benchmark's own notes, for the report directory.
    transcript: Vec<String>,
}

impl Streaming {
    fn spawn(config: &Path) -> Self {
        let mut child = Command::new(BINARY)
            .args(["run", "--log-format", "json", "--config"])
            .arg(config)
            .env("BUILDER_MONITOR_LOG", "info")
            .env("BENCH_API_TOKEN", API_TOKEN)
            .env_remove("BUILDER_MONITOR_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start builder-monitor");
        let stderr = child.stderr.take().expect("daemon stderr");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        Streaming { child, lines, spawned: Instant::now(), transcript: Vec::new() }
    }

    fn note(&mut self, at: Instant, text: &str) {
        let t = at.saturating_duration_since(self.spawned).as_secs_f64();
        self.transcript.push(format!("{t:9.4} {text}"));
    }

    /// The next committed event of `event_type` (its document), or `None` after `patience`; with
    /// the time the last push hook that woke a check before it arrived.
    fn wait_event(&mut self, event_type: &str, patience: Duration) -> Option<(Value, Option<Instant>)> {
        let deadline = Instant::now() + patience;
        let mut hook = None;
        loop {
            let (at, line) = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())).ok()?;
            self.note(at, &line);
            let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
            if v["message"] == "registry hook" && v["checks"].as_str().is_some_and(|c| c.contains('"')) {
                hook = Some(at);
            }
            if v["target"] == "builder_monitor_core::event" && v["event_type"] == event_type {
                return Some((serde_json::from_str(v["event"].as_str()?).ok()?, hook));
            }
        }
    }

    fn terminate(mut self) -> Option<i32> {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }
}

/// Pushes `LATENCY_SAMPLES` new digests to `repo:latest` and times each until `builder.changed`.
/// With `hook_base` (the daemon's server), a push the hook did not turn into an event within 5 s is
/// counted as missed, and a check is asked for through the API so the next push starts clean.
async fn measure_latency(pusher: &Pusher, host: &str, repo: &str, text: &str, hook_base: Option<&str>) -> Value {
    let run = format!("{host}/bench/run:latest");
    pusher.push_index(repo, "latest", &builder_images(&run, 0), Format::Oci).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, text).expect("write config");
    let mut daemon = Streaming::spawn(&config);
    let patience = Duration::from_secs(30);
    tokio::task::block_in_place(|| daemon.wait_event("builder.pinned", patience)).expect("builder.pinned");
    // Let notifications queued before the daemon listened arrive first.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let http = support::http();
    let mut latencies = Vec::new();
    let mut hook_delivery = Vec::new();
    let mut missed = Vec::new();
    for k in 1..=LATENCY_SAMPLES {
        // Polling: pushes land at every tenth of the interval after the previous check.
        let pause = if hook_base.is_none() { 100 * (k as u64 % 10) } else { 200 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let (pushed, _) = pusher.push_index(repo, "latest", &builder_images(&run, k), Format::Oci).await;
        let moved = Instant::now();
        daemon.note(moved, &format!("bench: push {k} done, {repo}:latest -> {}", pushed.digest));
        let wait = if hook_base.is_some() { Duration::from_secs(5) } else { patience };
        let mut event = tokio::task::block_in_place(|| daemon.wait_event("builder.changed", wait));
        match (&event, hook_base) {
            (None, Some(base)) => {
                missed.push(k);
                say(format!("push {k}: the hook's check did not see the move within {wait:?}; asking for a check"));
                let r = http.post(format!("{base}/api/v1/builders/b/check")).bearer_auth(API_TOKEN).send().await;
                assert_eq!(r.map(|r| r.status().as_u16()).ok(), Some(202), "POST check");
                event = tokio::task::block_in_place(|| daemon.wait_event("builder.changed", patience));
            }
            (Some((_, hook)), _) => {
                latencies.push(moved.elapsed().as_secs_f64());
                if let Some(hook) = hook {
                    hook_delivery.push(hook.saturating_duration_since(moved).as_secs_f64());
                }
            }
            (None, None) => {}
        }
        let (event, _) = event.expect("builder.changed");
        assert_eq!(event["current"]["digest"], pushed.digest, "the event names the pushed digest");
    }
    let transcript = std::mem::take(&mut daemon.transcript);
    let code = tokio::task::block_in_place(|| daemon.terminate());
    let name = format!("latency-{}.log", repo.rsplit('/').next().unwrap_or("daemon"));
    let _ = std::fs::create_dir_all(report_dir());
    let _ = std::fs::write(report_dir().join(&name), transcript.join("\n") + "\n");
    let mut result = stats(&latencies);
    if hook_base.is_some() {
        result["hook_arrival"] = stats(&hook_delivery);
    }
    result["pushes"] = json!(LATENCY_SAMPLES);
    result["missed"] = json!(missed.len());
    result["missed_pushes"] = json!(missed);
    result["exit_code"] = json!(code);
    result
}

async fn latency() -> Value {
    let port = free_port();
    let hook = format!("http://127.0.0.1:{port}/hooks/distribution");
    let (registry, _) = start_registry(|| TestRegistry::start_notifying(&hook, API_TOKEN));
    let host = registry.host.clone();
    let pusher = Pusher::new(&host);
    pusher
        .push_image("bench/run", Some("latest"), &support::images::Image::new("amd64").salt("run"), Format::Oci)
        .await;
    let builder =
        |repo: &str| format!("[[builders]]\nname = \"b\"\nimage = \"{host}/{repo}:latest\"\nwatch_run_image = false\n");
    let registry_table = format!("[registries.\"{host}\"]\nrequests_per_second = 0\n");
    let hook_config = format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n[server]\nlisten = \"127.0.0.1:{port}\"\napi_token_env = \"BENCH_API_TOKEN\"\n\n{registry_table}\n{}",
        builder("lat/hook")
    );
    let base = format!("http://127.0.0.1:{port}");
    let hooked = measure_latency(&pusher, &host, "lat/hook", &hook_config, Some(&base)).await;
    say(format!(
        "latency with the push hook: median {}s, {} of {LATENCY_SAMPLES} missed",
        hooked["median"], hooked["missed"]
    ));
    let poll_config = format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1s\"\njitter = \"0s\"\n\n{registry_table}\n{}",
        builder("lat/poll")
    );
    let polled = measure_latency(&pusher, &host, "lat/poll", &poll_config, None).await;
    say(format!("latency polling every second: median {}s", polled["median"]));
    json!({
        "measured_from": "the end of the push (the index PUT that moves the tag answered) to the daemon's log line of the committed builder.changed event",
        "interval_1s": polled,
        "push_hook": hooked,
    })
}

// ---------------------------------------------------------------------------------------------
// Items 4 and 5: the daemon binary under load.

/// A `builder-monitor run` process with its log in a file.
struct Running {
    child: Child,
    pid: String,
    spawned: Instant,
    spawned_wall: SystemTime,
    base: String,
    log: PathBuf,
}

impl Running {
    fn spawn(dir: &Path, text: &str, port: u16, filter: &str) -> Self {
        let config = dir.join("config.toml");
        std::fs::write(&config, text).expect("write config");
        let log = dir.join(format!("daemon-{}.log", rand_suffix()));
        let stderr = std::fs::File::create(&log).expect("log file");
        let spawned_wall = SystemTime::now();
        let spawned = Instant::now();
        let mut command = Command::new(BINARY);
        command
            .args(["run", "--log-format", "json", "--config"])
            .arg(&config)
            .env("BUILDER_MONITOR_LOG", filter)
            .env_remove("BUILDER_MONITOR_CONFIG")
            .stdout(Stdio::null())
            .stderr(stderr);
        // Diagnostics: BENCH_HEAPTRACK=DIR records every daemon's allocations with heaptrack's
        // preload library (raw files, `heaptrack_interpret < F | gzip > F.gz`, then `heaptrack_print`).
        if let Ok(out) = std::env::var("BENCH_HEAPTRACK") {
            let library = "/usr/lib/heaptrack/libheaptrack_preload.so";
            let raw = Path::new(&out).join(format!("daemon-{}.raw", rand_suffix()));
            command.env("LD_PRELOAD", library).env("DUMP_HEAPTRACK_OUTPUT", raw);
        }
        let child = command.spawn().expect("start builder-monitor");
        let pid = child.id().to_string();
        Running { child, pid, spawned, spawned_wall, base: format!("http://127.0.0.1:{port}"), log }
    }

    /// Polls `/readyz` until it answers 200; the time since spawn.
    async fn wait_ready(&mut self, http: &reqwest::Client, poll: Duration, patience: Duration) -> Duration {
        loop {
            if let Ok(r) = http.get(format!("{}/readyz", self.base)).send().await
                && r.status().as_u16() == 200
            {
                return self.spawned.elapsed();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("builder-monitor exited ({status}) before it was ready; log: {}", self.log.display());
            }
            assert!(self.spawned.elapsed() < patience, "builder-monitor not ready after {patience:?}");
            tokio::time::sleep(poll).await;
        }
    }

    async fn metrics(&self, http: &reqwest::Client) -> String {
        let r = http.get(format!("{}/metrics", self.base)).send().await.expect("GET /metrics");
        String::from_utf8_lossy(&r.bytes().await.expect("metrics body")).into_owned()
    }

    /// SIGTERM, then the exit (killed after 20 s).
    fn terminate(mut self) -> Option<i32> {
        let _ = Command::new("kill").args(["-TERM", &self.pid]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Seconds from spawn to the first log line satisfying `wanted` (by its timestamp).
    fn logged_after_spawn(&self, wanted: impl Fn(&Value) -> bool) -> Option<f64> {
        let text = std::fs::read_to_string(&self.log).ok()?;
        let spawned: chrono::DateTime<chrono::Utc> = self.spawned_wall.into();
        text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|v| wanted(v)).and_then(|v| {
            let at = chrono::DateTime::parse_from_rfc3339(v["timestamp"].as_str()?).ok()?;
            Some((at.with_timezone(&chrono::Utc) - spawned).num_microseconds()? as f64 / 1e6)
        })
    }
}

fn rand_suffix() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// Rate limit of item 5's limited warm start: requests per second and burst.
const STARTUP_RPS: u64 = 1_000;
const STARTUP_BURST: u64 = 16;

/// Item 5: time to the first check and to every builder checked, over the whole fleet (10,000 tags
/// by default): cold (empty ledger), warm (every builder pinned), and warm under a rate limit, whose
/// floor is the time the limit allows for one `HEAD` per builder.
async fn startup(fleet: &Fleet) -> Value {
    let dir = tempfile::tempdir().expect("temp dir");
    let http = support::http();
    let n = fleet.tags;
    let mut runs = serde_json::Map::new();
    for phase in ["cold", "warm", "warm_limited"] {
        let port = free_port();
        let text = config_text(&fleet.host, &fleet.host, n, "1h", "0s", &format!("listen = \"127.0.0.1:{port}\""));
        let (text, floor) = if phase == "warm_limited" {
            let limit = format!("requests_per_second = {STARTUP_RPS}\nburst = {STARTUP_BURST}");
            (
                text.replace("requests_per_second = 0", &limit),
                Some(n.saturating_sub(STARTUP_BURST as usize) as f64 / STARTUP_RPS as f64),
            )
        } else {
            (text, None)
        };
        let mut daemon = Running::spawn(dir.path(), &text, port, "info,builder_monitor::monitor=debug");
        let sampler = Sampler::start(daemon.child.id(), daemon.spawned, Duration::from_millis(50));
        let ready = daemon.wait_ready(&http, Duration::from_millis(5), Duration::from_secs(900)).await;
        let samples = sampler.finish();
        let checks = metric_sum(&daemon.metrics(&http).await, "builder_monitor_checks_total");
        let first_check = daemon.logged_after_spawn(|v| v["message"] == "check done");
        let listening = daemon.logged_after_spawn(|v| v["message"] == "serving health, metrics, API and hooks");
        let cpu = cpu_seconds(&daemon.pid);
        let hwm = status_kib(&daemon.pid, "VmHWM");
        let code = daemon.terminate();
        say(format!(
            "start-up ({phase}): listening after {listening:?}s, first check after {first_check:?}s, all {n} checked after {:.3}s (floor {floor:?}s)",
            ready.as_secs_f64()
        ));
        runs.insert(
            phase.to_string(),
            json!({
                "builders": n, "checks_at_ready": checks,
                "seconds_to_listening": listening, "seconds_to_first_check": first_check,
                "seconds_to_ready": ready.as_secs_f64(), "cpu_seconds_to_ready": cpu,
                "rate_limit": floor.map(|_| json!({"requests_per_second": STARTUP_RPS, "burst": STARTUP_BURST})),
                "seconds_the_limit_allows": floor,
                "ready_over_floor": floor.map(|f| ready.as_secs_f64() / f),
                "peak_rss_kib": hwm, "max_open_fds": samples.iter().map(|s| s.fds).max(),
                "max_threads": samples.iter().map(|s| s.threads).max(), "exit_code": code,
            }),
        );
    }
    json!({
        "config": "interval 1h, jitter 0s (so the daemon's own start-up is timed, not the jitter), watch_run_image = false; requests_per_second = 0, and for warm_limited the limit named there",
        "measured": "from spawning the process to the first `check done` log line, and to /readyz answering 200 (the ledger answers and every builder was checked since start)",
        "cold": runs["cold"], "warm": runs["warm"], "warm_limited": runs["warm_limited"],
    })
}

#[derive(Debug)]
struct DaemonRun {
    builders: usize,
    seconds_to_ready: f64,
    cpu_at_ready: f64,
    rss_at_ready_kib: u64,
    cpu_total: f64,
    peak_rss_kib: u64,
    rss_end_kib: u64,
    /// `RssAnon` / `RssFile` at the end: heap and stacks, and mapped file pages (the binary's text).
    rss_anon_end_kib: u64,
    rss_file_end_kib: u64,
    steady_seconds: f64,
    steady_checks: f64,
    steady_requests: f64,
    samples: Vec<Sample>,
    ready_at: f64,
    exit_code: Option<i32>,
}

impl DaemonRun {
    fn steady_samples(&self) -> Vec<Sample> {
        self.samples.iter().copied().filter(|s| s.t >= self.ready_at).collect()
    }

    fn to_json(&self) -> Value {
        let steady = self.steady_samples();
        let steady_max = steady.iter().map(|s| s.rss_kib).max();
        json!({
            "builders": self.builders,
            "seconds_to_ready": self.seconds_to_ready,
            "peak_rss_kib": self.peak_rss_kib,
            "peak_rss_mib": self.peak_rss_kib as f64 / MIB,
            "rss_at_ready_kib": self.rss_at_ready_kib,
            "steady_max_rss_kib": steady_max,
            "steady_max_rss_mib": steady_max.map(|k| k as f64 / MIB),
            "rss_end_kib": self.rss_end_kib,
            "rss_anon_end_kib": self.rss_anon_end_kib,
            "rss_file_end_kib": self.rss_file_end_kib,
            "cpu_seconds_total": self.cpu_total,
            "cpu_seconds_first_cycle": self.cpu_at_ready,
            "cpu_seconds_steady": self.cpu_total - self.cpu_at_ready,
            "steady_seconds": self.steady_seconds,
            "steady_checks": self.steady_checks,
            "steady_cycles": self.steady_checks / self.builders as f64,
            "steady_cpu_ms_per_check": (self.cpu_total - self.cpu_at_ready) * 1000.0 / self.steady_checks.max(1.0),
            "steady_cpu_utilisation": (self.cpu_total - self.cpu_at_ready) / self.steady_seconds,
            "steady_requests_per_check": self.steady_requests / self.steady_checks.max(1.0),
            "max_open_fds": self.samples.iter().map(|s| s.fds).max(),
            "max_threads": self.samples.iter().map(|s| s.threads).max(),
            "exit_code": self.exit_code,
        })
    }
}

/// Runs the daemon on the first `n` tags until it is ready, then for `steady` more.
async fn daemon_run(fleet: &Fleet, n: usize, interval: u64, jitter: u64, steady: Duration) -> DaemonRun {
    let dir = tempfile::tempdir().expect("temp dir");
    let http = support::http();
    let port = free_port();
    let text = config_text(
        &fleet.host,
        &fleet.host,
        n,
        &format!("{interval}s"),
        &format!("{jitter}s"),
        &format!("listen = \"127.0.0.1:{port}\""),
    );
    // Diagnostics: BENCH_DAEMON_RPS=R[,BURST] runs the daemon with that rate limit instead of none.
    let text = match std::env::var("BENCH_DAEMON_RPS") {
        Ok(limit) => {
            let (rps, burst) = limit.split_once(',').unwrap_or((limit.as_str(), "10"));
            text.replace("requests_per_second = 0", &format!("requests_per_second = {rps}\nburst = {burst}"))
        }
        Err(_) => text,
    };
    let mut daemon = Running::spawn(dir.path(), &text, port, "info");
    let sampler = Sampler::start(daemon.child.id(), daemon.spawned, Duration::from_millis(250));
    let ready = daemon.wait_ready(&http, Duration::from_millis(100), Duration::from_secs(900)).await;
    let cpu_at_ready = cpu_seconds(&daemon.pid).unwrap_or(0.0);
    let rss_at_ready_kib = status_kib(&daemon.pid, "VmRSS").unwrap_or(0);
    let m0 = daemon.metrics(&http).await;
    let steady_started = Instant::now();
    tokio::time::sleep(steady).await;
    let m1 = daemon.metrics(&http).await;
    let steady_seconds = steady_started.elapsed().as_secs_f64();
    let cpu_total = cpu_seconds(&daemon.pid).unwrap_or(0.0);
    let peak_rss_kib = status_kib(&daemon.pid, "VmHWM").unwrap_or(0);
    let rss_end_kib = status_kib(&daemon.pid, "VmRSS").unwrap_or(0);
    let rss_anon_end_kib = status_kib(&daemon.pid, "RssAnon").unwrap_or(0);
    let rss_file_end_kib = status_kib(&daemon.pid, "RssFile").unwrap_or(0);
    let samples = sampler.finish();
    let exit_code = daemon.terminate();
    let delta = |name: &str| metric_sum(&m1, name) - metric_sum(&m0, name);
    DaemonRun {
        builders: n,
        seconds_to_ready: ready.as_secs_f64(),
        cpu_at_ready,
        rss_at_ready_kib,
        cpu_total,
        peak_rss_kib,
        rss_end_kib,
        rss_anon_end_kib,
        rss_file_end_kib,
        steady_seconds,
        steady_checks: delta("builder_monitor_checks_total"),
        steady_requests: delta("builder_monitor_registry_requests_total"),
        samples,
        ready_at: ready.as_secs_f64(),
        exit_code,
    }
}

/// Item 4: memory and CPU at each size.
async fn memory(fleet: &Fleet) -> Value {
    let mut runs = Vec::new();
    for n in sizes() {
        assert!(n <= fleet.tags, "BENCH_SIZES: at most {} tags", fleet.tags);
        let steady = Duration::from_secs(MEMORY_CYCLES * (MEMORY_INTERVAL + MEMORY_JITTER));
        let run = daemon_run(fleet, n, MEMORY_INTERVAL, MEMORY_JITTER, steady).await;
        say(format!(
            "{n} tags: ready after {:.1}s, peak RSS {:.1} MiB, steady max {:.1} MiB (at the end {:.1} anonymous + {:.1} file), {:.2} CPU s, {:.0} steady checks, max {} fds, max {} threads",
            run.seconds_to_ready,
            run.peak_rss_kib as f64 / MIB,
            run.steady_samples().iter().map(|s| s.rss_kib).max().unwrap_or(0) as f64 / MIB,
            run.rss_anon_end_kib as f64 / MIB,
            run.rss_file_end_kib as f64 / MIB,
            run.cpu_total,
            run.steady_checks,
            run.samples.iter().map(|s| s.fds).max().unwrap_or(0),
            run.samples.iter().map(|s| s.threads).max().unwrap_or(0),
        ));
        runs.push(run);
    }
    let growth = |value: &dyn Fn(&DaemonRun) -> f64| -> Option<f64> {
        let (first, last) = (runs.first()?, runs.last()?);
        (last.builders > first.builders).then(|| (value(last) - value(first)) / (last.builders - first.builders) as f64)
    };
    let peak_growth = growth(&|r| r.peak_rss_kib as f64);
    let steady_growth = growth(&|r| r.steady_samples().iter().map(|s| s.rss_kib).max().unwrap_or(r.rss_end_kib) as f64);
    json!({
        "config": format!("interval {MEMORY_INTERVAL}s, jitter {MEMORY_JITTER}s, requests_per_second = 0, watch_run_image = false, [server] on; {MEMORY_CYCLES} steady cycles of {}s after every tag was pinned", MEMORY_INTERVAL + MEMORY_JITTER),
        "runs": runs.iter().map(DaemonRun::to_json).collect::<Vec<_>>(),
        "peak_rss_growth_kib_per_tag": peak_growth,
        "steady_rss_growth_kib_per_tag": steady_growth,
    })
}

/// Item 4, soak: RSS over `BENCH_SOAK_SECS` at 1,000 tags.
async fn soak(fleet: &Fleet, seconds: u64) -> Value {
    let run = daemon_run(fleet, FLEET, SOAK_INTERVAL, SOAK_JITTER, Duration::from_secs(seconds)).await;
    // Baseline after the first steady cycle; compare the first and last tenth of the soak.
    let start = run.ready_at + (SOAK_INTERVAL + SOAK_JITTER) as f64;
    let samples: Vec<Sample> = run.samples.iter().copied().filter(|s| s.t >= start).collect();
    let span = samples.last().map_or(0.0, |s| s.t) - start;
    let mean = |xs: Vec<u64>| (!xs.is_empty()).then(|| xs.iter().sum::<u64>() as f64 / xs.len() as f64);
    let first = mean(samples.iter().filter(|s| s.t <= start + span / 10.0).map(|s| s.rss_kib).collect());
    let last = mean(samples.iter().filter(|s| s.t >= start + span * 0.9).map(|s| s.rss_kib).collect());
    let slope = {
        let n = samples.len() as f64;
        let (mx, my) =
            (samples.iter().map(|s| s.t).sum::<f64>() / n, samples.iter().map(|s| s.rss_kib as f64).sum::<f64>() / n);
        let cov: f64 = samples.iter().map(|s| (s.t - mx) * (s.rss_kib as f64 - my)).sum();
        let var: f64 = samples.iter().map(|s| (s.t - mx).powi(2)).sum();
        (var > 0.0).then(|| cov / var * 3600.0)
    };
    let min = samples.iter().map(|s| s.rss_kib).min();
    let max = samples.iter().map(|s| s.rss_kib).max();
    let growth = first.zip(last).map(|(f, l)| l - f);
    // A minute-by-minute series for the JSON.
    let mut series = Vec::new();
    let mut next = 0.0;
    for s in &run.samples {
        if s.t >= next {
            series.push(json!({"t": s.t, "rss_kib": s.rss_kib, "cpu": s.cpu, "fds": s.fds, "threads": s.threads}));
            next = s.t + 60.0;
        }
    }
    say(format!("soak {seconds}s: RSS first tenth {first:?} KiB, last tenth {last:?} KiB, slope {slope:?} KiB/h"));
    json!({
        "builders": FLEET,
        "soak_seconds": seconds,
        "config": format!("interval {SOAK_INTERVAL}s, jitter {SOAK_JITTER}s (each tag checked every {SOAK_INTERVAL} to {}s)", SOAK_INTERVAL + SOAK_JITTER),
        "run": run.to_json(),
        "rss_first_tenth_kib": first, "rss_last_tenth_kib": last, "rss_growth_kib": growth,
        "rss_min_kib": min, "rss_max_kib": max, "rss_slope_kib_per_hour": slope,
        "series": series,
    })
}

// ---------------------------------------------------------------------------------------------
// The run and the report.

fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|m| m.trim().to_string());
    let cores = cpuinfo.lines().filter(|l| l.starts_with("processor")).count();
    let mhz = cpuinfo
        .lines()
        .find(|l| l.starts_with("cpu MHz"))
        .and_then(|l| l.split(':').nth(1))
        .map(|m| m.trim().to_string());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_kib = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|k| k.trim().to_string());
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|c| !c.is_empty());
    let load = std::fs::read_to_string("/proc/loadavg").ok().map(|l| l.trim().to_string());
    json!({
        "load_average_at_start": load,
        "cpu_model": model, "cores": cores, "cpu_mhz": mhz,
        "memory_gib": memory_kib.map(|k| k as f64 / 1024.0 / 1024.0), "kernel": kernel,
        "registry": tool_version("/usr/bin/docker-registry", &["--version"]),
        "wrk": tool_version("wrk", &["-v"]), "ab": tool_version("ab", &["-V"]), "skopeo": tool_version("skopeo", &["--version"]),
        "commit": commit,
        "date": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
}

/// `$CARGO_TARGET_DIR/bench`, or `target/bench`.
fn report_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("target")).join("bench")
}

/// Whether a part of the benchmark runs (`BENCH_ONLY=1,2,3,4,5,6,soak` picks parts; all by default).
fn selected(part: &str) -> bool {
    std::env::var("BENCH_ONLY").map_or(true, |only| only.split(',').any(|p| p.trim() == part))
}

async fn run() {
    let soak_seconds = env_number("BENCH_SOAK_SECS", 1800);
    let window = Duration::from_secs(env_number("BENCH_WINDOW_SECS", 15));
    // Item 6 brings its own images: without items 1 to 5, no fleet is pushed.
    let fleet_needed = ["1", "2", "3", "4", "5", "soak"].iter().any(|p| selected(p));
    let largest = if fleet_needed { sizes().into_iter().chain([FLEET]).max().unwrap_or(FLEET) } else { 0 };
    let machine = machine();
    say(format!("machine: {machine}"));

    let (registry, pid) = start_registry(TestRegistry::start);
    say(format!("registry on {} (pid {pid:?})", registry.host));
    let fleet = populate(registry, pid, Access::Anonymous, largest).await;

    let (mut anonymous, mut bearer) = (Value::Null, Value::Null);
    if selected("1") {
        say("1. requests per check, anonymous");
        anonymous = requests_per_check(&fleet.host, None, Duration::from_secs(10)).await;
        say("1. requests per check, bearer tokens");
        bearer = {
            let tokens = TokenServer::start(Some((USER, PASSWORD)), TOKEN_LIFETIME).await;
            let token_host =
                tokens.realm.trim_start_matches("http://").split('/').next().unwrap_or_default().to_string();
            let token_proxy = Proxy::start(&token_host).await;
            let realm = format!("http://{}/token", token_proxy.host);
            let (registry, pid) = start_registry(|| TestRegistry::start_with(Auth::Token { realm: realm.clone() }));
            let secured = populate(registry, pid, Access::Bearer { realm }, FLEET).await;
            let window = Duration::from_secs(TOKEN_LIFETIME * TOKEN_LIFETIMES);
            let result = requests_per_check(&secured.host, Some(&token_proxy), window).await;
            drop(secured.registry);
            result
        };
    }
    let mut throughput = Value::Null;
    if selected("2") {
        say("2. checks per second");
        throughput = self::throughput(&fleet, window).await;
    }
    let mut latency = Value::Null;
    if selected("3") {
        say("3. change-to-event latency");
        latency = self::latency().await;
    }
    let mut startup = Value::Null;
    if selected("5") {
        say("5. start-up");
        startup = self::startup(&fleet).await;
    }
    let mut memory = Value::Null;
    if selected("4") {
        say("4. memory and CPU");
        memory = self::memory(&fleet).await;
    }
    let mut packages = Value::Null;
    if selected("6") {
        say("6. requests per new run image digest");
        packages = self::package_costs().await;
    }
    let mut soak = Value::Null;
    if selected("soak") {
        say(format!("4. soak for {soak_seconds}s"));
        soak = self::soak(&fleet, soak_seconds).await;
    }

    let mut machine = machine;
    machine["load_average_at_end"] = json!(std::fs::read_to_string("/proc/loadavg").ok().map(|l| l.trim().to_string()));
    let report = json!({
        "machine": machine,
        "command": "cargo bench --bench registry",
        "requests_per_check": { "anonymous": anonymous, "bearer": bearer },
        "throughput": throughput,
        "latency": latency,
        "memory": memory,
        "soak": soak,
        "startup": startup,
        "packages": packages,
    });
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"))
        .join("bench");
    std::fs::create_dir_all(&dir).expect("create the report directory");
    let json_path = dir.join("registry.json");
    let md_path = dir.join("registry.md");
    std::fs::write(&json_path, serde_json::to_string_pretty(&report).unwrap()).expect("write JSON report");
    let markdown = render(&report);
    std::fs::write(&md_path, &markdown).expect("write Markdown report");
    println!("{markdown}");
    say(format!("wrote {} and {}", md_path.display(), json_path.display()));
    drop(fleet.registry);
}

fn f(v: &Value, digits: usize) -> String {
    match v.as_f64() {
        Some(x) => format!("{x:.digits$}"),
        None => "n/a".to_string(),
    }
}

fn verdict(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "met",
        Some(false) => "**missed**",
        None => "n/a",
    }
}

fn render(r: &Value) -> String {
    let m = &r["machine"];
    let mut out = String::new();
    let _ = writeln!(out, "# builder-monitor registry benchmark\n");
    let _ = writeln!(
        out,
        "`{}` on {} × {} ({} MHz), {:.1} GiB RAM, Linux {}; {}; commit {}, {}; load average {} at start, {} at end.\n",
        r["command"].as_str().unwrap_or_default(),
        m["cores"],
        m["cpu_model"].as_str().unwrap_or("?"),
        m["cpu_mhz"].as_str().unwrap_or("?"),
        m["memory_gib"].as_f64().unwrap_or(0.0),
        m["kernel"].as_str().unwrap_or("?"),
        m["registry"].as_str().unwrap_or("registry ?"),
        m["commit"].as_str().unwrap_or("?"),
        m["date"].as_str().unwrap_or("?"),
        m["load_average_at_start"].as_str().unwrap_or("?"),
        m["load_average_at_end"].as_str().unwrap_or("?"),
    );
    let _ = writeln!(out, "| # | measurement | result | target | |\n|---|---|---|---|---|");
    let mut row = |n: &str, what: String, result: String, target: &str, ok: Option<bool>| {
        let _ = writeln!(out, "| {n} | {what} | {result} | {target} | {} |", verdict(ok));
    };
    for (label, v) in
        [("anonymous", &r["requests_per_check"]["anonymous"]), ("bearer token", &r["requests_per_check"]["bearer"])]
    {
        let per = v["requests_per_check"].as_f64();
        row(
            "1",
            format!(
                "requests per unchanged check, {label} ({} tags, {} checks in {} s, counted at a proxy{})",
                v["tags"],
                v["checks"],
                f(&v["seconds"], 0),
                if label == "anonymous" { String::new() } else { " plus the token server".into() }
            ),
            format!(
                "{} ({} HEAD, {} token fetches, {} 401s)",
                f(&v["requests_per_check"], 4),
                v["heads"],
                v["token_fetches"],
                v["unauthorized_answers"]
            ),
            "≤ 1.01",
            per.map(|p| p <= 1.01),
        );
    }
    let b = &r["requests_per_check"]["bearer"];
    row(
        "1",
        format!(
            "token fetches per (scope, token lifetime) while pinning ({} scopes, {} tags pinned 16 at a time in {} s, lifetime {} s; {} 401s)",
            b["scopes_at_pin"],
            b["tags"],
            f(&b["pin"]["seconds"], 1),
            b["token_lifetime_seconds"],
            b["pin"]["unauthorized_answers"]
        ),
        format!(
            "{} ({} fetches in all, at most {} for one scope, {} sooner than 90 % of a lifetime after the previous)",
            f(&b["token_fetches_per_scope_per_lifetime_at_pin"], 2),
            b["pin"]["token_fetches"],
            b["max_token_fetches_of_one_scope_at_pin"],
            b["duplicate_token_fetches_at_pin"]
        ),
        "≤ 1",
        b["token_fetches_per_scope_per_lifetime_at_pin"].as_f64().map(|x| x <= 1.0),
    );
    let between = &b["seconds_between_fetches_of_a_scope"];
    row(
        "1",
        format!(
            "token fetches per (scope, token lifetime) at steady state (lifetime {} s; {} s of checks, {} refetch intervals)",
            b["token_lifetime_seconds"],
            f(&b["seconds"], 0),
            between["samples"]
        ),
        format!(
            "{} (a scope's token refetched every {} s on average, at least {} s apart)",
            f(&b["token_fetches_per_scope_per_lifetime"], 2),
            f(&between["mean"], 2),
            f(&between["min"], 2)
        ),
        "≤ 1",
        b["token_fetches_per_scope_per_lifetime"].as_f64().map(|x| x <= 1.0),
    );
    let t = &r["throughput"];
    row(
        "2",
        format!("builder-monitor checks/s, C={}, rate limit off ({} tags, in process)", t["concurrency"], t["tags"]),
        format!(
            "{} ({} ms CPU/check; registry {} ms/check)",
            f(&t["builder_monitor"]["checks_per_second"], 0),
            f(&t["builder_monitor"]["cpu_ms_per_check"], 3),
            f(&t["builder_monitor"]["registry_cpu_ms_per_check"], 3)
        ),
        "",
        None,
    );
    row(
        "2",
        format!(
            "registry HEAD ceiling, C={} keep-alive ({})",
            t["concurrency"],
            t["ceiling"]["tool"].as_str().unwrap_or("?")
        ),
        f(&t["ceiling"]["requests_per_second"], 0),
        "",
        None,
    );
    row(
        "2",
        "wrk GET, same Accept, C=16 keep-alive (reference)".into(),
        f(&t["wrk_get"]["requests_per_second"], 0),
        "",
        None,
    );
    row(
        "2",
        "ratio builder-monitor / HEAD ceiling".into(),
        f(&t["ratio_to_ceiling"], 2),
        "≥ 0.8",
        t["ratio_to_ceiling"].as_f64().map(|x| x >= 0.8),
    );
    let d = &t["daemon"];
    row(
        "2",
        format!("`builder-monitor run` unchanged checks/s, start-up excluded ({} tags)", d["tags"]),
        format!("{} ({} ms CPU/check)", f(&d["run"]["checks_per_second"], 0), f(&d["run"]["cpu_ms_per_check"], 3)),
        "",
        None,
    );
    row(
        "2",
        "ratio `run` / HEAD ceiling".into(),
        f(&t["daemon_ratio_to_ceiling"], 2),
        "≥ 0.9",
        t["daemon_ratio_to_ceiling"].as_f64().map(|x| x >= 0.9),
    );
    row(
        "2",
        format!("`run --once` over {} pinned tags, start-up included", d["tags"]),
        format!("{} checks/s ({} s)", f(&d["once"]["checks_per_second"], 0), f(&d["once"]["seconds"], 2)),
        "",
        None,
    );
    row(
        "2",
        "ratio `run --once` / HEAD ceiling".into(),
        f(&t["once_ratio_to_ceiling"], 2),
        "≥ 0.8",
        t["once_ratio_to_ceiling"].as_f64().map(|x| x >= 0.8),
    );
    row(
        "2",
        "ratio `run` / skopeo".into(),
        format!("{}×", f(&t["daemon_ratio_to_skopeo"], 0)),
        "≥ 35×",
        t["daemon_ratio_to_skopeo"].as_f64().map(|x| x >= 35.0),
    );
    row(
        "2",
        format!("skopeo inspect per tag, sequential ({} tags)", t["skopeo"]["samples"]),
        format!("{} checks/s", f(&t["skopeo"]["checks_per_second"], 1)),
        "",
        None,
    );
    row("2", "ratio builder-monitor / skopeo".into(), format!("{}×", f(&t["ratio_to_skopeo"], 0)), "", None);
    let l = &r["latency"];
    for (label, v) in [("1 s interval", &l["interval_1s"]), ("registry push hook (interval 1 h)", &l["push_hook"])] {
        let missed = v["missed"].as_u64().unwrap_or(0);
        row(
            "3",
            format!("push → builder.changed, {label} ({} pushes)", v["pushes"]),
            format!(
                "median {} s, p90 {} s, max {} s{}",
                f(&v["median"], 3),
                f(&v["p90"], 3),
                f(&v["max"], 3),
                if missed > 0 {
                    format!("; **{missed} of {} pushes not detected** (hook raced the tag write)", v["pushes"])
                } else {
                    String::new()
                }
            ),
            "",
            (missed > 0).then_some(false),
        );
    }
    let mem = &r["memory"];
    for run in mem["runs"].as_array().into_iter().flatten() {
        let n = run["builders"].as_u64().unwrap_or(0);
        row(
            "4",
            format!("`run` with {n} tags: peak RSS (VmHWM) / steady RSS (anonymous + file at the end); CPU"),
            format!(
                "{} MiB / {} MiB ({} + {}); {} CPU s (first cycle {} s, then {} ms/check over {} cycles); max {} fds, {} threads",
                f(&run["peak_rss_mib"], 1),
                f(&run["steady_max_rss_mib"], 1),
                f(&json!(run["rss_anon_end_kib"].as_f64().map(|k| k / MIB)), 1),
                f(&json!(run["rss_file_end_kib"].as_f64().map(|k| k / MIB)), 1),
                f(&run["cpu_seconds_total"], 2),
                f(&run["cpu_seconds_first_cycle"], 2),
                f(&run["steady_cpu_ms_per_check"], 3),
                f(&run["steady_cycles"], 1),
                run["max_open_fds"],
                run["max_threads"]
            ),
            if n == 10_000 { "< 36 MiB / < 32 MiB" } else { "" },
            (n == 10_000).then(|| {
                run["peak_rss_mib"].as_f64().unwrap_or(f64::MAX) < 36.0
                    && run["steady_max_rss_mib"].as_f64().unwrap_or(f64::MAX) < 32.0
            }),
        );
    }
    row(
        "4",
        "RSS growth per tag (peak / steady)".into(),
        format!("{} / {} KiB", f(&mem["peak_rss_growth_kib_per_tag"], 2), f(&mem["steady_rss_growth_kib_per_tag"], 2)),
        "",
        None,
    );
    let s = &r["soak"];
    let growth = s["rss_growth_kib"].as_f64();
    row(
        "4",
        format!("soak, {} tags for {} s: RSS first → last tenth (min–max)", s["builders"], s["soak_seconds"]),
        format!(
            "{} → {} MiB ({}–{} MiB), slope {} KiB/h, {} steady checks",
            f(&json!(s["rss_first_tenth_kib"].as_f64().map(|k| k / MIB)), 2),
            f(&json!(s["rss_last_tenth_kib"].as_f64().map(|k| k / MIB)), 2),
            f(&json!(s["rss_min_kib"].as_f64().map(|k| k / MIB)), 2),
            f(&json!(s["rss_max_kib"].as_f64().map(|k| k / MIB)), 2),
            f(&s["rss_slope_kib_per_hour"], 0),
            s["run"]["steady_checks"]
        ),
        "no growth (< 1 MiB)",
        growth.map(|g| g < 1024.0),
    );
    let st = &r["startup"];
    for phase in ["cold", "warm", "warm_limited"] {
        let v = &st[phase];
        let (ledger, limit) = match phase {
            "cold" => ("empty ledger", "no rate limit".to_string()),
            "warm" => ("every builder pinned", "no rate limit".to_string()),
            _ => ("every builder pinned", format!("{STARTUP_RPS} req/s, burst {STARTUP_BURST}")),
        };
        let floor = v["seconds_the_limit_allows"].as_f64();
        row(
            "5",
            format!("start-up with {} builders, {ledger}, {limit}", v["builders"]),
            format!(
                "listening {} s, first check {} s, every builder checked (/readyz 200) {} s{}; {} CPU s, peak RSS {} MiB",
                f(&v["seconds_to_listening"], 3),
                f(&v["seconds_to_first_check"], 3),
                f(&v["seconds_to_ready"], 3),
                floor
                    .map(|fl| format!(
                        " (the limit allows {fl:.2} s: {:.3}×)",
                        v["seconds_to_ready"].as_f64().unwrap_or(0.0) / fl
                    ))
                    .unwrap_or_default(),
                f(&v["cpu_seconds_to_ready"], 2),
                f(&json!(v["peak_rss_kib"].as_f64().map(|k| k / MIB)), 1),
            ),
            if floor.is_some() { "within the limit's time" } else { "" },
            floor.map(|fl| v["seconds_to_ready"].as_f64().is_some_and(|r| r <= fl * 1.1)),
        );
    }
    for case in r["packages"].as_array().into_iter().flatten() {
        row(
            "6",
            format!("requests per new run image digest, {}", case["image"].as_str().unwrap_or("?")),
            format!(
                "{} before, {} with package lists (+{}: {} manifest GETs, {} config and {} layer blob GETs); {} per unchanged check",
                case["before"],
                case["after"],
                case["extra"],
                case["extra_manifests"],
                case["extra_configs"],
                case["extra_layers"],
                case["unchanged_check_requests"]
            ),
            "≤ 1 layer blob GET per platform; 1 request per unchanged check",
            Some(
                case["unchanged_check_requests"].as_u64() == Some(1)
                    && case["extra_layers"].as_u64() <= case["platforms"].as_u64(),
            ),
        );
    }
    let _ = writeln!(out, "\nRaw numbers, commands and per-sample values: `registry.json` beside this file.");
    out
}

// ---------------------------------------------------------------------------------------------
// Item 6: what reading a run image's OS package lists costs.

/// A Paketo `io.paketo.stack.packages` label of `n` packages at `version`.
fn paketo_label(n: usize, version: &str, arch: &str) -> String {
    let list: Vec<Value> = (0..n)
        .map(|i| {
            json!({"name": format!("lib{i:03}"), "version": version, "arch": arch,
                        "source": {"name": format!("lib{i:03}"), "version": version}, "summary": "bench"})
        })
        .collect();
    serde_json::to_string(&list).unwrap()
}

/// `run` with a last layer holding a CycloneDX SBOM of `n` packages, named by the base label.
fn with_sbom(mut run: support::app::RunImage, version: &str, n: usize) -> support::app::RunImage {
    let doc = json!({"bomFormat": "CycloneDX", "components": (0..n).map(|i| json!({"name": format!("lib{i:03}"), "version": version,
        "purl": format!("pkg:deb/ubuntu/lib{i:03}@{version}?arch={}", run.architecture)})).collect::<Vec<_>>()});
    let tar = support::app::tar("cnb/sbom/bom.cdx.json", &serde_json::to_vec(&doc).unwrap());
    let blob = support::app::gzip(&tar);
    let layer = support::app::Layer { digest: sha256(&blob), diff_id: sha256(&tar), blob, created_by: "SBOM".into() };
    run.layers.push(layer);
    let top = run.top_diff_id();
    run.label("io.buildpacks.base.sbom", &top)
}

/// How a case's run image lists its packages.
#[derive(Clone, Copy)]
enum Listing {
    Label,
    SbomLayer,
    Nothing,
}

fn run_image(version: &str, listing: Listing, arch: &str) -> support::app::RunImage {
    let run = support::app::RunImage::jammy(version, 2);
    let run = if arch == "amd64" { run } else { run.arch(arch, None) };
    match listing {
        Listing::SbomLayer => with_sbom(run, version, 100),
        Listing::Label => run.label("io.paketo.stack.packages", &paketo_label(100, version, arch)),
        Listing::Nothing => run,
    }
}

/// Pushes version `version` of the case's run image under `bench/run:latest`.
async fn push_run_case(pusher: &Pusher, version: &str, listing: Listing, platforms: usize) {
    use support::app::{push_index, push_run};
    if platforms == 1 {
        push_run(pusher, "bench/run", Some("latest"), &run_image(version, listing, "amd64"), Format::Oci).await;
        return;
    }
    let runs: Vec<_> = ["amd64", "arm64"].iter().map(|a| run_image(version, listing, a)).collect();
    let mut pushed = Vec::new();
    for run in &runs {
        pushed.push(push_run(pusher, "bench/run", None, run, Format::Oci).await);
    }
    let children: Vec<_> = pushed.iter().zip(&runs).collect();
    push_index(pusher, "bench/run", "latest", &children, None, Format::Oci).await;
}

/// Item 6: requests of the check that finds a new run image digest, counted at a proxy, for single
/// manifests and two-platform indexes listing 100 packages in the label, in an SBOM layer, or not
/// at all. "Before" is the requests the check made without package lists (the tag's HEAD and GET,
/// and a single manifest's config, which it reads for its platform); the rest are the lists'.
async fn package_costs() -> Value {
    let mut cases = Vec::new();
    for (name, listing, platforms) in [
        ("single manifest, label", Listing::Label, 1),
        ("single manifest, SBOM layer", Listing::SbomLayer, 1),
        ("single manifest, no list", Listing::Nothing, 1),
        ("2-platform index, label", Listing::Label, 2),
        ("2-platform index, SBOM layers", Listing::SbomLayer, 2),
        ("2-platform index, no list", Listing::Nothing, 2),
    ] {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let proxy = Proxy::start(&registry.host).await;
        push_run_case(&pusher, "1", listing, platforms).await;
        let run = format!("{}/bench/run:latest", proxy.host);
        pusher.push_image("bench/builder", Some("latest"), &BuilderSpec::jammy(&run).image(), Format::Oci).await;
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[monitor]\nstate = \"state.db\"\n[registries.\"{}\"]\nrequests_per_second = 0\n[[builders]]\nname = \"b\"\nimage = \"{}/bench/builder:latest\"\n",
            proxy.host, registry.host
        );
        let config = Arc::new(Config::parse(&dir.path().join("config.toml"), &text).unwrap());
        let ledger = Ledger::open(&dir.path().join("state.db")).unwrap();
        let monitor = Parts::new(config, ledger, Clock::System, None).unwrap().monitor;
        assert!(monitor.run_once().await, "{name}: first check");
        push_run_case(&pusher, "2", listing, platforms).await;
        proxy.clear();
        assert!(monitor.run_once().await, "{name}: the move");
        let seen = proxy.seen();
        let manifests = seen.iter().filter(|r| r.method == "GET" && r.path.contains("/manifests/")).count();
        let blobs = seen.iter().filter(|r| r.method == "GET" && r.path.contains("/blobs/")).count();
        let heads = seen.iter().filter(|r| r.method == "HEAD").count();
        // Without lists: HEAD and GET of the tag, plus a single manifest's config blob.
        let (base_manifests, base_blobs) = (1, usize::from(platforms == 1));
        let before = heads + base_manifests + base_blobs;
        proxy.clear();
        assert!(monitor.run_once().await, "{name}: unchanged");
        let unchanged = proxy.seen().len();
        say(format!(
            "6. {name}: {before} requests before, {} with package lists; {unchanged} per unchanged check",
            seen.len()
        ));
        cases.push(json!({
            "image": name, "platforms": platforms, "before": before, "after": seen.len(),
            "extra": seen.len() - before, "extra_manifests": manifests - base_manifests, "extra_blobs": blobs - base_blobs,
            // An index's platform configs are the lists' (a single manifest's is read anyway).
            "extra_configs": if platforms == 1 { 0 } else { platforms }, "extra_layers": blobs - base_blobs - if platforms == 1 { 0 } else { platforms },
            "unchanged_check_requests": unchanged,
            "requests": seen.iter().map(|r| format!("{} {}", r.method, r.path)).collect::<Vec<_>>(),
        }));
    }
    Value::Array(cases)
}

/// A loopback port free now. Picked in advance because the registry's hook and the daemon's
/// metrics address need it before the daemon starts; the benchmark runs one thing at a time, so
/// nothing races for it (the tests, which run in parallel, read the bound address instead).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
