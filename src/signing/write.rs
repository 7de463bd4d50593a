//! Signing a digest we wrote: a simple-signing layer appended to its `.sig` manifest, the same
//! signature as a Sigstore bundle referrer ([`super::bundle`]) and, when attesting, a DSSE layer
//! with SLSA provenance appended to its `.att`. Each append reads what is there,
//! keeps every layer another signer put there, and writes nothing when our layer is there
//! already: the same key signs the same payload to the same bytes (RFC 6979), so a retry after a
//! crash finds its own layer instead of adding a second.

use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::signing::{
    AttachedError, AttachedManifest, Attachment, Descriptor, Envelope, Layer, MAX_SIGNATURE_BYTES, Provenance,
    SLSA_PROVENANCE_V1, Signer, Statement, attestation_layer, signature_layer,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::bundle::{BundleError, write_bundle_referrer};
use crate::registry::{Registry, RegistryError};

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
    }
}

/// Signs `subject` (a manifest in `image`'s repository) with `signer` in both forms, and attests
/// `provenance` when given. `created` dates the bundle's referrer: the action's planning time, so
/// every attempt writes the same bytes.
pub async fn sign(
    registry: &Registry,
    image: &ImageRef,
    subject: &Descriptor,
    signer: &Signer,
    provenance: Option<&Provenance>,
    created: DateTime<Utc>,
) -> Result<Signed, SignError> {
    // Boxed here, once: the three writes' futures would otherwise grow every caller's (a debug
    // build's rebase future overflowed a test thread's stack).
    Box::pin(sign_all(registry, image, subject, signer, provenance, created)).await
}

async fn sign_all(
    registry: &Registry,
    image: &ImageRef,
    subject: &Descriptor,
    signer: &Signer,
    provenance: Option<&Provenance>,
    created: DateTime<Utc>,
) -> Result<Signed, SignError> {
    let digest = subject.digest.as_str();
    let repository = format!("{}/{}", image.registry(), image.repository());
    let Some((layer, payload)) = signature_layer(signer, &repository, digest) else {
        return Err(SignError::Digest(digest.to_string()));
    };
    // The three are independent: written together, all before the caller moves any tag.
    let signature = append(registry, image, digest, Attachment::Signature, layer, payload);
    let bundle = async { Ok(write_bundle_referrer(registry, image, subject, signer, created).await?) };
    let attestation = async {
        let Some(provenance) = provenance else { return Ok(None) };
        let statement = Statement::new(&repository, digest, SLSA_PROVENANCE_V1, provenance.predicate())
            .map_err(|_| SignError::Digest(digest.to_string()))?;
        let (layer, blob) = attestation_layer(&Envelope::statement(signer, &statement), SLSA_PROVENANCE_V1);
        append(registry, image, digest, Attachment::Attestation, layer, blob).await.map(Some)
    };
    let (signature, bundle, attestation) = futures::try_join!(signature, bundle, attestation)?;
    Ok(Signed { digest: digest.to_string(), signature, bundle: Some(bundle), attestation })
}

/// Appends `layer` (its blob `blob`) to `digest`'s `attachment` manifest, unless it is there;
/// returns that manifest's digest.
async fn append(
    registry: &Registry,
    image: &ImageRef,
    digest: &str,
    attachment: Attachment,
    layer: Layer,
    blob: Vec<u8>,
) -> Result<String, SignError> {
    let tag = attachment.tag(digest).ok_or_else(|| SignError::Digest(digest.to_string()))?;
    let failed = |source| SignError::Registry { digest: digest.to_string(), source };
    let existing = match registry.get_manifest_within(image, &tag, MAX_SIGNATURE_BYTES).await {
        Ok(manifest) => Some(manifest),
        Err(RegistryError::NotFound { .. }) => None,
        Err(err) => return Err(failed(err)),
    };
    let attached = match &existing {
        Some(manifest) => AttachedManifest::parse(&tag, &manifest.bytes)
            .map_err(|source| SignError::Attached { digest: digest.to_string(), source })?,
        None => AttachedManifest::empty(),
    };
    if let Some(manifest) = existing.filter(|_| attached.contains(&layer)) {
        return Ok(manifest.digest);
    }
    let (config, manifest) = attached.with_layer(layer);
    registry.put_blob(image, blob.into()).await.map_err(failed)?;
    registry.put_blob(image, config.into()).await.map_err(failed)?;
    registry.put_manifest(image, &tag, &attached.media_type, manifest.into()).await.map_err(failed)
}
