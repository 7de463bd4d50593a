//! Hostile inputs end to end: malformed secret-bearing files and variables, out-of-range config
//! values, hostile HTTP clients and registry-controlled strings.

use crate::support;

use std::path::Path;

use support::daemon::{Output, Workspace, run_with_env};
use support::receiver::ClosedPort;

/// Every output stream of one run, for grepping.
fn all_output(out: &Output) -> String {
    format!("{}\n{}", out.stdout, out.stderr)
}

fn assert_no_secret(out: &Output, secrets: &[&str], what: &str) {
    let text = all_output(out);
    for secret in secrets {
        assert!(!text.contains(secret), "{what} prints the secret {secret:?}:\n{text}");
    }
}

/// Runs `check`, `run --once` and `resolve --config` at trace level.
fn run_all(config: &Path, env: &[(&str, &str)], registry: &str) -> Vec<(String, Output)> {
    let cwd = config.parent().unwrap();
    let config = config.to_str().unwrap();
    let mut env = env.to_vec();
    env.push(("BUILDER_MONITOR_LOG", "trace"));
    let image = format!("{registry}/demo/b:latest");
    [
        vec!["check", "--config", config],
        vec!["run", "--once", "--config", config],
        vec!["resolve", &image, "--config", config],
    ]
    .into_iter()
    .map(|args| (args.join(" "), run_with_env(&args, &env, cwd)))
    .collect()
}

#[test]
fn malformed_secret_files_and_variables_never_print_their_values() {
    let ws = Workspace::new();
    // base64 of user:password, written as a bare string (the form the issue found printed).
    let docker_secret = "Y2ZnLXVzZXI6Y2ZnLXBhc3N3b3JkLVNFQ1JFVDE=";
    std::fs::write(ws.path("bare.json"), format!(r#"{{"auths":{{"127.0.0.1:1":"{docker_secret}"}}}}"#)).unwrap();
    std::fs::write(ws.path("typed.json"), r#"{"auths":{"127.0.0.1:2":{"auth":{"v":"dock-SECRET2"}}}}"#).unwrap();
    std::fs::write(ws.path("helpers.json"), r#"{"credHelpers":{"127.0.0.1:3":["dock-SECRET3"]}}"#).unwrap();
    std::fs::write(ws.path("nobase64.json"), r#"{"auths":{"127.0.0.1:4":{"auth":"dock-SECRET4!!"}}}"#).unwrap();
    let mut password = b"pw-SECRET5".to_vec();
    password.extend_from_slice(&[0xff, 0xfe]);
    std::fs::write(ws.path("password"), password).unwrap();
    std::fs::write(ws.path("url"), "ftp://hooks.example.com/url-SECRET6\n").unwrap();
    std::fs::write(ws.path("hmac"), [0xffu8, b'h', b'-', b'S', b'E', b'C', b'R', b'E', b'T', b'7']).unwrap();
    let config = ws.config(
        r#"
[registries."127.0.0.1:1"]
docker_config = "bare.json"
[registries."127.0.0.1:2"]
docker_config = "typed.json"
[registries."127.0.0.1:3"]
docker_config = "helpers.json"
[registries."127.0.0.1:4"]
docker_config = "nobase64.json"
[registries."127.0.0.1:5"]
username = "me"
password_file = "password"

[server]
api_token_env = "BM_HARDENING_TOKEN"

[[builders]]
name = "b"
image = "127.0.0.1:1/demo/b:latest"

[[alerts]]
name = "env"
type = "webhook"
url_env = "BM_HARDENING_URL"

[[alerts]]
name = "file"
type = "webhook"
url_file = "url"
secret_file = "hmac"
"#,
    );
    let env = [("BM_HARDENING_TOKEN", "tok-SECRET8"), ("BM_HARDENING_URL", "not a URL url-SECRET9")];
    let secrets = [
        docker_secret,
        "Y2ZnLXVz",
        "SECRET2",
        "SECRET3",
        "SECRET4",
        "SECRET5",
        "SECRET6",
        "SECRET7",
        "SECRET8",
        "SECRET9",
    ];
    for (what, out) in run_all(&config, &env, "127.0.0.1:1") {
        assert_eq!(out.code, Some(2), "{what} refuses the config: {}", out.stderr);
        assert_no_secret(&out, &secrets, &what);
    }
    let out = run_with_env(&["check", "--config", config.to_str().unwrap()], &env, ws.dir.path());
    for shape in [
        "`auths.\"127.0.0.1:1\"` must be an object",
        "`auths.\"127.0.0.1:2\".auth` must be a string",
        "`credHelpers.\"127.0.0.1:3\"` must be a string",
        "the `auth` entry for 127.0.0.1:4 is not base64",
        "did not contain valid UTF-8",
        "the API token in BM_HARDENING_TOKEN is too short",
    ] {
        assert!(out.stderr.contains(shape), "check says {shape:?}:\n{}", out.stderr);
    }
}

#[test]
fn secrets_in_use_stay_out_of_output_when_requests_fail() {
    let ws = Workspace::new();
    let closed_port = ClosedPort::new();
    let closed = format!("127.0.0.1:{}", closed_port.port());
    std::fs::write(
        ws.path("kubeconfig"),
        "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: [\"kube-SECRET1\"]\n",
    )
    .unwrap();
    let config = ws.config(&format!(
        r#"
[monitor]
state = "state.db"

[registries."{closed}"]
username = "me"
password_env = "BM_HARDENING_PASSWORD"

[[builders]]
name = "b"
image = "{closed}/demo/b:latest"

[[alerts]]
name = "hook"
type = "webhook"
url_env = "BM_HARDENING_URL"
secret_env = "BM_HARDENING_HMAC"
events = ["*"]
"#
    ));
    let env = [
        ("BM_HARDENING_PASSWORD", "pw-SECRET2\u{1b}[2J"),
        ("BM_HARDENING_URL", &format!("http://{closed}/hooks/url-SECRET3?token=url-SECRET4")),
        ("BM_HARDENING_HMAC", "hmac-SECRET5"),
    ];
    let secrets = ["SECRET2", "SECRET3", "SECRET4", "SECRET5"];
    for (what, out) in run_all(&config, &env, &closed) {
        if !what.starts_with("check") {
            assert_ne!(out.code, Some(0), "{what} fails against a closed port");
        }
        assert_no_secret(&out, &secrets, &what);
    }

    // A malformed kubeconfig: its YAML parser quotes values.
    let kube = ws.path("kube.toml");
    std::fs::write(&kube, "[monitor]\nstate = \"kubernetes\"\n[kubernetes]\nkubeconfig = \"kubeconfig\"\n[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:9/b:1\"\n").unwrap();
    let out = run_with_env(&["run", "--once", "--config", kube.to_str().unwrap()], &[], ws.dir.path());
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("not valid YAML of the kubeconfig shape at line"), "{}", out.stderr);
    assert_no_secret(&out, &["SECRET1"], "run --once with a malformed kubeconfig");
}

// ---- config bounds ---------------------------------------------------------------------------

use builder_monitor::config::Config;
use proptest::prelude::*;

/// Where a numeric key lives, and what kind of value it takes.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Duration,
    Float,
    Integer,
}

/// Every numeric key of the config: (table header, key, kind).
const NUMERIC_KEYS: &[(&str, &str, Kind)] = &[
    ("[monitor]", "interval", Kind::Duration),
    ("[monitor]", "jitter", Kind::Duration),
    ("[monitor]", "history", Kind::Integer),
    ("[server]", "hooks_per_second", Kind::Float),
    ("[registries.\"127.0.0.1:9\"]", "requests_per_second", Kind::Float),
    ("[registries.\"127.0.0.1:9\"]", "burst", Kind::Integer),
    ("[registries.\"127.0.0.1:9\"]", "timeout", Kind::Duration),
    ("[registries.\"127.0.0.1:9\"]", "max_attempts", Kind::Integer),
    ("[registries.\"127.0.0.1:9\"]", "backoff", Kind::Duration),
    ("[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:9/demo/b:1\"", "interval", Kind::Duration),
    ("[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:9/demo/b:1\"", "jitter", Kind::Duration),
    ("[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:9/demo/b:1\"", "settle", Kind::Duration),
    ("[[alerts]]\nname = \"a\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:9/\"", "timeout", Kind::Duration),
    ("[[alerts]]\nname = \"a\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:9/\"", "backoff", Kind::Duration),
    ("[[alerts]]\nname = \"a\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:9/\"", "give_up_after", Kind::Duration),
    ("[runner]", "max_concurrent", Kind::Integer),
    ("[runner]", "max_registry_rebases", Kind::Integer),
    ("[runner]", "max_attempts", Kind::Integer),
    ("[runner]", "backoff", Kind::Duration),
    ("[runner.exec]\nrebuild = [\"true\"]\nrebase = [\"true\"]", "timeout", Kind::Duration),
    ("[runner.kubernetes]", "active_deadline", Kind::Duration),
    ("[runner.kubernetes]", "ttl_after_finished", Kind::Duration),
    ("[runner.kubernetes]", "backoff_limit", Kind::Integer),
    ("[kubernetes]", "lease_duration", Kind::Duration),
    ("[kubernetes]", "renew_deadline", Kind::Duration),
    ("[kubernetes]", "retry_period", Kind::Duration),
];

fn value_text(kind: Kind, number: u64, float: f64, unit: &str) -> String {
    match kind {
        Kind::Duration => format!("\"{number}{unit}\""),
        Kind::Integer => format!("{}", number as i64),
        Kind::Float if float.is_nan() => "nan".to_string(),
        Kind::Float if float.is_infinite() => if float > 0.0 { "inf" } else { "-inf" }.to_string(),
        Kind::Float => format!("{float:e}"),
    }
}

/// One config text setting the chosen keys; a table header is written once, with its keys.
fn config_with(keys: &[(usize, String)]) -> String {
    let mut tables: Vec<(&str, Vec<String>)> = Vec::new();
    for (index, value) in keys {
        let (header, key, _) = NUMERIC_KEYS[*index];
        let line = format!("{key} = {value}");
        match tables.iter_mut().find(|(h, _)| *h == header) {
            Some((_, lines)) if !lines.iter().any(|l| l.starts_with(&format!("{key} ="))) => lines.push(line),
            Some(_) => {}
            None => tables.push((header, vec![line])),
        }
    }
    let mut text = String::from("[monitor]\nstate = \"state.db\"\n");
    if let Some((_, lines)) = tables.iter().find(|(h, _)| *h == "[monitor]") {
        text.push_str(&lines.join("\n"));
        text.push('\n');
    }
    let builder = NUMERIC_KEYS[9].0;
    if !tables.iter().any(|(h, _)| *h == builder) {
        tables.push((builder, Vec::new()));
    }
    for (header, lines) in tables.iter().filter(|(h, _)| *h != "[monitor]") {
        text.push_str(&format!("\n{header}\n{}\n", lines.join("\n")));
    }
    text
}

/// What the daemon does with the numbers of an accepted config, short of the network: limiter
/// quotas, the timetable, settle, alert clients.
fn exercise(config: &Config) {
    use builder_monitor::schedule::Timetable;
    // The alert senders build HTTP clients: the process's TLS provider first, whichever test of
    // this binary runs first (or alone, as nextest runs each).
    builder_monitor::install_crypto_provider();
    for settings in config.registries.values() {
        if let Some(limiter) = builder_monitor::registry::rate_limiter(settings) {
            let _ = limiter.check();
        }
    }
    if let Some(server) = &config.server {
        let limiter = governor::RateLimiter::keyed(builder_monitor::server::hook_quota(server.hooks_per_second));
        let _ = limiter.check_key(&std::net::IpAddr::from([127, 0, 0, 1]));
    }
    let now = tokio::time::Instant::now();
    let wall = chrono::Utc::now();
    let mut table = Timetable::default();
    for b in &config.builders {
        let id = table.add(&b.name, (), b.jitter, now);
        table.wake(id, now);
        let id = table.pop_due(now).expect("due after a wake");
        table.finished(id, &b.schedule, b.jitter, now, wall);
        let _ = table.next_due();
        let since = wall - chrono::Duration::days(400);
        let _ = builder_monitor_core::schedule::settle(b.settle, Some(("sha256:a", since)), "sha256:a", wall);
    }
    for alert in &config.alerts {
        builder_monitor::alert::Sender::new(alert.clone()).expect("an alert client");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_numbers_in_every_numeric_key_are_refused_or_safe(
        picks in proptest::collection::vec(
            (0..NUMERIC_KEYS.len(), any::<u64>(), 0u32..64, prop_oneof![any::<f64>(), 0.0f64..20_000.0, Just(1e-30), Just(0.0)],
             prop::sample::select(vec!["ns", "us", "ms", "s", "m", "h", "d", "w", "M", "y"])),
            1..6,
        )
    ) {
        let keys: Vec<(usize, String)> = picks
            .iter()
            .map(|(index, number, shift, float, unit)| {
                // Small numbers as often as huge ones: most bounds sit low.
                let number = if shift % 2 == 0 { number >> shift } else { number % 1000 };
                (*index, value_text(NUMERIC_KEYS[*index].2, number, *float, unit))
            })
            .collect();
        let text = config_with(&keys);
        let dir = std::env::temp_dir();
        match Config::parse(&dir.join("prop.toml"), &text) {
            Ok(config) => exercise(&config),
            Err(err) => {
                let message = err.to_string();
                prop_assert!(message.lines().all(|l| l.starts_with(&format!("{}:", dir.join("prop.toml").display()))),
                    "every problem has FILE:LINE:COL: {message}");
            }
        }
    }
}

/// Every numeric key at its largest accepted value, and the smallest rates: `run --once` checks
/// (against a closed port), schedules and exits with a failed check, never a panic.
#[test]
fn run_once_survives_every_numeric_key_at_its_bound() {
    let ws = Workspace::new();
    let closed_port = ClosedPort::new();
    let closed = format!("127.0.0.1:{}", closed_port.port());
    let config = ws.config(&format!(
        r#"
[monitor]
state = "state.db"
interval = "1y"
jitter = "1y"
history = 1000000

[server]
listen = "127.0.0.1:0"
hooks_per_second = 0.001

[registries."{closed}"]
requests_per_second = 0.001
burst = 10000
timeout = "1y"
backoff = "1y"
max_attempts = 1

[[builders]]
name = "b"
image = "{closed}/demo/b:1"
settle = "1y"
jitter = "1y"

[[alerts]]
name = "a"
type = "webhook"
url = "http://{closed}/"
timeout = "1y"
backoff = "1y"
give_up_after = "1y"

[runner]
backoff = "1y"
max_attempts = 100
"#
    ));
    let out = run_with_env(&["run", "--once", "--config", config.to_str().unwrap()], &[], ws.dir.path());
    assert_eq!(out.code, Some(1), "a failed check, not a panic:\n{}", out.stderr);
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);

    let empty = ws.path("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let run = run_with_env(&["run", "--config", empty.to_str().unwrap()], &[], ws.dir.path());
    assert_eq!(run.code, Some(2), "run refuses an empty config:\n{}", run.stderr);
    assert!(run.stderr.contains("error: ") && run.stderr.contains("no [[builders]] configured"), "{}", run.stderr);
    let check = run_with_env(&["check", "--config", empty.to_str().unwrap()], &[], ws.dir.path());
    assert_eq!(check.code, Some(0), "still a valid config for resolve or alert test:\n{}", check.stderr);
    assert!(
        check.stderr.contains("warning: ") && check.stderr.contains("no [[builders]] configured"),
        "{}",
        check.stderr
    );
}

// ---- registry strings in text output -------------------------------------------------------------

use support::cnb::BuilderSpec;
use support::images::{Format, Pusher};
use support::registry::TestRegistry;

/// No terminal control survives, and no line is forged.
fn assert_terminal_safe(out: &Output, what: &str) {
    let text = all_output(out);
    for c in ['\u{1b}', '\u{7}', '\r'] {
        assert!(!text.contains(c), "{what} prints {c:?} raw:\n{text}");
    }
    assert!(!text.lines().any(|l| l.starts_with("FORGED")), "{what} has a forged line:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_from_registries_are_escaped_in_text_output_and_logs() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let evil_id = "evil/bp\u{1b}[31m\nFORGED level=ERROR";
    let mut spec = BuilderSpec::jammy(&format!("{}/demo/run:latest", registry.host));
    spec.buildpacks.push((evil_id.into(), "1.0\r\nFORGED".into(), "sha256:evil-1".into()));
    spec.description = "about\u{1b}]0;title\u{7}\nFORGED".into();
    spec.stack_id = "stack\nFORGED".into();
    let old = pusher.push_image("demo/builder", Some("latest"), &spec.image(), Format::Oci).await;
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\n[[builders]]\nname = \"b\"\nimage = \"{}/demo/builder:latest\"\nwatch_run_image = false\n",
        registry.host
    ));
    let config = config.to_str().unwrap();
    let first = run_with_env(&["run", "--once", "--config", config], &[], ws.dir.path());
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    spec.buildpacks.last_mut().unwrap().1 = "2.0\u{1b}[2J\nFORGED".into();
    spec.buildpacks.last_mut().unwrap().2 = "sha256:evil-2".into();
    let new = pusher.push_image("demo/builder", Some("latest"), &spec.image(), Format::Oci).await;
    let moved = run_with_env(&["run", "--once", "--config", config], &[], ws.dir.path());
    assert_eq!(moved.code, Some(0), "{}", moved.stderr);
    assert!(moved.stderr.contains("evil/bp\\x1b[31m\\nFORGED"), "the id is logged, escaped:\n{}", moved.stderr);
    let status = run_with_env(&["status", "--config", config], &[], ws.dir.path());
    assert!(status.stdout.contains("\\x1b[2J\\nFORGED"), "{}", status.stdout);
    let image = format!("{}/demo/builder", registry.host);
    let resolve = run_with_env(&["resolve", &format!("{image}:latest")], &[], ws.dir.path());
    assert!(resolve.stdout.contains("about\\x1b]0;title\\x07\\nFORGED"), "{}", resolve.stdout);
    let diff = run_with_env(
        &["diff", &format!("{image}@{}", old.digest), &format!("{image}@{}", new.digest)],
        &[],
        ws.dir.path(),
    );
    assert!(diff.stdout.starts_with("rebuild — "), "{}", diff.stdout);
    for (what, out) in
        [("run --once", &first), ("run --once", &moved), ("status", &status), ("resolve", &resolve), ("diff", &diff)]
    {
        assert_eq!(out.code, Some(0), "{what}: {}", out.stderr);
        assert_terminal_safe(out, what);
    }
}

#[test]
fn start_up_says_when_the_read_api_is_public_although_a_token_is_configured() {
    let ws = Workspace::new();
    let config = ws.config(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\n[server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"BM_HARDENING_API\"\n[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:9/demo/b:1\"\n",
    );
    let mut daemon = support::daemon::Daemon::start_with_env(&config, &[("BM_HARDENING_API", "a-token-of-20-chars!")]);
    let line = daemon.wait_for("the public read API warning", |v| {
        v["message"].as_str().is_some_and(|m| m.contains("the read API (/api/v1/...) is public"))
    });
    assert_eq!(line["level"], "WARN", "{line}");
    daemon.kill();
}

// ---- builder label size limits -------------------------------------------------------------------

/// A builder like the report's: 16,000 buildpacks, a 6.5 MB config.
fn huge_spec(registry: &str, lifecycle: &str) -> BuilderSpec {
    let mut spec = BuilderSpec::jammy(&format!("{registry}/demo/run:latest"));
    spec.buildpacks = (0..16_000)
        .map(|i| {
            let id = format!("example-buildpacks/buildpack-{i:05}");
            (id, "1.2.3".to_string(), format!("sha256:{i:032}"))
        })
        .collect();
    spec.order = spec.buildpacks.iter().map(|b| b.0.clone()).collect();
    spec.lifecycle = lifecycle.into();
    spec
}

fn builder_config(registry: &str, names: &[&str]) -> String {
    let mut text = "[monitor]\nstate = \"state.db\"\ninterval = \"1s\"\njitter = \"0s\"\n".to_string();
    for name in names {
        text.push_str(&format!(
            "[[builders]]\nname = \"{name}\"\nimage = \"{registry}/demo/{name}:latest\"\nwatch_run_image = false\n"
        ));
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_builder_config_moves_as_unknown_with_a_note_and_bounded_event_and_status() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let v1 = huge_spec(&registry.host, "0.21.13").image();
    let pushed = pusher.push_image("demo/huge", Some("latest"), &v1, Format::Oci).await;
    let size = support::http()
        .head(format!("http://{}/v2/demo/huge/blobs/{}", registry.host, pushed.config_digest))
        .send()
        .await
        .unwrap()
        .headers()["content-length"]
        .to_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    assert!((6_000_000..8_000_000).contains(&size), "a config of the report's size: {size} bytes");
    let ws = Workspace::new();
    let config = ws.config(&builder_config(&registry.host, &["huge"]));
    let mut daemon = support::daemon::Daemon::start(&config);
    daemon.wait_for_event("builder.pinned");
    let v2 = huge_spec(&registry.host, "0.21.14").image();
    pusher.push_image("demo/huge", Some("latest"), &v2, Format::Oci).await;
    let line = daemon.wait_for("builder.changed", |v| {
        v["target"] == "builder_monitor_core::event" && v["event_type"] == "builder.changed"
    });
    let event_text = line["event"].as_str().unwrap();
    let event: serde_json::Value = serde_json::from_str(event_text).unwrap();
    assert_eq!(event["change"]["kind"], "unknown", "{event}");
    let note = event["change"]["note"].as_str().unwrap_or_default();
    assert!(note.contains("over the size limits"), "{note}");
    assert!(event_text.len() < 4096, "the event is {} bytes", event_text.len());
    daemon.kill();
    let status = run_with_env(&["status", "--json", "--config", config.to_str().unwrap()], &[], ws.dir.path());
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    assert!(status.stdout.len() < 16 * 1024, "status is {} bytes", status.stdout.len());
}

/// A `/proc/PID/status` field in KiB.
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(&format!("{field}:")))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The measurement behind docs/security.md's memory claim (a manual run, release build):
/// `cargo test --profile dist --test registry -- --ignored --nocapture peak_rss`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run by hand in release mode"]
async fn peak_rss_with_four_huge_builders_moving_at_once() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let names = ["huge-a", "huge-b", "huge-c", "huge-d"];
    for name in names {
        let image = huge_spec(&registry.host, &format!("0.21.13-{name}")).image();
        pusher.push_image(&format!("demo/{name}"), Some("latest"), &image, Format::Oci).await;
    }
    let ws = Workspace::new();
    let config = ws.config(&builder_config(&registry.host, &names));
    let mut daemon = support::daemon::Daemon::start(&config);
    for _ in names {
        daemon.wait_for_event("builder.pinned");
    }
    let pinned = status_kib(daemon.pid(), "VmHWM").unwrap();
    let images: Vec<_> =
        names.iter().map(|name| huge_spec(&registry.host, &format!("0.21.14-{name}")).image()).collect();
    let pusher = &pusher;
    futures::future::join_all(names.iter().zip(&images).map(|(name, image)| async move {
        pusher.push_image(&format!("demo/{name}"), Some("latest"), image, Format::Oci).await
    }))
    .await;
    for _ in names {
        daemon.wait_for_event("builder.changed");
    }
    let moved = status_kib(daemon.pid(), "VmHWM").unwrap();
    let rss = status_kib(daemon.pid(), "VmRSS").unwrap();
    println!(
        "peak RSS (VmHWM): {} MiB after pinning four 6.5 MB builders, {} MiB after all four moved; RSS now {} MiB",
        pinned / 1024,
        moved / 1024,
        rss / 1024
    );
    assert!(moved < 64 * 1024, "peak RSS {} KiB", moved);
}
