//! Deploy actions on both ledgers: each image's newest deploy, with its progress, target and
//! hold, read back for `status` however many other actions came after it.

use super::*;
use builder_monitor::ledger::ImageHold;

/// A deploy of `digest` recorded by hand under change `change`.
fn deploy(change: &str, image: &str, digest: &str) -> NewAction {
    let target = json!({
        "image": format!("r/{image}:latest"), "builder_name": "b", "builder": "r/b:latest", "run_image": null,
        "source": null, "why": "by hand",
        "deploy": { "digest": digest, "reference": format!("r/{image}@{digest}"), "undo": "workload",
                    "workloads": [{ "kind": "Deployment", "namespace": "shop", "name": image }] },
    });
    NewAction::new(
        builder_monitor_core::deploy::action_key(change, image),
        change.into(),
        image.into(),
        ActionKind::Deploy,
        serde_json::from_value(target).unwrap(),
    )
}

fn ended<'a>(key: &'a str, outcome: ActionOutcome, hold_image: bool, now: &str) -> ActionEnd<'a> {
    ActionEnd {
        key,
        outcome,
        detail: "Deployment shop/orders: ProgressDeadlineExceeded".into(),
        output_tail: String::new(),
        watch: "b",
        events: vec![],
        deliveries: vec![],
        history: 10,
        now: at(now),
        tag_move: None,
        hold: None,
        keep_intent: false,
        follow: vec![],
        hold_image,
    }
}

#[tokio::test]
async fn each_images_newest_deploy_is_read_with_its_progress_and_hold() {
    both(|ledger| async move {
        let far = at("2099-01-01T00:00:00Z");
        // A deploy by hand lives with its builder's entry (on Kubernetes), which a check made.
        ledger.commit(record("b", "2026-12-01T08:00:00Z")).await.unwrap();
        let (a, b, c) = ("sha256:aaaa", "sha256:bbbb", "sha256:cccc");
        ledger.record_actions(vec![deploy("m1", "petclinic", a)], at("2026-12-01T09:00:00Z")).await.unwrap();
        let claimed = ledger.claim_actions_of(far, 1, ActionKind::Deploy, &Default::default()).await.unwrap();
        assert_eq!(claimed.len(), 1);
        let progress = json!({ "workloads": [{ "kind": "Deployment", "namespace": "shop", "name": "petclinic",
            "state": "healthy", "containers": [{ "name": "app", "previous": "r/petclinic:old", "image": format!("r/petclinic@{a}") }] }] });
        let typed = Progress::read(ActionKind::Deploy, progress.clone()).unwrap();
        assert!(ledger.record_progress(&claimed[0].key, typed).await.unwrap());
        let done = ledger.finish_action(ended(&claimed[0].key, ActionOutcome::Succeeded, false, "2026-12-01T09:01:00Z"));
        assert_eq!(done.await.unwrap(), Some(ActionState::Succeeded));

        // A second image's deploy fails and holds it; a newer one of the first image is pending.
        ledger.record_actions(vec![deploy("m2", "orders", b)], at("2026-12-01T09:02:00Z")).await.unwrap();
        let claimed = ledger.claim_actions_of(far, 1, ActionKind::Deploy, &Default::default()).await.unwrap();
        let failed = ledger.finish_action(ended(&claimed[0].key, ActionOutcome::Failed, true, "2026-12-01T09:03:00Z"));
        assert_eq!(failed.await.unwrap(), Some(ActionState::Failed));
        ledger.record_actions(vec![deploy("m3", "petclinic", c)], at("2026-12-01T09:04:00Z")).await.unwrap();
        // A rebuild recorded later is of another kind: not among the deploys (it supersedes m3).
        ledger.record_actions(vec![action("m4", "petclinic")], at("2026-12-01T09:05:00Z")).await.unwrap();

        let latest = ledger.latest_actions(ActionKind::Deploy).await.unwrap();
        let shown: Vec<(&str, &str, ActionState, bool)> =
            latest.iter().map(|l| (l.record.image.as_str(), l.record.change.as_str(), l.record.state, l.record.holds)).collect();
        assert_eq!(
            shown,
            vec![("orders", "m2", ActionState::Failed, true), ("petclinic", "m3", ActionState::Superseded, false)],
            "the newest per image, by image"
        );
        let digest = |i: usize| latest[i].target.as_ref().and_then(|t| t.plan.deploy()).map(|d| d.digest.clone());
        assert_eq!((digest(0).as_deref(), digest(1).as_deref()), (Some(b), Some(c)));
        assert_eq!(latest[0].record.detail.as_deref(), Some("Deployment shop/orders: ProgressDeadlineExceeded"));

        // m4's rebuild superseded m3's deploy, which had not started; each kind has its own newest.
        // The progress m1 recorded reads back as written.
        let rebuilds = ledger.latest_actions(ActionKind::Rebuild).await.unwrap();
        assert_eq!(rebuilds.len(), 1);
        assert_eq!(rebuilds[0].record.change, "m4");
        let all = ledger.actions(10).await.unwrap();
        let first = all.iter().find(|r| r.change == "m1").unwrap();
        assert_eq!(first.progress.as_ref().map(Progress::to_value), Some(progress));
        assert!(ledger.latest_actions(ActionKind::Rebase).await.unwrap().is_empty());
    })
    .await;
}

/// A deploy found overridden holds its image from then on, and the newest deploy says so.
#[tokio::test]
async fn an_overridden_deploy_reads_back_as_holding_its_image() {
    both(|ledger| async move {
        let far = at("2099-01-01T00:00:00Z");
        // A deploy by hand lives with its builder's entry (on Kubernetes), which a check made.
        ledger.commit(record("b", "2026-12-01T08:00:00Z")).await.unwrap();
        ledger
            .record_actions(vec![deploy("m1", "petclinic", "sha256:aaaa")], at("2026-12-01T09:00:00Z"))
            .await
            .unwrap();
        let claimed = ledger.claim_actions_of(far, 1, ActionKind::Deploy, &Default::default()).await.unwrap();
        let done =
            ledger.finish_action(ended(&claimed[0].key, ActionOutcome::Succeeded, false, "2026-12-01T09:01:00Z"));
        done.await.unwrap();
        let hold = ImageHold {
            key: &claimed[0].key,
            detail: "held: workload shop/petclinic changed by someone else".into(),
            watch: "b",
            events: vec![],
            deliveries: vec![],
            history: 10,
            now: at("2026-12-01T10:00:00Z"),
        };
        assert!(ledger.hold_image(hold).await.unwrap());
        let latest = ledger.latest_actions(ActionKind::Deploy).await.unwrap();
        assert_eq!(latest.len(), 1);
        let r = &latest[0].record;
        assert!(r.holds && !r.released);
        assert_eq!(r.detail.as_deref(), Some("held: workload shop/petclinic changed by someone else"));
    })
    .await;
}
