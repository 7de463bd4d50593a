//! A rebase's writes by digest (the new run image's layers, configs, manifests, the index), each
//! through the registry client's one writer per blob and repository, and the few tries within the
//! attempt that a registry's transient refusal of a manifest PUT gets.
//!
//! Distribution rewrites a repository's link file for a blob on every mount or upload of it, and a
//! manifest PUT that reads the link half-written answers `400 DIGEST_INVALID`: a moment later the
//! same PUT passes. Such a refusal is tried again after a short jittered pause, a few times, never
//! left to the action's backoff; `BLOB_UNKNOWN` first forgets what this rebase wrote, so it is
//! written again.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};

use super::{Decided, RebaseError, decide, is_index};
use crate::registry::{BlobTransfer, Manifest, ManifestRefusal, Registry, RegistryError};
use builder_monitor_core::reference::ImageRef;

/// Blobs of one platform ensured at once: a few HEADs or mounts in flight, not a burst.
const BLOB_CONCURRENCY: usize = 4;
/// Tries of a rebase's manifest PUTs (by digest and the tag's together) when the registry refuses
/// them while blobs they name are being written: a few, within the attempt.
const WRITE_TRIES: u32 = 4;
/// The first pause before another try (jittered, doubling): a half-written link lasts a moment.
const WRITE_PAUSE: Duration = Duration::from_millis(100);

/// One rebase's writes, and what they did so far.
pub(super) struct Writes<'a> {
    registry: &'a Registry,
    app: &'a ImageRef,
    run: &'a ImageRef,
    app_top: &'a Manifest,
    pending: &'a [&'a Decided],
    /// The new run image's layers the pending platforms need: digest and size.
    wanted: Vec<(String, u64)>,
    /// How each layer came to be in the app's repository (the first transfer that moved it wins).
    transfers: BTreeMap<String, BlobTransfer>,
    /// Manifest PUTs refused so far.
    refusals: u32,
    /// Whether the top manifest (the tag's) is written by digest too, before the tag: only when
    /// something names it first (a signature); the tag's PUT alone stores it otherwise.
    top_by_digest: bool,
}

/// Why `write_content` stopped: a manifest PUT's refusal (which may be worth another try), or
/// anything else.
enum WriteFailure {
    Manifest(RegistryError),
    Other(RebaseError),
}

impl From<RegistryError> for WriteFailure {
    fn from(err: RegistryError) -> Self {
        WriteFailure::Other(err.into())
    }
}

impl<'a> Writes<'a> {
    pub(super) fn new(
        registry: &'a Registry,
        app: &'a ImageRef,
        run: &'a ImageRef,
        app_top: &'a Manifest,
        pending: &'a [&'a Decided],
        wanted: Vec<(String, u64)>,
        top_by_digest: bool,
    ) -> Self {
        let transfers = BTreeMap::new();
        Writes { registry, app, run, app_top, pending, wanted, transfers, refusals: 0, top_by_digest }
    }

    /// Everything of the rebased image but the tag, by digest; answers the top manifest's bytes
    /// and digest. What this process already wrote costs no request.
    pub(super) async fn content(&mut self) -> Result<(Vec<u8>, String), RebaseError> {
        loop {
            match self.write_content().await {
                Ok(written) => return Ok(written),
                Err(WriteFailure::Other(err)) => return Err(err),
                Err(WriteFailure::Manifest(err)) => self.again(err).await?,
            }
        }
    }

    /// After a refused manifest PUT: `Ok` once it is worth another try (what `BLOB_UNKNOWN` says
    /// is missing forgotten, the pause waited), else the refusal.
    pub(super) async fn again(&mut self, refused: RegistryError) -> Result<(), RegistryError> {
        self.refusals += 1;
        let Some(kind) = refused.manifest_refusal().filter(|_| self.refusals < WRITE_TRIES) else {
            return Err(refused);
        };
        if kind == ManifestRefusal::BlobUnknown {
            // The registry says otherwise than this process knew: all of it written again.
            let configs = self.pending.iter().map(|d| &d.rebase.config_digest);
            let manifests = self.pending.iter().map(|d| &d.rebase.manifest_digest);
            for digest in self.wanted.iter().map(|(d, _)| d).chain(configs).chain(manifests) {
                self.registry.forget_written(self.app, digest).await;
            }
        }
        let pause = write_pause(self.refusals, rand::random());
        tracing::info!(image = %self.app, error = %refused, tries = self.refusals, pause = ?pause, "a manifest PUT was refused while blobs it names were being written; trying again");
        tokio::time::sleep(pause).await;
        Ok(())
    }

    /// The new run image's layers as the app repository got them.
    pub(super) fn counts(&self) -> super::BlobCounts {
        let mut counts = super::BlobCounts::default();
        for transfer in self.transfers.values() {
            counts.add(*transfer);
        }
        counts
    }

    /// The layers, then each pending platform's config and manifest, then the index.
    async fn write_content(&mut self) -> Result<(Vec<u8>, String), WriteFailure> {
        let (registry, app, run) = (self.registry, self.app, self.run);
        // Owned items: a closure taking `&Blob` makes a future that is not `Send` for every
        // lifetime, and the daemon runs rebases on spawned tasks.
        let done: Vec<(String, BlobTransfer)> = futures::stream::iter(self.wanted.clone())
            .map(|(digest, size)| async move {
                let transfer = registry.ensure_blob(app, run, &digest, size).await?;
                Ok::<_, RegistryError>((digest, transfer))
            })
            .buffered(BLOB_CONCURRENCY)
            .try_collect()
            .await?;
        for (digest, transfer) in done {
            let kept = self.transfers.entry(digest).or_insert(transfer);
            if *kept == BlobTransfer::Present {
                *kept = transfer;
            }
        }
        let mut replaced = BTreeMap::new();
        let index = is_index(&self.app_top.media_type);
        for d in self.pending {
            registry.put_blob(app, d.rebase.config.clone().into()).await?;
            let (digest, media_type) = (&d.rebase.manifest_digest, &d.rebase.manifest_media_type);
            // An index's platform manifests are what it names by digest; a lone manifest is the top.
            if index || self.top_by_digest {
                registry
                    .put_manifest(app, digest, media_type, d.rebase.manifest.clone().into())
                    .await
                    .map_err(WriteFailure::Manifest)?;
            }
            let entry = (digest.clone(), d.rebase.manifest.len() as u64, media_type.clone());
            replaced.insert(d.previous.clone(), entry);
        }
        if index {
            let (bytes, digest) =
                decide::rebased_index(&self.app_top.bytes, &replaced).map_err(|e| WriteFailure::Other(e.into()))?;
            if self.top_by_digest {
                registry
                    .put_manifest(app, &digest, &self.app_top.media_type, bytes.clone().into())
                    .await
                    .map_err(WriteFailure::Manifest)?;
            }
            Ok((bytes, digest))
        } else {
            let only = &self.pending[0].rebase;
            Ok((only.manifest.clone(), only.manifest_digest.clone()))
        }
    }
}

/// The pause before the next try after `refusals` refusals, `random` in `0.0..1.0`: half fixed,
/// half random, doubling from `WRITE_PAUSE`, so the tasks a registry refused together come back
/// apart.
fn write_pause(refusals: u32, random: f64) -> Duration {
    let full = WRITE_PAUSE.saturating_mul(1 << refusals.saturating_sub(1).min(8));
    full / 2 + (full / 2).mul_f64(random.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_between_write_tries_are_short_jittered_and_doubling() {
        assert_eq!(write_pause(1, 0.0), Duration::from_millis(50));
        assert_eq!(write_pause(1, 1.0), Duration::from_millis(100));
        assert_eq!(write_pause(2, 0.5), Duration::from_millis(150));
        assert_eq!(write_pause(3, 1.0), Duration::from_millis(400));
        assert_eq!(write_pause(0, 2.0), Duration::from_millis(100), "clamped");
        let longest = write_pause(WRITE_TRIES - 1, 1.0);
        assert!(longest <= Duration::from_secs(1), "{longest:?}: within the attempt, not the action's backoff");
    }
}
