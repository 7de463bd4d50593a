//! Every secret-bearing input set to a distinctive value, a daemon that checks, builds (with a
//! command that prints its environment and the Docker config it may read), alerts and serves:
//! no output, log, API answer, metric, payload, ledger byte or build environment holds a secret.

use crate::support;

use std::path::Path;

use base64::Engine as _;
use support::cnb::BuilderSpec;
use support::daemon::{Daemon, Workspace, run_with_env};
use support::images::{Format, Pusher};
use support::receiver::Receiver;
use support::registry::{Auth, TestRegistry};
use support::token::TokenServer;

const REGISTRY_PASSWORD: &str = "Rg-pass-7f3a9c1e";
const DOCKER_PASSWORD: &str = "Dk-pass-5b2d8e4f";
const API_TOKEN: &str = "Api-token-9c4e1a7b2d";
const ALERT_SECRET: &str = "Hmac-secret-3e8f0a6c";
const URL_TOKEN: &str = "Url-token-1d7b5c9e";
const URL_QUERY: &str = "Url-query-6a2f4b8d";

fn basic(user: &str, password: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

fn secrets() -> Vec<String> {
    [REGISTRY_PASSWORD, DOCKER_PASSWORD, API_TOKEN, ALERT_SECRET, URL_TOKEN, URL_QUERY]
        .map(String::from)
        .into_iter()
        .chain([basic("alice", REGISTRY_PASSWORD), basic("bob", DOCKER_PASSWORD)])
        .collect()
}

/// Fails naming the secret and where it was found.
fn assert_clean(place: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    for secret in secrets() {
        assert!(
            !text.contains(&secret),
            "{secret} leaked into {place}:\n{}",
            text.chars().take(4000).collect::<String>()
        );
    }
}

/// Bytes of every file of the SQLite ledger (the database, its WAL and shared memory).
fn ledger_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("state.db"))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect()
}

// Blocking calls (the binary, its log) must not stall the in-test servers: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaves_through_any_output() {
    let tokens_a = TokenServer::start(Some(("alice", REGISTRY_PASSWORD)), 300).await;
    let registry_a = TestRegistry::start_with(Auth::Token { realm: tokens_a.realm.clone() });
    let tokens_b = TokenServer::start(Some(("bob", DOCKER_PASSWORD)), 300).await;
    let registry_b = TestRegistry::start_with(Auth::Token { realm: tokens_b.realm.clone() });
    let pusher_a = Pusher::with_basic(&registry_a.host, "alice", REGISTRY_PASSWORD);
    let pusher_b = Pusher::with_basic(&registry_b.host, "bob", DOCKER_PASSWORD);
    let v1 = BuilderSpec::jammy(&format!("{}/demo/run:latest", registry_a.host));
    pusher_a.push_image("demo/builder", Some("latest"), &v1.image(), Format::Oci).await;
    pusher_b.push_image("demo/builder", Some("latest"), &v1.image(), Format::Oci).await;
    let receiver = Receiver::start().await;

    let ws = Workspace::new();
    let docker = ws.path("docker");
    std::fs::create_dir(&docker).unwrap();
    std::fs::write(
        docker.join("config.json"),
        format!(r#"{{"auths":{{"{}":{{"auth":"{}"}}}}}}"#, registry_b.host, basic("bob", DOCKER_PASSWORD)),
    )
    .unwrap();
    let build_env = ws.path("build-env.txt");
    let config = ws.config(&format!(
        r#"[monitor]
state = "state.db"
interval = "200ms"
jitter = "0s"

[server]
listen = "127.0.0.1:0"
api_token_env = "BM_E2E_API_TOKEN"

[registries."{a}"]
insecure = true
username = "alice"
password_env = "BM_E2E_REGISTRY_PASSWORD"

[registries."{b}"]
insecure = true
docker_config = "docker/config.json"

[[builders]]
name = "a"
image = "{a}/demo/builder:latest"
watch_run_image = false

[[builders]]
name = "b"
image = "{b}/demo/builder:latest"
watch_run_image = false

[[images]]
name = "app"
builder = "a"
image = "{a}/apps/app:latest"
policy = "rebuild"

[[alerts]]
name = "hook"
type = "webhook"
url_env = "BM_E2E_ALERT_URL"
secret_env = "BM_E2E_ALERT_SECRET"
events = ["*"]
backoff = "100ms"

[runner]
type = "exec"

[runner.exec]
rebuild = ["sh", "-c", "env > '{env}'; cat \"$DOCKER_CONFIG/config.json\"; echo; echo built"]
rebase = ["true"]
pass_env = ["DOCKER_CONFIG"]
"#,
        a = registry_a.host,
        b = registry_b.host,
        env = build_env.display(),
    ));
    let config = config.to_str().unwrap();
    let url = format!("{}/{URL_TOKEN}?sig={URL_QUERY}", receiver.url);
    let docker_dir = docker.display().to_string();
    let env = [
        ("BM_E2E_REGISTRY_PASSWORD", REGISTRY_PASSWORD),
        ("BM_E2E_API_TOKEN", API_TOKEN),
        ("BM_E2E_ALERT_URL", url.as_str()),
        ("BM_E2E_ALERT_SECRET", ALERT_SECRET),
        ("DOCKER_CONFIG", docker_dir.as_str()),
        ("BUILDER_MONITOR_LOG", "trace"),
    ];

    // Pin, move the builder, build and alert: once with text logs, once with the daemon.
    let pinned = run_with_env(&["run", "--once", "--config", config], &env, ws.dir.path());
    assert_eq!(pinned.code, Some(0), "{}", pinned.stderr);
    pusher_a
        .push_image(
            "demo/builder",
            Some("latest"),
            &v1.clone().bump("paketo-buildpacks/go", "4.15.0").image(),
            Format::Oci,
        )
        .await;
    let built = run_with_env(&["run", "--once", "--config", config], &env, ws.dir.path());
    assert_eq!(built.code, Some(0), "{}", built.stderr);
    let environment = std::fs::read_to_string(&build_env).expect("the build ran");
    assert!(environment.contains(&format!("DOCKER_CONFIG={docker_dir}")), "pass_env passes: {environment}");
    let payloads = receiver.wait_for_body("build.succeeded").await;
    let tail = payloads.json()["action"]["output_tail"].as_str().unwrap().to_string();
    assert!(tail.contains("\"auths\"") && tail.contains("built"), "the tail is there, scrubbed: {tail}");

    let mut daemon = Daemon::start_with_env(Path::new(config), &env);
    let server = daemon.server_addr();
    pusher_b
        .push_image("demo/builder", Some("latest"), &v1.bump("paketo-buildpacks/go", "4.16.0").image(), Format::Oci)
        .await;
    daemon.wait_for("a change of b", |v| v["message"] == "moved" && v["watch"] == "b");
    let http = support::http();
    let base = format!("http://{server}");
    let mut answers = Vec::new();
    for path in ["/healthz", "/readyz", "/metrics", "/api/v1/builders", "/api/v1/builders/a", "/api/v1/changes"] {
        for token in [None, Some(API_TOKEN)] {
            let mut request = http.get(format!("{base}{path}"));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.unwrap();
            let headers = format!("{:?}", response.headers());
            answers.push((format!("{path} (token: {})", token.is_some()), headers + &response.text().await.unwrap()));
        }
    }
    let refused =
        http.post(format!("{base}/api/v1/builders/a/check")).bearer_auth("wrong-token-0000000").send().await.unwrap();
    answers.push(("a refused POST".into(), refused.text().await.unwrap()));
    let (status, log) = daemon.terminate();
    assert!(status.success());
    assert!(answers.iter().any(|(p, body)| p.starts_with("/metrics") && body.contains("builder_monitor_")));

    let status_json = run_with_env(&["status", "--json", "--config", config], &env, ws.dir.path());
    let status_text = run_with_env(&["status", "--config", config], &env, ws.dir.path());
    let check = run_with_env(&["check", "--config", config], &env, ws.dir.path());
    assert_eq!(status_json.code, Some(0), "{}", status_json.stderr);
    assert!(status_json.stdout.contains("\"output_tail\""), "{}", status_json.stdout);

    for (what, out) in [
        ("the pinning run", &pinned),
        ("the building run", &built),
        ("status --json", &status_json),
        ("status", &status_text),
        ("check", &check),
    ] {
        assert_clean(&format!("stdout of {what}"), out.stdout.as_bytes());
        assert_clean(&format!("stderr of {what}"), out.stderr.as_bytes());
    }
    assert!(built.stderr.contains("TRACE"), "the log was at trace level");
    assert_clean("the daemon's log", log.join("\n").as_bytes());
    for (what, answer) in &answers {
        assert_clean(what, answer.as_bytes());
    }
    let received = receiver.received();
    assert!(received.len() >= 4, "pinned/changed/started/succeeded were delivered: {}", received.len());
    for r in &received {
        assert_clean("an alert payload", &r.body);
        let mut headers = r.headers.clone();
        headers.remove("x-builder-monitor-signature-256");
        assert_clean("alert headers", format!("{headers:?}").as_bytes());
    }
    for (name, bytes) in ledger_files(ws.dir.path()) {
        assert_clean(&name, &bytes);
    }
    assert_clean("the build command's environment", environment.as_bytes());
    assert_clean("the output tail", tail.as_bytes());
}
