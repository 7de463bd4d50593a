//! A fleet's roll-out on the real control plane: Deployments in 10 waves after one run-image
//! move, each rolled out by the real controllers (the stand-in node makes the pods Ready), and the
//! daemon's own API requests counted (`builder_monitor_kube_requests_total`, from its /metrics):
//! one apply per workload, the reads shared — no GET and no watch per workload, at most one list
//! and one watch per wave of the Deployments and of the pods — so at most 2 requests per workload
//! in all.
//!
//! `BM_FLEET_DEPLOYS=N` (default 30) sets the fleet's size; with it set the test also times the
//! roll-out against the same controllers given the images directly by a test client in the same
//! run and prints both (the figures in docs/bench/deploys-round5.md).

use crate::real_world::{RealWorld, rolled_out, workload};
use crate::support;

use std::collections::BTreeMap;
use std::time::Instant;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

use support::daemon::Daemon;

const WAVES: usize = 10;

/// The fleet's apps: `app-NNNN`, app `i` of `n` in wave `i * WAVES / n`.
fn apps(n: usize) -> &'static [(&'static str, u32, &'static str)] {
    let apps: Vec<(&'static str, u32, &'static str)> = (0..n)
        .map(|i| {
            let name: &'static str = Box::leak(format!("app-{i:04}").into_boxed_str());
            (name, (i * WAVES / n) as u32, "Deployment")
        })
        .collect();
    Box::leak(apps.into_boxed_slice())
}

/// The daemon's Kubernetes requests, by (verb, resource), from its metrics exposition.
async fn kube_requests(addr: &str) -> BTreeMap<(String, String), u64> {
    let text = support::http().get(format!("http://{addr}/metrics")).send().await.unwrap().text().await.unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("builder_monitor_kube_requests_total{")) {
        let (labels, value) = line.rsplit_once(' ').unwrap();
        let label = |name: &str| {
            let start = labels.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
            labels[start..].split('"').next().unwrap().to_string()
        };
        out.insert((label("verb"), label("resource")), value.parse::<f64>().unwrap() as u64);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleets_roll_out_costs_one_apply_per_workload_and_shared_reads() {
    let size: usize = std::env::var("BM_FLEET_DEPLOYS").ok().and_then(|n| n.parse().ok()).unwrap_or(30).max(WAVES);
    let fleet = apps(size);
    let w = RealWorld::start("fleet", fleet, "[server]\nlisten = \"127.0.0.1:0\"\n", workload).await;
    w.move_run_image().await;

    let mut daemon = Daemon::start(&w.config);
    let addr = daemon.server_addr();
    daemon.wait_for_event("deploy.started");
    let started = Instant::now();
    for _ in 0..size {
        daemon.wait_for_event("deploy.succeeded");
    }
    let rolled = started.elapsed();
    let after = kube_requests(&addr).await;
    daemon.terminate();

    // Everything since the daemon started: its start-up checks count too.
    let spent = |verb: &str, resource: &str| after.get(&(verb.to_string(), resource.to_string())).copied().unwrap_or(0);
    let all: u64 = after.values().sum();
    let shown = format!("{after:#?}");
    assert_eq!(spent("patch", "deployments.apps"), size as u64, "one apply per workload: {shown}");
    assert_eq!(spent("get", "deployments.apps"), 0, "no GET per workload: {shown}");
    for resource in ["deployments.apps", "pods"] {
        for verb in ["list", "watch"] {
            assert!(spent(verb, resource) <= WAVES as u64, "at most one {verb} of {resource} a wave: {shown}");
        }
    }
    assert!(all <= 2 * size as u64, "{all} requests for {size} workloads: {shown}");
    for (name, _, _) in fleet {
        assert_eq!(w.image(name, 0).await, w.reference(name, &w.tag(name).await), "{name} runs its new digest");
    }

    if std::env::var("BM_FLEET_DEPLOYS").is_err() {
        return;
    }
    // The same controllers, given the images directly (back to each app's build on run image v1).
    let deployments: Api<DynamicObject> = w.ns.api("apps/v1", "Deployment").await;
    let direct = Instant::now();
    let writes = fleet.iter().map(|(name, _, _)| {
        let image = w.reference(name, &w.built(name));
        let body = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}});
        let deployments = deployments.clone();
        async move {
            deployments.patch(name, &PatchParams::default(), &Patch::Strategic(body)).await.unwrap();
        }
    });
    futures::future::join_all(writes).await;
    let patience = support::PATIENCE + std::time::Duration::from_millis(100) * size as u32;
    for (name, _, kind) in fleet {
        w.ns.wait_for_within(patience, "apps/v1", kind, name, |o| rolled_out(kind, o)).await;
    }
    let direct = direct.elapsed();
    println!(
        "fleet of {size} Deployments in {WAVES} waves: the daemon's roll-out {:.2} s (first deploy.started to the last \
         deploy.succeeded), the images set directly {:.2} s: {:.2}x; {all} daemon requests ({:.2} per workload): {after:?}",
        rolled.as_secs_f64(),
        direct.as_secs_f64(),
        rolled.as_secs_f64() / direct.as_secs_f64(),
        all as f64 / size as f64
    );
}
