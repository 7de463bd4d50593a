//! Registry rebases in the daemon (`[runner] rebase = "registry"`: a backend that takes only
//! rebases, whatever the runner type), the app tag's digests around any action (the ledger keeps
//! them as tag moves, what `rollback` goes back by), and the write-ahead intents that make a tag
//! write survive a crash: recorded before the write, found again by the next attempt, and
//! completed, retried or failed by what the tag holds then.

use futures::future::BoxFuture;

use super::carrier::{Backend, Carrier, Context};
use super::*;
use crate::ledger::{TagIntent, TagMoveKind, WriteGrant};
use crate::rebase::{RunImageDocs, SignPlan, TagGuard};

/// Registry rebases' answers: rebases only, in the daemon, retried by it.
pub struct RegistryRebase;

/// What carries registry rebases out: the run image documents every rebase of this runner reads
/// through (a fleet patch reads the new run image once, not once per app).
struct Rebaser {
    run_docs: RunImageDocs,
}

impl Backend for RegistryRebase {
    fn facts(&self) -> &'static crate::config::Facts {
        &crate::config::REGISTRY
    }

    /// No object: the daemon writes the rebased image itself.
    fn preview(
        &self,
        config: &Config,
        _action: &ActionRef<'_>,
        target: &ActionTarget,
    ) -> Result<serde_json::Value, PreviewError> {
        Ok(serde_json::json!({
            "runner": config.runner.kind.as_str(),
            "path": RebasePath::Registry.as_str(),
            "rebase": { "image": target.image, "run_image": target.run_image },
            "target": target,
        }))
    }

    fn start(
        &self,
        _: &Config,
        _: &super::carrier::Clusters,
        _: CancellationToken,
    ) -> Result<Arc<dyn Carrier>, RunnerError> {
        Ok(Arc::new(Rebaser { run_docs: RunImageDocs::default() }))
    }
}

impl Carrier for Rebaser {
    /// An earlier attempt's tag write settled first; then the rebase.
    fn attempt<'a>(
        &'a self,
        ctx: &'a Context,
        action: &'a ClaimedAction,
        target: &'a ActionTarget,
        verified: Option<&'a str>,
    ) -> BoxFuture<'a, Attempt> {
        Box::pin(async move {
            match ctx.open_intent(action).await {
                Ok(Some(intent)) => {
                    if let Some(settled) = ctx.settle_rebase(&intent).await {
                        return settled;
                    }
                }
                Ok(None) => {}
                Err(err) => {
                    let mut attempt =
                        Attempt::failed(format!("cannot read the action's open tag write: {err}"), Next::Retry);
                    attempt.keep_intent = true;
                    return attempt;
                }
            }
            ctx.rebase_in_registry(action, target, &self.run_docs, verified).await
        })
    }
}

/// What an open intent's tag holds now.
enum Settled {
    /// The write landed: the move is `expected` → `new`.
    Landed { expected: Option<String>, new: String },
    /// The tag still holds what it held before: the write did not happen.
    NotWritten,
    /// Neither: someone else moved it.
    Elsewhere { found: Option<String> },
}

/// The ledger's record of a rebase's tag write, made right before it (`crate::rebase::TagGuard`).
struct LedgerGuard<'a> {
    ctx: &'a Context,
    action: &'a ClaimedAction,
    target: &'a ActionTarget,
}

impl TagGuard for LedgerGuard<'_> {
    async fn before_write(&self, expected: &str, new: &str) -> Result<(), RebaseError> {
        let intent = TagIntent {
            image: self.action.image.clone(),
            reference: self.target.image.clone(),
            kind: TagMoveKind::Rebase,
            action: Some(self.action.key.clone()),
            expected: Some(expected.to_string()),
            new: Some(new.to_string()),
            time: self.ctx.clock.now(),
            by: None,
        };
        match self.ctx.ledger.begin_tag_write(&self.target.builder_name, intent).await {
            Ok(WriteGrant::Granted) => Ok(()),
            Ok(WriteGrant::Superseded { by }) => Err(RebaseError::Superseded { by }),
            Ok(WriteGrant::NotRunning) => Err(RebaseError::NotRunning),
            Err(err) => Err(RebaseError::Record(err)),
        }
    }
}

impl Context {
    /// The digest the app tag points at now; `None` when it does not exist or cannot be read soon.
    pub(super) async fn app_digest(&self, image: &str) -> Option<String> {
        self.read_tag(image).await.ok().flatten()
    }

    /// The digest `image` (a tag) holds: `Ok(None)` when it does not exist, `Err` when it cannot be
    /// read within `DIGEST_WAIT`.
    pub(super) async fn read_tag(&self, image: &str) -> Result<Option<String>, String> {
        let image = ImageRef::parse(image).map_err(|e| e.to_string())?;
        match tokio::time::timeout(DIGEST_WAIT, self.registry.head_manifest(&image)).await {
            Ok(Ok(head)) => Ok(Some(head.digest)),
            Ok(Err(crate::registry::RegistryError::NotFound { .. })) => Ok(None),
            Ok(Err(err)) => {
                tracing::debug!(image = %image, error = %err, "cannot read the app tag's digest");
                Err(err.to_string())
            }
            Err(_) => Err(format!("no answer within {}s", DIGEST_WAIT.as_secs())),
        }
    }

    /// The intent this action left open in an earlier attempt (a crash, or a write whose outcome
    /// could not be read).
    pub(super) async fn open_intent(&self, action: &ClaimedAction) -> Result<Option<TagIntent>, LedgerError> {
        let intents = self.ledger.tag_intents().await?;
        Ok(intents.into_iter().find(|i| i.action.as_deref() == Some(action.key.as_str())))
    }

    /// What `intent`'s tag holds now, or why it cannot be told.
    async fn settle(&self, intent: &TagIntent) -> Result<Settled, String> {
        let found = self.read_tag(&intent.reference).await?;
        Ok(match (&intent.new, found) {
            (Some(new), Some(found)) if *new == found => {
                Settled::Landed { expected: intent.expected.clone(), new: found }
            }
            (_, found) if found == intent.expected => Settled::NotWritten,
            (_, found) => Settled::Elsewhere { found },
        })
    }

    /// An earlier attempt's rebase write, settled before anything else is done: completed when the
    /// tag holds its digest, failed when it holds a third one; `None` when it did not land (this
    /// attempt starts over).
    pub(super) async fn settle_rebase(&self, intent: &TagIntent) -> Option<Attempt> {
        let new = intent.new.as_deref().unwrap_or("?");
        let expected = intent.expected.as_deref().unwrap_or("nothing");
        match self.settle(intent).await {
            Ok(Settled::NotWritten) => None,
            Ok(Settled::Landed { expected, new }) => {
                let detail = format!(
                    "the tag write of an earlier attempt landed ({} → {new}); recorded now",
                    expected.as_deref().unwrap_or("nothing")
                );
                let digests = Digests { before: expected, after: Some(new) };
                Some(Attempt::new(Outcome { success: true, detail, output_tail: String::new() }, Next::Final, digests))
            }
            Ok(Settled::Elsewhere { found }) => Some(Attempt::failed(
                format!(
                    "{} holds {}, neither {expected} (before an earlier attempt's write) nor {new} (what it wrote): someone else moved the tag; not retried",
                    intent.reference,
                    found.as_deref().unwrap_or("nothing (the tag is gone)")
                ),
                Next::Final,
            )),
            Err(why) => {
                let mut attempt = Attempt::failed(
                    format!("cannot tell whether an earlier attempt's write of {} landed: {why}", intent.reference),
                    Next::Retry,
                );
                attempt.keep_intent = true;
                Some(attempt)
            }
        }
    }

    /// A rebase by registry writes (`crate::rebase`), its tag write recorded first. With a
    /// `verified` digest, that digest is rebased and no other.
    pub(super) async fn rebase_in_registry(
        &self,
        action: &ClaimedAction,
        target: &ActionTarget,
        run_docs: &RunImageDocs,
        verified: Option<&str>,
    ) -> Attempt {
        let request = match self.rebase_request(action, target, verified).await {
            Ok(request) => request,
            Err(attempt) => return *attempt,
        };
        let guard = LedgerGuard { ctx: self, action, target };
        let planned = target.app_reference.as_deref().and_then(|r| ImageRef::parse(r).ok());
        let planned = planned.as_ref().and_then(|r| r.digest());
        match crate::rebase::rebase_planned(&self.registry, &request, &guard, run_docs, planned).await {
            Ok(report) => rebased(&report),
            Err(RebaseError::Superseded { by }) => Attempt::failed(
                "a newer change has an action for this image; nothing written".into(),
                Next::Superseded { by },
            ),
            Err(RebaseError::TagRace { image, previous, wrote, found }) => {
                let detail = RebaseError::TagRace {
                    image,
                    previous: previous.clone(),
                    wrote: wrote.clone(),
                    found: found.clone(),
                }
                .to_string();
                let mut attempt = Attempt::failed(detail, Next::Final);
                attempt.digests = Digests { before: Some(previous), after: Some(wrote) };
                attempt.moved = true;
                attempt.build_mut().tag_race = Some(found);
                attempt
            }
            Err(RebaseError::TagWriteUnknown { previous, wrote, source, .. }) => {
                let intent = TagIntent {
                    image: action.image.clone(),
                    reference: target.image.clone(),
                    kind: TagMoveKind::Rebase,
                    action: Some(action.key.clone()),
                    expected: Some(previous),
                    new: Some(wrote),
                    time: self.clock.now(),
                    by: None,
                };
                match self.settle_rebase(&intent).await {
                    Some(settled) => settled,
                    None => Attempt::failed(format!("the tag write failed: {source}"), Next::Retry),
                }
            }
            // Another attempt checks the signature of what the tag holds now.
            Err(RebaseError::TagMoved { image, expected, found }) if verified == Some(expected.as_str()) => {
                Attempt::failed(
                    format!(
                        "{image} moved from {expected}, whose signature was checked, to {found}, whose was not: \
                         {found} was not rebased and the tag was left alone; the next attempt checks {found}'s signature"
                    ),
                    Next::Retry,
                )
            }
            // Trying again cannot make an unsafe rebase safe.
            Err(err @ RebaseError::Refused(_)) => Attempt::failed(format!("rebase refused: {err}"), Next::Final),
            Err(err @ RebaseError::Unusable(_)) => Attempt::failed(err.to_string(), Next::Final),
            Err(err) => Attempt::failed(err.to_string(), Next::Retry),
        }
    }

    /// What a registry rebase of `action` asks `crate::rebase`: the tag (pinned to the `verified`
    /// digest, when one was checked), the run image with its pin history, how to sign; the failed
    /// attempt when one cannot be read.
    async fn rebase_request(
        &self,
        action: &ClaimedAction,
        target: &ActionTarget,
        verified: Option<&str>,
    ) -> Result<RebaseRequest, Box<Attempt>> {
        let fail = |detail: String, next| Box::new(Attempt::failed(detail, next));
        let image = ImageRef::parse(&target.image)
            .map_err(|err| fail(format!("invalid app image {}: {err}", target.image), Next::Final))?;
        // The tag and the digest it must still hold: `crate::rebase` reads nothing else.
        let image = match verified.map(|digest| ImageRef::parse(&format!("{}@{digest}", image.with_tag_only()))) {
            None => image,
            Some(Ok(pinned)) => pinned,
            Some(Err(err)) => {
                return Err(fail(format!("invalid verified digest of {}: {err}", target.image), Next::Final));
            }
        };
        let run_image =
            target.run_image.as_deref().ok_or_else(|| fail(RunnerError::NoRunImage.to_string(), Next::Final))?;
        let run_image = ImageRef::parse(run_image)
            .map_err(|err| fail(format!("invalid run image {run_image}: {err}"), Next::Final))?;
        let known_run_images =
            crate::rebase::known_run_images(&self.config, &self.ledger, Some(&target.builder_name), &run_image)
                .await
                .map_err(|err| fail(format!("cannot read the run image's pin history: {err}"), Next::Retry))?;
        let (change, key, vex) = (Some(action.change_id.clone()), Some(action.key.clone()), target.vex.clone());
        let sign = self.signing.as_ref().and_then(|s| SignPlan::of(s, change, key, action.created, vex));
        Ok(RebaseRequest { image, run_image, force: false, dry_run: false, known_run_images, sign })
    }

    /// For a runner's command, which pushes itself: the tag's digest before its first attempt,
    /// recorded before the command starts (an earlier attempt's record is kept), so the move is
    /// recorded from where it really started even when a crash made the command run twice.
    pub(super) async fn announce_push(&self, action: &ClaimedAction, target: &ActionTarget) -> Option<String> {
        match self.open_intent(action).await {
            Ok(Some(intent)) => return intent.expected,
            Ok(None) => {}
            Err(err) => tracing::warn!(action = %action.key, error = %err, "cannot read the action's open tag write"),
        }
        let before = self.app_digest(&target.image).await;
        let intent = TagIntent {
            image: action.image.clone(),
            reference: target.image.clone(),
            kind: action.kind.into(),
            action: Some(action.key.clone()),
            expected: before.clone(),
            new: None,
            time: self.clock.now(),
            by: None,
        };
        if let Err(err) = self.ledger.begin_tag_write(&target.builder_name, intent).await {
            tracing::warn!(action = %action.key, error = %err, "cannot record the tag write before the command");
        }
        before
    }
}

/// The attempt a registry rebase that went through makes: what it wrote, and the first digest it
/// signed (the one the tag points at) with the signatures it replaced.
fn rebased(report: &crate::rebase::RebaseReport) -> Attempt {
    let detail = match report.digest.as_deref() {
        Some(d) if d == report.previous => format!("already on {}; nothing written", report.reference),
        Some(d) => format!("rebased in the registry onto {}: {} → {d}", report.reference, report.previous),
        None => format!("rebase onto {} wrote nothing (dry run)", report.reference),
    };
    let digests = Digests { before: Some(report.previous.clone()), after: report.digest.clone() };
    let mut attempt = Attempt::new(Outcome { success: true, detail, output_tail: String::new() }, Next::Final, digests);
    if let Some(signing) = &report.signing
        && let Some(first) = signing.written.first()
    {
        attempt.signature = Some(first.info(&signing.key_id));
        let replaced = signing.written.iter().flat_map(|s| &s.replaced);
        attempt.replaced_signatures = replaced.map(ToString::to_string).collect();
    }
    attempt
}

/// The ledger's record of how an attempt moved the app tag: none when it wrote nothing, when the
/// tag stayed where it was, or when neither digest could be read.
pub(super) fn tag_move(
    action: &ClaimedAction,
    target: &ActionTarget,
    attempt: &Attempt,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<TagMove> {
    let Digests { before, after } = attempt.digests.clone();
    if !attempt.moved || before == after {
        return None;
    }
    Some(TagMove {
        image: action.image.clone(),
        reference: target.image.clone(),
        kind: action.kind.into(),
        action: Some(action.key.clone()),
        before,
        after,
        time: now,
        by: None,
        run_image: target.run_image.clone(),
    })
}
