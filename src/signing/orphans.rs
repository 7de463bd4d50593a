//! Referrer artifacts we wrote for digests that no tag reaches any more: found, and removed only
//! when asked. A repository's tags are listed; its ordinary tags (and the manifests of the indexes
//! they hold) are what is reached; every other digest that has a `sha256-<hex>.sig`, `.att` or
//! referrers tag index, or that the caller knows we wrote, is looked at. Of its artifacts, those
//! that hold only what our key signed about that digest are ours: the `.sig` and `.att` manifests
//! whose every layer our key signed, the Sigstore bundle referrers our key signed, and the
//! referrers tag index when it lists only those. An artifact that also holds another signer's
//! content is listed as kept, with why, and never removed; one that holds nothing of ours is not
//! listed at all.
//!
//! Removal goes by digest (Distribution removes the tags with the manifest; a registry that keeps
//! the tag, as go-containerregistry's does, then has it deleted by name), index first and the
//! `.sig` last, so a run cut short is found again by the next. Each removal is logged with its
//! repository, digest and subject before it is asked for.

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use serde::Serialize;

use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::signing::{
    AttachedManifest, Attachment, AttachmentTag, MAX_REFERRERS_INDEX_BYTES, MAX_SIGNATURE_BYTES, Verifier,
    attachment_tag, bundle_layer, bundle_signs, carried_layer_verifies, index_digests,
};

use crate::registry::{DOCKER_MANIFEST_LIST, OCI_INDEX, Referrers, Registry, RegistryError};

/// Tags read at once when finding what they reach.
const CONCURRENT_READS: usize = 8;

/// Why a repository could not be looked at or cleaned; what was removed before stays removed.
#[derive(Debug, thiserror::Error)]
pub enum OrphanError {
    #[error("{repository}: {step}: {source}")]
    Registry { repository: String, step: String, source: RegistryError },
    #[error("{0}: not a repository reference")]
    Reference(String),
}

/// What kind of artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactKind {
    /// The referrers tag schema's index (`sha256-<hex>`).
    ReferrersIndex,
    /// A Sigstore bundle referrer (a signature's or an attestation's).
    Bundle,
    /// The `.att` manifest.
    Attestation,
    /// The `.sig` manifest.
    Signature,
}

impl ArtifactKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ArtifactKind::ReferrersIndex => "referrers index",
            ArtifactKind::Bundle => "bundle referrer",
            ArtifactKind::Attestation => "attestation",
            ArtifactKind::Signature => "signature",
        }
    }
}

/// One manifest attached to an orphaned digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Artifact {
    pub kind: ArtifactKind,
    /// Its tag, for the tag forms and the referrers index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    pub digest: String,
    /// Why it is left alone (it also holds another signer's content); none when it is ours alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
    /// Whether this run removed it.
    pub deleted: bool,
}

/// A digest no tag reaches, and what of ours is attached to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrphanedDigest {
    pub digest: String,
    pub artifacts: Vec<Artifact>,
}

/// One repository looked at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepositoryOrphans {
    /// `registry/repository`.
    pub repository: String,
    /// Tags listed.
    pub tags: usize,
    /// Digests the ordinary tags reach (the indexes' manifests included).
    pub reached: usize,
    /// Whether the registry serves the OCI 1.1 referrers API (`None`: not asked, nothing to look at).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub referrers_api: Option<bool>,
    pub orphans: Vec<OrphanedDigest>,
}

/// Finds, in `image`'s repository, the artifacts `ours` signed for digests no tag reaches:
/// the digests with attachment tags, and `known` (digests we wrote there, from the ledger),
/// except `exclude` (digests a write in progress is about to tag).
pub async fn find(
    registry: &Registry,
    image: &ImageRef,
    ours: &Verifier,
    known: &BTreeSet<String>,
    exclude: &BTreeSet<String>,
) -> Result<RepositoryOrphans, OrphanError> {
    let repository = format!("{}/{}", image.registry(), image.repository());
    let failed = |step: &str| {
        let (repository, step) = (repository.clone(), step.to_string());
        move |source| OrphanError::Registry { repository, step, source }
    };
    let tags = registry.list_tags(image).await.map_err(failed("list its tags"))?;
    let mut attached: BTreeMap<String, BTreeSet<AttachmentTag>> = BTreeMap::new();
    let mut ordinary = Vec::new();
    for tag in &tags {
        match attachment_tag(tag) {
            Some((kind, digest)) => {
                attached.entry(digest).or_default().insert(kind);
            }
            None => ordinary.push(tag.as_str()),
        }
    }
    let reached = reached(registry, image, &ordinary).await.map_err(failed("read what its tags hold"))?;
    let candidates: BTreeSet<String> = attached.keys().chain(known).cloned().collect();
    let candidates: Vec<String> =
        candidates.into_iter().filter(|d| !reached.contains(d) && !exclude.contains(d)).collect();
    let mut found = RepositoryOrphans {
        repository: repository.clone(),
        tags: tags.len(),
        reached: reached.len(),
        referrers_api: None,
        orphans: Vec::new(),
    };
    let look = Look { registry, image, ours, repository: &repository };
    for digest in candidates {
        let kinds = attached.get(&digest).cloned().unwrap_or_default();
        let (artifacts, api) =
            look.artifacts(&digest, &kinds).await.map_err(failed(&format!("read what {digest} carries")))?;
        found.referrers_api = found.referrers_api.or(api);
        if !artifacts.is_empty() {
            found.orphans.push(OrphanedDigest { digest, artifacts });
        }
    }
    Ok(found)
}

/// The digests `tags` of `image`'s repository hold, and the manifests of those that are indexes.
async fn reached(registry: &Registry, image: &ImageRef, tags: &[&str]) -> Result<BTreeSet<String>, RegistryError> {
    let heads = futures::stream::iter(tags)
        .map(|tag| async move {
            let Ok(tagged) = ImageRef::parse(&format!("{}/{}:{tag}", image.registry(), image.repository())) else {
                return Ok(None);
            };
            match registry.head_manifest(&tagged).await {
                Ok(head) => Ok(Some(head)),
                // Removed since it was listed: it reaches nothing.
                Err(RegistryError::NotFound { .. }) => Ok(None),
                Err(err) => Err(err),
            }
        })
        .buffer_unordered(CONCURRENT_READS)
        .collect::<Vec<_>>()
        .await;
    let mut reached = BTreeSet::new();
    for head in heads {
        let Some(head) = head? else { continue };
        let index = head.media_type.as_deref().is_none_or(|t| t == OCI_INDEX || t == DOCKER_MANIFEST_LIST);
        if index && reached.insert(head.digest.clone()) {
            let manifest = registry.get_manifest(image, &head.digest).await?;
            reached.extend(index_digests(&manifest.bytes).unwrap_or_default());
        }
        reached.insert(head.digest);
    }
    Ok(reached)
}

/// Reading one repository's artifacts with our key.
struct Look<'a> {
    registry: &'a Registry,
    image: &'a ImageRef,
    ours: &'a Verifier,
    /// `registry/repository`, as signature payloads name it.
    repository: &'a str,
}

impl Look<'_> {
    /// What of ours `digest` carries (its attachment tags `kinds`), and, when its referrers were
    /// asked for, whether the registry has the referrers API.
    async fn artifacts(
        &self,
        digest: &str,
        kinds: &BTreeSet<AttachmentTag>,
    ) -> Result<(Vec<Artifact>, Option<bool>), RegistryError> {
        let mut artifacts = Vec::new();
        // Asked once per registry (remembered by the client).
        let api = self.registry.has_referrers_api(self.image, digest).await?;
        if api {
            if let Referrers::Listed(listed) = self.registry.list_referrers(self.image, digest).await? {
                for descriptor in listed {
                    if self.our_bundle(digest, &descriptor.digest).await? {
                        artifacts.push(artifact(ArtifactKind::Bundle, None, descriptor.digest, None));
                    }
                }
            }
        } else if kinds.contains(&AttachmentTag::ReferrersIndex) {
            artifacts.extend(self.indexed(digest).await?);
        }
        for (tagged, kind, attachment) in [
            (AttachmentTag::Attestation, ArtifactKind::Attestation, Attachment::Attestation),
            (AttachmentTag::Signature, ArtifactKind::Signature, Attachment::Signature),
        ] {
            if kinds.contains(&tagged) {
                artifacts.extend(self.attached(digest, kind, attachment).await?);
            }
        }
        Ok((artifacts, Some(api)))
    }

    /// The referrers tag index of `digest` and the bundles it lists that are ours: all removable
    /// when it lists nothing else, else all kept.
    async fn indexed(&self, digest: &str) -> Result<Vec<Artifact>, RegistryError> {
        let tag = format!("sha256-{}", digest.trim_start_matches("sha256:"));
        let index = match self.registry.get_manifest_within(self.image, &tag, MAX_REFERRERS_INDEX_BYTES).await {
            Ok(index) => index,
            Err(RegistryError::NotFound { .. }) => return Ok(Vec::new()),
            Err(err) => return Err(err),
        };
        let Some(listed) = index_digests(&index.bytes) else { return Ok(Vec::new()) };
        let mut bundles = Vec::new();
        let mut others = 0;
        for referrer in &listed {
            if self.our_bundle(digest, referrer).await? {
                bundles.push(referrer.clone());
            } else {
                others += 1;
            }
        }
        if bundles.is_empty() {
            return Ok(Vec::new());
        }
        let kept = (others > 0)
            .then(|| format!("the referrers index of {digest} also lists {others} referrers not signed by our key"));
        let mut artifacts = vec![artifact(ArtifactKind::ReferrersIndex, Some(tag), index.digest, kept.clone())];
        artifacts.extend(bundles.into_iter().map(|b| artifact(ArtifactKind::Bundle, None, b, kept.clone())));
        Ok(artifacts)
    }

    /// Whether the manifest `referrer` is a Sigstore bundle referrer of `digest` our key signed.
    async fn our_bundle(&self, digest: &str, referrer: &str) -> Result<bool, RegistryError> {
        let manifest = match self.registry.get_manifest_within(self.image, referrer, MAX_SIGNATURE_BYTES).await {
            Ok(m) => m,
            Err(RegistryError::NotFound { .. } | RegistryError::InvalidResponse { .. }) => return Ok(false),
            Err(err) => return Err(err),
        };
        let Some((layer, size)) = bundle_layer(&manifest.bytes, digest) else { return Ok(false) };
        if size > MAX_SIGNATURE_BYTES as u64 {
            return Ok(false);
        }
        match self.registry.get_blob(self.image, &layer, MAX_SIGNATURE_BYTES).await {
            Ok(bundle) => Ok(bundle_signs(&bundle, digest, self.ours)),
            Err(RegistryError::NotFound { .. } | RegistryError::InvalidResponse { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// `digest`'s `.sig` or `.att` manifest when our key signed a layer of it: removable when every
    /// layer is ours, else kept.
    async fn attached(
        &self,
        digest: &str,
        kind: ArtifactKind,
        attachment: Attachment,
    ) -> Result<Option<Artifact>, RegistryError> {
        let Some(tag) = attachment.tag(digest) else { return Ok(None) };
        let manifest = match self.registry.get_manifest_within(self.image, &tag, MAX_SIGNATURE_BYTES).await {
            Ok(m) => m,
            Err(RegistryError::NotFound { .. } | RegistryError::InvalidResponse { .. }) => return Ok(None),
            Err(err) => return Err(err),
        };
        let Ok(parsed) = AttachedManifest::parse(&tag, &manifest.bytes) else { return Ok(None) };
        let mut budget = MAX_SIGNATURE_BYTES;
        let (mut mine, mut others) = (0, 0);
        for layer in &parsed.layers {
            let blob = if layer.size <= budget as u64 {
                match self.registry.get_blob(self.image, &layer.digest, budget).await {
                    Ok(blob) => Some(blob),
                    Err(RegistryError::NotFound { .. } | RegistryError::InvalidResponse { .. }) => None,
                    Err(err) => return Err(err),
                }
            } else {
                None
            };
            budget = budget.saturating_sub(blob.as_ref().map_or(0, |b| b.len()));
            let ours =
                blob.is_some_and(|b| carried_layer_verifies(attachment, layer, &b, digest, self.repository, self.ours));
            if ours { mine += 1 } else { others += 1 }
        }
        if mine == 0 {
            return Ok(None);
        }
        let kept = (others > 0).then(|| format!("{tag} also holds {others} layers not signed by our key"));
        Ok(Some(artifact(kind, Some(tag), manifest.digest, kept)))
    }
}

fn artifact(kind: ArtifactKind, tag: Option<String>, digest: String, kept: Option<String>) -> Artifact {
    Artifact { kind, tag, digest, kept, deleted: false }
}

/// Removes what [`find`] found that is ours alone (the kept are left), marking each removed: per
/// digest the referrers index first, the bundles, the `.att`, the `.sig` last. Stops at the first
/// refusal (a registry that does not allow deletes says what to change).
pub async fn delete(registry: &Registry, image: &ImageRef, found: &mut RepositoryOrphans) -> Result<(), OrphanError> {
    let repository = found.repository.clone();
    for orphan in &mut found.orphans {
        orphan.artifacts.sort_by_key(|a| a.kind);
        for artifact in orphan.artifacts.iter_mut().filter(|a| a.kept.is_none()) {
            tracing::info!(repository = %repository, subject = %orphan.digest, kind = artifact.kind.as_str(), tag = artifact.tag.as_deref().unwrap_or(""), digest = %artifact.digest, source = "referrers orphans --delete", "removing an artifact we wrote for a digest no tag reaches");
            let failed = |source| OrphanError::Registry {
                repository: repository.clone(),
                step: format!("remove the {} {} of {}", artifact.kind.as_str(), artifact.digest, orphan.digest),
                source,
            };
            registry.delete_manifest(image, &artifact.digest).await.map_err(failed)?;
            if let Some(tag) = &artifact.tag {
                remove_tag_left(registry, image, tag, &artifact.digest).await.map_err(failed)?;
            }
            artifact.deleted = true;
        }
    }
    Ok(())
}

/// A registry that keeps a tag when the manifest it held is deleted by digest (go-containerregistry's
/// registry does) has the tag deleted by name, when it still holds that digest.
async fn remove_tag_left(registry: &Registry, image: &ImageRef, tag: &str, digest: &str) -> Result<(), RegistryError> {
    let tagged = ImageRef::parse(&format!("{}/{}:{tag}", image.registry(), image.repository())).map_err(|e| {
        RegistryError::InvalidResponse { registry: image.registry().to_string(), detail: e.to_string() }
    })?;
    match registry.head_manifest(&tagged).await {
        Ok(head) if head.digest == digest => registry.delete_manifest(image, tag).await.map(drop),
        Ok(_) | Err(RegistryError::NotFound { .. }) => Ok(()),
        Err(err) => Err(err),
    }
}
