//! Gitops actions (`[[gitops]]`): a change's new app digests, and its builder's pin, committed to
//! a Git repository in one commit, in the daemon. An attempt fetches the branch, looks for this
//! change's trailer in the commits since the base an earlier attempt recorded (there: done, as
//! after a crash between the push and its record — and what a person undid of it since stays
//! undone), edits the files in place (`builder_monitor_core::gitops`), records the commit before
//! it pushes, and pushes without force; a push someone beat, or whose ref someone else's push took
//! while ours landed, is fetched and re-applied, up to [`PUSH_ROUNDS`] times; a push the remote
//! refuses (a hook, a protected branch) fails at once. What it writes is what the ledger holds
//! newest when it runs — each image's last tag move, each builder's pin — so a commit of a later
//! change also carries what an earlier, superseded one did not get to write. A file whose value
//! someone else changed since the last commit (or, for a place no commit wrote yet, since the
//! attempt first fetched it) is left as they made it: the image is held (`gitops.overridden`).
//! With `[[gitops]] batch` an action waits out its target's window and its commit names every
//! change it took along (the ledger merged them into its plan when it superseded theirs).

use std::collections::BTreeMap;

use builder_monitor_core::progress::Progress;
use futures::future::BoxFuture;

use super::carrier::{Backend, Carrier, Context};
use super::git::{GitError, Push, Repo};
use super::*;
use crate::config::{FileFormat, GitopsTarget};
use builder_monitor_core::event::CommitInfo;
use builder_monitor_core::gitops::{self as edit, Edit, EditError};

/// Pushes tried per attempt before it fails: each one lost to someone who pushed first.
pub const PUSH_ROUNDS: usize = 5;
/// Recent actions read to find a target's last commit and an image's holding action.
const RECENT: usize = 500;

/// Gitops actions' answers: in the daemon, retried by it, idempotent after a restart.
pub struct Commits;

impl Backend for Commits {
    fn facts(&self) -> &'static crate::config::Facts {
        &crate::config::COMMITS
    }

    fn preview(&self, _: &Config, _: &ActionRef<'_>, target: &ActionTarget) -> Result<serde_json::Value, PreviewError> {
        Ok(serde_json::json!({ "gitops": target.plan.gitops(), "target": target }))
    }

    fn start(
        &self,
        _: &Config,
        _: &super::carrier::Clusters,
        _: CancellationToken,
    ) -> Result<Arc<dyn Carrier>, RunnerError> {
        Ok(Arc::new(Commits))
    }
}

/// What a gitops action records (in the core, where every kind's progress record is).
pub use builder_monitor_core::gitops::CommitProgress;

/// What one attempt found or did, for the runner's record.
struct Done {
    outcome: Outcome,
    next: Next,
    skipped: bool,
    commit: Option<CommitInfo>,
}

impl Done {
    fn failed(detail: String, next: Next) -> Self {
        Done {
            outcome: Outcome { success: false, detail, output_tail: String::new() },
            next,
            skipped: false,
            commit: None,
        }
    }
}

impl From<GitError> for Done {
    fn from(err: GitError) -> Self {
        let next = if err.is_final() { Next::Final } else { Next::Retry };
        Done::failed(err.to_string(), next)
    }
}

impl Carrier for Commits {
    fn attempt<'a>(
        &'a self,
        ctx: &'a Context,
        action: &'a ClaimedAction,
        target: &'a ActionTarget,
        _verified: Option<&'a str>,
    ) -> BoxFuture<'a, Attempt> {
        Box::pin(async move {
            let done = match commit(ctx, action, target).await {
                Ok(done) | Err(done) => done,
            };
            let mut attempt = Attempt::new(done.outcome, done.next, Digests::default());
            attempt.moved = false;
            attempt.result = KindResult::Gitops(GitopsResult { skipped: done.skipped, commit: done.commit });
            attempt
        })
    }
}

/// One value to write: into which name's places, and what.
struct Value {
    /// An `[[images]]` name, or `builder:NAME`.
    name: String,
    /// `sha256:…` (kustomize, helm-values).
    digest: String,
    /// `repo:tag@sha256:…` (markers).
    reference: String,
    /// The repository, as manifests and kustomizations name it (`registry/path`).
    repository: String,
    /// The action whose tag move it comes from (an image's), to hold on a person's change.
    action: Option<String>,
    /// That action holds its image (a person's change was kept): not written until a newer
    /// change or `release`.
    held: bool,
}

async fn commit(ctx: &Context, action: &ClaimedAction, target: &ActionTarget) -> Result<Done, Done> {
    let plan = target.plan.gitops().ok_or_else(|| Done::failed("not a gitops action".into(), Next::Final))?;
    let config = &ctx.config;
    let t =
        config.gitops.iter().find(|t| t.name == plan.target).ok_or_else(|| {
            Done::failed(format!("[[gitops]] \"{}\" is no longer configured", plan.target), Next::Final)
        })?;
    let repo = Repo::new(config.work_dir().join("gitops").join(&t.name), t);
    repo.init().await?;
    // One read of the recent actions serves both: the images' holds and the target's baseline.
    let ledger_error =
        |e: crate::ledger::LedgerError| Done::failed(format!("cannot read the ledger: {e}"), Next::Retry);
    let recent = ctx.ledger.actions(RECENT).await.map_err(ledger_error)?;
    let values = values(ctx, t, &recent).await.map_err(ledger_error)?;
    let last = last_written(&recent, action);
    let mut baseline = BTreeMap::new();
    // What an earlier attempt of this action recorded before its push (which may have landed).
    let earlier = action.progress.as_ref().and_then(Progress::gitops).cloned();
    let mut lost = Vec::new();
    for round in 0..PUSH_ROUNDS {
        // On the push branch when it exists (earlier commits waiting for review), else on `branch`.
        let base = match repo.fetch(&t.push_branch).await? {
            Some(base) => base,
            None if t.push_branch != t.branch => match repo.fetch(&t.branch).await? {
                Some(base) => base,
                None => {
                    return Err(Done::failed(
                        format!("{}: no branch {} (nor {})", t.repo, t.branch, t.push_branch),
                        Next::Final,
                    ));
                }
            },
            None => return Err(Done::failed(format!("{}: no branch {}", t.repo, t.branch), Next::Final)),
        };
        repo.checkout(&base).await?;
        let info = |id: Option<String>, files: Vec<String>| CommitInfo {
            target: t.name.clone(),
            id,
            branch: t.push_branch.clone(),
            files,
        };
        // Only an earlier attempt's push may have landed under later commits.
        let since = earlier.as_ref().filter(|e| e.commit.is_some()).and_then(|e| e.base.as_deref());
        if let Some(found) = repo.find_change(&action.change_id, since).await? {
            let reverted = match earlier.as_ref() {
                Some(ours) if found != base => undone(ctx, action, target, t, &repo, &values, ours, &found).await?,
                _ => Vec::new(),
            };
            let mut detail = format!("{} holds this change already: commit {found} on {}", t.name, t.push_branch);
            if !reverted.is_empty() {
                detail += &format!(
                    "; a later commit undid it for {}: kept, and held (gitops.overridden)",
                    reverted.join(", ")
                );
            }
            return Ok(Done {
                outcome: ok(detail),
                next: Next::Final,
                skipped: false,
                commit: Some(info(Some(found), Vec::new())),
            });
        }
        let applied = apply(&repo, t, &values, &last, &baseline).map_err(|e| Done::failed(e, Next::Final))?;
        if round == 0 {
            // A place no commit wrote yet: what this attempt first fetched is its baseline, so a
            // person's edit that lands while we push is theirs, not overwritten.
            baseline = applied.found.clone();
        }
        hold_overridden(ctx, action, target, t, &applied.overridden).await;
        if applied.files.is_empty() {
            // What the files hold is the next action's baseline, as after a commit.
            let progress = CommitProgress {
                commit: None,
                base: None,
                branch: t.push_branch.clone(),
                files: Vec::new(),
                written: applied.written.clone(),
            };
            let _ = ctx.ledger.record_progress(&action.key, Progress::Gitops(progress)).await;
            let detail = format!("nothing to commit: {}'s files hold these digests already", t.name);
            return Ok(Done {
                outcome: ok(detail),
                next: Next::Final,
                skipped: true,
                commit: Some(info(None, Vec::new())),
            });
        }
        for (path, text) in &applied.files {
            repo.write(path, text)?;
        }
        let images: Vec<(String, String)> = applied
            .changed
            .iter()
            .map(|name| {
                (name.clone(), values.iter().find(|v| &v.name == name).map(|v| v.reference.clone()).unwrap_or_default())
            })
            .collect();
        // With `batch`: every change it took along, and the union of their fixes.
        let message =
            edit::batch_message(&action.change_id, &plan.summary, &plan.fixes, &plan.batch, &images, &target.reasons);
        let paths: Vec<&str> = applied.files.iter().map(|(p, _)| p.as_str()).collect();
        let id = repo.commit(&message, &paths).await?;
        let files: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
        let progress = CommitProgress {
            commit: Some(id.clone()),
            base: Some(base.clone()),
            branch: t.push_branch.clone(),
            files: files.clone(),
            written: applied.written.clone(),
        };
        // Recorded before the push: a crash after it finds the commit by its trailer.
        if !ctx.ledger.record_progress(&action.key, Progress::Gitops(progress.clone())).await.unwrap_or(false) {
            return Err(Done::failed(
                "cannot record the commit before pushing it; nothing was pushed".into(),
                Next::Retry,
            ));
        }
        match repo.push(&t.push_branch).await? {
            Push::Pushed => {
                tracing::info!(action = %action.key, target = %t.name, commit = %id, branch = %t.push_branch, files = ?files, "gitops commit pushed");
                let detail = format!("commit {id} on {} of {}: {}", t.push_branch, t.repo, files.join(", "));
                return Ok(Done {
                    outcome: ok(detail),
                    next: Next::Final,
                    skipped: false,
                    commit: Some(info(Some(id), files)),
                });
            }
            Push::Rejected(why) => {
                tracing::info!(action = %action.key, target = %t.name, why = %why, "push rejected: someone pushed first; fetching again");
                lost.push(why);
            }
        }
    }
    Err(Done::failed(
        format!(
            "push to {} rejected {PUSH_ROUNDS} times, someone pushed first each time ({}); never forced",
            t.push_branch,
            lost.join("; ")
        ),
        Next::Retry,
    ))
}

/// A change of ours found under later commits: the names whose places no longer hold what our
/// commit wrote (a person reverted it, or set another value) are a person's decision: kept and
/// held, like any other override, and their values are the next action's baseline.
#[allow(clippy::too_many_arguments)]
async fn undone(
    ctx: &Context,
    action: &ClaimedAction,
    target: &ActionTarget,
    t: &GitopsTarget,
    repo: &Repo,
    values: &[Value],
    ours: &CommitProgress,
    found: &str,
) -> Result<Vec<String>, Done> {
    let applied = apply(repo, t, values, &ours.written, &BTreeMap::new()).map_err(|e| Done::failed(e, Next::Final))?;
    if applied.overridden.is_empty() {
        return Ok(Vec::new());
    }
    hold_overridden(ctx, action, target, t, &applied.overridden).await;
    let mut written = ours.written.clone();
    written.extend(applied.changed_by_others.iter().cloned());
    let progress = CommitProgress { commit: Some(found.to_string()), written, ..ours.clone() };
    let _ = ctx.ledger.record_progress(&action.key, Progress::Gitops(progress)).await;
    Ok(applied.overridden.into_iter().map(|(name, _, _)| name).collect())
}

fn ok(detail: String) -> Outcome {
    Outcome { success: true, detail, output_tail: String::new() }
}

/// Every name's newest value: each configured image's last recorded tag move, each builder's pin.
async fn values(
    ctx: &Context,
    t: &GitopsTarget,
    recent: &[crate::ledger::ActionRecord],
) -> Result<Vec<Value>, crate::ledger::LedgerError> {
    let mut out = Vec::new();
    let held = |key: &Option<String>| {
        key.as_ref().is_some_and(|k| recent.iter().any(|a| &a.key == k && a.holds && !a.released))
    };
    let markers = t.files.iter().any(|f| f.format == FileFormat::Marker);
    for image in &ctx.config.images {
        if !markers && !t.files.iter().any(|f| f.image() == Some(image.name.as_str())) {
            continue;
        }
        let Some(moved) = ctx.ledger.tag_moves(Some(&image.name), 1).await?.into_iter().next() else { continue };
        let Some(digest) = moved.after else { continue };
        out.push(Value {
            name: image.name.clone(),
            reference: format!("{}@{digest}", image.image),
            repository: format!("{}/{}", image.image.registry(), image.image.repository()),
            digest,
            held: held(&moved.action),
            action: moved.action,
        });
    }
    if markers {
        for builder in &ctx.config.builders {
            let Some(pin) = ctx.ledger.watch(&builder.name).await?.and_then(|r| r.pin) else { continue };
            out.push(Value {
                name: format!("builder:{}", builder.name),
                reference: format!("{}@{}", builder.image, pin.digest),
                repository: format!("{}/{}", builder.image.registry(), builder.image.repository()),
                digest: pin.digest,
                action: None,
                held: false,
            });
        }
    }
    Ok(out)
}

/// What the files held for each name after this target's last action: what its commit wrote, or
/// what it found when there was nothing to commit.
fn last_written(recent: &[crate::ledger::ActionRecord], action: &ClaimedAction) -> BTreeMap<String, String> {
    recent
        .iter()
        .filter(|a| {
            a.image == action.image
                && a.key != action.key
                && matches!(a.state, ActionState::Succeeded | ActionState::Skipped)
        })
        .max_by_key(|a| a.updated)
        .and_then(|a| a.progress.as_ref()?.gitops())
        .map(|p| p.written.clone())
        .unwrap_or_default()
}

/// The files' new texts, the names whose places changed, what the files hold for each name now,
/// and the names someone else changed.
struct Applied {
    files: Vec<(String, String)>,
    changed: Vec<String>,
    written: BTreeMap<String, String>,
    overridden: Vec<(String, String, Option<String>)>,
    /// `path#name` → the value a person put there.
    changed_by_others: Vec<(String, String)>,
    /// `path#name` → what the file held there before the edit (empty: nothing).
    found: BTreeMap<String, String>,
}

/// The edits of every file, an image a person changed in any file left as it is in all of them.
/// `last` is what the last commit wrote; `baseline` what the files held where it wrote nothing.
fn apply(
    repo: &Repo,
    t: &GitopsTarget,
    values: &[Value],
    last: &BTreeMap<String, String>,
    baseline: &BTreeMap<String, String>,
) -> Result<Applied, String> {
    let first = apply_skipping(repo, t, values, last, baseline, &[])?;
    if first.overridden.is_empty() {
        return Ok(first);
    }
    let skip: Vec<String> = first.overridden.iter().map(|(name, _, _)| name.clone()).collect();
    let mut again = apply_skipping(repo, t, values, last, baseline, &skip)?;
    // Where a person changed it, theirs is the next baseline; elsewhere the file keeps ours.
    for (place, theirs) in &first.changed_by_others {
        again.written.insert(place.clone(), theirs.clone());
    }
    again.overridden = first.overridden;
    again.found = first.found;
    Ok(again)
}

fn apply_skipping(
    repo: &Repo,
    t: &GitopsTarget,
    values: &[Value],
    last: &BTreeMap<String, String>,
    baseline: &BTreeMap<String, String>,
    skip: &[String],
) -> Result<Applied, String> {
    let mut applied = Applied {
        files: Vec::new(),
        changed: Vec::new(),
        written: last.clone(),
        overridden: Vec::new(),
        changed_by_others: Vec::new(),
        found: BTreeMap::new(),
    };
    for file in &t.files {
        let text = match applied.files.iter().find(|(p, _)| p == &file.path) {
            Some((_, text)) => text.clone(),
            None => repo
                .read(&file.path)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("{}: no file {} on the branch", t.name, file.path))?,
        };
        let mut text_now = text.clone();
        let wanted = |v: &&Value| !v.held && !skip.contains(&v.name);
        let names: Vec<&Value> = match file.image() {
            Some(image) => values.iter().filter(|v| v.name == image).filter(wanted).collect(),
            None => values.iter().filter(wanted).collect(),
        };
        for value in names {
            let new = match &file.format {
                FileFormat::Kustomize { .. } => value.digest.clone(),
                FileFormat::HelmValues { .. } => value.digest.clone(),
                FileFormat::Marker => value.reference.clone(),
            };
            let result = match &file.format {
                FileFormat::Kustomize { .. } => edit::kustomize(&text_now, &value.repository, &value.digest),
                FileFormat::HelmValues { key, .. } => edit::helm_values(&text_now, key, &value.digest),
                FileFormat::Marker => edit::marker(&text_now, &value.name, &value.reference),
            };
            let Edit { text: edited, changed, previous } = match result {
                Ok(e) => e,
                Err(EditError::NoMarker { .. }) => continue,
                Err(e) => return Err(format!("{}: {}: {e}", t.name, file.path)),
            };
            // A person put something else here since the last commit: theirs stays.
            let place = format!("{}#{}", file.path, value.name);
            // Empty: the place holds nothing (a person removed the value, or it never had one).
            let now = previous.clone().unwrap_or_default();
            applied.found.entry(place.clone()).or_insert_with(|| now.clone());
            if let Some(was) = last.get(&place).or_else(|| baseline.get(&place))
                && was != &now
                && now != new
                && changed
            {
                if !applied.overridden.iter().any(|(n, _, _)| n == &value.name) {
                    applied.overridden.push((value.name.clone(), now.clone(), value.action.clone()));
                }
                applied.changed_by_others.push((place.clone(), now.clone()));
                applied.written.insert(place, now.clone());
                continue;
            }
            applied.written.insert(place, new);
            if changed {
                text_now = edited;
                if !applied.changed.contains(&value.name) {
                    applied.changed.push(value.name.clone());
                }
            }
        }
        if text_now != text {
            match applied.files.iter_mut().find(|(p, _)| p == &file.path) {
                Some(entry) => entry.1 = text_now,
                None => applied.files.push((file.path.clone(), text_now)),
            }
        }
    }
    Ok(applied)
}

/// Holds each image a person changed in the files, with `gitops.overridden`.
async fn hold_overridden(
    ctx: &Context,
    action: &ClaimedAction,
    target: &ActionTarget,
    t: &GitopsTarget,
    overridden: &[(String, String, Option<String>)],
) {
    for (name, theirs, holder) in overridden {
        let set_to = if theirs.is_empty() { "nothing (its value removed)" } else { theirs.as_str() };
        let detail = format!(
            "{name} in {} was set to {set_to} by someone else; it is kept, and {name} is held until a newer change or `release`",
            t.name
        );
        let mut event =
            ctx.event(action, target, EventType::GitopsOverridden, Some(detail.clone()), None, &Digests::default());
        // One per image: the action's own id would make a second image's event a duplicate of
        // the first's, and drop it.
        event.id = builder_monitor_core::event::stable_id(&[
            &action.key,
            EventType::GitopsOverridden.as_str(),
            &action.attempt.to_string(),
            name,
        ]);
        if let Some(info) = event.action.as_mut() {
            info.image = name.clone();
            let commit =
                CommitInfo { target: t.name.clone(), id: None, branch: t.push_branch.clone(), files: Vec::new() };
            info.result = builder_monitor_core::event::ActionResult::Gitops(Some(commit));
        }
        let events = vec![event];
        let Some(key) = holder else {
            tracing::warn!(target = %t.name, name = %name, "{detail}");
            continue;
        };
        let record = |deliveries| {
            ctx.ledger.hold_image(crate::ledger::ImageHold {
                key,
                detail: detail.clone(),
                watch: &target.builder_name,
                events: events.clone(),
                deliveries,
                history: ctx.config.monitor.history,
                now: ctx.clock.now(),
            })
        };
        match crate::alert::emit(&ctx.config.alerts, &events, record).await {
            Ok(_) => tracing::warn!(target = %t.name, image = %name, "{detail}"),
            Err(err) => {
                tracing::error!(target = %t.name, image = %name, error = %err, "cannot record gitops.overridden")
            }
        }
    }
}
