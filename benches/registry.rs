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
//! 15), `BENCH_SIZES` (default `100,1000,10000`), `BENCH_DAEMON` (another build's binary for the
//! daemon runs), `BENCH_PIN=0` (no core pinning; by default the registry runs on core 0 and
//! everything else on core 1, see `fleet::pinned`).

#[path = "registry/daemon.rs"]
mod daemon;
#[path = "registry/fleet.rs"]
mod fleet;
#[path = "registry/latency.rs"]
mod latency;
#[path = "registry/packages.rs"]
mod packages;
#[path = "registry/process.rs"]
mod process;
#[path = "registry/report.rs"]
mod report;
#[path = "../tests/support/mod.rs"]
mod support;
#[path = "registry/throughput.rs"]
mod throughput;
use daemon::*;
use fleet::*;
use latency::*;
use packages::*;
use process::*;
use report::*;
use throughput::*;

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
        "daemon": daemon_binary().display().to_string(),
        "pinning": pinned().then_some(PINNING),
        "date": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
}

/// `$CARGO_TARGET_DIR/bench`, or `target/bench`.
fn report_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("target")).join("bench")
}

/// The daemon the benchmark runs: this build's (`cargo bench`: the `bench` profile), or another
/// build's named by `BENCH_DAEMON` (the `release` or `dist` binary, for their memory).
fn daemon_binary() -> PathBuf {
    std::env::var_os("BENCH_DAEMON").map_or_else(|| PathBuf::from(BINARY), PathBuf::from)
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
