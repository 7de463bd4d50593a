//! Health verdicts per workload kind, admission refusals and the pods' trouble.

use super::*;

pub(super) fn object(generation: i64, replicas: i64, status: Value) -> Value {
    json!({"metadata": {"generation": generation}, "spec": {"replicas": replicas}, "status": status})
}

pub(super) fn progressing(health: Health) -> String {
    match health {
        Health::Progressing(why) => why,
        other => panic!("not progressing: {other:?}"),
    }
}

#[test]
fn deployment_health() {
    let d = WorkloadKind::Deployment;
    let done = json!({"observedGeneration": 4, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3});
    assert_eq!(health(d, &object(4, 3, done.clone())), Health::Healthy);
    assert_eq!(health(d, &object(4, 0, json!({"observedGeneration": 4}))), Health::Healthy, "scaled to zero");

    let surging = json!({"observedGeneration": 4, "replicas": 4, "updatedReplicas": 2, "availableReplicas": 3});
    assert_eq!(progressing(health(d, &object(4, 3, surging))), "2 of 3 replicas updated, 3 available, 4 in all");
    let old_pod_left = json!({"observedGeneration": 4, "replicas": 4, "updatedReplicas": 3, "availableReplicas": 3});
    assert!(matches!(health(d, &object(4, 3, old_pod_left)), Health::Progressing(_)));

    let deadline = json!({"observedGeneration": 4, "replicas": 3, "updatedReplicas": 1, "conditions": [
        {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
         "message": "ReplicaSet \"petclinic-7d9\" has timed out progressing."},
    ]});
    assert_eq!(
        health(d, &object(4, 3, deadline.clone())),
        Health::Failed("ProgressDeadlineExceeded: ReplicaSet \"petclinic-7d9\" has timed out progressing.".into())
    );

    let behind = json!({"observedGeneration": 3, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3});
    assert_eq!(progressing(health(d, &object(4, 3, behind))), "the controller has not seen generation 4 yet");
    // The previous roll-out's exceeded deadline does not fail the new one before the controller saw it.
    let mut stale = deadline;
    stale["observedGeneration"] = json!(3);
    assert_eq!(progressing(health(d, &object(4, 3, stale))), "the controller has not seen generation 4 yet");
}

/// A Deployment whose new ReplicaSet cannot create its pods, as the real controller shows it
/// (`Progressing` still true: the deadline is far).
fn refused(message: &str) -> Value {
    object(
        5,
        2,
        json!({"observedGeneration": 5, "replicas": 2, "updatedReplicas": 0, "availableReplicas": 2, "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
            {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
             "message": "ReplicaSet \"web-5d4\" is progressing."},
            {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": message},
        ]}),
    )
}

#[test]
fn a_deployment_whose_new_pods_admission_refuses_fails_at_once() {
    let d = WorkloadKind::Deployment;
    let pod_security = "pods \"web-5d4-x7k2p\" is forbidden: violates PodSecurity \"restricted:latest\": \
        allowPrivilegeEscalation != false (container \"app\" must set securityContext.allowPrivilegeEscalation=false)";
    assert_eq!(
        health(d, &refused(pod_security)),
        Health::Failed(format!("Pod Security refuses the new pods: ReplicaFailure (FailedCreate): {pod_security}"))
    );
    let terminating = "pods \"web-5d4-x7k2p\" is forbidden: unable to create new content in namespace shop \
        because it is being terminated";
    assert_eq!(
        health(d, &refused(terminating)),
        Health::Failed(format!("the new pods are refused: ReplicaFailure (FailedCreate): {terminating}"))
    );
    // The same on the ReplicaSet, where the controller writes it first.
    let replica_set = json!({"status": {"conditions": [
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": pod_security}]}});
    assert!(matches!(replica_failure(&replica_set), Some(Health::Failed(_))));

    // Refusals a later try may not meet are shown while the roll-out waits for its deadline.
    for passing in [
        "pods \"web-5d4-x7k2p\" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=2, limited: pods=2",
        "pods \"web-5d4-x7k2p\" is forbidden: error looking up service account shop/default: serviceaccount \"default\" not found",
        "Internal error occurred: resource quota evaluation timed out",
    ] {
        assert_eq!(progressing(health(d, &refused(passing))), format!("ReplicaFailure (FailedCreate): {passing}"));
    }
    // A failure condition that is not true, or a roll-out done, is no failure.
    let mut cleared = refused(pod_security);
    cleared["status"]["conditions"][2]["status"] = json!("False");
    assert_eq!(progressing(health(d, &cleared)), "0 of 2 replicas updated, 2 available, 2 in all");
    let mut done = refused(pod_security);
    done["status"]["updatedReplicas"] = json!(2);
    assert_eq!(health(d, &done), Health::Healthy);
    assert_eq!(replica_failure(&object(1, 1, json!({}))), None);
}

#[test]
fn statefulset_health() {
    let s = WorkloadKind::StatefulSet;
    let status = |current: &str, ready: i64| json!({"observedGeneration": 2, "readyReplicas": ready, "currentRevision": current, "updateRevision": "web-2"});
    assert_eq!(health(s, &object(2, 3, status("web-2", 3))), Health::Healthy);
    assert_eq!(
        progressing(health(s, &object(2, 3, status("web-1", 3)))),
        "revision web-1 of web-2 current, 3 of 3 ready"
    );
    assert!(matches!(health(s, &object(2, 3, status("web-2", 2))), Health::Progressing(_)));
    assert_eq!(
        progressing(health(s, &object(2, 3, json!({"observedGeneration": 2})))),
        "revision ? of ? current, 0 of 3 ready"
    );
    let mut behind = status("web-2", 3);
    behind["observedGeneration"] = json!(1);
    assert_eq!(progressing(health(s, &object(2, 3, behind))), "the controller has not seen generation 2 yet");

    // A partitioned roll-out is done when the pods from the partition up run the new revision.
    let mut partitioned = object(
        2,
        4,
        json!({"observedGeneration": 2, "readyReplicas": 4, "updatedReplicas": 1, "currentRevision": "web-1",
               "updateRevision": "web-2"}),
    );
    partitioned["spec"]["updateStrategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 3}});
    assert_eq!(health(s, &partitioned), Health::Healthy);
    partitioned["status"]["updatedReplicas"] = json!(0);
    assert_eq!(progressing(health(s, &partitioned)), "0 of 1 replicas from ordinal 3 updated, 4 of 4 ready");
}

#[test]
fn daemonset_health() {
    let ds = WorkloadKind::DaemonSet;
    let status = |updated: i64, available: i64| {
        json!({"metadata": {"generation": 7}, "status": {"observedGeneration": 7, "desiredNumberScheduled": 5,
               "updatedNumberScheduled": updated, "numberAvailable": available}})
    };
    assert_eq!(health(ds, &status(5, 5)), Health::Healthy);
    assert_eq!(progressing(health(ds, &status(3, 5))), "3 of 5 nodes updated, 5 available");
    assert_eq!(progressing(health(ds, &status(5, 4))), "5 of 5 nodes updated, 4 available");
    let mut behind = status(5, 5);
    behind["status"]["observedGeneration"] = json!(6);
    assert_eq!(progressing(health(ds, &behind)), "the controller has not seen generation 7 yet");
}

#[test]
fn a_cronjob_has_nothing_to_wait_for() {
    assert_eq!(health(WorkloadKind::CronJob, &json!({"metadata": {"generation": 9}})), Health::Healthy);
}

// ---- pods of the new template -----------------------------------------------------------------

fn pod(name: &str, change: Option<&str>, statuses: Value) -> Value {
    let annotations = match change {
        Some(change) => json!({CHANGE_ANNOTATION: change}),
        None => json!({}),
    };
    json!({"metadata": {"name": name, "annotations": annotations}, "status": statuses})
}

fn waiting(container: &str, reason: &str) -> Value {
    json!([{"name": container, "state": {"waiting": {"reason": reason, "message": format!("{reason} here")}}}])
}

#[test]
fn each_bad_waiting_reason_of_a_new_pod_is_trouble() {
    for reason in BAD_WAITING {
        let pods = [pod("web-1", Some("3f2a"), json!({"containerStatuses": waiting("app", reason)}))];
        let trouble = pod_trouble(&pods, "3f2a").unwrap_or_else(|| panic!("{reason}"));
        assert_eq!(
            trouble,
            PodTrouble {
                pod: "web-1".into(),
                container: "app".into(),
                reason: reason.into(),
                message: format!("{reason} here")
            }
        );
        assert_eq!(trouble.to_string(), format!("pod web-1 container app: {reason}: {reason} here"));
    }
    let init = [pod("web-1", Some("3f2a"), json!({"initContainerStatuses": waiting("migrate", "CrashLoopBackOff")}))];
    assert_eq!(pod_trouble(&init, "3f2a").unwrap().container, "migrate");
    let bare = PodTrouble { pod: "p".into(), container: "c".into(), reason: "ErrImagePull".into(), message: "".into() };
    assert_eq!(bare.to_string(), "pod p container c: ErrImagePull");
}

#[test]
fn only_pods_of_the_change_count_and_good_ones_are_no_trouble() {
    let crashing = json!({"containerStatuses": waiting("app", "CrashLoopBackOff")});
    let old = [pod("old-unmarked", None, crashing.clone()), pod("old-change", Some("1111"), crashing.clone())];
    assert_eq!(pod_trouble(&old, "3f2a"), None);

    let good = pod(
        "web-2",
        Some("3f2a"),
        json!({"containerStatuses": [
            {"name": "app", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
            {"name": "proxy", "state": {"waiting": {"reason": "ContainerCreating"}}},
        ]}),
    );
    assert_eq!(pod_trouble(std::slice::from_ref(&good), "3f2a"), None);
    assert_eq!(pod_trouble(&[pod("pending", Some("3f2a"), json!({}))], "3f2a"), None);

    let mixed = [good, pod("old", Some("1111"), crashing.clone()), pod("web-3", Some("3f2a"), crashing)];
    assert_eq!(pod_trouble(&mixed, "3f2a").unwrap().pod, "web-3");
}

// ---- selectors --------------------------------------------------------------------------------
