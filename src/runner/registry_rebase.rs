//! Registry rebases in the daemon (`[runner] rebase = "registry"`), and the app tag's digests
//! around any action, which the ledger keeps as tag moves (what `rollback` goes back by).

use super::*;

/// The app tag's digests around an attempt, as far as they are known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Digests {
    pub(super) before: Option<String>,
    pub(super) after: Option<String>,
}

impl Runner {
    /// The digest the app tag points at now; `None` when it does not exist or cannot be read soon.
    pub(super) async fn app_digest(&self, image: &str) -> Option<String> {
        let image = ImageRef::parse(image).ok()?;
        match tokio::time::timeout(DIGEST_WAIT, self.registry.head_manifest(&image)).await {
            Ok(Ok(head)) => Some(head.digest),
            Ok(Err(err)) => {
                tracing::debug!(image = %image, error = %err, "cannot read the app tag's digest");
                None
            }
            Err(_) => None,
        }
    }

    /// A rebase by registry writes (`crate::rebase`): the outcome, whether a retry could help (not
    /// after a refusal), and the digests from the report.
    pub(super) async fn rebase_in_registry(&self, target: &ActionTarget) -> (Outcome, bool, Digests) {
        let fail = |detail: String, retryable: bool| {
            (Outcome { success: false, detail, output_tail: String::new() }, retryable, Digests::default())
        };
        let image = match ImageRef::parse(&target.image) {
            Ok(i) => i,
            Err(err) => return fail(format!("invalid app image {}: {err}", target.image), false),
        };
        let Some(run_image) = target.run_image.as_deref() else {
            return fail(RunnerError::NoRunImage.to_string(), false);
        };
        let run_image = match ImageRef::parse(run_image) {
            Ok(r) => r,
            Err(err) => return fail(format!("invalid run image {run_image}: {err}"), false),
        };
        let request = RebaseRequest { image, run_image, force: false, dry_run: false };
        match crate::rebase::rebase(&self.registry, &request).await {
            Ok(report) => {
                let detail = match report.digest.as_deref() {
                    Some(d) if d == report.previous => {
                        format!("already on {}; nothing written", report.reference)
                    }
                    Some(d) => format!("rebased in the registry onto {}: {} → {d}", report.reference, report.previous),
                    None => format!("rebase onto {} wrote nothing (dry run)", report.reference),
                };
                let digests = Digests { before: Some(report.previous.clone()), after: report.digest.clone() };
                (Outcome { success: true, detail, output_tail: String::new() }, true, digests)
            }
            // Trying again cannot make an unsafe rebase safe.
            Err(err @ RebaseError::Refused(_)) => fail(format!("rebase refused: {err}"), false),
            Err(err @ RebaseError::Unusable(_)) => fail(err.to_string(), false),
            Err(err) => fail(err.to_string(), true),
        }
    }
}

/// The ledger's record of how a successful attempt moved the app tag: none when it failed, when the
/// tag stayed where it was, or when neither digest could be read.
pub(super) fn tag_move(
    action: &ClaimedAction,
    target: &ActionTarget,
    success: bool,
    digests: Digests,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<TagMove> {
    let Digests { before, after } = digests;
    if !success || before == after {
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
    })
}
