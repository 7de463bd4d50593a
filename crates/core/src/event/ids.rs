//! Event ids that stay the same across retries and restarts, and the subject the alert outbox
//! orders an event's deliveries by.

use super::{Event, EventType};
use crate::id::stable_id;

/// The id of a move: the same when it is re-detected, different for A→B after B→A.
pub fn change_id(watch: &str, sequence: u64, previous: &str, current: &str) -> String {
    stable_id(&[watch, &sequence.to_string(), previous, current])
}

/// The id of a roll-out state change's event (`rollout.frozen`, `rollout.unfrozen`): from the
/// change's sequence number in the ledger's roll-out record (1 for the first freeze), so two
/// requests within one clock tick get two ids, and the same change recorded again keeps its id.
/// `since` (the freeze's start) keeps ids apart should a ledger ever be started afresh.
pub fn rollout_event_id(event_type: EventType, sequence: u64, since: &str) -> String {
    stable_id(&[ROLLOUT_SUBJECT, event_type.as_str(), &sequence.to_string(), since])
}

/// The id of a watch's `check.failed` or `check.recovered`: of its failure run number `run` (the
/// ledger counts a watch's runs of failed checks), which started at `since`. Two runs that start
/// within one second are told apart; run 0 is one recorded before runs were counted, whose events
/// keep the ids they were recorded with.
pub fn failure_event_id(watch: &str, event_type: EventType, since: &str, run: u64) -> String {
    match run {
        0 => stable_id(&[watch, event_type.as_str(), since]),
        run => stable_id(&[watch, event_type.as_str(), since, &format!("run {run}")]),
    }
}

/// The subject of the roll-out's own events.
pub const ROLLOUT_SUBJECT: &str = "rollout";

/// What an event is about, as the alert outbox orders it: deliveries to one alert about one
/// subject go out in the order their events were recorded. Keys of different kinds never meet:
/// builder names have no `:`, and every other key but `rollout` has a prefix.
/// - a watch's own events (`builder.*`, `run_image.changed`, `check.*`): `builder:NAME`, or the
///   run image watch's name (`run:` + the normalised run image);
/// - an action's (`build.*`, `rebase.*`, `deploy.*`) and the roll-out's waits (`action.*`): `image:NAME`, the
///   `[[images]]` name (of its first action, for an `action.*` naming several);
/// - a registry outage (`registry.*`): `registry:HOST`;
/// - a freeze (`rollout.*`): `rollout`;
/// - a rollback of an app image's tag (`image.rolled_back`): `image:NAME`, as its actions'.
///
/// An event missing the part its type names (never recorded so) falls back to its builder.
pub fn subject_key(event: &Event) -> String {
    let builder = || format!("builder:{}", event.builder.name);
    match event.event_type {
        EventType::BuilderPinned
        | EventType::BuilderChanged
        | EventType::RunImageChanged
        | EventType::CheckFailed
        | EventType::CheckRecovered => match &event.run_image {
            Some(run_image) => format!("run:{run_image}"),
            None => builder(),
        },
        EventType::BuildStarted
        | EventType::BuildSucceeded
        | EventType::BuildFailed
        | EventType::RebaseSucceeded
        | EventType::RebaseFailed
        | EventType::DeployStarted
        | EventType::DeploySucceeded
        | EventType::DeployFailed
        | EventType::DeployRolledBack
        | EventType::DeployOverridden
        | EventType::GitopsCommitted
        | EventType::GitopsFailed
        | EventType::GitopsOverridden
        | EventType::ActionRefused
        | EventType::SignatureReplaced => event.action.as_ref().map_or_else(builder, |a| format!("image:{}", a.image)),
        EventType::ActionAwaitingApproval | EventType::ActionHeld | EventType::ActionExpedited => event
            .rollout
            .as_ref()
            .and_then(|r| r.actions.first())
            .map_or_else(builder, |a| format!("image:{}", a.image)),
        EventType::RegistryUnavailable | EventType::RegistryRecovered => {
            event.outage.as_ref().map_or_else(builder, |o| format!("registry:{}", o.registry))
        }
        EventType::RolloutFrozen | EventType::RolloutUnfrozen => ROLLOUT_SUBJECT.to_string(),
        EventType::ImageRolledBack => event.rolled_back.as_ref().map_or_else(builder, |r| format!("image:{}", r.image)),
        EventType::AlertTest => "test".to_string(),
    }
}
