//! How an event leaves the daemon, wherever it is made (a check, the runner, a roll-out request):
//! routed to the alerts that want it, recorded with those deliveries in one ledger write, and
//! logged only once that write succeeded, so a log line never announces an event the ledger
//! could still lose.

use std::future::Future;

use crate::config::AlertSettings;
use crate::config::alerts::routes;
use crate::ledger::DeliveryKey;
use builder_monitor_core::event::{Event, EventType};

/// Whether `outage` decides who gets an event of this type (failure thresholds, one message per
/// registry outage), so routing by type and builder leaves it alone.
fn outage_decides(event_type: EventType) -> bool {
    matches!(
        event_type,
        EventType::CheckFailed
            | EventType::CheckRecovered
            | EventType::RegistryUnavailable
            | EventType::RegistryRecovered
    )
}

/// The outbox rows of `events`: each event for every alert whose types, builders and packages
/// want it (see [`outage_decides`] for the failure events).
pub fn route(alerts: &[AlertSettings], events: &[Event]) -> Vec<DeliveryKey> {
    events
        .iter()
        .filter(|e| !outage_decides(e.event_type))
        .flat_map(|e| routes(alerts, e).into_iter().map(|a| DeliveryKey::new(e.id.clone(), a)))
        .collect()
}

/// Emits `events`: `write` records them with the deliveries [`route`] gives them (and whatever
/// else its write carries), and each is logged once the write succeeded.
pub async fn emit<T, E, F>(
    alerts: &[AlertSettings],
    events: &[Event],
    write: impl FnOnce(Vec<DeliveryKey>) -> F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
{
    let written = write(route(alerts, events)).await;
    if written.is_ok() {
        emitted(events);
    }
    written
}

/// Logs events a write recorded: for writes that make their events themselves (a freeze numbers
/// its events in its own transaction, routing them with [`route`]).
pub fn emitted(events: &[Event]) {
    events.iter().for_each(crate::event_log::log);
}
