//! The manifests cosign attaches to a digest by tag (`sha256-<hex>.sig`, `sha256-<hex>.att`):
//! read within bounds, searched for a valid layer of one key, and extended by one layer while
//! keeping every other signer's. Pure: the registry reads and writes are the caller's.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use super::key::{Signer, Verifier};
use super::payload::{Envelope, simple_signing_payload};
use crate::reference::is_sha256_digest;

/// A simple-signing layer of a `.sig` manifest.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// A DSSE envelope layer of a `.att` manifest.
pub const DSSE_MEDIA_TYPE: &str = "application/vnd.dsse.envelope.v1+json";
/// The annotation holding a `.sig` layer's signature (base64 of the DER ECDSA signature).
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The annotation naming an `.att` layer's predicate type.
pub const PREDICATE_TYPE_ANNOTATION: &str = "predicateType";
/// The config media type of the manifests cosign writes.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// Signature layers read per digest at most: more is refused, not searched.
pub const MAX_SIGNATURE_LAYERS: usize = 16;
/// Bytes of signature manifests and payloads read per digest at most.
pub const MAX_SIGNATURE_BYTES: usize = 1 << 20;

/// Which attached manifest: the signatures or the attestations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attachment {
    Signature,
    Attestation,
}

impl Attachment {
    /// The tag holding this attachment of `digest` (`sha256:<hex>` → `sha256-<hex>.sig`).
    pub fn tag(self, digest: &str) -> Option<String> {
        let hex = digest.strip_prefix("sha256:").filter(|_| is_sha256_digest(digest))?;
        Some(match self {
            Attachment::Signature => format!("sha256-{hex}.sig"),
            Attachment::Attestation => format!("sha256-{hex}.att"),
        })
    }
}

/// An attached manifest that cannot be read as one, or is over the bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttachedError {
    #[error("{tag} is not an image manifest: {why}")]
    Malformed { tag: String, why: String },
    #[error("{tag} has {layers} layers, over the {MAX_SIGNATURE_LAYERS} read per digest")]
    TooManyLayers { tag: String, layers: usize },
}

/// One layer descriptor, with whatever else its writer put in it kept as it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Layer {
    #[serde(rename = "mediaType")]
    pub media_type: String,
    pub size: u64,
    pub digest: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(flatten)]
    pub rest: BTreeMap<String, serde_json::Value>,
}

/// A `.sig` or `.att` manifest as read: its layers, and the rest of it as it was.
#[derive(Debug, Clone, PartialEq)]
pub struct AttachedManifest {
    pub media_type: String,
    pub layers: Vec<Layer>,
    rest: serde_json::Map<String, serde_json::Value>,
}

impl AttachedManifest {
    /// Reads the manifest under `tag`; more than [`MAX_SIGNATURE_LAYERS`] layers is refused.
    pub fn parse(tag: &str, bytes: &[u8]) -> Result<Self, AttachedError> {
        let bad = |why: String| AttachedError::Malformed { tag: tag.to_string(), why };
        let mut doc: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        let layers = doc.remove("layers").unwrap_or(serde_json::Value::Array(Vec::new()));
        let count = layers.as_array().map(Vec::len).ok_or_else(|| bad("its layers are not a list".into()))?;
        if count > MAX_SIGNATURE_LAYERS {
            return Err(AttachedError::TooManyLayers { tag: tag.to_string(), layers: count });
        }
        let layers: Vec<Layer> = serde_json::from_value(layers).map_err(|e| bad(format!("a layer: {e}")))?;
        let media_type = doc.get("mediaType").and_then(|m| m.as_str()).unwrap_or(OCI_MANIFEST).to_string();
        Ok(Self { media_type, layers, rest: doc })
    }

    /// A manifest with no layer yet (none was under the tag).
    pub fn empty() -> Self {
        Self::fresh(Vec::new())
    }

    /// A new OCI image manifest of `layers` (carried over from one that could not be extended),
    /// nothing else of the old one kept.
    pub fn fresh(layers: Vec<Layer>) -> Self {
        Self { media_type: OCI_MANIFEST.to_string(), layers, rest: serde_json::Map::new() }
    }

    /// Why `layer` cannot be appended to this manifest as it is (it must be replaced by a fresh
    /// one, [`super::replace`]): not an OCI image manifest (an index, a Docker v2 manifest, which
    /// must not get an OCI config), or one layer short of the bound no longer. `None`: it can be.
    pub fn not_extensible(&self, layer: &Layer) -> Option<String> {
        if self.media_type != OCI_MANIFEST || self.rest.contains_key("manifests") {
            let media_type = crate::text::clip(&self.media_type, 120);
            return Some(format!("it is {}, not an OCI image manifest", crate::text::escape(&media_type)));
        }
        if self.layers.len() >= MAX_SIGNATURE_LAYERS && !self.contains(layer) {
            return Some(format!(
                "it has {} layers: one more is over the {MAX_SIGNATURE_LAYERS} verifiers read",
                self.layers.len()
            ));
        }
        None
    }

    /// Whether `layer` is here already: the same content, as a retry writes it.
    pub fn contains(&self, layer: &Layer) -> bool {
        self.layers.iter().any(|l| l.digest == layer.digest && l.annotations == layer.annotations)
    }

    /// The config this manifest's layers need (as go-containerregistry writes for cosign: the
    /// layers' digests as diff ids, they are not compressed), and the manifest naming it, with
    /// `layer` appended after every layer already there.
    pub fn with_layer(&self, layer: Layer) -> (Vec<u8>, Vec<u8>) {
        let mut with = self.clone();
        with.layers.push(layer);
        with.documents()
    }

    /// The config and the manifest of this manifest's layers as they are.
    pub fn documents(&self) -> (Vec<u8>, Vec<u8>) {
        let layers = &self.layers;
        let config = serde_json::json!({
            "architecture": "",
            "config": {},
            "created": "0001-01-01T00:00:00Z",
            "history": layers.iter().map(|_| serde_json::json!({"created": "0001-01-01T00:00:00Z"})).collect::<Vec<_>>(),
            "os": "",
            "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| l.digest.clone()).collect::<Vec<_>>()},
        });
        let config = serde_json::to_vec(&config).expect("JSON serialises");
        let mut doc = self.rest.clone();
        doc.insert("schemaVersion".into(), 2.into());
        doc.insert("mediaType".into(), self.media_type.clone().into());
        doc.insert(
            "config".into(),
            serde_json::json!({
                "mediaType": CONFIG_MEDIA_TYPE,
                "size": config.len(),
                "digest": sha256(&config),
            }),
        );
        doc.insert("layers".into(), serde_json::to_value(layers).expect("layers serialise"));
        (config, serde_json::to_vec(&doc).expect("JSON serialises"))
    }
}

/// A `.sig` layer signing `digest` for `docker_reference`, and its payload blob.
pub fn signature_layer(signer: &Signer, docker_reference: &str, digest: &str) -> Option<(Layer, Vec<u8>)> {
    let payload = simple_signing_payload(docker_reference, digest).ok()?;
    let signature = STANDARD.encode(signer.sign(&payload));
    let layer = Layer {
        media_type: SIMPLE_SIGNING_MEDIA_TYPE.to_string(),
        size: payload.len() as u64,
        digest: sha256(&payload),
        annotations: BTreeMap::from([(SIGNATURE_ANNOTATION.to_string(), signature)]),
        rest: BTreeMap::new(),
    };
    Some((layer, payload))
}

/// An `.att` layer holding `envelope`, and its blob. It carries cosign's signature annotation
/// empty, as cosign writes every attestation layer: readers of the tag form (cosign's tags-only
/// path, Kyverno's default) refuse a layer without it ("missing dev.cosignproject.cosign/signature
/// annotation"); the signature itself is inside the envelope.
pub fn attestation_layer(envelope: &Envelope, predicate_type: &str) -> (Layer, Vec<u8>) {
    let blob = envelope.to_json();
    let layer = Layer {
        media_type: DSSE_MEDIA_TYPE.to_string(),
        size: blob.len() as u64,
        digest: sha256(&blob),
        annotations: BTreeMap::from([
            (PREDICATE_TYPE_ANNOTATION.to_string(), predicate_type.to_string()),
            (SIGNATURE_ANNOTATION.to_string(), String::new()),
        ]),
        rest: BTreeMap::new(),
    };
    (layer, blob)
}

/// Whether a `.sig` layer's `payload` (its blob, read) signs `digest` in `repository`
/// (`<registry>/<repository>`) with `verifier`'s key: the annotation's signature verifies over the
/// payload, and the payload names the digest and that repository (`docker-reference`): a
/// signature made for one repository is no signature of the same digest in another.
pub fn layer_signs(layer: &Layer, payload: &[u8], digest: &str, repository: &str, verifier: &Verifier) -> bool {
    let Some(signature) = layer.annotations.get(SIGNATURE_ANNOTATION) else { return false };
    let Ok(der) = STANDARD.decode(signature) else { return false };
    let Some((signed, reference)) = signed_claims(payload) else { return false };
    verifier.verify(payload, &der) && signed == digest && same_repository(&reference, repository)
}

/// The digest a simple-signing payload binds (`critical.image.docker-manifest-digest`).
pub fn signed_digest(payload: &[u8]) -> Option<String> {
    signed_claims(payload).map(|(digest, _)| digest)
}

/// The digest and the repository a simple-signing payload binds (`critical.image.
/// docker-manifest-digest`, `critical.identity.docker-reference`).
fn signed_claims(payload: &[u8]) -> Option<(String, String)> {
    let doc: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let critical = doc.get("critical")?;
    if critical.get("type")?.as_str()? != "cosign container image signature" {
        return None;
    }
    let digest = critical.get("image")?.get("docker-manifest-digest")?.as_str()?.to_string();
    let reference = critical.get("identity")?.get("docker-reference")?.as_str()?.to_string();
    Some((digest, reference))
}

/// Whether two `<registry>/<repository>` names are one repository: Docker Hub's three host names
/// are one registry (cosign writes `index.docker.io/…`), and a name's case is not its own.
fn same_repository(a: &str, b: &str) -> bool {
    fn normal(name: &str) -> String {
        let name = name.to_ascii_lowercase();
        for alias in ["index.docker.io/", "registry-1.docker.io/"] {
            if let Some(rest) = name.strip_prefix(alias) {
                return format!("docker.io/{rest}");
            }
        }
        name
    }
    normal(a) == normal(b)
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

#[cfg(test)]
mod repository_tests {
    use super::same_repository;

    #[test]
    fn docker_hubs_names_are_one_registry_and_other_names_differ() {
        assert!(same_repository("index.docker.io/library/web", "docker.io/library/web"));
        assert!(same_repository("registry-1.docker.io/acme/web", "docker.io/acme/web"));
        assert!(same_repository("R.example/Apps/web", "r.example/apps/web"));
        assert!(!same_repository("r.example/apps/web", "r.example/apps/other"));
        assert!(!same_repository("r.example/apps/web", "s.example/apps/web"));
        assert!(!same_repository("r.example/apps/web", "r.example/apps/web/sub"));
    }
}
