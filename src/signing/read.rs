//! Whether a digest carries a valid signature by one of the trusted keys: its `.sig` manifest and
//! the payloads of its simple-signing layers, read within [`MAX_SIGNATURE_BYTES`] and
//! [`MAX_SIGNATURE_LAYERS`], each payload naming that digest in this repository. A hostile `.sig` (huge, malformed, too many layers) is a verdict
//! with its reason, never an error that would be retried.

use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::signing::{
    AttachedManifest, Attachment, MAX_SIGNATURE_BYTES, MAX_SIGNATURE_LAYERS, SIMPLE_SIGNING_MEDIA_TYPE, Verifier,
    layer_signs,
};
use serde::Serialize;

use crate::registry::{Registry, RegistryError};

/// A public key a digest may be signed by, and how the user named it.
#[derive(Debug, Clone)]
pub struct TrustedKey {
    /// The key's file, or `own key` for `[signing]`'s key.
    pub name: String,
    pub verifier: Verifier,
}

impl TrustedKey {
    /// `[signing]`'s own key, as verifications name it.
    pub fn own(signer: &builder_monitor_core::signing::Signer) -> Self {
        TrustedKey { name: "own key".to_string(), verifier: signer.verifier() }
    }
}

/// The keys `[signing]` trusts: `trusted_keys`, then its own key, `own`, when it was decrypted
/// (a digest we signed is ours).
pub fn trusted(
    settings: &crate::config::SigningSettings,
    own: Option<&builder_monitor_core::signing::Signer>,
) -> Vec<TrustedKey> {
    let listed = settings
        .trusted_keys
        .iter()
        .map(|k| TrustedKey { name: k.path.display().to_string(), verifier: k.verifier.clone() });
    let own = own.into_iter().map(TrustedKey::own);
    let mut keys: Vec<TrustedKey> = Vec::new();
    for key in listed.chain(own) {
        if keys.iter().all(|k| k.verifier != key.verifier) {
            keys.push(key);
        }
    }
    keys
}

/// What a digest's signatures say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// A layer verifies with `key_id` (named `key`).
    Signed { key_id: String, key: String },
    /// No signature at all: no `.sig` tag, or no simple-signing layer under it.
    Unsigned,
    /// Signatures, but none valid by a trusted key, or none readable within the bounds.
    Invalid { why: String },
}

impl Verdict {
    /// The refusal reason this verdict gives when a signature is required.
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            Verdict::Signed { .. } => None,
            Verdict::Unsigned => Some("unsigned"),
            Verdict::Invalid { .. } => Some("signature_invalid"),
        }
    }
}

/// Whether `digest` in `image`'s repository carries a valid signature by one of `keys`.
/// `Err` only when the registry could not be asked (worth another try).
pub async fn verify(
    registry: &Registry,
    image: &ImageRef,
    digest: &str,
    keys: &[TrustedKey],
) -> Result<Verdict, RegistryError> {
    let Some(tag) = Attachment::Signature.tag(digest) else {
        return Ok(Verdict::Invalid { why: format!("{digest} is not a sha256 digest") });
    };
    let manifest = match registry.get_manifest_within(image, &tag, MAX_SIGNATURE_BYTES).await {
        Ok(m) => m,
        Err(RegistryError::NotFound { .. }) => return Ok(Verdict::Unsigned),
        Err(RegistryError::InvalidResponse { detail, .. }) => {
            return Ok(Verdict::Invalid { why: format!("{tag}: {detail}") });
        }
        Err(err) => return Err(err),
    };
    let attached = match AttachedManifest::parse(&tag, &manifest.bytes) {
        Ok(a) => a,
        Err(err) => return Ok(Verdict::Invalid { why: err.to_string() }),
    };
    let repository = format!("{}/{}", image.registry(), image.repository());
    let mut budget = MAX_SIGNATURE_BYTES.saturating_sub(manifest.bytes.len());
    let mut signatures = 0;
    let mut unreadable = Vec::new();
    for layer in attached.layers.iter().filter(|l| l.media_type == SIMPLE_SIGNING_MEDIA_TYPE) {
        signatures += 1;
        if layer.size > budget as u64 {
            return Ok(Verdict::Invalid {
                why: format!(
                    "{tag}: its signature payloads are over the {} KiB read per digest",
                    MAX_SIGNATURE_BYTES >> 10
                ),
            });
        }
        let payload = match registry.get_blob(image, &layer.digest, budget).await {
            Ok(p) => p,
            Err(RegistryError::NotFound { .. } | RegistryError::InvalidResponse { .. }) => {
                unreadable.push(layer.digest.clone());
                continue;
            }
            Err(err) => return Err(err),
        };
        budget -= payload.len();
        if let Some(key) = keys.iter().find(|k| layer_signs(layer, &payload, digest, &repository, &k.verifier)) {
            return Ok(Verdict::Signed { key_id: key.verifier.key_id().to_string(), key: key.name.clone() });
        }
    }
    if signatures == 0 {
        return Ok(Verdict::Unsigned);
    }
    let tried: Vec<&str> = keys.iter().map(|k| k.name.as_str()).collect();
    let mut why = format!(
        "none of the {signatures} signatures of {digest} verifies with the trusted keys ({})",
        tried.join(", ")
    );
    if !unreadable.is_empty() {
        why.push_str(&format!("; {} payloads could not be read", unreadable.len()));
    }
    debug_assert!(signatures <= MAX_SIGNATURE_LAYERS);
    Ok(Verdict::Invalid { why })
}
