//! Actions are monotonic and write-ahead, in both ledgers: one action per app image at a time, a
//! newer change supersedes a running action at its write and at its retry, and every tag write is
//! recorded as an intent before it is made.

mod support;

use builder_monitor::ledger::{
    ActionEnd, ActionOutcome, ActionState, CheckRecord, Ledger, NewAction, PinUpdate, TagIntent, TagMoveKind,
    WatchKind, WriteGrant,
};
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::schedule::parse_timestamp;
use chrono::{DateTime, Utc};
use serde_json::json;
use support::ledgers::both;

fn at(text: &str) -> DateTime<Utc> {
    parse_timestamp(text).unwrap()
}

fn check(time: &str, change: Option<&str>, actions: Vec<NewAction>) -> CheckRecord {
    CheckRecord {
        watch: "b".into(),
        kind: WatchKind::Builder,
        image: "r.test/cnb/builder:latest".into(),
        time: at(time),
        outcome: Ok(()),
        pin: change.map(|c| PinUpdate {
            digest: format!("sha256:{c}"),
            reference: format!("r.test/cnb/builder@sha256:{c}"),
            media_type: "application/vnd.oci.image.index.v1+json".into(),
            platforms: [
                ("linux/amd64".to_string(), format!("sha256:{c}-amd64")),
                ("linux/arm64".to_string(), format!("sha256:{c}-arm64")),
            ]
            .into(),
            metadata: None,
        }),
        pending: None,
        change: None,
        events: vec![],
        deliveries: vec![],
        actions,
        history: 10,
    }
}

fn action(change: &str, image: &str) -> NewAction {
    NewAction {
        key: format!("bm-{change}-{image}"),
        change_id: change.into(),
        image: image.into(),
        kind: ActionKind::Rebase,
        target: json!({ "image": format!("r.test/apps/{image}:latest"), "builder_name": "b",
                        "builder": format!("r.test/cnb/builder@sha256:{change}"), "run_image": null,
                        "source": null, "why": "test" }),
        wave: 1,
        needs_approval: false,
    }
}

fn intent(action: Option<&str>, expected: &str, new: &str) -> TagIntent {
    TagIntent {
        image: "app".into(),
        reference: "r.test/apps/app:latest".into(),
        kind: if action.is_some() { TagMoveKind::Rebase } else { TagMoveKind::Rollback },
        action: action.map(str::to_string),
        expected: Some(expected.into()),
        new: Some(new.into()),
        time: at("2026-11-30T12:01:00.123Z"),
    }
}

fn end(key: &str, outcome: ActionOutcome, keep_intent: bool) -> ActionEnd<'_> {
    ActionEnd {
        key,
        outcome,
        detail: "TagMoved".into(),
        output_tail: String::new(),
        watch: "b",
        events: vec![],
        deliveries: vec![],
        history: 10,
        now: at("2026-11-30T12:07:00Z"),
        tag_move: None,
        hold: None,
        keep_intent,
    }
}

async fn state_of(ledger: &Ledger, key: &str) -> (ActionState, Option<String>) {
    let actions = ledger.actions(20).await.unwrap();
    let a = actions.into_iter().find(|a| a.key == key).unwrap();
    (a.state, a.detail)
}

#[tokio::test]
async fn a_newer_change_supersedes_a_running_action_at_its_write_and_at_its_retry() {
    both(|ledger| async move {
        let far = at("2099-01-01T00:00:00Z");
        ledger.commit(check("2026-11-30T12:00:00Z", Some("c1"), vec![action("c1", "app")])).await.unwrap();
        let claimed = ledger.claim_actions(far, 5).await.unwrap();
        assert_eq!(claimed.len(), 1);
        let k1 = claimed[0].key.clone();

        // The write is recorded before it is made, and read back whole.
        assert_eq!(
            ledger.begin_tag_write("b", intent(Some(&k1), "sha256:a1", "sha256:a2")).await.unwrap(),
            WriteGrant::Granted
        );
        assert_eq!(ledger.tag_intents().await.unwrap(), [intent(Some(&k1), "sha256:a1", "sha256:a2")]);

        // A newer change for the same image: its action waits for the running one (one per image).
        ledger.commit(check("2026-11-30T12:05:00Z", Some("c2"), vec![action("c2", "app")])).await.unwrap();
        assert_eq!(state_of(&ledger, &k1).await.0, ActionState::Running, "a started action is not cut short");
        assert!(ledger.claim_actions(far, 5).await.unwrap().is_empty(), "the newer one waits for the running one");
        assert_eq!(
            ledger.next_action_at(at("2026-11-30T12:05:00Z")).await.unwrap(),
            None,
            "nothing due while it waits"
        );

        // At its next write the older one learns it is superseded, and writes nothing.
        assert_eq!(
            ledger.begin_tag_write("b", intent(Some(&k1), "sha256:a1", "sha256:a2")).await.unwrap(),
            WriteGrant::Superseded { by: "c2".into() }
        );
        // Its retry re-checks first: it ends superseded, never pending again; its intent is closed.
        let retry = ActionOutcome::Retry { next_attempt: at("2026-11-30T12:08:00Z") };
        ledger.finish_action(end(&k1, retry, false)).await.unwrap();
        let (state, detail) = state_of(&ledger, &k1).await;
        assert_eq!(state, ActionState::Superseded);
        assert!(detail.unwrap().starts_with("superseded by change c2"));
        assert!(ledger.tag_intents().await.unwrap().is_empty());
        assert_eq!(
            ledger.begin_tag_write("b", intent(Some(&k1), "sha256:a1", "sha256:a2")).await.unwrap(),
            WriteGrant::NotRunning
        );

        // Now the newer one starts; an attempt that cannot tell whether its write landed keeps its
        // intent for the next attempt.
        let claimed = ledger.claim_actions(far, 5).await.unwrap();
        assert_eq!(claimed.iter().map(|a| a.change_id.as_str()).collect::<Vec<_>>(), ["c2"]);
        let k2 = claimed[0].key.clone();
        assert_eq!(
            ledger.begin_tag_write("b", intent(Some(&k2), "sha256:a1", "sha256:a3")).await.unwrap(),
            WriteGrant::Granted
        );
        let retry = ActionOutcome::Retry { next_attempt: at("2026-11-30T12:08:00Z") };
        ledger.finish_action(end(&k2, retry, true)).await.unwrap();
        assert_eq!(state_of(&ledger, &k2).await.0, ActionState::Pending, "no newer change: a retry stays a retry");
        assert_eq!(ledger.tag_intents().await.unwrap().len(), 1);
        ledger.end_tag_write("app", Some(&k2)).await.unwrap();
        assert!(ledger.tag_intents().await.unwrap().is_empty());

        // A rollback's intent (no action) is closed by the move it records.
        assert_eq!(
            ledger.begin_tag_write("b", intent(None, "sha256:a3", "sha256:a1")).await.unwrap(),
            WriteGrant::Granted
        );
        assert_eq!(ledger.tag_intents().await.unwrap()[0].action, None);
        let done =
            intent(None, "sha256:a3", "sha256:a1").completed(Some("sha256:a1".into()), at("2026-11-30T12:09:00Z"));
        ledger.record_tag_move("b", done, 10).await.unwrap();
        assert!(ledger.tag_intents().await.unwrap().is_empty());
        let moves = ledger.tag_moves(Some("app"), 5).await.unwrap();
        assert_eq!((moves[0].before.as_deref(), moves[0].after.as_deref()), (Some("sha256:a3"), Some("sha256:a1")));

        // The pin history keeps each pin's platform manifests (what orders run images).
        let history = ledger.history("b", 5).await.unwrap();
        assert_eq!(history[0].digest, "sha256:c2");
        assert_eq!(history[0].platforms, ["sha256:c2-amd64", "sha256:c2-arm64"]);

        // What the app was last built or rebased with.
        assert_eq!(ledger.last_succeeded_target("app", ActionKind::Rebase).await.unwrap(), None);
        let claimed = ledger.claim_actions(far, 5).await.unwrap();
        ledger.finish_action(end(&claimed[0].key, ActionOutcome::Succeeded, false)).await.unwrap();
        let last = ledger.last_succeeded_target("app", ActionKind::Rebase).await.unwrap().unwrap();
        assert_eq!(last["builder"], "r.test/cnb/builder@sha256:c2");
    })
    .await;
}
