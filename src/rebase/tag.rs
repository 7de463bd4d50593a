//! A decided rebase carried out: previewed (`--dry-run`: what each blob would cost, what would be
//! signed), or written — blobs, configs and manifests by digest, the signatures, then the tag,
//! recorded first and only over what was read.

use super::{BlobTransfer, Decided, RebaseError, RebaseReport, RebaseRequest, TagGuard, sign, unique_blobs};
use crate::registry::{Manifest, Registry, RegistryError};
use builder_monitor_core::reference::ImageRef;

use super::writes::Writes;

/// One app's rebase, decided.
pub(super) struct Rebasing<'a> {
    pub(super) registry: &'a Registry,
    pub(super) request: &'a RebaseRequest,
    /// The app's tag, as the request names it.
    pub(super) tag: &'a str,
    /// The app image by its tag alone: HEADs and PUTs name it, never a digest the user added.
    pub(super) tagged: &'a ImageRef,
    /// The app's top manifest as read (by tag, or kept from planning).
    pub(super) app_top: &'a Manifest,
    pub(super) decided: &'a [Decided],
}

impl Rebasing<'_> {
    /// The platforms not rebased yet.
    fn pending(&self) -> Vec<&Decided> {
        self.decided.iter().filter(|d| !d.rebase.already_rebased).collect()
    }

    /// `--dry-run`: how each of the new run image's layers would reach the app's repository, and
    /// what would be signed; nothing written.
    pub(super) async fn preview(&self, report: &mut RebaseReport) -> Result<(), RebaseError> {
        let (app, run) = (&self.request.image, &self.request.run_image);
        let pending = self.pending();
        let same_registry = app.registry() == run.registry();
        for blob in &unique_blobs(&pending) {
            report.blobs.add(if held(&pending, &blob.digest) || self.registry.blob_exists(app, &blob.digest).await? {
                BlobTransfer::Present
            } else if same_registry {
                BlobTransfer::Mounted
            } else {
                BlobTransfer::Copied { bytes: blob.size }
            });
        }
        if let Some(plan) = self.request.sign.as_ref().filter(|_| !pending.is_empty()) {
            let (top, size) = sign::top_digest(self.app_top, self.decided)?;
            let items = sign::what_to_sign(self.app_top, &report.reference, self.decided, (&top, size));
            report.signing = Some(plan.preview(&items));
        }
        Ok(())
    }

    /// Writes the rebase: content by digest, then (when signing) the signatures of what the tag
    /// still holds, then the tag. Nothing pending: the tag already holds a rebase of it.
    pub(super) async fn write(&self, guard: &impl TagGuard, report: &mut RebaseReport) -> Result<(), RebaseError> {
        let (registry, app, app_top) = (self.registry, &self.request.image, self.app_top);
        let pending = self.pending();
        if pending.is_empty() {
            report.digest = Some(app_top.digest.clone());
            return Ok(());
        }
        let base_blobs = unique_blobs(&pending);
        let wanted: Vec<(String, u64)> =
            base_blobs.iter().filter(|b| !held(&pending, &b.digest)).map(|b| (b.digest.clone(), b.size)).collect();
        let present = base_blobs.len() - wanted.len();
        // The top manifest by digest before the tag only where a signature names it first; otherwise
        // the tag's PUT stores it.
        let run = &self.request.run_image;
        let mut writes = Writes::new(registry, app, run, app_top, &pending, wanted, self.request.sign.is_some());
        let (top_bytes, top_digest) = writes.content().await?;

        // The tag last, recorded first, and only over what we read: a build that moved it meanwhile
        // wins. The HEAD and the PUT go back to back, and a HEAD after the PUT tells whether another
        // writer's landed right behind ours (the registry API has no compare-and-set on tags). A PUT
        // refused while blobs were being written did not land: HEAD and PUT again, within the attempt.
        guard.before_write(&app_top.digest, &top_digest).await?;
        if let Some(plan) = &self.request.sign {
            // The tag first: a signature lands only for a rebase of what the tag still holds. One
            // that then loses the race to the tag's PUT signs a correct rebase of the digest we read
            // (and verified, under `require_signed`): harmless, and what a retry would sign again.
            self.tag_unmoved().await?;
            let items = sign::what_to_sign(app_top, &report.reference, self.decided, (&top_digest, top_bytes.len()));
            report.signing = Some(plan.sign(registry, self.tagged, &items).await?);
        }
        loop {
            self.tag_unmoved().await?;
            let Err(source) = registry.put_manifest(app, self.tag, &app_top.media_type, top_bytes.clone().into()).await
            else {
                break;
            };
            if let Err(source) = writes.again(source).await {
                // A 4xx answer says the registry refused it: it did not land.
                if matches!(source, RegistryError::Rejected { .. }) {
                    return Err(source.into());
                }
                return Err(RebaseError::TagWriteUnknown {
                    image: app.with_tag_only(),
                    previous: app_top.digest.clone(),
                    wrote: top_digest,
                    source: Box::new(source),
                });
            }
            // What BLOB_UNKNOWN made it forget is written again before the tag (by digest: the same).
            writes.content().await?;
        }
        report.blobs = writes.counts();
        report.blobs.present += present;
        self.read_back(&top_digest).await?;
        report.digest = Some(top_digest);
        Ok(())
    }

    /// The tag still holds what was read, or the rebase is of a digest it no longer holds.
    async fn tag_unmoved(&self) -> Result<(), RebaseError> {
        let now = self.registry.head_manifest(self.tagged).await?;
        if now.digest != self.app_top.digest {
            return Err(RebaseError::TagMoved {
                image: self.request.image.with_tag_only(),
                expected: self.app_top.digest.clone(),
                found: now.digest,
            });
        }
        Ok(())
    }

    /// The tag read back after our PUT: another writer's digest right behind ours is a race lost.
    async fn read_back(&self, top_digest: &str) -> Result<(), RebaseError> {
        let app = &self.request.image;
        match self.registry.head_manifest(self.tagged).await {
            Ok(after) if after.digest != top_digest => Err(RebaseError::TagRace {
                image: app.with_tag_only(),
                previous: self.app_top.digest.clone(),
                wrote: top_digest.to_string(),
                found: after.digest,
            }),
            // Our PUT was answered 2xx: a HEAD that fails after it does not undo it.
            Ok(_) => Ok(()),
            Err(err) => {
                tracing::warn!(image = %app, error = %err, "cannot read the tag back after the rebase wrote it");
                Ok(())
            }
        }
    }
}

/// Whether a layer is in the app's repository already: the app's manifest lists it, so no
/// request makes it so again.
fn held(pending: &[&Decided], digest: &str) -> bool {
    pending.iter().any(|d| d.held.contains(digest))
}
