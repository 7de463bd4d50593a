//! `rollback`: moves an app image's tag back to a digest the ledger recorded for it (the one before
//! its last rebase or rebuild, or another), by a PUT of that manifest's own bytes: nothing rebuilt.
//! The most sensitive write there is, so it is on the record: who asked (`by`, as a freeze keeps),
//! one log line, and `image.rolled_back` through the alerts, in the same ledger write as the move.

use chrono::{DateTime, Utc};

use crate::config::{Config, ImageSettings};
use crate::ledger::{Ledger, LedgerError, TagIntent, TagMove, TagMoveKind};
use crate::registry::{Registry, RegistryError};
use crate::signing::{Already, EnsureError, SigningService, ToSign};
use builder_monitor_core::event::{Event, EventType, ImageRollback, Pin, Subject, stable_id};
use builder_monitor_core::reference::{DigestInput, ImageRef, PrefixError, resolve_digest};
use builder_monitor_core::schedule::timestamp;
use builder_monitor_core::signing::Descriptor;

/// Why a rollback did not happen. Nothing was written in any of these cases.
#[derive(Debug, thiserror::Error)]
pub enum RollbackError {
    #[error("no image \"{image}\" in [[images]] (configured: {})", configured.join(", "))]
    UnknownImage { image: String, configured: Vec<String> },
    #[error("--to {0}: not a digest (sha256:<64 hex digits>, or its first 12 or more)")]
    InvalidDigest(String),
    #[error("--to {0}")]
    Prefix(#[from] PrefixError),
    #[error("the ledger records no rebase or rebuild that moved {image} ({reference}): nothing to roll back to")]
    NothingRecorded { image: String, reference: String },
    #[error(
        "the ledger has no digest of {image} from before its last {kind} (the tag did not exist, or could not be read then); name one with --to"
    )]
    NoPrevious { image: String, kind: &'static str },
    #[error("{digest} is not a digest recorded for {image} (recorded: {})", recorded.join(", "))]
    NotRecorded { image: String, digest: String, recorded: Vec<String> },
    #[error("{digest} is no longer in {repository}: {source}")]
    Gone { digest: String, repository: String, source: RegistryError },
    #[error(
        "{reference} points at {}, but the ledger's last recorded move left it at {recorded}: someone else moved it; nothing written (name the digest to go to with --to)",
        found.as_deref().unwrap_or("nothing (the tag does not exist)")
    )]
    NotWhereRecorded { reference: String, found: Option<String>, recorded: String },
    #[error(
        "an earlier rollback of {reference} ({} -> {wanted}) was interrupted, and the tag now holds {}: someone else moved it; nothing written",
        expected.as_deref().unwrap_or("nothing"),
        found.as_deref().unwrap_or("nothing")
    )]
    Interrupted { reference: String, expected: Option<String>, wanted: String, found: Option<String> },
    #[error("{image}: the registry stored the manifest as {stored}, not {wanted}; the tag now points at {stored}")]
    Mismatch { image: String, wanted: String, stored: String },
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("{0}; the tag was left alone")]
    Sign(#[from] Box<crate::signing::SignError>),
    #[error("cannot sign the target: {0}; the tag was left alone")]
    Unsigned(String),
}

/// What a rollback did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rollback {
    /// The `[[images]]` name.
    pub image: String,
    /// The tag.
    pub reference: String,
    /// Where the tag pointed before (`None`: the tag did not exist).
    pub from: Option<String>,
    pub to: String,
    /// The recorded move whose `before` was chosen (none with `--to`).
    pub undone: Option<TagMove>,
    /// False when the tag already pointed at `to`: nothing was written or recorded.
    pub moved: bool,
    /// Our signature of `to`, written before the tag moved back when it carried none by our key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed: Option<crate::signing::Signed>,
    /// Who asked, as recorded with the move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// The `[[images]]` entry named `name`, or whose tag is `name`.
pub fn configured_image<'a>(config: &'a Config, name: &str) -> Result<&'a ImageSettings, RollbackError> {
    let by_tag = || {
        let tag = ImageRef::parse(name).ok()?.to_string();
        config.images.iter().find(|i| i.image.to_string() == tag)
    };
    config
        .image(name)
        .or_else(by_tag)
        .ok_or_else(|| RollbackError::UnknownImage { image: name.to_string(), configured: config.image_names() })
}

/// The digest to roll `image` back to: `to` (a digest, or a unique prefix of one) when it is one the
/// ledger recorded for it, else the one before its last rebase or rebuild (`moves` newest first).
/// Pure, for the tests.
pub fn choose(image: &str, moves: &[TagMove], to: Option<&str>) -> Result<(String, Option<TagMove>), RollbackError> {
    if let Some(to) = to {
        let input = DigestInput::parse(to).ok_or_else(|| RollbackError::InvalidDigest(to.to_string()))?;
        let mut recorded: Vec<String> = Vec::new();
        for d in moves.iter().flat_map(|m| [m.after.clone(), m.before.clone()]).flatten() {
            if !recorded.contains(&d) {
                recorded.push(d);
            }
        }
        // A short digest names one of these, or nothing: the ledger is where rollback targets come from.
        let within = format!("the digests recorded for {image}");
        let digest = resolve_digest(&input, recorded.iter().map(String::as_str), &within)?;
        if !recorded.contains(&digest) {
            return Err(RollbackError::NotRecorded { image: image.to_string(), digest, recorded });
        }
        return Ok((digest, None));
    }
    // A rollback is not undone by the next one: the last action's `before` stays the target, so
    // running it twice changes nothing the second time.
    let last =
        moves.iter().find(|m| m.kind != TagMoveKind::Rollback).ok_or_else(|| RollbackError::NothingRecorded {
            image: image.to_string(),
            reference: moves.first().map(|m| m.reference.clone()).unwrap_or_default(),
        })?;
    match &last.before {
        Some(before) => Ok((before.clone(), Some(last.clone()))),
        None => Err(RollbackError::NoPrevious { image: image.to_string(), kind: last.kind.as_str() }),
    }
}

/// Moves the tag of `image` back (see the module doc) at the request of `by`, and records the move
/// and its event in the ledger.
#[allow(clippy::too_many_arguments)]
pub async fn rollback(
    config: &Config,
    ledger: &Ledger,
    registry: &Registry,
    signing: Option<&SigningService>,
    image: &ImageSettings,
    to: Option<&str>,
    by: &str,
    now: DateTime<Utc>,
) -> Result<Rollback, RollbackError> {
    let history = config.monitor.history;
    for intent in ledger.tag_intents().await? {
        if intent.image == image.name && intent.action.is_none() {
            settle(config, ledger, registry, image, &intent, now).await?;
        }
    }
    let moves = ledger.tag_moves(Some(&image.name), history.max(1)).await?;
    if moves.is_empty() && to.is_none() {
        return Err(RollbackError::NothingRecorded { image: image.name.clone(), reference: image.image.to_string() });
    }
    let (target, undone) = choose(&image.name, &moves, to)?;
    let from = match registry.head_manifest(&image.image).await {
        Ok(head) => Some(head.digest),
        Err(RegistryError::NotFound { .. }) => None,
        Err(err) => return Err(err.into()),
    };
    let mut done = Rollback {
        image: image.name.clone(),
        reference: image.image.to_string(),
        from: from.clone(),
        to: target.clone(),
        undone,
        moved: false,
        signed: None,
        by: Some(by.to_string()),
    };
    // Only from where the ledger says the tag is: an unrecorded move in between would make "the
    // digest before the last move" two steps back.
    if to.is_none()
        && let Some(recorded) = moves.first().and_then(|m| m.after.clone())
        && from.as_deref() != Some(recorded.as_str())
    {
        return Err(RollbackError::NotWhereRecorded { reference: image.image.to_string(), found: from, recorded });
    }
    if from.as_deref() == Some(target.as_str()) {
        return Ok(done);
    }
    let manifest = registry.get_manifest(&image.image, &target).await.map_err(|source| RollbackError::Gone {
        digest: target.clone(),
        repository: format!("{}/{}", image.image.registry(), image.image.repository()),
        source,
    })?;
    let tag = image.image.manifest_reference().to_string();
    let intent = TagIntent {
        image: image.name.clone(),
        reference: image.image.to_string(),
        kind: TagMoveKind::Rollback,
        action: None,
        expected: from,
        new: Some(target.clone()),
        time: now,
        by: Some(by.to_string()),
    };
    // Recorded before the write: a crash after the PUT is completed by the next rollback or start.
    ledger.begin_tag_write(&image.builder, intent.clone()).await?;
    let subject = Descriptor::of(&manifest.media_type, &manifest.bytes);
    done.signed = sign_restored(signing, registry, &image.image, &subject, done.from.as_deref(), now).await?;
    let stored = registry.put_manifest(&image.image, &tag, &manifest.media_type, manifest.bytes).await?;
    if stored != target {
        return Err(RollbackError::Mismatch { image: image.name.clone(), wanted: target, stored });
    }
    let trail = Trail {
        undone: done.undone.as_ref().map(undone_text),
        labelled: labelled_run_image(registry, config, image, &target).await,
    };
    record(config, ledger, image, &intent, Some(target), trail, now).await?;
    done.moved = true;
    Ok(done)
}

/// `rebase (action bm-…)`: the move a rollback undid, as its event and log line say it.
fn undone_text(m: &TagMove) -> String {
    match &m.action {
        Some(action) => format!("{} (action {action})", m.kind.as_str()),
        None => m.kind.as_str().to_string(),
    }
}

/// The run image the app at `digest` was built on or rebased onto, as its CNB metadata names it
/// (`repo@sha256:…`); none when it cannot be read or names none (best effort: only shown).
async fn labelled_run_image(
    registry: &Registry,
    config: &Config,
    image: &ImageSettings,
    digest: &str,
) -> Option<String> {
    let app =
        crate::inspect::app_metadata(registry, &image.image.at_digest(digest), config.monitor.max_platforms).await;
    let metadata = app.ok()??.metadata.ok()??;
    let run = metadata.run_image?;
    let reference = run.reference.as_deref()?;
    let digest = metadata_digest(reference)?;
    // The repository from `repo@sha256:…`, else from the run image's name (its tag dropped).
    let named = reference.split_once('@').map(|(repo, _)| repo.to_string()).or_else(|| {
        let image = ImageRef::parse(run.image.as_deref()?).ok()?;
        Some(format!("{}/{}", image.registry(), image.repository()))
    });
    Some(format!("{}@{digest}", named?))
}

/// The digest of a run image reference (`repo@sha256:…`, or a bare digest).
fn metadata_digest(reference: &str) -> Option<&str> {
    let digest = reference.rsplit('@').next()?;
    builder_monitor_core::reference::is_sha256_digest(digest).then_some(digest)
}

/// What a rollback's record says besides its move: the move it undid (`rebase (action bm-…)`),
/// and the run image the app's labels name at the digest it went back to.
struct Trail {
    undone: Option<String>,
    labelled: Option<String>,
}

/// Records the rollback `intent` made (the tag now holds `after`) with its `image.rolled_back`,
/// routed to the alerts that want it, in one write; then logs it (the event's line).
async fn record(
    config: &Config,
    ledger: &Ledger,
    image: &ImageSettings,
    intent: &TagIntent,
    after: Option<String>,
    trail: Trail,
    now: DateTime<Utc>,
) -> Result<(), LedgerError> {
    let Trail { undone, labelled } = trail;
    let history = config.monitor.history.max(1);
    let mut moved = intent.completed(after, now);
    // Back on a digest a recorded move made: back on the run image that move left it on.
    let earlier = ledger.tag_moves(Some(&image.name), history).await?;
    moved.run_image = earlier
        .into_iter()
        .find(|m| m.after.is_some() && m.after == moved.after)
        .and_then(|m| m.run_image)
        .or(labelled);
    let events = vec![rolled_back_event(config, image, &moved, intent.time, undone)];
    crate::alert::emit(&config.alerts, &events, |deliveries| {
        ledger.record_rollback(&image.builder, moved, events.clone(), deliveries, history, now)
    })
    .await
}

/// `image.rolled_back` for move `m` of `image`, begun at `started` (its intent's time, so a
/// rollback a crash interrupted keeps its event's id when its move is recorded at the next start).
fn rolled_back_event(
    config: &Config,
    image: &ImageSettings,
    m: &TagMove,
    started: DateTime<Utc>,
    undone: Option<String>,
) -> Event {
    let pin = |digest: &Option<String>| {
        digest.as_ref().map(|d| Pin {
            digest: d.clone(),
            reference: image.image.pinned(d),
            platforms: Default::default(),
        })
    };
    let started = timestamp(started);
    let (before, after) = (m.before.as_deref().unwrap_or(""), m.after.as_deref().unwrap_or(""));
    let id = stable_id(&[&image.name, EventType::ImageRolledBack.as_str(), before, after, &started]);
    let builder_image = config.builder(&image.builder).map(|b| b.image.to_string()).unwrap_or_default();
    let subject = Subject { name: image.builder.clone(), image: builder_image };
    let mut e = Event::new(id, EventType::ImageRolledBack, timestamp(m.time), subject);
    e.previous = pin(&m.before);
    e.current = pin(&m.after);
    e.rolled_back = Some(ImageRollback {
        image: image.name.clone(),
        reference: m.reference.clone(),
        by: m.by.clone().unwrap_or_else(|| "unknown".into()),
        undone,
    });
    e
}

/// Signs `target` before the tag goes back to it, when `[signing]` has a key and `target` carries
/// no valid signature by it (an admission policy would refuse it otherwise); attested as a
/// rollback from `from`. `None` when nothing needed signing.
async fn sign_restored(
    signing: Option<&SigningService>,
    registry: &Registry,
    image: &ImageRef,
    subject: &Descriptor,
    from: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Option<crate::signing::Signed>, RollbackError> {
    let Some(signing) = signing else { return Ok(None) };
    let provenance = || builder_monitor_core::signing::Provenance {
        from: from.map(str::to_string),
        ..crate::signing::provenance("rollback", image)
    };
    let to = ToSign { image, digest: subject.digest.as_str(), already: Already::Own, created: now };
    match signing.ensure_signed(registry, to, provenance, || std::future::ready(Ok(subject.clone()))).await {
        Ok(signed) => Ok(signed),
        Err(EnsureError::Verify { source, .. }) => Err(RollbackError::Registry(source)),
        Err(EnsureError::Sign(error)) => Err(RollbackError::Sign(Box::new(error))),
        Err(EnsureError::Precondition(why)) => Err(RollbackError::Unsigned(why)),
    }
}

/// Settles a rollback's intent (of `image`) left open by a crash: recorded as the move it made,
/// with its event, when the tag holds its digest, forgotten when the tag still holds the one
/// before, an error naming both when it holds a third (the intent is forgotten too: the error says
/// all there is). Answers whether the write had landed.
pub async fn settle(
    config: &Config,
    ledger: &Ledger,
    registry: &Registry,
    image: &ImageSettings,
    intent: &TagIntent,
    now: DateTime<Utc>,
) -> Result<bool, RollbackError> {
    let reference = ImageRef::parse(&intent.reference).map_err(|e| {
        RollbackError::Ledger(LedgerError::Corrupt { what: "tag intent", detail: format!("{}: {e}", intent.reference) })
    })?;
    let found = match registry.head_manifest(&reference).await {
        Ok(head) => Some(head.digest),
        Err(RegistryError::NotFound { .. }) => None,
        Err(err) => return Err(err.into()),
    };
    if found.is_some() && found == intent.new {
        let labelled = match &found {
            Some(digest) => labelled_run_image(registry, config, image, digest).await,
            None => None,
        };
        record(config, ledger, image, intent, found, Trail { undone: None, labelled }, now).await?;
        return Ok(true);
    }
    ledger.end_tag_write(&intent.image, None).await?;
    if found == intent.expected {
        return Ok(false);
    }
    Err(RollbackError::Interrupted {
        reference: intent.reference.clone(),
        expected: intent.expected.clone(),
        wanted: intent.new.clone().unwrap_or_default(),
        found,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const C: &str = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

    fn moved(kind: TagMoveKind, before: Option<&str>, after: &str) -> TagMove {
        TagMove {
            image: "app".into(),
            reference: "r.example/apps/app:latest".into(),
            kind,
            action: (kind != TagMoveKind::Rollback).then(|| "bm-1".into()),
            before: before.map(str::to_string),
            after: Some(after.into()),
            time: DateTime::UNIX_EPOCH,
            by: (kind == TagMoveKind::Rollback).then(|| "ana@ci-7 (cli)".into()),
            run_image: None,
        }
    }

    #[test]
    fn the_target_is_the_digest_before_the_last_action_never_undoing_a_rollback() {
        // Newest first: A → B (rebuild), B → C (rebase), then a rollback C → B.
        let mut moves = vec![moved(TagMoveKind::Rebase, Some(B), C), moved(TagMoveKind::Rebuild, Some(A), B)];
        assert_eq!(choose("app", &moves, None).unwrap().0, B);
        moves.insert(0, moved(TagMoveKind::Rollback, Some(C), B));
        let (target, undone) = choose("app", &moves, None).unwrap();
        assert_eq!((target.as_str(), undone.unwrap().kind), (B, TagMoveKind::Rebase));
        // --to: any digest recorded before or after a move.
        assert_eq!(choose("app", &moves, Some(A)).unwrap(), (A.to_string(), None));
    }

    #[test]
    fn a_short_digest_names_one_recorded_digest_or_is_refused() {
        const B2: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb2";
        let moves = vec![moved(TagMoveKind::Rebase, Some(B), C), moved(TagMoveKind::Rebuild, Some(A), B)];
        assert_eq!(choose("app", &moves, Some("sha256:cccccccccccc")).unwrap(), (C.to_string(), None));
        assert_eq!(choose("app", &moves, Some("aaaaaaaaaaaaaaa")).unwrap(), (A.to_string(), None));
        let none = choose("app", &moves, Some("sha256:dddddddddddd")).unwrap_err();
        assert_eq!(none.to_string(), "--to sha256:dddddddddddd matches none of the digests recorded for app");
        let with_b2 = [moved(TagMoveKind::Rebase, Some(B2), C), moves[0].clone(), moves[1].clone()];
        let ambiguous = choose("app", &with_b2, Some("sha256:bbbbbbbbbbbb")).unwrap_err().to_string();
        assert!(ambiguous.contains("is ambiguous: it matches 2 of the digests recorded for app"), "{ambiguous}");
        assert!(ambiguous.contains(B) && ambiguous.contains(B2), "{ambiguous}");
        let short = choose("app", &moves, Some("sha256:ccccccccccc")).unwrap_err();
        assert!(matches!(short, RollbackError::InvalidDigest(_)), "11 digits are too few: {short}");
    }

    #[test]
    fn what_cannot_be_rolled_back_is_said() {
        let none = choose("app", &[], None).unwrap_err();
        assert!(matches!(none, RollbackError::NothingRecorded { .. }), "{none}");
        let created = [moved(TagMoveKind::Rebuild, None, A)];
        let err = choose("app", &created, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the ledger has no digest of app from before its last rebuild (the tag did not exist, or could not be read then); name one with --to"
        );
        let err = choose("app", &created, Some(B)).unwrap_err();
        assert_eq!(err.to_string(), format!("{B} is not a digest recorded for app (recorded: {A})"));
        let err = choose("app", &created, Some("latest")).unwrap_err();
        assert_eq!(err.to_string(), "--to latest: not a digest (sha256:<64 hex digits>, or its first 12 or more)");
    }
}
