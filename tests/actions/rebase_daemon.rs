//! The daemon's registry rebases against the real registry, through the built binary: a run-image
//! move with `[runner] rebase = "registry"` rebases the app exactly once (runner `none`, so nothing
//! else could have), the ledger keeps the app's digests before and after, and `rollback` puts the
//! tag back by a manifest PUT.

use crate::support;

use std::path::PathBuf;

use serde_json::Value;

use builder_monitor::ledger::Ledger;
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor_core::reference::ImageRef;
use support::app::{self, App, RunImage};
use support::cnb::BuilderSpec;
use support::daemon::{Daemon, Output, Workspace, run_with_env};
use support::images::{Format, Pusher};
use support::registry::TestRegistry;

struct World {
    // Serves for as long as the world lives.
    _registry: TestRegistry,
    pusher: Pusher,
    ws: Workspace,
    config: PathBuf,
    /// `HOST/apps/web:latest`
    app_tag: String,
    /// The app as built, on run image v1.
    app_v1: String,
    run_v1: RunImage,
    run_v2: RunImage,
}

impl World {
    /// Run image v1, a builder naming it, and an app built on it; one `run --once` pins them.
    async fn new() -> Self {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let host = registry.host.clone();
        let run_tag = format!("{host}/demo/run:latest");
        let run_v1 = RunImage::jammy("1", 3);
        let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
        pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
        let app = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest));
        let app_v1 = app::push_app(&pusher, "apps/web", Some("latest"), &app, Format::Oci).await.digest;
        let ws = Workspace::new();
        let config = ws.config(&format!(
            "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
             [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n\
             [[images]]\nname = \"web\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/web:latest\"\npolicy = \"auto\"\n\n\
             [runner]\ntype = \"none\"\nrebase = \"registry\"\n"
        ));
        let world = World {
            app_tag: format!("{host}/apps/web:latest"),
            _registry: registry,
            pusher,
            ws,
            config,
            app_v1,
            run_v1,
            run_v2: RunImage::jammy("2", 4),
        };
        let first = world.cli(&["run", "--once"]);
        assert_eq!(first.code, Some(0), "{}", first.stderr);
        world
    }

    fn cli(&self, args: &[&str]) -> Output {
        let config = self.config.to_str().unwrap().to_string();
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--config", &config]);
        self.ws.run(&all)
    }

    fn client(&self) -> Registry {
        builder_monitor::install_crypto_provider();
        Registry::new([], Metrics::new())
    }

    async fn app_digest(&self) -> String {
        self.client().head_manifest(&ImageRef::parse(&self.app_tag).unwrap()).await.unwrap().digest
    }

    /// The app's config as the tag shows it now.
    async fn app_config(&self) -> Value {
        let registry = self.client();
        let image = ImageRef::parse(&self.app_tag).unwrap();
        let manifest = registry.get_manifest(&image, "latest").await.unwrap();
        let manifest: Value = serde_json::from_slice(&manifest.bytes).unwrap();
        let config = registry.get_blob(&image, manifest["config"]["digest"].as_str().unwrap(), 8 << 20).await.unwrap();
        serde_json::from_slice(&config).unwrap()
    }

    /// Run image v2 under the same tag: the move the daemon reacts to.
    async fn move_run_image(&self) {
        app::push_run(&self.pusher, "demo/run", Some("latest"), &self.run_v2, Format::Oci).await;
    }

    fn ledger(&self) -> Ledger {
        Ledger::open_read_only(&self.ws.path("state.db")).unwrap()
    }

    async fn event_types(&self) -> Vec<(String, Value)> {
        let events = self.ledger().events_after(0, 1000).await.unwrap();
        events.into_iter().map(|e| (e.event.event_type.to_string(), serde_json::to_value(&e.event).unwrap())).collect()
    }

    fn status(&self) -> Value {
        let out = self.cli(&["status", "--json"]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        serde_json::from_str(&out.stdout).unwrap()
    }
}

fn run_image_diff_ids(run: &RunImage) -> Vec<String> {
    run.layers.iter().map(|l| l.diff_id.clone()).collect()
}

fn diff_ids(config: &Value) -> Vec<String> {
    config["rootfs"]["diff_ids"].as_array().unwrap().iter().map(|d| d.as_str().unwrap().to_string()).collect()
}

/// The rebase the daemon test asks for; shared by both tests. Returns the rebased digest.
async fn rebase_through_the_daemon(w: &World) -> String {
    w.move_run_image().await;
    let out = w.cli(&["run", "--once"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // The runner's events are logged once recorded, like a check's.
    assert!(out.stderr.lines().any(|l| l.contains("rebase.succeeded")), "{}", out.stderr);
    let rebased = w.app_digest().await;
    assert_ne!(rebased, w.app_v1, "the tag moved");
    let diff_ids = diff_ids(&w.app_config().await);
    assert_eq!(diff_ids[..4], run_image_diff_ids(&w.run_v2)[..], "v2's layers under the app's");
    assert_eq!(diff_ids.len(), 4 + 4, "and the app's four layers above them");
    rebased
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_image_move_with_registry_rebases_rebases_the_app_exactly_once() {
    let w = World::new().await;
    let rebased = rebase_through_the_daemon(&w).await;

    // The event carries the digests before and after, and says the rebase ran in the registry.
    let events = w.event_types().await;
    let succeeded: Vec<&Value> = events.iter().filter(|(t, _)| t == "rebase.succeeded").map(|(_, e)| e).collect();
    assert_eq!(succeeded.len(), 1, "{events:?}");
    let action = &succeeded[0]["action"];
    assert_eq!(
        (action["previous"].as_str(), action["digest"].as_str()),
        (Some(w.app_v1.as_str()), Some(rebased.as_str()))
    );
    assert_eq!(action["path"], "registry");
    assert!(events.iter().all(|(t, _)| t != "rebase.failed" && !t.starts_with("build.")), "{events:?}");

    // The ledger's tag move, as `status` shows it.
    let status = w.status();
    let web = &status["images"][0];
    assert_eq!((web["name"].as_str(), web["digest"].as_str()), (Some("web"), Some(rebased.as_str())));
    assert_eq!(web["previous"].as_str(), Some(w.app_v1.as_str()));
    assert_eq!(web["moves"].as_array().unwrap().len(), 1);
    assert_eq!(web["moves"][0]["kind"], "rebase");

    // Exactly once: another round finds nothing to do and writes nothing.
    let again = w.cli(&["run", "--once"]);
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert_eq!(w.app_digest().await, rebased);
    let events = w.event_types().await;
    assert_eq!(events.iter().filter(|(t, _)| t == "rebase.succeeded").count(), 1, "{events:?}");
    assert_eq!(w.status()["images"][0]["moves"].as_array().unwrap().len(), 1);
    let actions = w.ledger().actions(10).await.unwrap();
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!((actions[0].action.as_str(), actions[0].attempts), ("rebase", 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_restores_the_previous_digest() {
    let w = World::new().await;
    // Nothing to roll back before any action moved the tag.
    let none = w.cli(&["rollback", "web"]);
    assert_eq!(none.code, Some(1), "{}", none.stdout);
    assert!(none.stderr.contains("records no rebase or rebuild that moved web"), "{}", none.stderr);
    let unknown = w.cli(&["rollback", "nope"]);
    assert_eq!(unknown.code, Some(2));
    assert!(unknown.stderr.contains("no image \"nope\" in [[images]] (configured: web)"), "{}", unknown.stderr);

    let rebased = rebase_through_the_daemon(&w).await;
    let out = w.cli(&["rollback", "web"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(w.app_digest().await, w.app_v1, "the tag is back where it was before the rebase");
    assert!(out.stdout.contains(&moved_line(&w.app_tag, &rebased, &w.app_v1)), "{}", out.stdout);
    assert!(out.stdout.contains("the digest before its last rebase"), "{}", out.stdout);
    assert_eq!(diff_ids(&w.app_config().await)[..3], run_image_diff_ids(&w.run_v1)[..], "on v1 again");
    let web = &w.status()["images"][0];
    assert_eq!(web["moves"][0]["kind"], "rollback");
    assert_eq!((web["digest"].as_str(), web["previous"].as_str()), (Some(w.app_v1.as_str()), Some(rebased.as_str())));
    // The run image the app is on now: v1 again, as its labels say (no recorded move made v1),
    // where the rebase had recorded v2's.
    let run_v1 = format!("{}@", w.app_tag.split("/apps/").next().unwrap().to_string() + "/demo/run");
    assert!(web["moves"][0]["run_image"].as_str().unwrap().starts_with(&run_v1), "{web:#}");
    assert_ne!(web["moves"][0]["run_image"], web["moves"][1]["run_image"], "{web:#}");
    assert!(web["moves"][1]["run_image"].as_str().unwrap().starts_with(&run_v1), "{web:#}");
    // On the record: who asked, one log line (the event's), and `image.rolled_back` in the ledger.
    let by = web["moves"][0]["by"].as_str().expect("the rollback records who asked").to_string();
    assert!(by.ends_with(" (cli)"), "{by}");
    assert!(out.stdout.contains(&format!("recorded in the ledger (by {by})")), "{}", out.stdout);
    // For people: digests short, no line over 160 characters; `--json` has them whole.
    assert!(out.stdout.lines().all(|l| l.chars().count() <= 160), "{}", out.stdout);
    assert!(!out.stdout.contains(&w.app_v1), "{}", out.stdout);
    let logged: Vec<&str> = out.stderr.lines().filter(|l| l.contains("image.rolled_back")).collect();
    assert_eq!(logged.len(), 1, "{}", out.stderr);
    assert!(logged[0].contains(&format!("by {by}")) && logged[0].contains("undoing its rebase"), "{}", logged[0]);
    let events = w.event_types().await;
    let rolled: Vec<&Value> = events.iter().filter(|(t, _)| t == "image.rolled_back").map(|(_, e)| e).collect();
    assert_eq!(rolled.len(), 1, "{events:?}");
    assert_eq!(
        (rolled[0]["rolled_back"]["by"].as_str(), rolled[0]["rolled_back"]["image"].as_str()),
        (Some(by.as_str()), Some("web"))
    );
    assert_eq!(
        (rolled[0]["previous"]["digest"].as_str(), rolled[0]["current"]["digest"].as_str()),
        (Some(rebased.as_str()), Some(w.app_v1.as_str()))
    );

    // Twice is once: the target is still the digest before the last rebase.
    let again = w.cli(&["rollback", "web", "--json"]);
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    let again: Value = serde_json::from_str(&again.stdout).unwrap();
    assert_eq!((&again["moved"], again["to"].as_str()), (&Value::Bool(false), Some(w.app_v1.as_str())), "{again:#}");
    let again = w.cli(&["rollback", "web"]);
    assert!(again.stdout.contains("already points at"), "{}", again.stdout);
    assert_eq!(w.status()["images"][0]["moves"].as_array().unwrap().len(), 2);

    // --to another recorded digest (forward again); an unrecorded one is refused.
    let stranger = format!("sha256:{}", "0".repeat(64));
    let refused = w.cli(&["rollback", "web", "--to", &stranger]);
    assert_eq!(refused.code, Some(1));
    assert!(refused.stderr.contains(&format!("{stranger} is not a digest recorded for web")), "{}", refused.stderr);
    // A short digest, as `status` shows it, names the recorded one it starts; the full one is said.
    let short = &rebased[..19];
    let forward = w.cli(&["rollback", "web", "--to", short]);
    assert_eq!(forward.code, Some(0), "{}", forward.stderr);
    assert!(forward.stderr.contains(&format!("--to {short} is {rebased}\n")), "{}", forward.stderr);
    assert_eq!(w.app_digest().await, rebased);
    let unknown = w.cli(&["rollback", "web", "--to", "sha256:000000000000"]);
    assert_eq!(unknown.code, Some(1));
    assert!(
        unknown.stderr.contains("sha256:000000000000 matches none of the digests recorded for web"),
        "{}",
        unknown.stderr
    );
}

/// `rollback` while the daemon runs goes to the daemon's API: the daemon holds the ledger and the
/// registry credentials, so nobody has to stop it to roll an app back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_goes_through_the_running_daemon() {
    const TOKEN: &str = "rollback-token-0123456789abcdef";
    let w = World::new().await;
    let rebased = rebase_through_the_daemon(&w).await;
    let text = std::fs::read_to_string(&w.config).unwrap()
        + "\n[server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"BM_ROLLBACK_TOKEN\"\n";
    std::fs::write(&w.config, &text).unwrap();
    let env = [("BM_ROLLBACK_TOKEN", TOKEN)];
    let mut daemon = Daemon::start_with_env(&w.config, &env);
    // The command line reaches the daemon at the address it picked.
    let addr = daemon.server_addr();
    let cli = w.ws.path("cli.toml");
    std::fs::write(&cli, text.replace("127.0.0.1:0", &addr)).unwrap();
    let rollback = |args: &[&str]| {
        let mut all = vec!["rollback", "web", "--config", cli.to_str().unwrap()];
        all.extend(args);
        run_with_env(&all, &env, w.ws.dir.path())
    };

    let stranger = format!("sha256:{}", "0".repeat(64));
    let refused = rollback(&["--to", &stranger]);
    assert_eq!(refused.code, Some(1), "as without a daemon: {}", refused.stderr);
    assert!(refused.stderr.contains(&format!("{stranger} is not a digest recorded for web")), "{}", refused.stderr);

    let out = rollback(&["--to", &w.app_v1[..19]]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains(&format!("--to {} is {}\n", &w.app_v1[..19], w.app_v1)), "{}", out.stderr);
    assert!(out.stdout.contains(&moved_line(&w.app_tag, &rebased, &w.app_v1)), "{}", out.stdout);
    assert_eq!(w.app_digest().await, w.app_v1, "the tag is back where it was before the rebase");
    let (status, logs) = daemon.terminate();
    assert!(status.success(), "{status}");
    // The daemon's one line for it, naming who asked through its API.
    let logged: Vec<&String> = logs.iter().filter(|l| l.contains("image.rolled_back")).collect();
    assert_eq!(logged.len(), 1, "{logs:#?}");
    assert!(logged[0].contains("(cli, through the api)"), "{}", logged[0]);
    let moved = &w.status()["images"][0]["moves"][0];
    assert_eq!(moved["kind"], "rollback");
    assert!(moved["by"].as_str().unwrap().ends_with("(cli, through the api)"), "{moved}");
}

/// A two-platform app (an index over amd64 and arm64, each built on the run image's child of that
/// platform): the daemon rebases each child onto its match in the new run image index, and
/// `rollback` puts the index back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_platform_app_is_rebased_per_platform_and_rolled_back() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let host = registry.host.clone();
    let run_tag = format!("{host}/demo/run:latest");
    let runs = |version: &str| app::two_platform_runs(version, 3);
    let (v1, v2) = (runs("1"), runs("2"));
    let v1_children = app::push_run_index(&pusher, "demo/run", "latest", &v1).await;
    pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
    let mut apps = Vec::new();
    for (run, child) in v1.iter().zip(&v1_children) {
        let app = App::on(run, &run_tag, &format!("{host}/demo/run@{}", child.digest));
        apps.push(app::push_app(&pusher, "apps/web", None, &app, Format::Oci).await);
    }
    let pairs: Vec<(&app::PushedImage, &RunImage)> = apps.iter().zip(v1.iter()).collect();
    let (app_v1, _) = app::push_index(&pusher, "apps/web", "latest", &pairs, None, Format::Oci).await;

    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n\
         [[images]]\nname = \"web\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/web:latest\"\npolicy = \"auto\"\n\n\
         [runner]\ntype = \"none\"\nrebase = \"registry\"\n"
    ));
    let config = config.to_str().unwrap();
    let run_once = || {
        let out = ws.run(&["run", "--once", "--config", config]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    };
    run_once();
    app::push_run_index(&pusher, "demo/run", "latest", &v2).await;
    run_once();

    builder_monitor::install_crypto_provider();
    let client = Registry::new([], Metrics::new());
    let tag = ImageRef::parse(&format!("{host}/apps/web:latest")).unwrap();
    let rebased = client.head_manifest(&tag).await.unwrap().digest;
    assert_ne!(rebased, app_v1, "the tag moved");
    let index: Value = serde_json::from_slice(&client.get_manifest(&tag, &rebased).await.unwrap().bytes).unwrap();
    let entries = index["manifests"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    for (entry, run) in entries.iter().zip(&v2) {
        assert_eq!(entry["platform"]["architecture"], run.architecture.as_str());
        let digest = entry["digest"].as_str().unwrap();
        let manifest: Value = serde_json::from_slice(&client.get_manifest(&tag, digest).await.unwrap().bytes).unwrap();
        let config = client.get_blob(&tag, manifest["config"]["digest"].as_str().unwrap(), 8 << 20).await.unwrap();
        let config: Value = serde_json::from_slice(&config).unwrap();
        assert_eq!(
            diff_ids(&config)[..3],
            run_image_diff_ids(run)[..],
            "{} sits on v2's {} layers",
            run.architecture,
            run.architecture
        );
        assert_eq!(config["architecture"], run.architecture.as_str());
    }

    let out = ws.run(&["rollback", "web", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(client.head_manifest(&tag).await.unwrap().digest, app_v1, "the index is back");
}

/// A fleet of `apps` app images on one run image (v1), behind a counting proxy, pinned by one
/// `run --once`.
pub(crate) struct Fleet {
    _registry: TestRegistry,
    pub(crate) proxy: support::proxy::Proxy,
    pub(crate) host: String,
    pub(crate) pusher: Pusher,
    ws: Workspace,
    config: PathBuf,
    apps: usize,
    /// The app every tag holds at first, on run image v1.
    pub(crate) app: App,
    /// The signing key's password, when the fleet signs.
    env: Vec<(&'static str, &'static str)>,
}

impl Fleet {
    pub(crate) async fn new(apps: usize) -> Self {
        Self::with_runner(apps, "max_concurrent = 16\n").await
    }

    /// [`Fleet::new`] with `runner` (more `[runner]` settings) instead of `max_concurrent = 16`.
    pub(crate) async fn with_runner(apps: usize, runner: &str) -> Self {
        Self::configured(apps, runner, "").await
    }

    /// [`Fleet::new`] signing and attesting what it rebases, `[signing]`'s defaults.
    pub(crate) async fn signed(apps: usize) -> Self {
        let signing = format!(
            "[signing]\nkey = \"{}\"\npassword_env = \"{}\"\n",
            crate::signing::fixture(crate::signing::KEY),
            crate::signing::PASSWORD_ENV
        );
        Self::configured(apps, "max_concurrent = 16\n", &signing).await
    }

    /// With `runner` (more `[runner]` settings) and `more` (tables after the images).
    async fn configured(apps: usize, runner: &str, more: &str) -> Self {
        let registry = TestRegistry::start_relative(support::registry::Auth::Anonymous);
        let proxy = support::proxy::Proxy::start(&registry.host).await;
        let host = proxy.host.clone();
        let pusher = Pusher::new(&host);
        let run_tag = format!("{host}/demo/run:latest");
        let run_v1 = RunImage::jammy("1", 3);
        let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
        pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
        let app = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest));
        let ws = Workspace::new();
        let mut text = format!(
            "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
             [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n\
             [registries.\"{host}\"]\nrequests_per_second = 0\n\n\
             [runner]\ntype = \"none\"\nrebase = \"registry\"\n{runner}\n"
        );
        for i in 0..apps {
            app::push_app(&pusher, &format!("apps/web-{i}"), Some("latest"), &app, Format::Oci).await;
            text.push_str(&format!(
                "[[images]]\nname = \"web-{i}\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/web-{i}:latest\"\npolicy = \"auto\"\n\n"
            ));
        }
        text.push_str(more);
        let config = ws.config(&text);
        let env =
            if more.is_empty() { Vec::new() } else { vec![(crate::signing::PASSWORD_ENV, crate::signing::PASSWORD)] };
        let fleet = Fleet { _registry: registry, proxy, host, pusher, ws, config, apps, app, env };
        let first = fleet.run_once();
        assert_eq!(first.code, Some(0), "{}", first.stderr);
        fleet
    }

    pub(crate) fn run_once(&self) -> Output {
        let args = ["run", "--once", "--config", self.config.to_str().unwrap()];
        support::daemon::run_with_env(&args, &self.env, self.ws.dir.path())
    }

    /// The daemon on this fleet's config.
    pub(crate) fn daemon(&self) -> Daemon {
        Daemon::start_with_env(&self.config, &self.env)
    }

    pub(crate) fn ledger(&self) -> Ledger {
        Ledger::open_read_only(&self.ws.path("state.db")).unwrap()
    }

    /// Run image v2 pushed and a daemon started (its first check finds the move) with planning's
    /// read of the last app held: once a first-batch rebase succeeded, the daemon, that rebase's
    /// event, the held read's release, and v2.
    async fn moved_with_the_last_read_held(&self) -> (Daemon, Value, std::sync::Arc<tokio::sync::Notify>, RunImage) {
        let last = format!("/v2/apps/web-{}/manifests/latest", self.apps - 1);
        let (trap, held, release) = support::proxy::Trap::hold("GET", &last);
        self.proxy.trap(trap);
        let run_v2 = RunImage::jammy("2", 4);
        app::push_run(&self.pusher, "demo/run", Some("latest"), &run_v2, Format::Oci).await;
        let mut daemon = Daemon::start(&self.config);
        tokio::time::timeout(support::PATIENCE, held.notified()).await.expect("planning reads the last app");
        let first = tokio::task::block_in_place(|| daemon.wait_for_event("rebase.succeeded"));
        (daemon, first, release, run_v2)
    }

    /// Asserts every app tag shows `run`'s layers under the app's.
    pub(crate) async fn assert_all_on(&self, run: &RunImage) {
        let client = Registry::new([], Metrics::new());
        let top = run.layers.len() - 1;
        for i in 0..self.apps {
            let tag = ImageRef::parse(&format!("{}/apps/web-{i}:latest", self.host)).unwrap();
            let manifest = client.get_manifest(&tag, "latest").await.unwrap();
            let manifest: Value = serde_json::from_slice(&manifest.bytes).unwrap();
            let layers = manifest["layers"].as_array().unwrap();
            assert_eq!(
                layers[top]["digest"].as_str(),
                Some(run.layers[top].digest.as_str()),
                "web-{i} is on the run image"
            );
        }
    }

    /// Asserts the ledger holds one rebase per app, all of one change, and that change's event once.
    pub(crate) async fn assert_one_rebase_each(&self) {
        let ledger = self.ledger();
        let actions = ledger.actions(1000).await.unwrap();
        assert_eq!(actions.len(), self.apps, "{actions:?}");
        assert!(actions.iter().all(|a| a.action == "rebase" && a.change == actions[0].change), "{actions:?}");
        let mut images: Vec<&str> = actions.iter().map(|a| a.image.as_str()).collect();
        images.sort();
        images.dedup();
        assert_eq!(images.len(), self.apps, "one action per app");
        let changed = changed_events(&ledger).await;
        assert_eq!(changed, vec![actions[0].change.clone()], "the change, recorded once");
    }
}

/// The ids of the `run_image.changed` events recorded.
async fn changed_events(ledger: &Ledger) -> Vec<String> {
    let events = ledger.events_after(0, 1000).await.unwrap();
    events
        .into_iter()
        .filter(|e| e.event.event_type.to_string() == "run_image.changed")
        .map(|e| e.event.id.clone())
        .collect()
}

/// A fleet on one run image, through a counting proxy: the daemon reads the new run image's
/// manifest and config once for all its apps (the check's own reads aside), and mounts every layer
/// with no HEAD before it; every app is rebased exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_reads_the_new_run_image_once_and_mounts_without_a_head() {
    const APPS: usize = 5;
    let fleet = Fleet::new(APPS).await;
    let run_v2 = RunImage::jammy("2", 4);
    let v2 = app::push_run(&fleet.pusher, "demo/run", Some("latest"), &run_v2, Format::Oci).await;
    let v2_config = support::images::sha256(&serde_json::to_vec(&v2.config).unwrap());
    fleet.proxy.clear();
    let out = fleet.run_once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    let seen = fleet.proxy.seen();
    let gets = |path: &str| seen.iter().filter(|s| s.method == "GET" && s.path.ends_with(path)).count();
    // The run image check reads each once too; without the shared documents every rebase would add
    // one more of each.
    let manifest_reads = gets(&format!("/v2/demo/run/manifests/{}", v2.digest));
    let config_reads = gets(&format!("/v2/demo/run/blobs/{v2_config}"));
    assert!(manifest_reads <= 2, "the run image manifest read {manifest_reads} times for {APPS} apps");
    assert!(config_reads <= 2, "the run image config read {config_reads} times for {APPS} apps");
    let layer_heads: Vec<&String> = seen
        .iter()
        .filter(|s| {
            s.method == "HEAD"
                && s.path.starts_with("/v2/apps/")
                && s.path.contains("/blobs/")
                && run_v2.layers.iter().any(|l| s.path.ends_with(&l.digest))
        })
        .map(|s| &s.path)
        .collect();
    assert_eq!(layer_heads, Vec::<&String>::new(), "a mount needs no HEAD before it");
    let mounts = seen.iter().filter(|s| s.method == "POST" && s.path.contains("mount=")).count();
    assert_eq!(mounts, APPS * run_v2.layers.len());

    fleet.assert_all_on(&run_v2).await;
    let actions = fleet.ledger().actions(100).await.unwrap();
    assert!(actions.iter().all(|a| a.attempts == 1), "{actions:?}");
    fleet.assert_one_rebase_each().await;
}

/// Apps in planning's first batch (`reaction::FIRST_BATCH`), and a fleet with a second batch.
const FIRST_BATCH: usize = 16;
const TWO_BATCHES: usize = FIRST_BATCH + 4;

/// Planning in batches: while the last app of a fleet is still being read, the first batch's
/// rebases already run and succeed; the change is recorded once planning ends, with every app's
/// action once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_starts_rebasing_before_its_last_app_is_read() {
    let fleet = Fleet::new(TWO_BATCHES).await;
    let (mut daemon, first, release, run_v2) = fleet.moved_with_the_last_read_held().await;
    assert!(changed_events(&fleet.ledger()).await.is_empty(), "the change is not recorded while planning reads");
    release.notify_one();
    let change = first["action"]["change"].as_str().unwrap().to_string();
    // The change and the other rebases, in whichever order they come.
    let (rebased, changed) = (std::cell::Cell::new(1), std::cell::Cell::new(false));
    tokio::task::block_in_place(|| {
        daemon.wait_for("the change and every rebase", |v| {
            match v["event_type"].as_str() {
                Some("rebase.succeeded") => rebased.set(rebased.get() + 1),
                Some("run_image.changed") => changed.set(true),
                _ => {}
            }
            rebased.get() == TWO_BATCHES && changed.get()
        })
    });
    daemon.kill();
    fleet.assert_all_on(&run_v2).await;
    fleet.assert_one_rebase_each().await;
    assert_eq!(fleet.ledger().actions(1000).await.unwrap()[0].change, change);
}

/// A daemon killed between recording a fleet's first actions and its commit: the next run finds
/// the same move, plans it again under the same change id, keeps what it recorded (and did)
/// already, and ends with every app rebased by one action each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_while_planning_finishes_the_fleet_on_the_next_run() {
    let fleet = Fleet::new(TWO_BATCHES).await;
    let (daemon, first, release, run_v2) = fleet.moved_with_the_last_read_held().await;
    daemon.kill();
    release.notify_one();
    let early = fleet.ledger().actions(1000).await.unwrap();
    assert!(
        !early.is_empty() && early.len() < TWO_BATCHES,
        "only the first batch was recorded: {} actions",
        early.len()
    );
    assert!(changed_events(&fleet.ledger()).await.is_empty(), "no change recorded");

    let out = fleet.run_once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    fleet.assert_all_on(&run_v2).await;
    fleet.assert_one_rebase_each().await;
    let actions = fleet.ledger().actions(1000).await.unwrap();
    assert_eq!(actions[0].change, first["action"]["change"].as_str().unwrap(), "the same change id");
}

/// Distinct apps under tags of one repository, and one more app under `SHARED_TAGS` more tags.
const SHARED_REPO_APPS: usize = 100;
const SHARED_TAGS: usize = 16;

/// A fleet in one repository (`apps/shared`): `SHARED_REPO_APPS` apps, each its own app layer,
/// tagged `app-N`, and one app tagged `env-0` … `env-15` (one manifest under sixteen tags), seeded
/// into the registry's storage on run image v1 and pinned by one `run --once`. Every rebase of it
/// mounts the same run image layers into the same repository, and the sixteen tags of one manifest
/// write the same config and manifest: Distribution rewrites a blob's link on every mount or upload
/// of it, and a manifest PUT that reads a half-written link answers `400 DIGEST_INVALID`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_in_one_repository_is_rebased_on_every_first_attempt() {
    let registry = TestRegistry::start();
    let host = registry.host.clone();
    let pusher = Pusher::new(&host);
    let run_tag = format!("{host}/demo/run:latest");
    let run_v1 = RunImage::jammy("1", 3);
    let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
    pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
    let template = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest));
    let seed = |tags: &[String], n: usize| {
        let mut app = template.clone();
        app.layers[2] = app::layer("workspace/server.js", &format!("// app {n}\n"));
        let layers: Vec<&app::Layer> = app.run.layers.iter().chain(&app.layers).collect();
        let built = app::build("apps/shared", &layers, &app.config(), Format::Oci);
        for tag in tags {
            registry.seed("apps/shared", tag, &built.blobs, &built.manifest);
        }
    };
    let mut tags: Vec<String> = (0..SHARED_REPO_APPS).map(|i| format!("app-{i}")).collect();
    for (i, tag) in tags.iter().enumerate() {
        seed(std::slice::from_ref(tag), i);
    }
    let shared: Vec<String> = (0..SHARED_TAGS).map(|i| format!("env-{i}")).collect();
    seed(&shared, SHARED_REPO_APPS);
    tags.extend(shared);

    let ws = Workspace::new();
    let mut text = format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n\
         [registries.\"{host}\"]\nrequests_per_second = 0\n\n\
         [runner]\ntype = \"none\"\nrebase = \"registry\"\nmax_concurrent = 16\n\n"
    );
    for tag in &tags {
        text.push_str(&format!(
            "[[images]]\nname = \"{tag}\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/shared:{tag}\"\npolicy = \"auto\"\n\n"
        ));
    }
    let config = ws.config(&text);
    let config = config.to_str().unwrap();
    let first = ws.run(&["run", "--once", "--config", config]);
    assert_eq!(first.code, Some(0), "{}", first.stderr);

    // The daemon (each rebase awaited in turn, not one deadline for the whole fleet) finds the
    // move at its first check; it stops at the first failed attempt or once every rebase succeeded.
    let run_v2 = RunImage::jammy("2", 4);
    app::push_run(&pusher, "demo/run", Some("latest"), &run_v2, Format::Oci).await;
    let mut daemon = Daemon::start(std::path::Path::new(config));
    let failed_attempt = |v: &Value| v["message"].as_str().is_some_and(|m| m.starts_with("action failed"));
    for _ in 0..tags.len() {
        let line = tokio::task::block_in_place(|| {
            daemon.wait_for("a rebase's outcome", |v| failed_attempt(v) || v["message"] == "action succeeded")
        });
        if failed_attempt(&line) {
            break;
        }
    }
    let (_, log) = tokio::task::block_in_place(|| daemon.terminate());
    let failed: Vec<&String> = log.iter().filter(|l| l.contains("action failed")).collect();
    assert_eq!(failed, Vec::<&String>::new(), "no rebase fails its first attempt");
    // Not by luck of the retries inside an attempt either: one writer per blob and repository
    // leaves no link file rewritten under a manifest PUT.
    let retried: Vec<&String> = log.iter().filter(|l| l.contains("trying again")).collect();
    assert_eq!(retried, Vec::<&String>::new(), "no manifest PUT is refused");

    builder_monitor::install_crypto_provider();
    let client = Registry::new([], Metrics::new());
    let top = run_v2.layers.len() - 1;
    for tag in &tags {
        let image = ImageRef::parse(&format!("{host}/apps/shared:{tag}")).unwrap();
        let manifest: Value = serde_json::from_slice(&client.get_manifest(&image, tag).await.unwrap().bytes).unwrap();
        assert_eq!(manifest["layers"][top]["digest"].as_str(), Some(run_v2.layers[top].digest.as_str()), "{tag} moved");
    }
    let actions = Ledger::open_read_only(&ws.path("state.db")).unwrap().actions(1000).await.unwrap();
    assert_eq!(actions.len(), tags.len(), "one rebase per tag");
    let retried: Vec<(&str, u32)> =
        actions.iter().filter(|a| a.attempts != 1).map(|a| (a.image.as_str(), a.attempts)).collect();
    assert_eq!(retried, Vec::<(&str, u32)>::new(), "every rebase succeeded on its first attempt");
}

/// `rollback`'s first line for people: `web: moved TAG from sha256:<12 hex>… to sha256:<12 hex>…`.
fn moved_line(tag: &str, from: &str, to: &str) -> String {
    let short = |d: &str| format!("{}…", &d[.."sha256:".len() + 12]);
    format!("moved {tag} from {} to {}", short(from), short(to))
}
