//! Items 4 and 5: the daemon binary under load: memory and CPU per fleet size, the soak, start-up.

use super::*;

/// A `builder-monitor run` process with its log in a file.
pub(crate) struct Running {
    pub(crate) child: Child,
    pub(crate) pid: String,
    pub(crate) spawned: Instant,
    pub(crate) spawned_wall: SystemTime,
    pub(crate) base: String,
    pub(crate) log: PathBuf,
}

impl Running {
    pub(crate) fn spawn(dir: &Path, text: &str, port: u16, filter: &str) -> Self {
        let config = dir.join("config.toml");
        std::fs::write(&config, text).expect("write config");
        let log = dir.join(format!("daemon-{}.log", rand_suffix()));
        let stderr = std::fs::File::create(&log).expect("log file");
        let spawned_wall = SystemTime::now();
        let spawned = Instant::now();
        let mut command = Command::new(daemon_binary());
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
    pub(crate) async fn wait_ready(&mut self, http: &reqwest::Client, poll: Duration, patience: Duration) -> Duration {
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

    pub(crate) async fn metrics(&self, http: &reqwest::Client) -> String {
        let r = http.get(format!("{}/metrics", self.base)).send().await.expect("GET /metrics");
        String::from_utf8_lossy(&r.bytes().await.expect("metrics body")).into_owned()
    }

    /// SIGTERM, then the exit (killed after 20 s).
    pub(crate) fn terminate(mut self) -> Option<i32> {
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
    pub(crate) fn logged_after_spawn(&self, wanted: impl Fn(&Value) -> bool) -> Option<f64> {
        let text = std::fs::read_to_string(&self.log).ok()?;
        let spawned: chrono::DateTime<chrono::Utc> = self.spawned_wall.into();
        text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|v| wanted(v)).and_then(|v| {
            let at = chrono::DateTime::parse_from_rfc3339(v["timestamp"].as_str()?).ok()?;
            Some((at.with_timezone(&chrono::Utc) - spawned).num_microseconds()? as f64 / 1e6)
        })
    }
}

pub(crate) fn rand_suffix() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// Rate limit of item 5's limited warm start: requests per second and burst.
pub(crate) const STARTUP_RPS: u64 = 1_000;
pub(crate) const STARTUP_BURST: u64 = 16;

/// Item 5: time to the first check and to every builder checked, over the whole fleet (10,000 tags
/// by default): cold (empty ledger), warm (every builder pinned), and warm under a rate limit, whose
/// floor is the time the limit allows for one `HEAD` per builder.
pub(crate) async fn startup(fleet: &Fleet) -> Value {
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
pub(crate) struct DaemonRun {
    pub(crate) builders: usize,
    pub(crate) seconds_to_ready: f64,
    pub(crate) cpu_at_ready: f64,
    pub(crate) rss_at_ready_kib: u64,
    pub(crate) cpu_total: f64,
    pub(crate) peak_rss_kib: u64,
    pub(crate) rss_end_kib: u64,
    /// `RssAnon` / `RssFile` at the end: heap and stacks, and mapped file pages (the binary's text).
    pub(crate) rss_anon_end_kib: u64,
    pub(crate) rss_file_end_kib: u64,
    pub(crate) steady_seconds: f64,
    pub(crate) steady_checks: f64,
    pub(crate) steady_requests: f64,
    pub(crate) samples: Vec<Sample>,
    pub(crate) ready_at: f64,
    pub(crate) exit_code: Option<i32>,
}

impl DaemonRun {
    pub(crate) fn steady_samples(&self) -> Vec<Sample> {
        self.samples.iter().copied().filter(|s| s.t >= self.ready_at).collect()
    }

    pub(crate) fn to_json(&self) -> Value {
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
pub(crate) async fn daemon_run(fleet: &Fleet, n: usize, interval: u64, jitter: u64, steady: Duration) -> DaemonRun {
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
pub(crate) async fn memory(fleet: &Fleet) -> Value {
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
pub(crate) async fn soak(fleet: &Fleet, seconds: u64) -> Value {
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
