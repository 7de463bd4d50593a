//! Roll-out control end to end: waves with a canary, windows, approvals and a freeze, against a
//! real registry, real commands (a recording stand-in for `pack`), the daemon binary and its API.

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
use serde_json::{Value, json};
use support::cnb::BuilderSpec;
use support::daemon::{Daemon, Output, Workspace, run_with_env};
use support::images::{Format, Image, Pusher};
use support::receiver::Receiver;
use support::registry::TestRegistry;
use tokio_util::sync::CancellationToken;

mod expedite;
mod restarts;

const TOKEN: &str = "rollout-api-token-0123456789";
const TOKEN_ENV: &str = "BM_ROLLOUT_TEST_TOKEN";

/// One line of the record the fake `pack` writes: `start|end MS PID KIND ACTION NAME …`.
#[derive(Debug, Clone)]
struct Call {
    phase: String,
    at: u64,
    args: Vec<String>,
}

impl Call {
    fn image(&self) -> &str {
        &self.args[2]
    }
}

fn calls(path: &Path) -> Vec<Call> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let mut parts = l.split(' ');
            let phase = parts.next().unwrap().to_string();
            let at = parts.next().unwrap().parse().unwrap();
            let _pid = parts.next();
            Call { phase, at, args: parts.map(str::to_string).collect() }
        })
        .collect()
}

/// How often each image's command started, by image.
fn starts(path: &Path) -> BTreeMap<String, usize> {
    calls(path).iter().filter(|c| c.phase == "start").fold(BTreeMap::new(), |mut m, c| {
        *m.entry(c.image().to_string()).or_default() += 1;
        m
    })
}

fn count(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// A registry with a run image, a builder on it, and a workspace whose exec runner records every
/// command (`record.sh` behind a wrapper that fails the image named by `$FAIL_IMAGE`).
struct World {
    registry: TestRegistry,
    pusher: Pusher,
    run: String,
    builder: BuilderSpec,
    /// The first run image's amd64 manifest.
    run_v1: String,
    ws: Workspace,
}

impl World {
    async fn new() -> Self {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let run = format!("{}/demo/run:latest", registry.host);
        let ws = Workspace::new();
        let wrapper = format!(
            "#!/bin/sh\n# Fails the image named by $FAIL_IMAGE (its third argument) after recording it.\nsh \"{}\" \"$@\"\ncode=$?\nif [ -n \"$FAIL_IMAGE\" ] && [ \"$3\" = \"$FAIL_IMAGE\" ]; then exit 3; fi\nexit $code\n",
            support::fixture("record.sh").display()
        );
        std::fs::write(ws.path("pack.sh"), wrapper).unwrap();
        let mut w = World { builder: BuilderSpec::jammy(&run), registry, pusher, run, run_v1: String::new(), ws };
        w.run_v1 = w.push_run("1").await;
        w.pusher.push_image("demo/builder", Some("latest"), &w.builder.image(), Format::Oci).await;
        w
    }

    fn record(&self) -> PathBuf {
        self.ws.path("record.txt")
    }

    async fn push_run(&self, salt: &str) -> String {
        let images = [Image::new("amd64").salt(salt), Image::new("arm64").salt(salt)];
        let (_, children) = self.pusher.push_index("demo/run", "latest", &images, Format::Oci).await;
        children[0].digest.clone()
    }

    /// Moves the builder: a new java buildpack version (`18.2.0`, `18.3.0`, …). Returns its digest.
    async fn move_builder(&self, java: &str) -> String {
        let spec = self.builder.clone().bump("paketo-buildpacks/java", java);
        self.pusher.push_image("demo/builder", Some("latest"), &spec.image(), Format::Oci).await.digest
    }

    /// An app image built with java 18.1.0 on run image manifest `run_digest`.
    async fn push_app(&self, name: &str, run_digest: &str) {
        let lifecycle = json!({ "runImage": {
            "image": self.run, "topLayer": "sha256:top",
            "reference": format!("{}/demo/run@{run_digest}", self.registry.host) } });
        let build = json!({ "buildpacks": [{ "id": "paketo-buildpacks/java", "version": "18.1.0" }], "launcher": { "version": "0.21.13" } });
        let image = Image::new("amd64")
            .salt(run_digest)
            .label("io.buildpacks.lifecycle.metadata", lifecycle.to_string())
            .label("io.buildpacks.build.metadata", build.to_string())
            .label("io.buildpacks.stack.id", "io.buildpacks.stacks.jammy");
        self.pusher.push_image(&format!("apps/{name}"), Some("latest"), &image, Format::Oci).await;
    }

    /// A config: `images` are (name, extra lines such as `policy`, `wave`), then `runner` lines for
    /// `[runner]`, then `extra` tables (`[rollout]`, `[server]`, `[[alerts]]`).
    fn config(&self, images: &[(&str, &str)], runner: &str, extra: &str) -> String {
        let host = &self.registry.host;
        let mut text = format!(
            "[monitor]\nstate = \"state.db\"\ninterval = \"200ms\"\njitter = \"0s\"\n\n[[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n"
        );
        for (name, lines) in images {
            text.push_str(&format!(
                "[[images]]\nname = \"{name}\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/{name}:latest\"\n{lines}\n\n"
            ));
        }
        let argv = |kind: &str| {
            format!(
                "[\"sh\", \"{}\", \"{kind}\", \"{{action}}\", \"{{name}}\", \"{{builder}}\", \"{{change_id}}\"]",
                self.ws.path("pack.sh").display()
            )
        };
        text.push_str(&format!(
            "[runner]\n{runner}\n\n[runner.exec]\nrebuild = {}\nrebase = {}\nenv = {{ RECORD_FILE = \"{}\" }}\n\n{extra}\n",
            argv("REBUILD"),
            argv("REBASE"),
            self.record().display()
        ));
        text
    }

    /// Writes the config and returns its path.
    fn write(&self, text: &str) -> PathBuf {
        self.ws.config(text)
    }

    fn cli(&self, args: &[&str]) -> Output {
        self.cli_with(&self.ws.path("config.toml"), args)
    }

    /// Runs the binary with `--config config` and the API token in its environment.
    fn cli_with(&self, config: &Path, args: &[&str]) -> Output {
        let mut all = args.to_vec();
        all.extend(["--config", config.to_str().unwrap()]);
        run_with_env(&all, &[(TOKEN_ENV, TOKEN)], self.ws.dir.path())
    }

    fn once(&self) -> Output {
        self.cli(&["run", "--once"])
    }

    fn status(&self) -> Value {
        let out = self.cli(&["status", "--json"]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        serde_json::from_str(&out.stdout).unwrap()
    }

    /// A config the command line reaches a daemon serving at `addr` with (tests let the daemon
    /// pick a free port, which `listen = "127.0.0.1:0"` in the daemon's config cannot say).
    fn cli_config(&self, addr: &str) -> PathBuf {
        let text = std::fs::read_to_string(self.ws.path("config.toml")).unwrap();
        let path = self.ws.path("cli.toml");
        std::fs::write(&path, text.replace("listen = \"127.0.0.1:0\"", &format!("listen = \"{addr}\""))).unwrap();
        path
    }

    fn daemon(&self) -> Daemon {
        Daemon::start_with_env(&self.ws.path("config.toml"), &[(TOKEN_ENV, TOKEN)])
    }
}

/// The server and alert tables of the daemon tests.
fn server_and_alerts(receiver: &Receiver) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"{TOKEN_ENV}\"\n\n[[alerts]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}\"\nevents = [\"action.*\", \"rollout.*\"]\nbackoff = \"100ms\"\n",
        receiver.url
    )
}

/// Each open action's shown state by image (`waiting`, `held`, `awaiting_approval`, …).
fn pending(status: &Value) -> BTreeMap<String, String> {
    status["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["image"].as_str().unwrap().to_string(), a["state"].as_str().unwrap().to_string()))
        .collect()
}

fn states(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The open action of `image` in `status`.
fn open<'a>(status: &'a Value, image: &str) -> &'a Value {
    status["pending"].as_array().unwrap().iter().find(|a| a["image"] == image).unwrap_or_else(|| panic!("{status:#}"))
}

/// The newest recorded action of `image` in `status`.
fn action<'a>(status: &'a Value, image: &str) -> &'a Value {
    status["actions"].as_array().unwrap().iter().find(|a| a["image"] == image).unwrap_or_else(|| panic!("{status:#}"))
}

/// The fleet of the wave tests: the canary `petclinic` in wave 0, `web` and `api` in wave 1.
const FLEET: [(&str, &str); 3] = [
    ("petclinic", "policy = \"rebuild\"\nwave = 0"),
    ("web", "policy = \"rebuild\"\nwave = 1"),
    ("api", "policy = \"rebuild\"\nwave = 1"),
];

struct InProcess {
    monitor: Arc<Monitor>,
    runner: Arc<Runner>,
    ledger: Ledger,
    config: Arc<Config>,
}

impl InProcess {
    /// Why each pending action waits at `now`, as `status` reads it from the ledger.
    async fn waits(&self, now: chrono::DateTime<chrono::Utc>) -> BTreeMap<String, builder_monitor_core::rollout::Wait> {
        let open = self.ledger.open_actions().await.unwrap();
        let frozen = self.ledger.freeze_state().await.unwrap();
        builder_monitor::rollout::waits(&self.config, &self.ledger, &open, frozen.as_ref(), now).await.unwrap()
    }
}

fn assemble(dir: &Path, text: &str, clock: Clock) -> InProcess {
    std::fs::write(dir.join("config.toml"), text).unwrap();
    let config = Arc::new(Config::parse(&dir.join("config.toml"), text).unwrap_or_else(|e| panic!("{e}")));
    let ledger = Ledger::open(&dir.join("state.db")).unwrap();
    let monitor = Parts::new(config.clone(), ledger.clone(), clock.clone(), None).unwrap().monitor;
    let backend =
        builder_monitor::runner::Backends::for_config(&config, None.into(), CancellationToken::new()).unwrap();
    let runner = Arc::new(Runner::new(config.clone(), ledger.clone(), clock, backend));
    InProcess { monitor, runner, ledger, config }
}

/// A builder move runs the canary alone; the two others of wave 1 start once it has ended.
#[tokio::test]
async fn the_canary_runs_first_then_its_wave() {
    let w = World::new().await;
    let text = w
        .config(&FLEET, "type = \"exec\"\nmax_concurrent = 4", "")
        .replace("env = { RECORD_FILE", "env = { SLEEP = \"0.3\", RECORD_FILE");
    let d = assemble(w.ws.dir.path(), &text, Clock::System);
    assert!(d.monitor.run_once().await);
    w.move_builder("18.2.0").await;
    assert!(d.monitor.run_once().await);

    // Before anything runs, the wave says why it waits.
    let waits = d.waits(chrono::Utc::now()).await;
    let reasons: Vec<String> = waits.values().map(ToString::to_string).collect();
    assert_eq!(reasons, ["wave 1 waits for wave 0: petclinic pending"; 2], "{waits:?}");

    assert_eq!(d.runner.run_due_once().await, 3);
    let all = calls(&w.record());
    let at = |phase: &str, image: &str| all.iter().find(|c| c.phase == phase && c.image() == image).unwrap().at;
    let canary_end = at("end", "petclinic");
    for image in ["web", "api"] {
        assert!(at("start", image) >= canary_end, "{image} started before the canary ended: {all:?}");
    }
    assert_eq!(starts(&w.record()), count(&[("petclinic", 1), ("web", 1), ("api", 1)]));
    let actions = d.ledger.actions(10).await.unwrap();
    assert!(actions.iter().all(|a| a.state == ActionState::Succeeded), "{actions:?}");
}

/// The canary failing holds its wave (`held`, `action.held` delivered); `release` lets it run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_canary_holds_its_wave_until_release() {
    let w = World::new().await;
    let receiver = Receiver::start().await;
    let alerts = format!(
        "[[alerts]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}\"\nevents = [\"action.*\"]\nbackoff = \"100ms\"\n",
        receiver.url
    );
    let text = w
        .config(&FLEET, "type = \"exec\"\nmax_concurrent = 4\nmax_attempts = 1", &alerts)
        .replace("env = { RECORD_FILE", "env = { FAIL_IMAGE = \"petclinic\", RECORD_FILE");
    w.write(&text);
    let out = w.once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    w.move_builder("18.2.0").await;
    let out = w.once();
    assert_eq!(out.code, Some(1), "the canary failed: {}", out.stderr);
    assert_eq!(starts(&w.record()), count(&[("petclinic", 1)]), "only the canary ran");
    let held = receiver.wait_for_body("action.held").await.json();
    assert_eq!(held["type"], "action.held", "{held:#}");

    let status = w.status();
    assert_eq!(pending(&status), states(&[("web", "held"), ("api", "held")]), "{status:#}");
    let web = open(&status, "web");
    assert_eq!(web["gate"], "held");
    let why = web["waiting_for"].as_str().unwrap();
    assert!(why.contains("canary petclinic failed"), "{why}");
    let change = web["change"].as_str().unwrap().to_string();
    assert!(held.to_string().contains(&change), "the event names the change: {held:#}");

    // Held stays held.
    let out = w.once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(starts(&w.record()), count(&[("petclinic", 1)]));

    let out = w.cli(&["release", &change]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("released 2 action(s)"), "{}", out.stdout);
    let out = w.once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(starts(&w.record()), count(&[("petclinic", 1), ("web", 1), ("api", 1)]));
    let status = w.status();
    assert_eq!(pending(&status), states(&[]));
    assert_eq!(action(&status, "web")["state"], "succeeded");
    assert_eq!(action(&status, "petclinic")["state"], "failed");
}

/// Outside every window nothing starts; once the (manual) clock is inside one, the queue starts in
/// order: the canary, then its wave.
#[tokio::test]
async fn a_closed_window_starts_nothing_until_it_opens() {
    let w = World::new().await;
    // Tuesday 08:00 in Berlin; the window opens at 09:00 there.
    let start = chrono::DateTime::parse_from_rfc3339("2026-12-01T07:00:00Z").unwrap().to_utc();
    let clock = Clock::manual(start);
    let rollout = "[rollout]\nwindows = [{ days = \"Mon-Fri\", start = \"09:00\", end = \"17:00\", timezone = \"Europe/Berlin\" }]\n";
    let text = w.config(&FLEET, "type = \"exec\"\nmax_concurrent = 1", rollout);
    let d = assemble(w.ws.dir.path(), &text, clock.clone());
    assert!(d.monitor.run_once().await);
    w.move_builder("18.2.0").await;
    assert!(d.monitor.run_once().await);

    assert_eq!(d.runner.run_due_once().await, 0, "the window is closed");
    assert!(calls(&w.record()).is_empty());
    let waits = d.waits(clock.now()).await;
    assert_eq!(waits.len(), 3, "{waits:?}");
    for wait in waits.values() {
        assert_eq!(wait.to_string(), "outside windows: next opens Tue 09:00 Europe/Berlin");
    }

    clock.advance(Duration::from_secs(30 * 60));
    assert_eq!(d.runner.run_due_once().await, 0, "08:30 in Berlin: still closed");
    clock.advance(Duration::from_secs(31 * 60));
    assert_eq!(d.runner.run_due_once().await, 3);
    let order: Vec<String> =
        calls(&w.record()).iter().filter(|c| c.phase == "start").map(|c| c.image().to_string()).collect();
    // The canary, then its wave (planned together: in the order of their keys).
    let mut wave: Vec<(String, String)> =
        d.ledger.actions(10).await.unwrap().into_iter().filter(|a| a.wave == 1).map(|a| (a.key, a.image)).collect();
    wave.sort();
    let expected: Vec<String> =
        std::iter::once("petclinic".to_string()).chain(wave.into_iter().map(|(_, i)| i)).collect();
    assert_eq!(order, expected);
    assert_eq!(starts(&w.record()), count(&[("petclinic", 1), ("web", 1), ("api", 1)]));
}

/// `approve = ["rebuild"]`: a run image move's rebases start; a builder move's rebuilds wait for
/// approval, given through the CLI (to the running daemon's API) and the API for one image each,
/// and `reject` drops the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuilds_wait_for_approval_and_rebases_do_not() {
    let w = World::new().await;
    let receiver = Receiver::start().await;
    let run_v1 = w.run_v1.clone();
    let fleet = ["a", "b", "c"];
    for name in fleet {
        w.push_app(name, &run_v1).await;
    }
    let images: Vec<(&str, &str)> = fleet.iter().map(|n| (*n, "policy = \"auto\"")).collect();
    let extra = format!("[rollout]\napprove = [\"rebuild\"]\n\n{}", server_and_alerts(&receiver));
    w.write(&w.config(&images, "type = \"exec\"\nmax_concurrent = 4", &extra));
    let out = w.once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    // A run image move: rebases, which need no approval, run at once.
    w.push_run("2").await;
    let out = w.once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(starts(&w.record()), count(&[("a", 1), ("b", 1), ("c", 1)]));
    assert!(calls(&w.record()).iter().all(|c| c.args[0] == "REBASE"));

    // A builder move: rebuilds, which wait.
    w.move_builder("18.2.0").await;
    let mut daemon = w.daemon();
    let addr = daemon.server_addr();
    let event = daemon.wait_for_event("action.awaiting_approval");
    let change = event["rollout"]["change"].as_str().unwrap().to_string();
    let delivered = receiver.wait_for_body("action.awaiting_approval").await.json();
    assert_eq!(delivered["type"], "action.awaiting_approval", "{delivered:#}");
    let status = w.status();
    assert_eq!(
        pending(&status),
        states(&[("a", "awaiting_approval"), ("b", "awaiting_approval"), ("c", "awaiting_approval")]),
        "{status:#}"
    );
    assert_eq!(open(&status, "a")["gate"], "approval");
    assert_eq!(open(&status, "a")["change"], change.as_str());

    // Through the CLI, which sends it to the daemon that holds the ledger: `a` only.
    let cli = w.cli_config(&addr);
    let out = w.cli_with(&cli, &["approve", &change, "--image", "a"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("approved 1 action(s)"), "{}", out.stdout);
    daemon.wait_for("the daemon to record the decision", |v| v["message"] == "roll-out decision" && v["image"] == "a");
    daemon.wait_for("a's rebuild", |v| v["message"] == "action succeeded" && v["image"] == "a");

    // Through the API: `b` only, recorded under the name given.
    let response = support::http()
        .post(format!("http://{addr}/api/v1/changes/{change}/approve"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(json!({ "image": "b", "by": "alice" }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["actions"].as_array().unwrap().len(), 1, "{answer:#}");
    daemon.wait_for("b's rebuild", |v| v["message"] == "action succeeded" && v["image"] == "b");
    let rebuilds = |record: &Path| {
        calls(record)
            .iter()
            .filter(|c| c.phase == "start" && c.args[0] == "REBUILD")
            .map(|c| c.image().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(rebuilds(&w.record()), ["a", "b"]);

    // `reject` drops the rest.
    let out = w.cli_with(&cli, &["reject", &change]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("rejected 1 action(s)"), "{}", out.stdout);
    let status = w.status();
    assert_eq!(pending(&status), states(&[]), "{status:#}");
    assert_eq!(action(&status, "c")["state"], "rejected");
    let by = |image: &str| action(&status, image)["decided_by"].as_str().unwrap_or_default().to_string();
    // The command line names its user; the daemon's API adds that the name came through it.
    let cli_user = builder_monitor::rollout::cli_user().replace(" (cli)", " (cli, through the api)");
    assert_eq!(by("a"), cli_user);
    assert_eq!(by("b"), "alice (api)");
    assert_eq!(by("c"), cli_user);
    assert!(action(&status, "a")["decided_at"].is_string(), "{status:#}");
    let (code, _) = daemon.terminate();
    assert!(code.success());
    // Never run, not even by a later pass.
    let out = w.once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(rebuilds(&w.record()), ["a", "b"]);
}

/// A freeze survives a restart; two builder moves while frozen start nothing; unfreezing runs the
/// newest target once (the older action is superseded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_survives_a_restart_and_the_newest_target_runs_once() {
    let w = World::new().await;
    let receiver = Receiver::start().await;
    w.write(&w.config(&[("web", "policy = \"rebuild\"")], "type = \"exec\"", &server_and_alerts(&receiver)));
    let out = w.once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    let mut daemon = w.daemon();
    let addr = daemon.server_addr();
    let response = support::http()
        .post(format!("http://{addr}/api/v1/freeze"))
        .bearer_auth(TOKEN)
        .body(json!({ "reason": "release day", "by": "ops" }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    daemon.wait_for_event("rollout.frozen");
    let (code, _) = daemon.terminate();
    assert!(code.success());

    let mut daemon = w.daemon();
    let addr = daemon.server_addr();
    w.move_builder("18.2.0").await;
    daemon.wait_for_event("builder.changed");
    let newest = w.move_builder("18.3.0").await;
    daemon.wait_for_event("builder.changed");
    for _ in 0..3 {
        daemon.wait_for("a check", |v| v["message"] == "check done");
    }
    assert!(calls(&w.record()).is_empty(), "nothing starts while frozen");
    let status = w.status();
    assert_eq!(status["rollout"]["frozen"]["reason"], "release day", "{status:#}");
    assert_eq!(pending(&status), states(&[("web", "waiting")]));
    let web = open(&status, "web");
    assert_eq!(web["gate"], "frozen");
    assert!(web["waiting_for"].as_str().unwrap().ends_with(": release day"), "{web}");

    let out = w.cli_with(&w.cli_config(&addr), &["unfreeze"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    daemon.wait_for("the rebuild", |v| v["message"] == "action succeeded");
    receiver.wait_for_body("rollout.unfrozen").await;
    let (code, _) = daemon.terminate();
    assert!(code.success());
    let started: Vec<Call> = calls(&w.record()).into_iter().filter(|c| c.phase == "start").collect();
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0].args[3], format!("{}/demo/builder@{newest}", w.registry.host), "the newest target");
    let status = w.status();
    let web: Vec<&str> = status["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["image"] == "web")
        .map(|a| a["state"].as_str().unwrap())
        .collect();
    assert_eq!(web, ["succeeded", "superseded"], "{status:#}");
}

/// Held actions yield to a newer change like waiting ones: a second builder move supersedes them,
/// and its own actions start over with the canary.
#[tokio::test]
async fn a_newer_change_supersedes_held_actions() {
    let w = World::new().await;
    let text = w
        .config(&FLEET, "type = \"exec\"\nmax_concurrent = 4\nmax_attempts = 1", "")
        .replace("env = { RECORD_FILE", "env = { FAIL_IMAGE = \"petclinic\", RECORD_FILE");
    let d = assemble(w.ws.dir.path(), &text, Clock::System);
    assert!(d.monitor.run_once().await);
    w.move_builder("18.2.0").await;
    assert!(d.monitor.run_once().await);
    assert_eq!(d.runner.run_due_once().await, 1, "the canary, which fails");
    let held: Vec<String> = d
        .ledger
        .actions(10)
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.state == ActionState::Held)
        .map(|a| a.image)
        .collect();
    assert_eq!(held.len(), 2, "{held:?}");

    w.move_builder("18.3.0").await;
    assert!(d.monitor.run_once().await);
    let actions = d.ledger.actions(10).await.unwrap();
    let of = |state: ActionState| {
        let mut images: Vec<&str> = actions.iter().filter(|a| a.state == state).map(|a| a.image.as_str()).collect();
        images.sort_unstable();
        images
    };
    assert_eq!(of(ActionState::Superseded), ["api", "web"], "{actions:?}");
    assert_eq!(of(ActionState::Held), Vec::<&str>::new());
    assert_eq!(of(ActionState::Pending), ["api", "petclinic", "web"]);
    let waits = d.waits(chrono::Utc::now()).await;
    assert_eq!(waits.len(), 2, "the new wave waits for the new canary: {waits:?}");
    assert_eq!(d.runner.run_due_once().await, 1, "the new canary alone (it fails again)");
    assert_eq!(starts(&w.record()), count(&[("petclinic", 2)]));
}

/// `max_in_flight` caps the actions of one change running at once, below `max_concurrent`.
#[tokio::test]
async fn max_in_flight_caps_a_changes_running_actions() {
    let w = World::new().await;
    let fleet: Vec<(&str, &str)> = ["a", "b", "c", "d"].iter().map(|n| (*n, "policy = \"rebuild\"")).collect();
    let text = w
        .config(&fleet, "type = \"exec\"\nmax_concurrent = 4", "[rollout]\nmax_in_flight = 2\n")
        .replace("env = { RECORD_FILE", "env = { SLEEP = \"0.3\", RECORD_FILE");
    let d = assemble(w.ws.dir.path(), &text, Clock::System);
    assert!(d.monitor.run_once().await);
    w.move_builder("18.2.0").await;
    assert!(d.monitor.run_once().await);
    assert_eq!(d.runner.run_due_once().await, 4);
    let all = calls(&w.record());
    let spans: Vec<(u64, u64)> = all
        .iter()
        .filter(|c| c.phase == "start")
        .map(|s| (s.at, all.iter().find(|e| e.phase == "end" && e.image() == s.image()).unwrap().at))
        .collect();
    assert_eq!(spans.len(), 4);
    let most =
        spans.iter().map(|(start, _)| spans.iter().filter(|(s, e)| s <= start && start < e).count()).max().unwrap();
    assert_eq!(most, 2, "two of the change at a time, never more: {spans:?}");
}
