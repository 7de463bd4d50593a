//! Signing a digest we wrote: a simple-signing layer appended to its `.sig` manifest, the same
//! signature as a Sigstore bundle referrer ([`super::bundle`]) and, when attesting, a DSSE layer
//! with SLSA provenance appended to its `.att` and the same envelope as a second bundle referrer
//! (cosign v2.6 and v3 read attestations only from bundles once a digest has one); a write that
//! claims a fix also attests its OpenVEX document, a second `.att` layer and a third referrer.
//! Each append reads what is there, keeps every layer another signer put there, and writes
//! nothing when our layer is there already: the same key signs the same payload to the same
//! bytes (RFC 6979), so a retry after a crash finds its own layer instead of adding a second.
//!
//! A `.sig` or `.att` that cannot take our layer (not an OCI image manifest, no room for one more
//! layer, over the size we read, or naming blobs the repository lacks: what anyone who can push
//! could plant for the digest a rebase will write) is replaced by a fresh OCI manifest of our layer
//! and the other signers' layers that still exist and still verify with a trusted key, bounded
//! ([`builder_monitor_core::signing::carry_candidates`]); what was replaced is logged and reported
//! ([`Replaced`]) for the caller to raise.

use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::signing::{
    AttachedError, AttachedManifest, Attachment, Descriptor, Envelope, Layer, MAX_CARRIED_BYTES, MAX_SIGNATURE_BYTES,
    OPENVEX_PREDICATE_TYPE, Provenance, Referrer, SLSA_PROVENANCE_V1, Signer, Statement, Verifier, attestation_layer,
    carried_layer_verifies, carry_candidates, signature_layer,
};
use builder_monitor_core::vulns::openvex::{self, VexFacts};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::bundle::{BundleError, write_referrers};
use crate::registry::{Manifest, Registry, RegistryError};

/// Why a digest could not be signed; the tag it was written for does not move.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("cannot sign {digest}: {source}")]
    Registry { digest: String, source: RegistryError },
    #[error("cannot sign {digest}: {source}: remove or repair that tag")]
    Attached { digest: String, source: AttachedError },
    #[error("cannot sign {0}: it is not a sha256 digest")]
    Digest(String),
    #[error(transparent)]
    Bundle(#[from] BundleError),
}

/// What signing one digest left in the registry: the manifests holding our layers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signed {
    /// The digest signed.
    pub digest: String,
    /// The `.sig` manifest's digest.
    pub signature: String,
    /// The Sigstore bundle's referrer manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
    /// The `.att` manifest's digest, when attesting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<String>,
    /// The attestation's Sigstore bundle referrer manifest, when attesting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation_bundle: Option<String>,
    /// The OpenVEX attestation's bundle referrer manifest, when the write claims a fix (its
    /// envelope is a layer of the `.att` manifest above too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openvex_bundle: Option<String>,
    /// The `.sig` or `.att` manifests found that could not be extended, replaced by fresh ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaced: Vec<Replaced>,
}

/// A `.sig` or `.att` manifest that could not take our layer and was replaced by a fresh one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replaced {
    /// Its tag (`sha256-<hex>.sig`).
    pub tag: String,
    /// Its digest as read; none when it could not be read within the bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Why it could not be extended.
    pub why: String,
    /// The other signers' layers carried into the fresh manifest.
    pub carried: usize,
}

impl std::fmt::Display for Replaced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "replaced {}", self.tag)?;
        if let Some(digest) = &self.digest {
            write!(f, " ({digest})")?;
        }
        write!(f, ", which could not take our signature: {}; {} other signatures carried over", self.why, self.carried)
    }
}

impl Signed {
    /// What the ledger and events keep of it (`action.signature`), signed by `key_id`.
    pub fn info(&self, key_id: &str) -> builder_monitor_core::signing::SignatureInfo {
        builder_monitor_core::signing::SignatureInfo {
            digest: Some(self.digest.clone()),
            key_id: Some(key_id.to_string()),
            signature: Some(self.signature.clone()),
            attestation: self.attestation.clone(),
            verified: None,
        }
    }
}

/// What this version of builder-monitor attests of a `kind` of write to `image`'s tag: the rest
/// (what it came from, the action) is the caller's to fill in.
pub fn provenance(kind: &str, image: &ImageRef) -> Provenance {
    Provenance {
        kind: kind.to_string(),
        image: image.with_tag_only(),
        from: None,
        run_image: None,
        builder: None,
        change: None,
        action: None,
        version: env!("CARGO_PKG_VERSION").into(),
        openvex: None,
    }
}

/// The OpenVEX document of what `facts`' move fixes in `digest` of `image`'s repository, dated
/// `created` (the action's planning time: every attempt attests the same bytes); `None` when it
/// claims no fix there.
pub fn openvex(facts: &VexFacts, image: &ImageRef, digest: &str, created: DateTime<Utc>) -> Option<serde_json::Value> {
    let repository = format!("{}/{}", image.registry(), image.repository());
    let product = openvex::Product { repository: &repository, digest };
    openvex::document(facts, product, openvex::Authored { timestamp: created, version: env!("CARGO_PKG_VERSION") })
}

/// Signs `subject` (a manifest in `image`'s repository) with `signer` in both forms, and attests
/// `provenance` when given. `created` dates the bundle's referrer: the action's planning time, so
/// every attempt writes the same bytes. A `.sig` or `.att` replaced keeps the layers our own key
/// verifies ([`sign_keeping`] names more keys).
pub async fn sign(
    registry: &Registry,
    image: &ImageRef,
    subject: &Descriptor,
    signer: &Signer,
    provenance: Option<&Provenance>,
    created: DateTime<Utc>,
) -> Result<Signed, SignError> {
    sign_keeping(registry, image, subject, signer, &[signer.verifier()], provenance, created).await
}

/// [`sign`], a replaced `.sig` or `.att` keeping the other signers' layers that one of `keep`
/// verifies (`[signing] trusted_keys` and our own key).
pub async fn sign_keeping(
    registry: &Registry,
    image: &ImageRef,
    subject: &Descriptor,
    signer: &Signer,
    keep: &[Verifier],
    provenance: Option<&Provenance>,
    created: DateTime<Utc>,
) -> Result<Signed, SignError> {
    // Boxed here, once: the three writes' futures would otherwise grow every caller's (a debug
    // build's rebase future overflowed a test thread's stack).
    Box::pin(sign_all(registry, image, subject, signer, keep, provenance, created)).await
}

async fn sign_all(
    registry: &Registry,
    image: &ImageRef,
    subject: &Descriptor,
    signer: &Signer,
    keep: &[Verifier],
    provenance: Option<&Provenance>,
    created: DateTime<Utc>,
) -> Result<Signed, SignError> {
    let digest = subject.digest.as_str();
    let repository = format!("{}/{}", image.registry(), image.repository());
    let Some((layer, payload)) = signature_layer(signer, &repository, digest) else {
        return Err(SignError::Digest(digest.to_string()));
    };
    let to = Target { registry, image, digest, repository: &repository, keep };
    let statement = provenance
        .map(|provenance| Statement::new(&repository, digest, SLSA_PROVENANCE_V1, provenance.predicate()))
        .transpose()
        .map_err(|_| SignError::Digest(digest.to_string()))?;
    // What the write fixes, when it claims a fix: attested the same two ways, after the provenance.
    let openvex = provenance
        .and_then(|provenance| provenance.openvex.clone())
        .map(|document| Statement::new(&repository, digest, OPENVEX_PREDICATE_TYPE, document))
        .transpose()
        .map_err(|_| SignError::Digest(digest.to_string()))?;
    // The signature's bundle and, when attesting, the attestations': one referrers index update.
    let mut referrers = vec![Referrer::new(signer, subject, created).map_err(BundleError::from)?];
    for statement in statement.iter().chain(&openvex) {
        referrers.push(Referrer::attestation(signer, subject, statement, created).map_err(BundleError::from)?);
    }
    // The three are independent: written together, all before the caller moves any tag.
    let signature = to.append(Attachment::Signature, layer, payload);
    // Boxed: the bundles' concurrent uploads make a large future.
    let bundles = async { Ok(Box::pin(write_referrers(registry, image, subject, &referrers)).await?) };
    let attestation = async {
        let Some(statement) = &statement else { return Ok(None) };
        let (layer, blob) = attestation_layer(&Envelope::statement(signer, statement), SLSA_PROVENANCE_V1);
        let slsa = to.append(Attachment::Attestation, layer, blob).await?;
        let Some(vex) = &openvex else { return Ok(Some(slsa)) };
        // A second layer of the same `.att`, appended after the first has been written.
        let (layer, blob) = attestation_layer(&Envelope::statement(signer, vex), OPENVEX_PREDICATE_TYPE);
        let (att, replaced) = to.append(Attachment::Attestation, layer, blob).await?;
        Ok(Some((att, slsa.1.or(replaced))))
    };
    let ((signature, sig_replaced), (), attestation) = futures::try_join!(signature, bundles, attestation)?;
    let (attestation, att_replaced) = attestation.unzip();
    let replaced = sig_replaced.into_iter().chain(att_replaced.flatten()).collect();
    let mut bundles = referrers.iter().map(|r| r.digest().to_string());
    Ok(Signed {
        digest: digest.to_string(),
        signature,
        bundle: bundles.next(),
        attestation,
        attestation_bundle: bundles.next(),
        openvex_bundle: bundles.next(),
        replaced,
    })
}

/// Where one digest's attachments go, and whose layers a replaced one keeps.
struct Target<'a> {
    registry: &'a Registry,
    image: &'a ImageRef,
    digest: &'a str,
    /// `<registry>/<repository>`, as payloads name it.
    repository: &'a str,
    keep: &'a [Verifier],
}

/// An attachment manifest under its tag, as read.
enum Found {
    Nothing,
    Read(Manifest),
    /// Over the bound we read, or not a manifest at all: why.
    Unreadable(String),
}

impl Target<'_> {
    fn failed(&self, source: RegistryError) -> SignError {
        SignError::Registry { digest: self.digest.to_string(), source }
    }

    /// Appends `layer` (its blob `blob`) to the digest's `attachment` manifest, unless it is there,
    /// or replaces a manifest that cannot take it; answers the manifest's digest and what was
    /// replaced.
    async fn append(
        &self,
        attachment: Attachment,
        layer: Layer,
        blob: Vec<u8>,
    ) -> Result<(String, Option<Replaced>), SignError> {
        let (registry, image) = (self.registry, self.image);
        let tag = attachment.tag(self.digest).ok_or_else(|| SignError::Digest(self.digest.to_string()))?;
        let found = match registry.get_manifest_within(image, &tag, MAX_SIGNATURE_BYTES).await {
            Ok(manifest) => Found::Read(manifest),
            Err(RegistryError::NotFound { .. }) => Found::Nothing,
            Err(RegistryError::InvalidResponse { detail, .. }) => Found::Unreadable(detail),
            Err(err) => return Err(self.failed(err)),
        };
        let (attached, replaced) = match found {
            Found::Nothing => (AttachedManifest::empty(), None),
            Found::Read(manifest) => match self.extensible(&tag, &manifest, &layer).await? {
                Ok(attached) if attached.contains(&layer) => return Ok((manifest.digest, None)),
                Ok(attached) => (attached, None),
                Err(why) => {
                    let kept = self.carried(attachment, carry_candidates(&manifest.bytes, attachment)).await?;
                    let carried = kept.len();
                    let replaced = Replaced { tag: tag.clone(), digest: Some(manifest.digest), why, carried };
                    (AttachedManifest::fresh(kept), Some(replaced))
                }
            },
            Found::Unreadable(why) => {
                (AttachedManifest::empty(), Some(Replaced { tag: tag.clone(), digest: None, why, carried: 0 }))
            }
        };
        if let Some(replaced) = &replaced {
            tracing::warn!(image = %image, tag = %replaced.tag, planted = replaced.digest.as_deref().unwrap_or("unreadable"), why = %replaced.why, carried = replaced.carried, "a signature manifest that could not take our layer is replaced by a fresh one");
        }
        // Our own earlier layer may be among those carried: never twice.
        let (config, manifest) =
            if attached.contains(&layer) { attached.documents() } else { attached.with_layer(layer) };
        // The layer's blob and the config at once: the manifest needs both.
        let blobs =
            futures::future::try_join(registry.put_blob(image, blob.into()), registry.put_blob(image, config.into()));
        Box::pin(blobs).await.map_err(|e| self.failed(e))?;
        let written = registry.put_manifest(image, &tag, &attached.media_type, manifest.into()).await;
        Ok((written.map_err(|e| self.failed(e))?, replaced))
    }

    /// `manifest` (under `tag`) read as one our layer can be appended to, or why it cannot: not an
    /// image manifest, no room, or a layer whose blob the repository no longer has (the registry
    /// would refuse the manifest naming it).
    async fn extensible(
        &self,
        tag: &str,
        manifest: &Manifest,
        layer: &Layer,
    ) -> Result<Result<AttachedManifest, String>, SignError> {
        let attached = match AttachedManifest::parse(tag, &manifest.bytes) {
            Ok(attached) => attached,
            Err(err @ (AttachedError::Malformed { .. } | AttachedError::TooManyLayers { .. })) => {
                return Ok(Err(err.to_string()));
            }
        };
        if let Some(why) = attached.not_extensible(layer) {
            return Ok(Err(why));
        }
        if attached.contains(layer) {
            return Ok(Ok(attached));
        }
        for existing in &attached.layers {
            if !self.registry.blob_exists(self.image, &existing.digest).await.map_err(|e| self.failed(e))? {
                return Ok(Err(format!("its layer {} is not in the repository", existing.digest)));
            }
        }
        Ok(Ok(attached))
    }

    /// Of `candidates` (a replaced manifest's layers), those whose blobs are still there and that
    /// one of the kept keys verifies, read within [`MAX_CARRIED_BYTES`] together.
    async fn carried(&self, attachment: Attachment, candidates: Vec<Layer>) -> Result<Vec<Layer>, SignError> {
        let mut budget = MAX_CARRIED_BYTES;
        let mut kept = Vec::new();
        for layer in candidates {
            if layer.size > budget as u64 {
                continue;
            }
            let blob = match self.registry.get_blob(self.image, &layer.digest, budget).await {
                Ok(blob) => blob,
                Err(RegistryError::NotFound { .. } | RegistryError::InvalidResponse { .. }) => continue,
                Err(err) => return Err(self.failed(err)),
            };
            budget = budget.saturating_sub(blob.len());
            let verifies =
                |key: &Verifier| carried_layer_verifies(attachment, &layer, &blob, self.digest, self.repository, key);
            if self.keep.iter().any(verifies) {
                kept.push(layer);
            }
        }
        Ok(kept)
    }
}
