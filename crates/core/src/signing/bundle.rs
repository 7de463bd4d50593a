//! The Sigstore bundle form of an image signature, as cosign v3 writes it by default
//! (`cosign sign --key`, `--new-bundle-format` on): a bundle v0.3 holding a DSSE envelope around
//! an in-toto Statement whose subject is the image digest and whose predicate type is cosign's
//! `https://sigstore.dev/cosign/sign/v1` (empty predicate), stored as an OCI 1.1 referrer of the
//! image: a manifest with the bundle as its one layer and the image as its `subject`. Also the
//! referrers tag schema's index (`sha256-<hex>`) that lists referrers on registries without the
//! referrers API, updated without duplicates and within bounds. Bytes only: the caller writes them.
//!
//! Read in sigstore/cosign: `cmd/cosign/cli/sign/sign.go` (`signDigestBundle`: the Statement),
//! `pkg/cosign/bundle/sign.go` and sigstore-go `pkg/sign` (the bundle: `publicKey.hint`, no tlog
//! entries when none is used), `internal/key/svkeypair.go` (the hint: base64 of the SHA-256 of the
//! key's PKIX DER), `pkg/oci/remote/write.go` (`WriteAttestationNewBundleFormat`, `WriteReferrer`:
//! the manifest and its annotations); go-containerregistry `pkg/v1/remote/write.go` (the tag schema).

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::key::Signer;
use super::payload::{DSSE_PAYLOAD_TYPE, PayloadError, STATEMENT_TYPE, Statement, pae};
use crate::reference::is_sha256_digest;

/// A Sigstore bundle v0.3, the referrer's `artifactType` and its layer's media type.
pub const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The predicate type of cosign's image signature in the bundle form.
pub const COSIGN_SIGN_PREDICATE_TYPE: &str = "https://sigstore.dev/cosign/sign/v1";
/// OCI's empty descriptor: the referrer's config.
pub const OCI_EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
pub const OCI_EMPTY: &[u8] = b"{}";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Annotations cosign puts on the referrer manifest.
pub const ANNOTATION_CONTENT: &str = "dev.sigstore.bundle.content";
pub const ANNOTATION_PREDICATE_TYPE: &str = "dev.sigstore.bundle.predicateType";
pub const ANNOTATION_CREATED: &str = "org.opencontainers.image.created";
/// Bounds on a referrers tag index read back: larger ones are refused, not read on.
pub const MAX_REFERRERS_INDEX_BYTES: usize = 1 << 20;
pub const MAX_REFERRERS: usize = 1000;

/// An OCI content descriptor, fields in the order cosign (Go) writes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Descriptor {
    #[serde(rename = "mediaType")]
    pub media_type: String,
    pub size: u64,
    pub digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    #[serde(rename = "artifactType", default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
}

impl Descriptor {
    /// The descriptor of `bytes` as content of `media_type`.
    pub fn of(media_type: &str, bytes: &[u8]) -> Self {
        Self {
            media_type: media_type.to_string(),
            size: bytes.len() as u64,
            digest: sha256_digest(bytes),
            annotations: None,
            artifact_type: None,
        }
    }
}

/// The in-toto Statement cosign v3 signs for an image: the digest as the one subject (no name,
/// empty annotations), its sign predicate type, an empty predicate. cosign marshals it with
/// protojson, whose spacing is deliberately unstable; these are its fields in its order, compact.
pub fn sign_statement(digest: &str) -> Result<Vec<u8>, PayloadError> {
    #[derive(Serialize)]
    struct Statement<'a> {
        #[serde(rename = "_type")]
        statement_type: &'a str,
        subject: [Subject<'a>; 1],
        #[serde(rename = "predicateType")]
        predicate_type: &'a str,
        predicate: Map<String, Value>,
    }
    #[derive(Serialize)]
    struct Subject<'a> {
        digest: BTreeMap<&'a str, &'a str>,
        annotations: Map<String, Value>,
    }
    let statement = Statement {
        statement_type: STATEMENT_TYPE,
        subject: [Subject { digest: BTreeMap::from([("sha256", sha256_hex(digest)?)]), annotations: Map::new() }],
        predicate_type: COSIGN_SIGN_PREDICATE_TYPE,
        predicate: Map::new(),
    };
    Ok(serde_json::to_vec(&statement).expect("a statement serialises"))
}

/// cosign's (and sigstore-go's) public key hint: standard base64 of the SHA-256 of the key's PKIX
/// DER, the same hash [`Signer::key_id`] gives in hex.
pub fn public_key_hint(signer: &Signer) -> String {
    let hash = hex::decode(signer.key_id()).expect("a key id is hex");
    STANDARD.encode(hash)
}

/// The bundle (JSON) of `signer`'s signature over `digest` (`sha256:<hex>`), as cosign v3 writes it
/// for `cosign sign --key` without a transparency log: the DSSE envelope's one signature (over the
/// PAE, no key id) and the public key's hint; no tlog entries, no timestamps. Deterministic (RFC
/// 6979 signatures), so a retry makes the same bytes.
pub fn bundle(signer: &Signer, digest: &str) -> Result<Vec<u8>, PayloadError> {
    Ok(statement_bundle(signer, &sign_statement(digest)?))
}

/// The bundle (JSON) of `signer`'s DSSE signature over an in-toto Statement (its bytes), as cosign
/// v3 writes an attestation (`cosign attest --key`): the same shape as the image signature's
/// bundle, the Statement being the attestation's own. Its envelope is the one the `.att` layer
/// holds (same payload, and the same signature: RFC 6979).
pub fn statement_bundle(signer: &Signer, statement: &[u8]) -> Vec<u8> {
    let signature = signer.sign(&pae(DSSE_PAYLOAD_TYPE, statement));
    // Field order: protojson's, the bundle proto's declaration order.
    let bundle = Bundle {
        media_type: BUNDLE_MEDIA_TYPE,
        verification_material: VerificationMaterial { public_key: PublicKey { hint: public_key_hint(signer) } },
        dsse_envelope: DsseEnvelope {
            payload: STANDARD.encode(statement),
            payload_type: DSSE_PAYLOAD_TYPE,
            signatures: vec![DsseSignature { sig: STANDARD.encode(signature) }],
        },
    };
    serde_json::to_vec(&bundle).expect("a bundle serialises")
}

#[derive(Serialize)]
struct Bundle<'a> {
    #[serde(rename = "mediaType")]
    media_type: &'a str,
    #[serde(rename = "verificationMaterial")]
    verification_material: VerificationMaterial,
    #[serde(rename = "dsseEnvelope")]
    dsse_envelope: DsseEnvelope<'a>,
}

#[derive(Serialize)]
struct VerificationMaterial {
    #[serde(rename = "publicKey")]
    public_key: PublicKey,
}

#[derive(Serialize)]
struct PublicKey {
    hint: String,
}

#[derive(Serialize)]
struct DsseEnvelope<'a> {
    payload: String,
    #[serde(rename = "payloadType")]
    payload_type: &'a str,
    signatures: Vec<DsseSignature>,
}

#[derive(Serialize)]
struct DsseSignature {
    sig: String,
}

/// A bundle and the referrer manifest that attaches it to an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referrer {
    /// The bundle blob (the manifest's one layer).
    pub bundle: Vec<u8>,
    /// The referrer manifest (`application/vnd.oci.image.manifest.v1+json`), to PUT by digest.
    pub manifest: Vec<u8>,
    /// The manifest's descriptor as a referrers index lists it: with `artifactType` and the
    /// manifest's annotations.
    pub descriptor: Descriptor,
}

impl Referrer {
    /// `signer`'s bundle for the image `subject` (its media type, digest and size), in the referrer
    /// manifest cosign writes: config the OCI empty descriptor (with the artifact type, as cosign
    /// sets it), the bundle as the one layer, `subject`, `artifactType` and cosign's annotations.
    /// cosign stamps `org.opencontainers.image.created` with its clock; here it is `created`, so
    /// that a retry given the same time (the action's recorded one) writes the same manifest and
    /// not a second referrer.
    pub fn new(signer: &Signer, subject: &Descriptor, created: DateTime<Utc>) -> Result<Self, PayloadError> {
        let statement = sign_statement(&subject.digest)?;
        Self::of_statement(signer, subject, &statement, COSIGN_SIGN_PREDICATE_TYPE, created)
    }

    /// `signer`'s attestation of `statement` (an in-toto Statement about `subject`, e.g. SLSA
    /// provenance) as the bundle referrer cosign v3 writes for `cosign attest --key`: the same
    /// manifest as the signature's, the predicate type annotation the statement's. cosign v2.6
    /// and v3 both read attestations from here as soon as the digest has any bundle.
    pub fn attestation(
        signer: &Signer,
        subject: &Descriptor,
        statement: &Statement,
        created: DateTime<Utc>,
    ) -> Result<Self, PayloadError> {
        let hex = sha256_hex(&subject.digest)?;
        // A statement about another digest would attach a claim to the wrong image.
        if !statement.subject.iter().any(|s| s.digest.get("sha256").is_some_and(|h| h == hex)) {
            return Err(PayloadError::Digest(subject.digest.clone()));
        }
        Self::of_statement(signer, subject, &statement.to_json(), &statement.predicate_type, created)
    }

    fn of_statement(
        signer: &Signer,
        subject: &Descriptor,
        statement: &[u8],
        predicate_type: &str,
        created: DateTime<Utc>,
    ) -> Result<Self, PayloadError> {
        sha256_hex(&subject.digest)?;
        let bundle = statement_bundle(signer, statement);
        let annotations = BTreeMap::from([
            (ANNOTATION_CONTENT.to_string(), "dsse-envelope".to_string()),
            (ANNOTATION_PREDICATE_TYPE.to_string(), predicate_type.to_string()),
            // Go's time.RFC3339 of a UTC time: whole seconds, `Z`.
            (ANNOTATION_CREATED.to_string(), created.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
        ]);
        let config = Descriptor {
            artifact_type: Some(BUNDLE_MEDIA_TYPE.to_string()),
            ..Descriptor::of(OCI_EMPTY_MEDIA_TYPE, OCI_EMPTY)
        };
        let subject = Descriptor {
            media_type: subject.media_type.clone(),
            size: subject.size,
            digest: subject.digest.clone(),
            annotations: None,
            artifact_type: None,
        };
        let manifest = Manifest {
            schema_version: 2,
            media_type: OCI_MANIFEST,
            config,
            layers: vec![Descriptor::of(BUNDLE_MEDIA_TYPE, &bundle)],
            annotations: &annotations,
            subject,
            artifact_type: BUNDLE_MEDIA_TYPE,
        };
        let manifest = serde_json::to_vec(&manifest).expect("a manifest serialises");
        let descriptor = Descriptor {
            annotations: Some(annotations),
            artifact_type: Some(BUNDLE_MEDIA_TYPE.to_string()),
            ..Descriptor::of(OCI_MANIFEST, &manifest)
        };
        Ok(Self { bundle, manifest, descriptor })
    }

    /// The referrer manifest's digest.
    pub fn digest(&self) -> &str {
        &self.descriptor.digest
    }
}

/// go-containerregistry's `v1.Manifest` field order, then cosign's `artifactType`.
#[derive(Serialize)]
struct Manifest<'a> {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType")]
    media_type: &'a str,
    config: Descriptor,
    layers: Vec<Descriptor>,
    annotations: &'a BTreeMap<String, String>,
    subject: Descriptor,
    #[serde(rename = "artifactType")]
    artifact_type: &'a str,
}

/// The tag the referrers tag schema lists `digest`'s referrers under: `sha256-<hex>`.
pub fn referrers_tag(digest: &str) -> Result<String, PayloadError> {
    Ok(format!("sha256-{}", sha256_hex(digest)?))
}

/// A referrers tag index that cannot be updated safely.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error(
        "the referrers index is {0} bytes, over the {MAX_REFERRERS_INDEX_BYTES}-byte limit: delete stale referrers (or the tag) and retry"
    )]
    TooLarge(usize),
    #[error(
        "the referrers index lists {0} manifests, over the limit of {MAX_REFERRERS}: delete stale referrers (or the tag) and retry"
    )]
    TooMany(usize),
    #[error(
        "the referrers tag holds no OCI image index ({0}): delete that tag so it can be written as the referrers index"
    )]
    NotIndex(String),
}

/// `index` (the bytes at the referrers tag, `None` when the tag is absent) with `referrer` added:
/// `None` when it is listed already (a retry adds nothing). Every other entry and field is kept.
pub fn add_referrer(index: Option<&[u8]>, referrer: &Descriptor) -> Result<Option<Vec<u8>>, IndexError> {
    add_referrers(index, std::slice::from_ref(referrer))
}

/// [`add_referrer`] for several referrers at once (a digest's signature and attestation bundles):
/// one read and one write of the index instead of one per referrer, and no writer of the same
/// index racing another of ours. `None` when every one is listed already.
pub fn add_referrers(index: Option<&[u8]>, referrers: &[Descriptor]) -> Result<Option<Vec<u8>>, IndexError> {
    let (mut index, mut changed) = match index {
        None => {
            let fresh = json!({ "schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [] });
            (fresh.as_object().cloned().unwrap_or_default(), true)
        }
        Some(bytes) => (parse_index(bytes)?, false),
    };
    let Some(Value::Array(manifests)) = index.get_mut("manifests") else {
        return Err(IndexError::NotIndex("manifests is not a list".into()));
    };
    for referrer in referrers {
        if manifests.iter().any(|m| m.get("digest").and_then(Value::as_str) == Some(&referrer.digest)) {
            continue;
        }
        if manifests.len() >= MAX_REFERRERS {
            return Err(IndexError::TooMany(manifests.len() + 1));
        }
        manifests.push(serde_json::to_value(referrer).expect("a descriptor serialises"));
        changed = true;
    }
    if !changed {
        return Ok(None);
    }
    Ok(Some(serde_json::to_vec(&index).expect("an index serialises")))
}

/// A referrers tag index as read, checked to be one we can extend: an OCI index with a list of
/// manifests, within bounds.
fn parse_index(bytes: &[u8]) -> Result<Map<String, Value>, IndexError> {
    if bytes.len() > MAX_REFERRERS_INDEX_BYTES {
        return Err(IndexError::TooLarge(bytes.len()));
    }
    let mut index: Map<String, Value> =
        serde_json::from_slice(bytes).map_err(|e| IndexError::NotIndex(format!("not a JSON object: {e}")))?;
    if index.get("schemaVersion").and_then(Value::as_u64) != Some(2) {
        return Err(IndexError::NotIndex("schemaVersion is not 2".into()));
    }
    match index.get("mediaType").and_then(Value::as_str) {
        Some(OCI_INDEX) => {}
        Some(other) => return Err(IndexError::NotIndex(format!("mediaType {other}"))),
        None => return Err(IndexError::NotIndex("no mediaType".into())),
    }
    let manifests = index.entry("manifests").or_insert_with(|| Value::Array(Vec::new()));
    let Value::Array(manifests) = manifests else {
        return Err(IndexError::NotIndex("manifests is not a list".into()));
    };
    if manifests.len() > MAX_REFERRERS {
        return Err(IndexError::TooMany(manifests.len()));
    }
    Ok(index)
}

fn sha256_hex(digest: &str) -> Result<&str, PayloadError> {
    match digest.strip_prefix("sha256:") {
        Some(hex) if is_sha256_digest(digest) => Ok(hex),
        _ => Err(PayloadError::Digest(digest.to_string())),
    }
}

fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests;
