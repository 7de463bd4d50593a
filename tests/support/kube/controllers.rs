//! The workload controllers of the double.
//!
//! A background task reconciles `apps/v1` Deployments, StatefulSets and DaemonSets after every
//! change to the store, one step per workload per pass, so a watcher sees a roll-out progress as
//! it would on a cluster: the generation observed (the new template has no ready pods yet), then
//! the new template's pods (`NAME-<template hash>-<i>`, the old template's deleted) and the
//! healthy status. A failure set for an image ([`Failure`]) stops the roll-out of a template
//! running it where the real controllers would stop. Roll-outs can be paused, for everything or
//! one workload. No timers: a progress deadline "passes" one step after the new pod appeared. A
//! StatefulSet's roll-out of a healthy template waits while one of its pods is not Ready
//! (`OrderedReady`: a pod stuck on an undone revision stays until deleted).
//! CronJobs have no controller (their status is a subresource all the same). The same task runs
//! the Job controller ([`super::jobs`]), which pausing roll-outs does not pause.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::fields::ManagerId;
use super::workloads::workload_target;
use super::{Key, KubeDouble, Shared, Store, now};

/// How the roll-out of a template running a given image goes wrong ([`KubeDouble::fail_image`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The new pod runs and never becomes ready; a Deployment's progress deadline then passes
    /// (condition `Progressing` False, reason `ProgressDeadlineExceeded`). A StatefulSet or
    /// DaemonSet, which have no deadline, just keep that pod.
    ProgressDeadline,
    /// The new pods' container waits in `ImagePullBackOff` (pod phase Pending).
    ImagePullBackOff,
    /// The new pods' container waits in `CrashLoopBackOff` after restarts (pod phase Running).
    CrashLoopBackOff,
    /// The controller observes the generation and goes no further: no new pods.
    Stuck,
}

/// Nodes a DaemonSet schedules a pod on.
const NODES: i64 = 2;

/// The manager of what the controllers write, as on a cluster.
const CONTROLLER: &str = "kube-controller-manager";

pub(super) const CONTROLLED: [&str; 3] = ["deployments", "statefulsets", "daemonsets"];

#[derive(Default)]
pub(super) struct Controllers {
    failures: BTreeMap<String, Failure>,
    paused: bool,
    held: BTreeSet<Key>,
    rollouts: BTreeMap<Key, Rollout>,
}

impl Controllers {
    /// Whether the controller of this workload is running (neither paused nor held).
    pub(super) fn rolls_out(&self, key: &Key) -> bool {
        !self.paused && !self.held.contains(key)
    }
}

/// Where the roll-out of one workload generation is.
#[derive(Clone)]
struct Rollout {
    uid: String,
    generation: i64,
    hash: String,
    /// Decided when the generation is first seen: a failure set later does not change it.
    failure: Option<Failure>,
    phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The status names the generation; no new pods yet.
    Observed,
    /// A Deployment's new pod is there and will not become ready; its deadline has not passed.
    Waiting,
    /// As far as this generation goes.
    Done,
}

/// What the status says of the roll-out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Progress {
    Started,
    Complete,
    DeadlineExceeded,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PodHealth {
    Ready,
    /// Running, the failing image's container not ready.
    NotReady,
    /// The failing image's container waits with this failure's reason.
    Waiting(Failure),
}

pub(super) async fn run(shared: Arc<Shared>) {
    let mut changes = shared.changed.subscribe();
    loop {
        changes.borrow_and_update();
        let (wrote, rv) = {
            let mut store = shared.store.lock().unwrap();
            let wrote = step(&mut store);
            (wrote, store.rv)
        };
        if wrote {
            let _ = shared.changed.send(rv);
        } else {
            shared.idle.send_replace(rv);
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// One pass over the Jobs and the workloads; whether anything was written.
fn step(store: &mut Store) -> bool {
    let jobs = super::jobs::step(store);
    if store.controllers.paused {
        return jobs;
    }
    let keys: Vec<Key> = store
        .objects
        .keys()
        .filter(|k| k.group == "apps" && CONTROLLED.contains(&k.plural.as_str()))
        .cloned()
        .collect();
    let mut wrote = false;
    for key in &keys {
        if !store.controllers.held.contains(key) {
            wrote |= reconcile(store, key);
        }
    }
    store.controllers.rollouts.retain(|k, _| keys.contains(k));
    collect_garbage(store) || wrote || jobs
}

/// A workload as its controller reads it.
struct Workload {
    key: Key,
    kind: &'static str,
    name: String,
    namespace: String,
    uid: String,
    generation: i64,
    /// Pods wanted: `spec.replicas` (default 1), or one per node for a DaemonSet.
    desired: i64,
    template: Value,
    hash: String,
}

impl Workload {
    fn read(store: &Store, key: &Key) -> Self {
        let object = &store.objects[key];
        let template = object["spec"]["template"].clone();
        let kind = super::kind_of(&key.plural);
        Workload {
            key: key.clone(),
            kind,
            name: key.name.clone(),
            namespace: key.namespace.clone().unwrap_or_default(),
            uid: object["metadata"]["uid"].as_str().unwrap_or_default().to_string(),
            generation: object["metadata"]["generation"].as_i64().unwrap_or(1),
            desired: if kind == "DaemonSet" { NODES } else { object["spec"]["replicas"].as_i64().unwrap_or(1) },
            hash: template_hash(&template),
            template,
        }
    }

    /// The pod label naming the template a pod was made from, and its value for this template.
    fn revision(&self) -> (&'static str, String) {
        match self.kind {
            "Deployment" => ("pod-template-hash", self.hash.clone()),
            _ => ("controller-revision-hash", format!("{}-{}", self.name, self.hash)),
        }
    }

    fn is_current(&self, pod: &Value) -> bool {
        let (label, value) = self.revision();
        pod["metadata"]["labels"][label] == value.as_str()
    }

    fn images(&self) -> impl Iterator<Item = &str> {
        ["initContainers", "containers"]
            .into_iter()
            .filter_map(|f| self.template["spec"][f].as_array())
            .flatten()
            .filter_map(|c| c["image"].as_str())
    }
}

fn template_hash(template: &Value) -> String {
    // serde_json's maps are sorted, so equal templates serialise alike.
    hex::encode(Sha256::digest(serde_json::to_vec(template).unwrap()))[..10].to_string()
}

fn reconcile(store: &mut Store, key: &Key) -> bool {
    let w = Workload::read(store, key);
    let current = store.controllers.rollouts.get(key).cloned();
    let fresh = current.as_ref().is_none_or(|r| r.uid != w.uid || r.generation != w.generation || r.hash != w.hash);
    if fresh {
        let failure = w.images().find_map(|i| store.controllers.failures.get(i).copied());
        write_status(store, &w, Progress::Started);
        let phase = if failure == Some(Failure::Stuck) { Phase::Done } else { Phase::Observed };
        let rollout = Rollout { uid: w.uid.clone(), generation: w.generation, hash: w.hash.clone(), failure, phase };
        store.controllers.rollouts.insert(key.clone(), rollout);
        return true;
    }
    let rollout = current.unwrap();
    let next = match (rollout.failure, rollout.phase) {
        (_, Phase::Done) => return false,
        // OrderedReady, as the real StatefulSet controller: a pod that is not Ready (one stuck on
        // an undone revision) holds the roll-out until someone deletes it.
        (None, _) if w.kind == "StatefulSet" && owned_pods(store, &w).iter().any(|(_, p)| !is_ready(p)) => {
            return false;
        }
        (None, _) => {
            replace_pods(store, &w, None);
            write_status(store, &w, Progress::Complete);
            Phase::Done
        }
        (Some(Failure::ProgressDeadline), Phase::Waiting) => {
            write_status(store, &w, Progress::DeadlineExceeded);
            Phase::Done
        }
        (Some(failure), _) => {
            replace_pods(store, &w, Some(failure));
            write_status(store, &w, Progress::Started);
            if failure == Failure::ProgressDeadline && w.kind == "Deployment" { Phase::Waiting } else { Phase::Done }
        }
    };
    store.controllers.rollouts.get_mut(key).unwrap().phase = next;
    true
}

fn owned_pods(store: &Store, w: &Workload) -> Vec<(Key, Value)> {
    store
        .objects
        .iter()
        .filter(|(k, o)| {
            k.plural == "pods"
                && k.namespace.as_deref() == Some(w.namespace.as_str())
                && o["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"] == w.uid.as_str()))
        })
        .map(|(k, o)| (k.clone(), o.clone()))
        .collect()
}

fn pod_index(pod: &Value) -> i64 {
    pod["metadata"]["name"].as_str().and_then(|n| n.rsplit('-').next()).and_then(|i| i.parse().ok()).unwrap_or(0)
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// Pods of the new template: all of them ready and the old ones gone, or, failing, the first
/// new pods a rolling update makes (a Deployment surges one; a StatefulSet and a DaemonSet
/// replace their highest-numbered old pod; a new DaemonSet starts on every node).
fn replace_pods(store: &mut Store, w: &Workload, failure: Option<Failure>) {
    let (new, old): (Vec<_>, Vec<_>) = owned_pods(store, w).into_iter().partition(|(_, p)| w.is_current(p));
    let existing: BTreeSet<i64> = new.iter().map(|(_, p)| pod_index(p)).collect();
    let failing: BTreeSet<String> =
        w.images().filter(|i| store.controllers.failures.contains_key(*i)).map(str::to_string).collect();
    let Some(failure) = failure else {
        for (key, pod) in old.iter().chain(&new) {
            if !w.is_current(pod) || pod_index(pod) >= w.desired {
                store.delete(key);
            }
        }
        for i in (0..w.desired).filter(|i| !existing.contains(i)) {
            create_pod(store, w, i, PodHealth::Ready, &failing);
        }
        return;
    };
    let health = if failure == Failure::ProgressDeadline { PodHealth::NotReady } else { PodHealth::Waiting(failure) };
    let indices: Vec<i64> = match (w.kind, old.iter().max_by_key(|(_, p)| pod_index(p))) {
        ("Deployment", _) => vec![0],
        (_, Some((key, pod))) => {
            let i = pod_index(pod);
            store.delete(key);
            vec![i]
        }
        ("DaemonSet", None) => (0..NODES).collect(),
        (_, None) => vec![0],
    };
    for i in indices.into_iter().filter(|i| !existing.contains(i)) {
        create_pod(store, w, i, health, &failing);
    }
}

/// A pod of the template, made by the controller and then given its status by the kubelet.
fn create_pod(store: &mut Store, w: &Workload, index: i64, health: PodHealth, failing: &BTreeSet<String>) {
    let name = format!("{}-{}-{index}", w.name, w.hash);
    let (label, revision) = w.revision();
    let mut labels = w.template["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    labels[label] = json!(revision);
    let mut metadata = json!({
        "name": name,
        "namespace": w.namespace,
        "labels": labels,
        "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": w.kind, "name": w.name, "uid": w.uid,
            "controller": true, "blockOwnerDeletion": true,
        }],
    });
    if let Some(annotations) = w.template["metadata"].get("annotations").filter(|a| a.is_object()) {
        metadata["annotations"] = annotations.clone();
    }
    let mut spec = w.template["spec"].clone();
    spec["nodeName"] = json!(format!("node-{}", index % NODES));
    let key = Key {
        group: String::new(),
        version: "v1".into(),
        plural: "pods".into(),
        namespace: Some(w.namespace.clone()),
        name,
    };
    let pod = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec });
    let mut pod = store.write_update(&key, pod, Some(ManagerId::update(CONTROLLER, "v1", "")));
    pod["status"] = pod_status(&pod, health, failing);
    store.write_update(&key, pod, Some(ManagerId::update("kubelet", "v1", "status")));
}

fn pod_status(pod: &Value, health: PodHealth, failing: &BTreeSet<String>) -> Value {
    let time = now();
    let pod_ref = format!(
        "{}_{}({})",
        pod["metadata"]["name"].as_str().unwrap_or_default(),
        pod["metadata"]["namespace"].as_str().unwrap_or_default(),
        pod["metadata"]["uid"].as_str().unwrap_or_default()
    );
    let list = |field: &str| pod["spec"][field].as_array().cloned().unwrap_or_default();
    let container = |c: &Value, init: bool, blocked: bool| -> Value {
        let name = c["name"].as_str().unwrap_or_default();
        let image = c["image"].as_str().unwrap_or_default();
        let mut s =
            json!({ "name": name, "image": image, "imageID": "", "restartCount": 0, "ready": true, "started": !init });
        let fails = failing.contains(image);
        match health {
            PodHealth::Waiting(Failure::ImagePullBackOff) if fails => {
                s["ready"] = json!(false);
                s["started"] = json!(false);
                s["state"] = json!({ "waiting": {
                    "reason": "ImagePullBackOff",
                    "message": format!("Back-off pulling image \"{image}\""),
                } });
            }
            PodHealth::Waiting(Failure::CrashLoopBackOff) if fails => {
                s["ready"] = json!(false);
                s["started"] = json!(false);
                s["restartCount"] = json!(5);
                s["state"] = json!({ "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": format!("back-off 5m0s restarting failed container={name} pod={pod_ref}"),
                } });
                s["lastState"] = json!({ "terminated": {
                    "exitCode": 1, "reason": "Error", "startedAt": time, "finishedAt": time,
                } });
            }
            _ if blocked => {
                s["ready"] = json!(false);
                s["started"] = json!(false);
                s["state"] = json!({ "waiting": { "reason": "PodInitializing" } });
            }
            _ if init => {
                s["state"] = json!({ "terminated": {
                    "exitCode": 0, "reason": "Completed", "startedAt": time, "finishedAt": time,
                } });
            }
            PodHealth::NotReady if fails => {
                s["ready"] = json!(false);
                s["state"] = json!({ "running": { "startedAt": time } });
            }
            _ => {
                s["state"] = json!({ "running": { "startedAt": time } });
            }
        }
        s
    };
    let init: Vec<Value> = list("initContainers").iter().map(|c| container(c, true, false)).collect();
    let blocked = init.iter().any(|s| s["ready"] == false);
    let main: Vec<Value> = list("containers").iter().map(|c| container(c, false, blocked)).collect();
    let unready: Vec<&str> = main.iter().filter(|s| s["ready"] == false).filter_map(|s| s["name"].as_str()).collect();
    let never_started = init
        .iter()
        .chain(&main)
        .any(|s| matches!(s["state"]["waiting"]["reason"].as_str(), Some("ImagePullBackOff" | "PodInitializing")));
    let condition = |kind: &str, ok: bool, reason: &str| {
        let mut c = json!({ "type": kind, "status": if ok { "True" } else { "False" }, "lastTransitionTime": time });
        if !ok {
            c["reason"] = json!(reason);
            c["message"] = json!(format!("containers with unready status: [{}]", unready.join(" ")));
        }
        c
    };
    let mut status = json!({
        "phase": if never_started { "Pending" } else { "Running" },
        "conditions": [
            { "type": "PodScheduled", "status": "True", "lastTransitionTime": time },
            { "type": "Initialized", "status": if blocked { "False" } else { "True" }, "lastTransitionTime": time },
            condition("ContainersReady", unready.is_empty(), "ContainersNotReady"),
            condition("Ready", unready.is_empty(), "ContainersNotReady"),
        ],
        "hostIP": "10.0.0.1",
        "startTime": time,
        "containerStatuses": main,
    });
    if !init.is_empty() {
        status["initContainerStatuses"] = json!(init);
    }
    status
}

/// The status the workload's controller writes, counted from its pods.
fn write_status(store: &mut Store, w: &Workload, progress: Progress) {
    let pods: Vec<Value> = owned_pods(store, w).into_iter().map(|(_, p)| p).collect();
    let total = pods.len() as i64;
    let updated = pods.iter().filter(|p| w.is_current(p)).count() as i64;
    let ready = pods.iter().filter(|p| is_ready(p)).count() as i64;
    let mut object = store.objects[&w.key].clone();
    let previous = object["status"].clone();
    let time = now();
    // Counts the API omits when zero (`omitempty`).
    let counts = |status: &mut Value, counts: &[(&str, i64)]| {
        for (field, n) in counts {
            if *n > 0 {
                status[*field] = json!(n);
            }
        }
    };
    let mut status = json!({ "observedGeneration": w.generation });
    match w.kind {
        "Deployment" => {
            let replica_set = format!("{}-{}", w.name, w.hash);
            counts(
                &mut status,
                &[
                    ("replicas", total),
                    ("updatedReplicas", updated),
                    ("readyReplicas", ready),
                    ("availableReplicas", ready),
                    ("unavailableReplicas", total.max(w.desired) - ready),
                ],
            );
            let available = ready >= w.desired - w.desired / 4;
            let (ok, reason, message) = match progress {
                Progress::Started if previous["conditions"].is_null() => {
                    (true, "NewReplicaSetCreated", format!("Created new replica set \"{replica_set}\""))
                }
                Progress::Started => {
                    (true, "ReplicaSetUpdated", format!("ReplicaSet \"{replica_set}\" is progressing."))
                }
                Progress::Complete => (
                    true,
                    "NewReplicaSetAvailable",
                    format!("ReplicaSet \"{replica_set}\" has successfully progressed."),
                ),
                Progress::DeadlineExceeded => (
                    false,
                    "ProgressDeadlineExceeded",
                    format!("ReplicaSet \"{replica_set}\" has timed out progressing."),
                ),
            };
            let truth = |b: bool| if b { "True" } else { "False" };
            status["conditions"] = json!([
                {
                    "type": "Available", "status": truth(available),
                    "reason": if available { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
                    "message": if available { "Deployment has minimum availability." } else { "Deployment does not have minimum availability." },
                    "lastUpdateTime": time, "lastTransitionTime": time,
                },
                {
                    "type": "Progressing", "status": truth(ok), "reason": reason, "message": message,
                    "lastUpdateTime": time, "lastTransitionTime": time,
                },
            ]);
        }
        "StatefulSet" => {
            let update_revision = w.revision().1;
            let current_revision = match previous["currentRevision"].as_str() {
                Some(current) if progress != Progress::Complete && total > updated => current.to_string(),
                _ => update_revision.clone(),
            };
            let current = pods
                .iter()
                .filter(|p| p["metadata"]["labels"]["controller-revision-hash"] == current_revision.as_str())
                .count() as i64;
            counts(
                &mut status,
                &[
                    ("replicas", total),
                    ("readyReplicas", ready),
                    ("currentReplicas", current),
                    ("updatedReplicas", updated),
                    ("availableReplicas", ready),
                ],
            );
            status["currentRevision"] = json!(current_revision);
            status["updateRevision"] = json!(update_revision);
            status["collisionCount"] = json!(0);
        }
        _ => {
            status["desiredNumberScheduled"] = json!(NODES);
            status["currentNumberScheduled"] = json!(total);
            status["numberMisscheduled"] = json!(0);
            status["numberReady"] = json!(ready);
            counts(
                &mut status,
                &[
                    ("updatedNumberScheduled", updated),
                    ("numberAvailable", ready),
                    ("numberUnavailable", NODES - ready),
                ],
            );
        }
    }
    object["status"] = status;
    store.write_update(&w.key, object, Some(ManagerId::update(CONTROLLER, "apps/v1", "status")));
}

/// Deletes the pods whose controlling workload is gone, as the garbage collector does.
fn collect_garbage(store: &mut Store) -> bool {
    let uids: BTreeSet<&str> = store.objects.values().filter_map(|o| o["metadata"]["uid"].as_str()).collect();
    let orphans: Vec<Key> = store
        .objects
        .iter()
        .filter(|(k, o)| {
            k.plural == "pods"
                && o["metadata"]["ownerReferences"].as_array().is_some_and(|refs| {
                    refs.iter().any(|r| {
                        r["controller"] == true
                            && ["Deployment", "StatefulSet", "DaemonSet"].iter().any(|kind| r["kind"] == *kind)
                            && r["uid"].as_str().is_some_and(|uid| !uids.contains(uid))
                    })
                })
        })
        .map(|(k, _)| k.clone())
        .collect();
    for key in &orphans {
        store.delete(key);
    }
    !orphans.is_empty()
}

impl KubeDouble {
    /// Roll-outs of a template with a container running exactly `image` fail this way (decided
    /// when the controller first sees a generation).
    pub fn fail_image(&self, image: &str, failure: Failure) {
        self.shared.store.lock().unwrap().controllers.failures.insert(image.to_string(), failure);
    }

    /// Stops every workload controller until [`Self::resume_rollouts`]: writes are taken, nothing
    /// is rolled out (the Job controller goes on).
    pub fn pause_rollouts(&self) {
        self.shared.store.lock().unwrap().controllers.paused = true;
        self.notify();
    }

    pub fn resume_rollouts(&self) {
        self.shared.store.lock().unwrap().controllers.paused = false;
        self.notify();
    }

    /// Stops the controller of one workload until [`Self::release_rollout`].
    pub fn hold_rollout(&self, kind: &str, namespace: &str, name: &str) {
        let key = workload_target(kind, namespace, name).key(name);
        self.shared.store.lock().unwrap().controllers.held.insert(key);
        self.notify();
    }

    pub fn release_rollout(&self, kind: &str, namespace: &str, name: &str) {
        let key = workload_target(kind, namespace, name).key(name);
        self.shared.store.lock().unwrap().controllers.held.remove(&key);
        self.notify();
    }

    /// Whether the controller has gone as far as it will with the workload's current generation
    /// and template: healthy, or stopped where its failure stops it.
    pub fn rollout_done(&self, kind: &str, namespace: &str, name: &str) -> bool {
        let key = workload_target(kind, namespace, name).key(name);
        let store = self.shared.store.lock().unwrap();
        let (Some(object), Some(rollout)) = (store.objects.get(&key), store.controllers.rollouts.get(&key)) else {
            return false;
        };
        rollout.phase == Phase::Done
            && object["metadata"]["generation"].as_i64() == Some(rollout.generation)
            && template_hash(&object["spec"]["template"]) == rollout.hash
    }

    /// Waits until the controllers have nothing left to do with what the store holds (the Job
    /// controller's writes included; a paused roll-out or a held workload counts as nothing to
    /// do).
    pub async fn settle(&self) {
        let mut idle = self.shared.idle.subscribe();
        let deadline = tokio::time::Instant::now() + super::super::PATIENCE;
        loop {
            let rv = self.writes();
            if *idle.borrow_and_update() >= rv {
                return;
            }
            if tokio::time::timeout_at(deadline, idle.changed()).await.is_err() {
                panic!("the controllers did not settle within {:?}", super::super::PATIENCE);
            }
        }
    }
}
