//! The forced rollback of a StatefulSet after its undo: with `OrderedReady` its controller never
//! replaces a pod that is not Ready, so the pods made on the failed revision (stuck pulling an
//! image, say) would stay broken after the template is put back. Once the controller has seen the
//! put-back template, each of the StatefulSet's pods still on the failed revision and not Ready
//! is deleted (its uid the precondition) and the controller makes it again on the old revision.

use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Preconditions};
use kube::runtime::watcher;
use serde_json::Value;

use super::{Deploying, pods};
use builder_monitor_core::deploy as core;

/// How long the undo waits for the StatefulSet's controller to see the put-back template: it
/// does within moments on a working control plane; a pod deleted before could come back on the
/// failed revision.
const SEEN_WITHIN: Duration = Duration::from_secs(60);

impl Deploying<'_> {
    /// Deletes the pods of StatefulSet `w` stuck on revision `failed` once its controller has
    /// moved off it; answers their names.
    pub(super) async fn replace_stuck(&self, w: &core::Workload, failed: &str) -> Result<Vec<String>, String> {
        let Some(set) = self.controller_moved_off(w, failed).await? else {
            return Err(format!(
                "the controller of {w} did not take the put-back template within {}; its pods on revision {failed} \
                 that are not Ready stay until deleted",
                humantime::format_duration(SEEN_WITHIN)
            ));
        };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &w.namespace, &pods());
        let params = match core::selector(&set) {
            Some(labels) => ListParams::default().labels(&labels),
            None => ListParams::default(),
        };
        let listed = api.list(&params).await.map_err(|e| format!("cannot list the pods of {w}: {e}"))?;
        let listed: Vec<Value> = listed.items.iter().filter_map(|p| serde_json::to_value(p).ok()).collect();
        let mut replaced = Vec::new();
        for pod in core::stuck_pods(&set, failed, &listed) {
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: Some(pod.uid.clone()), resource_version: None }),
                ..DeleteParams::default()
            };
            match api.delete(&pod.name, &params).await {
                Ok(_) => replaced.push(pod.name),
                // Gone already, or made again since the list (no longer the stuck one).
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => return Err(format!("cannot delete pod {} of {w} (revision {failed}): {e}", pod.name)),
            }
        }
        Ok(replaced)
    }

    /// The StatefulSet once its controller has seen its template and its update revision is no
    /// longer `failed`; `None` when that does not happen within [`SEEN_WITHIN`].
    async fn controller_moved_off(&self, w: &core::Workload, failed: &str) -> Result<Option<Value>, String> {
        let config = crate::runner::watch::settings().fields(&format!("metadata.name={}", w.name));
        let mut events = watcher(self.api(w), config).boxed();
        let seen = async {
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                        let Ok(v) = serde_json::to_value(o) else { continue };
                        if core::moved_off(&v, failed) {
                            return Ok(Some(v));
                        }
                    }
                    Ok(_) => {}
                    Err(e) => return Err(format!("cannot watch {w}: {e}")),
                }
            }
            Ok(None)
        };
        tokio::time::timeout(SEEN_WITHIN, seen).await.unwrap_or(Ok(None))
    }
}
