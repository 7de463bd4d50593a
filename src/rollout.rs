//! Roll-out control as people use it: approve, reject and release a change's actions, freeze and
//! unfreeze every action start (with their events), and why each open action waits (`status`).

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::ledger::{ActionRecord, Decided, FreezeEvents, Ledger, LedgerError, OpenAction, ROLLOUT_WATCH, Verdict};
use builder_monitor_core::event::{Event, EventType, RolloutInfo, Subject, WaitingAction, rollout_event_id, stable_id};
use builder_monitor_core::rollout::{self, ActionState, Freeze, GateAction, Wait};
use builder_monitor_core::schedule::timestamp;

/// Why a roll-out request cannot be carried out.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("no change {0} has actions in the ledger (see `builder-monitor status`)")]
    UnknownChange(String),
    #[error("change {change} has no action for image \"{image}\" (it has: {})", images.join(", "))]
    UnknownImage { change: String, image: String, images: Vec<String> },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// Who a command-line request comes from: `user@host (cli)`.
pub fn cli_user() -> String {
    let named = |var| std::env::var(var).ok().filter(|v: &String| !v.trim().is_empty());
    let user = named("USER").or_else(|| named("LOGNAME"));
    // The owner of our own /proc entry is our uid: no unsafe call, and no passwd database needed.
    let uid = {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata("/proc/self").ok().map(|m| m.uid())
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
    requester(user, uid, &host)
}

/// `user@host (cli)`, the user named by the environment or else by uid (a container or cron job
/// often sets no `USER`): a decision always says whose it was.
fn requester(user: Option<String>, uid: Option<u32>, host: &str) -> String {
    let user = user.or_else(|| uid.map(|uid| format!("uid {uid}"))).unwrap_or_else(|| "unknown".into());
    if host.is_empty() { format!("{user} (cli)") } else { format!("{user}@{host} (cli)") }
}

/// What a verdict did to a change.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Decision {
    pub change: String,
    pub verdict: String,
    pub by: String,
    /// The actions it moved, with their new state.
    pub actions: Vec<Decided>,
    /// The change's actions it left as they were, with their state as every view shows it
    /// ([`crate::ledger::shown_state`]: `waiting` where a gate keeps a pending one back).
    pub unchanged: Vec<(String, String)>,
    /// Of the actions it moved, those a roll-out gate still keeps back (key → why): shown
    /// `waiting`, as `status` and `plan` show them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub waiting: BTreeMap<String, String>,
}

impl Decision {
    /// For people: `approved 2 actions of change X: rebuild of petclinic (now pending), …`.
    pub fn render_text(&self) -> String {
        let done = match self.verdict.as_str() {
            "approve" => "approved",
            "reject" => "rejected",
            _ => "released",
        };
        if self.actions.is_empty() {
            let states: Vec<String> = self.unchanged.iter().map(|(image, state)| format!("{image} {state}")).collect();
            return format!(
                "change {}: nothing to {}; its actions: {}\n",
                self.change,
                self.verdict,
                states.join(", ")
            );
        }
        let list: Vec<String> = self
            .actions
            .iter()
            .map(|a| match self.waiting.get(&a.key) {
                Some(why) => format!("{} of {} (now waiting: {why})", a.kind.as_str(), a.image),
                None => format!("{} of {} (now {})", a.kind.as_str(), a.image, a.state),
            })
            .collect();
        format!("{done} {} action(s) of change {}: {}\n", self.actions.len(), self.change, list.join(", "))
    }
}

/// Approves, rejects or releases the actions of `change` (one image's only, with `image`).
pub async fn decide(
    config: &Config,
    ledger: &Ledger,
    change: &str,
    image: Option<&str>,
    verdict: Verdict,
    by: &str,
    now: DateTime<Utc>,
) -> Result<Decision, RolloutError> {
    let before = ledger.change_actions(change).await?;
    if before.is_empty() {
        return Err(RolloutError::UnknownChange(change.to_string()));
    }
    if let Some(image) = image
        && !before.iter().any(|a| a.image == image)
    {
        let images = before.iter().map(|a| a.image.clone()).collect();
        return Err(RolloutError::UnknownImage { change: change.to_string(), image: image.to_string(), images });
    }
    let actions = ledger.decide(change, image, verdict, by, now).await?;
    let unchanged: Vec<&ActionRecord> = before
        .iter()
        .filter(|a| image.is_none_or(|i| a.image == i) && !actions.iter().any(|d| d.key == a.key))
        .collect();
    for a in &actions {
        tracing::info!(change, image = %a.image, action = a.kind.as_str(), state = %a.state, by, verdict = verdict.as_str(), "roll-out decision");
    }
    // What still keeps them back (a freeze, a window, a lower wave): said as `status` says it,
    // in the words `status` and `plan` use for their states.
    let mut waits = BTreeMap::new();
    if actions.iter().any(|a| a.state == ActionState::Pending)
        || unchanged.iter().any(|a| a.state == ActionState::Pending)
    {
        let open = ledger.open_actions().await?;
        let frozen = ledger.freeze_state().await?;
        waits = crate::rollout::waits(config, ledger, &open, frozen.as_ref(), now).await?;
    }
    let unchanged =
        unchanged.iter().map(|a| (a.image.clone(), a.shown_state(waits.contains_key(&a.key)).to_string())).collect();
    let waiting = actions.iter().filter_map(|a| Some((a.key.clone(), waits.remove(&a.key)?.to_string()))).collect();
    Ok(Decision {
        change: change.to_string(),
        verdict: verdict.as_str().into(),
        by: by.to_string(),
        actions,
        unchanged,
        waiting,
    })
}

/// The freeze state after a request, and whether the request changed it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FreezeOutcome {
    pub frozen: Option<Freeze>,
    pub changed: bool,
}

/// Freezes every action start (`reason` shown by `status`); on an existing freeze, a new reason
/// replaces the old one and nothing else changes. Checks, pins and alerts go on.
pub async fn freeze(
    config: &Config,
    ledger: &Ledger,
    reason: Option<String>,
    by: &str,
    now: DateTime<Utc>,
) -> Result<FreezeOutcome, RolloutError> {
    let freeze = Freeze { since: now, reason, by: by.to_string() };
    let made = {
        let (freeze, by) = (freeze.clone(), by.to_string());
        freeze_events(config, move |sequence, _| freeze_event(EventType::RolloutFrozen, &freeze, &by, now, sequence))
    };
    let change = ledger.change_freeze(Some(freeze.clone()), made, config.monitor.history, now).await?;
    crate::alert::emitted(&change.events);
    let changed = change.before.is_none();
    // As kept: a second freeze keeps the first one's time and author.
    let frozen = ledger.freeze_state().await?.or(Some(freeze));
    Ok(FreezeOutcome { frozen, changed })
}

/// Lifts the freeze; waiting actions start (newest target per image; older ones were superseded).
pub async fn unfreeze(
    config: &Config,
    ledger: &Ledger,
    by: &str,
    now: DateTime<Utc>,
) -> Result<FreezeOutcome, RolloutError> {
    let made = {
        let by = by.to_string();
        freeze_events(config, move |sequence, lifted| {
            // Called only when a freeze is lifted, so `lifted` is always there.
            let lifted = lifted.cloned().unwrap_or(Freeze { since: now, reason: None, by: by.clone() });
            freeze_event(EventType::RolloutUnfrozen, &lifted, &by, now, sequence)
        })
    };
    let change = ledger.change_freeze(None, made, config.monitor.history, now).await?;
    crate::alert::emitted(&change.events);
    Ok(FreezeOutcome { frozen: None, changed: change.before.is_some() })
}

/// The events of a freeze or its end, routed to the alerts that want them, made by the ledger
/// once it has counted the change (see [`FreezeEvents`]).
fn freeze_events(
    config: &Config,
    event: impl Fn(u64, Option<&Freeze>) -> Event + Send + Sync + 'static,
) -> FreezeEvents {
    let alerts = config.alerts.clone();
    Arc::new(move |sequence, before| {
        let events = vec![event(sequence, before)];
        let deliveries = crate::alert::route(&alerts, &events);
        (events, deliveries)
    })
}

/// `rollout.frozen` or `rollout.unfrozen` of the roll-out's state change number `sequence`.
fn freeze_event(event_type: EventType, freeze: &Freeze, by: &str, now: DateTime<Utc>, sequence: u64) -> Event {
    let since = timestamp(freeze.since);
    let id = rollout_event_id(event_type, sequence, &since);
    let mut e =
        Event::new(id, event_type, timestamp(now), Subject { name: ROLLOUT_WATCH.into(), image: String::new() });
    e.rollout = Some(RolloutInfo {
        reason: freeze.reason.clone(),
        by: Some(by.to_string()),
        since: Some(since),
        ..Default::default()
    });
    e
}

/// `action.awaiting_approval` for the actions a change planned that wait for a person, if any.
pub fn awaiting_approval_event(
    change: &str,
    subject: &Subject,
    builders: &[Subject],
    waiting: Vec<WaitingAction>,
    now: DateTime<Utc>,
) -> Option<Event> {
    if waiting.is_empty() {
        return None;
    }
    let id = stable_id(&[change, EventType::ActionAwaitingApproval.as_str()]);
    let mut e = Event::new(id, EventType::ActionAwaitingApproval, timestamp(now), subject.clone());
    e.builders = builders.to_vec();
    e.rollout = Some(RolloutInfo { change: Some(change.to_string()), actions: waiting, ..Default::default() });
    Some(e)
}

/// `action.expedited` for a change whose `actions` skip the soak and the windows (`expedite`), with
/// its one log line; a change whose fixes are that high but whose data may not expedite logs why instead.
pub fn expedited_event(
    change: &str,
    subject: &Subject,
    builders: &[Subject],
    actions: Vec<WaitingAction>,
    expedite: &builder_monitor_core::rollout::Expedite,
    now: DateTime<Utc>,
) -> Option<Event> {
    if actions.is_empty() {
        return None;
    }
    let expedited = match expedite {
        builder_monitor_core::rollout::Expedite::No => return None,
        builder_monitor_core::rollout::Expedite::Refused { ids, why } => {
            tracing::warn!(change, fixes = ?ids, reason = %why, "not expedited: the vulnerability data may not expedite a roll-out");
            return None;
        }
        builder_monitor_core::rollout::Expedite::Yes(expedited) => expedited,
    };
    let line = builder_monitor_core::rollout::expedited_line(expedited);
    tracing::info!(change, actions = actions.len(), "expedited (no windows, no soak) {line}");
    let id = stable_id(&[change, EventType::ActionExpedited.as_str()]);
    let mut e = Event::new(id, EventType::ActionExpedited, timestamp(now), subject.clone());
    e.builders = builders.to_vec();
    e.rollout = Some(RolloutInfo {
        change: Some(change.to_string()),
        actions,
        expedited: Some(expedited.clone()),
        ..Default::default()
    });
    Some(e)
}

/// The actions a failed action holds (its change's later waves not started yet), and why.
pub fn held_by(actions: &[ActionRecord], failed: &ActionRecord) -> (Vec<ActionRecord>, String) {
    let view: Vec<GateAction> = actions.iter().map(ActionRecord::gate_action).collect();
    let keys = rollout::held_by_failure(&view, &failed.key);
    let held = actions.iter().filter(|a| keys.contains(&a.key)).cloned().collect();
    (held, rollout::failure_reason(failed.wave, &failed.image))
}

/// `action.held` for `held`, the later waves a failure holds.
pub fn held_event(change: &str, subject: &Subject, held: &[ActionRecord], reason: &str, now: DateTime<Utc>) -> Event {
    let waiting = held
        .iter()
        .map(|a| WaitingAction { key: a.key.clone(), image: a.image.clone(), kind: a.action, wave: a.wave })
        .collect();
    let id = stable_id(&[change, EventType::ActionHeld.as_str(), reason]);
    let mut e = Event::new(id, EventType::ActionHeld, timestamp(now), subject.clone());
    e.rollout = Some(RolloutInfo {
        change: Some(change.to_string()),
        actions: waiting,
        reason: Some(reason.to_string()),
        ..Default::default()
    });
    e
}

/// Why each pending action among `open` waits now, by key (those that may start are absent);
/// `open` and `freeze` as the caller read them from the ledger.
pub async fn waits(
    config: &Config,
    ledger: &Ledger,
    open: &[OpenAction],
    freeze: Option<&Freeze>,
    now: DateTime<Utc>,
) -> Result<BTreeMap<String, Wait>, LedgerError> {
    let mut changes: Vec<&str> =
        open.iter().filter(|a| a.state == ActionState::Pending).map(|a| a.change.as_str()).collect();
    changes.sort_unstable();
    changes.dedup();
    let mut out = BTreeMap::new();
    for change in changes {
        let view = ledger.change_gates(change).await?;
        for (key, verdict) in rollout::gate(&view, &config.rollout, freeze, now) {
            if let Err(wait) = verdict {
                out.insert(key, wait);
            }
        }
    }
    // One action per image at a time: a pending one the gates let through still waits for its
    // image's running one (the claim's rule).
    let running: BTreeMap<&str, &str> = open
        .iter()
        .filter(|a| a.state == ActionState::Running)
        .map(|a| (a.image.as_str(), a.change.as_str()))
        .collect();
    for a in open.iter().filter(|a| a.state == ActionState::Pending) {
        if let Some(change) = running.get(a.image.as_str())
            && !out.contains_key(&a.key)
        {
            out.insert(a.key.clone(), Wait::ImageBusy { image: a.image.clone(), change: change.to_string() });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_without_a_user_name_says_its_uid() {
        assert_eq!(requester(Some("ana".into()), Some(1000), "ci-7"), "ana@ci-7 (cli)");
        assert_eq!(requester(None, Some(1000), "ci-7"), "uid 1000@ci-7 (cli)");
        assert_eq!(requester(None, Some(0), ""), "uid 0 (cli)");
        assert_eq!(requester(None, None, ""), "unknown (cli)");
    }
}
