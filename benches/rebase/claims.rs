//! Item 4: the runner's claims over a fleet's change, on the SQLite ledger in this process, no
//! registry: `n` pending rebases of one change, claimed 16 at first and then one as each finishes
//! (what the runner does with 16 slots). Every claim gates the change's actions, so this is where a
//! 10,000-app fleet costs more per app than a 1,000-app one, if anywhere.

use std::time::Instant;

use builder_monitor::ledger::{ActionEnd, ActionOutcome, Ledger, NewAction};
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::rollout::Rollout;
use serde_json::{Value, json};

/// Slots of the runner: claims take this many at first, then one per finished action.
const SLOTS: usize = 16;

fn rebase(change: &str, i: usize) -> NewAction {
    let image = format!("app-{i:05}");
    let target = json!({
        "image": format!("registry.test/fleet/{image}:latest"), "builder_name": "b",
        "builder": "registry.test/b@sha256:00", "run_image": "registry.test/run@sha256:01",
        "source": null, "why": "on run image sha256:00; rebasing onto sha256:01",
    });
    NewAction::new(
        builder_monitor::reaction::action_key(change, &image),
        change.into(),
        image,
        ActionKind::Rebase,
        serde_json::from_value(target).expect("a target"),
    )
}

/// Claims and finishes `n` actions of one change; the seconds of every claim, in order.
pub async fn claims(n: usize) -> Value {
    let dir = tempfile::tempdir().expect("a directory");
    let ledger = Ledger::open(&dir.path().join("state.db")).expect("a ledger");
    let now = chrono::Utc::now();
    let actions: Vec<NewAction> = (0..n).map(|i| rebase("c1", i)).collect();
    let recorded = Instant::now();
    ledger.record_actions(actions, now).await.expect("record");
    let record_seconds = recorded.elapsed().as_secs_f64();
    let rollout = Rollout::default();
    let (mut claim_seconds, mut finish_seconds) = (Vec::with_capacity(n), 0.0);
    let mut running: std::collections::VecDeque<String> = Default::default();
    let started = Instant::now();
    loop {
        let free = SLOTS - running.len();
        let at = Instant::now();
        let claimed = ledger.claim_actions_of(now, free, ActionKind::Rebase, &rollout).await.expect("claim");
        claim_seconds.push(at.elapsed().as_secs_f64());
        running.extend(claimed.into_iter().map(|c| c.key));
        let Some(key) = running.pop_front() else { break };
        let at = Instant::now();
        let end = ActionEnd {
            key: &key,
            outcome: ActionOutcome::Succeeded,
            detail: "rebased".into(),
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
        finish_seconds += at.elapsed().as_secs_f64();
    }
    let total = started.elapsed().as_secs_f64();
    let tenth = (claim_seconds.len() / 10).max(1);
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len().max(1) as f64;
    json!({
        "actions": n,
        "record_seconds": record_seconds,
        "claims": claim_seconds.len(),
        "claim_seconds": claim_seconds.iter().sum::<f64>(),
        "first_tenth_mean_seconds": mean(&claim_seconds[..tenth]),
        "last_tenth_mean_seconds": mean(&claim_seconds[claim_seconds.len() - tenth..]),
        "finish_seconds": finish_seconds,
        "seconds": total,
    })
}
