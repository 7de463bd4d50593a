//! What every object a pool makes for an action carries — its name, labels and annotations, the
//! pool's and the image's placement merged — and the one trait a runner kind that builds in pools
//! implements for its objects ([`PoolObjects`]: a Job, a kpack Build). The pools (`pool`) make,
//! watch and follow them through that trait alone, never naming a kind.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use kube::api::ApiResource;
use serde_json::{Value, json};

use super::carrier::ActionRef;
use super::{PreviewError, RunnerError};
use crate::config::{Pool, Scheduling};
use builder_monitor_core::plan::ActionTarget;

pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "builder-monitor";
/// The annotation naming the pool a Job or Build was made in.
pub const POOL_ANNOTATION: &str = "buildermonitor.dev/pool";
pub const SELECTOR: &str = "app.kubernetes.io/managed-by=builder-monitor";

/// The objects a runner kind that builds in pools makes there, one per action attempt.
pub trait PoolObjects: Send + Sync {
    /// The kind of object, as logs and errors name it (`Job`, `Build`).
    fn kind(&self) -> &'static str;
    /// Its API resource: made by name, watched by the managed-by label.
    fn resource(&self) -> ApiResource;
    /// The object that carries out `action` in the pool `place` names.
    fn object(
        &self,
        action: &ActionRef<'_>,
        target: &ActionTarget,
        place: &Placement<'_>,
        max_attempts: u32,
    ) -> Result<Value, RunnerError>;
    /// What `build-spec` shows for it: the object.
    fn preview(
        &self,
        action: &ActionRef<'_>,
        target: &ActionTarget,
        place: &Placement<'_>,
        max_attempts: u32,
    ) -> Result<Value, PreviewError> {
        Ok(self.object(action, target, place, max_attempts)?)
    }
    /// Whether the object finished: (succeeded, what it says).
    fn outcome(&self, object: &Value) -> Option<(bool, String)>;
    /// Whether a queue holds it (not finished): it waits for quota, not running.
    fn queued(&self, _object: &Value) -> bool {
        false
    }
    /// Removes what the finished object left running or stored in the cluster besides itself
    /// (a Job's pods), once its outcome and output were read; the object stays, the record of
    /// the build (and what a restart follows).
    fn clean_up<'a>(&'a self, _client: &'a kube::Client, _namespace: &'a str, _object: &'a Value) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
    /// What a failed one leaves to read besides its own status (a Job's pods' messages).
    fn output_tail<'a>(
        &'a self,
        _client: &'a kube::Client,
        _namespace: &'a str,
        _name: &'a str,
    ) -> BoxFuture<'a, String> {
        Box::pin(async { String::new() })
    }
}

/// Where one action's build runs: its pool, the image's pod template, and the app's platform
/// when it is one (the build pod is placed on a node of that os and architecture).
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a> {
    pub pool: &'a Pool,
    pub image_template: Option<&'a Value>,
    pub platform: Option<&'a str>,
}

impl Placement<'_> {
    /// The pool's scheduling with the image's over it, and the node's os and architecture for a
    /// known platform unless either already names them (`os` left out for kpack, which sets it).
    pub fn scheduling(&self, target: &ActionTarget, os: bool) -> Scheduling {
        let mut scheduling = merged(&self.pool.settings.scheduling, &target.scheduling);
        if let Some((platform_os, arch)) = self.platform.and_then(|p| p.split_once('/')) {
            let arch = arch.split('/').next().unwrap_or(arch);
            if os {
                scheduling.node_selector.entry("kubernetes.io/os".into()).or_insert_with(|| platform_os.to_string());
            }
            scheduling.node_selector.entry("kubernetes.io/arch".into()).or_insert_with(|| arch.to_string());
        }
        scheduling
    }

    /// The pool's template, then the image's.
    pub fn templates(&self) -> Vec<&Value> {
        self.pool.pod_template.as_ref().map(|t| &t.value).into_iter().chain(self.image_template).collect()
    }
}

/// The runner's placement with the image's over it: maps merge key by key; lists, affinity and
/// names replace.
pub fn merged(runner: &Scheduling, image: &Scheduling) -> Scheduling {
    let mut node_selector = runner.node_selector.clone();
    node_selector.extend(image.node_selector.clone());
    Scheduling {
        node_selector,
        tolerations: image.tolerations.clone().or_else(|| runner.tolerations.clone()),
        affinity: image.affinity.clone().or_else(|| runner.affinity.clone()),
        priority_class_name: image.priority_class_name.clone().or_else(|| runner.priority_class_name.clone()),
        runtime_class_name: image.runtime_class_name.clone().or_else(|| runner.runtime_class_name.clone()),
        scheduler_name: image.scheduler_name.clone().or_else(|| runner.scheduler_name.clone()),
    }
}

/// Labels every object of an action carries.
pub fn labels(action: &ActionRef<'_>) -> BTreeMap<String, String> {
    [
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
        ("buildermonitor.dev/image".to_string(), action.image.to_string()),
        ("buildermonitor.dev/change".to_string(), action.change_id.to_string()),
        ("buildermonitor.dev/action".to_string(), action.kind.as_str().to_string()),
    ]
    .into()
}

pub fn annotations(target: &ActionTarget) -> BTreeMap<String, String> {
    let mut a: BTreeMap<String, String> = [
        ("buildermonitor.dev/builder".to_string(), target.builder.clone()),
        ("buildermonitor.dev/reasons".to_string(), target.reasons.join(",")),
        ("buildermonitor.dev/why".to_string(), target.why.clone()),
    ]
    .into();
    if let Some(run) = &target.run_image {
        a.insert("buildermonitor.dev/run-image".into(), run.clone());
    }
    a
}

/// The scheduling fields of a pod spec (or of a kpack Build's top level).
pub fn scheduling_fields(s: &Scheduling) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    if !s.node_selector.is_empty() {
        m.insert("nodeSelector".into(), json!(s.node_selector));
    }
    if let Some(t) = &s.tolerations {
        m.insert("tolerations".into(), json!(t));
    }
    if let Some(a) = &s.affinity {
        m.insert("affinity".into(), a.clone());
    }
    for (key, value) in [
        ("priorityClassName", &s.priority_class_name),
        ("runtimeClassName", &s.runtime_class_name),
        ("schedulerName", &s.scheduler_name),
    ] {
        if let Some(v) = value {
            m.insert(key.into(), json!(v));
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_scheduling_merges_over_the_runner() {
        let runner = Scheduling {
            node_selector: [("disktype".to_string(), "ssd".to_string()), ("zone".to_string(), "a".to_string())].into(),
            tolerations: Some(vec![]),
            priority_class_name: Some("builds-low".into()),
            ..Default::default()
        };
        let image = Scheduling {
            node_selector: [("zone".to_string(), "b".to_string())].into(),
            runtime_class_name: Some("gvisor".into()),
            ..Default::default()
        };
        let m = merged(&runner, &image);
        assert_eq!(m.node_selector["disktype"], "ssd");
        assert_eq!(m.node_selector["zone"], "b");
        assert_eq!(m.tolerations, Some(vec![]));
        assert_eq!(m.priority_class_name.as_deref(), Some("builds-low"));
        assert_eq!(m.runtime_class_name.as_deref(), Some("gvisor"));
    }
}
