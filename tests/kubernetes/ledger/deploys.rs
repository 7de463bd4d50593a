//! Deploys on both ledgers: the deploy that follows a success is recorded in the same write (not
//! when a newer change has an action for the image), its progress is kept while it runs, a failed
//! one holds its image, the next wave waits for the lower waves' deploys to soak, and a skipped
//! deploy lets the next wave go.

use super::*;
use builder_monitor::ledger::{ImageHold, Kinds, Verdict};
use builder_monitor_core::rollout::Rollout;

fn deploy_of(change: &str, image: &str, wave: u32) -> NewAction {
    let mut a = action(change, image).gated(wave, false);
    a.key = builder_monitor_core::deploy::action_key(change, image);
    a.kind = ActionKind::Deploy;
    a
}

fn end<'a>(key: &'a str, outcome: ActionOutcome, now: &str, follow: Vec<NewAction>, hold_image: bool) -> ActionEnd<'a> {
    ActionEnd {
        key,
        outcome,
        detail: "done".into(),
        output_tail: String::new(),
        watch: "b",
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

fn state_of(actions: &[builder_monitor::ledger::ActionRecord], image: &str, kind: &str) -> ActionState {
    actions.iter().find(|a| a.image == image && a.action == kind).map(|a| a.state).unwrap()
}

#[tokio::test]
async fn deploys_follow_successes_keep_progress_hold_images_and_soak() {
    both(|ledger| async move {
        let soak = Rollout { soak: std::time::Duration::from_secs(600), ..Rollout::default() };
        let mut r = record("b", "2026-11-30T12:00:00Z");
        r.change = Some(change("b", 1, "sha256:a", "sha256:b"));
        r.actions = vec![action("c1", "canary").gated(0, false), action("c1", "web").gated(1, false)];
        ledger.commit(r).await.unwrap();
        let claim = |now: &str, kinds: Kinds| {
            let ledger = ledger.clone();
            let (now, soak) = (at(now), soak.clone());
            async move { ledger.claim_actions_of(now, 10, kinds, &soak).await.unwrap() }
        };
        let canary = claim("2026-11-30T12:01:00Z", Kinds::ALL).await;
        assert_eq!(canary.len(), 1);
        assert!(ledger.record_progress(&canary[0].key, Progress::Deploy(Default::default())).await.unwrap());

        // The rebuild succeeds: its deploy is recorded in the same write, in the same wave, so the
        // next wave still waits.
        let follow = vec![deploy_of("c1", "canary", 0)];
        let ended = ledger.finish_action(end(&canary[0].key, ActionOutcome::Succeeded, "2026-11-30T12:02:00Z", follow, false));
        assert_eq!(ended.await.unwrap(), Some(ActionState::Succeeded));
        let actions = ledger.change_actions("c1").await.unwrap();
        assert_eq!(state_of(&actions, "canary", "deploy"), ActionState::Pending);
        assert!(claim("2026-11-30T12:03:00Z", Kinds::from(ActionKind::Rebuild)).await.is_empty(), "wave 1 waits for the deploy");
        let deploy = claim("2026-11-30T12:03:00Z", Kinds::ALL).await;
        assert_eq!(deploy.iter().map(|a| (a.image.as_str(), a.kind)).collect::<Vec<_>>(), [("canary", ActionKind::Deploy)]);
        assert_eq!(deploy[0].progress, None);
        let progress = json!({"workloads": [{"kind": "Deployment", "namespace": "shop", "name": "canary", "containers": [], "state": "written"}]});
        assert!(ledger.record_progress(&deploy[0].key, Progress::read(ActionKind::Deploy, progress.clone()).unwrap()).await.unwrap());
        let running = ledger.running_actions().await.unwrap();
        assert_eq!(running[0].progress.as_ref().map(Progress::to_value), Some(progress), "a restart reads what was written");

        // Healthy at 12:05: wave 1 waits for the soak until 12:15.
        ledger.finish_action(end(&deploy[0].key, ActionOutcome::Succeeded, "2026-11-30T12:05:00Z", vec![], false)).await.unwrap();
        assert!(!ledger.record_progress(&deploy[0].key, Progress::Deploy(Default::default())).await.unwrap(), "only while it runs");
        assert!(claim("2026-11-30T12:10:00Z", Kinds::ALL).await.is_empty(), "soaking");
        assert_eq!(ledger.next_action_of(Kinds::ALL, &soak, at("2026-11-30T12:10:00Z")).await.unwrap(), Some(at("2026-11-30T12:15:00Z")));
        let web = claim("2026-11-30T12:15:00Z", Kinds::ALL).await;
        assert_eq!(web.len(), 1);

        // Web's deploy fails for good and holds the image: an action of the image recorded
        // before the hold waits (a hand-made deploy of the same change), a newer one goes.
        ledger.finish_action(end(&web[0].key, ActionOutcome::Succeeded, "2026-11-30T12:16:00Z", vec![deploy_of("c1", "web", 1)], false)).await.unwrap();
        let web_deploy = claim("2026-11-30T12:17:00Z", Kinds::ALL).await;
        assert_eq!(web_deploy.len(), 1);
        ledger.finish_action(end(&web_deploy[0].key, ActionOutcome::Failed, "2026-11-30T12:18:00Z", vec![], true)).await.unwrap();
        let held = ledger.change_actions("c1").await.unwrap().into_iter().find(|a| a.key == web_deploy[0].key).unwrap();
        assert!(held.holds && held.state == ActionState::Failed, "{held:?}");

        // A hold on a succeeded deploy (a person's change), with its event, in one write.
        let canary_deploy = builder_monitor_core::deploy::action_key("c1", "canary");
        let overridden = event("overridden", EventType::DeployOverridden, "b");
        let hold = ImageHold {
            key: &canary_deploy,
            detail: "held: workload shop/canary changed by someone else".into(),
            watch: "b",
            events: vec![overridden],
            deliveries: vec![key("overridden", "hook")],
            history: 10,
            now: at("2026-11-30T12:19:00Z"),
        };
        assert!(ledger.hold_image(hold).await.unwrap());
        let canary = ledger.change_actions("c1").await.unwrap().into_iter().find(|a| a.key == canary_deploy).unwrap();
        assert!(canary.holds && canary.detail.as_deref().unwrap().contains("someone else"));
        assert!(ledger.pending_deliveries().await.unwrap().iter().any(|d| d.event == "overridden"));

        // Release lifts the holds: nothing of the change holds its images any more.
        // (And what follows a released action is released with it: checked after the release.)
        ledger.decide("c1", None, Verdict::Release, "alice (cli)", at("2026-11-30T12:20:00Z")).await.unwrap();
        let hold = ImageHold {
            key: &canary_deploy,
            detail: "again".into(),
            watch: "b",
            events: vec![],
            deliveries: vec![],
            history: 10,
            now: at("2026-11-30T12:21:00Z"),
        };
        assert!(!ledger.hold_image(hold).await.unwrap(), "a released action holds nothing");

        // A newer change's action for the image: the older change's success records no deploy.
        let mut r = record("b", "2026-11-30T12:30:00Z");
        r.change = Some(change("b", 2, "sha256:b", "sha256:c"));
        r.actions = vec![action("c2", "solo")];
        ledger.commit(r).await.unwrap();
        let solo = claim("2026-11-30T12:31:00Z", Kinds::ALL).await;
        assert_eq!(solo.len(), 1);
        let mut r = record("b", "2026-11-30T12:32:00Z");
        r.change = Some(change("b", 3, "sha256:c", "sha256:d"));
        r.actions = vec![action("c3", "solo")];
        ledger.commit(r).await.unwrap();
        ledger.finish_action(end(&solo[0].key, ActionOutcome::Succeeded, "2026-11-30T12:33:00Z", vec![deploy_of("c2", "solo", 1)], false)).await.unwrap();
        let c2 = ledger.change_actions("c2").await.unwrap();
        assert!(c2.iter().all(|a| a.action != "deploy"), "no deploy of an older digest: {c2:?}");
    })
    .await;
}

/// A skipped deploy lets the next wave go; a newer action of a held image goes.
#[tokio::test]
async fn a_skipped_deploy_lets_the_next_wave_go_and_a_newer_action_passes_a_hold() {
    both(|ledger| async move {
        let none = Rollout::default();
        let mut r = record("b", "2026-11-30T12:00:00Z");
        r.change = Some(change("b", 1, "sha256:a", "sha256:b"));
        r.actions = vec![action("c1", "app").gated(0, false), action("c1", "api").gated(1, false)];
        ledger.commit(r).await.unwrap();
        let app = ledger.claim_actions_of(at("2026-11-30T12:01:00Z"), 1, Kinds::ALL, &none).await.unwrap();
        assert_eq!(app[0].image, "app");
        let follow = vec![deploy_of("c1", "app", 0)];
        ledger
            .finish_action(end(&app[0].key, ActionOutcome::Succeeded, "2026-11-30T12:02:00Z", follow, false))
            .await
            .unwrap();
        let deploy = ledger
            .claim_actions_of(at("2026-11-30T12:03:00Z"), 1, Kinds::from(ActionKind::Deploy), &none)
            .await
            .unwrap();
        assert_eq!(deploy[0].image, "app");
        ledger
            .finish_action(end(&deploy[0].key, ActionOutcome::Skipped, "2026-11-30T12:04:00Z", vec![], false))
            .await
            .unwrap();
        let actions = ledger.change_actions("c1").await.unwrap();
        assert_eq!(state_of(&actions, "app", "deploy"), ActionState::Skipped);
        // Wave 1 goes after a skipped deploy; api's rebuild runs and fails, holding api.
        let api = ledger
            .claim_actions_of(at("2026-11-30T12:05:00Z"), 1, Kinds::from(ActionKind::Rebuild), &none)
            .await
            .unwrap();
        assert_eq!(api[0].image, "api");
        ledger
            .finish_action(end(&api[0].key, ActionOutcome::Failed, "2026-11-30T12:06:00Z", vec![], true))
            .await
            .unwrap();
        // A deploy of api asked for by hand after the hold goes.
        ledger.record_actions(vec![deploy_of("manual-2", "api", 1)], at("2026-11-30T12:08:00Z")).await.unwrap();
        let newer = ledger.claim_actions_of(at("2026-11-30T12:09:00Z"), 5, Kinds::ALL, &none).await.unwrap();
        assert_eq!(newer.iter().map(|a| a.change_id.as_str()).collect::<Vec<_>>(), ["manual-2"]);
    })
    .await;
}

/// After `release`, the deploy that follows a released action goes too: the failed lower wave
/// holds it no more than it held the action it follows.
#[tokio::test]
async fn the_deploy_that_follows_a_released_action_is_released_with_it() {
    both(|ledger| async move {
        let none = Rollout::default();
        let mut r = record("b", "2026-11-30T12:00:00Z");
        r.change = Some(change("b", 1, "sha256:a", "sha256:b"));
        r.actions = vec![action("c1", "canary").gated(0, false), action("c1", "web").gated(1, false)];
        ledger.commit(r).await.unwrap();
        let canary = ledger.claim_actions_of(at("2026-11-30T12:01:00Z"), 1, Kinds::ALL, &none).await.unwrap();
        ledger
            .finish_action(end(&canary[0].key, ActionOutcome::Failed, "2026-11-30T12:02:00Z", vec![], true))
            .await
            .unwrap();
        ledger.decide("c1", None, Verdict::Release, "alice (cli)", at("2026-11-30T12:03:00Z")).await.unwrap();
        let web = ledger.claim_actions_of(at("2026-11-30T12:04:00Z"), 1, Kinds::ALL, &none).await.unwrap();
        assert_eq!(web[0].image, "web");
        let follow = vec![deploy_of("c1", "web", 1)];
        ledger
            .finish_action(end(&web[0].key, ActionOutcome::Succeeded, "2026-11-30T12:05:00Z", follow, false))
            .await
            .unwrap();
        let deploy = ledger.claim_actions_of(at("2026-11-30T12:06:00Z"), 1, Kinds::ALL, &none).await.unwrap();
        assert_eq!(
            deploy.iter().map(|a| (a.image.as_str(), a.kind)).collect::<Vec<_>>(),
            [("web", ActionKind::Deploy)]
        );
    })
    .await;
}
