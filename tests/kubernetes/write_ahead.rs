//! Actions are monotonic and write-ahead, in both ledgers: one action per app image at a time, a
//! newer change supersedes a running action at its write and at its retry, and every tag write is
//! recorded as an intent before it is made.

use crate::support;

use builder_monitor::ledger::{
    ActionEnd, ActionOutcome, ActionState, CheckRecord, Ledger, NewAction, PinUpdate, TagIntent, TagMoveKind,
    WatchKind, WriteGrant,
};
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::schedule::parse_timestamp;
use chrono::{DateTime, Utc};
use serde_json::json;
use support::ledgers::both;

fn at(text: &str) -> DateTime<Utc> {
    parse_timestamp(text).unwrap()
}

fn check(time: &str, change: Option<&str>, actions: Vec<NewAction>) -> CheckRecord {
    CheckRecord {
        watch: "b".into(),
        kind: WatchKind::Builder,
        image: "r.test/cnb/builder:latest".into(),
        time: at(time),
        outcome: Ok(()),
        pin: change.map(|c| PinUpdate {
            digest: format!("sha256:{c}"),
            reference: format!("r.test/cnb/builder@sha256:{c}"),
            media_type: "application/vnd.oci.image.index.v1+json".into(),
            platforms: [
                ("linux/amd64".to_string(), format!("sha256:{c}-amd64")),
                ("linux/arm64".to_string(), format!("sha256:{c}-arm64")),
            ]
            .into(),
            metadata: None,
        }),
        pending: None,
        change: None,
        events: vec![],
        deliveries: vec![],
        actions,
        history: 10,
    }
}

fn action(change: &str, image: &str) -> NewAction {
    NewAction {
        key: format!("bm-{change}-{image}"),
        change_id: change.into(),
        image: image.into(),
        kind: ActionKind::Rebase,
        target: serde_json::from_value(json!({ "image": format!("r.test/apps/{image}:latest"), "builder_name": "b",
                        "builder": format!("r.test/cnb/builder@sha256:{change}"), "run_image": null,
                        "source": null, "why": "test" }))
        .unwrap(),
        wave: 1,
        needs_approval: false,
        expedited: Default::default(),
        batch: None,
    }
}

fn intent(action: Option<&str>, expected: &str, new: &str) -> TagIntent {
    TagIntent {
        image: "app".into(),
        reference: "r.test/apps/app:latest".into(),
        kind: if action.is_some() { TagMoveKind::Rebase } else { TagMoveKind::Rollback },
        action: action.map(str::to_string),
        expected: Some(expected.into()),
        new: Some(new.into()),
        time: at("2026-11-30T12:01:00.123Z"),
        by: None,
    }
}

fn end(key: &str, outcome: ActionOutcome, keep_intent: bool) -> ActionEnd<'_> {
    ActionEnd {
        key,
        outcome,
        detail: "TagMoved".into(),
        output_tail: String::new(),
        watch: "b",
        events: vec![],
        deliveries: vec![],
        history: 10,
        now: at("2026-11-30T12:07:00Z"),
        tag_move: None,
        hold: None,
        keep_intent,
        follow: vec![],
        hold_image: false,
    }
}

async fn state_of(ledger: &Ledger, key: &str) -> (ActionState, Option<String>) {
    let actions = ledger.actions(20).await.unwrap();
    let a = actions.into_iter().find(|a| a.key == key).unwrap();
    (a.state, a.detail)
}

#[tokio::test]
async fn a_newer_change_supersedes_a_running_action_at_its_write_and_at_its_retry() {
    both(|ledger| async move {
        let far = at("2099-01-01T00:00:00Z");
        ledger.commit(check("2026-11-30T12:00:00Z", Some("c1"), vec![action("c1", "app")])).await.unwrap();
        let claimed = ledger.claim_actions(far, 5).await.unwrap();
        assert_eq!(claimed.len(), 1);
        let k1 = claimed[0].key.clone();

        // The write is recorded before it is made, and read back whole.
        assert_eq!(
            ledger.begin_tag_write("b", intent(Some(&k1), "sha256:a1", "sha256:a2")).await.unwrap(),
            WriteGrant::Granted
        );
        assert_eq!(ledger.tag_intents().await.unwrap(), [intent(Some(&k1), "sha256:a1", "sha256:a2")]);

        // A newer change for the same image: its action waits for the running one (one per image).
        ledger.commit(check("2026-11-30T12:05:00Z", Some("c2"), vec![action("c2", "app")])).await.unwrap();
        assert_eq!(state_of(&ledger, &k1).await.0, ActionState::Running, "a started action is not cut short");
        assert!(ledger.claim_actions(far, 5).await.unwrap().is_empty(), "the newer one waits for the running one");
        assert_eq!(
            ledger.next_action_at(at("2026-11-30T12:05:00Z")).await.unwrap(),
            None,
            "nothing due while it waits"
        );

        // At its next write the older one learns it is superseded, and writes nothing.
        assert_eq!(
            ledger.begin_tag_write("b", intent(Some(&k1), "sha256:a1", "sha256:a2")).await.unwrap(),
            WriteGrant::Superseded { by: "c2".into() }
        );
        // Its retry re-checks first: it ends superseded, never pending again; its intent is closed.
        let retry = ActionOutcome::Retry { next_attempt: at("2026-11-30T12:08:00Z") };
        ledger.finish_action(end(&k1, retry, false)).await.unwrap();
        let (state, detail) = state_of(&ledger, &k1).await;
        assert_eq!(state, ActionState::Superseded);
        assert!(detail.unwrap().starts_with("superseded by change c2"));
        assert!(ledger.tag_intents().await.unwrap().is_empty());
        assert_eq!(
            ledger.begin_tag_write("b", intent(Some(&k1), "sha256:a1", "sha256:a2")).await.unwrap(),
            WriteGrant::NotRunning
        );

        // Now the newer one starts; an attempt that cannot tell whether its write landed keeps its
        // intent for the next attempt.
        let claimed = ledger.claim_actions(far, 5).await.unwrap();
        assert_eq!(claimed.iter().map(|a| a.change_id.as_str()).collect::<Vec<_>>(), ["c2"]);
        let k2 = claimed[0].key.clone();
        assert_eq!(
            ledger.begin_tag_write("b", intent(Some(&k2), "sha256:a1", "sha256:a3")).await.unwrap(),
            WriteGrant::Granted
        );
        let retry = ActionOutcome::Retry { next_attempt: at("2026-11-30T12:08:00Z") };
        ledger.finish_action(end(&k2, retry, true)).await.unwrap();
        assert_eq!(state_of(&ledger, &k2).await.0, ActionState::Pending, "no newer change: a retry stays a retry");
        assert_eq!(ledger.tag_intents().await.unwrap().len(), 1);
        ledger.end_tag_write("app", Some(&k2)).await.unwrap();
        assert!(ledger.tag_intents().await.unwrap().is_empty());

        // A rollback's intent (no action) is closed by the move it records.
        assert_eq!(
            ledger.begin_tag_write("b", intent(None, "sha256:a3", "sha256:a1")).await.unwrap(),
            WriteGrant::Granted
        );
        assert_eq!(ledger.tag_intents().await.unwrap()[0].action, None);
        let done =
            intent(None, "sha256:a3", "sha256:a1").completed(Some("sha256:a1".into()), at("2026-11-30T12:09:00Z"));
        ledger.record_tag_move("b", done, 10).await.unwrap();
        assert!(ledger.tag_intents().await.unwrap().is_empty());
        let moves = ledger.tag_moves(Some("app"), 5).await.unwrap();
        assert_eq!((moves[0].before.as_deref(), moves[0].after.as_deref()), (Some("sha256:a3"), Some("sha256:a1")));

        // The pin history keeps each pin's platform manifests (what orders run images).
        let history = ledger.history("b", 5).await.unwrap();
        assert_eq!(history[0].digest, "sha256:c2");
        assert_eq!(history[0].platforms, ["sha256:c2-amd64", "sha256:c2-arm64"]);

        // What the app was last built or rebased with.
        assert_eq!(ledger.last_succeeded_target("app", ActionKind::Rebase).await.unwrap(), None);
        let claimed = ledger.claim_actions(far, 5).await.unwrap();
        ledger.finish_action(end(&claimed[0].key, ActionOutcome::Succeeded, false)).await.unwrap();
        let last = ledger.last_succeeded_target("app", ActionKind::Rebase).await.unwrap().unwrap();
        assert_eq!(last.builder, "r.test/cnb/builder@sha256:c2");
    })
    .await;
}

// ---- The daemon, against a real registry behind a proxy that holds, kills or races ----

mod world {
    use std::path::PathBuf;

    use builder_monitor::ledger::Ledger;
    use builder_monitor::metrics::Metrics;
    use builder_monitor::registry::Registry;
    use builder_monitor_core::reference::ImageRef;
    use serde_json::Value;

    use super::support::app::{self, App, RunImage};
    use super::support::cnb::BuilderSpec;
    use super::support::daemon::{Output, Workspace};
    use super::support::images::{Format, Pusher};
    use super::support::proxy::Proxy;
    use super::support::registry::{Auth, TestRegistry};

    /// A registry behind a proxy; every name the daemon sees is the proxy's, every push goes to
    /// the registry itself (so the proxy's traps catch only the daemon's requests).
    pub struct World {
        pub registry: TestRegistry,
        pub proxy: Proxy,
        pub pusher: Pusher,
        pub ws: Workspace,
        pub config: PathBuf,
        /// `PROXY/apps/web:latest`
        pub app_tag: String,
        /// Run image versions pushed so far (v1 first).
        pub run_versions: u32,
    }

    impl World {
        /// Run image v1, a builder naming it, an app built on it, pinned by one `run --once`
        /// (with `interval`, for the daemon tests).
        pub async fn new(interval: &str) -> Self {
            // Relative upload locations, so the daemon's uploads stay on the proxy.
            let registry = TestRegistry::start_relative(Auth::Anonymous);
            let proxy = Proxy::start(&registry.host).await;
            let pusher = Pusher::new(&registry.host);
            let host = proxy.host.clone();
            let run_tag = format!("{host}/demo/run:latest");
            let run_v1 = RunImage::jammy("1", 3);
            let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
            pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
            let app = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest));
            app::push_app(&pusher, "apps/web", Some("latest"), &app, Format::Oci).await;
            let ws = Workspace::new();
            let config = ws.config(&format!(
                "[monitor]\nstate = \"state.db\"\ninterval = \"{interval}\"\njitter = \"0s\"\n\n\
                 [registries.\"{host}\"]\ninsecure = true\nrequests_per_second = 0\n\n\
                 [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n\
                 [[images]]\nname = \"web\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/web:latest\"\npolicy = \"auto\"\n\n\
                 [runner]\ntype = \"none\"\nrebase = \"registry\"\nbackoff = \"1s\"\n"
            ));
            let world = World {
                app_tag: format!("{host}/apps/web:latest"),
                registry,
                proxy,
                pusher,
                ws,
                config,
                run_versions: 1,
            };
            let first = world.cli(&["run", "--once"]);
            assert_eq!(first.code, Some(0), "{}", first.stderr);
            world
        }

        pub fn cli(&self, args: &[&str]) -> Output {
            let config = self.config.to_str().unwrap().to_string();
            let mut all: Vec<&str> = args.to_vec();
            all.extend(["--config", &config]);
            tokio::task::block_in_place(|| self.ws.run(&all))
        }

        /// `builder-monitor ARGS --config …`, not waited for.
        pub fn spawn(&self, args: &[&str]) -> std::process::Child {
            std::process::Command::new(super::support::daemon::BINARY)
                .args(args)
                .arg("--config")
                .arg(&self.config)
                .current_dir(self.ws.dir.path())
                .env("BUILDER_MONITOR_LOG", "info")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start builder-monitor")
        }

        pub fn client(&self) -> Registry {
            builder_monitor::install_crypto_provider();
            let mut settings = builder_monitor::config::RegistrySettings::defaults_for(&self.proxy.host);
            settings.insecure = true;
            Registry::new([settings], Metrics::new())
        }

        pub async fn app_digest(&self) -> String {
            self.client().head_manifest(&ImageRef::parse(&self.app_tag).unwrap()).await.unwrap().digest
        }

        /// The run image layers under the app tag now (its config's first diff ids).
        pub async fn app_base(&self) -> Vec<String> {
            let registry = self.client();
            let image = ImageRef::parse(&self.app_tag).unwrap();
            let manifest = registry.get_manifest(&image, "latest").await.unwrap();
            let manifest: Value = serde_json::from_slice(&manifest.bytes).unwrap();
            let config =
                registry.get_blob(&image, manifest["config"]["digest"].as_str().unwrap(), 8 << 20).await.unwrap();
            let config: Value = serde_json::from_slice(&config).unwrap();
            let ids: Vec<String> = config["rootfs"]["diff_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_str().unwrap().to_string())
                .collect();
            ids[..3].to_vec()
        }

        /// The next run image version under the same tag; its layers and its digest.
        pub async fn move_run_image(&mut self) -> (RunImage, String) {
            self.run_versions += 1;
            let run = RunImage::jammy(&self.run_versions.to_string(), 3);
            let pushed = app::push_run(&self.pusher, "demo/run", Some("latest"), &run, Format::Oci).await;
            (run, pushed.digest)
        }

        pub fn ledger(&self) -> Ledger {
            Ledger::open_read_only(&self.ws.path("state.db")).unwrap()
        }
    }

    pub fn diff_ids(run: &RunImage) -> Vec<String> {
        run.layers.iter().map(|l| l.diff_id.clone()).collect()
    }
}

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use support::app::RunImage;
use support::daemon::Daemon;
use support::images::{Format, Pusher};
use support::proxy::Trap;
use world::{World, diff_ids};

/// The app's tag, as a path the proxy sees.
const APP_TAG_PUT: &str = "/v2/apps/web/manifests/latest";

fn event_of(line: &serde_json::Value) -> serde_json::Value {
    serde_json::from_str(line["event"].as_str().unwrap_or("{}")).unwrap_or_default()
}

/// Waits (off the runtime's threads) for the daemon's event of `event_type` that `wanted` accepts.
fn wait_event(daemon: &mut Daemon, event_type: &str, wanted: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let line = tokio::task::block_in_place(|| {
        daemon.wait_for(event_type, |v| {
            v["target"] == "builder_monitor_core::event" && v["event_type"] == event_type && wanted(&event_of(v))
        })
    });
    event_of(&line)
}

async fn action_state(world: &World, change: &str) -> ActionState {
    let actions = world.ledger().actions(200).await.unwrap();
    actions
        .iter()
        .find(|a| a.change == change)
        .map(|a| a.state)
        .unwrap_or_else(|| panic!("no action of {change}: {actions:#?}"))
}

/// The race: run image v2's rebase is slow (a blob mount held, or its tag PUT held), v3
/// arrives meanwhile. Whichever way it falls, the app ends on v3, and when v2's rebase had not
/// written yet it ends `superseded`, never writing v2 over v3. 20 trials, the two orders in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_rebase_never_undoes_a_newer_one() {
    let mut world = World::new("1s").await;
    let mut daemon = Daemon::start(&world.config);
    for trial in 0..20 {
        let held_at_write = trial % 2 == 1;
        let (trap, held, release) = if held_at_write {
            Trap::hold("PUT", APP_TAG_PUT)
        } else {
            Trap::hold("POST", "/v2/apps/web/blobs/uploads/?mount=")
        };
        world.proxy.trap(trap);
        let (_, v2) = world.move_run_image().await;
        let changed_v2 = wait_event(&mut daemon, "run_image.changed", |e| e.to_string().contains(&v2));
        tokio::time::timeout(support::PATIENCE, held.notified()).await.expect("v2's rebase reaches the held request");
        let (run_v3, v3) = world.move_run_image().await;
        let changed_v3 = wait_event(&mut daemon, "run_image.changed", |e| e.to_string().contains(&v3));
        if trial < 2 {
            // v3's rebase waits for v2's, and says so.
            let status: serde_json::Value = serde_json::from_str(&world.cli(&["status", "--json"]).stdout).unwrap();
            let v3_action =
                status["pending"].as_array().unwrap().iter().find(|p| p["change"] == changed_v3["id"]).cloned();
            assert_eq!(v3_action.as_ref().map(|p| p["gate"].clone()), Some("image_busy".into()), "{status:#}");
        }
        release.notify_one();
        wait_event(&mut daemon, "rebase.succeeded", |e| e["action"]["change"] == changed_v3["id"]);

        assert_eq!(world.app_base().await, diff_ids(&run_v3), "trial {trial}: the app ends on the newest run image");
        let v2_state = action_state(&world, changed_v2["id"].as_str().unwrap()).await;
        let expected = if held_at_write { ActionState::Succeeded } else { ActionState::Superseded };
        assert_eq!(v2_state, expected, "trial {trial}: v2's rebase");
        assert_eq!(action_state(&world, changed_v3["id"].as_str().unwrap()).await, ActionState::Succeeded);
    }
    // Nothing left to run, and no rebase ever failed or retried its way back.
    let open = world.ledger().open_actions().await.unwrap();
    assert!(open.is_empty(), "{open:#?}");
    assert!(!daemon.log.iter().any(|l| l.contains("rebase.failed")), "{}", daemon.log.join("\n"));
}

/// Kills `child` with SIGKILL when the proxy has forwarded the trapped request and the registry
/// answered it, before the answer reaches the child; answers whether the kill happened.
fn kill_after(world: &World, method: &str, path: &str, child: &std::process::Child) -> Arc<AtomicBool> {
    let killed = Arc::new(AtomicBool::new(false));
    let (pid, flag) = (child.id().to_string(), killed.clone());
    world.proxy.trap(Trap::after(method, path, move || {
        let (pid, flag) = (pid.clone(), flag.clone());
        async move {
            // Set first: the child's waiter may see it die before `kill` itself returns.
            flag.store(true, Ordering::SeqCst);
            std::process::Command::new("kill").args(["-KILL", &pid]).status().expect("kill");
        }
    }));
    killed
}

async fn wait_child(mut child: std::process::Child) -> std::process::ExitStatus {
    tokio::task::spawn_blocking(move || child.wait().expect("wait")).await.unwrap()
}

/// SIGKILL right after the app tag's PUT landed, 30 times, and 6 times right after a rollback's:
/// the next run (or rollback) completes the recorded intent, so no move is missing, `status`
/// shows where the tag is, and every rollback goes exactly one step back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_right_after_the_tag_write_loses_no_move() {
    let mut world = World::new("1h").await;
    let mut kills = 0;
    for trial in 0..30 {
        let before = world.app_digest().await;
        let (run, _) = world.move_run_image().await;
        world.proxy.clear();
        let child = world.spawn(&["run", "--once"]);
        let killed = kill_after(&world, "PUT", APP_TAG_PUT, &child);
        let status = wait_child(child).await;
        assert!(killed.load(Ordering::SeqCst), "trial {trial}: killed after the tag PUT ({status})");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "trial {trial}");
        kills += 1;
        let written = world.app_digest().await;
        assert_ne!(written, before, "trial {trial}: the PUT landed before the kill");
        assert_eq!(world.app_base().await, diff_ids(&run));

        // The next run finds the intent, sees the tag holds its digest, and records the move.
        let again = world.cli(&["run", "--once"]);
        assert_eq!(again.code, Some(0), "trial {trial}: {}", again.stderr);
        assert_eq!(world.app_digest().await, written, "trial {trial}: nothing written twice");
        let moves = world.ledger().tag_moves(Some("web"), 100).await.unwrap();
        assert_eq!(
            (moves[0].before.as_deref(), moves[0].after.as_deref()),
            (Some(before.as_str()), Some(written.as_str())),
            "trial {trial}: the move is recorded from where it started"
        );
        assert!(world.ledger().tag_intents().await.unwrap().is_empty());
        let status: serde_json::Value = serde_json::from_str(&world.cli(&["status", "--json"]).stdout).unwrap();
        assert_eq!(status["images"][0]["digest"].as_str(), Some(written.as_str()), "trial {trial}");

        // Every rollback is exact: one step back, to the digest before that move.
        if trial % 5 == 4 {
            // Killed right after its own tag PUT: the next rollback completes it.
            let child = world.spawn(&["rollback", "web"]);
            let killed = kill_after(&world, "PUT", APP_TAG_PUT, &child);
            wait_child(child).await;
            assert!(killed.load(Ordering::SeqCst), "trial {trial}: rollback killed after its PUT");
            kills += 1;
        }
        let back = world.cli(&["rollback", "web"]);
        assert_eq!(back.code, Some(0), "trial {trial}: {}", back.stderr);
        assert_eq!(world.app_digest().await, before, "trial {trial}: rolled back exactly one step");
        let moves = world.ledger().tag_moves(Some("web"), 100).await.unwrap();
        assert_eq!(moves[0].kind, TagMoveKind::Rollback);
        assert_eq!(
            (moves[0].before.as_deref(), moves[0].after.as_deref()),
            (Some(written.as_str()), Some(before.as_str()))
        );
    }
    assert!(kills >= 30, "{kills} kills");
}

/// A competitor's push that lands right behind the rebase's tag PUT is found by the HEAD after
/// it: the action fails with `tag_race` and the digest found, the move it made is recorded, and a
/// rollback refuses to act on a tag that is not where the ledger says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_racing_the_tag_write_is_reported_never_a_silent_success() {
    let mut world = World::new("1h").await;
    let before = world.app_digest().await;
    // The rival: the same app rebuilt by someone else, pushed over the tag right after our PUT.
    let rival_run = RunImage::jammy("rival", 3);
    let rival = support::app::App::on(&rival_run, &format!("{}/demo/run:latest", world.proxy.host), "x@sha256:0");
    let host = world.registry.host.clone();
    let rival_digest = Arc::new(std::sync::Mutex::new(String::new()));
    let found = rival_digest.clone();
    world.proxy.trap(Trap::after("PUT", APP_TAG_PUT, move || {
        let (host, rival, found) = (host.clone(), rival.clone(), found.clone());
        async move {
            let pusher = Pusher::new(&host);
            let pushed = support::app::push_app(&pusher, "apps/web", Some("latest"), &rival, Format::Oci).await;
            *found.lock().unwrap() = pushed.digest;
        }
    }));
    world.move_run_image().await;
    let out = world.cli(&["run", "--once"]);
    assert_eq!(out.code, Some(1), "a failed action fails the run: {}", out.stderr);
    let rival_digest = rival_digest.lock().unwrap().clone();
    assert_eq!(world.app_digest().await, rival_digest, "the rival's push holds the tag");

    let actions = world.ledger().actions(10).await.unwrap();
    assert_eq!(actions[0].state, ActionState::Failed, "{actions:#?}");
    assert!(actions[0].detail.as_deref().unwrap().starts_with("tag_race:"), "{:?}", actions[0].detail);
    let events = world.ledger().events_after(0, 100).await.unwrap();
    let failed = events.iter().find(|e| e.event.event_type.as_str() == "rebase.failed").expect("rebase.failed");
    assert_eq!(
        failed.event.action.as_ref().unwrap().result.build().and_then(|b| b.tag_race.as_deref()),
        Some(rival_digest.as_str())
    );
    let moves = world.ledger().tag_moves(Some("web"), 10).await.unwrap();
    assert_eq!(moves[0].before.as_deref(), Some(before.as_str()), "our write is recorded: we did move the tag");
    let ours = moves[0].after.clone().unwrap();
    assert_ne!(ours, rival_digest);

    let refused = world.cli(&["rollback", "web"]);
    assert_eq!(refused.code, Some(1), "{}", refused.stdout);
    assert!(
        refused
            .stderr
            .contains(&format!("points at {rival_digest}, but the ledger's last recorded move left it at {ours}")),
        "{}",
        refused.stderr
    );
    assert_eq!(world.app_digest().await, rival_digest, "nothing written");
}

/// `rebase --config` knows the run image's pin history: onto an older run image than the app is
/// on it refuses (exit 1, nothing written) unless `--force`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebase_never_moves_an_app_onto_an_older_run_image_unless_forced() {
    let mut world = World::new("1h").await;
    let (_, v2) = world.move_run_image().await;
    assert_eq!(world.cli(&["run", "--once"]).code, Some(0));
    let (run_v3, v3) = world.move_run_image().await;
    assert_eq!(world.cli(&["run", "--once"]).code, Some(0));
    assert_eq!(world.app_base().await, diff_ids(&run_v3));
    let on_v3 = world.app_digest().await;

    let older = format!("{}/demo/run@{v2}", world.proxy.host);
    let app = world.app_tag.clone();
    let refused = world.cli(&["rebase", &app, "--run-image", &older]);
    assert_eq!(refused.code, Some(1), "{}", refused.stdout);
    assert!(refused.stderr.contains(&format!("the app is on run image {v3}, pinned after {v2}")), "{}", refused.stderr);
    assert_eq!(world.app_digest().await, on_v3, "nothing written");

    let forced = world.cli(&["rebase", &app, "--run-image", &older, "--force"]);
    assert_eq!(forced.code, Some(0), "{}", forced.stderr);
    assert_ne!(world.app_digest().await, on_v3);
}
