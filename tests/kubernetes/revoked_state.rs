//! A right of the daemon's own state taken away while it runs (issue 62 item 5), under exactly
//! the RBAC `builder-monitor rbac` prints, with the ConfigMap ledger and leader election: `update`
//! on ConfigMaps (the ledger's commit of a move waits, while the Lease is still renewed), `update`
//! on Leases (the leader steps down, as it must, and leads again), `patch` on ClusterBuilder
//! status (the status waits; the ledger goes on). Each is named in `status`, `/readyz` and one log
//! line; given back, the waiting work is done, nothing lost, without a restart. The shape and
//! setup are `revoked_right`'s.

use crate::support;

use serde_json::Value;

use crate::exact_rbac::World;
use crate::revoked_right::{Bound, GRANTED, Right, TOKEN_ENV, cleared, one_line_for, readyz};
use support::cnb::BuilderSpec;
use support::images::{Format, Pusher};

const API_VERSION: &str = "buildermonitor.dev/v1alpha1";

fn server() -> String {
    format!("\n[server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"{TOKEN_ENV}\"\n")
}

/// Pushes a move of the world's builder (a new run image in its metadata); its digest.
async fn move_builder(w: &World, run: &str) -> String {
    let host = &w._registry.host;
    let spec = BuilderSpec::jammy(&format!("{host}/demo/{run}"));
    Pusher::new(host).push_image("demo/builder", Some("latest"), &spec.image(), Format::Oci).await.digest
}

/// Whether a ledger ConfigMap of the world's namespace holds `digest`.
async fn in_ledger(w: &World, digest: &str) -> bool {
    let configmaps = w.ns.api("v1", "ConfigMap").await;
    let listed = configmaps.list(&Default::default()).await.unwrap();
    listed.items.iter().any(|c| serde_json::to_string(&c.data).unwrap().contains(digest))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_commit_waits_for_update_on_configmaps_and_is_made_when_it_is_restored() {
    let w = World::new(&server()).await;
    let bound = Bound::new(&w.ns, &w.ws, &w.config).await;
    let mut daemon = bound.start();
    let addr = daemon.server_addr();
    daemon.wait_for_event("builder.pinned");

    let right = Right { verb: "update", group: "", resource: "configmaps", namespace: Some(&w.ns.name) };
    bound.revoke(right).await;
    let moved = move_builder(&w, "run:2").await;
    bound.check_now(&addr, "jammy").await;
    bound.reported_missing(&mut daemon, &addr, right, "the ledger's writes").await;
    assert!(!in_ledger(&w, &moved).await, "not written while refused");
    // The rest goes on: the daemon still leads, its Lease renewed (a right of its own).
    let lease = w.ns.get("coordination.k8s.io/v1", "Lease", "builder-monitor").await.unwrap();
    let version = lease["metadata"]["resourceVersion"].clone();
    w.ns.wait_for("coordination.k8s.io/v1", "Lease", "builder-monitor", |l| {
        l["metadata"]["resourceVersion"] != version
    })
    .await;
    assert_eq!(readyz(&addr).await["leader"], true);

    bound.restore(&mut daemon, right).await;
    let changed = daemon.wait_for_event("builder.changed");
    assert_eq!(changed["current"]["digest"], moved.as_str(), "{changed}");
    assert!(in_ledger(&w, &moved).await, "the commit that waited is in the ledger");
    cleared(&addr).await;
    one_line_for(daemon, right);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_refused_its_lease_stands_down_and_leads_again_when_it_is_restored() {
    let timing = "lease_duration = \"6s\"\nrenew_deadline = \"4s\"\nretry_period = \"1s\"\n";
    let w = World::new(&(timing.to_string() + &server())).await;
    let bound = Bound::new(&w.ns, &w.ws, &w.config).await;
    let mut daemon = bound.start();
    let addr = daemon.server_addr();
    daemon.wait_for("leadership", |l| l["message"] == "became leader");
    daemon.wait_for_event("builder.pinned");

    let right = Right { verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: Some(&w.ns.name) };
    bound.revoke(right).await;
    bound.reported_missing(&mut daemon, &addr, right, "the leader Lease").await;
    // It cannot renew, so it must not lead past the renew deadline.
    let lost = daemon.wait_for("the loss", |l| l["message"] == "lost leadership");
    assert_eq!(lost["why"], "not renewed for 4s", "{lost}");
    assert_eq!(readyz(&addr).await["leader"], false);

    // Given back, the right is seen again by its recheck and by the next campaign, in either order.
    bound.give_back().await;
    let shown = right.shown();
    let seen = std::cell::RefCell::new((false, false));
    daemon.wait_for("the right back and leadership again", |l| {
        let mut seen = seen.borrow_mut();
        seen.0 |= l["message"] == GRANTED && l["right"] == shown.as_str();
        seen.1 |= l["message"] == "became leader";
        seen.0 && seen.1
    });
    // And it acts again: a move checked now is pinned.
    let moved = move_builder(&w, "run:2").await;
    bound.check_now(&addr, "jammy").await;
    let changed = daemon.wait_for_event("builder.changed");
    assert_eq!(changed["current"]["digest"], moved.as_str(), "{changed}");
    cleared(&addr).await;
    one_line_for(daemon, right);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusterbuilder_status_waits_for_patch_on_its_status_and_is_written_when_it_is_restored() {
    let _crd = crate::cluster_builders::CRD.read().await;
    let w = World::new(&("publish = true\n".to_string() + &server())).await;
    // ClusterBuilders are cluster-wide: the builder is named after the test's namespace.
    let name = format!("{}-jammy", w.ns.name);
    let text = std::fs::read_to_string(&w.config).unwrap().replace("name = \"jammy\"", &format!("name = \"{name}\""));
    std::fs::write(&w.config, text).unwrap();
    crate::cluster_builders::install(&w.ns, &crate::cluster_builders::printed_crd()[0]).await;
    let bound = Bound::new(&w.ns, &w.ws, &w.config).await;
    let mut daemon = bound.start();
    let addr = daemon.server_addr();
    let first = daemon.wait_for_event("builder.pinned");
    let latest = |status: &Value| status["latestImage"].as_str().unwrap_or_default().to_string();
    let pinned = first["current"]["digest"].as_str().unwrap().to_string();
    w.ns.wait_for(API_VERSION, "ClusterBuilder", &name, |o| latest(&o["status"]).ends_with(&pinned)).await;

    let right =
        Right { verb: "patch", group: "buildermonitor.dev", resource: "clusterbuilders/status", namespace: None };
    bound.revoke(right).await;
    let moved = move_builder(&w, "run:2").await;
    bound.check_now(&addr, &name).await;
    // The ledger goes on: the move is committed (and its event emitted) while the status waits.
    let changed = daemon.wait_for_event("builder.changed");
    assert_eq!(changed["current"]["digest"], moved.as_str(), "{changed}");
    bound.reported_missing(&mut daemon, &addr, right, "publishing ClusterBuilders").await;
    let object = w.ns.get(API_VERSION, "ClusterBuilder", &name).await.unwrap();
    assert!(latest(&object["status"]).ends_with(&pinned), "not written while refused: {object}");

    bound.restore(&mut daemon, right).await;
    w.ns.wait_for(API_VERSION, "ClusterBuilder", &name, |o| latest(&o["status"]).ends_with(&moved)).await;
    cleared(&addr).await;
    one_line_for(daemon, right);
}
