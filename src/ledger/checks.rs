//! Checks and pins: each watch's entry (its pin, the CNB metadata recorded with it, its last
//! check), its pin history, its accepted moves (changes), and the contract both backends keep for
//! them ([`Checks`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::future::Future;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::{DeliveryKey, LedgerError, NewAction, time};
use builder_monitor_core::cnb::{Change, PinnedMetadata};
use builder_monitor_core::event::Event;

/// What a watch follows: a builder's tag, or a run image's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchKind {
    Builder,
    RunImage,
}

impl WatchKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchKind::Builder => "builder",
            WatchKind::RunImage => "run_image",
        }
    }
}

/// The current pin of a watch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PinRecord {
    pub digest: String,
    pub reference: String,
    pub media_type: String,
    pub platforms: BTreeMap<String, String>,
    #[serde(with = "time::seconds")]
    pub since: DateTime<Utc>,
}

/// Everything the ledger knows about one watch.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct WatchRecord {
    pub name: String,
    pub kind: WatchKind,
    pub image: String,
    pub pin: Option<PinRecord>,
    /// The CNB metadata recorded with the pin; read it with [`WatchRecord::pinned_metadata`].
    pub metadata: Option<PinMetadata>,
    #[serde(with = "time::seconds")]
    pub first_seen: DateTime<Utc>,
    #[serde(default, with = "time::seconds_opt")]
    pub last_check: Option<DateTime<Utc>>,
    pub last_ok: Option<bool>,
    pub last_error_reason: Option<String>,
    pub last_error: Option<String>,
    #[serde(default, with = "time::seconds_opt")]
    pub last_change: Option<DateTime<Utc>>,
    pub consecutive_failures: u32,
    #[serde(default, with = "time::seconds_opt")]
    pub failing_since: Option<DateTime<Utc>>,
    /// A new digest held back by `settle`.
    pub pending: Option<HeldDigest>,
    /// Accepted moves so far; the next change's sequence number is this plus one.
    pub moves: u64,
    /// Runs of failed checks of this image so far (a failure after a success starts one): the
    /// current or last run's number, which its `check.failed` and `check.recovered` ids name.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failure_runs: u64,
}

pub(super) fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl WatchRecord {
    /// Its last check succeeded and left nothing behind (no failure, no held digest): the next
    /// check that finds the pin again only moves its time ([`CheckRecord::only_moves_time`]).
    pub fn is_steady(&self) -> bool {
        self.last_check.is_some()
            && self.last_ok == Some(true)
            && self.consecutive_failures == 0
            && self.failing_since.is_none()
            && self.last_error_reason.is_none()
            && self.last_error.is_none()
            && self.pending.is_none()
    }

    /// What start-up needs of this entry ([`Checks::pins`]); decodes the metadata.
    pub fn summary(&self) -> PinSummary {
        PinSummary {
            name: self.name.clone(),
            kind: self.kind,
            image: self.image.clone(),
            digest: self.pin.as_ref().map(|p| p.digest.clone()),
            steady: self.is_steady(),
            run_image: self.metadata.as_ref().and_then(PinMetadata::run_image),
        }
    }

    /// The CNB metadata recorded with the pin, if any could be read.
    pub fn pinned_metadata(&self) -> Option<PinnedMetadata> {
        self.metadata.as_ref()?.read().map(Cow::into_owned)
    }
}

/// The CNB metadata of a pin: as a check read it, or as the ledger holds it, decoded only when it
/// is read ([`PinMetadata::read`]). A check reads its watch's entry every time and looks at the
/// metadata only when the pin moves, so an entry's read does not decode it (a run image's package
/// lists run to thousands of entries).
///
/// Both backends keep it as JSON; the text they hold is carried as it is (an entry re-pinned with
/// the same metadata writes it back unchanged) and never shown to callers.
#[derive(Debug, Clone)]
pub struct PinMetadata(Form);

#[derive(Debug, Clone)]
enum Form {
    Read(Box<PinnedMetadata>),
    Stored(Box<RawValue>),
}

impl From<PinnedMetadata> for PinMetadata {
    fn from(metadata: PinnedMetadata) -> Self {
        PinMetadata(Form::Read(Box::new(metadata)))
    }
}

impl PinMetadata {
    /// The metadata; `None` when what the ledger holds does not read as [`PinnedMetadata`] (written
    /// by another version, say), as when none was recorded.
    pub fn read(&self) -> Option<Cow<'_, PinnedMetadata>> {
        match &self.0 {
            Form::Read(m) => Some(Cow::Borrowed(m)),
            Form::Stored(text) => serde_json::from_str(text.get()).ok().map(Cow::Owned),
        }
    }

    /// The notes kept with the pin, read without the rest of the metadata (`status` lists them for
    /// every builder).
    pub fn notes(&self) -> Vec<String> {
        #[derive(Deserialize)]
        struct Notes {
            #[serde(default)]
            notes: Vec<serde_json::Value>,
        }
        match &self.0 {
            Form::Read(m) => m.notes.clone(),
            Form::Stored(text) => serde_json::from_str::<Notes>(text.get())
                .map(|n| n.notes.into_iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
                .unwrap_or_default(),
        }
    }

    /// Metadata a backend holds as this JSON text; an error when the text is not JSON.
    /// The run image the builder metadata names ([`PinnedMetadata::preferred`]'s first), as
    /// [`PinSummary::run_image`] keeps it.
    pub fn run_image(&self) -> Option<String> {
        self.read()?.preferred()?.run_image().map(str::to_string)
    }

    pub(super) fn stored(text: String) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text).map(|raw| PinMetadata(Form::Stored(raw)))
    }

    /// The JSON text a backend stores: what it holds, as it holds it, or new metadata encoded with
    /// its keys sorted, as the ledger has always written it. `None` when it cannot be encoded (then
    /// no metadata is recorded, as before).
    pub(super) fn to_json(&self) -> Option<Cow<'_, str>> {
        match &self.0 {
            Form::Stored(text) => Some(Cow::Borrowed(text.get())),
            Form::Read(m) => serde_json::to_value(m).ok().map(|v| Cow::Owned(v.to_string())),
        }
    }
}

/// Equal when they hold the same metadata (the same text, when both are stored).
impl PartialEq for PinMetadata {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Form::Stored(a), Form::Stored(b)) => a.get() == b.get(),
            _ => self.read() == other.read(),
        }
    }
}

/// Written as the JSON it stands for (the Kubernetes ledger keeps it inside the watch's entry).
impl Serialize for PinMetadata {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Form::Stored(text) => text.serialize(s),
            // Through a value, whose maps are sorted: the text the ledger has always written.
            Form::Read(m) => serde_json::to_value(m).map_err(serde::ser::Error::custom)?.serialize(s),
        }
    }
}

/// Read as the JSON text it is, not decoded (see [`PinMetadata`]).
impl<'de> Deserialize<'de> for PinMetadata {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(d).map(|raw| PinMetadata(Form::Stored(raw)))
    }
}

/// What start-up needs of a watch's entry, without its metadata ([`Checks::pins`]): the daemon
/// keeps each pin in memory from it, and learns which run images to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinSummary {
    pub name: String,
    pub kind: WatchKind,
    pub image: String,
    /// The pinned digest, if any.
    pub digest: Option<String>,
    /// As [`WatchRecord::is_steady`].
    pub steady: bool,
    /// As [`PinMetadata::run_image`] of the pinned metadata.
    pub run_image: Option<String>,
}

/// A new pin to record.
#[derive(Debug, Clone)]
pub struct PinUpdate {
    pub digest: String,
    pub reference: String,
    pub media_type: String,
    pub platforms: BTreeMap<String, String>,
    pub metadata: Option<PinMetadata>,
}

/// An accepted move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ChangeRecord {
    pub id: String,
    pub watch: String,
    pub seq: u64,
    pub previous: String,
    pub current: String,
    pub previous_reference: String,
    pub current_reference: String,
    pub change: Change,
    pub rollback: bool,
    #[serde(with = "time::seconds")]
    pub detected: DateTime<Utc>,
}

/// Why a check failed: its reason code (`tag_missing`, …) and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckFailure {
    pub reason: String,
    pub message: String,
}

/// A new digest held back by `settle`, and since when it has been seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldDigest {
    pub digest: String,
    pub since: DateTime<Utc>,
}

/// Stored as the pair `[digest, since]` the Kubernetes ledger has always kept.
impl Serialize for HeldDigest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (&self.digest, builder_monitor_core::schedule::timestamp(self.since)).serialize(s)
    }
}

impl<'de> Deserialize<'de> for HeldDigest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (digest, since) = <(String, String)>::deserialize(d)?;
        let since = builder_monitor_core::schedule::parse_timestamp(&since)
            .ok_or_else(|| serde::de::Error::custom(format!("not an RFC 3339 time: {since:?}")))?;
        Ok(HeldDigest { digest, since })
    }
}

/// A digest a watch was pinned to, and when it was first seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedDigest {
    pub digest: String,
    pub first_seen: DateTime<Utc>,
    /// The digests of its platform manifests (an index's; empty for a single manifest, and for
    /// pins recorded before the ledger kept them).
    pub platforms: Vec<String>,
}

/// The outcome of one check, committed atomically.
#[derive(Debug, Clone)]
pub struct CheckRecord {
    pub watch: String,
    pub kind: WatchKind,
    pub image: String,
    /// When the check ran, to the second (as events and `status` show it).
    pub time: DateTime<Utc>,
    pub outcome: Result<(), CheckFailure>,
    pub pin: Option<PinUpdate>,
    /// Digest held back by `settle`; `None` clears it.
    pub pending: Option<HeldDigest>,
    pub change: Option<ChangeRecord>,
    pub events: Vec<Event>,
    /// The outbox rows of the events above.
    pub deliveries: Vec<DeliveryKey>,
    /// Rebases and rebuilds planned for the change above.
    pub actions: Vec<NewAction>,
    /// Changes (and pinned digests) kept for this watch.
    pub history: usize,
}

impl CheckRecord {
    /// Whether committing this record over `before` (the watch's entry) would change nothing but
    /// its `last_check`: a successful check that found what the ledger holds. Such a check is kept
    /// as a [`Touch`] and written with the next batch, not at once.
    pub fn only_moves_time(&self, before: Option<&WatchRecord>) -> bool {
        let Some(b) = before else { return false };
        self.is_quiet()
            && b.kind == self.kind
            && b.image == self.image
            && b.last_check.is_some()
            && b.last_ok == Some(true)
            && b.consecutive_failures == 0
            && b.failing_since.is_none()
            && b.last_error_reason.is_none()
            && b.last_error.is_none()
            && b.pending == self.pending
    }

    /// A successful check that adds nothing: no pin, change, event, delivery or action.
    pub fn is_quiet(&self) -> bool {
        self.outcome.is_ok()
            && self.pin.is_none()
            && self.change.is_none()
            && self.events.is_empty()
            && self.deliveries.is_empty()
            && self.actions.is_empty()
    }
}

/// The time of a successful check that changed nothing else, not yet written: the ledger keeps
/// these in memory and writes them in batches (see `Ledger::flush_touches`).
#[derive(Debug, Clone, PartialEq, Eq)]
/// Shared strings: a fleet keeps one touch per steady watch between writes, and the name is also
/// the touch's key and the image the steady pin's (`monitor::pins`), not copies of them.
pub struct Touch {
    pub watch: std::sync::Arc<str>,
    /// The watch's image when checked: a touch never lands on an entry of another image.
    pub image: std::sync::Arc<str>,
    pub time: DateTime<Utc>,
}

/// The checks-and-pins contract: what both backends do with watches' entries, their pin history
/// and their changes.
pub trait Checks {
    /// The entry of watch `name` as last written (`None` before its first commit); its metadata is
    /// not decoded (see [`PinMetadata`]).
    fn watch(&self, name: &str) -> impl Future<Output = Result<Option<WatchRecord>, LedgerError>> + Send;

    /// Every watch's entry, by name.
    fn watches(&self) -> impl Future<Output = Result<Vec<WatchRecord>, LedgerError>> + Send;

    /// The entries of the watches whose last check failed (what a registry's outage state starts
    /// from), by name, without reading the others where the backend can: reading every entry of
    /// 10,000 pinned builders, metadata and all, held ~250 MiB at the first check after a restart.
    fn failing_watches(&self) -> impl Future<Output = Result<Vec<WatchRecord>, LedgerError>> + Send;

    /// Every watch's [`PinSummary`], by name, in one read that decodes no metadata where the
    /// backend can (SQLite keeps the run image's name in a column of its own): what the daemon
    /// reads at start-up, 10,000 builders' entries in one query.
    fn pins(&self) -> impl Future<Output = Result<Vec<PinSummary>, LedgerError>> + Send;

    /// Whether `digest` was ever pinned for this watch, within the kept history (the newest
    /// `history + 1` pins).
    fn has_pinned(&self, watch: &str, digest: &str) -> impl Future<Output = Result<bool, LedgerError>> + Send;

    /// The most recently pinned digests of a watch (newest pin first), at most `limit`, each with
    /// when it was first seen and its platform manifests.
    fn history(&self, watch: &str, limit: usize)
    -> impl Future<Output = Result<Vec<PinnedDigest>, LedgerError>> + Send;

    /// Writes the times of unchanged checks: each moves only `last_check`, forward, on a
    /// succeeding entry of the same image, so whatever was committed since it was taken wins. One
    /// transaction for all (SQLite) or one write per watch (Kubernetes, whose entries are objects).
    fn touch(&self, touches: &[Touch]) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// Commits a check's outcome in one write: the entry's last check (result, error, failures in
    /// a row and since when, runs of failures counted per image: a new image starts at none), its
    /// held digest, the new pin (the digest history keeps the newest `history + 1` pins, each with
    /// its platform manifests), the change (recorded once per id, the newest `history` kept,
    /// `moves` and `last_change` following it), the actions (each (change, image) once; every
    /// action of another change for the same image not started yet — pending, held or awaiting
    /// approval — is superseded), the events and their deliveries (see
    /// [`Outbox::record_events`](super::Outbox::record_events)).
    ///
    /// `touches` (see [`Checks::touch`]) are written with it: in the same transaction (SQLite), or
    /// after it (Kubernetes). So are supersessions of actions another Kubernetes entry holds: a
    /// crash between the writes leaves an older action pending; it runs before the newer one,
    /// which still runs last.
    fn commit(&self, record: CheckRecord, touches: &[Touch]) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// Most recent changes first (by detection time, then sequence number), of one watch or of all
    /// (`None`), at most `limit`.
    fn changes(
        &self,
        watch: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<ChangeRecord>, LedgerError>> + Send;
}
