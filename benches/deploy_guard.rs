//! The override guard's benchmark (docs/performance.md, "Override guard"): `cargo bench --bench
//! deploy_guard`.
//!
//! In this process, no cluster: a SQLite ledger with `BENCH_ACTIONS` succeeded deploys (default
//! 10,000: ten changes of `BENCH_WORKLOADS` images, default 1,000, each deployed to its own
//! Deployment), then
//!
//! 1. the guard's start: its index rebuilt from the ledger (`runner::deploy::guard_index`);
//! 2. its work per workload event, as the watch hands it over: a Deployment's JSON (with its
//!    `managedFields`, as the API server sends it) decoded into the object the watcher yields,
//!    then the check (`Runner::overrides`' lookup), over every workload in turn, `BENCH_EVENTS`
//!    events (default 200,000); the check alone too;
//! 3. for comparison, what the guard did before per event: read the newest 1,000 actions from the
//!    ledger and find the image's newest deploy in them.
//!
//! CPU per event is the loop's time on one thread (nothing in it waits); "% of a core at 1,000
//! workloads, one event per second each" is that times 1,000 per second. Results go to
//! `$CARGO_TARGET_DIR/bench/deploy_guard.{md,json}` (`./target` without the variable).

use std::time::Instant;

use builder_monitor::ledger::{ActionEnd, ActionOutcome, Ledger, NewAction};
use builder_monitor_core::deploy::{
    ContainerWrite, DeployProgress, DeployTarget, Undo, Workload, WorkloadKind, WorkloadProgress, WorkloadState,
};
use builder_monitor_core::plan::ActionKind;
use kube::api::DynamicObject;
use serde_json::{Value, json};

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn say(what: impl std::fmt::Display) {
    eprintln!("[deploy_guard] {what}");
}

fn image(i: usize) -> String {
    format!("app-{i:05}")
}

fn reference(i: usize, change: usize) -> String {
    format!("registry.test/fleet/{}@sha256:{change:064x}", image(i))
}

fn workload(i: usize) -> Workload {
    Workload {
        kind: WorkloadKind::Deployment,
        namespace: "shop".into(),
        name: image(i),
        container: Some("app".into()),
        gitops_owned: Default::default(),
    }
}

fn deploy(change: usize, i: usize) -> NewAction {
    let change_id = format!("c{change}");
    let target = json!({
        "image": format!("registry.test/fleet/{}:latest", image(i)), "builder_name": "b",
        "builder": "registry.test/b@sha256:00", "run_image": null, "source": null, "why": "bench",
    });
    let mut target: builder_monitor_core::plan::ActionTarget = serde_json::from_value(target).expect("a target");
    target.plan = builder_monitor_core::plan::ActionPlan::Deploy(DeployTarget {
        digest: format!("sha256:{change:064x}"),
        reference: reference(i, change),
        workloads: vec![workload(i)],
        undo: Undo::WorkloadAndTag,
        tag_before: None,
    });
    NewAction::new(
        builder_monitor_core::deploy::action_key(&change_id, &image(i)),
        change_id,
        image(i),
        ActionKind::Deploy,
        target,
    )
}

fn progress(change: usize, i: usize) -> DeployProgress {
    DeployProgress {
        workloads: vec![WorkloadProgress {
            workload: workload(i),
            containers: vec![ContainerWrite {
                name: "app".into(),
                init: false,
                previous: reference(i, change.wrapping_sub(1)),
                image: reference(i, change),
            }],
            previous_change: None,
            state: WorkloadState::Healthy,
            detail: None,
            written_at: Some("2026-12-01T09:00:00Z".into()),
            failed_revision: None,
        }],
        started: true,
    }
}

/// A Deployment as a watch event carries it: spec, status and the managed fields of kubectl and
/// the deploy.
fn deployment_json(i: usize, running: &str) -> String {
    let name = image(i);
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": name, "namespace": "shop", "uid": format!("00000000-0000-0000-0000-{i:012}"),
            "resourceVersion": "123456", "generation": 7, "creationTimestamp": "2026-12-01T09:00:00Z",
            "labels": { "app": name },
            "annotations": { "deployment.kubernetes.io/revision": "7" },
            "managedFields": [
                { "manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "apps/v1",
                  "time": "2026-12-01T09:00:00Z", "fieldsType": "FieldsV1",
                  "fieldsV1": { "f:spec": { "f:replicas": {}, "f:selector": {}, "f:template": { "f:spec": {
                      "f:containers": { "k:{\"name\":\"app\"}": { ".": {}, "f:name": {}, "f:ports": {} },
                                        "k:{\"name\":\"sidecar\"}": { ".": {}, "f:image": {}, "f:name": {} } } } } } } },
                { "manager": "builder-monitor", "operation": "Apply", "apiVersion": "apps/v1",
                  "time": "2026-12-01T09:00:00Z", "fieldsType": "FieldsV1",
                  "fieldsV1": { "f:spec": { "f:template": { "f:metadata": { "f:annotations": {
                      "f:buildermonitor.dev/change": {} } }, "f:spec": { "f:containers": {
                      "k:{\"name\":\"app\"}": { ".": {}, "f:image": {}, "f:name": {} } } } } } } },
            ],
        },
        "spec": {
            "replicas": 2, "selector": { "matchLabels": { "app": name } }, "progressDeadlineSeconds": 600,
            "strategy": { "type": "RollingUpdate", "rollingUpdate": { "maxSurge": "25%", "maxUnavailable": "25%" } },
            "template": {
                "metadata": { "labels": { "app": name }, "annotations": { "buildermonitor.dev/change": "c9" } },
                "spec": { "containers": [
                    { "name": "app", "image": running, "imagePullPolicy": "IfNotPresent", "resources": {},
                      "ports": [{ "containerPort": 8080, "protocol": "TCP" }],
                      "env": [{ "name": "CONTAINER", "value": "app" }] },
                    { "name": "sidecar", "image": "registry.example/proxy:1", "imagePullPolicy": "IfNotPresent",
                      "resources": {}, "env": [{ "name": "CONTAINER", "value": "sidecar" }] },
                ], "restartPolicy": "Always", "terminationGracePeriodSeconds": 30 },
            },
        },
        "status": {
            "observedGeneration": 7, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2,
            "conditions": [
                { "type": "Available", "status": "True", "reason": "MinimumReplicasAvailable" },
                { "type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable" },
            ],
        },
    })
    .to_string()
}

/// The ledger: `changes` changes, each a succeeded deploy of every one of `n` images.
async fn seed(ledger: &Ledger, changes: usize, n: usize) {
    let now = chrono::Utc::now();
    for change in 0..changes {
        ledger.record_actions((0..n).map(|i| deploy(change, i)).collect(), now).await.expect("record");
        let claimed = ledger.claim_actions(now, n).await.expect("claim");
        for action in claimed {
            let i: usize = action.image.trim_start_matches("app-").parse().expect("an index");
            let value = builder_monitor_core::progress::Progress::Deploy(progress(change, i));
            ledger.record_progress(&action.key, value).await.expect("progress");
            let end = ActionEnd {
                key: &action.key,
                outcome: ActionOutcome::Succeeded,
                detail: "deployed".into(),
                output_tail: String::new(),
                watch: "b",
                events: vec![],
                deliveries: vec![],
                history: 10,
                now,
                tag_move: None,
                hold: None,
                keep_intent: false,
                follow: vec![],
                hold_image: false,
            };
            ledger.finish_action(end).await.expect("finish");
        }
        say(format!("change {} of {changes} recorded", change + 1));
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let n = env_number("BENCH_WORKLOADS", 1000);
    let actions = env_number("BENCH_ACTIONS", 10_000);
    let events = env_number("BENCH_EVENTS", 200_000);
    let changes = actions.div_ceil(n).max(1);
    let dir = tempfile::tempdir().expect("a directory");
    let ledger = Ledger::open(&dir.path().join("state.db")).expect("a ledger");
    say(format!("seeding {} succeeded deploys ({changes} changes of {n} images)", changes * n));
    let seeding = Instant::now();
    seed(&ledger, changes, n).await;
    let seed_seconds = seeding.elapsed().as_secs_f64();

    // 1. The guard's start.
    let at = Instant::now();
    let latest = ledger.latest_actions(ActionKind::Deploy).await.expect("latest");
    let index = builder_monitor::runner::deploy::guard_index(latest);
    let rebuild_seconds = at.elapsed().as_secs_f64();
    assert_eq!(index.len(), n, "every workload guarded");
    let index = std::sync::Mutex::new(index);

    // 2. Per event: every workload in turn, running what the newest deploy wrote (the common
    // case: a status update), and one in a hundred someone else's image (found, not held here).
    let last = changes - 1;
    let texts: Vec<String> = (0..n)
        .map(|i| deployment_json(i, &if i % 100 == 0 { format!("{}:hotfix", image(i)) } else { reference(i, last) }))
        .collect();
    let objects: Vec<DynamicObject> = texts.iter().map(|t| serde_json::from_str(t).expect("an object")).collect();
    let mut found = 0usize;
    let at = Instant::now();
    for e in 0..events {
        let i = e % n;
        let object: DynamicObject = serde_json::from_str(&texts[i]).expect("an object");
        let guarded = index.lock().unwrap();
        found += guarded.check(WorkloadKind::Deployment, "shop", &image(i), &object.data).len();
    }
    let decode_and_check = at.elapsed().as_secs_f64() / events as f64;
    assert_eq!(found, events.div_ceil(100).max(1).min(events), "one in a hundred is someone else's");
    let at = Instant::now();
    let mut found = 0usize;
    for e in 0..events {
        let i = e % n;
        let guarded = index.lock().unwrap();
        found += guarded.check(WorkloadKind::Deployment, "shop", &image(i), &objects[i].data).len();
    }
    let check_only = at.elapsed().as_secs_f64() / events as f64;
    assert!(found > 0);

    // 3. Before: the newest 1,000 actions read per event (fewer events: each costs milliseconds).
    let before_events = (events / 1000).clamp(50, 500);
    let at = Instant::now();
    for e in 0..before_events {
        let name = image(e % n);
        let actions = ledger.actions(1000).await.expect("actions");
        let newest = actions.iter().filter(|a| a.image == name && a.action == "deploy").max_by_key(|a| a.created);
        if let Some(p) = newest.and_then(|a| a.progress.as_ref()) {
            let _: Option<&DeployProgress> = p.deploy();
        }
    }
    let before = at.elapsed().as_secs_f64() / before_events as f64;

    let core = |per_event: f64| per_event * 1000.0 * 100.0;
    let report = json!({
        "workloads": n, "actions": changes * n, "events": events, "seed_seconds": seed_seconds,
        "event_bytes": texts[0].len(),
        "rebuild_seconds": rebuild_seconds,
        "decode_and_check_microseconds": decode_and_check * 1e6, "check_only_microseconds": check_only * 1e6,
        "before_microseconds": before * 1e6, "before_events": before_events,
        "core_percent_at_1000_per_second": core(decode_and_check),
        "before_core_percent_at_1000_per_second": core(before),
    });
    let md = format!(
        "| | per event | a core at 1,000 workloads, 1 event/s each |\n|---|---|---|\n\
         | decode + check (now) | {:.1} µs | {:.2} % |\n| check alone (now) | {:.2} µs | {:.3} % |\n\
         | before: newest 1,000 actions read | {:.0} µs | {:.0} % |\n\n\
         {} workloads, {} succeeded deploys in the ledger, {} events of {} bytes; index rebuilt at start in \
         {:.1} ms.\n",
        decode_and_check * 1e6,
        core(decode_and_check),
        check_only * 1e6,
        core(check_only),
        before * 1e6,
        core(before),
        n,
        changes * n,
        events,
        texts[0].len(),
        rebuild_seconds * 1e3,
    );
    println!("{md}");
    let out =
        std::path::PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into())).join("bench");
    std::fs::create_dir_all(&out).expect("the bench directory");
    std::fs::write(out.join("deploy_guard.md"), &md).expect("the report");
    std::fs::write(out.join("deploy_guard.json"), serde_json::to_string_pretty(&report).unwrap()).expect("the report");
    let _: Value = report;
}
