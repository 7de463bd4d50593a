//! Items 1 and 2: requests per unchanged check and checks per second, in process and by the daemon,
//! against the registry's HEAD ceiling and `skopeo inspect`.

use super::*;

pub(crate) struct InProcess {
    pub(crate) monitor: Arc<Monitor>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) names: Arc<Vec<String>>,
    pub(crate) _dir: tempfile::TempDir,
}

impl InProcess {
    pub(crate) fn new(host: &str, upstream: &str, n: usize) -> Self {
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

    pub(crate) fn metric(&self, name: &str) -> f64 {
        metric_sum(&self.metrics.encode(), name)
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Limit {
    Cycles(usize),
    For(Duration),
}

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Loop {
    pub(crate) unchanged: usize,
    pub(crate) pinned_or_moved: usize,
    pub(crate) failed: usize,
    pub(crate) seconds: f64,
}

impl Loop {
    pub(crate) fn checks(&self) -> usize {
        self.unchanged + self.pinned_or_moved + self.failed
    }
    pub(crate) fn rate(&self) -> f64 {
        self.checks() as f64 / self.seconds
    }
}

/// `CONCURRENCY` workers checking the builders round robin, for a number of cycles or a time.
pub(crate) async fn check_loop(setup: &InProcess, limit: Limit) -> Loop {
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
pub(crate) fn token_scope(path: &str) -> String {
    reqwest::Url::parse(&format!("http://x{path}"))
        .ok()
        .and_then(|u| u.query_pairs().find(|(k, _)| k == "scope").map(|(_, v)| v.into_owned()))
        .unwrap_or_default()
}

/// Item 1: requests per unchanged check, counted at a proxy in front of the registry; with bearer
/// auth, token fetches are counted (and timed, per scope) at a second proxy in front of the token
/// server.
pub(crate) async fn requests_per_check(host: &str, tokens: Option<&Proxy>, window: Duration) -> Value {
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

pub(crate) fn parse_after(text: &str, marker: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.contains(marker))?;
    let rest = &line[line.find(marker)? + marker.len()..];
    rest.split_whitespace().next()?.trim_end_matches(',').parse().ok()
}

/// wrk at `CONCURRENCY` with keep-alive over the fleet's paths; `None` when wrk is missing.
pub(crate) fn wrk(url: &str, paths: &Path, method: &str, seconds: u64, dir: &Path) -> Option<Value> {
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
pub(crate) fn ab_head(url: &str, seconds: u64, dir: &Path) -> Option<Value> {
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
pub(crate) async fn throughput(fleet: &Fleet, window: Duration) -> Value {
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
pub(crate) async fn daemon_rates(fleet: &Fleet, window: Duration) -> Value {
    let dir = tempfile::tempdir().expect("temp dir");
    let http = support::http();
    let port = free_port();
    let text = config_text(&fleet.host, &fleet.host, FLEET, "100ms", "0s", &format!("listen = \"127.0.0.1:{port}\""));
    let config = dir.path().join("config.toml");
    std::fs::write(&config, &text).expect("write config");
    let once = || {
        let started = Instant::now();
        let status = Command::new(daemon_binary())
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
