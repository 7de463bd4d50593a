//! `deploy` by hand: the real binary's refusals (exit 2) and dry run, and the daemon's
//! `POST /api/v1/images/{name}/deploy`, in process, recording exactly one pending deploy action.

use crate::support;

use std::sync::Arc;

use builder_monitor::config::Config;
use builder_monitor::daemon::Parts;
use builder_monitor::ledger::{ActionState, Ledger};
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor::schedule::Clock;
use builder_monitor::server::{self, ServerState};
use builder_monitor_core::deploy::{Undo, Workload, WorkloadKind};
use builder_monitor_core::plan::ActionKind;
use serde_json::{Value, json};
use support::daemon::Workspace;
use support::images::{Format, Image, Pusher};
use support::registry::TestRegistry;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "test-api-token-0123456789";

fn digest(fill: char) -> String {
    format!("sha256:{}", fill.to_string().repeat(64))
}

/// Two app images of one builder at `host`; `deploy` (TOML) goes into petclinic's entry.
fn config_text(host: &str, deploy: &str) -> String {
    format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\n\n[server]\nlisten = \"127.0.0.1:0\"\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/cnb/builder:latest\"\n\n\
         [[images]]\nname = \"petclinic\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/petclinic:latest\"\n{deploy}\n\
         [[images]]\nname = \"orders\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/orders:latest\"\n"
    )
}

fn workload() -> Workload {
    Workload {
        kind: WorkloadKind::Deployment,
        namespace: "shop".into(),
        name: "petclinic".into(),
        container: Some("app".into()),
        gitops_owned: Default::default(),
    }
}

/// Each mistake is a usage error (exit 2) that says what to fix, and nothing is written.
#[test]
fn the_command_refuses_what_it_cannot_deploy() {
    let ws = Workspace::new();
    let config = ws.config(&config_text("127.0.0.1:9", ""));
    let config = config.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["deploy", "nope", "--config", config], "no image \"nope\" in [[images]] (configured: petclinic, orders)"),
        (&["deploy", "petclinic", "--to", "sha256:abc", "--config", config], "--to sha256:abc: not a digest"),
        (&["deploy", "petclinic", "--to", "latest", "--dry-run", "--config", config], "--to latest: not a digest"),
        (
            &["deploy", "orders", "--dry-run", "--config", config],
            "orders is deployed nowhere: add deploy = [{ kind = \"Deployment\", namespace = \"…\", name = \"…\" }]",
        ),
    ];
    for (args, said) in cases {
        let out = ws.run(args);
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(said), "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
    }
    assert!(!ws.path("state.db").exists(), "no ledger was created");
}

/// `--dry-run` prints the plan and records nothing; without it the action is recorded for the
/// daemon. Skipped (saying so) while the config does not read `[[images]] deploy` yet.
#[tokio::test]
async fn a_dry_run_records_nothing_and_a_deploy_records_one_action() {
    let registry = TestRegistry::start();
    let pushed = Pusher::new(&registry.host)
        .push_image("apps/petclinic", Some("latest"), &Image::new("amd64"), Format::Oci)
        .await;
    let ws = Workspace::new();
    let deploy =
        "deploy = [{ kind = \"Deployment\", namespace = \"shop\", name = \"petclinic\", container = \"app\" }]\n";
    // A cluster to deploy to (configured, not asked: nothing listens there).
    unanswered_kubeconfig(&ws.path("kubeconfig"), 9);
    let path =
        ws.config(&format!("[kubernetes]\nkubeconfig = \"kubeconfig\"\n\n{}", config_text(&registry.host, deploy)));
    let config = path.to_str().unwrap();
    let check = ws.run(&["check", "--config", config]);
    assert_eq!(check.code, Some(0), "{}", check.stderr);

    let out = ws.run(&["deploy", "petclinic", "--dry-run", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let reference = format!("{}/apps/petclinic@{}", registry.host, pushed.digest);
    assert!(
        out.stdout
            .starts_with(&format!("dry run: petclinic would deploy {reference} (the digest its tag holds now)\n")),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("  to Deployment shop/petclinic, container app\n"), "{}", out.stdout);
    assert!(out.stdout.contains("the cluster was not read"), "{}", out.stdout);
    let out = ws.run(&["deploy", "petclinic", "--to", &digest('a'), "--dry-run", "--json", "--config", config]);
    let plan: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!((plan["digest"].as_str(), plan["recorded"].as_bool()), (Some(digest('a').as_str()), Some(false)));
    // A short digest, as `status` shows them: the tag's, said in full; one nothing knows is refused.
    let short = &pushed.digest[..19];
    let out = ws.run(&["deploy", "petclinic", "--to", short, "--dry-run", "--json", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains(&format!("--to {short} is {}\n", pushed.digest)), "{}", out.stderr);
    let plan: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(plan["digest"].as_str(), Some(pushed.digest.as_str()));
    let out = ws.run(&["deploy", "petclinic", "--to", "sha256:000000000000", "--dry-run", "--config", config]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "sha256:000000000000 matches none of the digests recorded for petclinic and the one its tag holds"
        ),
        "{}",
        out.stderr
    );
    assert!(!ws.path("state.db").exists(), "a dry run records nothing");

    // No daemon holds the ledger: written directly (and created, as `run` would).
    let out = ws.run(&["deploy", "petclinic", "--to", &digest('a'), "--json", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let done: Value = serde_json::from_str(&out.stdout).unwrap();
    let ledger = Ledger::open_read_only(&ws.path("state.db")).unwrap();
    let deploys: Vec<_> = ledger.actions(10).await.unwrap().into_iter().filter(|a| a.action == "deploy").collect();
    assert_eq!(deploys.len(), 1);
    assert_eq!((deploys[0].key.as_str(), deploys[0].state), (done["key"].as_str().unwrap(), ActionState::Pending));
}

struct Served {
    base: String,
    ledger: Ledger,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The server in process, with the daemon's registry client, over a fresh ledger; petclinic's
/// workloads are set in code (the parser has its own tests).
async fn serve(host: &str) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let mut config = Config::parse(&path, &config_text(host, "")).unwrap();
    config.images[0].deploy = vec![workload()];
    let config = Arc::new(config);
    let ledger = Ledger::open(&dir.path().join("state.db")).unwrap();
    let monitor = Parts::new(config.clone(), ledger.clone(), Clock::System, None).unwrap().monitor;
    let mut settings = config.server.clone().unwrap();
    // The daemon reads the token from the environment; in process it is handed over directly.
    settings.api_token = Some(builder_monitor::config::Secret::new(TOKEN));
    let registry = Arc::new(Registry::new(config.registries.values().cloned(), Metrics::new()));
    let state = ServerState::new(config.clone(), settings, monitor.handle(), ledger.clone()).with_registry(registry);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(server::serve(Arc::new(state), listener, stop.clone()));
    Served { base, ledger, stop, _dir: dir }
}

/// The endpoint records exactly one pending deploy of the named digest (or the tag's) with the
/// configured workloads, and refuses a wrong token, image, digest or body, and an image that
/// deploys nowhere, recording nothing for them.
#[tokio::test]
async fn the_endpoint_records_one_pending_deploy_and_refuses_bad_requests() {
    let registry = TestRegistry::start();
    let pushed = Pusher::new(&registry.host)
        .push_image("apps/petclinic", Some("latest"), &Image::new("amd64"), Format::Oci)
        .await;
    let s = serve(&registry.host).await;
    let http = support::http();
    let post = |image: &str, body: Option<Value>, token: &str| {
        let mut request = http.post(format!("{}/api/v1/images/{image}/deploy", s.base)).bearer_auth(token);
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body.to_string());
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let refusals = [
        ("petclinic", Some(json!({ "to": digest('a') })), "wrong-token-wrong-token", 401, "missing or wrong API token"),
        ("nope", Some(json!({ "to": digest('a') })), TOKEN, 404, "no image \"nope\" in [[images]]"),
        ("petclinic", Some(json!({ "to": "sha256:abc" })), TOKEN, 400, "not a digest"),
        ("petclinic", Some(json!({ "digest": digest('a') })), TOKEN, 400, "unknown field `digest`"),
        ("orders", None, TOKEN, 409, "orders is deployed nowhere: add deploy = [{ kind = \"Deployment\""),
    ];
    for (image, body, token, status, said) in refusals {
        let (got, answer) = post(image, body, token).await;
        assert_eq!(got, status, "{image}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains(said), "{image}: {answer}");
    }
    assert!(s.ledger.actions(10).await.unwrap().is_empty(), "a refusal records nothing");

    let (status, done) = post("petclinic", Some(json!({ "to": digest('a') })), TOKEN).await;
    assert_eq!(status, 200, "{done}");
    let reference = format!("{}/apps/petclinic@{}", registry.host, digest('a'));
    assert_eq!((done["image"].as_str(), done["digest"].as_str()), (Some("petclinic"), Some(digest('a').as_str())));
    assert_eq!(done["reference"], reference.as_str());
    assert_eq!(
        done["workloads"],
        json!([{ "kind": "Deployment", "namespace": "shop", "name": "petclinic", "container": "app" }])
    );
    assert!(done["change"].as_str().unwrap().starts_with("manual-"), "{done}");
    let actions = s.ledger.actions(10).await.unwrap();
    assert_eq!(actions.len(), 1, "{actions:?}");
    let a = &actions[0];
    assert_eq!((a.key.as_str(), a.change.as_str()), (done["key"].as_str().unwrap(), done["change"].as_str().unwrap()));
    assert_eq!((a.image.as_str(), a.action.as_str(), a.state), ("petclinic", "deploy", ActionState::Pending));
    let latest = s.ledger.latest_actions(ActionKind::Deploy).await.unwrap();
    let target = latest[0].target.as_ref().unwrap().plan.deploy().cloned().unwrap();
    assert_eq!((target.digest, target.reference), (digest('a'), reference));
    assert_eq!((target.workloads, target.undo, target.tag_before), (vec![workload()], Undo::Workload, None));

    // Without a digest: the one the tag holds now, read through the daemon's registry client.
    // The first deploy had not started, so this one supersedes it.
    let (status, done) = post("petclinic", None, TOKEN).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["digest"], pushed.digest.as_str());
    let states: Vec<ActionState> = s.ledger.actions(10).await.unwrap().iter().map(|a| a.state).collect();
    assert_eq!(states.iter().filter(|s| **s == ActionState::Pending).count(), 1, "{states:?}");
    assert!(states.contains(&ActionState::Superseded), "{states:?}");
}

/// A kubeconfig at `path` whose cluster is `https://127.0.0.1:{port}`.
fn unanswered_kubeconfig(path: &std::path::Path, port: u16) {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: not-a-real-token\n"
    );
    std::fs::write(path, text).unwrap();
}

/// The binary with no cluster to be found: HOME an empty directory, no $KUBECONFIG, not in a pod.
fn without_a_cluster(ws: &Workspace, args: &[&str]) -> support::daemon::Output {
    let home = ws.path("home");
    std::fs::create_dir_all(&home).unwrap();
    let out = std::process::Command::new(support::daemon::BINARY)
        .args(args)
        .current_dir(ws.dir.path())
        .env("HOME", &home)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("BUILDER_MONITOR_CONFIG")
        .output()
        .expect("run builder-monitor");
    support::daemon::Output {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A deploy to workloads that no daemon could carry out (no cluster can be configured) is refused
/// and not recorded, naming the image and `[kubernetes]`; its dry run still shows the plan.
#[test]
fn a_deploy_is_refused_when_no_cluster_can_be_configured() {
    let ws = Workspace::new();
    let deploy = "deploy = [{ kind = \"Deployment\", namespace = \"shop\", name = \"petclinic\" }]\n";
    let config = ws.config(&config_text("127.0.0.1:9", deploy));
    let config = config.to_str().unwrap();
    let out = without_a_cluster(&ws, &["deploy", "petclinic", "--to", &digest('a'), "--config", config]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("image \"petclinic\"'s deploy needs a Kubernetes cluster"), "{}", out.stderr);
    assert!(out.stderr.contains("set [kubernetes] kubeconfig = "), "{}", out.stderr);
    assert!(!ws.path("state.db").exists(), "nothing was recorded");
    let out = without_a_cluster(&ws, &["deploy", "petclinic", "--to", &digest('a'), "--dry-run", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

/// A daemon whose deploy target's cluster does not answer (its kubeconfig names a loopback port
/// nobody listens on) starts all the same: the builder is watched and pinned, a deploy by hand is
/// recorded and waits — pending, never failed — and `status` (text and JSON) and the page say it
/// waits for the cluster, and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_does_not_answer_holds_only_its_deploys() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("cnb/builder", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let ws = Workspace::new();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    unanswered_kubeconfig(&ws.path("kubeconfig"), port);
    let deploy = "deploy = [{ kind = \"Deployment\", namespace = \"shop\", name = \"petclinic\" }]\n";
    let text = format!("[kubernetes]\nkubeconfig = \"kubeconfig\"\n\n{}", config_text(&registry.host, deploy));
    let path = ws.config(&text);
    let config = path.to_str().unwrap();

    let out = ws.run(&["run", "--once", "--config", config]);
    assert_eq!(out.code, Some(0), "the daemon starts and checks: {}", out.stderr);
    assert!(out.stderr.contains("wait for it"), "the wait is logged: {}", out.stderr);
    let out = ws.run(&["deploy", "petclinic", "--to", &digest('a'), "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = ws.run(&["run", "--once", "--config", config]);
    assert_eq!(out.code, Some(0), "nothing failed: {}", out.stderr);

    let out = ws.run(&["status", "--json", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let status: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(status["builders"][0]["pinned"]["digest"].is_string(), "the builder is watched: {status}");
    assert_eq!(status["builders"][0]["last_check"]["result"], "ok", "{status}");
    let pending = status["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{status}");
    let waiting = &pending[0];
    assert_eq!(
        (&waiting["action"], &waiting["state"], &waiting["gate"]),
        (&json!("deploy"), &json!("waiting"), &json!("cluster"))
    );
    assert_eq!(waiting["attempts"], 0, "never tried: {waiting}");
    let why = waiting["waiting_for"].as_str().unwrap();
    assert!(why.starts_with("the Kubernetes cluster of [kubernetes] does not answer: "), "{why}");
    assert!(!why.contains("not-a-real-token"), "{why}");
    let out = ws.run(&["status", "--config", config]);
    assert!(out.stdout.contains("the Kubernetes cluster of [kubernetes] does not answer"), "{}", out.stdout);

    // The page, served over the same ledger, says so too.
    let config = Arc::new(Config::parse(&path, &text).unwrap());
    let ledger = Ledger::open_read_only(&ws.path("state.db")).unwrap();
    let monitor = Parts::new(config.clone(), ledger.clone(), Clock::System, None).unwrap().monitor;
    let mut settings = config.server.clone().unwrap();
    settings.api_token = Some(builder_monitor::config::Secret::new(TOKEN));
    let state = ServerState::new(config, settings, monitor.handle(), ledger);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(server::serve(Arc::new(state), listener, stop.clone()));
    let page = support::http().get(format!("{base}/")).bearer_auth(TOKEN).send().await.unwrap().text().await.unwrap();
    stop.cancel();
    assert!(page.contains("the Kubernetes cluster of [kubernetes] does not answer"), "{page}");
}
