//! Shared views of what deploys read: one watch per workload kind and namespace, and one of the
//! pods per namespace, shared by every deploy running there. A roll-out of a fleet then costs
//! the API server one apply per workload plus one list and one watch per scope (a wave, or
//! several while they follow each other), where a GET, a watch of the workload and a watch of its
//! pods per deploy cost three list-or-get requests and two watches each.
//!
//! A view starts when the first deploy asks for its scope and lingers [`LINGER`] after the last
//! one lets go, so that the next wave finds it listed. What it keeps is trimmed: a workload
//! without its `managedFields`; of the pods, only those of a deploy's change with a container in
//! a bad waiting state (`core::pod_trouble`: what a deploy reads pods for), as their name, labels,
//! change annotation and container statuses. A namespace of many healthy pods costs nothing, and
//! a deploy woken by a pod's change looks at the few troubled ones, not at every pod.
//!
//! Staleness: a view lags the server by the watch's latency. The reads that must see the
//! server's present (a restart's check whether an earlier attempt's write landed) still GET.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Map, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use builder_monitor_core::deploy::{CHANGE_ANNOTATION, WorkloadKind, pod_trouble};

/// How long a view outlives its last reader.
pub const LINGER: Duration = Duration::from_secs(30);

/// What a view watches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The workloads of one kind in one namespace.
    Workloads(WorkloadKind, String),
    /// The pods of one namespace.
    Pods(String),
}

/// What a view holds now.
#[derive(Default)]
pub struct Listing {
    /// Whether the watch has listed its scope once (before that, `objects` is empty and says
    /// nothing).
    pub listed: bool,
    /// The objects by name, trimmed.
    pub objects: HashMap<String, Value>,
    /// The watch's last error, until it lists again.
    pub error: Option<String>,
    /// A re-list being read: it replaces `objects` when done.
    relisting: Option<HashMap<String, Value>>,
}

/// The views of one cluster, by scope.
pub struct Views {
    client: kube::Client,
    open: Arc<Mutex<HashMap<Scope, Arc<View>>>>,
}

struct View {
    listing: watch::Sender<Listing>,
    /// Deploys reading it now (changed under the map's lock only).
    readers: std::sync::atomic::AtomicUsize,
    stop: CancellationToken,
}

/// A deploy's hold on a view: its listing while held; the view may stop [`LINGER`] after the last
/// hold is dropped.
pub struct Held {
    scope: Scope,
    view: Arc<View>,
    open: Arc<Mutex<HashMap<Scope, Arc<View>>>>,
}

impl Views {
    pub fn new(client: kube::Client) -> Self {
        Views { client, open: Arc::default() }
    }

    /// The view of `scope`, started when none is open.
    pub fn hold(&self, scope: Scope) -> Held {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let view = open.entry(scope.clone()).or_insert_with(|| start(&self.client, &scope)).clone();
        view.readers.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Held { scope, view, open: self.open.clone() }
    }
}

impl Held {
    /// The listing's channel: `borrow` reads it, `changed` awaits its next change.
    pub fn subscribe(&self) -> watch::Receiver<Listing> {
        self.view.listing.subscribe()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if self.view.readers.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) != 1 {
            return;
        }
        drop(open);
        let (scope, view, open) = (self.scope.clone(), self.view.clone(), self.open.clone());
        // Outside a runtime (a test's drop after its runtime ended) the view simply stops.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            view.stop.cancel();
            return;
        };
        runtime.spawn(async move {
            tokio::time::sleep(LINGER).await;
            let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
            let idle = view.readers.load(std::sync::atomic::Ordering::SeqCst) == 0;
            if idle && open.get(&scope).is_some_and(|v| Arc::ptr_eq(v, &view)) {
                open.remove(&scope);
                view.stop.cancel();
            }
        });
    }
}

/// Awaits `listing`'s first list; its error while it has none.
pub async fn listed(listing: &mut watch::Receiver<Listing>) -> Result<(), String> {
    loop {
        {
            let now = listing.borrow_and_update();
            if now.listed {
                return Ok(());
            }
            if let Some(error) = &now.error {
                return Err(error.clone());
            }
        }
        if listing.changed().await.is_err() {
            return Err("the watch stopped".into());
        }
    }
}

fn start(client: &kube::Client, scope: &Scope) -> Arc<View> {
    let (resource, namespace, trim): (ApiResource, &str, Trim) = match scope {
        Scope::Workloads(kind, namespace) => (super::resource(*kind), namespace, trim_workload),
        Scope::Pods(namespace) => (super::pods(), namespace, trim_pod),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let view = Arc::new(View {
        listing: watch::Sender::new(Listing::default()),
        readers: Default::default(),
        stop: CancellationToken::new(),
    });
    let (what, task_view) = (format!("{scope:?}"), view.clone());
    tokio::spawn(async move {
        let mut events = watcher(api, crate::runner::watch::settings()).default_backoff().boxed();
        loop {
            let event = tokio::select! {
                _ = task_view.stop.cancelled() => return,
                event = events.next() => event,
            };
            let Some(event) = event else { return };
            if let Err(error) = &event {
                tracing::debug!(scope = %what, error = %error, "a deploy view's watch failed; retrying");
            }
            task_view.listing.send_modify(|listing| apply(listing, event, trim));
        }
    });
    view
}

/// What a view keeps of an object: `None` for nothing (a pod no deploy reads).
type Trim = fn(Value) -> Option<Value>;

/// `event` applied to `listing`.
fn apply(listing: &mut Listing, event: Result<watcher::Event<DynamicObject>, watcher::Error>, trim: Trim) {
    let named = |o: DynamicObject| -> Option<(String, Option<Value>)> {
        let name = o.metadata.name.clone()?;
        Some((name, trim(serde_json::to_value(o).ok()?)))
    };
    match event {
        Ok(watcher::Event::Init) => listing.relisting = Some(HashMap::new()),
        Ok(watcher::Event::InitApply(o)) => {
            if let (Some(building), Some((name, Some(object)))) = (listing.relisting.as_mut(), named(o)) {
                building.insert(name, object);
            }
        }
        Ok(watcher::Event::InitDone) => {
            listing.objects = listing.relisting.take().unwrap_or_default();
            listing.listed = true;
            listing.error = None;
        }
        Ok(watcher::Event::Apply(o)) => match named(o) {
            Some((name, Some(object))) => {
                listing.objects.insert(name, object);
            }
            Some((name, None)) => {
                listing.objects.remove(&name);
            }
            None => {}
        },
        Ok(watcher::Event::Delete(o)) => {
            if let Some(name) = &o.metadata.name {
                listing.objects.remove(name);
            }
        }
        Err(error) => listing.error = Some(error.to_string()),
    }
}

/// A workload as a deploy reads it: all but its `managedFields`.
fn trim_workload(mut object: Value) -> Option<Value> {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    Some(object)
}

/// A pod as a deploy reads it — its name, labels, the change annotation and container statuses —
/// when it is of a deploy's change and in trouble (`pod_trouble` of its own change); else nothing.
fn trim_pod(object: Value) -> Option<Value> {
    let change = format!("/metadata/annotations/{}", CHANGE_ANNOTATION.replace('/', "~1"));
    let id = object.pointer(&change).and_then(Value::as_str)?;
    pod_trouble([&object], id)?;
    let mut meta = Map::new();
    for field in ["name", "labels"] {
        if let Some(v) = object.pointer(&format!("/metadata/{field}")) {
            meta.insert(field.into(), v.clone());
        }
    }
    meta.insert("annotations".into(), serde_json::json!({ CHANGE_ANNOTATION: id }));
    let mut status = Map::new();
    for field in ["initContainerStatuses", "containerStatuses"] {
        if let Some(v) = object.pointer(&format!("/status/{field}")) {
            status.insert(field.into(), v.clone());
        }
    }
    Some(serde_json::json!({ "metadata": meta, "status": status }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What `pod_trouble` and the selector read survives the trim; the rest does not.
    #[test]
    fn a_trimmed_pod_keeps_what_a_deploy_reads() {
        let pod = json!({
            "metadata": {"name": "web-1", "labels": {"app": "web"}, "managedFields": [{"manager": "x"}],
                         "annotations": {CHANGE_ANNOTATION: "3f2a", "other": "big"}},
            "spec": {"containers": [{"name": "app", "image": "x"}]},
            "status": {"phase": "Pending", "containerStatuses": [
                {"name": "app", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no"}}}]}
        });
        let trimmed = trim_pod(pod.clone()).expect("a troubled pod of a change is kept");
        assert_eq!(pod_trouble([&trimmed], "3f2a"), pod_trouble([&pod], "3f2a"));
        assert!(pod_trouble([&trimmed], "3f2a").is_some());
        assert_eq!(trimmed["metadata"]["labels"], json!({"app": "web"}));
        assert!(trimmed.get("spec").is_none() && trimmed["metadata"].get("managedFields").is_none());
        assert_eq!(trimmed["metadata"]["annotations"], json!({CHANGE_ANNOTATION: "3f2a"}));

        let mut running = pod.clone();
        running["status"]["containerStatuses"][0]["state"] = json!({"running": {}});
        assert_eq!(trim_pod(running), None, "a pod in no trouble is not kept");
        let mut foreign = pod;
        foreign["metadata"]["annotations"] = json!({});
        assert_eq!(trim_pod(foreign), None, "nor one of no deploy's change");
    }

    #[test]
    fn a_relist_replaces_what_the_view_held() {
        let object = |name: &str| {
            let mut o = DynamicObject::new(name, &super::super::pods());
            o.metadata.namespace = Some("web".into());
            o
        };
        let mut listing = Listing::default();
        for event in [watcher::Event::Init, watcher::Event::InitApply(object("a")), watcher::Event::InitDone] {
            apply(&mut listing, Ok(event), trim_workload);
        }
        assert!(listing.listed && listing.objects.contains_key("a"));
        apply(&mut listing, Ok(watcher::Event::Apply(object("b"))), trim_workload);
        apply(&mut listing, Ok(watcher::Event::Init), trim_workload);
        assert!(listing.objects.contains_key("b"), "the old listing serves until the new one is done");
        apply(&mut listing, Ok(watcher::Event::InitApply(object("c"))), trim_workload);
        apply(&mut listing, Ok(watcher::Event::InitDone), trim_workload);
        let names: Vec<_> = listing.objects.keys().cloned().collect();
        assert_eq!(names, ["c"], "a and b were deleted while the watch was away");
    }
}
