//! Deploys: which workloads run an app image, the server-side apply that points their containers
//! at a new digest, whether a GitOps tool owns them, and the health verdicts of their roll-outs
//! read from the objects the controllers write; whether what a deploy wrote is still what runs
//! ([`ours`]). Pure: the objects come in as JSON, no I/O.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::reference::ImageRef;

/// The pod-template annotation a deploy writes: the change it carries, so the new template's pods
/// can be told from the old ones.
pub const CHANGE_ANNOTATION: &str = "buildermonitor.dev/change";

/// The field manager of every deploy write.
pub const FIELD_MANAGER: &str = "builder-monitor";

/// Labels and annotations by which a GitOps tool marks the objects it owns.
pub const GITOPS_MARKS: [&str; 4] = [
    "argocd.argoproj.io/instance",
    "argocd.argoproj.io/tracking-id",
    "kustomize.toolkit.fluxcd.io/name",
    "helm.toolkit.fluxcd.io/name",
];

/// Container waiting reasons that fail a deploy once a new pod stays in them for `fail_after`.
pub const BAD_WAITING: [&str; 3] = ["ImagePullBackOff", "ErrImagePull", "CrashLoopBackOff"];

/// A deploy's idempotency key: stable for (change, image), beside the change's rebase or rebuild
/// of the image.
pub fn action_key(change_id: &str, image: &str) -> String {
    format!("bm-{}", crate::id::stable_id(&[change_id, image, "deploy"]))
}

/// The kinds of workload a deploy writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
    /// Its job template: the next run uses the new digest; nothing to wait for.
    CronJob,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 4] =
        [WorkloadKind::Deployment, WorkloadKind::StatefulSet, WorkloadKind::DaemonSet, WorkloadKind::CronJob];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
            WorkloadKind::CronJob => "CronJob",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// Its API group (`apps` or `batch`).
    pub fn group(self) -> &'static str {
        match self {
            WorkloadKind::CronJob => "batch",
            _ => "apps",
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            WorkloadKind::CronJob => "batch/v1",
            _ => "apps/v1",
        }
    }

    /// Its resource name (`deployments`).
    pub fn plural(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "deployments",
            WorkloadKind::StatefulSet => "statefulsets",
            WorkloadKind::DaemonSet => "daemonsets",
            WorkloadKind::CronJob => "cronjobs",
        }
    }

    /// The JSON pointer of its pod template.
    pub fn template_pointer(self) -> &'static str {
        match self {
            WorkloadKind::CronJob => "/spec/jobTemplate/spec/template",
            _ => "/spec/template",
        }
    }

    /// Whether a deploy waits for its roll-out to become healthy.
    pub fn has_health(self) -> bool {
        self != WorkloadKind::CronJob
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a deploy does to a workload a GitOps tool owns (`gitops_owned`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GitopsOwned {
    /// Not written: the deploy ends `skipped` (the tool's Git source is where the digest goes).
    #[default]
    Skip,
    /// Written all the same.
    Patch,
}

/// One workload an app image is deployed to (`[[images]] deploy = [{…}]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    /// The container to update; none: every container whose image names the app's repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default, skip_serializing_if = "is_skip")]
    pub gitops_owned: GitopsOwned,
}

fn is_skip(g: &GitopsOwned) -> bool {
    *g == GitopsOwned::Skip
}

impl fmt::Display for Workload {
    /// `Deployment shop/petclinic`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// What a failed deploy puts back (`undo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Undo {
    /// The workloads' container images and the app tag, as `rollback` moves it.
    #[default]
    WorkloadAndTag,
    /// The workloads' container images only.
    Workload,
    /// Nothing: the failure is reported and the image held.
    None,
}

impl Undo {
    pub fn as_str(self) -> &'static str {
        match self {
            Undo::WorkloadAndTag => "workload-and-tag",
            Undo::Workload => "workload",
            Undo::None => "none",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Undo::WorkloadAndTag, Undo::Workload, Undo::None].into_iter().find(|u| u.as_str() == text)
    }

    pub fn workloads(self) -> bool {
        self != Undo::None
    }

    pub fn tag(self) -> bool {
        self == Undo::WorkloadAndTag
    }
}

/// What a deploy action carries out, recorded with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeployTarget {
    /// The digest to run (`sha256:…`; the index's for a multi-arch image).
    pub digest: String,
    /// `repo@sha256:…`, what the containers' `image` becomes.
    pub reference: String,
    pub workloads: Vec<Workload>,
    pub undo: Undo,
    /// The digest the app tag held before the action that moved it (what an undo puts back);
    /// none for a deploy asked for by hand, or a tag that did not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag_before: Option<String>,
}

/// One container a deploy writes: its image before and the one written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerWrite {
    pub name: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub init: bool,
    pub previous: String,
    pub image: String,
}

/// Where a deploy is with one workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadState {
    /// Its previous images are recorded; the write may or may not have landed.
    Writing,
    /// Written; its roll-out not healthy yet.
    Written,
    Healthy,
    Failed,
    /// A GitOps tool owns it: not written.
    Skipped,
    /// Put back to its previous images after a failure.
    Undone,
    /// Someone else changed a container the deploy wrote (before it was healthy, or before its
    /// undo): left as they set it, and the image held.
    Overridden,
}

impl WorkloadState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadState::Writing => "writing",
            WorkloadState::Written => "written",
            WorkloadState::Healthy => "healthy",
            WorkloadState::Failed => "failed",
            WorkloadState::Skipped => "skipped",
            WorkloadState::Undone => "undone",
            WorkloadState::Overridden => "overridden",
        }
    }
}

/// What a deploy records of one workload, before it writes and as it goes: the record an undo
/// and a restart read, and what `status` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadProgress {
    #[serde(flatten)]
    pub workload: Workload,
    pub containers: Vec<ContainerWrite>,
    /// The pod template's [`CHANGE_ANNOTATION`] before the write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_change: Option<String>,
    pub state: WorkloadState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// When it was written (RFC 3339): `deploy_timeout` counts from here, across restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_at: Option<String>,
    /// A StatefulSet's revision the deploy rolled out, recorded before its undo puts the template
    /// back: its pods stuck on it are replaced after (the forced rollback), by a restart too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_revision: Option<String>,
}

/// A deploy's record ([`WorkloadProgress`] per workload), kept with its action.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeployProgress {
    pub workloads: Vec<WorkloadProgress>,
    /// `deploy.started` was recorded (its event id is the action's, so an attempt after a crash
    /// that records it again adds nothing).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub started: bool,
}

impl DeployProgress {
    /// Whether any workload was written (its write recorded as landed), whatever came after.
    pub fn wrote(&self) -> bool {
        self.workloads.iter().any(|w| w.written_at.is_some())
    }
}

/// Whether a workload's current containers still run what a deploy wrote: `Some(false)` when a
/// written container now names another image (someone else changed it), `None` when a written
/// container is gone.
pub fn still_written(kind: WorkloadKind, object: &Value, writes: &[ContainerWrite]) -> Option<bool> {
    let now = containers(kind, object)?;
    let mut all = true;
    for w in writes {
        let (_, c) = now.iter().find(|(init, c)| *init == w.init && c.name == w.name)?;
        all &= c.image == w.image;
    }
    Some(all)
}

/// Why a workload cannot be deployed to as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeployError {
    #[error("{workload} has no pod template at {pointer}")]
    NoTemplate { workload: String, pointer: &'static str },
    #[error("{workload} has no container \"{container}\" (it has: {found})")]
    NoContainer { workload: String, container: String, found: String },
    #[error("no container of {workload} runs {repository} (its images: {found}); name one with container = \"…\"")]
    NoMatch { workload: String, repository: String, found: String },
}

/// A container of a workload and the image it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    pub name: String,
    pub image: String,
}

/// The containers of the pod template (init containers too), in order.
pub fn containers(kind: WorkloadKind, object: &Value) -> Option<Vec<(bool, Container)>> {
    let spec = object.pointer(kind.template_pointer())?.get("spec")?;
    let list = |field: &str, init: bool| {
        spec.get(field).and_then(Value::as_array).into_iter().flatten().filter_map(move |c| {
            Some((
                init,
                Container {
                    name: c.get("name")?.as_str()?.to_string(),
                    image: c.get("image").and_then(Value::as_str).unwrap_or_default().to_string(),
                },
            ))
        })
    };
    Some(list("initContainers", true).chain(list("containers", false)).collect())
}

/// Whether `image` (any tag or digest) names the repository of `repository` (`registry/path`).
pub fn names_repository(image: &str, repository: &ImageRef) -> bool {
    ImageRef::parse(image)
        .is_ok_and(|i| i.registry() == repository.registry() && i.repository() == repository.repository())
}

/// The containers a deploy of `app` updates in `object`: the one `workload.container` names, or
/// every one whose image names the app's repository.
pub fn targets(workload: &Workload, object: &Value, app: &ImageRef) -> Result<Vec<Container>, DeployError> {
    let name = workload.to_string();
    let all = containers(workload.kind, object)
        .ok_or(DeployError::NoTemplate { workload: name.clone(), pointer: workload.kind.template_pointer() })?;
    let chosen: Vec<Container> = match &workload.container {
        Some(wanted) => all.iter().filter(|(_, c)| &c.name == wanted).map(|(_, c)| c.clone()).collect(),
        None => all.iter().filter(|(_, c)| names_repository(&c.image, app)).map(|(_, c)| c.clone()).collect(),
    };
    if !chosen.is_empty() {
        return Ok(chosen);
    }
    let found = |f: fn(&Container) -> &str| {
        let v: Vec<&str> = all.iter().map(|(_, c)| f(c)).collect();
        if v.is_empty() { "none".to_string() } else { v.join(", ") }
    };
    Err(match &workload.container {
        Some(container) => {
            DeployError::NoContainer { workload: name, container: container.clone(), found: found(|c| &c.name) }
        }
        None => DeployError::NoMatch {
            workload: name,
            repository: format!("{}/{}", app.registry(), app.repository()),
            found: found(|c| &c.image),
        },
    })
}

/// The GitOps mark `object` carries in its labels or annotations, if any.
pub fn gitops_owner(object: &Value) -> Option<&'static str> {
    let meta = object.get("metadata")?;
    GITOPS_MARKS.into_iter().find(|mark| {
        ["labels", "annotations"].iter().any(|field| meta.get(*field).and_then(|m| m.get(*mark)).is_some())
    })
}

/// The server-side apply body that sets each of `images` (container name → image) and, with
/// `change`, the pod-template annotation [`CHANGE_ANNOTATION`]. Init containers go to
/// `initContainers`. Only these fields are in it, so only these are the manager's.
pub fn apply_body(workload: &Workload, images: &[(bool, Container)], change: Option<&str>) -> Value {
    let list = |init: bool| -> Vec<Value> {
        images.iter().filter(|(i, _)| *i == init).map(|(_, c)| json!({"name": c.name, "image": c.image})).collect()
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
    if let Some(change) = change {
        template["metadata"] = json!({ "annotations": { CHANGE_ANNOTATION: change } });
    }
    let mut body = json!({
        "apiVersion": workload.kind.api_version(),
        "kind": workload.kind.as_str(),
        "metadata": { "name": workload.name, "namespace": workload.namespace },
    });
    nest(&mut body, workload.kind, template);
    body
}

/// Puts `template` into `body` at the kind's pod-template pointer (`/spec/template` or
/// `/spec/jobTemplate/spec/template`).
fn nest(body: &mut Value, kind: WorkloadKind, mut template: Value) {
    let mut at = body;
    let parts: Vec<&str> = kind.template_pointer().trim_start_matches('/').split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            at[*part] = template.take();
        } else {
            if at.get(*part).is_none() {
                at[*part] = json!({});
            }
            at = &mut at[*part];
        }
    }
}

/// Where a workload's roll-out is, from its object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Healthy,
    /// Not there yet: what it waits for.
    Progressing(String),
    /// Failed for good (the controller says so).
    Failed(String),
}

fn int(object: &Value, pointer: &str) -> Option<i64> {
    object.pointer(pointer).and_then(Value::as_i64)
}

/// The roll-out's verdict from the workload's `metadata` and `status`, as its controller writes
/// them. A CronJob has none to wait for.
pub fn health(kind: WorkloadKind, object: &Value) -> Health {
    let generation = int(object, "/metadata/generation").unwrap_or(0);
    let observed = int(object, "/status/observedGeneration").unwrap_or(0);
    let wanted = int(object, "/spec/replicas").unwrap_or(1);
    let count = |field: &str| int(object, &format!("/status/{field}")).unwrap_or(0);
    // First: until the controller has seen the new template, its status and conditions (a
    // deadline exceeded by the previous roll-out among them) say nothing about this one.
    if kind.has_health() && observed < generation {
        return Health::Progressing(format!("the controller has not seen generation {generation} yet"));
    }
    match kind {
        WorkloadKind::CronJob => Health::Healthy,
        WorkloadKind::Deployment => {
            let conditions = object.pointer("/status/conditions").and_then(Value::as_array);
            if let Some(c) = conditions.into_iter().flatten().find(|c| {
                c["type"] == "Progressing" && c["status"] == "False" && c["reason"] == "ProgressDeadlineExceeded"
            }) {
                let message = c["message"].as_str().unwrap_or("the progress deadline passed");
                return Health::Failed(format!("ProgressDeadlineExceeded: {message}"));
            }
            let (updated, available, total) = (count("updatedReplicas"), count("availableReplicas"), count("replicas"));
            if updated == wanted && available == wanted && total == wanted {
                return Health::Healthy;
            }
            // The real controller copies the new ReplicaSet's failure to create pods onto the
            // Deployment while `Progressing` stays true until the deadline.
            if let Some(failure) = replica_failure(object) {
                return failure;
            }
            Health::Progressing(format!(
                "{updated} of {wanted} replicas updated, {available} available, {total} in all"
            ))
        }
        // With `OnDelete`, the controller replaces a pod only when someone deletes it, so waiting
        // for the pods would run into `deploy_timeout` and undo a good deploy (`kubectl rollout
        // status` refuses such a workload for the same reason): done once the controller has the
        // new template (above), and each pod takes it when it is next deleted.
        WorkloadKind::StatefulSet | WorkloadKind::DaemonSet if on_delete(object) => Health::Healthy,
        WorkloadKind::StatefulSet => {
            let revision = |f: &str| object.pointer(&format!("/status/{f}")).and_then(Value::as_str);
            let ready = count("readyReplicas");
            // A partitioned roll-out updates the pods from ordinal `partition` up only, so the
            // current revision never becomes the update revision: done when those are updated.
            let partition = int(object, "/spec/updateStrategy/rollingUpdate/partition").unwrap_or(0);
            if partition > 0 {
                let (updated, due) = (count("updatedReplicas"), (wanted - partition).max(0));
                return if updated >= due && ready == wanted {
                    Health::Healthy
                } else {
                    Health::Progressing(format!(
                        "{updated} of {due} replicas from ordinal {partition} updated, {ready} of {wanted} ready"
                    ))
                };
            }
            match (revision("updateRevision"), revision("currentRevision")) {
                (Some(u), Some(c)) if u == c && ready == wanted => Health::Healthy,
                (u, c) => Health::Progressing(format!(
                    "revision {} of {} current, {ready} of {wanted} ready",
                    c.unwrap_or("?"),
                    u.unwrap_or("?")
                )),
            }
        }
        WorkloadKind::DaemonSet => {
            let desired = count("desiredNumberScheduled");
            let (updated, available) = (count("updatedNumberScheduled"), count("numberAvailable"));
            if updated == desired && available == desired {
                Health::Healthy
            } else {
                Health::Progressing(format!("{updated} of {desired} nodes updated, {available} available"))
            }
        }
    }
}

/// Texts of a refused pod create that the controller's next try may not meet: quota freed as
/// the roll-out scales the old pods down, a conflict, a namespace's ServiceAccount not made yet.
const PASSING_REFUSALS: [&str; 5] = [
    "exceeded quota",
    "status unknown for quota",
    "error looking up service account",
    "Operation cannot be fulfilled",
    "try again",
];

/// The verdict of a `ReplicaFailure=True` condition of a Deployment or ReplicaSet: its controller
/// could not create (or delete) the new template's pods. A refusal by admission that every retry
/// meets again (Pod Security, a LimitRange, a webhook, the namespace being deleted) fails at once,
/// with the condition's reason and message; anything else (see [`PASSING_REFUSALS`]) is shown
/// while the roll-out waits, for the progress deadline to end. `None` without the condition.
pub fn replica_failure(object: &Value) -> Option<Health> {
    let conditions = object.pointer("/status/conditions").and_then(Value::as_array)?;
    let failure = conditions.iter().find(|c| c["type"] == "ReplicaFailure" && c["status"] == "True")?;
    let reason = failure["reason"].as_str().unwrap_or("ReplicaFailure");
    let message = failure["message"].as_str().unwrap_or_default();
    let shown = format!("ReplicaFailure ({reason}): {message}");
    let refused = message.contains(" is forbidden: ");
    if !refused || PASSING_REFUSALS.iter().any(|passing| message.contains(passing)) {
        return Some(Health::Progressing(shown));
    }
    if message.contains("violates PodSecurity") {
        return Some(Health::Failed(format!("Pod Security refuses the new pods: {shown}")));
    }
    Some(Health::Failed(format!("the new pods are refused: {shown}")))
}

/// Whether a StatefulSet's or DaemonSet's pods are replaced only when deleted.
fn on_delete(object: &Value) -> bool {
    object.pointer("/spec/updateStrategy/type").and_then(Value::as_str) == Some("OnDelete")
}

/// A pod of the new template stuck in a bad waiting state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTrouble {
    pub pod: String,
    pub container: String,
    pub reason: String,
    pub message: String,
}

impl fmt::Display for PodTrouble {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pod {} container {}: {}", self.pod, self.container, self.reason)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

/// The first pod of `pods` whose template carries `change` and has a container waiting in one of
/// [`BAD_WAITING`].
pub fn pod_trouble<'a>(pods: impl IntoIterator<Item = &'a Value>, change: &str) -> Option<PodTrouble> {
    pods.into_iter()
        .filter(|p| {
            p.pointer(&format!("/metadata/annotations/{}", CHANGE_ANNOTATION.replace('/', "~1")))
                == Some(&json!(change))
        })
        .find_map(|p| {
            let statuses = ["initContainerStatuses", "containerStatuses"]
                .into_iter()
                .filter_map(|f| p.pointer(&format!("/status/{f}")).and_then(Value::as_array))
                .flatten();
            for s in statuses {
                let waiting = s.pointer("/state/waiting");
                let reason = waiting.and_then(|w| w["reason"].as_str()).unwrap_or_default();
                if BAD_WAITING.contains(&reason) {
                    return Some(PodTrouble {
                        pod: p.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("?").to_string(),
                        container: s["name"].as_str().unwrap_or("?").to_string(),
                        reason: reason.to_string(),
                        message: waiting.and_then(|w| w["message"].as_str()).unwrap_or_default().to_string(),
                    });
                }
            }
            None
        })
}

/// The workload's label selector as a `labelSelector` query (`matchLabels` only; `None` when it
/// has `matchExpressions` or no labels, which a deploy then does not read pods by).
pub fn selector(object: &Value) -> Option<String> {
    let labels = selector_labels(object)?;
    Some(labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","))
}

/// The workload's `matchLabels` (`None` as for [`selector`]).
pub fn selector_labels(object: &Value) -> Option<BTreeMap<&str, &str>> {
    let selector = object.pointer("/spec/selector")?;
    if selector.get("matchExpressions").and_then(Value::as_array).is_some_and(|e| !e.is_empty()) {
        return None;
    }
    let labels: BTreeMap<&str, &str> =
        selector.get("matchLabels")?.as_object()?.iter().filter_map(|(k, v)| Some((k.as_str(), v.as_str()?))).collect();
    (!labels.is_empty()).then_some(labels)
}

/// Whether `pod`'s labels hold every one of `labels` (a [`selector_labels`]).
pub fn selects(labels: &BTreeMap<&str, &str>, pod: &Value) -> bool {
    let Some(have) = pod.pointer("/metadata/labels").and_then(Value::as_object) else { return false };
    labels.iter().all(|(k, v)| have.get(*k).and_then(Value::as_str) == Some(*v))
}

mod stuck;
pub use stuck::{REVISION_LABEL, StuckPod, moved_off, rolling_revision, stuck_pods};

mod ours;
pub use ours::{Changed, Guarded, Override, OverrideIndex, UndoPlan, changed_by_others, undo_patch, undo_plan};

#[cfg(test)]
mod tests;
