//! Watches the server ends, on the real control plane (issue 62 item 4): the objects the runner
//! follows by watch (`runner::watch::Watched`, what its Jobs and kpack Builds are waited on
//! through) stay exact across a watch that breaks off and one that cannot resume because etcd
//! compacted its resourceVersion (410 Gone: the control plane without its watch cache for
//! ConfigMaps, `support::control_plane::uncached_control_plane`).

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use builder_monitor::runner::watch::{Health, Watched};
use support::control_plane::uncached_control_plane;
use support::relay::Relay;

fn config_map(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "builder-monitor"}},
        "data": {"v": value},
    }))
    .unwrap()
}

/// name → `data.v` of what the watch holds.
fn values(objects: &HashMap<String, Value>) -> HashMap<String, String> {
    objects.iter().map(|(k, v)| (k.clone(), v["data"]["v"].as_str().unwrap_or_default().to_string())).collect()
}

async fn until(watched: &Watched, wanted: &[(&str, &str)]) {
    let wanted: HashMap<String, String> = wanted.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let seen =
        tokio::time::timeout(support::PATIENCE, watched.wait_all(|objects| (values(objects) == wanted).then_some(())))
            .await;
    assert!(seen.is_ok(), "the watch did not come to hold {wanted:?} within {:?}", support::PATIENCE);
}

/// The watch breaks off twice while the objects change: once resumable (it goes on from its
/// resourceVersion), once after etcd compacted past it (the server answers 410 Gone, as this test
/// first shows with a watch of its own, and the watcher lists again). Each time the objects it
/// holds are exactly the server's: the update and the new object seen, the deleted object gone
/// although no delete event ever came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_breaks_off_or_meets_410_gone_resumes_with_exactly_the_servers_objects() {
    let plane = uncached_control_plane();
    let ns = plane.namespace("watch").await;
    let admin: Api<ConfigMap> = Api::namespaced(ns.client.clone(), &ns.name);
    for name in ["kept", "deleted"] {
        admin.create(&PostParams::default(), &config_map(name, "1")).await.unwrap();
    }
    let mut config = plane.config().await;
    let server = config.cluster_url.authority().unwrap().as_str().parse().expect("the server's address");
    let relay = Relay::start(server).await;
    config.cluster_url = format!("https://{}", relay.addr).parse().unwrap();
    let relayed: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config).unwrap(), &ns.name);
    let stop = CancellationToken::new();
    let watched = Watched::start(relayed, Arc::new(Health::new("test")), stop.clone());
    until(&watched, &[("kept", "1"), ("deleted", "1")]).await;

    // Broken off, resumable: changes meanwhile arrive as events once it reconnects.
    relay.pause();
    admin.create(&PostParams::default(), &config_map("added", "1")).await.unwrap();
    relay.resume();
    until(&watched, &[("kept", "1"), ("deleted", "1"), ("added", "1")]).await;

    // Broken off, and the history it would resume from compacted away.
    relay.pause();
    let before = admin.get("kept").await.unwrap().metadata.resource_version.unwrap();
    let mut kept = admin.get("kept").await.unwrap();
    kept.data = Some([("v".to_string(), "2".to_string())].into());
    admin.replace("kept", &PostParams::default(), &kept).await.unwrap();
    admin.delete("deleted", &DeleteParams::default()).await.unwrap();
    admin.create(&PostParams::default(), &config_map("late", "1")).await.unwrap();
    plane.compact().await;
    // What the watcher meets on reconnecting: a watch from before the compaction is 410 Gone.
    let mut gone = admin.watch(&WatchParams::default(), &before).await.expect("the watch request").boxed();
    match gone.next().await {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!(e.code, 410, "{e:?}"),
        other => panic!("a watch from a compacted resourceVersion answered {other:?}, not 410 Gone"),
    }
    relay.resume();
    until(&watched, &[("kept", "2"), ("added", "1"), ("late", "1")]).await;
    stop.cancel();
}
