//! Moves of app image tags and their write-ahead intents — the writes actions (and `rollback`)
//! make outside the ledger — and the contract both backends keep for them ([`TagWrites`]).

use std::future::Future;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{DeliveryKey, LedgerError, time};
use builder_monitor_core::event::Event;
use builder_monitor_core::plan::ActionKind;

/// What moved an app image's tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TagMoveKind {
    Rebase,
    Rebuild,
    /// `builder-monitor rollback`.
    Rollback,
}

impl TagMoveKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TagMoveKind::Rebase => "rebase",
            TagMoveKind::Rebuild => "rebuild",
            TagMoveKind::Rollback => "rollback",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Rebase, Self::Rebuild, Self::Rollback].into_iter().find(|k| k.as_str() == text)
    }
}

impl From<ActionKind> for TagMoveKind {
    fn from(kind: ActionKind) -> Self {
        // The kind's table names one of the three (a test reads every kind's).
        TagMoveKind::parse(kind.facts().tag_move).unwrap_or(TagMoveKind::Rollback)
    }
}

/// One move of an app image's tag: the digest before and after, so `rollback` can put it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagMove {
    /// The `[[images]]` name.
    pub image: String,
    /// The tag, `registry/repository:tag`.
    pub reference: String,
    pub kind: TagMoveKind,
    /// The action's key; none for a rollback.
    pub action: Option<String>,
    /// None when the tag did not exist before, or could not be read.
    pub before: Option<String>,
    /// None when it could not be read after (a runner's push that the daemon did not see).
    pub after: Option<String>,
    #[serde(with = "time::millis")]
    pub time: DateTime<Utc>,
    /// Who asked for a rollback (`user@host (cli)`, `NAME (api)`); none for an action's move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The run image the app runs on after the move (`repo@sha256:…`): the action's (the one a
    /// rebase put under it, the builder's for a rebuild), or for a rollback the one recorded with
    /// the move that first made its digest; none when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_image: Option<String>,
}

/// A tag write announced before it happens (write-ahead): what the tag should hold now and what
/// it will hold after, so a crash between the write and its record is completed or retried from
/// here, never forgotten. One per app image at a time (its key), since one action per image runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagIntent {
    /// The `[[images]]` name.
    pub image: String,
    /// The tag, `registry/repository:tag`.
    pub reference: String,
    pub kind: TagMoveKind,
    /// The action's key; none for a rollback.
    pub action: Option<String>,
    /// The digest the tag holds before the write; `None` when it did not exist (or could not be read).
    pub expected: Option<String>,
    /// The digest the write puts there; `None` when a runner's command writes it (a build), whose
    /// digest is only known once it has written.
    pub new: Option<String>,
    #[serde(with = "time::millis")]
    pub time: DateTime<Utc>,
    /// Who asked for a rollback; none for an action's write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl TagIntent {
    /// The move this intent makes once the tag is seen holding `after`.
    pub fn completed(&self, after: Option<String>, time: DateTime<Utc>) -> TagMove {
        TagMove {
            image: self.image.clone(),
            reference: self.reference.clone(),
            kind: self.kind,
            action: self.action.clone(),
            before: self.expected.clone(),
            after,
            time,
            by: self.by.clone(),
            run_image: None,
        }
    }
}

/// Whether a tag write may go ahead (`begin_tag_write`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteGrant {
    /// The intent is recorded: write.
    Granted,
    /// A newer change has an action for the same image: this one must not write (the change's id).
    Superseded { by: String },
    /// The action is no longer `running` (it was requeued or finished elsewhere): nothing written.
    NotRunning,
}

/// The tag-writes contract. An action's tag move and the end of its intent are recorded by
/// [`Actions::finish_action`](super::Actions::finish_action), in the write that ends its attempt.
pub trait TagWrites {
    /// Records a tag write before it happens (write-ahead), replacing the image's open intent.
    /// Refused, writing nothing, when its action is no longer `running` ([`WriteGrant::NotRunning`])
    /// or a newer change has an action for the same image ([`WriteGrant::Superseded`]). An intent
    /// without an action (`rollback`'s) is kept under `watch`, its image's builder (the Kubernetes
    /// ledger keeps it in that entry).
    fn begin_tag_write(
        &self,
        watch: &str,
        intent: TagIntent,
    ) -> impl Future<Output = Result<WriteGrant, LedgerError>> + Send;

    /// The tag writes announced and not recorded as done or as not done, by image: after a crash,
    /// each is completed (the tag holds its digest), retried (it holds the one expected) or failed.
    fn tag_intents(&self) -> impl Future<Output = Result<Vec<TagIntent>, LedgerError>> + Send;

    /// Forgets the open intent on `image` of `action` (a rollback's with `None`): its write did
    /// not happen.
    fn end_tag_write(&self, image: &str, action: Option<&str>) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// Records a tag move made outside an action (`rollback`) under `watch` (the image's builder),
    /// keeping the image's newest `history` moves (at least one), and ends the image's rollback
    /// intent, in one write.
    fn record_tag_move(
        &self,
        watch: &str,
        tag_move: TagMove,
        history: usize,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// [`record_tag_move`](Self::record_tag_move) of a rollback with its events (`image.rolled_back`)
    /// and their outbox rows ([`Outbox::record_events`](super::Outbox::record_events)), in one write:
    /// the move is never on the record without its alert, nor the alert without the move.
    fn record_rollback(
        &self,
        watch: &str,
        tag_move: TagMove,
        events: Vec<Event>,
        deliveries: Vec<DeliveryKey>,
        history: usize,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// The newest tag moves first, of one `[[images]]` name or of all, at most `limit`.
    fn tag_moves(
        &self,
        image: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<TagMove>, LedgerError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_names_a_tag_move() {
        for kind in ActionKind::ALL {
            assert!(TagMoveKind::parse(kind.facts().tag_move).is_some(), "{kind:?}");
        }
    }
}
