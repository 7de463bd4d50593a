//! What a fleet patch costs each app at the registry, counted at a proxy in front of the real
//! registry: planning's read of the app serves its rebase too, a run image layer the app has
//! already is not mounted again, and the tag's PUT stores the rebased manifest (no PUT by digest
//! first when nothing is signed) — and the rebase still never writes over a push that landed after
//! planning read the app.

use crate::rebase_daemon::Fleet;
use crate::support;

use serde_json::Value;

use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor_core::reference::ImageRef;
use support::app::{self, RunImage};
use support::images::Format;

/// Run image v2 as a run image update usually is: v1's layers but the top one, replaced.
fn top_layer_update() -> RunImage {
    let v1 = RunImage::jammy("1", 3);
    let mut v2 = RunImage::jammy("2", 3);
    v2.layers[..2].clone_from_slice(&v1.layers[..2]);
    v2
}

/// Three apps; a new run image whose top layer alone changed. Each app costs: planning's GET of
/// its manifest and config (the rebase reads them back from memory), one mount (the changed
/// layer), the config's upload (POST and PUT: Distribution takes no monolithic upload), the tag's
/// HEAD, PUT and HEAD after. Eight requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_app_is_read_once_mounts_only_changed_layers_and_puts_its_manifest_once() {
    const APPS: usize = 3;
    let fleet = Fleet::new(APPS).await;
    let run_v2 = top_layer_update();
    app::push_run(&fleet.pusher, "demo/run", Some("latest"), &run_v2, Format::Oci).await;
    fleet.proxy.clear();
    let out = fleet.run_once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    let seen = fleet.proxy.seen();
    for i in 0..APPS {
        let prefix = format!("/v2/apps/web-{i}/");
        let of_app: Vec<String> = seen
            .iter()
            .filter(|s| s.path.starts_with(&prefix))
            .map(|s| format!("{} {}", s.method, &s.path[prefix.len()..]))
            .collect();
        let count = |method: &str, part: &str| {
            of_app.iter().filter(|r| r.starts_with(&format!("{method} ")) && r.contains(part)).count()
        };
        assert_eq!(count("GET", "manifests/latest"), 1, "the app's manifest read once: {of_app:#?}");
        assert_eq!(count("GET", "blobs/sha256:"), 1, "the app's config read once: {of_app:#?}");
        let mounts: Vec<&String> = of_app.iter().filter(|r| r.contains("mount=")).collect();
        assert_eq!(mounts.len(), 1, "only the changed layer is mounted: {of_app:#?}");
        let changed = run_v2.layers[2].digest.replace(':', "%3A");
        assert!(mounts[0].contains(&changed), "{mounts:?}");
        assert_eq!(count("PUT", "manifests/sha256:"), 0, "no PUT by digest before the tag's: {of_app:#?}");
        assert_eq!(count("PUT", "manifests/latest"), 1, "{of_app:#?}");
        assert_eq!(count("HEAD", "manifests/latest"), 2, "the tag's check before and after its PUT: {of_app:#?}");
        assert_eq!(of_app.len(), 8, "{of_app:#?}");
    }
    fleet.assert_all_on(&run_v2).await;
    let actions = fleet.ledger().actions(100).await.unwrap();
    assert!(actions.iter().all(|a| a.attempts == 1), "{actions:?}");
    fleet.assert_one_rebase_each().await;
}

/// A build pushed to the app's tag right after planning read it: the rebase, which starts from
/// what planning read, finds the tag moved at its check before the PUT and rebases the new build
/// instead, within its first attempt; the new build's app layer is kept, never overwritten by a
/// rebase of the build before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_after_planning_read_the_app_is_what_gets_rebased() {
    let fleet = Fleet::new(1).await;
    let mut rival = fleet.app.clone();
    rival.layers[2] = app::layer("workspace/server.js", "// pushed after planning read the app\n");
    let rival_layer = rival.layers[2].digest.clone();
    let run_v2 = top_layer_update();
    app::push_run(&fleet.pusher, "demo/run", Some("latest"), &run_v2, Format::Oci).await;
    let host = fleet.host.clone();
    // Planning's read is answered once the rival's push has landed: planning saw the build before.
    fleet.proxy.trap(support::proxy::Trap::after("GET", "/v2/apps/web-0/manifests/latest", move || {
        let (host, rival) = (host.clone(), rival.clone());
        async move {
            let pusher = support::images::Pusher::new(&host);
            app::push_app(&pusher, "apps/web-0", Some("latest"), &rival, Format::Oci).await;
        }
    }));
    let out = fleet.run_once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    fleet.assert_all_on(&run_v2).await;
    let client = Registry::new([], Metrics::new());
    let tag = ImageRef::parse(&format!("{}/apps/web-0:latest", fleet.host)).unwrap();
    let manifest: Value = serde_json::from_slice(&client.get_manifest(&tag, "latest").await.unwrap().bytes).unwrap();
    let layers: Vec<&str> =
        manifest["layers"].as_array().unwrap().iter().filter_map(|l| l["digest"].as_str()).collect();
    assert!(layers.contains(&rival_layer.as_str()), "the build pushed after planning is what was rebased: {layers:?}");
    let actions = fleet.ledger().actions(100).await.unwrap();
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!(actions[0].attempts, 1, "within the first attempt: {actions:?}");
}

/// Registry rebases have slots of their own: with the default config (`max_concurrent = 2`, which
/// bounds pods and commands), the tag PUTs of three apps' rebases are held at the registry at the
/// same time, so more than two rebases are in flight at once; released, every app is rebased.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_rebases_are_not_held_to_the_runners_max_concurrent() {
    const APPS: usize = 4;
    const HELD: usize = 3;
    let fleet = Fleet::with_runner(APPS, "").await;
    let mut releases = Vec::new();
    let mut held = Vec::new();
    for i in 0..HELD {
        let (trap, h, release) = support::proxy::Trap::hold("PUT", &format!("/v2/apps/web-{i}/manifests/latest"));
        fleet.proxy.trap(trap);
        held.push(h);
        releases.push(release);
    }
    let run_v2 = top_layer_update();
    app::push_run(&fleet.pusher, "demo/run", Some("latest"), &run_v2, Format::Oci).await;
    let mut daemon = fleet.daemon();
    for (i, h) in held.iter().enumerate() {
        let waited = tokio::time::timeout(support::PATIENCE, h.notified()).await;
        assert!(waited.is_ok(), "web-{i}'s tag PUT never came while others were held: too few rebases at once");
    }
    for release in &releases {
        release.notify_one();
    }
    let rebased = std::cell::Cell::new(0);
    tokio::task::block_in_place(|| {
        daemon.wait_for("every rebase", |v| {
            if v["event_type"] == "rebase.succeeded" {
                rebased.set(rebased.get() + 1);
            }
            rebased.get() == APPS
        })
    });
    daemon.kill();
    fleet.assert_all_on(&run_v2).await;
    fleet.assert_one_rebase_each().await;
}
