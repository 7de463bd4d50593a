//! Item 3: change-to-event latency of the daemon binary, polling and with the push hook.

use super::*;

pub(crate) fn stats(values: &[f64]) -> Value {
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
pub(crate) struct Streaming {
    pub(crate) child: Child,
    pub(crate) lines: std::sync::mpsc::Receiver<(Instant, String)>,
    pub(crate) spawned: Instant,
    /// Every line with its arrival time, and the benchmark's own notes, for the report directory.
    pub(crate) transcript: Vec<String>,
}

impl Streaming {
    pub(crate) fn spawn(config: &Path) -> Self {
        let mut child = Command::new(daemon_binary())
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

    pub(crate) fn note(&mut self, at: Instant, text: &str) {
        let t = at.saturating_duration_since(self.spawned).as_secs_f64();
        self.transcript.push(format!("{t:9.4} {text}"));
    }

    /// The next committed event of `event_type` (its document), or `None` after `patience`; with
    /// the time the last push hook that woke a check before it arrived.
    pub(crate) fn wait_event(&mut self, event_type: &str, patience: Duration) -> Option<(Value, Option<Instant>)> {
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

    pub(crate) fn terminate(mut self) -> Option<i32> {
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
pub(crate) async fn measure_latency(
    pusher: &Pusher,
    host: &str,
    repo: &str,
    text: &str,
    hook_base: Option<&str>,
) -> Value {
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

pub(crate) async fn latency() -> Value {
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
