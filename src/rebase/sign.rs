//! A rebase's signatures: every digest the tag will lead to (the index and each platform
//! manifest under it, or the one manifest), signed as cosign signs what a tag points at, and
//! attested with what the rebase did (and, when its move claims a fix, what it fixes: OpenVEX). Written after everything exists by digest and the tag
//! write is recorded, before the tag moves, so no one finds the tag on a digest we did not sign.

use serde::Serialize;

use super::{Decided, RebaseError, decide};
use crate::registry::{Manifest, Registry};
use crate::signing::{Signed, SigningService, provenance, sign_keeping};
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::signing::{Descriptor, Provenance, Signer, Verifier};
use builder_monitor_core::vulns::openvex::VexFacts;
use chrono::{DateTime, Utc};

/// How a rebase signs what it writes: `[signing]`'s key, and the action it is part of.
#[derive(Debug, Clone)]
pub struct SignPlan {
    pub signer: Signer,
    /// The keys whose layers a replaced `.sig` or `.att` keeps (`[signing] trusted_keys` and ours).
    pub keep: Vec<Verifier>,
    /// Attest what was done, besides signing (`[signing] attest`).
    pub attest: bool,
    /// The change and the action the rebase carries out (the daemon's; none by hand).
    pub change: Option<String>,
    pub action: Option<String>,
    /// When the action was planned (now, by hand): dates the bundle, the same on every attempt.
    pub created: DateTime<Utc>,
    /// What the move fixes (the action's target carries it from the decision): each digest's
    /// OpenVEX attestation, when attesting.
    pub vex: Option<VexFacts>,
}

impl SignPlan {
    /// How a rebase signs what it writes with `signing`'s key for `action` (of `change`), planned
    /// at `created`; `None` without a key.
    pub fn of(
        signing: &SigningService,
        change: Option<String>,
        action: Option<String>,
        created: DateTime<Utc>,
        vex: Option<VexFacts>,
    ) -> Option<Self> {
        let signer = signing.signer()?.clone();
        let (keep, attest) = (signing.keep(), signing.settings().attest);
        Some(SignPlan { signer, keep, attest, change, action, created, vex })
    }
}

/// What a rebase signed (or, dry, would sign).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SigningReport {
    /// The signing key's id (sha256 of its public key, hex).
    pub key_id: String,
    pub attest: bool,
    /// The digests signed, the tag's first.
    pub digests: Vec<String>,
    /// The `.sig` (and `.att`) manifests holding our layers; empty for a dry run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub written: Vec<Signed>,
}

/// One digest to sign, and what it came from.
pub(super) struct ToSign {
    digest: String,
    media_type: String,
    size: u64,
    from: String,
    run_image: String,
}

/// The digests a tag on `top_digest` leads to: an index first, then each platform's manifest
/// (a platform already on the run image keeps its digest, and is signed too: the tag leads there).
pub(super) fn what_to_sign(
    app_top: &Manifest,
    run_top: &str,
    decided: &[Decided],
    (top_digest, top_size): (&str, usize),
) -> Vec<ToSign> {
    let mut out = Vec::new();
    if super::is_index(&app_top.media_type) {
        out.push(ToSign {
            digest: top_digest.to_string(),
            media_type: app_top.media_type.clone(),
            size: top_size as u64,
            from: app_top.digest.clone(),
            run_image: run_top.into(),
        });
    }
    for d in decided {
        if out.iter().all(|s| s.digest != d.rebase.manifest_digest) {
            out.push(ToSign {
                digest: d.rebase.manifest_digest.clone(),
                media_type: d.rebase.manifest_media_type.clone(),
                size: d.rebase.manifest.len() as u64,
                from: d.previous.clone(),
                run_image: d.run_image.clone(),
            });
        }
    }
    out
}

/// The new index's digest a rebase of `pending` would write (a dry run's list of what it would
/// sign); the one manifest's for a single-manifest app.
pub(super) fn top_digest(app_top: &Manifest, decided: &[Decided]) -> Result<(String, usize), RebaseError> {
    if !super::is_index(&app_top.media_type) {
        let only = decided.first().map(|d| (d.rebase.manifest_digest.clone(), d.rebase.manifest.len()));
        return Ok(only.unwrap_or_default());
    }
    let replaced = decided
        .iter()
        .filter(|d| !d.rebase.already_rebased)
        .map(|d| {
            let entry = (
                d.rebase.manifest_digest.clone(),
                d.rebase.manifest.len() as u64,
                d.rebase.manifest_media_type.clone(),
            );
            (d.previous.clone(), entry)
        })
        .collect();
    let (bytes, digest) = decide::rebased_index(&app_top.bytes, &replaced)?;
    Ok((digest, bytes.len()))
}

impl SignPlan {
    /// The report of a dry run: what would be signed.
    pub(super) fn preview(&self, items: &[ToSign]) -> SigningReport {
        SigningReport {
            key_id: self.signer.key_id().to_string(),
            attest: self.attest,
            digests: items.iter().map(|i| i.digest.clone()).collect(),
            written: Vec::new(),
        }
    }

    /// Signs (and attests) each of `items` in `app`'s repository.
    pub(super) async fn sign(
        &self,
        registry: &Registry,
        app: &ImageRef,
        items: &[ToSign],
    ) -> Result<SigningReport, RebaseError> {
        let mut report = self.preview(items);
        for item in items {
            let provenance = self.attest.then(|| Provenance {
                from: Some(item.from.clone()),
                run_image: Some(item.run_image.clone()),
                change: self.change.clone(),
                action: self.action.clone(),
                openvex: self
                    .vex
                    .as_ref()
                    .and_then(|facts| crate::signing::openvex(facts, app, &item.digest, self.created)),
                ..provenance("rebase", app)
            });
            let subject = Descriptor {
                media_type: item.media_type.clone(),
                size: item.size,
                digest: item.digest.clone(),
                annotations: None,
                artifact_type: None,
            };
            let signed =
                sign_keeping(registry, app, &subject, &self.signer, &self.keep, provenance.as_ref(), self.created)
                    .await
                    .map_err(Box::new)?;
            report.written.push(signed);
        }
        Ok(report)
    }
}
