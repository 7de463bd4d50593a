//! Whether what a deploy wrote is still what a workload runs, container by container: the verdict
//! a failed deploy's undo, a roll-out's health and the override guard act on. An undo puts back
//! only the containers that still run what the deploy wrote; a container a person or another tool
//! set since is theirs, left as they set it, and holds the image. The guard keeps what each
//! finished deploy wrote in memory ([`OverrideIndex`]), so a workload event costs a map lookup and
//! a few string comparisons, whatever the ledger holds.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{CHANGE_ANNOTATION, ContainerWrite, DeployProgress, WorkloadKind, WorkloadState, containers};

/// A written container that now runs something the deploy did not write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub name: String,
    pub init: bool,
    /// What it runs now; `None` when the container is gone from the template.
    pub image: Option<String>,
}

impl fmt::Display for Changed {
    /// `container app runs registry.example/app:hotfix`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.init { "init container" } else { "container" };
        match &self.image {
            Some(image) => write!(f, "{what} {} runs {image}", self.name),
            None => write!(f, "{what} {} was removed", self.name),
        }
    }
}

/// The containers of `writes` that `object` runs with something else than what was written: what
/// someone else changed. Empty when it runs what was written (or the object has no template).
pub fn changed_by_others(kind: WorkloadKind, object: &Value, writes: &[ContainerWrite]) -> Vec<Changed> {
    let Some(now) = containers(kind, object) else { return Vec::new() };
    writes
        .iter()
        .filter_map(|w| {
            let found = now.iter().find(|(init, c)| *init == w.init && c.name == w.name).map(|(_, c)| &c.image);
            match found {
                Some(image) if *image == w.image => None,
                image => Some(Changed { name: w.name.clone(), init: w.init, image: image.cloned() }),
            }
        })
        .collect()
}

/// What an undo of one workload does, from the object as it is now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UndoPlan {
    /// The containers that still run what the deploy wrote: they get their previous image back.
    pub restore: Vec<ContainerWrite>,
    /// Those someone else set since (to neither what was written nor what ran before): left.
    pub others: Vec<Changed>,
    /// Whether the pod template's [`CHANGE_ANNOTATION`] goes back too: only when every written
    /// container is restored and the annotation still names the deploy's change.
    pub annotation: bool,
}

impl UndoPlan {
    /// Nothing to write: no container runs what the deploy wrote (never written, or put back).
    pub fn is_empty(&self) -> bool {
        self.restore.is_empty() && !self.annotation
    }
}

/// The undo of `writes` (the deploy of `change`) as `object` stands: a container running the
/// written image is restored, one running its previous image needs nothing, any other is
/// someone else's.
pub fn undo_plan(kind: WorkloadKind, object: &Value, writes: &[ContainerWrite], change: &str) -> UndoPlan {
    let now = containers(kind, object).unwrap_or_default();
    let mut plan = UndoPlan::default();
    for w in writes {
        match now.iter().find(|(init, c)| *init == w.init && c.name == w.name).map(|(_, c)| &c.image) {
            Some(image) if *image == w.image => plan.restore.push(w.clone()),
            Some(image) if *image == w.previous => {}
            image => plan.others.push(Changed { name: w.name.clone(), init: w.init, image: image.cloned() }),
        }
    }
    let pointer = format!("{}/metadata/annotations/{}", kind.template_pointer(), CHANGE_ANNOTATION.replace('/', "~1"));
    plan.annotation = plan.others.is_empty() && object.pointer(&pointer).and_then(Value::as_str) == Some(change);
    plan
}

/// The strategic merge patch an undo sends: each restored container's previous image, the
/// annotation back to `previous_change` (removed when there was none) when the plan says so, and
/// `resource_version` as a precondition, so a write by someone else since the read is a conflict
/// rather than overwritten. A patch (unlike a server-side apply) never creates a missing object.
pub fn undo_patch(kind: WorkloadKind, plan: &UndoPlan, previous_change: Option<&str>, resource_version: &str) -> Value {
    let list = |init: bool| -> Vec<Value> {
        plan.restore.iter().filter(|c| c.init == init).map(|c| json!({"name": c.name, "image": c.previous})).collect()
    };
    let mut spec = serde_json::Map::new();
    let (init, main) = (list(true), list(false));
    if !init.is_empty() {
        spec.insert("initContainers".into(), Value::Array(init));
    }
    if !main.is_empty() {
        spec.insert("containers".into(), Value::Array(main));
    }
    let mut template = json!({ "spec": spec });
    if plan.annotation {
        template["metadata"] = json!({ "annotations": { CHANGE_ANNOTATION: previous_change } });
    }
    let mut body = json!({ "metadata": { "resourceVersion": resource_version } });
    super::nest(&mut body, kind, template);
    body
}

/// A finished deploy the guard watches over: the newest succeeded deploy of an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guarded {
    /// The `[[images]]` name.
    pub image: String,
    /// Its action's key, change and attempt.
    pub key: String,
    pub change: String,
    pub attempt: u32,
    /// What it recorded of its workloads.
    pub progress: DeployProgress,
}

/// A guarded deploy whose workload now runs something else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    pub deploy: Arc<Guarded>,
    pub changed: Vec<Changed>,
}

type WorkloadKey = (WorkloadKind, String, String);

/// What one guarded deploy wrote to one workload.
#[derive(Debug)]
struct Written {
    deploy: Arc<Guarded>,
    writes: Vec<ContainerWrite>,
}

/// What each guarded deploy wrote, by workload: kept in memory by the daemon (rebuilt from the
/// ledger at start, updated as deploys start and end), so the guard's check of a workload event
/// reads no ledger.
#[derive(Debug, Default)]
pub struct OverrideIndex {
    by_workload: HashMap<WorkloadKey, Vec<Written>>,
    by_image: HashMap<String, Vec<WorkloadKey>>,
}

impl OverrideIndex {
    /// Guards `deploy` from now on, in place of whatever the index held for its image: each of
    /// its workloads that became healthy on what it wrote.
    pub fn insert(&mut self, deploy: Guarded) {
        self.remove(&deploy.image);
        let deploy = Arc::new(deploy);
        let mut keys = Vec::new();
        for w in deploy.progress.workloads.iter().filter(|w| w.state == WorkloadState::Healthy) {
            let key = (w.workload.kind, w.workload.namespace.clone(), w.workload.name.clone());
            let written = Written { deploy: deploy.clone(), writes: w.containers.clone() };
            self.by_workload.entry(key.clone()).or_default().push(written);
            keys.push(key);
        }
        if !keys.is_empty() {
            self.by_image.insert(deploy.image.clone(), keys);
        }
    }

    /// No deploy of `image` is guarded any more (a newer one runs, or it is held).
    pub fn remove(&mut self, image: &str) {
        for key in self.by_image.remove(image).unwrap_or_default() {
            if let Some(list) = self.by_workload.get_mut(&key) {
                list.retain(|w| w.deploy.image != image);
                if list.is_empty() {
                    self.by_workload.remove(&key);
                }
            }
        }
    }

    /// How many workloads are guarded.
    pub fn len(&self) -> usize {
        self.by_workload.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_workload.is_empty()
    }

    /// The guarded deploys whose writes the workload `object` (as a watch event shows it; its
    /// `spec` is what is read) no longer runs.
    pub fn check(&self, kind: WorkloadKind, namespace: &str, name: &str, object: &Value) -> Vec<Override> {
        let Some(list) = self.by_workload.get(&(kind, namespace.to_string(), name.to_string())) else {
            return Vec::new();
        };
        list.iter()
            .filter_map(|w| {
                let changed = changed_by_others(kind, object, &w.writes);
                (!changed.is_empty()).then(|| Override { deploy: w.deploy.clone(), changed })
            })
            .collect()
    }
}
