//! The status page at `GET /` against the real daemon and registry (or a server over a ledger
//! written here), rendered by a real headless Chromium: its DOM holds the expected rows, registry
//! text stays text, the text it shows and its width at 1280 px are right, and read access applies.

use crate::support;

use std::path::Path;

use builder_monitor_core::cnb::run_watch_name;
use builder_monitor_core::reference::ImageRef;
use support::browser::{browse, chromium, evaluate};
use support::cnb::BuilderSpec;
use support::daemon::{Daemon, Workspace};
use support::images::{Format, Image, Pusher};
use support::receiver::{Receiver, Reply};
use support::registry::TestRegistry;

mod access;
mod fixes;
mod registries;
mod signed;

const TOKEN: &str = "test-api-token-0123456789";
/// A buildpack id as a hostile registry could publish it: markup and a terminal escape.
const HOSTILE: &str = "<script>document.title='pwned'</script>\u{1b}[31m";
/// How the page shows it, as Chromium serialises the text back out of its DOM.
const HOSTILE_SHOWN: &str = "&lt;script&gt;document.title='pwned'&lt;/script&gt;\\x1b[31m";

/// A freeze reason (and author) that would run script were it markup.
const HOSTILE_FREEZE: &str = "<img src=x onerror=\"document.title='pwned'\">";

/// `sha256:` and 12 hex digits, as the page shows digests.
fn short(digest: &str) -> &str {
    &digest[..19]
}

/// Recognises one log line (its JSON).
type LogLine<'a> = Box<dyn Fn(&serde_json::Value) -> bool + 'a>;

/// Waits until every predicate has matched a log line of its own, in any order.
fn wait_for_all(daemon: &mut Daemon, what: &str, mut wanted: Vec<LogLine<'_>>) {
    while !wanted.is_empty() {
        let line = daemon.wait_for(what, |_| true);
        if let Some(i) = wanted.iter().position(|w| w(&line)) {
            drop(wanted.remove(i));
        }
    }
}

/// A `check done` line of `watch` whose outcome starts with `outcome` (`Pinned`, `Failed`).
fn checked<'a>(watch: &'a str, outcome: &'a str) -> LogLine<'a> {
    Box::new(move |v| {
        v["message"] == "check done"
            && v["watch"] == watch
            && v["outcome"].as_str().is_some_and(|o| o.starts_with(outcome))
    })
}

// The in-test alert receiver answers while the test blocks on the daemon's log: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_renders_in_chromium_with_every_section() {
    let Some(chromium) = chromium() else { return };
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let host = &registry.host;
    let run = format!("{host}/paketobuildpacks/run-jammy-base:latest");
    let heroku_run = format!("{host}/heroku/heroku:24");
    pusher.push_image("paketobuildpacks/run-jammy-base", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    pusher.push_image("heroku/heroku", Some("24"), &Image::new("amd64"), Format::Oci).await;
    let jammy = BuilderSpec::jammy(&run);
    let mut untrusted = BuilderSpec::jammy(&run);
    untrusted.description = "a builder from a registry nobody vetted".into();
    let push = |repo: &'static str, spec: BuilderSpec| {
        let pusher = &pusher;
        async move { pusher.push_image(repo, Some("latest"), &spec.image(), Format::Oci).await }
    };
    push("paketobuildpacks/builder-jammy-base", jammy.clone()).await;
    pusher.push_image("heroku/builder", Some("24"), &BuilderSpec::heroku(&heroku_run).image(), Format::Oci).await;
    push("sample/untrusted-builder", untrusted.clone()).await;

    // Every builder.changed of the untrusted builder is refused for good: a dead letter.
    let receiver = Receiver::start().await;
    receiver.reply([Reply::Status(400)]);
    let ws = Workspace::new();
    let config = ws.config(&format!(
        r#"[monitor]
state = "state.db"
interval = "1h"
jitter = "0s"

[server]
listen = "127.0.0.1:0"
api_token_env = "BM_TEST_API_TOKEN"
public_read = true

[[builders]]
name = "paketo-jammy-base"
image = "{host}/paketobuildpacks/builder-jammy-base:latest"

[[builders]]
name = "heroku-24"
image = "{host}/heroku/builder:24"
schedule = "0 0 * * * *"

[[builders]]
name = "untrusted"
image = "{host}/sample/untrusted-builder:latest"
watch_run_image = false

[[builders]]
name = "gone"
image = "{host}/sample/deleted-builder:latest"

[[images]]
name = "petclinic"
builder = "paketo-jammy-base"
image = "{host}/apps/petclinic:latest"
policy = "rebuild"
source = {{ git = "https://git.example.com/petclinic.git", revision = "main" }}

[[alerts]]
name = "platform-team"
type = "webhook"
url = "{}"
events = ["builder.changed"]
builders = ["untrusted"]
"#,
        receiver.url
    ));
    let mut daemon = Daemon::start_with_env(&config, &[("BM_TEST_API_TOKEN", TOKEN)]);
    let server = daemon.server_addr();
    let run_watch = run_watch_name(&ImageRef::parse(&run).unwrap());
    let heroku_run_watch = run_watch_name(&ImageRef::parse(&heroku_run).unwrap());
    wait_for_all(
        &mut daemon,
        "the first checks",
        vec![
            checked("paketo-jammy-base", "Pinned"),
            checked("heroku-24", "Pinned"),
            checked("untrusted", "Pinned"),
            checked(&run_watch, "Pinned"),
            checked(&heroku_run_watch, "Pinned"),
            checked("gone", "Failed"),
        ],
    );

    // Two moves: a buildpack bump, and a buildpack whose id is hostile.
    let bumped = push("paketobuildpacks/builder-jammy-base", jammy.bump("paketo-buildpacks/java", "18.2.0")).await;
    untrusted.buildpacks.push((HOSTILE.into(), "1.0.0".into(), "sha256:hostile-1.0.0".into()));
    untrusted.order.push(HOSTILE.into());
    push("sample/untrusted-builder", untrusted).await;
    let http = support::http();
    for name in ["paketo-jammy-base", "untrusted"] {
        let url = format!("http://{server}/api/v1/builders/{name}/check");
        assert_eq!(http.post(url).bearer_auth(TOKEN).send().await.unwrap().status(), 202);
    }
    wait_for_all(
        &mut daemon,
        "both changes and a dead letter",
        vec![
            checked("paketo-jammy-base", "Changed"),
            checked("untrusted", "Changed"),
            Box::new(|v| v["message"] == "alert delivery given up (dead letter)"),
        ],
    );

    let url = format!("http://{server}/");
    let response = http.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_string());
    assert_eq!(header("content-type").as_deref(), Some("text/html; charset=utf-8"));
    let csp = header("content-security-policy").unwrap();
    assert!(csp.starts_with("default-src 'none'; style-src 'unsafe-inline'"), "{csp}");

    let dom = tokio::task::spawn_blocking({
        let (chromium, url) = (chromium.clone(), url.clone());
        move || browse(&chromium, &url, &["--dump-dom"])
    })
    .await
    .unwrap();
    let row = |class: &str, name: &str| {
        let start = dom
            .find(&format!("<tr class=\"{class}\" data-name=\"{name}\">"))
            .unwrap_or_else(|| panic!("no {class} row for {name} in:\n{dom}"));
        &dom[start..start + dom[start..].find("</tr>").unwrap()]
    };
    let jammy_row = row("builder", "paketo-jammy-base");
    assert!(jammy_row.contains(&format!(">{}</code>", short(&bumped.digest))), "{jammy_row}");
    assert!(jammy_row.contains("<span class=\"pill ok\">ok</span>"), "{jammy_row}");
    assert!(jammy_row.contains("<span class=\"kind kind-rebuild\">rebuild</span>"), "{jammy_row}");
    assert!(jammy_row.contains("paketo-buildpacks/java 18.1.0 → 18.2.0"), "{jammy_row}");
    assert!(row("builder", "heroku-24").contains("cron <code class=\"nowrap\">0 0 * * * *</code>"));
    let gone = row("builder", "gone");
    assert!(gone.contains("not pinned yet") && gone.contains("<span class=\"streak\">1</span>"), "{gone}");
    assert!(row("run", &run_watch).contains("for paketo-jammy-base"));
    assert!(row("run", &heroku_run_watch).contains("for heroku-24"));
    assert_eq!(dom.matches("<tr class=\"change\">").count(), 2, "one change each for two builders");
    let action = &dom[dom.find("<tr class=\"action\">").expect("the planned rebuild")..];
    assert!(action.contains("petclinic") && action.contains("records actions and never runs them"));
    let dead = &dom[dom.find("<tr class=\"dead-letter\">").expect("the refused alert")..];
    assert!(dead.contains("platform-team") && dead.contains("HTTP 400"), "{dead}");

    // The hostile id is text in the untrusted builder's row and its history; nothing ran.
    assert!(row("builder", "untrusted").contains(HOSTILE_SHOWN), "{dom}");
    assert_eq!(dom.matches(HOSTILE_SHOWN).count(), 2, "{dom}");
    assert!(!dom.to_ascii_lowercase().contains("<script"), "an element was injected:\n{dom}");
    assert!(!dom.contains("pwned</title>") && !dom.contains('\u{1b}'));

    // The failing builder leads its table; the app image shows its planned rebuild; each history
    // is folded.
    assert!(dom.find("data-name=\"gone\"") < dom.find("data-name=\"paketo-jammy-base\""), "{dom}");
    assert!(dom.contains("<td data-label=\"Builder\" id=\"watch-gone\">") && dom.contains("href=\"#watch-gone\""));
    let image = &dom[dom.find("<tr class=\"image\" data-name=\"petclinic\"").expect("the app image")..];
    assert!(image.contains("rebuild <span class=\"pill warn pending\">pending</span>"), "{image}");
    assert!(image.contains("<a href=\"#watch-paketo-jammy-base\">"), "{image}");
    assert_eq!(dom.matches("<details class=\"history\"").count(), 2, "{dom}");

    let shot = tempfile::tempdir().unwrap();
    let png = shot.path().join("status-page.png");
    tokio::task::spawn_blocking({
        let (chromium, url, png) = (chromium.clone(), url.clone(), png.clone());
        move || browse(&chromium, &url, &[&format!("--screenshot={}", png.display()), "--window-size=1280,900"])
    })
    .await
    .unwrap();
    let bytes = std::fs::read(&png).expect("a screenshot");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), 1280, "IHDR width");
    // `STATUS_PAGE_SCREENSHOT=docs/status-page.png` refreshes the picture in docs/.
    if let Some(keep) = std::env::var_os("STATUS_PAGE_SCREENSHOT") {
        let keep = Path::new(env!("CARGO_MANIFEST_DIR")).join(keep);
        std::fs::copy(&png, &keep).expect("copy the screenshot");
    }

    // A freeze whose reason and author are markup: a banner and a tile, all of it text.
    let freeze = format!("http://{server}/api/v1/freeze");
    let body = serde_json::json!({ "reason": HOSTILE_FREEZE, "by": HOSTILE_FREEZE });
    assert_eq!(http.post(freeze).bearer_auth(TOKEN).body(body.to_string()).send().await.unwrap().status(), 200);
    let page = tokio::task::spawn_blocking({
        let (chromium, url) = (chromium.clone(), url.clone());
        move || {
            let shown = "({ text: document.body.innerText, html: document.documentElement.outerHTML, \
                          title: document.title, width: document.documentElement.scrollWidth })";
            evaluate(&chromium, &url, (1280, 900), shown)
        }
    })
    .await
    .unwrap();
    let (text, html) = (page["text"].as_str().unwrap(), page["html"].as_str().unwrap());
    assert!(text.contains(&format!("Frozen by {HOSTILE_FREEZE} (api) since ")), "{text}");
    let actions = &text[text.find("Open actions").unwrap()..];
    let since = &actions[actions.find("frozen since ").expect("the freeze in Open actions")..];
    let since = &since[..since.find(&format!(" by {HOSTILE_FREEZE} (api): {HOSTILE_FREEZE};")).expect("who and why")];
    assert!(since == "frozen since just now" || since.ends_with(" ago"), "{since}");
    assert!(!text.contains("<time") && !html.contains("<img"), "{html}");
    assert_eq!(page["title"], "builder-monitor (1 failing)");
    assert!(html.contains("data-tile=\"frozen\" href=\"#frozen\"><b>yes</b>"), "{html}");
    assert!(page["width"].as_u64().unwrap() <= 1280, "the page is {} px wide", page["width"]);

    let (status, _) = daemon.terminate();
    assert!(status.success());
}

/// A deploy of `digest` to `image`'s Deployment `shop/{image}` by hand, under change `change`.
/// The page served in process over `ledger`, as the daemon serves it: its URL, and the token that
/// stops it.
async fn serve_page(
    config: &std::sync::Arc<builder_monitor::config::Config>,
    ledger: builder_monitor::ledger::Ledger,
) -> (String, tokio_util::sync::CancellationToken) {
    let parts = builder_monitor::daemon::Parts::new(
        config.clone(),
        ledger.clone(),
        builder_monitor::schedule::Clock::System,
        None,
    )
    .unwrap();
    let settings = config.server.clone().unwrap();
    let state = builder_monitor::server::ServerState::new(config.clone(), settings, parts.monitor.handle(), ledger);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(builder_monitor::server::serve(std::sync::Arc::new(state), listener, stop.clone()));
    (url, stop)
}

fn deploy_action(change: &str, image: &str, digest: &str) -> builder_monitor::ledger::NewAction {
    let target = serde_json::json!({
        "image": format!("127.0.0.1:9/apps/{image}:latest"), "builder_name": "jammy", "builder": "b", "run_image": null,
        "source": null, "why": "by hand",
        "deploy": { "digest": digest, "reference": format!("127.0.0.1:9/apps/{image}@{digest}"), "undo": "workload",
                    "workloads": [{ "kind": "Deployment", "namespace": "shop", "name": image, "container": "app" }] },
    });
    builder_monitor::ledger::NewAction::new(
        builder_monitor_core::deploy::action_key(change, image),
        change.into(),
        image.into(),
        builder_monitor_core::plan::ActionKind::Deploy,
        serde_json::from_value(target).unwrap(),
    )
}

/// Takes the one pending deploy, records that it wrote `image`'s container `app` (now in
/// `state`), and ends it with `outcome`, holding the image when `hold`.
async fn carry_out(
    ledger: &builder_monitor::ledger::Ledger,
    image: &str,
    digest: &str,
    state: &str,
    outcome: builder_monitor::ledger::ActionOutcome,
    hold: bool,
) {
    use builder_monitor::ledger::ActionEnd;
    let now = chrono::Utc::now();
    let kind = builder_monitor_core::plan::ActionKind::Deploy;
    let claimed = ledger.claim_actions_of(now, 1, kind, &Default::default()).await.unwrap();
    assert_eq!(claimed.len(), 1, "one deploy of {image} to carry out");
    let progress = builder_monitor_core::progress::Progress::read(kind, serde_json::json!({ "workloads": [{ "kind": "Deployment", "namespace": "shop", "name": image,
        "container": "app", "state": state, "detail": (state == "failed").then_some("ProgressDeadlineExceeded: no progress in 600s"),
        "containers": [{ "name": "app", "previous": format!("127.0.0.1:9/apps/{image}:old"),
                         "image": format!("127.0.0.1:9/apps/{image}@{digest}") }] }] })).unwrap();
    assert!(ledger.record_progress(&claimed[0].key, progress).await.unwrap());
    let end = ActionEnd {
        key: &claimed[0].key,
        outcome,
        detail: format!("Deployment shop/{image}: {state}"),
        output_tail: String::new(),
        watch: "jammy",
        events: vec![],
        deliveries: vec![],
        history: 10,
        now,
        tag_move: None,
        hold: None,
        keep_intent: false,
        follow: vec![],
        hold_image: hold,
    };
    ledger.finish_action(end).await.unwrap();
}

/// The Deploys section, rendered by Chromium from a server in process over a ledger holding a
/// deploy that succeeded and one that failed and holds its image; an image never deployed says so.
#[tokio::test]
async fn the_deploys_section_shows_each_workload_in_chromium() {
    use builder_monitor::ledger::{ActionOutcome, Ledger};
    use builder_monitor_core::deploy::{Workload, WorkloadKind};
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let images: String = ["petclinic", "orders", "billing"]
        .iter()
        .map(|n| {
            format!("[[images]]\nname = \"{n}\"\nbuilder = \"jammy\"\nimage = \"127.0.0.1:9/apps/{n}:latest\"\n\n")
        })
        .collect();
    let text = format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\n\n[server]\nlisten = \"127.0.0.1:0\"\npublic_read = true\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"127.0.0.1:9/cnb/builder:latest\"\n\n{images}"
    );
    let mut config = builder_monitor::config::Config::parse(&path, &text).unwrap();
    // Set in code (the parser has its own tests).
    for image in &mut config.images {
        image.deploy = vec![Workload {
            kind: WorkloadKind::Deployment,
            namespace: "shop".into(),
            name: image.name.clone(),
            container: Some("app".into()),
            gitops_owned: Default::default(),
        }];
    }
    let config = std::sync::Arc::new(config);
    let ledger = Ledger::open(&dir.path().join("state.db")).unwrap();
    let (good, bad) = (format!("sha256:{}", "a".repeat(64)), format!("sha256:{}", "b".repeat(64)));
    ledger.record_actions(vec![deploy_action("manual-1", "petclinic", &good)], chrono::Utc::now()).await.unwrap();
    carry_out(&ledger, "petclinic", &good, "healthy", ActionOutcome::Succeeded, false).await;
    ledger.record_actions(vec![deploy_action("manual-2", "orders", &bad)], chrono::Utc::now()).await.unwrap();
    carry_out(&ledger, "orders", &bad, "failed", ActionOutcome::Failed, true).await;

    let (url, stop) = serve_page(&config, ledger).await;

    let dom = tokio::task::spawn_blocking(move || browse(&chromium, &url, &["--dump-dom"])).await.unwrap();
    stop.cancel();
    assert!(dom.contains("<h2 id=\"deploys\">Deploys <span class=\"count\">3</span></h2>"), "{dom}");
    let row = |image: &str| {
        let start = dom
            .find(&format!("<tr class=\"deploy\" data-image=\"{image}\" data-workload=\"shop/{image}\">"))
            .unwrap_or_else(|| panic!("no deploy row for {image} in:\n{dom}"));
        &dom[start..start + dom[start..].find("</tr>").unwrap()]
    };
    let petclinic = row("petclinic");
    assert!(petclinic.contains("Deployment <code>shop/petclinic</code>"), "{petclinic}");
    assert!(petclinic.contains(&format!("title=\"{good}\">{}</code>", short(&good))), "{petclinic}");
    assert!(petclinic.contains("<span class=\"pill ok healthy\">healthy</span>"), "{petclinic}");
    assert!(petclinic.contains("<time datetime="), "{petclinic}");
    let orders = row("orders");
    assert!(orders.contains(&format!(">{}</code>", short(&bad))), "{orders}");
    assert!(orders.contains("<span class=\"pill err failed held\">failed</span>"), "{orders}");
    assert!(orders.contains("ProgressDeadlineExceeded: no progress in 600s"), "{orders}");
    assert!(orders.contains("<span class=\"sub held\">Deployment shop/<wbr>orders: failed</span>"), "{orders}");
    let billing = row("billing");
    assert!(
        billing.contains("<span class=\"pill muted none\">none</span>") && billing.contains("no deploy yet"),
        "{billing}"
    );
}

/// A rebuild of `image` for `change`, in roll-out `wave`, waiting for approval when `approve`.
fn rebuild_action(change: &str, image: &str, wave: u32, approve: bool) -> builder_monitor::ledger::NewAction {
    let target = serde_json::json!({
        "image": format!("127.0.0.1:9/apps/{image}:latest"), "builder_name": "jammy", "builder": "b", "run_image": null,
        "source": null, "why": "a buildpack moved",
    });
    builder_monitor::ledger::NewAction::new(
        format!("bm-{change}-{image}"),
        change.into(),
        image.into(),
        builder_monitor_core::plan::ActionKind::Rebuild,
        serde_json::from_value(target).unwrap(),
    )
    .gated(wave, approve)
}

/// Whether `text` holds a run of 64 hex digits: a digest shown in full.
fn full_digest_in(text: &str) -> bool {
    let mut run = 0;
    text.chars().any(|c| {
        run = if c.is_ascii_hexdigit() { run + 1 } else { 0 };
        run >= 64
    })
}

/// What the page's later parts show, in Chromium at 1280 px, from a server in process over a
/// ledger holding a freeze in force (set ten minutes ago), app images whose last actions failed,
/// were rejected and are held, a failing builder configured after a healthy one, a history of two
/// changes, and references (and 64-hex digests in an error and a detail) long enough to widen any
/// column that does not wrap them.
#[tokio::test]
async fn the_page_shows_the_freeze_and_app_images_and_fits_1280px_in_chromium() {
    use builder_monitor::ledger::{
        ActionEnd, ActionOutcome, ChangeRecord, CheckFailure, CheckRecord, Hold, Ledger, PinUpdate, TagMove,
        TagMoveKind, Verdict, WatchKind,
    };
    use builder_monitor_core::cnb::{BuilderMetadata, Change, PinnedMetadata, PlatformMetadata, RunImage};
    use builder_monitor_core::plan::ActionKind;
    use builder_monitor_core::rollout::Freeze;
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let org = "127.0.0.1:9/platform-engineering-shared-services/cloud-native-buildpacks";
    let builder = format!("{org}/builder-jammy-base-with-the-java-and-node-toolchains:latest");
    let failing = format!("{org}/builder-heroku-24-with-every-buildpack-the-platform-supports:24");
    let run = format!("{org}/run-jammy-base-with-extra-ca-certificates-and-locales:latest");
    let app = |n: &str| format!("{org}/applications/{n}-service-with-a-long-descriptive-name:latest");
    let images: String = ["petclinic", "billing", "orders"]
        .map(|n| format!("[[images]]\nname = \"{n}\"\nbuilder = \"jammy\"\nimage = \"{}\"\n", app(n)))
        .join("\n");
    let text = format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\n\n[server]\nlisten = \"127.0.0.1:0\"\npublic_read = true\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{builder}\"\n\n[[builders]]\nname = \"heroku\"\nimage = \"{failing}\"\n\n{images}"
    );
    let config =
        std::sync::Arc::new(builder_monitor::config::Config::parse(&dir.path().join("config.toml"), &text).unwrap());
    let ledger = Ledger::open(&dir.path().join("state.db")).unwrap();
    let hex = |c: char| format!("sha256:{}", c.to_string().repeat(64));
    let now = chrono::Utc::now();
    let ago = |minutes: i64| now - chrono::Duration::minutes(minutes);
    let normal = |r: &str| ImageRef::parse(r).unwrap().to_string();
    let repository = |r: &str| r.rsplit_once(':').unwrap().0.to_string();

    // jammy: pinned three times (two changes), naming the run image; heroku: its check failed.
    let metadata = PinnedMetadata {
        platforms: [(
            "linux/amd64".to_string(),
            PlatformMetadata::Builder(Box::new(BuilderMetadata {
                run_images: vec![RunImage { image: run.clone(), mirrors: vec![] }],
                ..Default::default()
            })),
        )]
        .into(),
        ..Default::default()
    };
    let check = |watch: &str, kind, image: &str, minutes: i64| CheckRecord {
        watch: watch.into(),
        kind,
        image: normal(image),
        time: ago(minutes),
        outcome: Ok(()),
        pin: None,
        pending: None,
        change: None,
        events: vec![],
        deliveries: vec![],
        actions: vec![],
        history: 10,
    };
    let pin = |image: &str, digest: &str, builder: bool| PinUpdate {
        digest: digest.into(),
        reference: format!("{}@{digest}", repository(image)),
        media_type: "application/vnd.oci.image.index.v1+json".into(),
        platforms: [("linux/amd64".to_string(), digest.to_string())].into(),
        metadata: builder.then(|| metadata.clone().into()),
    };
    let (a, b, c) = (hex('a'), hex('b'), hex('c'));
    for (seq, previous, current, minutes) in [(0, "", &a, 180), (1, &a, &b, 120), (2, &b, &c, 60)] {
        let mut record = check("jammy", WatchKind::Builder, &builder, minutes);
        record.pin = Some(pin(&builder, current, true));
        if seq > 0 {
            record.change = Some(ChangeRecord {
                id: builder_monitor_core::event::change_id("jammy", seq, previous, current),
                watch: "jammy".into(),
                seq,
                previous: previous.into(),
                current: current.into(),
                previous_reference: format!("{}@{previous}", repository(&builder)),
                current_reference: format!("{}@{current}", repository(&builder)),
                change: Change::unknown("a buildpack moved"),
                rollback: false,
                detected: ago(minutes),
            });
        }
        ledger.commit(record).await.unwrap();
    }
    let mut broken = check("heroku", WatchKind::Builder, &failing, 5);
    broken.outcome = Err(CheckFailure {
        reason: "not_found".into(),
        message: format!(
            "manifest unknown: {}@{} (index {}@{})",
            repository(&failing),
            hex('f'),
            repository(&failing),
            hex('e')
        ),
    });
    ledger.commit(broken).await.unwrap();
    let run_watch = run_watch_name(&ImageRef::parse(&run).unwrap());
    let mut run_check = check(&run_watch, WatchKind::RunImage, &run, 60);
    run_check.pin = Some(pin(&run, &hex('d'), false));
    ledger.commit(run_check).await.unwrap();

    // petclinic's rebuild failed and holds billing's (the next wave); orders' was rejected.
    ledger.record_actions(vec![rebuild_action("c1", "petclinic", 1, false)], now).await.unwrap();
    let claimed = ledger.claim_actions_of(now, 1, ActionKind::Rebuild, &Default::default()).await.unwrap();
    assert_eq!(claimed.len(), 1);
    ledger.record_actions(vec![rebuild_action("c1", "billing", 2, false)], now).await.unwrap();
    let end = ActionEnd {
        key: &claimed[0].key,
        outcome: ActionOutcome::Failed,
        detail: format!("exit 1: ERROR: failed to fetch {}@{}", repository(&builder), hex('c')),
        output_tail: String::new(),
        watch: "jammy",
        events: vec![],
        deliveries: vec![],
        history: 10,
        now,
        tag_move: None,
        hold: Some(Hold { keys: vec!["bm-c1-billing".into()], detail: "held: wave 1 petclinic failed".into() }),
        keep_intent: false,
        follow: vec![],
        hold_image: false,
    };
    ledger.finish_action(end).await.unwrap();
    ledger.record_actions(vec![rebuild_action("c2", "orders", 1, true)], now).await.unwrap();
    ledger.decide("c2", None, Verdict::Reject, "alice (cli)", now).await.unwrap();
    let moved = TagMove {
        image: "petclinic".into(),
        reference: normal(&app("petclinic")),
        kind: TagMoveKind::Rebase,
        action: Some("bm-c0-petclinic".into()),
        before: Some(hex('7')),
        after: Some(hex('8')),
        time: ago(300),
        by: None,
        run_image: None,
    };
    ledger.record_tag_move("jammy", moved, 10).await.unwrap();
    let freeze = Freeze { since: ago(10), reason: Some("release day".into()), by: "alice (cli)".into() };
    ledger.set_freeze(Some(freeze), vec![], vec![], 10, now).await.unwrap();

    let (url, stop) = serve_page(&config, ledger).await;

    let page = tokio::task::spawn_blocking(move || {
        evaluate(
            &chromium,
            &url,
            (1280, 900),
            "({ text: document.body.innerText, html: document.documentElement.outerHTML, \
                width: document.documentElement.scrollWidth, open: document.querySelectorAll('details[open]').length, \
                scrolling: [...document.querySelectorAll('.card, details, .banner')] \
                    .filter(e => e.scrollWidth > e.clientWidth).map(e => e.firstElementChild?.className || e.className) })",
        )
    })
    .await
    .unwrap();
    stop.cancel();
    let (text, html) = (page["text"].as_str().unwrap(), page["html"].as_str().unwrap());

    // The freeze: its time is an element, not markup shown as text; a banner above all; a tile.
    assert!(!text.contains("<time"), "markup shown as text:\n{text}");
    let actions = &text[text.find("Open actions").unwrap()..];
    let since = &actions[actions.find("frozen since ").expect("the freeze in Open actions")..];
    let since = &since[..since.find(" by alice (cli): release day;").expect("who and why")];
    assert!(since.starts_with("frozen since 10m") && since.ends_with(" ago"), "{since}");
    let banner = text.find("Frozen by alice (cli) since 10m").expect("a banner");
    assert!(banner < text.find("Builders").unwrap(), "{text}");
    assert!(
        text.contains("ago: release day. No rebase, rebuild or deploy starts until builder-monitor unfreeze lifts it"),
        "{text}"
    );
    assert!(html.contains("<a class=\"tile warn\" data-tile=\"frozen\" href=\"#frozen\"><b>yes</b>"), "{html}");

    // Failing rows first; ids on rows, and the tiles link their sections and the failing row.
    let at = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("no {needle} in:\n{html}"));
    assert!(at("data-name=\"heroku\"") < at("data-name=\"jammy\""), "the failing builder leads");
    assert!(html.contains("data-tile=\"failing\" href=\"#watch-heroku\""), "{html}");
    for (tile, section) in
        [("builders", "builders"), ("run-images", "run-images"), ("images", "images"), ("actions", "actions")]
    {
        assert!(html.contains(&format!("data-tile=\"{tile}\" href=\"#{section}\"")), "{tile}");
        at(&format!("<h2 id=\"{section}\">"));
    }
    at("id=\"watch-jammy\"");
    at(&format!("id=\"watch-{run_watch}\""));

    // Every app image with its last action; failed, held and rejected ones in the error colour.
    let row = |name: &str| {
        let start = at(&format!("<tr class=\"image\" data-name=\"{name}\""));
        &html[start..start + html[start..].find("</tr>").unwrap()]
    };
    let petclinic = row("petclinic");
    assert!(petclinic.contains("<span class=\"pill err failed\">failed</span>"), "{petclinic}");
    let tag = format!("{}@{}", repository(&normal(&app("petclinic"))), hex('8'));
    assert!(petclinic.contains(&format!("title=\"{tag}\">sha256:888888888888</code>")), "{petclinic}");
    assert!(
        petclinic.contains("<a href=\"#watch-jammy\">") && petclinic.contains(&format!("href=\"#watch-{run_watch}\"")),
        "{petclinic}"
    );
    assert!(petclinic.contains("exit 1: ERROR: failed to fetch"), "{petclinic}");
    let billing = row("billing");
    assert!(
        billing.contains("<span class=\"pill err held\">held</span>")
            && billing.contains("held: wave 1 petclinic failed"),
        "{billing}"
    );
    let orders = row("orders");
    assert!(
        orders.contains("<span class=\"pill err rejected\">rejected</span>")
            && orders.contains("rejected by alice (cli)"),
        "{orders}"
    );

    // The history folded, the newest change in its summary.
    at("<details class=\"history\" id=\"history-jammy\"><summary>");
    assert_eq!(page["open"], 0, "history starts closed");
    assert!(text.contains("jammy · 2 changes, the newest unknown"), "{text}");

    // No digest in full on screen, and nothing wider than the window.
    assert!(!full_digest_in(text), "a digest in full:\n{text}");
    assert!(page["width"].as_u64().unwrap() <= 1280, "the page is {} px wide", page["width"]);
    assert_eq!(page["scrolling"], serde_json::json!([]), "these scroll sideways at 1280 px");
}
