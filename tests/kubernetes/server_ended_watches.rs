//! The daemon's watches on the real control plane when the server ends them (issue 62 item 4):
//! every watch carries `timeoutSeconds` and `allowWatchBookmarks=true`
//! (`runner::watch::settings`); the server ends it at that timeout and it goes on from the last
//! resourceVersion it saw — an event's, or a BOOKMARK's. Shown here with the daemon's settings at a
//! short timeout, through a proxy that records each request the watch makes
//! (`support::api_recorder`).
//!
//! The apiserver's watch cache sends a watch that asked for bookmarks one every minute, and one
//! about 2 s before the watch's deadline: with a timeout of a few seconds each watch here gets
//! its bookmark before the server ends it, without waiting a minute.

use crate::support;

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use tokio::sync::mpsc;

use builder_monitor::runner::watch::settings_ending_after;
use support::api_recorder::{ApiRecorder, Recorded};
use support::control_plane::control_plane;

/// What the watches here ask the server for: long enough for the bookmark the watch cache sends
/// 2 s before a watch's deadline.
const TIMEOUT: Duration = Duration::from_secs(4);

fn config_map(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": value}})).unwrap()
}

/// Writes `value` into ConfigMap `name`; answers its new resourceVersion.
async fn write(api: &Api<ConfigMap>, name: &str, value: &str) -> u64 {
    let written = match api.get_opt(name).await.unwrap() {
        Some(mut cm) => {
            cm.data = Some([("v".to_string(), value.to_string())].into());
            api.replace(name, &PostParams::default(), &cm).await.unwrap()
        }
        None => api.create(&PostParams::default(), &config_map(name, value)).await.unwrap(),
    };
    version(written.metadata.resource_version.as_deref())
}

fn version(text: Option<&str>) -> u64 {
    text.and_then(|v| v.parse().ok()).expect("a numeric resourceVersion")
}

/// What the watcher delivered: (event kind, name, resourceVersion) for objects, or an error.
type Delivered = Result<(&'static str, String, u64), String>;

/// The daemon's watch of `api` at [`TIMEOUT`], its events sent to the returned channel.
fn watch(api: Api<ConfigMap>) -> mpsc::UnboundedReceiver<Delivered> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut events = watcher(api, settings_ending_after(TIMEOUT)).boxed();
        while let Some(event) = events.next().await {
            let delivered = match event {
                Ok(watcher::Event::Init) => Ok(("Init", String::new(), 0)),
                Ok(watcher::Event::InitDone) => Ok(("InitDone", String::new(), 0)),
                Ok(watcher::Event::InitApply(o)) => Ok(("InitApply", name(&o), rv(&o))),
                Ok(watcher::Event::Apply(o)) => Ok(("Apply", name(&o), rv(&o))),
                Ok(watcher::Event::Delete(o)) => Ok(("Delete", name(&o), rv(&o))),
                Err(e) => Err(e.to_string()),
            };
            if tx.send(delivered).is_err() {
                return;
            }
        }
    });
    rx
}

fn name(o: &ConfigMap) -> String {
    o.metadata.name.clone().unwrap_or_default()
}

fn rv(o: &ConfigMap) -> u64 {
    version(o.metadata.resource_version.as_deref())
}

/// Receives until an event with `wanted` kind and resourceVersion (0: any) comes; answers all
/// received on the way, it included.
async fn until(events: &mut mpsc::UnboundedReceiver<Delivered>, kind: &str, wanted: u64) -> Vec<Delivered> {
    let mut seen = Vec::new();
    let waiting = async {
        while let Some(d) = events.recv().await {
            let done = matches!(&d, Ok((k, _, v)) if *k == kind && (wanted == 0 || *v == wanted));
            seen.push(d);
            if done {
                return;
            }
        }
    };
    let found = tokio::time::timeout(support::PATIENCE, waiting).await;
    assert!(found.is_ok(), "no {kind} {wanted} within {:?}; received {seen:?}", support::PATIENCE);
    seen
}

/// The watch requests of configmaps, and the resourceVersion each resumes from.
fn watches(requests: &[Recorded]) -> Vec<&Recorded> {
    requests.iter().filter(|r| r.verb() == "WATCH" && r.resource() == "configmaps").collect()
}

fn lists(requests: &[Recorded]) -> usize {
    requests.iter().filter(|r| r.verb() == "LIST" && r.resource() == "configmaps").count()
}

fn from(request: &Recorded) -> u64 {
    request.param("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Three times the server ends the watch at its `timeoutSeconds`; each time it is asked again from
/// the last version it saw, never listed again, and each change arrives once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_the_server_ends_at_its_timeout_resumes_from_its_last_version_losing_and_repeating_nothing() {
    let plane = control_plane();
    let ns = plane.namespace("ended-watch").await;
    let admin: Api<ConfigMap> = Api::namespaced(ns.client.clone(), &ns.name);
    write(&admin, "a", "0").await;
    let recorder = ApiRecorder::start(plane.client().await).await;
    let mut events = watch(Api::namespaced(recorder.client(&ns.name), &ns.name));
    let mut delivered = until(&mut events, "InitDone", 0).await;
    let mut written = Vec::new();
    for round in 1..=3usize {
        written.push(write(&admin, "a", &round.to_string()).await);
        delivered.extend(until(&mut events, "Apply", *written.last().unwrap()).await);
        // The server ends this watch at its timeout; the watcher asks again.
        recorder
            .wait_for("the watch asked again after the server ended it", |r| (watches(r).len() > round).then_some(()))
            .await;
    }
    // A change after the last resumption arrives too.
    written.push(write(&admin, "a", "4").await);
    delivered.extend(until(&mut events, "Apply", *written.last().unwrap()).await);

    let requests = recorder.requests();
    assert_eq!(lists(&requests), 1, "listed again: {requests:#?}");
    let asked = watches(&requests);
    assert!(asked.len() >= 4, "{asked:#?}");
    for w in &asked {
        assert_eq!(w.param("timeoutSeconds"), Some("4"), "{w:?}");
        assert_eq!(w.param("allowWatchBookmarks"), Some("true"), "{w:?}");
    }
    // Each resumes from no older a version than the one before it; with no list again, every
    // change once and in order, none was from an older version than the last it saw.
    for pair in asked.windows(2) {
        assert!(from(pair[1]) >= from(pair[0]), "{asked:#?}");
    }
    let applied: Vec<u64> = delivered
        .iter()
        .filter_map(|d| d.as_ref().ok().filter(|(k, _, _)| *k == "Apply").map(|(_, _, v)| *v))
        .collect();
    assert_eq!(applied, written, "every change once, in order: {delivered:?}");
    assert!(delivered.iter().all(|d| d.is_ok()), "{delivered:?}");
    assert_eq!(delivered.iter().filter(|d| matches!(d, Ok(("Init", _, _)))).count(), 1, "{delivered:?}");
}

/// A watch of objects nobody changes, while other ConfigMaps are written and etcd compacts its
/// history past them: a BOOKMARK brings the watch's version past those writes, and the watch the
/// server ended resumes from it — not from the version of its last event, which the compaction
/// removed — with no 410, no list again, and the next change delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_watch_resumes_from_its_bookmark_past_unrelated_writes_and_a_compaction() {
    let plane = control_plane();
    let ns = plane.namespace("quiet-watch").await;
    let busy = plane.namespace("busy-neighbour").await;
    let admin: Api<ConfigMap> = Api::namespaced(ns.client.clone(), &ns.name);
    let neighbour: Api<ConfigMap> = Api::namespaced(busy.client.clone(), &busy.name);
    let quiet = write(&admin, "a", "0").await;
    let recorder = ApiRecorder::start(plane.client().await).await;
    let mut events = watch(Api::namespaced(recorder.client(&ns.name), &ns.name));
    let mut delivered = until(&mut events, "InitDone", 0).await;

    let mut unrelated = 0;
    for i in 0..10 {
        unrelated = write(&neighbour, &format!("other-{i}"), "x").await;
    }
    let compacted = plane.compact().await;
    assert!(compacted as u64 >= unrelated && unrelated > quiet);
    let resumed = recorder
        .wait_for("a watch resumed from a bookmark past the unrelated writes", |r| {
            watches(r).iter().map(|w| from(w)).find(|v| *v >= unrelated)
        })
        .await;
    assert!(resumed > quiet, "resumed from {resumed}, the quiet object's version is {quiet}");

    let changed = write(&admin, "a", "1").await;
    delivered.extend(until(&mut events, "Apply", changed).await);
    let requests = recorder.requests();
    assert_eq!(lists(&requests), 1, "listed again (410 Gone?): {requests:#?}");
    let applied: Vec<u64> = delivered
        .iter()
        .filter_map(|d| d.as_ref().ok().filter(|(k, _, _)| *k == "Apply").map(|(_, _, v)| *v))
        .collect();
    assert_eq!(applied, [changed], "{delivered:?}");
    assert!(delivered.iter().all(|d| d.is_ok()), "an error (410 Gone?): {delivered:?}");
    for w in watches(&requests) {
        assert_eq!(w.param("allowWatchBookmarks"), Some("true"), "{w:?}");
    }
}
