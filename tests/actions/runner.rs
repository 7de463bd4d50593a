//! Planning and running rebuilds and rebases with the exec runner, against a real registry and
//! real processes: argv and placeholders, concurrency, timeouts, retries, crashes and restarts.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use builder_monitor::config::Config;
use builder_monitor::daemon::Parts;
use builder_monitor::ledger::{ActionState, Ledger};
use builder_monitor::monitor::Monitor;
use builder_monitor::runner::Runner;
use builder_monitor::schedule::Clock;
use builder_monitor_core::event::EventType;
use serde_json::json;
use support::cnb::BuilderSpec;
use support::daemon::{Daemon, Workspace, run_with_env};
use support::images::{Format, Image, Pushed, Pusher};
use support::registry::TestRegistry;
use tokio_util::sync::CancellationToken;

/// One line of the record the fake `pack` writes.
#[derive(Debug, Clone)]
struct Call {
    phase: String,
    at: u64,
    pid: u32,
    args: Vec<String>,
}

fn calls(path: &Path) -> Vec<Call> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let mut parts = l.split(' ');
            Call {
                phase: parts.next().unwrap().into(),
                at: parts.next().unwrap().parse().unwrap(),
                pid: parts.next().unwrap().parse().unwrap(),
                args: parts.map(str::to_string).collect(),
            }
        })
        .collect()
}

fn ended(path: &Path) -> Vec<Call> {
    calls(path).into_iter().filter(|c| c.phase == "end").collect()
}

struct World {
    registry: TestRegistry,
    pusher: Pusher,
    run: String,
    dir: tempfile::TempDir,
}

impl World {
    async fn new() -> Self {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let run = format!("{}/demo/run:latest", registry.host);
        World { pusher, run, registry, dir: tempfile::tempdir().unwrap() }
    }

    fn record(&self) -> PathBuf {
        self.dir.path().join("record.txt")
    }

    async fn push_run(&self, salt: &str) -> (Pushed, Vec<Pushed>) {
        let images = [Image::new("amd64").salt(salt), Image::new("arm64").salt(salt)];
        self.pusher.push_index("demo/run", "latest", &images, Format::Oci).await
    }

    async fn push_builder(&self, spec: &BuilderSpec) -> Pushed {
        self.pusher.push_image("demo/builder", Some("latest"), &spec.image(), Format::Oci).await
    }

    /// An app image whose lifecycle metadata says it sits on run image manifest `run_digest`.
    async fn push_app(&self, repo: &str, run_digest: &str) {
        let lifecycle = json!({ "runImage": {
            "image": self.run, "topLayer": "sha256:top",
            "reference": format!("{}/demo/run@{run_digest}", self.registry.host) } });
        let build = json!({ "buildpacks": [{ "id": "paketo-buildpacks/java", "version": "18.1.0" }], "launcher": { "version": "0.21.13" } });
        let image = Image::new("amd64")
            .salt(run_digest)
            .label("io.buildpacks.lifecycle.metadata", lifecycle.to_string())
            .label("io.buildpacks.build.metadata", build.to_string())
            .label("io.buildpacks.stack.id", "io.buildpacks.stacks.jammy");
        self.pusher.push_image(repo, Some("latest"), &image, Format::Oci).await;
    }

    fn config(&self, images: &[(&str, &str)], runner: &str) -> String {
        let script = support::fixture("record.sh");
        let mut text = format!(
            "[monitor]\nstate = \"state.db\"\ninterval = \"200ms\"\njitter = \"0s\"\n\n[[builders]]\nname = \"jammy\"\nimage = \"{}/demo/builder:latest\"\n\n",
            self.registry.host
        );
        for (name, policy) in images {
            text.push_str(&format!(
                "[[images]]\nname = \"{name}\"\nbuilder = \"jammy\"\nimage = \"{}/apps/{name}:latest\"\npolicy = \"{policy}\"\nsource = {{ git = \"https://git.example.com/{name}.git\", revision = \"main\", sub_path = \"svc\" }}\nenv = {{ BP_JVM_VERSION = \"21\" }}\n\n",
                self.registry.host
            ));
        }
        let argv = |kind: &str| {
            format!(
                "[\"sh\", \"{}\", \"{kind}\", \"{{action}}\", \"{{name}}\", \"{{image}}\", \"{{builder}}\", \"{{run_image}}\", \"{{source}}\", \"{{revision}}\", \"{{sub_path}}\", \"{{change_id}}\"]",
                script.display()
            )
        };
        text.push_str(&format!(
            "[runner]\n{runner}\n\n[runner.exec]\nrebuild = {}\nrebase = {}\nenv = {{ RECORD_FILE = \"{}\" }}\n",
            argv("REBUILD"),
            argv("REBASE"),
            self.record().display()
        ));
        text
    }
}

struct Daemonless {
    monitor: Arc<Monitor>,
    runner: Arc<Runner>,
    ledger: Ledger,
    config: Arc<Config>,
}

fn assemble(dir: &Path, text: &str) -> Daemonless {
    let config = Arc::new(Config::parse(&dir.join("config.toml"), text).unwrap_or_else(|e| panic!("{e}")));
    std::fs::write(dir.join("config.toml"), text).unwrap();
    let ledger = Ledger::open(&dir.join("state.db")).unwrap();
    let monitor = Parts::new(config.clone(), ledger.clone(), Clock::System, None).unwrap().monitor;
    let backend =
        builder_monitor::runner::Backends::for_config(&config, None.into(), CancellationToken::new()).unwrap();
    let runner = Arc::new(Runner::new(config.clone(), ledger.clone(), Clock::System, backend));
    Daemonless { monitor, runner, ledger, config }
}

async fn event_types(ledger: &Ledger) -> Vec<String> {
    ledger.events_after(0, 1000).await.unwrap().into_iter().map(|e| e.event.event_type.to_string()).collect()
}

#[tokio::test]
async fn builder_bumps_rebuild_and_run_image_moves_rebase_exactly_once() {
    let w = World::new().await;
    let (_, run_v1) = w.push_run("1").await;
    let v1 = BuilderSpec::jammy(&w.run);
    w.push_builder(&v1).await;
    w.push_app("apps/old", &run_v1[0].digest).await;
    let d = assemble(w.dir.path(), &w.config(&[("old", "auto")], "type = \"exec\"\nmax_concurrent = 2"));
    assert!(d.monitor.run_once().await);
    assert_eq!(d.runner.run_due_once().await, 0, "first sight plans nothing");

    // A buildpack bump: one rebuild with the pinned builder.
    let pushed = w.push_builder(&v1.clone().bump("paketo-buildpacks/java", "18.2.0")).await;
    assert!(d.monitor.run_once().await);
    assert_eq!(d.runner.run_due_once().await, 1);
    assert_eq!(d.runner.run_due_once().await, 0, "never again");
    let calls = ended(&w.record());
    assert_eq!(calls.len(), 1);
    let change = &d.ledger.changes(Some("jammy"), 1).await.unwrap()[0];
    let host = &w.registry.host;
    let run_ref = |digest: &str| format!("{host}/demo/run@{digest}");
    let builder_ref = format!("{host}/demo/builder@{}", pushed.digest);
    assert_eq!(
        calls[0].args,
        [
            "REBUILD".to_string(),
            "rebuild".into(),
            "old".into(),
            format!("{host}/apps/old:latest"),
            builder_ref.clone(),
            d.ledger.watch(&format!("run:{}", w.run)).await.unwrap().unwrap().pin.unwrap().reference,
            "https://git.example.com/old.git".into(),
            "main".into(),
            "svc".into(),
            change.id.clone(),
        ]
    );

    // The run image moves: a rebase onto its new immutable reference for the app on the old one;
    // an app already on the new run image gets nothing.
    let (r2, run_v2) = w.push_run("2").await;
    w.push_app("apps/new", &run_v2[0].digest).await;
    let d = assemble(w.dir.path(), &w.config(&[("old", "auto"), ("new", "auto")], "type = \"exec\""));
    assert!(d.monitor.run_once().await);
    let events = d.ledger.events_after(0, 1000).await.unwrap();
    let moved = events.iter().rfind(|e| e.event.event_type == EventType::RunImageChanged).unwrap();
    assert_eq!(
        moved.event.images.as_ref().unwrap(),
        &[builder_monitor_core::event::ImageAction { name: "old".into(), action: "rebase".into() }]
    );
    assert_eq!(d.runner.run_due_once().await, 1);
    let calls = ended(&w.record());
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].args[..5], ["REBASE", "rebase", "old", &format!("{host}/apps/old:latest"), &builder_ref]);
    assert_eq!(calls[1].args[5], run_ref(&r2.digest), "the new run image, immutable");
    assert_eq!(d.runner.run_due_once().await, 0);
    let types = event_types(&d.ledger).await;
    assert_eq!(types.iter().filter(|t| *t == "build.started").count(), 1);
    assert_eq!(types.iter().filter(|t| *t == "build.succeeded").count(), 1);
    assert_eq!(types.iter().filter(|t| *t == "rebase.succeeded").count(), 1);
    let status = builder_monitor::status::collect(&d.config, &d.ledger, 10).await.unwrap();
    assert_eq!(status.actions.iter().filter(|a| a.state == ActionState::Succeeded).count(), 2);
    assert!(status.actions.iter().all(|a| a.output_tail.as_deref().is_some_and(|t| t.starts_with("built "))));
}

#[tokio::test]
async fn concurrency_never_exceeds_max_concurrent() {
    let w = World::new().await;
    w.push_run("1").await;
    let v1 = BuilderSpec::jammy(&w.run);
    w.push_builder(&v1).await;
    let names = ["a", "b", "c", "d", "e"];
    let images: Vec<(&str, &str)> = names.iter().map(|n| (*n, "rebuild")).collect();
    // Registry rebases' own slots (16 by default) are none of the commands'.
    let text = w
        .config(&images, "type = \"exec\"\nrebase = \"registry\"\nmax_concurrent = 2")
        .replace("env = { RECORD_FILE", "env = { SLEEP = \"0.3\", RECORD_FILE");
    let d = assemble(w.dir.path(), &text);
    assert!(d.monitor.run_once().await);
    w.push_builder(&v1.bump("paketo-buildpacks/go", "4.15.0")).await;
    assert!(d.monitor.run_once().await);
    assert_eq!(d.runner.run_due_once().await, 5);
    let all = calls(&w.record());
    let spans: Vec<(u64, u64)> = all
        .iter()
        .filter(|c| c.phase == "start")
        .map(|s| (s.at, all.iter().find(|e| e.phase == "end" && e.pid == s.pid).unwrap().at))
        .collect();
    assert_eq!(spans.len(), 5);
    let most =
        spans.iter().map(|(start, _)| spans.iter().filter(|(s, e)| s <= start && start < e).count()).max().unwrap();
    assert_eq!(most, 2, "two at a time, never more: {spans:?}");
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or_default().trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let w = World::new().await;
    w.push_run("1").await;
    let v1 = BuilderSpec::jammy(&w.run);
    w.push_builder(&v1).await;
    let pidfile = w.dir.path().join("child.pid");
    let text = w.config(&[("a", "rebuild")], "type = \"exec\"\nmax_attempts = 1").replace(
        "env = { RECORD_FILE",
        &format!("timeout = \"1s\"\nenv = {{ SLEEP = \"300\", CHILD_PIDFILE = \"{}\", RECORD_FILE", pidfile.display()),
    );
    let d = assemble(w.dir.path(), &text);
    assert!(d.monitor.run_once().await);
    w.push_builder(&v1.bump("paketo-buildpacks/go", "4.15.0")).await;
    assert!(d.monitor.run_once().await);
    assert_eq!(d.runner.run_due_once().await, 1);
    let script = calls(&w.record())[0].pid;
    let child: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert!(!alive(script), "the command was killed");
    assert!(!alive(child), "and the child it started, too");
    let action = &d.ledger.actions(10).await.unwrap()[0];
    assert_eq!(action.state, ActionState::Failed);
    assert!(action.detail.as_deref().unwrap().starts_with("timed out after 1s"), "{action:?}");
    assert!(event_types(&d.ledger).await.contains(&"build.failed".to_string()));
}

#[tokio::test]
async fn failures_are_retried_up_to_max_attempts_then_reported() {
    let w = World::new().await;
    w.push_run("1").await;
    let v1 = BuilderSpec::jammy(&w.run);
    w.push_builder(&v1).await;
    let text = w
        .config(&[("a", "rebuild")], "type = \"exec\"\nmax_attempts = 3\nbackoff = \"50ms\"")
        .replace("env = { RECORD_FILE", "env = { EXIT_CODE = \"7\", RECORD_FILE");
    let d = assemble(w.dir.path(), &text);
    assert!(d.monitor.run_once().await);
    let stop = CancellationToken::new();
    tokio::spawn(d.runner.clone().run(stop.clone()));
    w.push_builder(&v1.bump("paketo-buildpacks/go", "4.15.0")).await;
    assert!(d.monitor.run_once().await);
    let deadline = tokio::time::Instant::now() + support::PATIENCE;
    while d.ledger.actions(1).await.unwrap()[0].state != ActionState::Failed {
        assert!(tokio::time::Instant::now() < deadline, "never failed for good");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    assert_eq!(ended(&w.record()).len(), 3, "three attempts");
    let action = &d.ledger.actions(1).await.unwrap()[0];
    assert_eq!((action.attempts, action.detail.as_deref()), (3, Some("exit status 7")));
    let events = d.ledger.events_after(0, 1000).await.unwrap();
    let failed: Vec<_> = events.iter().filter(|e| e.event.event_type == EventType::BuildFailed).collect();
    assert_eq!(failed.len(), 1);
    let info = failed[0].event.action.as_ref().unwrap();
    assert_eq!((info.attempt, info.max_attempts, info.image.as_str()), (3, 3, "a"));
    assert!(info.output_tail.as_deref().unwrap().contains("built"));
    assert_eq!(events.iter().filter(|e| e.event.event_type == EventType::BuildStarted).count(), 3);
}

#[tokio::test]
async fn runner_none_plans_and_records_but_never_runs_and_newer_changes_supersede() {
    let w = World::new().await;
    w.push_run("1").await;
    let v1 = BuilderSpec::jammy(&w.run);
    w.push_builder(&v1).await;
    let d = assemble(w.dir.path(), &w.config(&[("a", "rebuild")], "type = \"none\""));
    assert!(d.monitor.run_once().await);
    w.push_builder(&v1.clone().bump("paketo-buildpacks/go", "4.15.0")).await;
    assert!(d.monitor.run_once().await);
    let latest = w.push_builder(&v1.bump("paketo-buildpacks/go", "4.16.0")).await;
    assert!(d.monitor.run_once().await);
    assert_eq!(d.runner.run_due_once().await, 0);
    assert!(calls(&w.record()).is_empty(), "runner none never runs anything");
    let actions = d.ledger.actions(10).await.unwrap();
    let states: BTreeMap<&str, usize> = actions.iter().fold(BTreeMap::new(), |mut m, a| {
        *m.entry(a.state.as_str()).or_default() += 1;
        m
    });
    assert_eq!(states, [("pending", 1), ("superseded", 1)].into());
    let status = builder_monitor::status::collect(&d.config, &d.ledger, 10).await.unwrap();
    assert_eq!(status.pending.len(), 1);

    // The same ledger with the exec runner builds only the newest target.
    let d = assemble(w.dir.path(), &w.config(&[("a", "rebuild")], "type = \"exec\""));
    assert_eq!(d.runner.run_due_once().await, 1);
    let calls = ended(&w.record());
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].args[4], format!("{}/demo/builder@{}", w.registry.host, latest.digest));
}

// The daemon's log is read by blocking calls: two threads keep the runtime free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_while_running_the_command_runs_once_more_and_never_again() {
    killed_while_running_with(|text| text.to_string()).await;
}

/// The same crashes with the ledger in ConfigMaps on the Kubernetes API double.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_while_running_with_the_ledger_on_kubernetes() {
    let double = support::kube::KubeDouble::start().await;
    double.create_namespace("bm");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = double.kubeconfig(dir.path());
    killed_while_running_with(|text| {
        text.replace("state = \"state.db\"", "state = \"kubernetes\"")
            + &format!("\n[kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"bm\"\n", kubeconfig.display())
    })
    .await;
    assert!(!double.list("configmaps").is_empty(), "the ledger lived in the cluster");
}

/// A rebuild killed mid-command runs once more after the restart and never after it succeeded;
/// `ledger_in(config)` moves the config's ledger elsewhere.
async fn killed_while_running_with(ledger_in: impl Fn(&str) -> String) {
    let w = World::new().await;
    let (_, run_v1) = w.push_run("1").await;
    let v1 = BuilderSpec::jammy(&w.run);
    w.push_builder(&v1).await;
    w.push_app("apps/a", &run_v1[0].digest).await;
    let block = w.dir.path().join("block");
    let pidfile = w.dir.path().join("child.pid");
    let text = w.config(&[("a", "auto")], "type = \"exec\"").replace(
        "env = { RECORD_FILE",
        &format!(
            "env = {{ BLOCK_FILE = \"{}\", CHILD_PIDFILE = \"{}\", RECORD_FILE",
            block.display(),
            pidfile.display()
        ),
    );
    let ws = Workspace::new();
    let config = ws.config(&ledger_in(&text));
    let out = run_with_env(&["run", "--once", "--config", config.to_str().unwrap()], &[], ws.dir.path());
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    // Killed while the rebuild runs.
    std::fs::write(&block, "").unwrap();
    w.push_builder(&v1.clone().bump("paketo-buildpacks/java", "18.2.0")).await;
    let mut daemon = Daemon::start(&config);
    daemon.wait_for("the rebuild to start", |v| v["message"] == "running action");
    // Killed once the command's group is in the ledger: what a restart can stop is what was
    // recorded (a kill between spawn and record is the documented window).
    daemon.wait_for("the command's group to be recorded", |v| v["message"] == "command started");
    let deadline = std::time::Instant::now() + support::PATIENCE;
    while calls(&w.record()).is_empty() {
        assert!(std::time::Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    wait_until("the command's child started", || std::fs::read_to_string(&pidfile).is_ok_and(|p| p.ends_with('\n')));
    let child: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    daemon.kill();
    // The command dies with the daemon; the child it started is left for the restart to stop.
    let command = calls(&w.record())[0].pid;
    wait_until("the command died with the daemon", || !alive(command));
    std::fs::remove_file(&block).unwrap();

    let mut daemon = Daemon::start(&config);
    daemon.wait_for("the rebuild to start again", |v| v["message"] == "running action");
    assert!(!alive(child), "what the first run left was stopped before the second run started");
    daemon.wait_for("the rebuild to finish", |v| v["message"] == "action succeeded");
    let (status, _) = daemon.terminate();
    assert!(status.success());
    let rebuilds: Vec<Call> =
        calls(&w.record()).into_iter().filter(|c| c.args.first().map(String::as_str) == Some("REBUILD")).collect();
    assert_eq!(rebuilds.iter().filter(|c| c.phase == "start").count(), 2, "ran once more after the restart");
    assert_eq!(rebuilds.iter().filter(|c| c.phase == "end").count(), 1);

    // Killed after it succeeded: it never runs again.
    let mut daemon = Daemon::start(&config);
    for _ in 0..3 {
        daemon.wait_for("a check", |v| v["message"] == "check done");
    }
    daemon.kill();
    let out = run_with_env(&["run", "--once", "--config", config.to_str().unwrap()], &[], ws.dir.path());
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(calls(&w.record()).len(), 3, "start, start, end: nothing more");

    let out = run_with_env(&["status", "--json", "--config", config.to_str().unwrap()], &[], ws.dir.path());
    let status: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let action = &status["actions"][0];
    assert_eq!((action["state"].as_str(), action["attempts"].as_u64()), (Some("succeeded"), Some(2)));
}

#[tokio::test]
async fn plan_explains_what_each_image_would_get() {
    let w = World::new().await;
    let (_, run_v1) = w.push_run("1").await;
    let v1 = BuilderSpec::jammy(&w.run);
    w.push_builder(&v1).await;
    w.push_app("apps/a", &run_v1[0].digest).await;
    let ws = Workspace::new();
    let config = ws.config(&w.config(&[("a", "auto"), ("missing", "auto"), ("quiet", "notify")], "type = \"none\""));
    let config = config.to_str().unwrap();
    assert_eq!(run_with_env(&["run", "--once", "--config", config], &[], ws.dir.path()).code, Some(0));
    let plan = |args: &[&str]| run_with_env(args, &[], ws.dir.path());

    let out = plan(&["plan", "--config", config, "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v[0]["action"], serde_json::Value::Null, "{v:#}");
    assert_eq!(v[0]["why"], "up to date with the builder's pin");
    assert_eq!(v[1]["action"], "rebuild");
    assert_eq!(v[1]["why"], "the app image does not exist yet");
    assert_eq!(v[2]["why"], "policy notify: alerts only");

    // A buildpack bump: the app built with the old version needs a rebuild.
    w.push_builder(&v1.clone().bump("paketo-buildpacks/java", "18.2.0")).await;
    assert_eq!(run_with_env(&["run", "--once", "--config", config], &[], ws.dir.path()).code, Some(0));
    let out = plan(&["plan", "--config", config]);
    assert!(
        out.stdout.contains(
            "a (builder jammy, policy auto): rebuild — built with paketo-buildpacks/java 18.1.0; the builder has 18.2.0"
        ),
        "{}",
        out.stdout
    );

    // A run image move with the app on the old one: a rebase.
    w.push_builder(&v1).await; // back to 18.1.0
    w.push_run("2").await;
    assert_eq!(run_with_env(&["run", "--once", "--config", config], &[], ws.dir.path()).code, Some(0));
    let out = plan(&["plan", "--config", config]);
    assert!(
        out.stdout.contains("a (builder jammy, policy auto): rebase (by the runner) — on run image"),
        "{}",
        out.stdout
    );
}

/// Lines of `path` that start with `word`.
fn marks(path: &Path, word: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(word))
        .map(String::from)
        .collect()
}

fn pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(|l| l.parse().unwrap()).collect()
}

fn wait_until(what: &str, condition: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + support::PATIENCE;
    while !condition() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// An app image on a pinned builder, an exec runner whose command (`overlap.sh`) records its
/// processes and start/end marks and blocks while `block` exists (created here), and the ledger
/// after a first `run --once`: a builder move then starts a build that waits.
struct Blocking {
    w: World,
    v1: BuilderSpec,
    ws: Workspace,
    config: std::path::PathBuf,
    block: std::path::PathBuf,
    pid_file: std::path::PathBuf,
    mark_file: std::path::PathBuf,
}

impl Blocking {
    async fn pinned() -> Self {
        let w = World::new().await;
        let (_, run_v1) = w.push_run("1").await;
        let v1 = BuilderSpec::jammy(&w.run);
        w.push_builder(&v1).await;
        w.push_app("apps/a", &run_v1[0].digest).await;
        let (block, pid_file, mark_file) =
            (w.dir.path().join("block"), w.dir.path().join("pids"), w.dir.path().join("marks"));
        let text = w
            .config(&[("a", "auto")], "type = \"exec\"")
            .replace(
                &support::fixture("record.sh").display().to_string(),
                &support::fixture("overlap.sh").display().to_string(),
            )
            .replace(
                "env = { RECORD_FILE",
                &format!(
                    "env = {{ BLOCK_FILE = \"{}\", PIDS_FILE = \"{}\", MARKS_FILE = \"{}\", RECORD_FILE",
                    block.display(),
                    pid_file.display(),
                    mark_file.display()
                ),
            );
        let ws = Workspace::new();
        let config = ws.config(&text);
        let out = run_with_env(&["run", "--once", "--config", config.to_str().unwrap()], &[], ws.dir.path());
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        std::fs::write(&block, "").unwrap();
        Blocking { w, v1, ws, config, block, pid_file, mark_file }
    }
}

/// A build's command dies with a SIGKILLed daemon, a restart stops whatever it left before
/// running the build again, and SIGTERM's grace period ends with the whole group killed: at no
/// moment do two copies of the build live (the command itself checks when it starts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_never_has_two_live_copies() {
    let Blocking { w, v1, ws: _ws, config, block, pid_file, mark_file } = Blocking::pinned().await;
    // `_ws` holds the config's directory until the test ends.
    w.push_builder(&v1.clone().bump("paketo-buildpacks/java", "18.2.0")).await;

    // SIGKILL: the command dies with the daemon.
    let mut daemon = Daemon::start(&config);
    daemon.wait_for("the rebuild to start", |v| v["message"] == "running action");
    // Killed once the command's group is in the ledger (see killed_while_running_with).
    daemon.wait_for("the command's group to be recorded", |v| v["message"] == "command started");
    wait_until("the command started", || marks(&mark_file, "start").len() == 1);
    let first = pids(&pid_file);
    daemon.kill();
    wait_until("the command died with the daemon", || !alive(first[0]));

    // Restart: what the first copy left running is stopped before the second starts.
    let daemon = Daemon::start(&config);
    wait_until("the command started again", || marks(&mark_file, "start").len() == 2);
    assert!(first.iter().all(|p| !alive(*p)), "the first copy's processes are gone");
    let second = pids(&pid_file)[2..].to_vec();

    // SIGTERM: after the grace period the whole group is killed, not only the command.
    let (status, _) = daemon.terminate();
    assert!(status.success());
    wait_until("the second copy's group is gone", || second.iter().all(|p| !alive(*p)));

    // The third start finishes it.
    let mut daemon = Daemon::start(&config);
    wait_until("the command started a third time", || marks(&mark_file, "start").len() == 3);
    std::fs::remove_file(&block).unwrap();
    daemon.wait_for("the rebuild to finish", |v| v["message"] == "action succeeded");
    let (status, _) = daemon.terminate();
    assert!(status.success());
    assert_eq!(marks(&mark_file, "overlap"), Vec::<String>::new(), "two copies were alive at once");
    assert_eq!(marks(&mark_file, "end").len(), 1);
    let all = pids(&pid_file);
    wait_until("nothing any copy started is left", || all.iter().all(|p| !alive(*p)));
}

/// `run --config ex.toml` (a bare file name) starts commands in the config's directory; a command
/// that cannot be started fails its action at once, and `run --once` says so with exit status 1.
#[tokio::test]
async fn commands_start_from_a_bare_config_name_and_a_missing_program_fails_the_action() {
    let w = World::new().await;
    w.push_run("1").await;
    let v1 = BuilderSpec::jammy(&w.run);
    w.push_builder(&v1).await;
    let ws = Workspace::new();
    std::fs::write(ws.path("ex.toml"), w.config(&[("a", "rebuild")], "type = \"exec\"\nmax_attempts = 3")).unwrap();
    let once = || run_with_env(&["run", "--once", "--config", "ex.toml"], &[], ws.dir.path());
    let out = once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    w.push_builder(&v1.clone().bump("paketo-buildpacks/go", "4.15.0")).await;
    let out = once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(ended(&w.record()).len(), 1, "the rebuild ran: {}", out.stderr);

    let text = w.config(&[("a", "rebuild")], "type = \"exec\"\nmax_attempts = 3");
    let text = text.replacen("rebuild = [\"sh\"", "rebuild = [\"/nonexistent/pack\"", 1);
    std::fs::write(ws.path("ex.toml"), text).unwrap();
    w.push_builder(&v1.bump("paketo-buildpacks/go", "4.16.0")).await;
    let out = once();
    assert_eq!(out.code, Some(1), "a failed action fails run --once: {}", out.stderr);
    let out = run_with_env(&["status", "--json", "--config", "ex.toml"], &[], ws.dir.path());
    let status: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let action = &status["actions"][0];
    assert_eq!((action["state"].as_str(), action["attempts"].as_u64()), (Some("failed"), Some(1)), "{action}");
    let detail = action["detail"].as_str().unwrap();
    assert!(detail.starts_with("cannot start `/nonexistent/pack`"), "{detail}");
}

/// `run --once` on the ledger of a daemon that is running a build leaves that build to it: the
/// command is neither stopped nor started a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_once_leaves_a_live_daemons_running_build_alone() {
    let Blocking { w, v1, ws, config, block, pid_file, mark_file } = Blocking::pinned().await;
    w.push_builder(&v1.bump("paketo-buildpacks/java", "18.2.0")).await;
    let mut daemon = Daemon::start(&config);
    daemon.wait_for("the command's group to be recorded", |v| v["message"] == "command started");
    wait_until("the command started", || marks(&mark_file, "start").len() == 1);
    let command = pids(&pid_file)[0];

    // Refused by the writer lock, or run beside the daemon: either way the build is not touched.
    let _ = run_with_env(&["run", "--once", "--config", config.to_str().unwrap()], &[], ws.dir.path());
    assert!(alive(command), "the daemon's build was stopped");
    assert_eq!(marks(&mark_file, "start").len(), 1, "the daemon's build was started again");

    std::fs::remove_file(&block).unwrap();
    daemon.wait_for("the rebuild to finish", |v| v["message"] == "action succeeded");
    let (status, _) = daemon.terminate();
    assert!(status.success());
    assert_eq!((marks(&mark_file, "start").len(), marks(&mark_file, "end").len()), (1, 1));
    assert_eq!(marks(&mark_file, "overlap"), Vec::<String>::new());
}

/// Wakes that keep coming while an action runs (new checks, completions) never start a second
/// run of it: a claimed action is `running` until its outcome is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakes_while_an_action_runs_never_start_it_twice() {
    let w = World::new().await;
    w.push_run("1").await;
    let v1 = BuilderSpec::jammy(&w.run);
    w.push_builder(&v1).await;
    let block = w.dir.path().join("block");
    let text = w
        .config(&[("a", "rebuild"), ("b", "rebuild")], "type = \"exec\"\nmax_concurrent = 4")
        .replace("env = { RECORD_FILE", &format!("env = {{ BLOCK_FILE = \"{}\", RECORD_FILE", block.display()));
    let d = assemble(w.dir.path(), &text);
    assert!(d.monitor.run_once().await);
    std::fs::write(&block, "").unwrap();
    let stop = CancellationToken::new();
    let running = tokio::spawn(d.runner.clone().run(stop.clone()));
    w.push_builder(&v1.bump("paketo-buildpacks/go", "4.15.0")).await;
    assert!(d.monitor.run_once().await);
    let record = w.record();
    let deadline = tokio::time::Instant::now() + support::PATIENCE;
    while calls(&record).len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the rebuilds never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let wake = d.monitor.action_wake();
    for _ in 0..2000 {
        wake.notify_one();
        tokio::task::yield_now().await;
    }
    assert!(d.monitor.run_once().await, "checks while the actions run");
    std::fs::remove_file(&block).unwrap();
    while d.ledger.actions(10).await.unwrap().iter().any(|a| a.state != ActionState::Succeeded) {
        assert!(tokio::time::Instant::now() < deadline, "the rebuilds never finished");
        wake.notify_one();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    running.await.unwrap();
    let all = calls(&record);
    assert_eq!(all.iter().filter(|c| c.phase == "start").count(), 2, "{all:?}");
    assert_eq!(all.iter().filter(|c| c.phase == "end").count(), 2, "{all:?}");
}
