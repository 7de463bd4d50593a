//! The roll-out record: the freeze on action starts and the count of its state changes, and the
//! contract both backends keep for it ([`RolloutControl`]).

use std::future::Future;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::{DeliveryKey, LedgerError};
use builder_monitor_core::event::Event;
use builder_monitor_core::rollout::Freeze;

/// The events of a roll-out state change (a freeze, or its end), made inside the write that
/// records it from the change's sequence number in the roll-out record (1 for the first freeze)
/// and the freeze in force before it. A write that met another may be redone, so it only builds.
pub type FreezeEvents = Arc<dyn Fn(u64, Option<&Freeze>) -> (Vec<Event>, Vec<DeliveryKey>) + Send + Sync>;

/// What a freeze request did.
#[derive(Debug, Clone)]
pub struct FreezeChange {
    /// The freeze in force before it.
    pub before: Option<Freeze>,
    /// The events it recorded: none when the state did not flip.
    pub events: Vec<Event>,
}

/// The events of the roll-out itself (`rollout.frozen`, `rollout.unfrozen`) are kept under this
/// name, beside the watches'.
pub const ROLLOUT_WATCH: &str = "rollout";

/// The roll-out contract.
pub trait RolloutControl {
    /// Freezes (`Some`) or lifts the freeze (`None`) on every action start, in one write. A second
    /// freeze keeps the first one's time and author, and takes its reason when it gives one. When
    /// the state flips, the flip is counted in the roll-out record (which stays when a freeze ends)
    /// and `events` makes its events from that count and the freeze before; they are recorded
    /// under [`ROLLOUT_WATCH`], with their deliveries, in the same write, so two requests never
    /// share a count. Answers the freeze before and the events recorded.
    fn set_freeze(
        &self,
        freeze: Option<Freeze>,
        events: FreezeEvents,
        history: usize,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<FreezeChange, LedgerError>> + Send;

    /// The freeze in force, if any.
    fn freeze_state(&self) -> impl Future<Output = Result<Option<Freeze>, LedgerError>> + Send;
}
