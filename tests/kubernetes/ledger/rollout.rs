//! The roll-out on both ledgers: waves, windows, holds, approvals and the freeze gate which
//! pending actions a claim takes.

use super::*;
use builder_monitor::ledger::{Hold, Verdict};
use builder_monitor_core::rollout::{Freeze, Rollout, Window, Windows, held_by_failure};

fn gated(change: &str, image: &str, wave: u32, needs_approval: bool) -> NewAction {
    action(change, image).gated(wave, needs_approval)
}

fn states(actions: &[builder_monitor::ledger::ActionRecord]) -> BTreeMap<String, ActionState> {
    actions.iter().map(|a| (a.image.clone(), a.state)).collect()
}

fn end<'a>(key: &'a str, outcome: ActionOutcome, hold: Option<Hold>) -> ActionEnd<'a> {
    ActionEnd {
        key,
        outcome,
        detail: "exit status 1".into(),
        output_tail: String::new(),
        watch: "b",
        events: vec![],
        deliveries: vec![],
        history: 10,
        now: at("2026-11-30T12:05:00Z"),
        tag_move: None,
        hold,
        keep_intent: false,
        follow: vec![],
        hold_image: false,
    }
}

/// Waves, holds, approvals, release, supersession and the freeze: the same on both ledgers.
#[tokio::test]
async fn roll_out_gates_holds_approvals_and_the_freeze() {
    both(|ledger| async move {
        let none = Rollout::default();
        // After every commit below: each action is due.
        let now = at("2026-11-30T12:30:00Z");
        let claim = |rollout: Rollout| {
            let ledger = ledger.clone();
            async move {
                let mut images: Vec<String> = ledger
                    .claim_actions_of(now, 10, None, &rollout)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|a| a.image)
                    .collect();
                images.sort();
                images
            }
        };
        let mut r = record("b", "2026-11-30T12:00:00Z");
        r.change = Some(change("b", 1, "sha256:a", "sha256:b"));
        r.actions =
            vec![gated("c1", "canary", 0, false), gated("c1", "orders", 1, false), gated("c1", "billing", 1, true)];
        ledger.commit(r).await.unwrap();
        assert_eq!(states(&ledger.change_actions("c1").await.unwrap())["billing"], ActionState::AwaitingApproval);
        // Only the canary may start; the next start is when it ends (no time to wait for).
        assert_eq!(claim(none.clone()).await, ["canary"]);
        assert_eq!(ledger.next_action_of(None, &none, now).await.unwrap(), None);
        assert!(claim(none.clone()).await.is_empty(), "wave 1 waits while the canary runs");

        // The canary fails for good: its later waves are held, with the failure named.
        let actions = ledger.change_actions("c1").await.unwrap();
        let view: Vec<_> = actions.iter().map(|a| a.gate_action()).collect();
        let canary = actions.iter().find(|a| a.image == "canary").unwrap().key.clone();
        let keys = held_by_failure(&view, &canary);
        assert_eq!(keys.len(), 2);
        let hold = Hold { keys, detail: "held: canary canary failed".into() };
        ledger.finish_action(end(&canary, ActionOutcome::Failed, Some(hold))).await.unwrap();
        let after = ledger.change_actions("c1").await.unwrap();
        assert_eq!(states(&after)["orders"], ActionState::Held);
        assert_eq!(states(&after)["billing"], ActionState::Held);
        let open = ledger.open_actions().await.unwrap();
        assert_eq!(
            open.iter().find(|a| a.image == "orders").unwrap().detail.as_deref(),
            Some("held: canary canary failed")
        );
        assert!(claim(none.clone()).await.is_empty());

        // Approving a held action records the approval; it stays held until released.
        let approved = ledger.decide("c1", Some("billing"), Verdict::Approve, "bob (cli)", now).await.unwrap();
        assert_eq!(approved.len(), 1);
        assert_eq!(approved[0].state, ActionState::Held);
        // Release: the held ones go, regardless of the failed canary.
        let released = ledger.decide("c1", None, Verdict::Release, "alice (api)", now).await.unwrap();
        let moved: BTreeMap<String, ActionState> = released.iter().map(|d| (d.image.clone(), d.state)).collect();
        assert_eq!(moved, [("billing".into(), ActionState::Pending), ("orders".into(), ActionState::Pending)].into());
        assert_eq!(claim(none.clone()).await, ["billing", "orders"]);
        let billing = ledger.change_actions("c1").await.unwrap().into_iter().find(|a| a.image == "billing").unwrap();
        assert_eq!(billing.decided_by.as_deref(), Some("bob (cli)"));
        assert!(billing.released);

        // Approval and rejection of actions that wait for a person; nothing else is touched.
        let mut r = record("b", "2026-11-30T12:02:00Z");
        r.change = Some(change("b", 2, "sha256:b", "sha256:c"));
        r.actions = vec![gated("c2", "x", 1, true), gated("c2", "y", 1, true), gated("c2", "z", 1, false)];
        ledger.commit(r).await.unwrap();
        assert_eq!(claim(none.clone()).await, ["z"]);
        let approved = ledger.decide("c2", Some("x"), Verdict::Approve, "api", now).await.unwrap();
        assert_eq!(approved.iter().map(|d| d.image.as_str()).collect::<Vec<_>>(), ["x"]);
        let rejected = ledger.decide("c2", None, Verdict::Reject, "carol (cli)", now).await.unwrap();
        assert_eq!(
            rejected.iter().map(|d| (d.image.as_str(), d.state)).collect::<Vec<_>>(),
            [("y", ActionState::Rejected)]
        );
        assert_eq!(claim(none.clone()).await, ["x"]);
        assert!(
            ledger.decide("c2", None, Verdict::Approve, "api", now).await.unwrap().is_empty(),
            "nothing left to approve"
        );

        // A newer change supersedes actions that wait (for approval or a hold) as it does pending ones.
        let mut r = record("b", "2026-11-30T12:03:00Z");
        r.change = Some(change("b", 3, "sha256:c", "sha256:d"));
        r.actions = vec![gated("c3", "w", 1, true)];
        ledger.commit(r).await.unwrap();
        let mut r = record("b", "2026-11-30T12:04:00Z");
        r.change = Some(change("b", 4, "sha256:d", "sha256:e"));
        r.actions = vec![gated("c4", "w", 1, true)];
        ledger.commit(r).await.unwrap();
        assert_eq!(states(&ledger.change_actions("c3").await.unwrap())["w"], ActionState::Superseded);
        assert_eq!(states(&ledger.change_actions("c4").await.unwrap())["w"], ActionState::AwaitingApproval);

        // The freeze: kept, announced once, and nothing starts while it holds.
        let mut r = record("b", "2026-11-30T12:05:00Z");
        r.change = Some(change("b", 5, "sha256:e", "sha256:f"));
        r.actions = vec![gated("c5", "p", 1, false), gated("c5", "q", 1, false)];
        ledger.commit(r).await.unwrap();
        let freeze =
            Freeze { since: at("2026-11-30T12:05:30Z"), reason: Some("release week".into()), by: "dan (cli)".into() };
        let frozen = event("frozen", EventType::RolloutFrozen, "rollout");
        let before = ledger
            .set_freeze(Some(freeze.clone()), vec![frozen.clone()], vec![key("frozen", "hook")], 10, now)
            .await
            .unwrap();
        assert_eq!(before, None);
        assert_eq!(ledger.freeze_state().await.unwrap(), Some(freeze.clone()));
        assert!(claim(none.clone()).await.is_empty(), "frozen");
        assert_eq!(ledger.next_action_of(None, &none, now).await.unwrap(), None);
        // A second freeze keeps the first one's time; no second event.
        let again = Freeze { since: at("2026-11-30T12:06:00Z"), reason: Some("still".into()), by: "erin".into() };
        let frozen2 = event("frozen2", EventType::RolloutFrozen, "rollout");
        let before =
            ledger.set_freeze(Some(again), vec![frozen2], vec![key("frozen2", "hook")], 10, now).await.unwrap();
        assert_eq!(before, Some(freeze.clone()));
        let kept = ledger.freeze_state().await.unwrap().unwrap();
        assert_eq!((kept.since, kept.by.as_str(), kept.reason.as_deref()), (freeze.since, "dan (cli)", Some("still")));
        let third = Freeze { since: at("2026-11-30T12:07:00Z"), reason: None, by: "fay".into() };
        ledger.set_freeze(Some(third), vec![], vec![], 10, now).await.unwrap();
        assert_eq!(
            ledger.freeze_state().await.unwrap().unwrap().reason.as_deref(),
            Some("still"),
            "no reason keeps it"
        );
        let pending: Vec<String> = ledger.pending_deliveries().await.unwrap().into_iter().map(|d| d.event).collect();
        assert!(pending.contains(&"frozen".to_string()) && !pending.contains(&"frozen2".to_string()), "{pending:?}");
        ledger.set_freeze(None, vec![], vec![], 10, now).await.unwrap();
        assert_eq!(ledger.freeze_state().await.unwrap(), None);

        // max_in_flight: one of the change's actions at a time.
        let one = Rollout { max_in_flight: Some(1), ..Rollout::default() };
        assert_eq!(claim(one.clone()).await.len(), 1);
        assert!(claim(one.clone()).await.is_empty(), "the other waits for the first");

        // Windows: closed now, nothing starts, and the next start is the window's opening.
        let window = Window::new("Mon-Fri", "22:00", "23:00", jiff::tz::TimeZone::UTC, "UTC").unwrap();
        let closed = Rollout { windows: Windows(vec![window]), ..Rollout::default() };
        assert!(claim(closed.clone()).await.is_empty());
        assert_eq!(ledger.next_action_of(None, &closed, now).await.unwrap(), Some(at("2026-11-30T22:00:00Z")));
        assert_eq!(claim(none).await.len(), 1, "without the window the last one starts");
    })
    .await;
}

/// A change planned in batches: a later wave's action that arrives after a lower wave's action
/// failed is recorded held, as the failure held the ones recorded before it; once the change is
/// released, one that arrives then is released too and starts.
#[tokio::test]
async fn a_later_wave_arriving_after_a_failure_is_held_and_after_a_release_goes() {
    both(|ledger| async move {
        let now = at("2026-11-30T12:30:00Z");
        ledger.commit(record("r", "2026-11-30T12:00:00Z")).await.unwrap();
        ledger.record_planned("r", vec![gated("c1", "canary", 0, false)], now).await.unwrap();
        let claimed = ledger.claim_actions_of(now, 10, None, &Rollout::default()).await.unwrap();
        assert_eq!(claimed.len(), 1);
        // Nothing later is recorded yet: the failure holds nothing.
        let failed = ledger.finish_action(end(&claimed[0].key, ActionOutcome::Failed, None)).await.unwrap();
        assert_eq!(failed, Some(ActionState::Failed));

        let mut r = record("r", "2026-11-30T12:00:00Z");
        r.change = Some(change("r", 1, "sha256:a", "sha256:b"));
        r.actions = vec![gated("c1", "canary", 0, false), gated("c1", "orders", 1, false)];
        ledger.commit(r).await.unwrap();
        let actions = ledger.actions(10).await.unwrap();
        assert_eq!(
            states(&actions),
            BTreeMap::from([("canary".into(), ActionState::Failed), ("orders".into(), ActionState::Held)])
        );
        let orders = actions.iter().find(|a| a.image == "orders").unwrap();
        assert_eq!(orders.detail.as_deref(), Some("held: canary canary failed"));

        ledger.decide("c1", None, Verdict::Release, "alice (cli)", now).await.unwrap();
        ledger.record_planned("r", vec![gated("c1", "billing", 1, false)], now).await.unwrap();
        let mut claimed: Vec<String> = ledger
            .claim_actions_of(now, 10, None, &Rollout::default())
            .await
            .unwrap()
            .into_iter()
            .map(|a| a.image)
            .collect();
        claimed.sort();
        assert_eq!(claimed, ["billing", "orders"], "both released");
    })
    .await;
}

/// What the gates read of a change (`change_gates`, a lean read of its rows) is its actions as the
/// gates see them, on both ledgers: waves, states, a release, a deploy and an expedited action.
#[tokio::test]
async fn a_changes_gate_view_is_its_actions_as_the_gates_see_them() {
    both(|ledger| async move {
        let now = at("2026-11-30T12:30:00Z");
        let mut deploy = gated("c1", "web-deploy", 1, false);
        deploy.kind = ActionKind::Deploy;
        let mut r = record("b", "2026-11-30T12:00:00Z");
        r.change = Some(change("b", 1, "sha256:a", "sha256:b"));
        r.actions = vec![
            gated("c1", "canary", 0, false).expedited(serde_json::from_str(r#"["USN-7000-1"]"#).unwrap()),
            gated("c1", "orders", 1, true),
            deploy,
        ];
        ledger.commit(r).await.unwrap();
        let claimed = ledger.claim_actions_of(now, 1, None, &Rollout::default()).await.unwrap();
        assert_eq!(claimed[0].image, "canary");
        ledger.finish_action(end(&claimed[0].key, ActionOutcome::Succeeded, None)).await.unwrap();
        ledger.decide("c1", Some("orders"), Verdict::Release, "alice (cli)", now).await.unwrap();

        let gates = ledger.change_gates("c1").await.unwrap();
        let whole: Vec<_> = ledger.change_actions("c1").await.unwrap().iter().map(|a| a.gate_action()).collect();
        assert_eq!(gates, whole);
        let by_image = |image: &str| gates.iter().find(|g| g.image == image).unwrap().clone();
        assert_eq!((by_image("canary").state, by_image("canary").expedited), (ActionState::Succeeded, true));
        assert!(by_image("orders").released && !by_image("orders").expedited);
        assert!(by_image("web-deploy").deploy && !by_image("canary").deploy);
        assert_eq!(gates.iter().map(|g| g.wave).collect::<Vec<_>>(), [0, 1, 1]);
    })
    .await;
}

/// What registries answered: recorded per host (a second answer replaces the first), listed by
/// host, beside the freeze without touching it; the same on both ledgers.
#[tokio::test]
async fn registry_answers_are_kept_per_host_beside_the_freeze() {
    use builder_monitor::ledger::RegistryRecord;
    both(|ledger| async move {
        assert_eq!(ledger.registries().await.unwrap(), vec![]);
        let now = at("2026-11-30T12:00:00Z");
        let freeze = Freeze { since: now, reason: Some("audit".into()), by: "ops".into() };
        ledger.set_freeze(Some(freeze.clone()), vec![], vec![], 10, now).await.unwrap();
        let record = |host: &str, referrers, time| RegistryRecord { host: host.into(), referrers, probed: at(time) };
        ledger.record_registry(record("z.example:5000", false, "2026-11-30T12:01:00Z")).await.unwrap();
        ledger.record_registry(record("a.example", true, "2026-11-30T12:02:00Z")).await.unwrap();
        ledger.record_registry(record("z.example:5000", true, "2026-11-30T12:03:00Z")).await.unwrap();
        assert_eq!(
            ledger.registries().await.unwrap(),
            vec![
                record("a.example", true, "2026-11-30T12:02:00Z"),
                record("z.example:5000", true, "2026-11-30T12:03:00Z")
            ]
        );
        assert_eq!(ledger.freeze_state().await.unwrap(), Some(freeze), "the freeze is untouched");
    })
    .await;
}
