//! `status`'s app images: each `[[images]]` entry with the last moves of its tag and its newest
//! action of any kind (rebase, rebuild or deploy), whatever state it ended in.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::short;
use crate::config::Config;
use crate::ledger::{ActionRecord, ActionState, LatestAction, Ledger, LedgerError, TagMove, TagMoveKind};
use builder_monitor_core::event::EventType;
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::schedule::timestamp_millis;
use builder_monitor_core::signing::{self, SignatureInfo};
use builder_monitor_core::text::{LINE, escape, fit};

/// An app image and the last moves of its tag.
#[derive(Debug, Clone, Serialize)]
pub struct ImageStatus {
    pub name: String,
    pub image: String,
    /// Where the last recorded move left the tag (`null`: none recorded, or not read).
    pub digest: Option<String>,
    /// Where it pointed before that move (what `rollback` returns to after a rebase or rebuild).
    pub previous: Option<String>,
    /// Newest first.
    pub moves: Vec<TagMoveStatus>,
    /// Its newest rebase, rebuild or deploy, in whatever state (`null`: none recorded).
    pub last_action: Option<ImageAction>,
    /// The key id that signed its current digest as the ledger last saw it (our key's after we
    /// signed, a trusted key's after a check passed); `null`: unknown or not signed.
    pub signed: Option<String>,
    /// Whether a check found its current digest unsigned or its signatures invalid.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unsigned: bool,
    /// The `.sig` and `.att` manifests its newest action wrote (`null`: it signed nothing).
    pub signature: Option<String>,
    pub attestation: Option<String>,
}

/// An app image's newest action, as much of it as says where the image stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageAction {
    pub key: String,
    pub change: String,
    /// `rebase`, `rebuild` or `deploy`.
    pub action: String,
    /// The ledger's state (what the page's colours follow).
    #[serde(skip)]
    pub state: ActionState,
    /// The state as every view shows it (`queued`, `waiting`, …: [`crate::ledger::shown_state`]).
    #[serde(rename = "state")]
    pub shown: &'static str,
    /// When it last moved.
    #[serde(with = "crate::ledger::time::millis")]
    pub updated: DateTime<Utc>,
    /// Why it failed, was held, superseded or skipped.
    pub detail: Option<String>,
    /// Who approved or rejected it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// It holds its image (a failed or overridden deploy) until a newer change or `release`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub holds: bool,
    /// The pool a build ran (or runs) in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

impl ImageAction {
    fn of(r: &ActionRecord, gated: &BTreeSet<&str>) -> Self {
        ImageAction {
            key: r.key.clone(),
            change: r.change.clone(),
            action: r.action.as_str().into(),
            state: r.state,
            shown: r.shown_state(gated.contains(r.key.as_str())),
            updated: r.updated,
            detail: r.detail.clone(),
            decided_by: r.decided_by.clone(),
            holds: r.holds,
            pool: crate::ledger::placed(r.progress.as_ref()).map(|p| p.pool),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct TagMoveStatus {
    pub time: String,
    pub kind: TagMoveKind,
    pub action: Option<String>,
    pub previous: Option<String>,
    pub digest: Option<String>,
    /// Who asked for a rollback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The run image the move left the app on (`repo@sha256:…`), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_image: Option<String>,
}

/// Tag moves shown per app image.
const MOVES_SHOWN: usize = 5;

/// Each `[[images]]` entry in config order, with its newest action among `latest`; `gated` are the
/// keys of the pending actions a roll-out gate keeps back.
pub(super) async fn collect(
    config: &Config,
    ledger: &Ledger,
    latest: &[LatestAction],
    gated: &BTreeSet<&str>,
) -> Result<Vec<ImageStatus>, LedgerError> {
    let mut images = Vec::new();
    let seen = if config.images.is_empty() { Vec::new() } else { signatures(ledger).await? };
    for i in &config.images {
        let moves = ledger.tag_moves(Some(&i.name), MOVES_SHOWN).await?;
        let mut status = image_status(&i.name, &i.image.to_string(), moves);
        status.last_action = last_action(latest, &i.name, gated);
        let mine: Vec<&(String, String, SignatureInfo)> = seen.iter().filter(|(image, ..)| *image == i.name).collect();
        match signing::signed_by(status.digest.as_deref(), mine.iter().map(|(_, _, s)| s)) {
            Some(Some(key_id)) => status.signed = Some(key_id),
            Some(None) => status.unsigned = true,
            None => {}
        }
        let newest = status.last_action.as_ref().and_then(|a| mine.iter().find(|(_, key, _)| *key == a.key));
        if let Some((_, _, info)) = newest {
            (status.signature, status.attestation) = (info.signature.clone(), info.attestation.clone());
        }
        images.push(status);
    }
    Ok(images)
}

/// The action events that end an action (and may carry `action.signature`).
const ENDING: &[EventType] = &[
    EventType::RebaseSucceeded,
    EventType::RebaseFailed,
    EventType::BuildSucceeded,
    EventType::BuildFailed,
    EventType::DeploySucceeded,
    EventType::DeployFailed,
    EventType::ActionRefused,
];

/// Events looked through for signatures; the ledger keeps fewer per watch.
const SIGNATURE_EVENTS: usize = 2000;

/// Each recorded action signature, newest first: (image, action key, what it verified and signed).
async fn signatures(ledger: &Ledger) -> Result<Vec<(String, String, SignatureInfo)>, LedgerError> {
    let types = ENDING.iter().map(|t| t.as_str().to_string()).collect();
    let events = ledger.latest_events(types, SIGNATURE_EVENTS).await?;
    Ok(events.into_iter().filter_map(|e| e.event.action).filter_map(|a| Some((a.image, a.key, a.signature?))).collect())
}

/// The newest action of each kind of each app image; no ledger read without `[[images]]`.
pub(super) async fn latest_actions(config: &Config, ledger: &Ledger) -> Result<Vec<LatestAction>, LedgerError> {
    let mut latest = Vec::new();
    if config.images.is_empty() {
        return Ok(latest);
    }
    for kind in ActionKind::ALL.into_iter().filter(|k| k.on_app_image()) {
        latest.extend(ledger.latest_actions(kind).await?);
    }
    Ok(latest)
}

/// `image`'s newest action of any kind among `latest`: the one created last (a deploy that
/// follows a rebuild is newer than the rebuild, however long the rebuild's record kept moving).
fn last_action(latest: &[LatestAction], image: &str, gated: &BTreeSet<&str>) -> Option<ImageAction> {
    latest
        .iter()
        .map(|l| &l.record)
        .filter(|r| r.image == image)
        .max_by(|a, b| (a.created, a.updated, &a.key).cmp(&(b.created, b.updated, &b.key)))
        .map(|r| ImageAction::of(r, gated))
}

fn image_status(name: &str, image: &str, moves: Vec<TagMove>) -> ImageStatus {
    let last = moves.first();
    ImageStatus {
        name: name.to_string(),
        image: image.to_string(),
        digest: last.and_then(|m| m.after.clone()),
        previous: last.and_then(|m| m.before.clone()),
        moves: moves
            .into_iter()
            .map(|m| TagMoveStatus {
                time: timestamp_millis(m.time),
                kind: m.kind,
                action: m.action,
                previous: m.before,
                digest: m.after,
                by: m.by,
                run_image: m.run_image,
            })
            .collect(),
        last_action: None,
        signed: None,
        unsigned: false,
        signature: None,
        attestation: None,
    }
}

/// The `app images:` part of the text report.
pub(super) fn render_text(out: &mut String, images: &[ImageStatus]) {
    if images.is_empty() {
        return;
    }
    let _ = writeln!(out, "app images:");
    for i in images {
        let mark = match (&i.signed, i.unsigned) {
            (Some(key_id), _) => format!("  signed by {}", &key_id[..key_id.len().min(12)]),
            (None, true) => "  unsigned".to_string(),
            (None, false) => String::new(),
        };
        let _ = writeln!(out, "  {}  {}{mark}", i.name, i.image);
        if i.moves.is_empty() {
            let _ = writeln!(out, "    no tag moves recorded");
        }
        for m in &i.moves {
            let _ = writeln!(
                out,
                "    {} {:<8} {} → {}{}{}",
                m.time,
                m.kind.as_str(),
                m.previous.as_deref().map_or("-", short),
                m.digest.as_deref().map_or("?", short),
                m.action.as_deref().map(|a| format!("  action {a}")).unwrap_or_default(),
                m.by.as_deref().map(|by| format!("  by {}", escape(by))).unwrap_or_default()
            );
        }
        if let Some(a) = &i.last_action {
            let _ = writeln!(out, "    last action: {} {} {}", a.action, a.state, timestamp_millis(a.updated));
            if let Some(detail) = &a.detail {
                let _ = writeln!(out, "      {}", fit(detail, LINE - 6));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{Status, render_text as render_status};
    use builder_monitor_core::schedule::parse_timestamp;

    /// Each app image shows where its tag's last move left it and where it was before.
    #[test]
    fn app_images_show_their_last_digests() {
        let at = |t: &str| parse_timestamp(t).unwrap();
        let a = format!("sha256:{}", "a".repeat(64));
        let b = format!("sha256:{}", "b".repeat(64));
        let moves = vec![
            TagMove {
                image: "app".into(),
                reference: "r.example/apps/app:latest".into(),
                kind: TagMoveKind::Rollback,
                action: None,
                before: Some(b.clone()),
                after: Some(a.clone()),
                time: at("2026-11-30T12:10:00Z"),
                by: Some("ana@ci-7 (cli)".into()),
                run_image: None,
            },
            TagMove {
                image: "app".into(),
                reference: "r.example/apps/app:latest".into(),
                kind: TagMoveKind::Rebase,
                action: Some("bm-1".into()),
                before: Some(a.clone()),
                after: Some(b.clone()),
                time: at("2026-11-30T12:00:00Z"),
                by: None,
                run_image: None,
            },
        ];
        let image = image_status("app", "r.example/apps/app:latest", moves);
        let json = serde_json::to_value(&image).unwrap();
        assert_eq!((json["digest"].as_str(), json["previous"].as_str()), (Some(a.as_str()), Some(b.as_str())));
        assert_eq!(json["moves"][1]["kind"], "rebase");
        assert_eq!(json["moves"][1]["action"], "bm-1");
        assert_eq!(json["moves"][0]["by"], "ana@ci-7 (cli)");
        assert!(json["moves"][1].get("by").is_none(), "an action's move has no `by`: {json}");
        let status = Status {
            builders: vec![],
            run_images: vec![],
            images: vec![image, image_status("api", "r.example/apps/api:latest", vec![])],
            pending: vec![],
            rollout: Default::default(),
            actions: vec![],
            deliveries: vec![],
            dead_letters: vec![],
            deploys: vec![],
            gitops: Vec::new(),
            registries: Vec::new(),
            vulnerability_download: None,
            missing_rights: Vec::new(),
        };
        let text = render_status(&status);
        assert!(
            text.contains("  app  r.example/apps/app:latest\n    2026-11-30T12:10:00.000Z rollback sha256:bbbbbbbbbbbb → sha256:aaaaaaaaaaaa  by ana@ci-7 (cli)\n"),
            "{text}"
        );
        assert!(text.contains("rebase   sha256:aaaaaaaaaaaa → sha256:bbbbbbbbbbbb  action bm-1\n"), "{text}");
        assert!(text.contains("  api  r.example/apps/api:latest\n    no tag moves recorded\n"), "{text}");
    }

    /// An image's last action is its newest by creation, whatever its kind; other images' do
    /// not count.
    #[test]
    fn the_last_action_of_an_image_is_its_newest_of_any_kind() {
        let at = |t: &str| parse_timestamp(t).unwrap();
        let record = |image: &str, action: &str, state, created: &str, updated: &str| LatestAction {
            record: ActionRecord {
                key: format!("bm-{image}-{action}"),
                change: "c1".into(),
                image: image.into(),
                action: builder_monitor_core::plan::ActionKind::parse(action).unwrap(),
                state,
                attempts: 1,
                next_attempt: at(created),
                detail: Some(format!("{action} {state}")),
                output_tail: None,
                updated: at(updated),
                wave: 1,
                needs_approval: false,
                released: false,
                decided_by: None,
                decided_at: None,
                created: at(created),
                progress: None,
                holds: state == ActionState::Failed,
                expedited: Default::default(),
            },
            target: None,
        };
        let latest = vec![
            // The rebuild's record moved last, but the deploy that followed it is newer.
            record("app", "rebuild", ActionState::Succeeded, "2026-11-30T12:00:00Z", "2026-11-30T12:30:00Z"),
            record("app", "deploy", ActionState::Failed, "2026-11-30T12:20:00Z", "2026-11-30T12:25:00Z"),
            record("api", "rebase", ActionState::Rejected, "2026-11-30T13:00:00Z", "2026-11-30T13:00:00Z"),
        ];
        let app = last_action(&latest, "app", &BTreeSet::new()).unwrap();
        assert_eq!((app.action.as_str(), app.state, app.holds), ("deploy", ActionState::Failed, true));
        assert_eq!(last_action(&latest, "api", &BTreeSet::new()).unwrap().state, ActionState::Rejected);
        assert_eq!(last_action(&latest, "web", &BTreeSet::new()), None);

        let mut image = image_status("app", "r.example/apps/app:latest", vec![]);
        image.last_action = Some(app);
        let json = serde_json::to_value(&image).unwrap();
        assert_eq!(json["last_action"]["updated"], "2026-11-30T12:25:00.000Z", "{json}");
        assert_eq!(
            (json["last_action"]["state"].as_str(), json["last_action"]["holds"].as_bool()),
            (Some("failed"), Some(true))
        );
        let status = Status {
            builders: vec![],
            run_images: vec![],
            images: vec![image],
            pending: vec![],
            rollout: Default::default(),
            actions: vec![],
            deliveries: vec![],
            dead_letters: vec![],
            deploys: vec![],
            gitops: Vec::new(),
            registries: Vec::new(),
            vulnerability_download: None,
            missing_rights: Vec::new(),
        };
        let text = render_status(&status);
        assert!(
            text.contains("    last action: deploy failed 2026-11-30T12:25:00.000Z\n      deploy failed\n"),
            "{text}"
        );
    }
}
