//! Reading back what we attached to a digest, to find and remove what no tag needs any more: the
//! tags cosign's forms and the referrers tag schema use (`sha256-<hex>.sig`, `.att`,
//! `sha256-<hex>`) read as the digest they belong to, a referrer manifest read as a Sigstore
//! bundle's, and whether a bundle is a signature by a given key about a given digest. Pure: listing
//! and deleting are the caller's.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use super::bundle::{BUNDLE_MEDIA_TYPE, MAX_REFERRERS};
use super::key::Verifier;
use super::payload::pae;
use crate::reference::is_sha256_digest;

/// What a tag of the `sha256-<hex>…` family holds for the digest `sha256:<hex>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AttachmentTag {
    /// `sha256-<hex>.sig`: cosign's signatures.
    Signature,
    /// `sha256-<hex>.att`: cosign's attestations.
    Attestation,
    /// `sha256-<hex>`: the referrers tag schema's index.
    ReferrersIndex,
    /// `sha256-<hex>.<other>` (`.sbom`, …): someone else's attachment, never ours.
    Other,
}

/// The kind of `tag` and the digest it belongs to; `None` for an ordinary tag.
pub fn attachment_tag(tag: &str) -> Option<(AttachmentTag, String)> {
    let rest = tag.strip_prefix("sha256-")?;
    let (hex, suffix) = match rest.split_once('.') {
        Some((hex, suffix)) => (hex, Some(suffix)),
        None => (rest, None),
    };
    let digest = format!("sha256:{hex}");
    if !is_sha256_digest(&digest) || hex.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let kind = match suffix {
        None => AttachmentTag::ReferrersIndex,
        Some("sig") => AttachmentTag::Signature,
        Some("att") => AttachmentTag::Attestation,
        Some(_) => AttachmentTag::Other,
    };
    Some((kind, digest))
}

/// The digests an image index lists (`manifests[].digest`), at most [`MAX_REFERRERS`] of them;
/// `None` when `bytes` is not an index.
pub fn index_digests(bytes: &[u8]) -> Option<Vec<String>> {
    #[derive(Deserialize)]
    struct Index {
        manifests: Vec<Entry>,
    }
    #[derive(Deserialize)]
    struct Entry {
        digest: String,
    }
    let index: Index = serde_json::from_slice(bytes).ok()?;
    if index.manifests.len() > MAX_REFERRERS {
        return None;
    }
    Some(index.manifests.into_iter().map(|e| e.digest).filter(|d| is_sha256_digest(d)).collect())
}

/// The bundle layer of a referrer manifest (its digest and size) when the manifest is a Sigstore
/// bundle's referrer of `subject`: artifact type the bundle type, one bundle layer, that subject.
pub fn bundle_layer(manifest: &[u8], subject: &str) -> Option<(String, u64)> {
    #[derive(Deserialize)]
    struct Manifest {
        #[serde(rename = "artifactType", default)]
        artifact_type: Option<String>,
        config: Option<Blob>,
        layers: Vec<Blob>,
        subject: Option<Blob>,
    }
    #[derive(Deserialize)]
    struct Blob {
        #[serde(rename = "mediaType")]
        media_type: String,
        digest: String,
        size: u64,
        #[serde(rename = "artifactType", default)]
        artifact_type: Option<String>,
    }
    let manifest: Manifest = serde_json::from_slice(manifest).ok()?;
    let config_type = manifest.config.as_ref().and_then(|c| c.artifact_type.as_deref().or(Some(&c.media_type)));
    let typed = manifest.artifact_type.as_deref() == Some(BUNDLE_MEDIA_TYPE) || config_type == Some(BUNDLE_MEDIA_TYPE);
    let [layer] = manifest.layers.as_slice() else { return None };
    let about = manifest.subject.as_ref().is_some_and(|s| s.digest == subject);
    (typed && about && layer.media_type == BUNDLE_MEDIA_TYPE && is_sha256_digest(&layer.digest))
        .then(|| (layer.digest.clone(), layer.size))
}

/// Whether `bundle` (a Sigstore bundle's JSON) holds a DSSE envelope that `verifier`'s key signed
/// over its PAE and whose in-toto Statement is about `digest`: a signature or an attestation of
/// that digest by that key. Anything else (another key, another digest, a message signature, not
/// a bundle) is not.
pub fn bundle_signs(bundle: &[u8], digest: &str, verifier: &Verifier) -> bool {
    #[derive(Deserialize)]
    struct Bundle {
        #[serde(rename = "dsseEnvelope")]
        dsse_envelope: Envelope,
    }
    #[derive(Deserialize)]
    struct Envelope {
        payload: String,
        #[serde(rename = "payloadType")]
        payload_type: String,
        signatures: Vec<Signature>,
    }
    #[derive(Deserialize)]
    struct Signature {
        sig: String,
    }
    let Ok(Bundle { dsse_envelope: envelope }) = serde_json::from_slice(bundle) else { return false };
    let Ok(payload) = STANDARD.decode(&envelope.payload) else { return false };
    // Read loosely: cosign's sign Statement has subjects without a name.
    let Ok(statement) = serde_json::from_slice::<serde_json::Value>(&payload) else { return false };
    let hex = digest.strip_prefix("sha256:").unwrap_or_default();
    let subjects = statement.get("subject").and_then(|s| s.as_array()).map(Vec::as_slice).unwrap_or_default();
    if !subjects.iter().any(|s| s.pointer("/digest/sha256").and_then(|h| h.as_str()) == Some(hex)) {
        return false;
    }
    let signed = pae(&envelope.payload_type, &payload);
    envelope.signatures.iter().any(|s| STANDARD.decode(&s.sig).is_ok_and(|sig| verifier.verify(&signed, &sig)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::{Descriptor, Referrer, Signer};
    use chrono::{TimeZone, Utc};

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const OTHER: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn signer(seed: u8) -> Signer {
        use p256::pkcs8::EncodePrivateKey;
        use p256::pkcs8::der::pem::{LineEnding, encode_string};
        let der = p256::SecretKey::from_slice(&[seed; 32]).unwrap().to_pkcs8_der().unwrap();
        let pem = encode_string("PRIVATE KEY", LineEnding::LF, der.as_bytes()).unwrap();
        Signer::from_pem(pem.as_bytes(), None).unwrap()
    }

    #[test]
    fn attachment_tags_name_their_digest_and_ordinary_tags_none() {
        let hex = DIGEST.strip_prefix("sha256:").unwrap();
        assert_eq!(attachment_tag(&format!("sha256-{hex}.sig")), Some((AttachmentTag::Signature, DIGEST.into())));
        assert_eq!(attachment_tag(&format!("sha256-{hex}.att")), Some((AttachmentTag::Attestation, DIGEST.into())));
        assert_eq!(attachment_tag(&format!("sha256-{hex}")), Some((AttachmentTag::ReferrersIndex, DIGEST.into())));
        assert_eq!(attachment_tag(&format!("sha256-{hex}.sbom")), Some((AttachmentTag::Other, DIGEST.into())));
        for ordinary in ["latest", "sha256-abc.sig", "sha256-", &format!("sha256-{}.sig", hex.to_uppercase())] {
            assert_eq!(attachment_tag(ordinary), None, "{ordinary}");
        }
    }

    #[test]
    fn a_bundle_is_ours_only_for_our_key_and_its_digest() {
        let (ours, theirs) = (signer(7), signer(9));
        let subject = Descriptor::of("application/vnd.oci.image.manifest.v1+json", b"image");
        let created = Utc.with_ymd_and_hms(2026, 5, 1, 12, 0, 0).unwrap();
        let referrer = Referrer::new(&ours, &subject, created).unwrap();
        assert!(bundle_signs(&referrer.bundle, &subject.digest, &ours.verifier()));
        assert!(!bundle_signs(&referrer.bundle, &subject.digest, &theirs.verifier()), "another key");
        assert!(!bundle_signs(&referrer.bundle, OTHER, &ours.verifier()), "another digest");
        assert!(!bundle_signs(b"{}", &subject.digest, &ours.verifier()));
        let layer = bundle_layer(&referrer.manifest, &subject.digest).expect("a bundle referrer");
        assert_eq!(layer, (sha256(&referrer.bundle), referrer.bundle.len() as u64));
        assert_eq!(bundle_layer(&referrer.manifest, OTHER), None, "a referrer of another digest");
        assert_eq!(bundle_layer(b"{\"layers\":[]}", &subject.digest), None);
    }

    #[test]
    fn index_digests_are_read_within_bounds() {
        let index = format!(r#"{{"schemaVersion":2,"manifests":[{{"digest":"{DIGEST}"}},{{"digest":"nope"}}]}}"#);
        assert_eq!(index_digests(index.as_bytes()), Some(vec![DIGEST.to_string()]));
        assert_eq!(index_digests(b"{}"), None);
        let many: Vec<String> = (0..=MAX_REFERRERS).map(|_| format!(r#"{{"digest":"{DIGEST}"}}"#)).collect();
        assert_eq!(index_digests(format!(r#"{{"manifests":[{}]}}"#, many.join(",")).as_bytes()), None);
    }

    fn sha256(bytes: &[u8]) -> String {
        use sha2::{Digest, Sha256};
        format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
    }
}
