//! `batch/v1` Jobs: the part of the built-in Job controller a client sees without pods, and Kueue.
//!
//! The Job controller ([`step`], run with the workload controllers) keeps the status of every
//! Job it manages (`spec.managedBy` unset or `kubernetes.io/job-controller`) as it would:
//!
//! - while `spec.suspend` is true: the condition `Suspended` True (reason `JobSuspended`), no
//!   `startTime` and no `active` (the real controller deletes the pods);
//! - otherwise, once when the Job starts and again when it is resumed: `startTime` now (what
//!   `activeDeadlineSeconds` counts from), `active: 1` unless the status already says how many
//!   pods are active, and, after a suspension, the condition `Suspended` False (reason
//!   `JobResumed`).
//!
//! It merges these fields into the status it finds and never touches the others, writes nothing
//! when they are already so, and leaves a finished Job (condition `Complete` or `Failed` True)
//! alone: it never finishes a Job itself, a test does with [`KubeDouble::set_status`]. A Job
//! whose `spec.managedBy` names another controller (`kueue.x-k8s.io/multikueue`) gets no status
//! from it at all.
//!
//! Kueue ([`KubeDouble::enable_kueue`]): its mutating webhook sets `spec.suspend: true` on a Job
//! created with the label `kueue.x-k8s.io/queue-name`; [`KubeDouble::admit_job`] admits it as
//! Kueue does when its Workload fits a flavor: `spec.suspend: false` and the flavor's node labels
//! merged into the pod template's `nodeSelector`. No Workload, ClusterQueue, LocalQueue or
//! ResourceFlavor objects, no quota, no preemption (re-suspension), no flavor tolerations.

use serde_json::{Value, json};

use super::fields::ManagerId;
use super::{Key, KubeDouble, Store, now};

/// The label naming the LocalQueue a Job is submitted to.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// The `spec.managedBy` value of the built-in Job controller (the same as unset).
pub const JOB_CONTROLLER: &str = "kubernetes.io/job-controller";
/// The `spec.managedBy` value of a Job MultiKueue dispatches to a worker cluster.
pub const MULTIKUEUE: &str = "kueue.x-k8s.io/multikueue";

/// The field manager of the Job controller's status writes, as on a cluster.
const CONTROLLER: &str = "kube-controller-manager";
/// The field manager of Kueue's admission.
const KUEUE: &str = "kueue";

fn is_job(key: &Key) -> bool {
    key.group == "batch" && key.plural == "jobs"
}

/// What Kueue's mutating webhook does to an object being created (when Kueue is enabled).
pub(super) fn on_create(store: &Store, key: &Key, object: &mut Value) {
    if store.kueue && is_job(key) && object["metadata"]["labels"][QUEUE_LABEL].is_string() {
        object["spec"]["suspend"] = json!(true);
    }
}

/// One pass of the Job controller over every Job; whether anything was written.
pub(super) fn step(store: &mut Store) -> bool {
    let keys: Vec<Key> = store.objects.keys().filter(|k| is_job(k)).cloned().collect();
    let mut wrote = false;
    for key in &keys {
        wrote |= reconcile(store, key);
    }
    wrote
}

fn condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status["conditions"].as_array()?.iter().find(|c| c["type"] == kind)
}

fn finished(status: &Value) -> bool {
    ["Complete", "Failed"].iter().any(|kind| condition(status, kind).is_some_and(|c| c["status"] == "True"))
}

/// Sets the `Suspended` condition, in place when there is one.
fn set_suspended(status: &mut Value, suspended: bool, time: &str) {
    let (truth, reason, message) =
        if suspended { ("True", "JobSuspended", "Job suspended") } else { ("False", "JobResumed", "Job resumed") };
    let condition = json!({
        "type": "Suspended", "status": truth, "reason": reason, "message": message,
        "lastProbeTime": time, "lastTransitionTime": time,
    });
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let conditions = status["conditions"].as_array_mut().unwrap();
    match conditions.iter_mut().find(|c| c["type"] == "Suspended") {
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
}

fn reconcile(store: &mut Store, key: &Key) -> bool {
    let job = &store.objects[key];
    if job["spec"]["managedBy"].as_str().is_some_and(|m| m != JOB_CONTROLLER) {
        return false;
    }
    let mut status = if job["status"].is_object() { job["status"].clone() } else { json!({}) };
    if finished(&status) {
        return false;
    }
    let suspend = job["spec"]["suspend"] == true;
    let was_suspended = condition(&status, "Suspended").is_some_and(|c| c["status"] == "True");
    let fields = status.as_object_mut().unwrap();
    let time = now();
    if suspend {
        if was_suspended && !fields.contains_key("startTime") && !fields.contains_key("active") {
            return false;
        }
        fields.remove("startTime");
        fields.remove("active");
        set_suspended(&mut status, true, &time);
    } else {
        if !was_suspended && fields.contains_key("startTime") {
            return false;
        }
        fields.insert("startTime".into(), json!(time));
        fields.entry("active").or_insert(json!(1));
        if was_suspended {
            set_suspended(&mut status, false, &time);
        }
    }
    let mut job = job.clone();
    job["status"] = status;
    store.write_update(key, job, Some(ManagerId::update(CONTROLLER, "batch/v1", "status")));
    true
}

impl KubeDouble {
    /// Kueue is installed from now on: Jobs created afterwards with the label
    /// `kueue.x-k8s.io/queue-name` are stored suspended until [`Self::admit_job`].
    pub fn enable_kueue(&self) {
        self.shared.store.lock().unwrap().kueue = true;
    }

    /// Admits a suspended queued Job as Kueue does when its Workload gets a flavor: unsuspends it
    /// and merges the flavor's `node_labels` into `spec.template.spec.nodeSelector` (an update by
    /// the manager `kueue`; the Job controller then starts it).
    pub fn admit_job(&self, namespace: &str, name: &str, node_labels: &[(&str, &str)]) {
        let mut store = self.shared.store.lock().unwrap();
        let key = store
            .find("jobs", Some(namespace), name)
            .filter(is_job)
            .unwrap_or_else(|| panic!("no Job {namespace}/{name}"));
        let mut job = store.objects[&key].clone();
        assert!(job["metadata"]["labels"][QUEUE_LABEL].is_string(), "Job {namespace}/{name} names no queue");
        assert!(job["spec"]["suspend"] == true, "Job {namespace}/{name} is not suspended: nothing to admit");
        job["spec"]["suspend"] = json!(false);
        let selector = &mut job["spec"]["template"]["spec"]["nodeSelector"];
        if !selector.is_object() {
            *selector = json!({});
        }
        for (label, value) in node_labels {
            selector[*label] = json!(value);
        }
        store.write_update(&key, job, Some(ManagerId::update(KUEUE, "batch/v1", "")));
        drop(store);
        self.notify();
    }
}
