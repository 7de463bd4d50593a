//! Writes `tests/fixtures/ledger-0.1.0.*` with the ledger code of the day (run by hand, ignored):
//! one action of every kind in several states, with progress, on both ledgers, and what was written.
//! Run: `BM_LEDGER_FIXTURE_DIR=tests/fixtures cargo test --test ledger write_ledger_fixture -- --ignored`.

use super::*;
use builder_monitor::ledger::{ActionRecord, LatestAction};
use builder_monitor_core::deploy::{
    ContainerWrite, DeployProgress, DeployTarget, Undo, Workload, WorkloadKind, WorkloadProgress, WorkloadState,
};
use builder_monitor_core::plan::{ActionTarget, GitopsPlan, Source};
use builder_monitor_core::pool::BuildProgress;
use serde_json::Value;

fn target(image: &str) -> ActionTarget {
    let mut t: ActionTarget = serde_json::from_value(json!({
        "image": format!("registry.example.com/apps/{image}:latest"), "builder_name": "jammy",
        "builder": "docker.io/paketobuildpacks/builder-jammy-base@sha256:1111111111111111111111111111111111111111111111111111111111111111",
        "run_image": "docker.io/paketobuildpacks/run-jammy-base@sha256:2222222222222222222222222222222222222222222222222222222222222222",
        "source": null, "why": format!("rebuild {image}: the builder moved") })).unwrap();
    t.source =
        Some(Source { git: format!("https://git.example.com/{image}"), revision: "main".into(), sub_path: None });
    t.env = [("BP_JVM_VERSION".to_string(), "21".to_string())].into();
    t.user_id = Some(1000);
    t.group_id = Some(1000);
    t.platform_apis = vec!["0.12".into(), "0.13".into()];
    t.stack_id = Some("io.buildpacks.stacks.jammy".into());
    t.app_reference = Some(format!("registry.example.com/apps/{image}@sha256:{}", "3".repeat(64)));
    t.reasons = vec!["BUILDPACK".into()];
    t.scheduling.node_selector = [("kubernetes.io/arch".to_string(), "amd64".to_string())].into();
    t
}

fn new(change: &str, image: &str, kind: ActionKind, target: ActionTarget) -> NewAction {
    NewAction::new(builder_monitor::reaction::action_key(change, image), change.into(), image.into(), kind, target)
}

fn workload(name: &str) -> Workload {
    serde_json::from_value(json!({ "kind": "Deployment", "namespace": "shop", "name": name, "container": "app" }))
        .unwrap()
}

fn deploy_target(image: &str, tag_before: Option<&str>, undo: Undo) -> ActionTarget {
    let mut t = target(image);
    let digest = format!("sha256:{}", "4".repeat(64));
    t.why = format!("deploy of {digest}");
    t.deploy = Some(DeployTarget {
        reference: format!("registry.example.com/apps/{image}@{digest}"),
        digest,
        workloads: vec![workload(image), Workload { kind: WorkloadKind::StatefulSet, ..workload("cache") }],
        undo,
        tag_before: tag_before.map(str::to_string),
    });
    t
}

fn gitops_target(name: &str) -> ActionTarget {
    let mut t = target("fleet");
    t.image = "https://git.example.com/fleet.git".into();
    t.source = None;
    t.run_image = None;
    t.env.clear();
    t.why = format!("commit change c1 to {name}");
    t.gitops =
        Some(GitopsPlan { target: name.into(), summary: "jammy: paketo-buildpacks/java 18.1.0 → 18.2.0".into() });
    t
}

fn end<'a>(key: &'a str, outcome: ActionOutcome, now: &str, follow: Vec<NewAction>, hold_image: bool) -> ActionEnd<'a> {
    ActionEnd {
        key,
        outcome,
        detail: format!("ended at {now}"),
        output_tail: "the last lines".into(),
        watch: "jammy",
        events: vec![],
        deliveries: vec![],
        history: 10,
        now: at(now),
        tag_move: None,
        hold: None,
        keep_intent: false,
        follow,
        hold_image,
    }
}

async fn claim_one(ledger: &Ledger, now: &str, key: &str) {
    let claimed = ledger.claim_actions(at(now), 10).await.unwrap();
    assert_eq!(claimed.iter().map(|c| c.key.as_str()).collect::<Vec<_>>(), [key], "claimed at {now}");
}

/// Fills `ledger`; answers each action's key with the target and progress it was given.
async fn fill(ledger: &Ledger) -> BTreeMap<String, (Value, Option<Value>)> {
    let mut written = BTreeMap::new();
    fn note(written: &mut BTreeMap<String, (Value, Option<Value>)>, a: &NewAction) {
        written.insert(a.key.clone(), (serde_json::to_value(&a.target).unwrap(), None));
    }
    // c0: a rebuild of `shop`, superseded by c1's rebase of it.
    let mut r = record("jammy", "2026-11-30T12:00:00Z");
    r.change = Some(change("jammy", 1, "sha256:a", "sha256:b"));
    r.actions = vec![new("c0", "shop", ActionKind::Rebuild, target("shop"))];
    r.actions.iter().for_each(|a| note(&mut written, a));
    ledger.commit(r).await.unwrap();
    // c1: rebuilds of `petclinic` and `api` (wave 1) and of `worker` (wave 1, fails once), a rebase
    // of `shop` waiting for approval (wave 2).
    let mut r = record("jammy", "2026-11-30T12:10:00Z");
    r.change = Some(change("jammy", 2, "sha256:b", "sha256:c"));
    let mut rebase = target("shop");
    rebase.source = None;
    r.actions = vec![
        new("c1", "petclinic", ActionKind::Rebuild, target("petclinic")),
        new("c1", "api", ActionKind::Rebuild, target("api")),
        new("c1", "shop", ActionKind::Rebase, rebase).gated(2, true),
    ];
    r.actions.iter().for_each(|a| note(&mut written, a));
    ledger.commit(r).await.unwrap();
    let claimed = ledger.claim_actions(at("2026-11-30T12:11:00Z"), 10).await.unwrap();
    assert_eq!(claimed.len(), 2);
    let key = |change: &str, image: &str| builder_monitor::reaction::action_key(change, image);
    let (petclinic, api) = (key("c1", "petclinic"), key("c1", "api"));
    // Builds placed in pools: petclinic by its platform, api queued by Kueue (left running).
    let placed = |pool: &str, queued: bool, platform: Option<&str>| {
        serde_json::to_value(BuildProgress { pool: pool.into(), queued, platform: platform.map(str::to_string) })
            .unwrap()
    };
    for (k, progress) in [(&petclinic, placed("linux", false, Some("linux/amd64"))), (&api, placed("arm", true, None))]
    {
        assert!(ledger.record_progress(k, progress.clone()).await.unwrap());
        written.get_mut(k.as_str()).unwrap().1 = Some(progress);
    }
    // petclinic succeeds: its deploy follows, runs, writes, and fails (holding its image).
    let deploy = NewAction {
        key: builder_monitor_core::deploy::action_key("c1", "petclinic"),
        ..new(
            "c1",
            "petclinic",
            ActionKind::Deploy,
            deploy_target("petclinic", Some("sha256:before"), Undo::WorkloadAndTag),
        )
    };
    note(&mut written, &deploy);
    let deploy_key = deploy.key.clone();
    let ended = ledger
        .finish_action(end(&petclinic, ActionOutcome::Succeeded, "2026-11-30T12:20:00Z", vec![deploy], false))
        .await
        .unwrap();
    assert_eq!(ended, Some(ActionState::Succeeded));
    claim_one(ledger, "2026-11-30T12:21:00Z", &deploy_key).await;
    let progress = DeployProgress {
        workloads: vec![
            WorkloadProgress {
                workload: workload("petclinic"),
                containers: vec![ContainerWrite {
                    name: "app".into(),
                    init: false,
                    previous: "registry.example.com/apps/petclinic@sha256:before".into(),
                    image: format!("registry.example.com/apps/petclinic@sha256:{}", "4".repeat(64)),
                }],
                previous_change: Some("c0".into()),
                state: WorkloadState::Failed,
                detail: Some("ImagePullBackOff".into()),
                written_at: Some("2026-11-30T12:21:30Z".into()),
            },
            WorkloadProgress {
                workload: Workload { kind: WorkloadKind::StatefulSet, ..workload("cache") },
                containers: vec![],
                previous_change: None,
                state: WorkloadState::Skipped,
                detail: Some("owned by Argo CD".into()),
                written_at: None,
            },
        ],
        started: true,
    };
    let progress = serde_json::to_value(progress).unwrap();
    assert!(ledger.record_progress(&deploy_key, progress.clone()).await.unwrap());
    written.get_mut(&deploy_key).unwrap().1 = Some(progress);
    ledger.finish_action(end(&deploy_key, ActionOutcome::Failed, "2026-11-30T12:30:00Z", vec![], true)).await.unwrap();
    // A gitops action of its own change: committed, pushed, succeeded.
    let gitops = new("pin-1", "gitops:fleet", ActionKind::Gitops, gitops_target("fleet"));
    note(&mut written, &gitops);
    let gitops_key = gitops.key.clone();
    ledger.record_actions(vec![gitops], at("2026-11-30T12:31:00Z")).await.unwrap();
    claim_one(ledger, "2026-11-30T12:32:00Z", &gitops_key).await;
    let commit = json!({
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "base": "89abcdef0123456789abcdef0123456789abcdef",
        "branch": "main",
        "files": ["apps/petclinic.yaml", "builder.txt"],
        "written": { "apps/petclinic.yaml#petclinic": format!("sha256:{}", "4".repeat(64)) },
    });
    assert!(ledger.record_progress(&gitops_key, commit.clone()).await.unwrap());
    written.get_mut(&gitops_key).unwrap().1 = Some(commit);
    ledger
        .finish_action(end(&gitops_key, ActionOutcome::Succeeded, "2026-11-30T12:33:00Z", vec![], false))
        .await
        .unwrap();
    // A deploy by hand of `web`, pending; a second gitops target's action, pending.
    let by_hand = new("manual-1", "web", ActionKind::Deploy, deploy_target("web", None, Undo::Workload));
    let by_hand = NewAction { key: builder_monitor_core::deploy::action_key("manual-1", "web"), ..by_hand };
    let other = new("pin-1", "gitops:infra", ActionKind::Gitops, gitops_target("infra")).gated(3, false);
    note(&mut written, &by_hand);
    note(&mut written, &other);
    ledger.record_actions(vec![by_hand, other], at("2026-11-30T12:40:00Z")).await.unwrap();
    written
}

/// Every action as read back: its kind, image, state, target and progress.
pub(super) async fn read_back(ledger: &Ledger) -> Value {
    let records: Vec<ActionRecord> = ledger.actions(100).await.unwrap();
    let mut out = serde_json::Map::new();
    for kind in ActionKind::ALL {
        for LatestAction { record, target } in ledger.latest_actions(kind).await.unwrap() {
            let full = records.iter().find(|r| r.key == record.key).unwrap();
            assert_eq!(full, &record);
            out.insert(
                record.key.clone(),
                json!({
                    "kind": record.action, "image": record.image, "state": record.state, "wave": record.wave,
                    "holds": record.holds, "target": target, "progress": record.progress,
                }),
            );
        }
    }
    // The shop rebuild of c0 is not its image's newest rebuild... it is: one per (image, kind).
    assert_eq!(out.len(), records.len(), "every action is some image's newest of its kind");
    let running: Vec<Value> = ledger
        .running_actions()
        .await
        .unwrap()
        .into_iter()
        .map(|a| json!({ "key": a.key, "target": a.target.ok(), "progress": a.progress }))
        .collect();
    json!({ "actions": out, "running": running })
}

#[tokio::test]
#[ignore = "writes the fixture; run by hand"]
async fn write_ledger_fixture() {
    let dir = std::path::PathBuf::from(std::env::var("BM_LEDGER_FIXTURE_DIR").expect("BM_LEDGER_FIXTURE_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("ledger.db");
    let ledger = Ledger::open(&db).unwrap();
    let written = fill(&ledger).await;
    let sqlite = read_back(&ledger).await;
    for (key, (target, progress)) in &written {
        assert_eq!(&sqlite["actions"][key]["target"], target, "{key}");
        assert_eq!(&sqlite["actions"][key]["progress"], progress.as_ref().unwrap_or(&Value::Null), "{key}");
    }
    drop(ledger);
    let double = KubeDouble::start().await;
    double.create_namespace("bm");
    let kube = Ledger::kubernetes(double.client(), "bm", at("2026-11-30T11:00:00Z"));
    fill(&kube).await;
    assert_eq!(read_back(&kube).await, sqlite, "both ledgers read the same");
    let objects: Vec<Value> = double
        .list("configmaps")
        .into_iter()
        .map(|o| json!({ "metadata": { "name": o["metadata"]["name"], "labels": o["metadata"]["labels"] }, "data": o["data"] }))
        .collect();
    // Reopened (a checkpointed, closed file): what is copied is the whole ledger.
    let reopened = Ledger::open(&db).unwrap();
    assert_eq!(read_back(&reopened).await, sqlite);
    drop(reopened);
    std::fs::copy(&db, dir.join("ledger-0.1.0.db")).unwrap();
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap() + "\n";
    std::fs::write(dir.join("ledger-0.1.0.kube.json"), pretty(&Value::Array(objects))).unwrap();
    std::fs::write(dir.join("ledger-0.1.0.expected.json"), pretty(&sqlite)).unwrap();
}
