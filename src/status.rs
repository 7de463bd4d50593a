//! The status report: pins, last checks, recent changes, each app image's tag moves and newest
//! action, open actions, dead letters, where each deploy workload stands (`deploys`) and what each
//! registry answered (`registries`), as the stable JSON of docs/commands.md (`status --json`) or
//! as text for people.

mod deploys;
mod gitops;
mod images;
mod registries;
mod text;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use crate::config::{Config, run_image_watch};
use crate::ledger::{
    ActionRecord, ActionState, DeadLetter, Ledger, LedgerError, OpenAction, PendingDelivery, PinMetadata, WatchRecord,
};
use builder_monitor_core::cnb::{ChangeKind, Reason, explain, run_watch_name};
use builder_monitor_core::packages::PackageDiff;
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::rollout::Freeze;
use builder_monitor_core::schedule::{timestamp, timestamp_millis};
use builder_monitor_core::text::{count, escape};
use builder_monitor_core::vulns::Fix;
pub use deploys::DeployStatus;
pub use gitops::{GitopsStatus, PendingBatch, targets as gitops_targets};
pub use images::{ImageAction, ImageStatus, TagMoveStatus};
pub use registries::RegistryStatus;
pub use text::render_text;

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub builders: Vec<BuilderStatus>,
    /// Run images named by the builders, watched on their own.
    pub run_images: Vec<BuilderStatus>,
    /// The `[[images]]` and their tags' last digests, as the rebases, rebuilds and rollbacks left them.
    pub images: Vec<ImageStatus>,
    /// Open actions: pending, waiting (a roll-out gate keeps it: `waiting_for` says why), running,
    /// held, awaiting approval.
    pub pending: Vec<OpenAction>,
    pub rollout: RolloutStatus,
    /// The most recent rebases and rebuilds, any state (running, failed, succeeded, superseded),
    /// each in the state `pending` shows it in (`queued`, `waiting`).
    pub actions: Vec<ShownAction>,
    /// Alert deliveries not made yet (retrying or not yet attempted).
    pub deliveries: Vec<PendingDelivery>,
    pub dead_letters: Vec<DeadLetter>,
    /// Each configured workload of the `[[images]]` with `deploy` workloads, as the image's newest
    /// deploy left it (one entry per container written).
    pub deploys: Vec<DeployStatus>,
    /// Each `[[gitops]]` target's last pushed commit and its newest action.
    pub gitops: Vec<GitopsStatus>,
    /// Each registry of the app images: whether it serves the referrers API (`null`: not asked yet).
    pub registries: Vec<RegistryStatus>,
    /// A URL mirror's download under way in the state directory (since when, bytes so far,
    /// whether it is the first): a stalled first download leaves moves matched without data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vulnerability_download: Option<crate::vulns::Downloading>,
    /// The rights the running daemon lacks (the cluster refused them, RBAC confirms it), each
    /// with what waits for it, as `/readyz` names them: empty when none, or no daemon runs.
    pub missing_rights: Vec<String>,
}

/// A recent action with the state every view shows it in ([`crate::ledger::shown_state`]); the
/// record's own fields read through it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownAction {
    pub record: ActionRecord,
    /// The state as shown (the record's own `state` reads through too).
    pub shown: &'static str,
}

impl ShownAction {
    /// `record`, where `gated` are the keys of the pending actions a roll-out gate keeps back.
    pub fn new(record: ActionRecord, gated: &BTreeSet<&str>) -> Self {
        let shown = record.shown_state(gated.contains(record.key.as_str()));
        ShownAction { record, shown }
    }
}

impl From<ActionRecord> for ShownAction {
    fn from(record: ActionRecord) -> Self {
        ShownAction::new(record, &BTreeSet::new())
    }
}

impl std::ops::Deref for ShownAction {
    type Target = ActionRecord;
    fn deref(&self) -> &ActionRecord {
        &self.record
    }
}

impl Serialize for ShownAction {
    /// The record's fields, in its order, with `state` as shown.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use crate::ledger::time;
        #[derive(Serialize)]
        struct Shown<'a> {
            key: &'a str,
            change: &'a str,
            image: &'a str,
            action: &'a str,
            state: &'a str,
            attempts: u32,
            next_attempt: String,
            detail: Option<&'a str>,
            output_tail: Option<&'a str>,
            updated: String,
            wave: u32,
            needs_approval: bool,
            released: bool,
            #[serde(skip_serializing_if = "Option::is_none")]
            decided_by: Option<&'a str>,
            #[serde(with = "time::seconds_opt", skip_serializing_if = "Option::is_none")]
            decided_at: Option<chrono::DateTime<chrono::Utc>>,
            created: String,
            #[serde(skip_serializing_if = "Option::is_none")]
            progress: Option<&'a builder_monitor_core::progress::Progress>,
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            holds: bool,
            #[serde(skip_serializing_if = "builder_monitor_core::rollout::Expedited::is_empty")]
            expedited: &'a builder_monitor_core::rollout::Expedited,
        }
        let r = &self.record;
        Shown {
            key: &r.key,
            change: &r.change,
            image: &r.image,
            action: r.action.as_str(),
            state: self.shown,
            attempts: r.attempts,
            next_attempt: timestamp_millis(r.next_attempt),
            detail: r.detail.as_deref(),
            output_tail: r.output_tail.as_deref(),
            updated: timestamp_millis(r.updated),
            wave: r.wave,
            needs_approval: r.needs_approval,
            released: r.released,
            decided_by: r.decided_by.as_deref(),
            decided_at: r.decided_at,
            created: timestamp_millis(r.created),
            progress: r.progress.as_ref(),
            holds: r.holds,
            expedited: &r.expedited,
        }
        .serialize(s)
    }
}

/// The roll-out gates that hold for every action now.
#[derive(Debug, Clone, Serialize)]
pub struct RolloutStatus {
    pub frozen: Option<Freeze>,
    /// Whether actions may start now by `[rollout] windows` (always, without windows).
    pub window_open: bool,
    /// When a window opens next, while all are closed (`Mon 09:00 Europe/Berlin`).
    pub next_window: Option<String>,
}

impl Default for RolloutStatus {
    /// No freeze, no windows: actions start whenever they are due.
    fn default() -> Self {
        RolloutStatus { frozen: None, window_open: true, next_window: None }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct BuilderStatus {
    pub name: String,
    pub image: String,
    pub pinned: Option<PinnedStatus>,
    pub platforms: BTreeMap<String, String>,
    pub last_check: Option<LastCheck>,
    pub last_change: Option<String>,
    pub consecutive_failures: u32,
    /// A new digest waiting out `settle`.
    pub settling: Option<Settling>,
    /// When the next scheduled check is due (before jitter; a hook or the API can check sooner):
    /// the last check's time plus the schedule. `None` before the first check.
    pub next_check: Option<String>,
    /// For a builder: the run image its metadata names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_image: Option<String>,
    /// For a run image: the builders naming it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub builders: Vec<String>,
    pub changes: Vec<ChangeSummary>,
    /// What the pin left out: index entries over `max_platforms` or duplicated, metadata over the
    /// pin's ledger budget, package lists cut at their cap.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PinnedStatus {
    pub digest: String,
    pub reference: String,
    pub since: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct LastCheck {
    pub time: String,
    pub result: &'static str,
    pub error: Option<String>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Settling {
    pub digest: String,
    pub since: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChangeSummary {
    pub id: String,
    pub time: String,
    pub previous: String,
    pub current: String,
    pub kind: ChangeKind,
    pub reasons: Vec<Reason>,
    /// For people: digests cut to 12 hex digits (`run@sha256:3681a3c4e5f6…`).
    pub summary: String,
    pub rollback: bool,
    /// The run image's whole references, from → to, when it moved (the summary shortens them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_image: Option<builder_monitor_core::cnb::FromTo>,
    /// The OS packages the move changed, when both sides listed them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packages: Option<PackageDiff>,
    /// Why the package diff is missing or partial (a list unreadable, or cut at its cap).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packages_note: Option<String>,
    /// The security notices the move fixes (`[]`: its lists matched none), when vulnerability data
    /// is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixes: Option<Vec<Fix>>,
    /// Why no vulnerability data could be matched to the move.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixes_note: Option<String>,
    /// Notices a platform's list shows fixed that are not claimed (`unknown`), with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fixes_unknown: Vec<builder_monitor_core::vulns::UnknownFix>,
    /// What the new pin left out, so the move was decided on less than the whole image.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Where `status` learns why actions wait for the Kubernetes cluster: what the daemon last noted
/// in its state directory (the default: `status` and the page read no live cluster), or the
/// cluster itself, asked now (`status --cluster`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClusterWaits {
    #[default]
    Noted,
    Asked,
}

/// Builds the report for the builders in `config`, with up to `recent` changes each.
pub async fn collect(config: &Config, ledger: &Ledger, recent: usize) -> Result<Status, LedgerError> {
    collect_with(config, ledger, recent, ClusterWaits::Noted).await
}

/// [`collect`], learning why actions wait for the cluster as `cluster` says.
pub async fn collect_with(
    config: &Config,
    ledger: &Ledger,
    recent: usize,
    cluster: ClusterWaits,
) -> Result<Status, LedgerError> {
    let mut builders = Vec::new();
    // Run image watch name → (run image, builders naming it).
    let mut run_images: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for b in &config.builders {
        let image = b.image.to_string();
        let record = ledger.watch(&b.name).await?.filter(|r| r.image == image);
        let metadata = record.as_ref().and_then(WatchRecord::pinned_metadata);
        let run_image = metadata.as_ref().and_then(|m| m.preferred()?.run_image().map(str::to_string));
        if let Ok(Some(run)) = run_image_watch(b, metadata.as_ref()) {
            run_images
                .entry(run_watch_name(&run))
                .or_insert_with(|| (run.to_string(), Vec::new()))
                .1
                .push(b.name.clone());
        }
        let mut status = watch_status(ledger, &b.name, &image, record.as_ref(), recent).await?;
        status.next_check = next_check(&b.schedule, record.as_ref());
        status.run_image = run_image;
        builders.push(status);
    }
    let mut runs = Vec::new();
    for (name, (image, users)) in run_images {
        let record = ledger.watch(&name).await?.filter(|r| r.image == image);
        let mut status = watch_status(ledger, &name, &image, record.as_ref(), recent).await?;
        // A run image is checked on the schedule of the builder that first named it.
        let schedule = users.first().and_then(|u| config.builder(u)).map(|b| &b.schedule);
        status.next_check = schedule.and_then(|s| next_check(s, record.as_ref()));
        status.builders = users;
        runs.push(status);
    }
    let now = chrono::Utc::now();
    let (pending, rollout) = open_actions_with(config, ledger, now, cluster).await?;
    // One state per action wherever it is listed: as `pending` shows it.
    let gated: BTreeSet<&str> = pending.iter().filter(|a| a.gate.is_some()).map(|a| a.key.as_str()).collect();
    let latest = images::latest_actions(config, ledger).await?;
    let images = images::collect(config, ledger, &latest, &gated).await?;
    let actions = ledger.actions(50).await?.into_iter().map(|r| ShownAction::new(r, &gated)).collect();
    Ok(Status {
        builders,
        run_images: runs,
        images,
        pending,
        rollout,
        actions,
        deliveries: ledger.pending_deliveries().await?,
        dead_letters: ledger.dead_letters().await?,
        deploys: deploys::deploys(&config.images, &latest),
        gitops: if config.gitops.is_empty() {
            Vec::new()
        } else {
            let mut targets = gitops::targets(config, &ledger.actions(GITOPS_RECENT).await?);
            gitops::pending_batches(config, &mut targets, &ledger.latest_actions(ActionKind::Gitops).await?);
            targets
        },
        registries: registries::collect(config, ledger).await?,
        vulnerability_download: match config.vulnerabilities.as_ref().map(|v| &v.osv) {
            Some(crate::config::OsvSource::Url(_)) => crate::vulns::downloading(&config.work_dir().join("osv")),
            _ => None,
        },
        missing_rights: crate::rights::reported(&config.work_dir()),
    })
}

/// Recent actions read for the gitops targets' last commits.
const GITOPS_RECENT: usize = 500;

/// The open actions, each pending one with why it waits, and the gates that hold for all.
pub async fn open_actions(
    config: &Config,
    ledger: &Ledger,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(Vec<OpenAction>, RolloutStatus), LedgerError> {
    open_actions_with(config, ledger, now, ClusterWaits::Noted).await
}

async fn open_actions_with(
    config: &Config,
    ledger: &Ledger,
    now: chrono::DateTime<chrono::Utc>,
    cluster: ClusterWaits,
) -> Result<(Vec<OpenAction>, RolloutStatus), LedgerError> {
    let mut open = ledger.open_actions().await?;
    let frozen = ledger.freeze_state().await?;
    let mut waits = crate::rollout::waits(config, ledger, &open, frozen.as_ref(), now).await?;
    let fixes = approval_fixes(ledger, &open).await?;
    for a in &mut open {
        let (gate, why) = match a.state {
            ActionState::Pending => match waits.remove(&a.key) {
                Some(wait) => (wait.code(), wait.to_string()),
                None => continue,
            },
            ActionState::AwaitingApproval => {
                let mut why = format!("awaiting approval: `builder-monitor approve {}`", a.change);
                if let Some(fixes) = fixes.get(&a.change) {
                    why += &format!("; approving {fixes}");
                }
                ("approval", why)
            }
            ActionState::Held => (
                "held",
                format!("{}; `builder-monitor release {}` lets it go", a.detail.as_deref().unwrap_or("held"), a.change),
            ),
            _ => continue,
        };
        a.gate = Some(gate);
        a.waiting_for = Some(why);
    }
    cluster_waits(config, &mut open, cluster).await;
    let windows = &config.rollout.windows;
    let rollout = RolloutStatus { frozen, window_open: windows.is_open(now), next_window: windows.describe_next(now) };
    Ok((open, rollout))
}

/// Recent changes read for what approving a waiting action would fix.
const APPROVAL_CHANGES: usize = 200;

/// What each change with an action awaiting approval fixes (`fixes USN-7000-1 (high), 2 more`),
/// from the ledger's change; none read when nothing awaits approval.
async fn approval_fixes(ledger: &Ledger, open: &[OpenAction]) -> Result<BTreeMap<String, String>, LedgerError> {
    let waiting: BTreeSet<&str> =
        open.iter().filter(|a| a.state == ActionState::AwaitingApproval).map(|a| a.change.as_str()).collect();
    if waiting.is_empty() {
        return Ok(BTreeMap::new());
    }
    let changes = ledger.changes(None, APPROVAL_CHANGES).await?;
    Ok(changes
        .into_iter()
        .filter(|c| waiting.contains(c.id.as_str()))
        .filter_map(|c| Some((c.id, builder_monitor_core::cnb::fixes_brief(c.change.fixes.as_deref())?)))
        .collect())
}

/// How long `status` waits for the cluster to answer before saying its actions wait for it.
const CLUSTER_ANSWER: std::time::Duration = std::time::Duration::from_secs(5);

/// Marks the pending actions that no other gate keeps but that run on a Kubernetes cluster that
/// cannot be configured or does not answer: they wait for it (gate `cluster`, and why), as the
/// daemon last noted or, asked for, as the cluster answers now (only when such an action is
/// pending).
async fn cluster_waits(config: &Config, open: &mut [OpenAction], cluster: ClusterWaits) {
    let on_cluster = |a: &OpenAction| config.runner.on_cluster(a.action);
    let waits = |a: &OpenAction| a.state == ActionState::Pending && a.gate.is_none() && on_cluster(a);
    if !open.iter().any(waits) {
        return;
    }
    let why = match cluster {
        ClusterWaits::Noted => crate::cluster::waiting::noted(&config.work_dir()),
        ClusterWaits::Asked => crate::cluster::actions_wait(config, CLUSTER_ANSWER).await,
    };
    let Some(why) = why else { return };
    for a in open.iter_mut().filter(|a| waits(a)) {
        a.gate = Some("cluster");
        a.waiting_for = Some(why.clone());
    }
}

fn next_check(schedule: &builder_monitor_core::schedule::Schedule, record: Option<&WatchRecord>) -> Option<String> {
    builder_monitor_core::schedule::next_check(schedule, record?.last_check?)
}

async fn watch_status(
    ledger: &Ledger,
    name: &str,
    image: &str,
    record: Option<&WatchRecord>,
    recent: usize,
) -> Result<BuilderStatus, LedgerError> {
    let changes = match record {
        Some(_) => ledger.changes(Some(name), recent).await?,
        None => Vec::new(),
    };
    Ok(builder_status(name, image, record, changes))
}

/// The notes kept with a pin, read without the rest of the metadata.
fn pin_notes(record: &WatchRecord) -> Vec<String> {
    record.metadata.as_ref().map(PinMetadata::notes).unwrap_or_default()
}

fn builder_status(
    name: &str,
    image: &str,
    record: Option<&WatchRecord>,
    changes: Vec<crate::ledger::ChangeRecord>,
) -> BuilderStatus {
    let pin = record.and_then(|r| r.pin.as_ref());
    BuilderStatus {
        name: name.to_string(),
        image: image.to_string(),
        pinned: pin.map(|p| PinnedStatus {
            digest: p.digest.clone(),
            reference: p.reference.clone(),
            since: timestamp(p.since),
        }),
        platforms: pin.map(|p| p.platforms.clone()).unwrap_or_default(),
        last_check: record.and_then(|r| {
            Some(LastCheck {
                time: timestamp(r.last_check?),
                result: if r.last_ok == Some(true) { "ok" } else { "error" },
                error: r.last_error.clone(),
                reason: r.last_error_reason.clone(),
            })
        }),
        last_change: record.and_then(|r| r.last_change).map(timestamp),
        consecutive_failures: record.map_or(0, |r| r.consecutive_failures),
        settling: record
            .and_then(|r| r.pending.as_ref())
            .map(|p| Settling { digest: p.digest.clone(), since: timestamp(p.since) }),
        next_check: None,
        run_image: None,
        builders: Vec::new(),
        notes: record.map(pin_notes).unwrap_or_default(),
        changes: changes
            .into_iter()
            .map(|c| ChangeSummary {
                id: c.id,
                time: timestamp(c.detected),
                previous: c.previous,
                current: c.current,
                kind: c.change.kind,
                reasons: c.change.reasons.clone(),
                summary: explain(&c.change).to_string(),
                rollback: c.rollback,
                run_image: c.change.run_image.clone(),
                packages: c.change.packages.clone(),
                packages_note: c.change.packages_note.clone(),
                fixes: c.change.fixes.clone(),
                fixes_note: c.change.fixes_note.clone(),
                fixes_unknown: c.change.fixes_unknown.clone(),
                notes: c.change.notes.clone(),
            })
            .collect(),
    }
}

/// Registries two or more watches failed to reach at their last check: host → (watches, one of
/// their errors). `status` text and the page say each once, above the watches.
pub type Unreachable = BTreeMap<String, (u32, String)>;

/// The registries that two or more watches failed to reach at their last check (the reason
/// `registry_unavailable`: DNS, connect, TLS, 5xx), with how many and one of their errors: said
/// once above the watches, not once a watch.
pub fn unreachable_registries<'a>(watches: impl Iterator<Item = &'a BuilderStatus>) -> Unreachable {
    let mut hosts: BTreeMap<String, (u32, String)> = BTreeMap::new();
    for b in watches {
        let Some(check) = b.last_check.as_ref().filter(|c| c.reason.as_deref() == Some("registry_unavailable")) else {
            continue;
        };
        let Ok(image) = builder_monitor_core::reference::ImageRef::parse(&b.image) else { continue };
        let entry =
            hosts.entry(image.registry().to_string()).or_insert_with(|| (0, check.error.clone().unwrap_or_default()));
        entry.0 += 1;
    }
    hosts.retain(|_, (watches, _)| *watches > 1);
    hosts
}

/// The registry of `b`'s image when it is among the `unreachable` ones.
pub fn unreachable_host<'a>(b: &BuilderStatus, unreachable: &'a Unreachable) -> Option<&'a str> {
    let image = builder_monitor_core::reference::ImageRef::parse(&b.image).ok()?;
    unreachable.get_key_value(image.registry()).map(|(host, _)| host.as_str())
}

fn short(digest: &str) -> &str {
    let end = digest.len().min("sha256:".len() + 12);
    &digest[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use builder_monitor_core::schedule::parse_timestamp;

    /// A recent action's JSON is its record's, field for field, but for the state as shown: a
    /// build Kueue holds is `queued`, a pending action a gate keeps back `waiting`, as in `pending`.
    #[test]
    fn recent_actions_show_the_state_pending_shows() {
        let placed = |queued: bool| {
            let json = serde_json::json!({"pool": "linux", "queued": queued});
            builder_monitor_core::progress::Progress::read(builder_monitor_core::plan::ActionKind::Rebuild, json)
        };
        let at = |t: &str| parse_timestamp(t).unwrap();
        let record = ActionRecord {
            key: "k".into(),
            change: "c".into(),
            image: "app".into(),
            action: builder_monitor_core::plan::ActionKind::Rebuild,
            state: ActionState::Running,
            attempts: 2,
            next_attempt: at("2026-11-30T12:00:00.250Z"),
            detail: Some("d".into()),
            output_tail: Some("t".into()),
            updated: at("2026-11-30T12:01:00Z"),
            wave: 2,
            needs_approval: true,
            released: true,
            decided_by: Some("alice (cli)".into()),
            decided_at: Some(at("2026-11-30T11:00:00Z")),
            created: at("2026-11-30T10:00:00Z"),
            progress: placed(false),
            holds: true,
            expedited: Default::default(),
        };
        let shown = |r: &ActionRecord, gated: &[&str]| {
            serde_json::to_value(ShownAction::new(r.clone(), &gated.iter().copied().collect())).unwrap()
        };
        assert_eq!(shown(&record, &[]), serde_json::to_value(&record).unwrap(), "every field as the record's");
        let queued = ActionRecord { progress: placed(true), ..record };
        assert_eq!(shown(&queued, &[])["state"], "queued");
        let pending = ActionRecord { state: ActionState::Pending, progress: None, ..queued };
        assert_eq!(shown(&pending, &[])["state"], "pending");
        assert_eq!(shown(&pending, &["k"])["state"], "waiting");
        assert_eq!(shown(&pending, &["other"])["state"], "pending");
    }

    /// The ledger's times and states, typed inside, show as the text `status` has always shown.
    #[test]
    fn actions_and_deliveries_show_their_times_and_states_as_text() {
        let at = |t: &str| parse_timestamp(t).unwrap();
        let status = Status {
            builders: vec![],
            run_images: vec![],
            images: vec![],
            pending: vec![OpenAction {
                change: "c1".into(),
                image: "app".into(),
                action: builder_monitor_core::plan::ActionKind::Rebuild,
                state: ActionState::Pending,
                attempts: 1,
                next_attempt: at("2026-11-30T12:15:00Z"),
                key: "k".into(),
                wave: 1,
                detail: None,
                waiting_for: None,
                gate: None,
                placed: None,
            }],
            rollout: Default::default(),
            actions: vec![
                ActionRecord {
                    key: "k0".into(),
                    change: "c0".into(),
                    image: "app".into(),
                    action: builder_monitor_core::plan::ActionKind::Rebase,
                    state: ActionState::Superseded,
                    attempts: 0,
                    next_attempt: at("2026-11-30T12:00:00Z"),
                    detail: Some("superseded by change c1".into()),
                    output_tail: None,
                    updated: at("2026-11-30T12:10:00.5Z"),
                    wave: 1,
                    needs_approval: false,
                    released: false,
                    decided_by: None,
                    decided_at: None,
                    created: parse_timestamp("2025-03-04T11:00:00Z").unwrap(),
                    progress: None,
                    holds: false,
                    expedited: Default::default(),
                }
                .into(),
            ],
            deliveries: vec![PendingDelivery {
                event: "e1".into(),
                event_type: "builder.changed".into(),
                alert: "hook".into(),
                attempts: 2,
                next_attempt: at("2026-11-30T12:20:00.125Z"),
                last_status: Some("HTTP 503".into()),
            }],
            dead_letters: vec![DeadLetter {
                event: "e0".into(),
                event_type: "check.failed".into(),
                alert: "pager".into(),
                attempts: 5,
                last_status: None,
                time: at("2026-11-30T11:00:00Z"),
            }],
            deploys: vec![],
            gitops: vec![],
            registries: vec![],
            vulnerability_download: None,
            missing_rights: Vec::new(),
        };
        assert_eq!(
            serde_json::to_string(&status).unwrap(),
            concat!(
                r#"{"builders":[],"run_images":[],"images":[],"pending":[{"key":"k","change":"c1","image":"app","#,
                r#""action":"rebuild","state":"pending","attempts":1,"next_attempt":"2026-11-30T12:15:00.000Z","#,
                r#""wave":1}],"rollout":{"frozen":null,"window_open":true,"next_window":null},"#,
                r#""actions":[{"key":"k0","change":"c0","image":"app","action":"rebase","state":"superseded","#,
                r#""attempts":0,"next_attempt":"2026-11-30T12:00:00.000Z","detail":"superseded by change c1","#,
                r#""output_tail":null,"updated":"2026-11-30T12:10:00.500Z","wave":1,"needs_approval":false,"#,
                r#""released":false,"created":"2025-03-04T11:00:00.000Z"}],"#,
                r#""deliveries":[{"event":"e1","type":"builder.changed","alert":"hook","attempts":2,"#,
                r#""next_attempt":"2026-11-30T12:20:00.125Z","last_status":"HTTP 503"}],"#,
                r#""dead_letters":[{"event":"e0","type":"check.failed","alert":"pager","attempts":5,"#,
                r#""last_status":null,"time":"2026-11-30T11:00:00.000Z"}],"deploys":[],"gitops":[],"registries":[],"missing_rights":[]}"#
            )
        );
        let text = render_text(&status);
        assert!(
            text.contains("  rebuild app for change c1 (wave 1, pending, 1 attempt, next 2026-11-30T12:15:00.000Z)\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "  2026-11-30T12:10:00.500Z rebase app after 0 attempts (superseded)\n    superseded by change c1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("  builder.changed e1 to hook: 2 attempts, next 2026-11-30T12:20:00.125Z (last: HTTP 503)\n"),
            "{text}"
        );
    }
}
