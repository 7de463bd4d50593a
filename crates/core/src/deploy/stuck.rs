//! A StatefulSet's forced rollback: with `OrderedReady` its controller does not replace a pod that
//! is not Ready, so a pod made on the revision an undo put away (one that cannot pull its image,
//! say) stays broken until someone deletes it. These verdicts pick exactly those pods: owned by
//! the StatefulSet (its controller owner reference, by uid), labelled with the failed revision, not
//! Ready and not already being deleted, once the controller has seen the put-back template.

use serde_json::Value;

use super::int;

/// The label a StatefulSet's controller puts on each pod: the revision the pod was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// A pod to delete: its name, and its uid (the delete's precondition, so a pod made again under
/// the same name is never the one deleted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckPod {
    pub name: String,
    pub uid: String,
}

/// The revision a StatefulSet is rolling out and has not finished (`status.updateRevision` while
/// it differs from `currentRevision`), once its controller has seen the current template; `None`
/// when no roll-out is under way or the status is stale.
pub fn rolling_revision(set: &Value) -> Option<String> {
    let generation = int(set, "/metadata/generation").unwrap_or(0);
    let observed = int(set, "/status/observedGeneration").unwrap_or(0);
    let update = set.pointer("/status/updateRevision").and_then(Value::as_str)?;
    let current = set.pointer("/status/currentRevision").and_then(Value::as_str);
    (observed >= generation && Some(update) != current).then(|| update.to_string())
}

/// Whether the controller has seen the StatefulSet's current template and moved off `failed`: only
/// then does a pod deleted from `failed` come back on another revision.
pub fn moved_off(set: &Value, failed: &str) -> bool {
    let generation = int(set, "/metadata/generation").unwrap_or(0);
    let observed = int(set, "/status/observedGeneration").unwrap_or(0);
    let update = set.pointer("/status/updateRevision").and_then(Value::as_str);
    observed >= generation && update.is_some_and(|u| u != failed)
}

/// The pods of `set` among `pods` made from revision `failed` that are not Ready (and not already
/// going): what the controller will not replace by itself.
pub fn stuck_pods(set: &Value, failed: &str, pods: &[Value]) -> Vec<StuckPod> {
    let Some(uid) = set.pointer("/metadata/uid").and_then(Value::as_str) else { return Vec::new() };
    pods.iter()
        .filter(|p| owned_by(p, uid))
        .filter(|p| {
            p.pointer("/metadata/labels").and_then(|l| l.get(REVISION_LABEL)).and_then(Value::as_str) == Some(failed)
        })
        .filter(|p| p.pointer("/metadata/deletionTimestamp").is_none_or(Value::is_null))
        .filter(|p| !ready(p))
        .filter_map(|p| {
            Some(StuckPod {
                name: p.pointer("/metadata/name")?.as_str()?.to_string(),
                uid: p.pointer("/metadata/uid")?.as_str()?.to_string(),
            })
        })
        .collect()
}

/// Whether the pod's controller owner reference is the object with `uid`.
fn owned_by(pod: &Value, uid: &str) -> bool {
    let owners = pod.pointer("/metadata/ownerReferences").and_then(Value::as_array);
    owners.into_iter().flatten().any(|o| o["controller"] == true && o["uid"] == uid)
}

fn ready(pod: &Value) -> bool {
    let conditions = pod.pointer("/status/conditions").and_then(Value::as_array);
    conditions.into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(generation: i64, observed: i64, current: &str, update: &str) -> Value {
        json!({
            "metadata": {"name": "db", "uid": "set-uid", "generation": generation},
            "status": {"observedGeneration": observed, "currentRevision": current, "updateRevision": update},
        })
    }

    fn pod(name: &str, owner: &str, revision: &str, ready: bool) -> Value {
        json!({
            "metadata": {
                "name": name, "uid": format!("{name}-uid"),
                "labels": {"app": "db", REVISION_LABEL: revision},
                "ownerReferences": [{"kind": "StatefulSet", "name": "db", "uid": owner, "controller": true}],
            },
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        })
    }

    #[test]
    fn the_rolling_revision_is_known_only_while_a_seen_roll_out_is_unfinished() {
        assert_eq!(rolling_revision(&set(2, 2, "db-old", "db-new")).as_deref(), Some("db-new"));
        assert_eq!(rolling_revision(&set(2, 2, "db-old", "db-old")), None, "nothing rolling");
        assert_eq!(rolling_revision(&set(3, 2, "db-old", "db-new")), None, "a stale status");
    }

    #[test]
    fn the_controller_has_moved_off_only_once_it_saw_the_put_back_template() {
        assert!(!moved_off(&set(3, 2, "db-old", "db-new"), "db-new"));
        assert!(!moved_off(&set(3, 3, "db-old", "db-new"), "db-new"));
        assert!(moved_off(&set(3, 3, "db-old", "db-old"), "db-new"));
    }

    #[test]
    fn only_this_sets_pods_of_the_failed_revision_that_are_not_ready_are_stuck() {
        let s = set(3, 3, "db-old", "db-old");
        let mut going = pod("db-2", "set-uid", "db-new", false);
        going["metadata"]["deletionTimestamp"] = json!("2026-12-07T16:00:00Z");
        let pods = [
            pod("db-0", "set-uid", "db-old", false),
            pod("db-1", "set-uid", "db-new", false),
            pod("db-3", "set-uid", "db-new", true),
            pod("other-1", "other-uid", "db-new", false),
            going,
        ];
        assert_eq!(stuck_pods(&s, "db-new", &pods), vec![StuckPod { name: "db-1".into(), uid: "db-1-uid".into() }]);
        let mut not_controller = pod("db-4", "set-uid", "db-new", false);
        not_controller["metadata"]["ownerReferences"][0]["controller"] = json!(false);
        assert!(stuck_pods(&s, "db-new", &[not_controller]).is_empty());
    }
}
